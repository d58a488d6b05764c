//! Go's builtin template functions that take evaluated arguments. `and`, `or`, `call` and
//! `printf` need the executor (lazy arguments, a typed format, the output limit) and live
//! there; their arities are here with the others'.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::funcs::Arity;
use crate::gofmt;
use crate::value::Value;

/// The arity of a builtin, or `None` when `name` is not one.
pub(crate) fn arity(name: &str) -> Option<Arity> {
    Some(match name {
        "and" | "or" | "call" | "printf" | "index" | "slice" | "eq" => Arity::AtLeast(1),
        "html" | "js" | "urlquery" | "print" | "println" => Arity::AtLeast(0),
        "len" | "not" => Arity::Exact(1),
        "ne" | "lt" | "le" | "gt" | "ge" => Arity::Exact(2),
        _ => return None,
    })
}

/// Tells Go's `map[string]string` (ESO's data) from a `map[string]interface{}`.
pub(crate) type StringMap<'a> = &'a dyn Fn(&BTreeMap<String, Value>) -> bool;

/// Calls a builtin; the arity has been checked. The error is the message Go's function returns.
pub(crate) fn call(name: &str, args: &[Value], string_map: StringMap<'_>) -> Result<Value, String> {
    Ok(match name {
        "not" => Value::Bool(!args[0].truth()),
        "len" => length(&args[0])?,
        "index" => index(&args[0], &args[1..], string_map)?,
        "slice" => slice(&args[0], &args[1..])?,
        "print" => Value::String(gofmt::sprint(args)),
        "println" => Value::String(gofmt::sprintln(args)),
        "html" => Value::String(html_escape(&eval_args(args))),
        "js" => Value::String(js_escape(&eval_args(args))),
        "urlquery" => Value::String(query_escape(&eval_args(args))),
        "eq" => Value::Bool(eq(&args[0], &args[1..])?),
        "ne" => Value::Bool(!eq(&args[0], &args[1..2])?),
        "lt" => Value::Bool(lt(&args[0], &args[1])?),
        "le" => Value::Bool(lt(&args[0], &args[1])? || eq(&args[0], &args[1..2])?),
        "gt" => Value::Bool(!(lt(&args[0], &args[1])? || eq(&args[0], &args[1..2])?)),
        "ge" => Value::Bool(!lt(&args[0], &args[1])?),
        _ => return Err(format!("{name} is not a builtin")),
    })
}

fn length(item: &Value) -> Result<Value, String> {
    let n = match item {
        Value::String(s) => s.len(),
        Value::Bytes(b) => b.len(),
        Value::List(l) => l.len(),
        Value::Map(m) => m.len(),
        // Go's reflection panics on the nil and the call recovers with this text.
        Value::Nil => return Err("reflect: call of reflect.Value.Type on zero Value".into()),
        other => return Err(format!("len of type {}", other.go_type())),
    };
    Ok(Value::Int(i64::try_from(n).unwrap_or(i64::MAX)))
}

/// Go's `indexArg`: an int index within `0..=cap`.
fn index_arg(index: &Value, cap: usize) -> Result<usize, String> {
    let x = match index {
        Value::Int(i) => *i,
        Value::Nil => return Err("cannot index slice/array with nil".into()),
        other => {
            return Err(format!(
                "cannot index slice/array with type {}",
                other.go_type()
            ));
        }
    };
    match usize::try_from(x) {
        Ok(i) if i <= cap => Ok(i),
        _ => Err(format!("index out of range: {x}")),
    }
}

