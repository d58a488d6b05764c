//! `sha1sum`, `sha256sum`, `sha512sum` (lower-case hex) and `adler32sum` (decimal).

use aws_lc_rs::digest;

use crate::funcs::{Arity, FuncResult, Funcs, expect_go_bytes};
use crate::value::Value;

pub(super) fn register(funcs: &mut Funcs) {
    funcs.insert("sha1sum", Arity::Exact(1), |a| {
        hex_digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, &a[0])
    });
    funcs.insert("sha256sum", Arity::Exact(1), |a| {
        hex_digest(&digest::SHA256, &a[0])
    });
    funcs.insert("sha512sum", Arity::Exact(1), |a| {
        hex_digest(&digest::SHA512, &a[0])
    });
    funcs.insert("adler32sum", Arity::Exact(1), |a| {
        Ok(Value::String(adler32(&expect_go_bytes(&a[0])?).to_string()))
    });
}

fn hex_digest(algorithm: &'static digest::Algorithm, input: &Value) -> FuncResult {
    let sum = digest::digest(algorithm, &expect_go_bytes(input)?);
    Ok(Value::String(hex(sum.as_ref())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// RFC 1950's Adler-32, as Go's `hash/adler32`.
fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65521;
    let (mut a, mut b) = (1u32, 0u32);
    // 5552 bytes is the most that can be summed before the u32 sums may overflow.
    for chunk in data.chunks(5552) {
        for byte in chunk {
            a += u32::from(*byte);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    b << 16 | a
}
