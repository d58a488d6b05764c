//! ESO's MFA generator: a TOTP code (RFC 6238, on HOTP's dynamic truncation of RFC 4226) of a
//! base32 seed, and the seconds left in its period. ESO parses `algorithm` and then always uses
//! SHA-1; here the field is honoured.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use api::generators::MfaSpec;
use aws_lc_rs::digest;

use crate::Error;

/// HMAC (RFC 2104) over one of the digests TOTP allows.
fn hmac(algorithm: &'static digest::Algorithm, key: &[u8], message: &[u8]) -> Vec<u8> {
    let block = algorithm.block_len();
    let mut key = if key.len() > block {
        digest::digest(algorithm, key).as_ref().to_vec()
    } else {
        key.to_vec()
    };
    key.resize(block, 0);
    let pad = |byte: u8| key.iter().map(|k| k ^ byte).collect::<Vec<u8>>();
    let mut inner = pad(0x36);
    inner.extend_from_slice(message);
    let mut outer = pad(0x5c);
    outer.extend_from_slice(digest::digest(algorithm, &inner).as_ref());
    digest::digest(algorithm, &outer).as_ref().to_vec()
}

/// RFC 4648 base32 without padding, as authenticator apps show seeds: spaces dropped, any case.
fn base32_decode(text: &str) -> Option<Vec<u8>> {
    const ALPHABET: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let cleaned: String = text
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_uppercase();
    let cleaned = cleaned.trim_end_matches('=');
    let mut bits = 0u64;
    let mut count = 0;
    let mut out = Vec::new();
    for c in cleaned.chars() {
        let value = u64::try_from(ALPHABET.find(c)?).ok()?;
        bits = (bits << 5) | value;
        count += 5;
        if count >= 8 {
            count -= 8;
            out.push(u8::try_from((bits >> count) & 0xff).ok()?);
        }
    }
    Some(out)
}

/// `token` and `timeLeft` for `spec` with the seed `seed` at `now` (or `spec.when`).
pub(crate) fn generate(
    spec: &MfaSpec,
    seed: &[u8],
    now: SystemTime,
) -> Result<BTreeMap<String, Vec<u8>>, Error> {
    let length = spec.length.filter(|l| *l > 0).unwrap_or(6);
    if length > 10 {
        return Err(Error::InvalidSpec(format!(
            "spec.length: {length} digits is more than a 31-bit code has (10)"
        )));
    }
    let period = spec.time_period.filter(|p| *p > 0).unwrap_or(30);
    let algorithm = match spec.algorithm.as_deref().unwrap_or("sha1") {
        "sha1" => &digest::SHA1_FOR_LEGACY_USE_ONLY,
        "sha256" => &digest::SHA256,
        "sha384" => &digest::SHA384,
        "sha512" => &digest::SHA512,
        "sha512_256" => &digest::SHA512_256,
        other => {
            return Err(Error::InvalidSpec(format!(
                "spec.algorithm: {other:?} is not sha1, sha256, sha384, sha512 or sha512_256"
            )));
        }
    };
    let seed = std::str::from_utf8(seed)
        .ok()
        .and_then(base32_decode)
        .ok_or_else(|| {
            Error::InvalidSpec(format!(
                "the seed in spec.secret (key {:?}) is not base32 text",
                spec.secret.key.as_deref().unwrap_or_default()
            ))
        })?;
    let unix = match &spec.when {
        Some(when) => when.0.as_second(),
        None => now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
    };
    let counter = u64::try_from(unix.div_euclid(period)).unwrap_or(0);
    let time_left = period - unix.rem_euclid(period);
    let sum = hmac(algorithm, &seed, &counter.to_be_bytes());
    let offset = usize::from(sum[sum.len() - 1] & 0x0f);
    let code = (u32::from(sum[offset] & 0x7f) << 24)
        | (u32::from(sum[offset + 1]) << 16)
        | (u32::from(sum[offset + 2]) << 8)
        | u32::from(sum[offset + 3]);
    let modulus = 10u64.pow(u32::try_from(length).expect("at most 10"));
    let token = format!(
        "{:0width$}",
        u64::from(code) % modulus,
        width = usize::try_from(length).expect("at most 10")
    );
    Ok(BTreeMap::from([
        ("token".to_owned(), token.into_bytes()),
        ("timeLeft".to_owned(), time_left.to_string().into_bytes()),
    ]))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// RFC 6238 appendix B's seeds ("12345678901234567890" repeated to each digest's size), in
    /// base32, and its 8-digit codes.
    #[test]
    fn rfc_6238_test_vectors() {
        let seed20 = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ";
        let seed32 = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQGEZA";
        let seed64 = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQGEZDGNA";
        let cases = [
            (59, "sha1", seed20, "94287082"),
            (59, "sha256", seed32, "46119246"),
            (59, "sha512", seed64, "90693936"),
            (1111111109, "sha1", seed20, "07081804"),
            (1234567890, "sha256", seed32, "91819424"),
            (20000000000, "sha512", seed64, "47863826"),
        ];
        for (at, algorithm, seed, expected) in cases {
            let spec = MfaSpec {
                length: Some(8),
                algorithm: Some(algorithm.into()),
                ..MfaSpec::default()
            };
            let out =
                generate(&spec, seed.as_bytes(), UNIX_EPOCH + Duration::from_secs(at)).unwrap();
            assert_eq!(out["token"], expected.as_bytes(), "{algorithm} at {at}");
        }
        let spec = MfaSpec::default();
        let out = generate(
            &spec,
            b"gezd gnbv gy3t qojq",
            UNIX_EPOCH + Duration::from_secs(59),
        )
        .unwrap();
        assert_eq!(out["token"].len(), 6);
        assert_eq!(out["timeLeft"], b"1");
        let err = generate(&spec, b"not base32!", SystemTime::now()).unwrap_err();
        assert!(err.to_string().contains("not base32"), "{err}");
    }
}
