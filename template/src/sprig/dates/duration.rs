//! Go's `time.Duration`: `ParseDuration`, `String()` and `Round`, on nanoseconds in an i64.

const SECOND: i64 = 1_000_000_000;

/// Go's `Duration.String()`: `1h2m3.5s`, `1.5ms`, `0s`.
pub(crate) fn to_string(d: i64) -> String {
    if d == 0 {
        return "0s".into();
    }
    let mut u = d.unsigned_abs();
    let mut out: Vec<String> = Vec::new();
    if u < SECOND as u64 {
        let (prec, unit) = match u {
            0..1_000 => (0, "ns"),
            1_000..1_000_000 => (3, "µs"),
            _ => (6, "ms"),
        };
        out.push(unit.into());
        let (frac, rest) = fraction(u, prec);
        out.push(frac);
        out.push(rest.to_string());
    } else {
        out.push("s".into());
        let (frac, secs) = fraction(u, 9);
        out.push(frac);
        u = secs;
        out.push((u % 60).to_string());
        u /= 60;
        if u > 0 {
            out.push("m".into());
            out.push((u % 60).to_string());
            u /= 60;
            if u > 0 {
                out.push("h".into());
                out.push(u.to_string());
            }
        }
    }
    if d < 0 {
        out.push("-".into());
    }
    out.reverse();
    out.concat()
}

/// Go's `fmtFrac`: the lowest `prec` digits of `v` as a fraction without trailing zeros
/// (nothing when they are all zero), and `v` without them.
fn fraction(v: u64, prec: u32) -> (String, u64) {
    let scale = 10u64.pow(prec);
    let digits = v % scale;
    if digits == 0 {
        return (String::new(), v / scale);
    }
    let text = format!("{digits:0width$}", width = prec as usize);
    (format!(".{}", text.trim_end_matches('0')), v / scale)
}

/// Go's `Duration.Round(m)`: to the nearest multiple, halves away from zero, saturating.
pub(crate) fn round(d: i64, m: i64) -> i64 {
    let r = d % m;
    let less_than_half = |x: i64| (x as u64).wrapping_add(x as u64) < m as u64;
    if d < 0 {
        let r = -r;
        if less_than_half(r) {
            return d + r;
        }
        return d.checked_sub(m - r).unwrap_or(i64::MIN);
    }
    if less_than_half(r) {
        return d - r;
    }
    d.checked_add(m - r).unwrap_or(i64::MAX)
}

/// Go's `time.ParseDuration`: a sequence of decimal numbers with units (`ns`, `us`, `µs`,
/// `ms`, `s`, `m`, `h`), optionally signed; "0" needs no unit.
pub(crate) fn parse(s: &str) -> Result<i64, String> {
    let invalid = || "time: invalid duration".to_owned();
    const LIMIT: u64 = 1 << 63;
    let mut rest = s.as_bytes();
    let mut negative = false;
    if let Some((&c, tail)) = rest.split_first()
        && (c == b'-' || c == b'+')
    {
        negative = c == b'-';
        rest = tail;
    }
    if rest == b"0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        if !(rest[0] == b'.' || rest[0].is_ascii_digit()) {
            return Err(invalid());
        }
        let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
        let mut whole: u64 = 0;
        for &c in &rest[..digits] {
            whole = whole
                .checked_mul(10)
                .and_then(|w| w.checked_add(u64::from(c - b'0')))
                .filter(|w| *w <= LIMIT)
                .ok_or_else(invalid)?;
        }
        rest = &rest[digits..];
        let mut fraction: u64 = 0;
        let mut scale = 1f64;
        let mut fraction_digits = 0;
        if rest.first() == Some(&b'.') {
            rest = &rest[1..];
            fraction_digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
            let mut overflow = false;
            for &c in &rest[..fraction_digits] {
                if overflow {
                    continue;
                }
                match fraction
                    .checked_mul(10)
                    .and_then(|f| f.checked_add(u64::from(c - b'0')))
                    .filter(|f| *f <= LIMIT)
                {
                    Some(f) if fraction <= (LIMIT - 1) / 10 => {
                        fraction = f;
                        scale *= 10.0;
                    }
                    _ => overflow = true,
                }
            }
            rest = &rest[fraction_digits..];
        }
        if digits == 0 && fraction_digits == 0 {
            return Err(invalid());
        }
        let unit_len = rest
            .iter()
            .take_while(|c| **c != b'.' && !c.is_ascii_digit())
            .count();
        if unit_len == 0 {
            return Err("time: missing unit in duration".into());
        }
        let unit: u64 = match &rest[..unit_len] {
            b"ns" => 1,
            b"us" | b"\xc2\xb5s" | b"\xce\xbcs" => 1_000, // us, µ (micro sign) s, μ (mu) s
            b"ms" => 1_000_000,
            b"s" => 1_000_000_000,
            b"m" => 60_000_000_000,
            b"h" => 3_600_000_000_000,
            _ => return Err("time: unknown unit in duration".into()),
        };
        rest = &rest[unit_len..];
        if whole > LIMIT / unit {
            return Err(invalid());
        }
        let mut value = whole * unit;
        if fraction > 0 {
            value += (fraction as f64 * (unit as f64 / scale)) as u64;
            if value > LIMIT {
                return Err(invalid());
            }
        }
        total = total
            .checked_add(value)
            .filter(|t| *t <= LIMIT)
            .ok_or_else(invalid)?;
    }
    if negative {
        return Ok((total as i64).wrapping_neg());
    }
    i64::try_from(total).map_err(|_| invalid())
}
