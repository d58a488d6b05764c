//! How sprig turns its arguments into Go values: the conversions that sprig applies to its
//! `interface{}` parameters (`strval`, `cast.ToInt64`, `cast.ToFloat64`, `strslice`), and the
//! checks that Go's template executor makes before it calls a function with a typed parameter
//! (`string`, `int`, `bool`, `map[string]interface {}`), with Go's messages.
//!
//! ESO builds sprig with `github.com/spf13/cast` v1.10.0; the number rules here are that
//! version's.

use std::collections::BTreeMap;

use crate::funcs::{FuncError, expect_string, wrong_type};
use crate::gofmt::sprint_value;
use crate::value::Value;

/// sprig's `strval` (the `toString` function): a string as it is, `[]byte` as its text, a
/// `time.Time` by its `String()` method, anything else as `fmt.Sprintf("%v")`.
///
/// A `[]byte` that is not UTF-8 becomes U+FFFD where Go would keep the raw bytes: our strings
/// are UTF-8.
pub fn strval(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        other => sprint_value(other),
    }
}

/// `cast.ToInt64`: integers as they are, floats truncated toward zero, booleans as 1 and 0,
/// strings parsed as Go integer literals (`0x1f`, `0o17`, `017`, `0b1`, `1_000`, a sign) after
/// dropping a decimal fraction (`"1.9"` → 1), and everything else, or a failed parse, as 0.
pub fn to_int64(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        Value::Float(f) => float_to_int(*f),
        Value::Bool(b) => i64::from(*b),
        Value::String(s) if !s.is_empty() => parse_go_int(trim_decimal(s)).unwrap_or(0),
        _ => 0,
    }
}

/// `cast.ToInt`: Go's `int` is 64 bits wide on every platform ESO ships for, so this is
/// [`to_int64`]; it exists so that a caller names the Go function it mirrors.
pub fn to_int(v: &Value) -> i64 {
    to_int64(v)
}

/// `cast.ToFloat64`: numbers converted, booleans as 1 and 0, strings parsed by Go's
/// `strconv.ParseFloat` rules (a failure, including overflow, gives 0), everything else 0.
pub fn to_float64(v: &Value) -> f64 {
    match v {
        Value::Int(i) => *i as f64,
        Value::Float(f) => *f,
        Value::Bool(b) => f64::from(u8::from(*b)),
        Value::String(s) if !s.is_empty() => parse_go_float(s).unwrap_or(0.0),
        _ => 0.0,
    }
}

/// sprig's `strslice` (the `toStrings` function, and how `join` and `sortAlpha` read a list):
/// a list's non-nil elements through [`strval`], a `[]byte`'s bytes as numbers, nil as no
/// strings, and any other value as a list of one.
pub fn to_string_list(v: &Value) -> Vec<String> {
    match v {
        Value::List(items) => items
            .iter()
            .filter(|item| !matches!(item, Value::Nil))
            .map(strval)
            .collect(),
        Value::Bytes(bytes) => bytes.iter().map(u8::to_string).collect(),
        Value::Nil => Vec::new(),
        other => vec![strval(other)],
    }
}

/// `reflect.Value.Kind().String()` of a value, as sprig's messages and `kindOf` print it.
pub fn go_kind(v: &Value) -> &'static str {
    match v {
        Value::Nil => "invalid",
        Value::Bool(_) => "bool",
        Value::Int(_) => "int",
        Value::Float(_) => "float64",
        Value::String(_) => "string",
        Value::Bytes(_) | Value::List(_) => "slice",
        Value::Map(_) => "map",
        Value::Time(_) => "struct",
    }
}

/// The elements of a Go slice or array: a list, or a `[]byte`'s bytes as numbers. `None` for
/// any other kind.
pub fn list_items(v: &Value) -> Option<Vec<Value>> {
    match v {
        Value::List(items) => Some(items.clone()),
        Value::Bytes(bytes) => Some(bytes.iter().map(|b| Value::Int(i64::from(*b))).collect()),
        _ => None,
    }
}

/// What Go panics with when sprig asks `reflect.TypeOf(nil).Kind()`; the template executor
/// turns the panic into this error.
pub fn nil_dereference() -> FuncError {
    FuncError("runtime error: invalid memory address or nil pointer dereference".into())
}

/// A `string` parameter.
pub fn string_param(v: &Value) -> Result<&str, FuncError> {
    match v {
        Value::Nil => Err(invalid_value("string")),
        other => expect_string(other),
    }
}

