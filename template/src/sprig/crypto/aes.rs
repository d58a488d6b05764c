//! `encryptAES` and `decryptAES`, sprig's scheme: AES-256-CBC under the password's first 32
//! bytes (zero-padded), PKCS#7 padding, a random IV in front, all in standard base64.

use aws_lc_rs::cipher::{
    AES_256, DecryptingKey, DecryptionContext, EncryptingKey, UnboundCipherKey,
};
use aws_lc_rs::iv::FixedLength;

use crate::funcs::{Arity, FuncError, FuncResult, Funcs, expect_string};
use crate::sprig::encoding::{base64_decode, base64_encode};
use crate::value::Value;

const BLOCK: usize = 16;

pub(super) fn register(funcs: &mut Funcs) {
    funcs.insert("encryptAES", Arity::Exact(2), encrypt);
    funcs.insert("decryptAES", Arity::Exact(2), decrypt);
}

/// Sprig copies the password into a 32-byte key: longer ones are cut, shorter ones padded
/// with zeros.
fn key(password: &str) -> Result<UnboundCipherKey, FuncError> {
    let mut key = [0u8; 32];
    let n = password.len().min(32);
    key[..n].copy_from_slice(&password.as_bytes()[..n]);
    UnboundCipherKey::new(&AES_256, &key).map_err(|_| FuncError("cannot set up AES".into()))
}

fn encrypt(args: &[Value]) -> FuncResult {
    let password = expect_string(&args[0])?;
    let plaintext = expect_string(&args[1])?;
    if plaintext.is_empty() {
        return Ok(Value::String(String::new()));
    }
    let padding = BLOCK - plaintext.len() % BLOCK;
    let mut content = plaintext.as_bytes().to_vec();
    content.resize(content.len() + padding, padding as u8);
    let key =
        EncryptingKey::cbc(key(password)?).map_err(|_| FuncError("cannot set up AES".into()))?;
    let context = key
        .encrypt(&mut content)
        .map_err(|_| FuncError("AES encryption failed".into()))?;
    let iv: &[u8] = (&context)
        .try_into()
        .map_err(|_| FuncError("AES encryption failed".into()))?;
    let mut out = iv.to_vec();
    out.extend_from_slice(&content);
    Ok(Value::String(base64_encode(&out)))
}

/// Go's decryptAES panics on malformed input; here each case is an error with the panic's text.
/// Like sprig, the padding is trusted as it is and not checked.
fn decrypt(args: &[Value]) -> FuncResult {
    let password = expect_string(&args[0])?;
    let encoded = expect_string(&args[1])?;
    if encoded.is_empty() {
        return Ok(Value::String(String::new()));
    }
    let crypt = base64_decode(encoded.as_bytes()).map_err(FuncError)?;
    if crypt.len() < BLOCK {
        return Err(FuncError(format!(
            "runtime error: slice bounds out of range [:{BLOCK}] with capacity {}",
            crypt.len()
        )));
    }
    let (iv, body) = crypt.split_at(BLOCK);
    if body.len() % BLOCK != 0 {
        return Err(FuncError("crypto/cipher: input not full blocks".into()));
    }
    if body.is_empty() {
        return Err(FuncError("runtime error: index out of range [-1]".into()));
    }
    let mut iv_block = [0u8; BLOCK];
    iv_block.copy_from_slice(iv);
    let key =
        DecryptingKey::cbc(key(password)?).map_err(|_| FuncError("cannot set up AES".into()))?;
    let mut buf = body.to_vec();
    let plain = key
        .decrypt(
            &mut buf,
            DecryptionContext::Iv128(FixedLength::from(iv_block)),
        )
        .map_err(|_| FuncError("AES decryption failed".into()))?;
    let padding = usize::from(plain[plain.len() - 1]);
    let Some(keep) = plain.len().checked_sub(padding) else {
        return Err(FuncError(format!(
            "runtime error: slice bounds out of range [:{}]",
            plain.len() as i64 - padding as i64
        )));
    };
    String::from_utf8(plain[..keep].to_vec())
        .map(Value::String)
        .map_err(|_| FuncError("decrypted data is not valid UTF-8 text".into()))
}
