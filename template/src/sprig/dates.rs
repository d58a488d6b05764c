//! Sprig's date functions over `jiff::Zoned` (Go's `time.Time`), formatting and parsing with
//! Go's reference-time layouts. "Local" is the process's zone, as Go's `time.Local` is.

mod duration;
mod layout;

use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

use crate::funcs::{Arity, FuncError, FuncResult, Funcs, expect_string, wrong_type};
use crate::value::Value;

pub fn register(funcs: &mut Funcs) {
    funcs.insert("now", Arity::Exact(0), |_| Ok(Value::Time(Zoned::now())));
    funcs.insert("date", Arity::Exact(2), |a| {
        date_in_zone(expect_string(&a[0])?, &a[1], "Local")
    });
    funcs.insert("dateInZone", Arity::Exact(3), date_in_zone_fn);
    funcs.insert("date_in_zone", Arity::Exact(3), date_in_zone_fn);
    funcs.insert("htmlDate", Arity::Exact(1), |a| {
        date_in_zone("2006-01-02", &a[0], "Local")
    });
    funcs.insert("htmlDateInZone", Arity::Exact(2), |a| {
        date_in_zone("2006-01-02", &a[0], expect_string(&a[1])?)
    });
    funcs.insert("dateModify", Arity::Exact(2), date_modify);
    funcs.insert("date_modify", Arity::Exact(2), date_modify);
    funcs.insert("mustDateModify", Arity::Exact(2), must_date_modify);
    funcs.insert("must_date_modify", Arity::Exact(2), must_date_modify);
    funcs.insert("ago", Arity::Exact(1), ago);
    funcs.insert("toDate", Arity::Exact(2), |a| {
        Ok(Value::Time(
            parse_local(&a[0], &a[1])?.unwrap_or_else(|_| zero_time()),
        ))
    });
    funcs.insert("mustToDate", Arity::Exact(2), |a| {
        parse_local(&a[0], &a[1])?
            .map(Value::Time)
            .map_err(FuncError)
    });
    funcs.insert("unixEpoch", Arity::Exact(1), |a| {
        let t = expect_time(&a[0])?;
        Ok(Value::String(unix_seconds(t.timestamp()).to_string()))
    });
    funcs.insert("duration", Arity::Exact(1), duration_fn);
    funcs.insert("durationRound", Arity::Exact(1), duration_round);
}

/// Go's `time.Local`: the process's zone.
fn local() -> TimeZone {
    TimeZone::system()
}

/// Go's zero `time.Time`: January 1, year 1, 00:00:00 UTC.
fn zero_time() -> Zoned {
    jiff::civil::date(1, 1, 1)
        .at(0, 0, 0, 0)
        .to_zoned(TimeZone::UTC)
        .unwrap_or_else(|_| Zoned::now())
}

/// Go's `Time.Unix()`: whole seconds, rounded down.
fn unix_seconds(ts: Timestamp) -> i64 {
    ts.as_nanosecond().div_euclid(1_000_000_000) as i64
}

fn expect_time(v: &Value) -> Result<&Zoned, FuncError> {
    match v {
        Value::Time(t) => Ok(t),
        other => Err(wrong_type("time.Time", other)),
    }
}

/// Sprig's date argument: a time, or an integer of Unix seconds; anything else means now.
fn time_of(v: &Value) -> Zoned {
    match v {
        Value::Time(t) => t.clone(),
        Value::Int(secs) => Timestamp::from_second(*secs)
            .map(|ts| ts.to_zoned(TimeZone::UTC))
            .unwrap_or_else(|_| Zoned::now()),
        _ => Zoned::now(),
    }
}

/// Go's `time.LoadLocation`, falling back to UTC as sprig does: "" and "UTC" are UTC, "Local"
/// the process's zone, anything else an IANA name, spelled exactly.
fn load_zone(name: &str) -> TimeZone {
    match name {
        "" | "UTC" => TimeZone::UTC,
        "Local" => local(),
        _ => jiff::tz::db()
            .get(name)
            .ok()
            .filter(|tz| tz.iana_name() == Some(name))
            .unwrap_or(TimeZone::UTC),
    }
}

