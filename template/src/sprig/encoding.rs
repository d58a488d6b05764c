//! `b64enc`, `b64dec`, `b32enc`, `b32dec`: Go's standard padded alphabets. Sprig's decoders
//! return Go's error text *as the result* on invalid input, so the decoders here mirror Go's
//! exactly, down to which byte offset the message names.

use crate::funcs::{Arity, FuncResult, Funcs, expect_go_bytes, go_string_value};
use crate::value::Value;

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const BASE32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

pub fn register(funcs: &mut Funcs) {
    funcs.insert("b64enc", Arity::Exact(1), |a| {
        Ok(Value::String(base64_encode(&expect_go_bytes(&a[0])?)))
    });
    funcs.insert("b64dec", Arity::Exact(1), |a| {
        decoded(base64_decode(&expect_go_bytes(&a[0])?))
    });
    funcs.insert("b32enc", Arity::Exact(1), |a| {
        Ok(Value::String(base32_encode(&expect_go_bytes(&a[0])?)))
    });
    funcs.insert("b32dec", Arity::Exact(1), |a| {
        decoded(base32_decode(&expect_go_bytes(&a[0])?))
    });
}

/// Go's `CorruptInputError` message.
fn corrupt(offset: usize, alphabet: &str) -> String {
    format!("illegal {alphabet} data at input byte {offset}")
}

/// Go hands back the decoded bytes as a string, whatever they are: a base64 keystore decodes to
/// binary that later functions (`pkcs12key`) or the Secret itself must get unchanged.
fn decoded(result: Result<Vec<u8>, String>) -> FuncResult {
    match result {
        Ok(bytes) => Ok(go_string_value(&bytes)),
        Err(message) => Ok(Value::String(message)),
    }
}

pub(crate) fn base64_encode(input: &[u8]) -> String {
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(BASE64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_value(b: u8) -> Option<u8> {
    BASE64.iter().position(|c| *c == b).map(|p| p as u8)
}

/// Go's `base64.StdEncoding.DecodeString`: CR and LF are skipped anywhere, padding is required,
/// and nothing but line breaks may follow it. Unused trailing bits are ignored.
pub(crate) fn base64_decode(src: &[u8]) -> Result<Vec<u8>, String> {
    let fail = |offset| Err(corrupt(offset, "base64"));
    let is_newline = |b: u8| b == b'\n' || b == b'\r';
    let mut out = Vec::with_capacity(src.len() / 4 * 3);
    let mut si = 0;
    while si < src.len() {
        let mut quantum = [0u8; 4];
        let mut len = 4;
        let mut trailing_garbage = None;
        let mut j = 0;
        while j < 4 {
            if si == src.len() {
                if j == 0 {
                    return Ok(out);
                }
                return fail(si - j);
            }
            let byte = src[si];
            si += 1;
            if let Some(v) = base64_value(byte) {
                quantum[j] = v;
                j += 1;
                continue;
            }
            if is_newline(byte) {
                continue;
            }
            if byte != b'=' || j < 2 {
                return fail(si - 1);
            }
            if j == 2 {
                // The first '=' of "==" is consumed; the second may follow line breaks.
                while si < src.len() && is_newline(src[si]) {
                    si += 1;
                }
                if si == src.len() {
                    return fail(src.len());
                }
                if src[si] != b'=' {
                    return fail(si - 1);
                }
                si += 1;
            }
            while si < src.len() && is_newline(src[si]) {
                si += 1;
            }
            if si < src.len() {
                trailing_garbage = Some(si);
            }
            len = j;
            break;
        }
        let n = u32::from(quantum[0]) << 18
            | u32::from(quantum[1]) << 12
            | u32::from(quantum[2]) << 6
            | u32::from(quantum[3]);
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..len - 1]);
        if let Some(offset) = trailing_garbage {
            return fail(offset);
        }
        if len < 4 {
            break;
        }
    }
    Ok(out)
}

pub(crate) fn base32_encode(input: &[u8]) -> String {
    let mut out = String::with_capacity(input.len().div_ceil(5) * 8);
    for chunk in input.chunks(5) {
        let mut b = [0u8; 5];
        b[..chunk.len()].copy_from_slice(chunk);
        let n = b.iter().fold(0u64, |acc, x| acc << 8 | u64::from(*x));
        // How many of the 8 output characters carry data for 1..=5 input bytes.
        let used = [0, 2, 4, 5, 7, 8][chunk.len()];
        for i in 0..8 {
            if i < used {
                out.push(BASE32[(n >> (35 - 5 * i) & 31) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base32_value(b: u8) -> Option<u8> {
    BASE32.iter().position(|c| *c == b).map(|p| p as u8)
}

/// Go's `base32.StdEncoding.DecodeString`: line breaks are removed first (offsets count the
/// input without them), padding is required, and decoding ends at the padding.
pub(crate) fn base32_decode(input: &[u8]) -> Result<Vec<u8>, String> {
    let src: Vec<u8> = input
        .iter()
        .copied()
        .filter(|b| *b != b'\n' && *b != b'\r')
        .collect();
    let fail = |offset| Err(corrupt(offset, "base32"));
    let total = src.len();
    let mut out = Vec::with_capacity(total / 8 * 5);
    let mut pos = 0;
    let mut end = false;
    while pos < total && !end {
        let mut quantum = [0u8; 8];
        let mut len = 8;
        let mut j = 0;
        while j < 8 {
            if pos == total {
                return fail(total - j);
            }
            let byte = src[pos];
            pos += 1;
            let remaining = total - pos;
            if byte == b'=' && j >= 2 && remaining < 8 {
                if remaining + j < 7 {
                    return fail(total);
                }
                for k in 0..7 - j {
                    if remaining > k && src[pos + k] != b'=' {
                        return fail(pos + k - 1);
                    }
                }
                len = j;
                end = true;
                // 1, 3 and 6 characters cannot hold a whole byte.
                if matches!(len, 1 | 3 | 6) {
                    return fail(pos - 1);
                }
                break;
            }
            match base32_value(byte) {
                Some(v) => quantum[j] = v,
                None => return fail(pos - 1),
            }
            j += 1;
        }
        let n = quantum.iter().fold(0u64, |acc, x| acc << 5 | u64::from(*x));
        let bytes = n.to_be_bytes();
        let produced = match len {
            8 => 5,
            7 => 4,
            5 => 3,
            4 => 2,
            _ => 1,
        };
        out.extend_from_slice(&bytes[3..3 + produced]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