/// An `int` parameter: Go's executor accepts only an integer.
pub fn int_param(v: &Value) -> Result<i64, FuncError> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::Nil => Err(invalid_value("int")),
        other => Err(wrong_type("int", other)),
    }
}

/// A `float64` parameter. A template's integer constant converts (Go does that for a literal;
/// computed integers cannot be told apart here).
pub fn float_param(v: &Value) -> Result<f64, FuncError> {
    match v {
        Value::Float(f) => Ok(*f),
        Value::Int(i) => Ok(*i as f64),
        Value::Nil => Err(invalid_value("float64")),
        other => Err(wrong_type("float64", other)),
    }
}

/// A `bool` parameter.
pub fn bool_param(v: &Value) -> Result<bool, FuncError> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::Nil => Err(invalid_value("bool")),
        other => Err(wrong_type("bool", other)),
    }
}

/// A `map[string]interface {}` parameter; nil is Go's nil map, which reads as empty.
pub fn map_param(v: &Value) -> Result<BTreeMap<String, Value>, FuncError> {
    match v {
        Value::Map(m) => Ok(m.clone()),
        Value::Nil => Ok(BTreeMap::new()),
        other => Err(wrong_type("map[string]interface {}", other)),
    }
}

/// Go's executor's message for a nil argument to a parameter that cannot be nil.
fn invalid_value(expected: &str) -> FuncError {
    FuncError(format!("invalid value; expected {expected}"))
}

/// Go's `int64(f)` on amd64, where ESO runs: NaN and out-of-range values become the
/// "integer indefinite" value, `math.MinInt64` (Rust's `as` would saturate instead).
pub fn float_to_int(f: f64) -> i64 {
    // 2^63 is exactly representable; every float in [-2^63, 2^63) converts exactly after
    // truncation.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    // NaN is in no range.
    if !(-LIMIT..LIMIT).contains(&f) {
        i64::MIN
    } else {
        f as i64
    }
}

/// cast's `trimDecimal`: `"12.5"` → `"12"`, `"-.5"` → `"-0"`, `"."` → `"0"`; a string that
/// is not sign, digits and one fraction stays as it is (and then fails to parse).
fn trim_decimal(s: &str) -> &str {
    if !s.contains('.') {
        return s;
    }
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = int.strip_prefix(['-', '+']).unwrap_or(int);
    if !digits.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return s;
    }
    match int {
        "" => "0",
        "-" => "-0",
        "+" => "+0",
        _ => int,
    }
}

/// `strconv.ParseInt(s, 0, 64)`: a Go integer literal with an optional sign.
pub fn parse_go_int(s: &str) -> Option<i64> {
    let (negative, unsigned) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let magnitude = parse_go_uint(unsigned)?;
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// `strconv.ParseUint(s, 0, 64)`: base from the prefix (`0x`, `0o`, `0b`, a leading `0` for
/// octal), underscores only between digits.
fn parse_go_uint(s: &str) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let lower = s.to_ascii_lowercase();
    let (base, digits) = if lower.len() >= 3 && lower.starts_with("0x") {
        (16, &s[2..])
    } else if lower.len() >= 3 && lower.starts_with("0o") {
        (8, &s[2..])
    } else if lower.len() >= 3 && lower.starts_with("0b") {
        (2, &s[2..])
    } else if let Some(rest) = s.strip_prefix('0') {
        (8, rest)
    } else {
        (10, s)
    };
    let mut n: u64 = 0;
    let mut underscores = false;
    for c in digits.chars() {
        if c == '_' {
            underscores = true;
            continue;
        }
        let d = c.to_digit(36)?;
        if d >= base {
            return None;
        }
        n = n.checked_mul(u64::from(base))?.checked_add(u64::from(d))?;
    }
    if underscores && !underscores_ok(s) {
        return None;
    }
    Some(n)
}

/// Go's `underscoreOK`: an underscore must sit between two digits (a base prefix counts as a
/// digit).
fn underscores_ok(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s).as_bytes();
    let mut saw = b'^';
    let mut i = 0;
    let mut hex = false;
    if s.len() >= 2 && s[0] == b'0' && matches!(s[1].to_ascii_lowercase(), b'b' | b'o' | b'x') {
        i = 2;
        saw = b'0';
        hex = s[1].eq_ignore_ascii_case(&b'x');
    }
    for &c in &s[i..] {
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else if saw == b'_' {
            return false;
        } else {
            saw = b'!';
        }
    }
    saw != b'_'
}

