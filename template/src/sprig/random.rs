//! Sprig's random values: strings over fixed alphabets, integers, bytes, UUIDs and shuffles,
//! all from the operating system's cryptographic generator (via `rand`'s thread generator).

use rand::Rng;
use rand::seq::SliceRandom;

use super::args::int_param as expect_int;
use crate::funcs::{Arity, FuncError, FuncResult, Funcs, expect_string};
use crate::value::Value;

/// The longest random string or byte count a template may ask for: Go would allocate any
/// size, and a template must not make the operator do that.
const MAX_RANDOM_LEN: i64 = 1_000_000;

const ALPHA: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const ALPHANUMERIC: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const NUMERIC: &[u8] = b"0123456789";

pub fn register(funcs: &mut Funcs) {
    funcs.insert("randAlphaNum", Arity::Exact(1), |a| {
        random_string(&a[0], ALPHANUMERIC)
    });
    funcs.insert("randAlpha", Arity::Exact(1), |a| {
        random_string(&a[0], ALPHA)
    });
    funcs.insert("randNumeric", Arity::Exact(1), |a| {
        random_string(&a[0], NUMERIC)
    });
    funcs.insert("randAscii", Arity::Exact(1), |a| {
        let printable: Vec<u8> = (b' '..=b'~').collect();
        random_string(&a[0], &printable)
    });
    funcs.insert("randInt", Arity::Exact(2), rand_int);
    funcs.insert("randBytes", Arity::Exact(1), rand_bytes);
    funcs.insert("uuidv4", Arity::Exact(0), |_| Ok(Value::String(uuid_v4())));
    funcs.insert("shuffle", Arity::Exact(1), shuffle);
}

fn too_long() -> FuncError {
    FuncError(format!("length over {MAX_RANDOM_LEN} refused"))
}

/// Sprig ignores goutils' error for a negative count and returns an empty string.
fn random_string(count: &Value, alphabet: &[u8]) -> FuncResult {
    let count = expect_int(count)?;
    if count > MAX_RANDOM_LEN {
        return Err(too_long());
    }
    let mut rng = rand::rng();
    let text = (0..count.max(0))
        .map(|_| alphabet[rng.random_range(0..alphabet.len())] as char)
        .collect();
    Ok(Value::String(text))
}

/// `randInt min max`: in [min, max). Go panics when the range is empty.
fn rand_int(args: &[Value]) -> FuncResult {
    let min = expect_int(&args[0])?;
    let max = expect_int(&args[1])?;
    let span = max.wrapping_sub(min);
    if span <= 0 {
        return Err(FuncError("invalid argument to Intn".into()));
    }
    Ok(Value::Int(
        rand::rng().random_range(0..span).wrapping_add(min),
    ))
}

/// `randBytes n`: n random bytes in standard base64.
fn rand_bytes(args: &[Value]) -> FuncResult {
    let count = expect_int(&args[0])?;
    if count < 0 {
        return Err(FuncError(
            "runtime error: makeslice: len out of range".into(),
        ));
    }
    if count > MAX_RANDOM_LEN {
        return Err(too_long());
    }
    let mut buf = vec![0u8; count as usize];
    rand::fill(buf.as_mut_slice());
    Ok(Value::String(super::encoding::base64_encode(&buf)))
}

/// A random (version 4, RFC 4122 variant) UUID in lower-case hyphenated form.
fn uuid_v4() -> String {
    let mut b = [0u8; 16];
    rand::fill(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// `shuffle s`: the characters of `s` in random order.
fn shuffle(args: &[Value]) -> FuncResult {
    let mut chars: Vec<char> = expect_string(&args[0])?.chars().collect();
    chars.shuffle(&mut rand::rng());
    Ok(Value::String(chars.into_iter().collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: &[Value]) -> FuncResult {
        let mut funcs = Funcs::default();
        register(&mut funcs);
        (funcs.get(name).unwrap().call)(args)
    }

    fn text(v: FuncResult) -> String {
        match v.unwrap() {
            Value::String(s) => s,
            other => panic!("not a string: {other:?}"),
        }
    }

    #[test]
    fn strings_have_length_and_alphabet() {
        type Check = fn(char) -> bool;
        let cases: &[(&str, Check)] = &[
            ("randAlphaNum", |c| c.is_ascii_alphanumeric()),
            ("randAlpha", |c| c.is_ascii_alphabetic()),
            ("randNumeric", |c| c.is_ascii_digit()),
            ("randAscii", |c| (' '..='~').contains(&c)),
        ];
        for (name, allowed) in cases {
            let s = text(call(name, &[Value::Int(200)]));
            assert_eq!(s.len(), 200, "{name}");
            assert!(s.chars().all(allowed), "{name}: {s}");
            assert_eq!(text(call(name, &[Value::Int(0)])), "");
            assert_eq!(text(call(name, &[Value::Int(-3)])), "");
            assert!(call(name, &[Value::from("5")]).is_err());
            assert!(call(name, &[Value::Int(MAX_RANDOM_LEN + 1)]).is_err());
        }
    }

    #[test]
    fn rand_int_stays_in_range() {
        for _ in 0..200 {
            let Value::Int(n) = call("randInt", &[Value::Int(-3), Value::Int(4)]).unwrap() else {
                panic!("not an int");
            };
            assert!((-3..4).contains(&n));
        }
        assert_eq!(
            call("randInt", &[Value::Int(5), Value::Int(5)]),
            Err(FuncError("invalid argument to Intn".into()))
        );
    }

    #[test]
    fn rand_bytes_is_base64_of_n_bytes() {
        let s = text(call("randBytes", &[Value::Int(24)]));
        assert_eq!(s.len(), 32);
        assert_eq!(
            super::super::encoding::base64_decode(s.as_bytes())
                .unwrap()
                .len(),
            24
        );
        assert_eq!(text(call("randBytes", &[Value::Int(0)])), "");
        assert!(call("randBytes", &[Value::Int(-1)]).is_err());
    }

    #[test]
    fn uuid_has_version_4_shape() {
        let u = text(call("uuidv4", &[]));
        let parts: Vec<&str> = u.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(
            u.chars()
                .all(|c| c == '-' || matches!(c, '0'..='9' | 'a'..='f'))
        );
        assert!(parts[2].starts_with('4'));
        assert!(matches!(parts[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'));
        assert_ne!(u, text(call("uuidv4", &[])));
    }

    #[test]
    fn shuffle_keeps_the_characters() {
        let s = text(call("shuffle", &[Value::from("héllo wörld")]));
        let mut got: Vec<char> = s.chars().collect();
        let mut want: Vec<char> = "héllo wörld".chars().collect();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want);
        assert_eq!(text(call("shuffle", &[Value::from("")])), "");
    }
}
