//! ESO's Password generator: its defaults (`generators/v1/password`) and the algorithm of the
//! library it uses (sethvargo/go-password): letters, then digits, then symbols, each drawn at
//! random and inserted at a random place, without repeats unless `allowRepeat`. The randomness
//! is the thread's CSPRNG, seeded from the OS.

use std::collections::BTreeMap;

use api::generators::PasswordSpec;
use base64::Engine;
use rand::Rng;

use crate::Error;

const LOWER: &str = "abcdefghijklmnopqrstuvwxyz";
const UPPER: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
const DIGITS: &str = "0123456789";
const DEFAULT_SYMBOLS: &str = "~!@#$%^&*()_+`-={}|[]\\:\"<>?,./";
const DEFAULT_LENGTH: i64 = 24;
/// Longer is no password; the CRD says the same, and a ClusterGenerator's spec is checked here.
pub const MAX_LENGTH: i64 = 4096;
/// The characters of all keys together: hex doubles them, and a Secret holds at most 1 MiB.
const MAX_TOTAL: usize = 512 * 1024;

/// What one password must be, after ESO's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Constraints {
    pub length: usize,
    pub digits: usize,
    pub symbols: usize,
    pub symbol_characters: Vec<char>,
    pub no_upper: bool,
    pub allow_repeat: bool,
}

impl Constraints {
    /// ESO's defaults: 24 characters when `length` is 0, a quarter of them digits and a quarter
    /// symbols when those are unset. Errors name the field.
    pub fn from_spec(spec: &PasswordSpec) -> Result<Self, Error> {
        let length = if spec.length > MAX_LENGTH {
            return Err(Error::InvalidSpec(format!(
                "spec.length: {} is more than {MAX_LENGTH}",
                spec.length
            )));
        } else if spec.length > 0 {
            spec.length
        } else if spec.length == 0 {
            DEFAULT_LENGTH
        } else {
            return Err(Error::InvalidSpec(format!(
                "spec.length: {} is negative",
                spec.length
            )));
        };
        // Go's int(float32(length) * 0.25).
        let quarter = length / 4;
        let count = |value: Option<i64>, field: &str| -> Result<usize, Error> {
            let n = value.unwrap_or(quarter);
            usize::try_from(n)
                .map_err(|_| Error::InvalidSpec(format!("spec.{field}: {n} is negative")))
        };
        Ok(Self {
            length: usize::try_from(length).expect("positive"),
            digits: count(spec.digits, "digits")?,
            symbols: count(spec.symbols, "symbols")?,
            symbol_characters: spec
                .symbol_characters
                .as_deref()
                .unwrap_or(DEFAULT_SYMBOLS)
                .chars()
                .collect(),
            no_upper: spec.no_upper,
            allow_repeat: spec.allow_repeat,
        })
    }

    fn letters(&self) -> Vec<char> {
        let mut letters: Vec<char> = LOWER.chars().collect();
        if !self.no_upper {
            letters.extend(UPPER.chars());
        }
        letters
    }
}

/// One password honouring every constraint, or why none can.
pub fn password(c: &Constraints) -> Result<String, Error> {
    let letters_count = c.length.checked_sub(c.digits + c.symbols).ok_or_else(|| {
        Error::InvalidSpec(format!(
            "spec.digits ({}) and spec.symbols ({}) exceed spec.length ({})",
            c.digits, c.symbols, c.length
        ))
    })?;
    let letters = c.letters();
    let digits: Vec<char> = DIGITS.chars().collect();
    let mut symbols = c.symbol_characters.clone();
    symbols.sort_unstable();
    symbols.dedup();
    if c.symbols > 0 && symbols.is_empty() {
        return Err(Error::InvalidSpec(format!(
            "spec.symbolCharacters is empty and spec.symbols is {}",
            c.symbols
        )));
    }
    if !c.allow_repeat {
        for (count, set, field) in [
            (
                letters_count,
                &letters,
                "letters (spec.length less digits and symbols)",
            ),
            (c.digits, &digits, "spec.digits"),
            (c.symbols, &symbols, "spec.symbols"),
        ] {
            if count > set.len() {
                return Err(Error::InvalidSpec(format!(
                    "{field}: {count} exceeds the {} characters available without repeats (set allowRepeat)",
                    set.len()
                )));
            }
        }
    }
    let mut rng = rand::rng();
    let mut out: Vec<char> = Vec::with_capacity(c.length);
    for (count, set) in [
        (letters_count, &letters),
        (c.digits, &digits),
        (c.symbols, &symbols),
    ] {
        for _ in 0..count {
            let choices: Vec<char> = if c.allow_repeat {
                set.clone()
            } else {
                set.iter().copied().filter(|ch| !out.contains(ch)).collect()
            };
            if choices.is_empty() {
                // Only when symbolCharacters shares characters with letters or digits.
                return Err(Error::InvalidSpec(
                    "spec.symbolCharacters overlaps letters or digits, leaving too few characters without repeats (set allowRepeat)".into(),
                ));
            }
            let ch = choices[rng.random_range(0..choices.len())];
            let at = rng.random_range(0..=out.len());
            out.insert(at, ch);
        }
    }
    Ok(out.into_iter().collect())
}