fn index(item: &Value, indexes: &[Value], string_map: StringMap<'_>) -> Result<Value, String> {
    if matches!(item, Value::Nil) {
        return Err("index of untyped nil".into());
    }
    let mut item = item.clone();
    for index in indexes {
        item = match &item {
            Value::Nil => return Err("index of nil pointer".into()),
            Value::List(l) => {
                let i = index_arg(index, l.len())?;
                l.get(i)
                    .cloned()
                    .ok_or("reflect: slice index out of range")?
            }
            Value::Bytes(b) => {
                let i = index_arg(index, b.len())?;
                Value::Int(i64::from(
                    *b.get(i).ok_or("reflect: slice index out of range")?,
                ))
            }
            Value::String(s) => {
                let i = index_arg(index, s.len())?;
                Value::Int(i64::from(
                    *s.as_bytes()
                        .get(i)
                        .ok_or("reflect: string index out of range")?,
                ))
            }
            Value::Map(m) => {
                let key = match index {
                    Value::String(k) => k,
                    Value::Nil => return Err("value is nil; should be of type string".into()),
                    other => {
                        return Err(format!(
                            "value has type {}; should be string",
                            other.go_type()
                        ));
                    }
                };
                match m.get(key) {
                    Some(v) => v.clone(),
                    // The zero value of the map's element type.
                    None if string_map(m) => Value::String(String::new()),
                    None => Value::Nil,
                }
            }
            other => return Err(format!("can't index item of type {}", other.go_type())),
        };
    }
    Ok(item)
}

fn slice(item: &Value, indexes: &[Value]) -> Result<Value, String> {
    if matches!(item, Value::Nil) {
        return Err("slice of untyped nil".into());
    }
    if indexes.len() > 3 {
        return Err(format!("too many slice indexes: {}", indexes.len()));
    }
    let len = match item {
        Value::String(s) => {
            if indexes.len() == 3 {
                return Err("cannot 3-index slice a string".into());
            }
            s.len()
        }
        Value::List(l) => l.len(),
        Value::Bytes(b) => b.len(),
        other => return Err(format!("can't slice item of type {}", other.go_type())),
    };
    let mut idx = [0, len, len];
    for (i, index) in indexes.iter().enumerate() {
        idx[i] = index_arg(index, len)?;
    }
    if idx[0] > idx[1] {
        return Err(format!("invalid slice index: {} > {}", idx[0], idx[1]));
    }
    if indexes.len() == 3 && idx[1] > idx[2] {
        return Err(format!("invalid slice index: {} > {}", idx[1], idx[2]));
    }
    let (from, to) = (idx[0], idx[1]);
    Ok(match item {
        // Go slices bytes; a cut inside a character becomes U+FFFD here.
        Value::String(s) => {
            Value::String(String::from_utf8_lossy(&s.as_bytes()[from..to]).into_owned())
        }
        Value::List(l) => Value::List(l[from..to].to_vec()),
        Value::Bytes(b) => Value::Bytes(b[from..to].to_vec()),
        _ => Value::Nil,
    })
}

/// The comparison kinds of Go's `eq` and `lt`; `None` is Go's `invalidKind`.
#[derive(PartialEq, Eq)]
enum Kind {
    Bool,
    Int,
    Float,
    String,
}

fn basic_kind(v: &Value) -> Option<Kind> {
    match v {
        Value::Bool(_) => Some(Kind::Bool),
        Value::Int(_) => Some(Kind::Int),
        Value::Float(_) => Some(Kind::Float),
        Value::String(_) => Some(Kind::String),
        _ => None,
    }
}

fn incompatible(a: &Value, b: &Value) -> String {
    format!(
        "incompatible types for comparison: {} and {}",
        a.go_type(),
        b.go_type()
    )
}

fn eq(first: &Value, others: &[Value]) -> Result<bool, String> {
    if others.is_empty() {
        return Err("missing argument for comparison".into());
    }
    let k1 = basic_kind(first);
    for other in others {
        let k2 = basic_kind(other);
        let truth = if k1 != k2 {
            if !matches!(first, Value::Nil) && !matches!(other, Value::Nil) {
                return Err(incompatible(first, other));
            }
            false
        } else {
            match (first, other) {
                (Value::Bool(a), Value::Bool(b)) => a == b,
                (Value::Int(a), Value::Int(b)) => a == b,
                (Value::Float(a), Value::Float(b)) => a == b,
                (Value::String(a), Value::String(b)) => a == b,
                (Value::Nil, _) | (_, Value::Nil) => {
                    matches!(first, Value::Nil) && matches!(other, Value::Nil)
                }
                (Value::Time(a), Value::Time(b)) => a == b,
                // Go's messages here print the values; only the types are named here.
                (a, b) if std::mem::discriminant(a) != std::mem::discriminant(b) => {
                    return Err(format!(
                        "non-comparable types {} and {}",
                        a.go_type(),
                        b.go_type()
                    ));
                }
                (_, b) => return Err(format!("non-comparable type {}", b.go_type())),
            }
        };
        if truth {
            return Ok(true);
        }
    }
    Ok(false)
}

