//! Go's `time.ParseDuration`, the format of every interval in ESO's API (and of a class's
//! `spec.callTimeout`).

use std::time::Duration;

/// Parses `1h30m`, `90s`, `1.5h`, `0`. Errors say what was wrong, for a status message.
pub fn parse(s: &str) -> Result<Duration, String> {
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration".into());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("missing unit in duration {s:?}"))?;
        let value: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("invalid duration {s:?}"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            unit => return Err(format!("unknown unit {unit:?} in duration {s:?}")),
        };
        total += value * nanos;
        rest = &rest[unit_len..];
    }
    Ok(Duration::from_nanos(total as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        assert_eq!(parse("0s").unwrap(), Duration::ZERO);
        assert!(parse("10").is_err());
        assert!(parse("10 minutes").is_err());
        assert!(parse("").is_err());
    }
}
