//! yaml.v2's reading of a plain scalar (YAML 1.1: `yes`, `on`, `0x1F`, `1_000`, dates...).
//! Marshalling quotes every string that would read back as something else.

/// What a plain scalar means.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    Null,
    Bool(bool),
    /// Either an `int64` or (beyond its range) a `uint64`.
    Int(i128),
    Float(f64),
    /// A date or time; yaml.v2 hands it to an `interface{}` as the original string.
    Timestamp,
    Str,
}

fn lookup(s: &str) -> Option<Scalar> {
    Some(match s {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            Scalar::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            Scalar::Bool(false)
        }
        "" | "~" | "null" | "Null" | "NULL" => Scalar::Null,
        ".nan" | ".NaN" | ".NAN" => Scalar::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => Scalar::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => Scalar::Float(f64::NEG_INFINITY),
        _ => return None,
    })
}

/// Go's `strconv.ParseInt(s, 0, 64)` (and `ParseUint` when `signed` is false), underscores
/// already removed.
fn go_parse_int(s: &str, signed: bool) -> Option<i128> {
    let (neg, digits) = match s.as_bytes().first()? {
        b'+' | b'-' if signed => (s.starts_with('-'), &s[1..]),
        _ => (false, s),
    };
    let lower = digits.get(..2).map(str::to_ascii_lowercase);
    let (radix, body) = match lower.as_deref() {
        Some("0x") => (16, &digits[2..]),
        Some("0o") => (8, &digits[2..]),
        Some("0b") => (2, &digits[2..]),
        _ if digits.len() > 1 && digits.starts_with('0') => (8, &digits[1..]),
        _ => (10, digits),
    };
    if body.is_empty() || !body.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u128::from_str_radix(body, radix).ok()?;
    let value = if neg {
        -i128::try_from(magnitude).ok()?
    } else {
        i128::try_from(magnitude).ok()?
    };
    let fits = if signed {
        i64::try_from(value).is_ok()
    } else {
        u64::try_from(value).is_ok()
    };
    fits.then_some(value)
}

/// yaml.v2's float syntax: `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`.
fn is_yaml_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let digits = |i: &mut usize| {
        let start = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// Go's `strconv.ParseFloat` for the decimal forms that reach it here: out of range is an
/// error, not an infinity.
fn go_parse_float(s: &str) -> Option<f64> {
    let lower = s.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if body.starts_with("inf") || body.starts_with("nan") {
        return matches!(body, "inf" | "infinity" | "nan").then(|| s.parse().ok())?;
    }
    s.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// A number of 1 to `max` digits at the start of `s`, and the rest.
fn number(s: &str, min: usize, max: usize) -> Option<(u32, &str)> {
    let n = s.bytes().take(max).take_while(u8::is_ascii_digit).count();
    if n < min {
        return None;
    }
    Some((s[..n].parse().ok()?, &s[n..]))
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// yaml.v2's timestamps: `2006-1-2`, `2006-1-2 15:4:5[.frac]`, and `2006-1-2T15:4:5[.frac]`
/// with `Z` or `±hh:mm`, as Go's `time.Parse` accepts those layouts.
fn is_timestamp(s: &str) -> bool {
    let parse = || -> Option<()> {
        let (year, r) = number(s, 4, 4)?;
        let r = r.strip_prefix('-')?;
        let (month, r) = number(r, 1, 2)?;
        let r = r.strip_prefix('-')?;
        let (day, r) = number(r, 1, 2)?;
        if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
            return None;
        }
        if r.is_empty() {
            return Some(());
        }
        let zoned = r.starts_with(['T', 't']);
        let r = r.strip_prefix(['T', 't', ' '])?;
        let (hour, r) = number(r, 1, 2)?;
        let (minute, r) = number(r.strip_prefix(':')?, 1, 2)?;
        let (second, mut r) = number(r.strip_prefix(':')?, 1, 2)?;
        if hour > 23 || minute > 59 || second > 59 {
            return None;
        }
        if let Some(frac) = r.strip_prefix('.') {
            let n = frac.bytes().take_while(u8::is_ascii_digit).count();
            if n == 0 {
                return None;
            }
            r = &frac[n..];
        }
        if !zoned {
            return r.is_empty().then_some(());
        }
        if r == "Z" {
            return Some(());
        }
        let r = r.strip_prefix(['+', '-'])?;
        let (oh, r) = number(r, 2, 2)?;
        let (om, r) = number(r.strip_prefix(':')?, 2, 2)?;
        (r.is_empty() && oh < 24 && om < 60).then_some(())
    };
    parse().is_some()
}

/// yaml.v2's `resolve` of an untagged plain scalar.
pub fn resolve(s: &str) -> Scalar {
    let Some(&first) = s.as_bytes().first() else {
        return Scalar::Null;
    };
    let hint = match first {
        b'+' | b'-' | b'0'..=b'9' => 'D',
        b'y' | b'Y' | b'n' | b'N' | b't' | b'T' | b'f' | b'F' | b'o' | b'O' | b'~' => 'M',
        b'.' => '.',
        _ => return Scalar::Str,
    };
    if let Some(v) = lookup(s) {
        return v;
    }
    match hint {
        '.' => go_parse_float(s).map_or(Scalar::Str, Scalar::Float),
        'D' => {
            if is_timestamp(s) {
                return Scalar::Timestamp;
            }
            let plain = s.replace('_', "");
            if let Some(i) = go_parse_int(&plain, true).or_else(|| go_parse_int(&plain, false)) {
                return Scalar::Int(i);
            }
            if let Some(f) = go_parse_float(&plain).filter(|_| is_yaml_float(&plain)) {
                return Scalar::Float(f);
            }
            Scalar::Str
        }
        _ => Scalar::Str,
    }
}

/// Sexagesimal numbers (`1:20`): YAML 1.1 floats yaml.v2 no longer reads, but still quotes.
pub fn is_base60_float(s: &str) -> bool {
    let b = s.as_bytes();
    if !matches!(b.first(), Some(b'+' | b'-' | b'0'..=b'9')) || !s.contains(':') {
        return false;
    }
    let mut i = usize::from(matches!(b[0], b'+' | b'-'));
    if !b.get(i).is_some_and(u8::is_ascii_digit) {
        return false;
    }
    while b.get(i).is_some_and(|c| c.is_ascii_digit() || *c == b'_') {
        i += 1;
    }
    let mut groups = 0;
    while b.get(i) == Some(&b':') {
        i += 1;
        let n = b[i..]
            .iter()
            .take(2)
            .take_while(|c| c.is_ascii_digit())
            .count();
        let ok = match n {
            1 => true,
            2 => b[i] <= b'5',
            _ => false,
        };
        if !ok {
            return false;
        }
        i += n;
        groups += 1;
    }
    if groups == 0 {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        while b.get(i).is_some_and(|c| c.is_ascii_digit() || *c == b'_') {
            i += 1;
        }
    }
    i == b.len()
}
