//! `bcrypt`, `htpasswd` and `derivePassword` (the Master Password algorithm: deterministic,
//! scrypt then HMAC-SHA256 over site and counter, mapped onto a password template).
//! Sprig reports their failures as the result text, so they do here too.

use aws_lc_rs::hmac;

use crate::budget::cost;
use crate::funcs::{Arity, FuncError, FuncResult, Funcs, expect_string, wrong_type};
use crate::value::Value;

/// Go's `bcrypt.DefaultCost`.
const BCRYPT_COST: u32 = 10;
/// bcrypt reads at most this many bytes; Go's x/crypto refuses longer passwords.
const BCRYPT_MAX_PASSWORD: usize = 72;

pub(super) fn register(funcs: &mut Funcs) {
    let bcrypt = |_: &[Value]| cost::BCRYPT;
    funcs.insert_costly("bcrypt", Arity::Exact(1), bcrypt, |a| {
        Ok(Value::String(bcrypt_text(expect_string(&a[0])?)))
    });
    funcs.insert_costly("htpasswd", Arity::Exact(2), bcrypt, htpasswd);
    funcs.insert_costly(
        "derivePassword",
        Arity::Exact(5),
        |_| cost::SCRYPT,
        derive_password,
    );
}

/// The hash in Go's `$2a$` form, or sprig's failure text.
fn bcrypt_text(password: &str) -> String {
    if password.len() > BCRYPT_MAX_PASSWORD {
        return "failed to encrypt string with bcrypt: bcrypt: password length exceeds 72 bytes"
            .into();
    }
    match bcrypt::hash_with_result(password, BCRYPT_COST) {
        Ok(parts) => parts.format_for_version(bcrypt::Version::TwoA),
        Err(e) => format!("failed to encrypt string with bcrypt: {e}"),
    }
}

fn htpasswd(args: &[Value]) -> FuncResult {
    let user = expect_string(&args[0])?;
    let password = expect_string(&args[1])?;
    if user.contains(':') {
        return Ok(Value::String(format!("invalid username: {user}")));
    }
    Ok(Value::String(format!("{user}:{}", bcrypt_text(password))))
}

const SEED: &str = "com.lyndir.masterpassword";

/// Master Password's templates for each password type.
fn templates(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "maximum" => &["anoxxxxxxxxxxxxxxxxx", "axxxxxxxxxxxxxxxxxno"],
        "long" => &[
            "CvcvnoCvcvCvcv",
            "CvcvCvcvnoCvcv",
            "CvcvCvcvCvcvno",
            "CvccnoCvcvCvcv",
            "CvccCvcvnoCvcv",
            "CvccCvcvCvcvno",
            "CvcvnoCvccCvcv",
            "CvcvCvccnoCvcv",
            "CvcvCvccCvcvno",
            "CvcvnoCvcvCvcc",
            "CvcvCvcvnoCvcc",
            "CvcvCvcvCvccno",
            "CvccnoCvccCvcv",
            "CvccCvccnoCvcv",
            "CvccCvccCvcvno",
            "CvcvnoCvccCvcc",
            "CvcvCvccnoCvcc",
            "CvcvCvccCvccno",
            "CvccnoCvcvCvcc",
            "CvccCvcvnoCvcc",
            "CvccCvcvCvccno",
        ],
        "medium" => &["CvcnoCvc", "CvcCvcno"],
        "short" => &["Cvcn"],
        "basic" => &["aaanaaan", "aannaaan", "aaannaaa"],
        "pin" => &["nnnn"],
        _ => return None,
    })
}

/// The characters each template letter draws from.
fn characters(class: u8) -> &'static [u8] {
    match class {
        b'V' => b"AEIOU",
        b'C' => b"BCDFGHJKLMNPQRSTVWXYZ",
        b'v' => b"aeiou",
        b'c' => b"bcdfghjklmnpqrstvwxyz",
        b'A' => b"AEIOUBCDFGHJKLMNPQRSTVWXYZ",
        b'a' => b"AEIOUaeiouBCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz",
        b'n' => b"0123456789",
        b'o' => b"@&%?,=[]_:-+*$#!'^~;()/.",
        _ => b"AEIOUaeiouBCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz0123456789!@#$%^&*()",
    }
}

/// `derivePassword counter type password user site`. The counter is a Go `uint32`.
fn derive_password(args: &[Value]) -> FuncResult {
    let counter = match &args[0] {
        Value::Int(i) => u32::try_from(*i)
            .map_err(|_| FuncError("derivePassword: counter out of range for uint32".into()))?,
        other => return Err(wrong_type("uint32", other)),
    };
    let kind = expect_string(&args[1])?;
    let password = expect_string(&args[2])?;
    let user = expect_string(&args[3])?;
    let site = expect_string(&args[4])?;
    let Some(templates) = templates(kind) else {
        return Ok(Value::String(format!(
            "cannot find password template {kind}"
        )));
    };
    let Some(key) = master_key(password, user) else {
        return Ok(Value::String("failed to derive password".into()));
    };

    let mut message = SEED.as_bytes().to_vec();
    message.extend_from_slice(&len_u32(site).to_be_bytes());
    message.extend_from_slice(site.as_bytes());
    message.extend_from_slice(&counter.to_be_bytes());
    let seed = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &key), &message);
    let seed = seed.as_ref();

    let template = templates[usize::from(seed[0]) % templates.len()];
    let password: String = template
        .bytes()
        .zip(&seed[1..])
        .map(|(class, s)| {
            let chars = characters(class);
            chars[usize::from(*s) % chars.len()] as char
        })
        .collect();
    Ok(Value::String(password))
}

/// Go writes the length as a uint32, which wraps for (absurdly) long strings.
fn len_u32(s: &str) -> u32 {
    s.len() as u32
}

/// scrypt(password, seed ‖ len(user) ‖ user) with N=32768, r=8, p=2, 64 bytes.
fn master_key(password: &str, user: &str) -> Option<[u8; 64]> {
    let mut salt = SEED.as_bytes().to_vec();
    salt.extend_from_slice(&len_u32(user).to_be_bytes());
    salt.extend_from_slice(user.as_bytes());
    let params = scrypt::Params::new(15, 8, 2, 64).ok()?;
    let mut key = [0u8; 64];
    scrypt::scrypt(password.as_bytes(), &salt, &params, &mut key).ok()?;
    Some(key)
}
