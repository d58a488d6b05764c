//! Go's `fmt` for template values: `Sprint`, `Sprintln`, `Sprintf` with Go's verbs and its
//! `%!verb(type=value)` error forms.

use crate::value::Value;

/// `fmt.Sprint(v)` of one value (`%v`).
pub fn sprint_value(v: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, v);
    out
}

fn write_value(out: &mut String, v: &Value) {
    match v {
        // A nil on its own is what a template prints for a missing value; inside a container
        // Go prints the nil interface.
        Value::Nil => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::Float(f) => out.push_str(&format_float_v(*f)),
        Value::String(s) => out.push_str(s),
        Value::Bytes(b) => {
            out.push('[');
            for (i, byte) in b.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(&byte.to_string());
            }
            out.push(']');
        }
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Map(map) => {
            out.push_str("map[");
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Time(t) => out.push_str(&go_time_string(t)),
    }
}

/// `%v` of a float64: the shortest digits that round-trip, in `%e` form when the decimal
/// exponent is below -4 or at least 6 (Go's `strconv.FormatFloat(f, 'g', -1, 64)`): a JSON
/// number 1000000 prints `1e+06` in ESO's templates, and so it must here.
pub fn format_float_v(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "1.2345e6".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} always has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if negative { "-" } else { "" };
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{dot}e{esign}{:02}", exp.abs());
    }
    let point = exp + 1;
    if point <= 0 {
        format!(
            "{sign}0.{}{digits}",
            "0".repeat(point.unsigned_abs() as usize)
        )
    } else if point as usize >= digits.len() {
        format!(
            "{sign}{digits}{}",
            "0".repeat(point as usize - digits.len())
        )
    } else {
        let (int, frac) = digits.split_at(point as usize);
        format!("{sign}{int}.{frac}")
    }
}

/// `time.Time.String()`: `2006-01-02 15:04:05.999999999 -0700 MST`.
fn go_time_string(t: &jiff::Zoned) -> String {
    let nanos = t.subsec_nanosecond();
    let frac = if nanos == 0 {
        String::new()
    } else {
        format!(".{nanos:09}").trim_end_matches('0').to_owned()
    };
    let offset = t.offset().seconds();
    let (osign, oabs) = if offset < 0 {
        ('-', -offset)
    } else {
        ('+', offset)
    };
    let abbreviation = t
        .time_zone()
        .to_offset_info(t.timestamp())
        .abbreviation()
        .to_string();
    format!(
        "{}{frac} {osign}{:02}{:02} {abbreviation}",
        t.strftime("%Y-%m-%d %H:%M:%S"),
        oabs / 3600,
        (oabs % 3600) / 60
    )
}

/// `fmt.Sprint(args...)`: a space between operands when neither side is a string.
pub fn sprint(args: &[Value]) -> String {
    let mut out = String::new();
    for (i, arg) in args.iter().enumerate() {
        let is_string = matches!(arg, Value::String(_));
        if i > 0 && !is_string && !matches!(args[i - 1], Value::String(_)) {
            out.push(' ');
        }
        write_value(&mut out, arg);
    }
    out
}

/// `fmt.Sprintln(args...)`: spaces between all operands and a newline.
pub fn sprintln(args: &[Value]) -> String {
    let mut out = args.iter().map(sprint_value).collect::<Vec<_>>().join(" ");
    out.push('\n');
    out
}

/// `fmt.Sprintf(format, args...)`.
pub fn sprintf(format: &str, args: &[Value]) -> String {
    let _ = (format, args);
    unimplemented!("language helper")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_go_prints_them() {
        for (f, go) in [
            (5432.0, "5432"),
            (1e6, "1e+06"),
            (123456789.0, "1.23456789e+08"),
            (100000.0, "100000"),
            (0.5, "0.5"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5, "-2.5"),
            (1e21, "1e+21"),
            (1e20, "1e+20"),
            (1234567.0, "1.234567e+06"),
            (999999.0, "999999"),
        ] {
            assert_eq!(format_float_v(f), go, "{f}");
        }
    }

    #[test]
    fn containers_print_as_go_prints_them() {
        let v = Value::List(vec![Value::from("a"), Value::Int(1), Value::Nil]);
        assert_eq!(sprint_value(&v), "[a 1 <nil>]");
        assert_eq!(
            sprint(&[
                Value::Int(1),
                Value::Int(2),
                Value::from("x"),
                Value::Int(3)
            ]),
            "1 2x3"
        );
    }
}
