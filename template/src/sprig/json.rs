//! sprig's JSON functions, with Go's `encoding/json` output byte for byte: sorted map keys,
//! `<`, `>`, `&`, U+2028 and U+2029 escaped, Go's float format (`1e+21`, `1e-7`), `[]byte` as
//! base64, `time.Time` as RFC 3339. Decoding gives Go's `interface{}` shapes: numbers are
//! float64, objects `map[string]interface {}`, arrays `[]interface {}`.
//!
//! Go's syntax errors quote the offending character; ours name only the place (`invalid
//! character looking for beginning of value`), since the text may be a secret.

use std::collections::BTreeMap;

use super::args::string_param;
use crate::funcs::{Arity, FuncError, FuncResult, Funcs};
use crate::value::{MAX_NESTING, Value};

pub fn register(funcs: &mut Funcs) {
    use Arity::Exact;
    // Errors are swallowed: invalid JSON gives nil.
    funcs.insert("fromJson", Exact(1), |a| {
        Ok(decode(string_param(&a[0])?).map_or(Value::Nil, |(v, _)| v))
    });
    funcs.insert("mustFromJson", Exact(1), |a| {
        match decode(string_param(&a[0])?).map_err(FuncError)? {
            (v, None) => Ok(v),
            (_, Some(e)) => Err(FuncError(e)),
        }
    });
    funcs.insert("toJson", Exact(1), |a| {
        Ok(encode(&a[0], true, false).unwrap_or_default().into())
    });
    funcs.insert("mustToJson", Exact(1), |a| to_json(&a[0], true, false));
    funcs.insert("toPrettyJson", Exact(1), |a| {
        Ok(encode(&a[0], true, true).unwrap_or_default().into())
    });
    funcs.insert("mustToPrettyJson", Exact(1), |a| to_json(&a[0], true, true));
    // sprig's `toRawJson` panics where the others swallow the error; the executor reports
    // both alike.
    funcs.insert("toRawJson", Exact(1), |a| to_json(&a[0], false, false));
    funcs.insert("mustToRawJson", Exact(1), |a| to_json(&a[0], false, false));
}

fn to_json(v: &Value, escape_html: bool, pretty: bool) -> FuncResult {
    encode(v, escape_html, pretty)
        .map(Value::String)
        .map_err(FuncError)
}

/// `json.Marshal` (`pretty`: `json.MarshalIndent(v, "", "  ")`); `escape_html: false` is an
/// `Encoder` with `SetEscapeHTML(false)`.
pub fn encode(v: &Value, escape_html: bool, pretty: bool) -> Result<String, String> {
    let mut out = String::new();
    Encoder {
        out: &mut out,
        escape_html,
        pretty,
    }
    .value(v, 0)?;
    Ok(out)
}

struct Encoder<'a> {
    out: &'a mut String,
    escape_html: bool,
    pretty: bool,
}