fn date_in_zone_fn(args: &[Value]) -> FuncResult {
    date_in_zone(expect_string(&args[0])?, &args[1], expect_string(&args[2])?)
}

fn date_in_zone(layout: &str, date: &Value, zone: &str) -> FuncResult {
    let t = time_of(date).with_time_zone(load_zone(zone));
    Ok(Value::String(layout::format(&t, layout)))
}

fn modified(args: &[Value]) -> Result<Result<Zoned, String>, FuncError> {
    let spec = expect_string(&args[0])?;
    let t = expect_time(&args[1])?;
    Ok(duration::parse(spec).and_then(|nanos| {
        t.checked_add(jiff::SignedDuration::from_nanos(nanos))
            .map_err(|_| "time out of range".to_owned())
    }))
}

/// `dateModify "-1.5h" t`: the time moved by a Go duration; unchanged if that does not parse.
fn date_modify(args: &[Value]) -> FuncResult {
    let unchanged = expect_time(&args[1])?.clone();
    Ok(Value::Time(modified(args)?.unwrap_or(unchanged)))
}

fn must_date_modify(args: &[Value]) -> FuncResult {
    modified(args)?.map(Value::Time).map_err(FuncError)
}

/// Nanoseconds from `t` to now, saturating as Go's `Time.Sub` does.
fn since(t: &Zoned) -> i64 {
    let nanos = Timestamp::now().as_nanosecond() - t.timestamp().as_nanosecond();
    nanos.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// `ago t`: the time since `t` (a time or Unix seconds), to the second.
fn ago(args: &[Value]) -> FuncResult {
    let t = match &args[0] {
        Value::Time(_) | Value::Int(_) => time_of(&args[0]),
        _ => Zoned::now(),
    };
    Ok(Value::String(duration::to_string(duration::round(
        since(&t),
        1_000_000_000,
    ))))
}

fn parse_local(layout: &Value, value: &Value) -> Result<Result<Zoned, String>, FuncError> {
    Ok(layout::parse(
        expect_string(layout)?,
        expect_string(value)?,
        &local(),
    ))
}

/// `duration secs`: seconds (a decimal string or an integer) as a Go duration.
fn duration_fn(args: &[Value]) -> FuncResult {
    let secs = match &args[0] {
        Value::String(s) => s.parse::<i64>().unwrap_or(0),
        Value::Int(i) => *i,
        _ => 0,
    };
    Ok(Value::String(duration::to_string(
        secs.wrapping_mul(1_000_000_000),
    )))
}

/// `durationRound d`: a duration (Go syntax string, integer nanoseconds, or the time since a
/// time) as its largest whole unit: `2h`, `3mo`, `1y`.
fn duration_round(args: &[Value]) -> FuncResult {
    let d = match &args[0] {
        Value::String(s) => duration::parse(s).unwrap_or(0),
        Value::Int(i) => *i,
        Value::Time(t) => since(t),
        _ => 0,
    };
    let u = d.unsigned_abs();
    const SECOND: u64 = 1_000_000_000;
    const MINUTE: u64 = 60 * SECOND;
    const HOUR: u64 = 60 * MINUTE;
    const DAY: u64 = 24 * HOUR;
    const MONTH: u64 = 30 * DAY;
    const YEAR: u64 = 365 * DAY;
    let text = [
        (YEAR, "y"),
        (MONTH, "mo"),
        (DAY, "d"),
        (HOUR, "h"),
        (MINUTE, "m"),
        (SECOND, "s"),
    ]
    .iter()
    .find(|(unit, _)| u > *unit)
    .map_or_else(
        || "0s".to_owned(),
        |(unit, suffix)| format!("{}{suffix}", u / unit),
    );
    Ok(Value::String(text))
}

#[cfg(test)]
mod tests;