/// `strconv.ParseFloat(s, 64)` without its error detail: decimal and hexadecimal (`0x1p4`)
/// literals, underscores between digits, `inf`/`infinity`/`nan` in any case. `None` for a
/// syntax error or an overflow (Go returns ±Inf with `ErrRange` there, which cast turns into 0).
pub fn parse_go_float(s: &str) -> Option<f64> {
    let unsigned = s.strip_prefix(['-', '+']).unwrap_or(s);
    let special = unsigned.to_ascii_lowercase();
    if matches!(special.as_str(), "inf" | "infinity" | "nan") {
        return s.to_ascii_lowercase().parse().ok();
    }
    let plain: String = if s.contains('_') {
        if !underscores_ok(s) {
            return None;
        }
        s.chars().filter(|&c| c != '_').collect()
    } else {
        s.to_owned()
    };
    let body = plain.strip_prefix(['-', '+']).unwrap_or(&plain);
    let negative = plain.starts_with('-');
    let value = if body.len() > 2 && body.as_bytes()[..2].eq_ignore_ascii_case(b"0x") {
        parse_hex_float(&body[2..])?
    } else if body
        .bytes()
        .all(|b| b.is_ascii_digit() || b".eE+-".contains(&b))
        && body
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_digit() || b == b'.')
    {
        body.parse::<f64>().ok()?
    } else {
        return None;
    };
    if value.is_infinite() {
        return None;
    }
    Some(if negative { -value } else { value })
}

/// The part of a hexadecimal float literal after `0x`: hex digits with an optional point, then
/// a mandatory binary exponent `p±N`.
fn parse_hex_float(s: &str) -> Option<f64> {
    let (mantissa, exponent) = s.split_once(['p', 'P'])?;
    let exponent: i32 = exponent.parse().ok()?;
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut value = 0.0f64;
    for c in int.chars() {
        value = value * 16.0 + f64::from(c.to_digit(16)?);
    }
    let mut scale = 1.0 / 16.0;
    for c in frac.chars() {
        value += f64::from(c.to_digit(16)?) * scale;
        scale /= 16.0;
    }
    Some(value * 2f64.powi(exponent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_conversion_follows_cast() {
        for (input, want) in [
            ("12", 12),
            ("-12", -12),
            ("+7", 7),
            ("0x1F", 31),
            ("0o17", 15),
            ("017", 15),
            ("0b101", 5),
            ("1_000", 1000),
            ("0_7", 7),
            ("1.9", 1),
            ("-.5", 0),
            ("1__0", 0),
            ("_1", 0),
            (" 1", 0),
            ("1e3", 0),
            ("0x", 0),
            ("9223372036854775807", i64::MAX),
            ("-9223372036854775808", i64::MIN),
            ("9223372036854775808", 0),
            ("abc", 0),
        ] {
            assert_eq!(to_int64(&Value::from(input)), want, "{input}");
        }
        assert_eq!(to_int64(&Value::Float(-2.9)), -2);
        assert_eq!(to_int64(&Value::Float(1e20)), i64::MIN);
        assert_eq!(to_int64(&Value::Bool(true)), 1);
        assert_eq!(to_int64(&Value::Nil), 0);
        assert_eq!(to_int64(&Value::List(vec![])), 0);
    }

    #[test]
    fn float_conversion_follows_cast() {
        for (input, want) in [
            ("1.5", 1.5),
            ("1_000.5", 1000.5),
            ("1e3", 1000.0),
            (".5", 0.5),
            ("0x1p4", 16.0),
            ("0x1.8p1", 3.0),
            ("1e400", 0.0),
            ("1e-400", 0.0),
            ("abc", 0.0),
            ("1_", 0.0),
        ] {
            assert_eq!(to_float64(&Value::from(input)), want, "{input}");
        }
        assert!(to_float64(&Value::from("-Infinity")).is_infinite());
        assert!(to_float64(&Value::from("NaN")).is_nan());
        assert_eq!(to_float64(&Value::Int(3)), 3.0);
    }

    #[test]
    fn string_lists_follow_strslice() {
        let list = Value::List(vec![Value::from("a"), Value::Nil, Value::Int(1)]);
        assert_eq!(to_string_list(&list), ["a", "1"]);
        assert_eq!(to_string_list(&Value::Nil), Vec::<String>::new());
        assert_eq!(to_string_list(&Value::Int(5)), ["5"]);
        assert_eq!(to_string_list(&Value::Bytes(b"ab".to_vec())), ["97", "98"]);
    }
}