/// ESO's `encoding`: the password's bytes as they are (`raw`, and anything unknown), or encoded.
fn encode(password: &str, encoding: Option<&str>) -> Vec<u8> {
    let bytes = password.as_bytes();
    match encoding {
        Some("base64") => base64::engine::general_purpose::STANDARD
            .encode(bytes)
            .into_bytes(),
        Some("base64url") => base64::engine::general_purpose::URL_SAFE
            .encode(bytes)
            .into_bytes(),
        Some("base32") => base32(bytes).into_bytes(),
        Some("hex") => hex::encode(bytes).into_bytes(),
        _ => bytes.to_vec(),
    }
}

/// RFC 4648 base32 with padding (Go's `base32.StdEncoding`).
fn base32(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut out = String::new();
    for chunk in bytes.chunks(5) {
        let mut block = [0u8; 5];
        block[..chunk.len()].copy_from_slice(chunk);
        let bits = block.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        let symbols = (chunk.len() * 8).div_ceil(5);
        for i in 0..8 {
            if i < symbols {
                let index = (bits >> (35 - 5 * i)) & 0x1f;
                out.push(char::from(
                    ALPHABET[usize::try_from(index).expect("5 bits")],
                ));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// ESO's Generate: one password per key of `secretKeys` (`password` when unset), encoded.
pub(crate) fn generate(spec: &PasswordSpec) -> Result<BTreeMap<String, Vec<u8>>, Error> {
    let constraints = Constraints::from_spec(spec)?;
    let keys = match spec.secret_keys.as_deref() {
        None | Some([]) => vec!["password".to_owned()],
        Some(keys) => keys.to_vec(),
    };
    if keys.len().saturating_mul(constraints.length) > MAX_TOTAL {
        return Err(Error::InvalidSpec(format!(
            "spec.secretKeys: {} keys of {} characters are more than a Secret holds",
            keys.len(),
            constraints.length
        )));
    }
    let mut out = BTreeMap::new();
    for key in keys {
        if key.is_empty() || out.contains_key(&key) {
            return Err(Error::InvalidSpec(
                "spec.secretKeys must be non-empty and unique".into(),
            ));
        }
        let value = encode(&password(&constraints)?, spec.encoding.as_deref());
        out.insert(key, value);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn spec(length: i64, digits: Option<i64>, symbols: Option<i64>) -> PasswordSpec {
        PasswordSpec {
            length,
            digits,
            symbols,
            ..PasswordSpec::default()
        }
    }

    #[test]
    fn esos_defaults_and_documented_generator() {
        let c = Constraints::from_spec(&PasswordSpec::default()).unwrap();
        assert_eq!((c.length, c.digits, c.symbols), (24, 6, 6));
        // generator-password.yaml.
        let documented = PasswordSpec {
            length: 42,
            digits: Some(5),
            symbols: Some(5),
            symbol_characters: Some("-_$@".into()),
            allow_repeat: true,
            ..PasswordSpec::default()
        };
        let out = generate(&documented).unwrap();
        let p = String::from_utf8(out["password"].clone()).unwrap();
        assert_eq!(p.chars().count(), 42);
        assert_eq!(p.chars().filter(char::is_ascii_digit).count(), 5);
        assert_eq!(p.chars().filter(|c| "-_$@".contains(*c)).count(), 5);
    }

    #[test]
    fn impossible_constraints_name_the_field() {
        let err = |s: PasswordSpec| generate(&s).unwrap_err().to_string();
        assert!(err(spec(8, Some(5), Some(5))).contains("exceed spec.length"));
        assert!(err(spec(30, Some(11), Some(0))).contains("spec.digits: 11 exceeds the 10"));
        assert!(err(spec(-1, None, None)).contains("spec.length: -1"));
        let mut empty = spec(10, Some(0), Some(2));
        empty.symbol_characters = Some(String::new());
        assert!(err(empty).contains("spec.symbolCharacters is empty"));
        let mut keys = spec(10, None, None);
        keys.secret_keys = Some(vec!["a".into(), "a".into()]);
        assert!(err(keys).contains("spec.secretKeys"));
    }

    /// A tenant's generator must not make the operator allocate without bound: a Secret holds
    /// at most 1 MiB, so neither may the passwords.
    #[test]
    fn a_huge_length_or_many_keys_are_refused_at_once() {
        let started = std::time::Instant::now();
        let mut huge = spec(1_000_000_000, Some(0), Some(0));
        huge.allow_repeat = true;
        let err = generate(&huge).unwrap_err().to_string();
        assert!(err.contains("spec.length: 1000000000"), "{err}");
        let mut many = spec(4096, Some(0), Some(0));
        many.allow_repeat = true;
        many.secret_keys = Some((0..1000).map(|i| format!("k{i}")).collect());
        let err = generate(&many).unwrap_err().to_string();
        assert!(err.contains("spec.secretKeys"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn multiple_keys_and_encodings() {
        let mut s = spec(16, Some(4), Some(0));
        s.secret_keys = Some(vec!["user-password".into(), "admin-password".into()]);
        let out = generate(&s).unwrap();
        assert_eq!(out.len(), 2);
        assert_ne!(out["user-password"], out["admin-password"]);
        assert_eq!(encode("foobar", Some("base32")), b"MZXW6YTBOI======");
        assert_eq!(encode("fo", Some("base32")), b"MZXQ====");
        assert_eq!(encode("foobar", Some("hex")), b"666f6f626172");
        assert_eq!(encode("f?o>", Some("base64url")), b"Zj9vPg==");
        assert_eq!(encode("f?o>", Some("base64")), b"Zj9vPg==");
        assert_eq!(encode("foobar", Some("raw")), b"foobar");
    }

    proptest! {
        /// Every password honours every constraint it was given, or the constraints are refused
        /// because no password could.
        #[test]
        fn every_password_honours_every_constraint(
            length in 0i64..80,
            digits in proptest::option::of(0i64..15),
            symbols in proptest::option::of(0i64..15),
            symbol_characters in proptest::option::of("[-_$@!#%^&*]{0,8}"),
            no_upper: bool,
            allow_repeat: bool,
        ) {
            let spec = PasswordSpec {
                length, digits, symbols, symbol_characters, no_upper, allow_repeat,
                ..PasswordSpec::default()
            };
            let c = Constraints::from_spec(&spec).unwrap();
            match password(&c) {
                Err(_) => {
                    let distinct: std::collections::BTreeSet<char> =
                        c.symbol_characters.iter().copied().collect();
                    let letters = if no_upper { 26 } else { 52 };
                    let impossible = c.digits + c.symbols > c.length
                        || (c.symbols > 0 && distinct.is_empty())
                        || (!allow_repeat
                            && (c.digits > 10
                                || c.symbols > distinct.len()
                                || c.length - c.digits - c.symbols > letters));
                    prop_assert!(impossible, "refused a possible password: {c:?}");
                }
                Ok(p) => {
                    let chars: Vec<char> = p.chars().collect();
                    prop_assert_eq!(chars.len(), c.length);
                    let n_digits = chars.iter().filter(|ch| ch.is_ascii_digit()).count();
                    let n_symbols = chars.iter().filter(|ch| c.symbol_characters.contains(ch)).count();
                    prop_assert_eq!(n_digits, c.digits);
                    prop_assert_eq!(n_symbols, c.symbols);
                    prop_assert_eq!(chars.len() - n_digits - n_symbols,
                        chars.iter().filter(|ch| ch.is_ascii_alphabetic()).count());
                    if no_upper {
                        prop_assert!(!chars.iter().any(char::is_ascii_uppercase));
                    }
                    if !allow_repeat {
                        let distinct: std::collections::BTreeSet<&char> = chars.iter().collect();
                        prop_assert_eq!(distinct.len(), chars.len());
                    }
                }
            }
        }
    }
}