fn lt(a: &Value, b: &Value) -> Result<bool, String> {
    const BAD: &str = "invalid type for comparison";
    let (Some(k1), Some(k2)) = (basic_kind(a), basic_kind(b)) else {
        return Err(BAD.into());
    };
    if k1 != k2 {
        return Err(incompatible(a, b));
    }
    Ok(match (a, b) {
        (Value::Int(x), Value::Int(y)) => x < y,
        (Value::Float(x), Value::Float(y)) => x.partial_cmp(y) == Some(Ordering::Less),
        (Value::String(x), Value::String(y)) => x < y,
        _ => return Err(BAD.into()),
    })
}

/// Go's `evalArgs`: one string as is, else `fmt.Sprint` with nils shown as `<no value>`.
fn eval_args(args: &[Value]) -> String {
    if let [Value::String(s)] = args {
        return s.clone();
    }
    let shown: Vec<Value> = args
        .iter()
        .map(|a| match a {
            Value::Nil => Value::String("<no value>".into()),
            other => other.clone(),
        })
        .collect();
    gofmt::sprint(&shown)
}

/// Go's `template.HTMLEscapeString`.
pub(crate) fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\0' => out.push('\u{FFFD}'),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
    out
}

/// Go's `template.JSEscapeString`.
pub(crate) fn js_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '<' => out.push_str("\\u003C"),
            '>' => out.push_str("\\u003E"),
            '&' => out.push_str("\\u0026"),
            '=' => out.push_str("\\u003D"),
            _ if c < ' ' => out.push_str(&format!("\\u00{:02X}", c as u32)),
            _ if !c.is_ascii() && !gofmt::is_print(c) => {
                out.push_str(&format!("\\u{:04X}", c as u32))
            }
            _ => out.push(c),
        }
    }
    out
}

/// Go's `url.QueryEscape`.
pub(crate) fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b))
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The argument-less methods of `time.Time` a template can call as fields.
pub(crate) fn time_method(t: &jiff::Zoned, name: &str) -> Option<Value> {
    let ts = t.timestamp();
    Some(match name {
        "Year" => Value::Int(i64::from(t.year())),
        "Month" => Value::String(
            crate::gofmt::MONTH_NAMES[usize::try_from(t.month()).unwrap_or(1).clamp(1, 12) - 1]
                .into(),
        ),
        "Day" => Value::Int(i64::from(t.day())),
        "Hour" => Value::Int(i64::from(t.hour())),
        "Minute" => Value::Int(i64::from(t.minute())),
        "Second" => Value::Int(i64::from(t.second())),
        "Nanosecond" => Value::Int(i64::from(t.subsec_nanosecond())),
        "YearDay" => Value::Int(i64::from(t.day_of_year())),
        "Weekday" => Value::String(
            crate::gofmt::DAY_NAMES
                [usize::from(t.weekday().to_sunday_zero_offset().unsigned_abs())]
            .into(),
        ),
        "Unix" => Value::Int(ts.as_second()),
        "UnixMilli" => Value::Int(ts.as_millisecond()),
        "UnixMicro" => Value::Int(ts.as_microsecond()),
        "UnixNano" => Value::Int(i64::try_from(ts.as_nanosecond()).unwrap_or(i64::MAX)),
        "String" => Value::String(gofmt::sprint_value(&Value::Time(t.clone()))),
        "UTC" => Value::Time(t.with_time_zone(jiff::tz::TimeZone::UTC)),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapers_match_go() {
        assert_eq!(
            html_escape("<a href=\"x\">'&'\0</a>"),
            "&lt;a href=&#34;x&#34;&gt;&#39;&amp;&#39;\u{FFFD}&lt;/a&gt;"
        );
        assert_eq!(
            js_escape("a'b\"c\\d<e>f&g=h\n\u{1}é\u{200b}"),
            "a\\'b\\\"c\\\\d\\u003Ce\\u003Ef\\u0026g\\u003Dh\\u000A\\u0001é\\u200B"
        );
        assert_eq!(query_escape("a b&c=d/é~"), "a+b%26c%3Dd%2F%C3%A9~");
    }
}
