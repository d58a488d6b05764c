//! Secret keys and values as ESO shapes them: which keys a Secret may hold, key conversion,
//! value decoding, the NUL byte policy. Pure, and below both the ExternalSecret plan and the
//! templating that use it.

use std::collections::BTreeMap;

use api::external_secret::DecodingStrategy;
use base64::Engine;
use k8s_openapi::api::core::v1::Secret;

/// A Secret's data, as bytes by key.
pub fn secret_data(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    secret
        .data
        .as_ref()
        .map(|d| d.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
        .unwrap_or_default()
}

/// A key allowed in a Secret's data.
pub fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// ESO's `conversionStrategy` for keys from `extract` and `find`: each character a Secret key
/// cannot hold becomes `_` (Default) or `_U<hex code point>_` (Unicode).
pub fn convert_key(key: &str, unicode: bool) -> String {
    key.chars()
        .map(|c| {
            // ESO keeps letters and digits of every script (Go's unicode.IsLetter/IsNumber).
            if c.is_alphabetic() || c.is_numeric() || matches!(c, '-' | '_' | '.') {
                c.to_string()
            } else if unicode {
                format!("_U{:04x}_", u32::from(c))
            } else {
                "_".to_owned()
            }
        })
        .collect()
}

/// Every key of `map` converted; two keys that convert to the same one are an error naming both,
/// rather than one value silently replacing the other.
pub fn convert_keys(
    map: BTreeMap<String, Vec<u8>>,
    unicode: bool,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let mut out = BTreeMap::new();
    let mut from: BTreeMap<String, String> = BTreeMap::new();
    for (key, value) in map {
        let converted = convert_key(&key, unicode);
        if let Some(earlier) = from.insert(converted.clone(), key.clone()) {
            return Err(format!(
                "keys {earlier:?} and {key:?} both become {converted:?}; use rewrite to tell them apart"
            ));
        }
        out.insert(converted, value);
    }
    Ok(out)
}

/// `nullBytePolicy: Fail` refuses values with a NUL byte (which some consumers truncate at).
pub fn check_nul(
    value: &[u8],
    policy: Option<api::external_secret::NullBytePolicy>,
) -> Result<(), String> {
    if policy == Some(api::external_secret::NullBytePolicy::Fail) && value.contains(&0) {
        return Err("the value contains a NUL byte and nullBytePolicy is Fail".into());
    }
    Ok(())
}

/// How a fetched value is decoded (`decodingStrategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoding {
    None,
    Base64,
    Base64Url,
    Auto,
}

impl From<Option<DecodingStrategy>> for Decoding {
    fn from(strategy: Option<DecodingStrategy>) -> Self {
        match strategy {
            Some(DecodingStrategy::Base64) => Decoding::Base64,
            Some(DecodingStrategy::Base64URL) => Decoding::Base64Url,
            Some(DecodingStrategy::Auto) => Decoding::Auto,
            Some(DecodingStrategy::None) | None => Decoding::None,
        }
    }
}

/// Go's padded base64 decoders as ESO uses them: non-zero trailing bits accepted, and `\r` and
/// `\n` anywhere skipped (values copied out of PEM-like text often carry line breaks).
fn go_decoder(alphabet: &base64::alphabet::Alphabet) -> base64::engine::GeneralPurpose {
    base64::engine::GeneralPurpose::new(
        alphabet,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireCanonical),
    )
}

pub fn decode(value: Vec<u8>, decoding: Decoding) -> Result<Vec<u8>, String> {
    let std = go_decoder(&base64::alphabet::STANDARD);
    let url = go_decoder(&base64::alphabet::URL_SAFE);
    let text: Vec<u8> = value
        .iter()
        .copied()
        .filter(|b| !matches!(b, b'\r' | b'\n'))
        .collect();
    match decoding {
        Decoding::None => Ok(value),
        // The decoder's own error quotes the offending byte: a piece of the secret.
        Decoding::Base64 => std
            .decode(&text)
            .map_err(|_| "the value is not valid base64".to_owned()),
        Decoding::Base64Url => url
            .decode(&text)
            .map_err(|_| "the value is not valid base64url".to_owned()),
        Decoding::Auto => Ok(std
            .decode(&text)
            .or_else(|_| url.decode(&text))
            .unwrap_or(value)),
    }
}