impl Encoder<'_> {
    fn value(&mut self, v: &Value, depth: usize) -> Result<(), String> {
        match v {
            Value::Nil => self.out.push_str("null"),
            Value::Bool(b) => self.out.push_str(if *b { "true" } else { "false" }),
            Value::Int(i) => self.out.push_str(&i.to_string()),
            Value::Float(f) => self.out.push_str(&format_float(*f)?),
            Value::String(s) => self.string(s),
            Value::Bytes(b) => self.string(&base64_std(b)),
            Value::Time(t) => self.string(&rfc3339_nano(t)?),
            Value::List(items) => {
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.newline(depth + 1);
                    self.value(item, depth + 1)?;
                }
                if !items.is_empty() {
                    self.newline(depth);
                }
                self.out.push(']');
            }
            Value::Map(map) => {
                self.out.push('{');
                for (i, (k, item)) in map.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.newline(depth + 1);
                    self.string(k);
                    self.out.push_str(if self.pretty { ": " } else { ":" });
                    self.value(item, depth + 1)?;
                }
                if !map.is_empty() {
                    self.newline(depth);
                }
                self.out.push('}');
            }
        }
        Ok(())
    }

    fn newline(&mut self, depth: usize) {
        if self.pretty {
            self.out.push('\n');
            for _ in 0..depth {
                self.out.push_str("  ");
            }
        }
    }

    fn string(&mut self, s: &str) {
        let out = &mut *self.out;
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '<' | '>' | '&' if self.escape_html => {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                }
                c if (c as u32) < 0x20 || c == '\u{2028}' || c == '\u{2029}' => {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// Go's float64 encoding: the shortest round-trip digits, in exponent form below 1e-6 and from
/// 1e21 on, with a negative exponent unpadded (`1e-7`) and a positive one signed (`1e+21`).
fn format_float(f: f64) -> Result<String, String> {
    if !f.is_finite() {
        return Err(format!(
            "json: unsupported value: {}",
            crate::gofmt::format_float_v(f)
        ));
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let sci = format!("{f:e}");
        return Ok(match sci.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => format!("{mantissa}e+{exp}"),
            _ => sci,
        });
    }
    Ok(format!("{f}"))
}

fn base64_std(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `time.Time.MarshalJSON`, which refuses years RFC 3339 cannot write.
fn rfc3339_nano(t: &jiff::Zoned) -> Result<String, String> {
    if !(0..=9999).contains(&t.year()) {
        return Err("json: error calling MarshalJSON for type time.Time: Time.MarshalJSON: year outside of range [0,9999]".into());
    }
    Ok(crate::gofmt::rfc3339_nano(t))
}

/// `json.Unmarshal` into an `interface{}`: the value, and the first number that does not fit a
/// float64 (Go leaves nil in its place, goes on, and reports it at the end). A syntax error
/// is reported alone.
pub fn decode(text: &str) -> Result<(Value, Option<String>), String> {
    let mut p = Parser {
        s: text.as_bytes(),
        pos: 0,
        range_error: None,
    };
    let v = p.document()?;
    Ok((v, p.range_error))
}

enum Frame {
    List(Vec<Value>),
    Map(BTreeMap<String, Value>, String),
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    range_error: Option<String>,
}

fn syntax(context: &str) -> String {
    format!("invalid character {context}")
}

/// Go's scanner feeds a space at the end of the input, so a value cut short inside a literal,
/// number or escape is reported as that space.
fn truncated(context: &str) -> String {
    format!("invalid character ' ' {context}")
}

const END: &str = "unexpected end of JSON input";

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// The next byte after spaces, which must exist.
    fn next_token(&mut self) -> Result<u8, String> {
        self.skip_space();
        self.peek().ok_or_else(|| END.to_owned())
    }

    /// Iterative, so that deep nesting cannot exhaust the stack.
    fn document(&mut self) -> Result<Value, String> {
        let mut stack: Vec<Frame> = Vec::new();
        'value: loop {
            let token = self.next_token()?;
            if matches!(token, b'{' | b'[') && stack.len() >= MAX_NESTING {
                return Err(syntax("exceeded max depth"));
            }
            let mut v = match token {
                b'{' => {
                    self.pos += 1;
                    if self.next_token()? == b'}' {
                        self.pos += 1;
                        Value::Map(BTreeMap::new())
                    } else {
                        let key = self.object_key()?;
                        stack.push(Frame::Map(BTreeMap::new(), key));
                        continue 'value;
                    }
                }
                b'[' => {
                    self.pos += 1;
                    if self.next_token()? == b']' {
                        self.pos += 1;
                        Value::List(Vec::new())
                    } else {
                        stack.push(Frame::List(Vec::new()));
                        continue 'value;
                    }
                }
                _ => self.scalar()?,
            };
            loop {
                let Some(frame) = stack.last_mut() else {
                    self.skip_space();
                    if self.peek().is_some() {
                        return Err(syntax("after top-level value"));
                    }
                    return Ok(v);
                };
                match frame {
                    Frame::List(items) => {
                        items.push(v);
                        match self.next_token()? {
                            b',' => {
                                self.pos += 1;
                                continue 'value;
                            }
                            b']' => self.pos += 1,
                            _ => return Err(syntax("after array element")),
                        }
                    }
                    Frame::Map(map, key) => {
                        map.insert(std::mem::take(key), v);
                        match self.next_token()? {
                            b',' => {
                                self.pos += 1;
                                *key = self.object_key()?;
                                continue 'value;
                            }
                            b'}' => self.pos += 1,
                            _ => return Err(syntax("after object key:value pair")),
                        }
                    }
                }
                v = match stack.pop() {
                    Some(Frame::List(items)) => Value::List(items),
                    Some(Frame::Map(map, _)) => Value::Map(map),
                    None => unreachable!("a frame was just inspected"),
                };
            }
        }
    }

    /// `"key":`, leaving the position at the value.
    fn object_key(&mut self) -> Result<String, String> {
        if self.next_token()? != b'"' {
            return Err(syntax("looking for beginning of object key string"));
        }
        let key = self.string()?;
        if self.next_token()? != b':' {
            return Err(syntax("after object key"));
        }
        self.pos += 1;
        Ok(key)
    }

    fn scalar(&mut self) -> Result<Value, String> {
        match self.peek() {
            Some(b'"') => self.string().map(Value::String),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'n') => self.literal("null", Value::Nil),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(syntax("looking for beginning of value")),
        }
    }

    fn literal(&mut self, word: &str, v: Value) -> Result<Value, String> {
        for (i, expected) in word.bytes().enumerate().skip(1) {
            let context = || format!("in literal {word} (expecting '{}')", char::from(expected));
            match self.s.get(self.pos + i) {
                None => return Err(truncated(&context())),
                Some(&b) if b == expected => {}
                Some(_) => return Err(syntax(&context())),
            }
        }
        self.pos += word.len();
        Ok(v)
    }

    fn number(&mut self) -> Result<Value, String> {
        let start = self.pos;
        let digits = |p: &mut Self| {
            let from = p.pos;
            while matches!(p.peek(), Some(b'0'..=b'9')) {
                p.pos += 1;
            }
            p.pos > from
        };
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                digits(self);
            }
            None => return Err(truncated("in numeric literal")),
            Some(_) => return Err(syntax("in numeric literal")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !digits(self) {
                return Err(self.end_or("after decimal point in numeric literal"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if !digits(self) {
                return Err(self.end_or("in exponent of numeric literal"));
            }
        }
        let text = std::str::from_utf8(&self.s[start..self.pos]).unwrap_or_default();
        match text.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Value::Float(f)),
            _ => {
                self.range_error.get_or_insert_with(|| {
                    "json: cannot unmarshal number into Go value of type float64".into()
                });
                Ok(Value::Nil)
            }
        }
    }

    fn end_or(&self, context: &str) -> String {
        if self.peek().is_none() {
            truncated(context)
        } else {
            syntax(context)
        }
    }

    /// A string literal, the position at its opening quote. Escapes as Go decodes them: an
    /// unpaired surrogate becomes U+FFFD.
    fn string(&mut self) -> Result<String, String> {
        self.pos += 1;
        let mut out = String::new();
        loop {
            let rest = &self.s[self.pos..];
            let plain = rest
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .ok_or_else(|| END.to_owned())?;
            out.push_str(std::str::from_utf8(&rest[..plain]).unwrap_or_default());
            self.pos += plain;
            match self.s[self.pos] {
                b'"' => {
                    self.pos += 1;
                    return Ok(out);
                }
                b'\\' => {
                    self.pos += 1;
                    let escape = self
                        .peek()
                        .ok_or_else(|| truncated("in string escape code"))?;
                    self.pos += 1;
                    let c = match escape {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => return Err(syntax("in string escape code")),
                    };
                    out.push(c);
                }
                _ => return Err(syntax("in string literal")),
            }
        }
    }

    /// The four hex digits after `\u`, and a low surrogate's `\uXXXX` after a high one.
    fn unicode_escape(&mut self) -> Result<char, String> {
        let first = self.hex4()?;
        if !(0xD800..0xE000).contains(&first) {
            return Ok(char::from_u32(first).unwrap_or('\u{fffd}'));
        }
        let s = self.s;
        let low = (s.get(self.pos) == Some(&b'\\') && s.get(self.pos + 1) == Some(&b'u'))
            .then(|| std::str::from_utf8(s.get(self.pos + 2..self.pos + 6)?).ok())
            .flatten()
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .filter(|low| (0xD800..0xDC00).contains(&first) && (0xDC00..0xE000).contains(low));
        match low {
            Some(low) => {
                self.pos += 6;
                let c = 0x10000 + ((first - 0xD800) << 10) + (low - 0xDC00);
                Ok(char::from_u32(c).unwrap_or('\u{fffd}'))
            }
            None => Ok('\u{fffd}'),
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let mut n = 0;
        for _ in 0..4 {
            const CONTEXT: &str = "in \\u hexadecimal character escape";
            let b = self.peek().ok_or_else(|| truncated(CONTEXT))?;
            let d = char::from(b).to_digit(16).ok_or_else(|| syntax(CONTEXT))?;
            n = n * 16 + d;
            self.pos += 1;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{b, check, f, i, l, m, nil, s, t};
    use crate::value::Value;

    #[test]
    fn encoding_matches_go() {
        check(&[
            (
                "toJson",
                vec![l(vec![
                    f(1.0),
                    f(1e21),
                    f(1e20),
                    f(0.000001),
                    f(1e-7),
                    f(-1.5e-10),
                    f(123456789.0),
                ])],
                "[1,1e+21,100000000000000000000,0.000001,1e-7,-1.5e-10,123456789]",
            ),
            (
                "toJson",
                vec![l(vec![
                    s("<&>"),
                    s("\u{2028}"),
                    s("\u{8}\u{c}\u{1}\u{7f}é\"\\/"),
                ])],
                "[\"\\u003c\\u0026\\u003e\",\"\\u2028\",\"\\b\\f\\u0001\u{7f}é\\\"\\\\/\"]",
            ),
            (
                "toRawJson",
                vec![l(vec![s("<&>"), s("\u{2028}")])],
                r#"["<&>","\u2028"]"#,
            ),
            (
                "toJson",
                vec![m(&[("b", i(1)), ("a", nil()), ("c", t(true))])],
                r#"{"a":null,"b":1,"c":true}"#,
            ),
            ("toJson", vec![b(b"hello")], r#""aGVsbG8=""#),
            ("toJson", vec![nil()], "null"),
            ("toJson", vec![f(f64::NAN)], ""),
            (
                "mustToJson",
                vec![f(f64::NAN)],
                "ERR:json: unsupported value: NaN",
            ),
            (
                "toRawJson",
                vec![f(f64::INFINITY)],
                "ERR:json: unsupported value: +Inf",
            ),
            (
                "toPrettyJson",
                vec![m(&[
                    ("a", l(vec![])),
                    ("b", m(&[])),
                    ("c", l(vec![i(1), m(&[("d", s("<"))])])),
                ])],
                "{\n  \"a\": [],\n  \"b\": {},\n  \"c\": [\n    1,\n    {\n      \"d\": \"\\u003c\"\n    }\n  ]\n}",
            ),
            ("mustToPrettyJson", vec![s("x")], r#""x""#),
        ]);
    }

    #[test]
    fn decoding_matches_go() {
        check(&[
            (
                "fromJson",
                vec![s(r#"{"a": [1, 2.5, "x", true, null], "b": {"c": 1e6}}"#)],
                "map[a:[1 2.5 x true <nil>] b:map[c:1e+06]]",
            ),
            ("fromJson", vec![s(" 123456789 ")], "1.23456789e+08"),
            (
                "fromJson",
                vec![s(r#""\u00e9\ud83d\ude00\ud800x\/""#)],
                "é😀\u{fffd}x/",
            ),
            ("fromJson", vec![s(r#"{"a":1,"a":2}"#)], "map[a:2]"),
            ("fromJson", vec![s("{bad")], "<no value>"),
            ("fromJson", vec![s("")], "<no value>"),
            ("fromJson", vec![s("[1, 1e400, 2]")], "[1 <nil> 2]"),
            (
                "mustFromJson",
                vec![s("[1, 1e400, 2]")],
                "ERR:json: cannot unmarshal number into Go value of type float64",
            ),
            (
                "mustFromJson",
                vec![s("")],
                "ERR:unexpected end of JSON input",
            ),
            (
                "mustFromJson",
                vec![s("[1,")],
                "ERR:unexpected end of JSON input",
            ),
            (
                "mustFromJson",
                vec![s("{bad")],
                "ERR:invalid character looking for beginning of object key string",
            ),
            (
                "mustFromJson",
                vec![s("x")],
                "ERR:invalid character looking for beginning of value",
            ),
            (
                "mustFromJson",
                vec![s("[1 2]")],
                "ERR:invalid character after array element",
            ),
            (
                "mustFromJson",
                vec![s(r#"{"a" 1}"#)],
                "ERR:invalid character after object key",
            ),
            (
                "mustFromJson",
                vec![s(r#"{"a":1 "b":2}"#)],
                "ERR:invalid character after object key:value pair",
            ),
            (
                "mustFromJson",
                vec![s("1 2")],
                "ERR:invalid character after top-level value",
            ),
            (
                "mustFromJson",
                vec![s("tru")],
                "ERR:invalid character ' ' in literal true (expecting 'e')",
            ),
            (
                "mustFromJson",
                vec![s("trux")],
                "ERR:invalid character in literal true (expecting 'e')",
            ),
            (
                "mustFromJson",
                vec![s("01")],
                "ERR:invalid character after top-level value",
            ),
            (
                "mustFromJson",
                vec![s("1.")],
                "ERR:invalid character ' ' after decimal point in numeric literal",
            ),
            (
                "mustFromJson",
                vec![s("-")],
                "ERR:invalid character ' ' in numeric literal",
            ),
            (
                "mustFromJson",
                vec![s("1e")],
                "ERR:invalid character ' ' in exponent of numeric literal",
            ),
            (
                "mustFromJson",
                vec![s("\"a\\")],
                "ERR:invalid character ' ' in string escape code",
            ),
            (
                "mustFromJson",
                vec![s("\"\\u12")],
                "ERR:invalid character ' ' in \\u hexadecimal character escape",
            ),
            (
                "mustFromJson",
                vec![s("\"ab")],
                "ERR:unexpected end of JSON input",
            ),
            (
                "mustFromJson",
                vec![s("{\"a\"")],
                "ERR:unexpected end of JSON input",
            ),
            (
                "mustFromJson",
                vec![s("  ")],
                "ERR:unexpected end of JSON input",
            ),
            (
                "mustFromJson",
                vec![s("1.x")],
                "ERR:invalid character after decimal point in numeric literal",
            ),
            (
                "mustFromJson",
                vec![s("-x")],
                "ERR:invalid character in numeric literal",
            ),
            (
                "mustFromJson",
                vec![s("1ex")],
                "ERR:invalid character in exponent of numeric literal",
            ),
            (
                "mustFromJson",
                vec![s("\"a\tb\"")],
                "ERR:invalid character in string literal",
            ),
            (
                "mustFromJson",
                vec![s(r#""\x""#)],
                "ERR:invalid character in string escape code",
            ),
            (
                "mustFromJson",
                vec![s(r#""\u12x4""#)],
                "ERR:invalid character in \\u hexadecimal character escape",
            ),
            (
                "mustFromJson",
                vec![s(r#"{"a":{"b":[]}}"#)],
                "map[a:map[b:[]]]",
            ),
        ]);
    }

    #[test]
    fn times_encode_as_rfc3339() {
        let zoned = |text: &str| text.parse::<jiff::Zoned>().expect("a valid time");
        let utc = Value::Time(zoned("2024-01-02T03:04:05.12Z[UTC]"));
        let offset = Value::Time(zoned("2024-01-02T03:04:05+02:00[+02:00]"));
        let list = Value::List(vec![utc, offset]);
        assert_eq!(
            super::encode(&list, true, false).unwrap(),
            r#"["2024-01-02T03:04:05.12Z","2024-01-02T03:04:05+02:00"]"#
        );
    }

    #[test]
    fn nesting_is_bounded_without_recursion() {
        let deep = format!("{}{}", "[".repeat(1_000), "]".repeat(1_000));
        assert!(super::decode(&deep).is_ok());
        let deeper = format!("{}{}", "[".repeat(1_001), "]".repeat(1_001));
        assert_eq!(
            super::decode(&deeper).unwrap_err(),
            "invalid character exceeded max depth"
        );
    }
}
