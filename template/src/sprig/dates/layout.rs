//! Go's reference-time layouts ("2006-01-02 15:04:05.000 MST"): the tokenizer, `Time.Format`
//! and `time.ParseInLocation`, over `jiff::Zoned`.

use jiff::civil::DateTime;
use jiff::tz::{Offset, TimeZone};
use jiff::{Zoned, civil};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Std {
    LongMonth,
    Month,
    NumMonth,
    ZeroMonth,
    LongWeekDay,
    WeekDay,
    Day,
    UnderDay,
    ZeroDay,
    UnderYearDay,
    ZeroYearDay,
    Hour,
    Hour12,
    ZeroHour12,
    Minute,
    ZeroMinute,
    Second,
    ZeroSecond,
    LongYear,
    Year,
    Pm,
    LowerPm,
    Tz,
    Iso8601Tz,
    Iso8601SecondsTz,
    Iso8601ShortTz,
    Iso8601ColonTz,
    Iso8601ColonSecondsTz,
    NumTz,
    NumSecondsTz,
    NumShortTz,
    NumColonTz,
    NumColonSecondsTz,
    /// Fractional seconds: separator, digit count, and whether trailing zeros are trimmed.
    Frac(u8, usize, bool),
}

/// Go's `nextStdChunk`: the literal text before the next element, the element, and the rest.
fn next_chunk(layout: &str) -> (&str, Option<Std>, &str) {
    let b = layout.as_bytes();
    let at = |i: usize, s: &str| b.len() >= i + s.len() && &b[i..i + s.len()] == s.as_bytes();
    let lower_at = |i: usize| b.get(i).is_some_and(u8::is_ascii_lowercase);
    for i in 0..b.len() {
        let found = |len: usize, std: Std| Some((i, std, i + len));
        let hit = match b[i] {
            b'J' if at(i, "January") => found(7, Std::LongMonth),
            b'J' if at(i, "Jan") && !lower_at(i + 3) => found(3, Std::Month),
            b'M' if at(i, "Monday") => found(6, Std::LongWeekDay),
            b'M' if at(i, "Mon") && !lower_at(i + 3) => found(3, Std::WeekDay),
            b'M' if at(i, "MST") => found(3, Std::Tz),
            b'0' if b.get(i + 1).is_some_and(|c| (b'1'..=b'6').contains(c)) => {
                let std = [
                    Std::ZeroMonth,
                    Std::ZeroDay,
                    Std::ZeroHour12,
                    Std::ZeroMinute,
                    Std::ZeroSecond,
                    Std::Year,
                ][usize::from(b[i + 1] - b'1')];
                found(2, std)
            }
            b'0' if at(i, "002") => found(3, Std::ZeroYearDay),
            b'1' if at(i, "15") => found(2, Std::Hour),
            b'1' => found(1, Std::NumMonth),
            b'2' if at(i, "2006") => found(4, Std::LongYear),
            b'2' => found(1, Std::Day),
            // "_2006" is a literal underscore before the year.
            b'_' if at(i, "_2006") => Some((i + 1, Std::LongYear, i + 5)),
            b'_' if at(i, "_2") => found(2, Std::UnderDay),
            b'_' if at(i, "__2") => found(3, Std::UnderYearDay),
            b'3' => found(1, Std::Hour12),
            b'4' => found(1, Std::Minute),
            b'5' => found(1, Std::Second),
            b'P' if at(i, "PM") => found(2, Std::Pm),
            b'p' if at(i, "pm") => found(2, Std::LowerPm),
            b'-' if at(i, "-070000") => found(7, Std::NumSecondsTz),
            b'-' if at(i, "-07:00:00") => found(9, Std::NumColonSecondsTz),
            b'-' if at(i, "-0700") => found(5, Std::NumTz),
            b'-' if at(i, "-07:00") => found(6, Std::NumColonTz),
            b'-' if at(i, "-07") => found(3, Std::NumShortTz),
            b'Z' if at(i, "Z070000") => found(7, Std::Iso8601SecondsTz),
            b'Z' if at(i, "Z07:00:00") => found(9, Std::Iso8601ColonSecondsTz),
            b'Z' if at(i, "Z0700") => found(5, Std::Iso8601Tz),
            b'Z' if at(i, "Z07:00") => found(6, Std::Iso8601ColonTz),
            b'Z' if at(i, "Z07") => found(3, Std::Iso8601ShortTz),
            c @ (b'.' | b',') if matches!(b.get(i + 1), Some(b'0' | b'9')) => {
                let digit = b[i + 1];
                let end = i + 1 + b[i + 1..].iter().take_while(|x| **x == digit).count();
                // Only a run of digits that is not followed by another digit is a fraction.
                if b.get(end).is_some_and(u8::is_ascii_digit) {
                    None
                } else {
                    Some((i, Std::Frac(c, end - i - 1, digit == b'9'), end))
                }
            }
            _ => None,
        };
        if let Some((start, std, end)) = hit {
            return (&layout[..start], Some(std), &layout[end..]);
        }
    }
    (layout, None, "")
}

use crate::gofmt::{DAY_NAMES as LONG_DAYS, MONTH_NAMES as LONG_MONTHS};

/// The zone abbreviation Go prints for `MST`.
fn abbreviation(t: &Zoned) -> String {
    t.time_zone()
        .to_offset_info(t.timestamp())
        .abbreviation()
        .to_string()
}

/// Go's `FixedZone(name, offset)`. Go prints an unnamed fixed zone's abbreviation as "-0700";
/// a POSIX zone carries that text (or the name) as its abbreviation, so that a time prints as
/// Go prints it everywhere.
fn fixed_zone(name: Option<&str>, offset: Offset) -> TimeZone {
    let seconds = offset.seconds();
    let abbreviation = match name {
        Some(name) => name.to_owned(),
        None => {
            let minutes = seconds.abs() / 60;
            let sign = if seconds < 0 { '-' } else { '+' };
            format!("{sign}{:02}{:02}", minutes / 60, minutes % 60)
        }
    };
    // POSIX offsets count west of Greenwich, the opposite sign.
    let west = if seconds > 0 { '-' } else { '+' };
    let abs = seconds.abs();
    let posix = format!(
        "<{abbreviation}>{west}{}:{:02}:{:02}",
        abs / 3600,
        abs / 60 % 60,
        abs % 60
    );
    TimeZone::posix(&posix).unwrap_or_else(|_| TimeZone::fixed(offset))
}

/// Go's `appendInt`: a sign, then at least `width` digits.
fn int(out: &mut String, v: i64, width: usize) {
    if v < 0 {
        out.push('-');
    }
    out.push_str(&format!("{:0width$}", v.unsigned_abs()));
}

/// Go's `Time.Format(layout)`.
pub(crate) fn format(t: &Zoned, layout: &str) -> String {
    let mut out = String::new();
    let mut layout = layout;
    let offset = t.offset().seconds();
    loop {
        let (prefix, std, rest) = next_chunk(layout);
        out.push_str(prefix);
        let Some(std) = std else {
            break;
        };
        layout = rest;
        let hour = i64::from(t.hour());
        let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };
        match std {
            Std::Year => int(&mut out, i64::from(t.year()).abs() % 100, 2),
            Std::LongYear => int(&mut out, i64::from(t.year()), 4),
            Std::Month => {
                out.push_str(&LONG_MONTHS[usize::from(t.month().unsigned_abs()) - 1][..3])
            }
            Std::LongMonth => out.push_str(LONG_MONTHS[usize::from(t.month().unsigned_abs()) - 1]),
            Std::NumMonth => int(&mut out, i64::from(t.month()), 0),
            Std::ZeroMonth => int(&mut out, i64::from(t.month()), 2),
            Std::WeekDay => {
                out.push_str(
                    &LONG_DAYS[usize::from(t.weekday().to_sunday_zero_offset().unsigned_abs())]
                        [..3],
                );
            }
            Std::LongWeekDay => {
                out.push_str(
                    LONG_DAYS[usize::from(t.weekday().to_sunday_zero_offset().unsigned_abs())],
                );
            }
            Std::Day => int(&mut out, i64::from(t.day()), 0),
            Std::UnderDay => {
                if t.day() < 10 {
                    out.push(' ');
                }
                int(&mut out, i64::from(t.day()), 0);
            }
            Std::ZeroDay => int(&mut out, i64::from(t.day()), 2),
            Std::UnderYearDay => {
                let yday = t.day_of_year();
                if yday < 100 {
                    out.push(' ');
                    if yday < 10 {
                        out.push(' ');
                    }
                }
                int(&mut out, i64::from(yday), 0);
            }
            Std::ZeroYearDay => int(&mut out, i64::from(t.day_of_year()), 3),
            Std::Hour => int(&mut out, hour, 2),
            Std::Hour12 => int(&mut out, hour12, 0),
            Std::ZeroHour12 => int(&mut out, hour12, 2),
            Std::Minute => int(&mut out, i64::from(t.minute()), 0),
            Std::ZeroMinute => int(&mut out, i64::from(t.minute()), 2),
            Std::Second => int(&mut out, i64::from(t.second()), 0),
            Std::ZeroSecond => int(&mut out, i64::from(t.second()), 2),
            Std::Pm => out.push_str(if hour >= 12 { "PM" } else { "AM" }),
            Std::LowerPm => out.push_str(if hour >= 12 { "pm" } else { "am" }),
            Std::Tz => {
                let name = abbreviation(t);
                if name.is_empty() {
                    numeric_zone(&mut out, offset, Std::NumTz);
                } else {
                    out.push_str(&name);
                }
            }
            Std::Frac(separator, digits, trim) => {
                fraction(&mut out, t.subsec_nanosecond(), separator, digits, trim);
            }
            zone => {
                let iso = matches!(
                    zone,
                    Std::Iso8601Tz
                        | Std::Iso8601ColonTz
                        | Std::Iso8601SecondsTz
                        | Std::Iso8601ShortTz
                        | Std::Iso8601ColonSecondsTz
                );
                if iso && offset == 0 {
                    out.push('Z');
                } else {
                    numeric_zone(&mut out, offset, zone);
                }
            }
        }
    }
    out
}

fn numeric_zone(out: &mut String, offset: i32, std: Std) {
    let minutes = offset / 60;
    out.push(if minutes < 0 { '-' } else { '+' });
    let minutes = minutes.abs();
    int(out, i64::from(minutes / 60), 2);
    let colon = matches!(
        std,
        Std::Iso8601ColonTz | Std::NumColonTz | Std::Iso8601ColonSecondsTz | Std::NumColonSecondsTz
    );
    if colon {
        out.push(':');
    }
    if !matches!(std, Std::NumShortTz | Std::Iso8601ShortTz) {
        int(out, i64::from(minutes % 60), 2);
    }
    if matches!(
        std,
        Std::Iso8601SecondsTz
            | Std::NumSecondsTz
            | Std::NumColonSecondsTz
            | Std::Iso8601ColonSecondsTz
    ) {
        if colon {
            out.push(':');
        }
        int(out, i64::from(offset.abs() % 60), 2);
    }
}

/// Go's `appendNano`: at most nine digits, truncated; the `9` form drops trailing zeros and
/// the separator with them.
fn fraction(out: &mut String, nanos: i32, separator: u8, digits: usize, trim: bool) {
    if trim && (digits == 0 || nanos == 0) {
        return;
    }
    let all = format!("{nanos:09}");
    let mut text = all[..digits.min(9)].to_owned();
    if trim {
        text = text.trim_end_matches('0').to_owned();
        if text.is_empty() {
            return;
        }
    }
    out.push(separator as char);
    out.push_str(&text);
}

/// Why a parse failed, in Go's words but without the input (which may be secret).
fn cannot_parse(layout: &str, element: &str) -> String {
    format!("parsing time as {layout:?}: cannot parse the input as {element:?}")
}

fn digit_at(s: &[u8], i: usize) -> bool {
    s.get(i).is_some_and(u8::is_ascii_digit)
}

/// Go's `getnum`: one or two digits (exactly two when `fixed`).
fn getnum(s: &[u8], fixed: bool) -> Option<(i64, &[u8])> {
    if !digit_at(s, 0) {
        return None;
    }
    if !digit_at(s, 1) {
        if fixed {
            return None;
        }
        return Some((i64::from(s[0] - b'0'), &s[1..]));
    }
    Some((
        i64::from(s[0] - b'0') * 10 + i64::from(s[1] - b'0'),
        &s[2..],
    ))
}

/// Go's `getnum3`: one to three digits (exactly three when `fixed`).
fn getnum3(s: &[u8], fixed: bool) -> Option<(i64, &[u8])> {
    let n = s.iter().take(3).take_while(|c| c.is_ascii_digit()).count();
    if n == 0 || (fixed && n != 3) {
        return None;
    }
    let v = s[..n]
        .iter()
        .fold(0, |acc, c| acc * 10 + i64::from(c - b'0'));
    Some((v, &s[n..]))
}

/// Go's `time.atoi`: an optionally signed decimal, nothing else.
fn atoi(s: &[u8]) -> Option<i64> {
    let (negative, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v: i64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(if negative { -v } else { v })
}

/// Go's `lookup`: a case-insensitive name from the table at the start of `s`.
fn lookup<'a>(names: &[&str], s: &'a [u8], short: bool) -> Option<(usize, &'a [u8])> {
    names.iter().enumerate().find_map(|(i, name)| {
        let name = if short { &name[..3] } else { name };
        (s.len() >= name.len() && s[..name.len()].eq_ignore_ascii_case(name.as_bytes()))
            .then(|| (i, &s[name.len()..]))
    })
}

/// Go's `skip`: the layout's literal text must match; a space matches any run of spaces.
fn skip<'a>(mut value: &'a [u8], prefix: &str) -> Option<&'a [u8]> {
    let mut prefix = prefix.as_bytes();
    while let Some((&p, rest)) = prefix.split_first() {
        if p == b' ' {
            if value.first().is_some_and(|c| *c != b' ') {
                return None;
            }
            prefix = rest;
            while prefix.first() == Some(&b' ') {
                prefix = &prefix[1..];
            }
            while value.first() == Some(&b' ') {
                value = &value[1..];
            }
            continue;
        }
        if value.first() != Some(&p) {
            return None;
        }
        prefix = rest;
        value = &value[1..];
    }
    Some(value)
}

/// Go's `parseNanoseconds`: the separator and up to nine digits, scaled to nanoseconds.
fn nanoseconds(value: &[u8], len: usize) -> Option<i64> {
    if !matches!(value.first(), Some(b'.' | b',')) {
        return None;
    }
    let len = len.min(10);
    let ns = atoi(&value[1..len])?;
    Some(ns * 10i64.pow((10 - len) as u32))
}

/// Go's `parseTimeZone`: the length of a zone abbreviation at the start of `value`.
fn zone_name_len(value: &[u8]) -> Option<usize> {
    if value.len() < 3 {
        return None;
    }
    if value.starts_with(b"ChST") || value.starts_with(b"MeST") {
        return Some(4);
    }
    if value.starts_with(b"GMT") {
        return Some(3 + signed_offset_len(&value[3..]));
    }
    if matches!(value[0], b'+' | b'-') {
        let n = signed_offset_len(value);
        return (n > 0).then_some(n);
    }
    let upper = value
        .iter()
        .take(6)
        .take_while(|c| c.is_ascii_uppercase())
        .count();
    match upper {
        5 if value[4] == b'T' => Some(5),
        4 if value[3] == b'T' || value.starts_with(b"WITA") => Some(4),
        3 => Some(3),
        _ => None,
    }
}

/// Go's `parseSignedOffset`: "+h" or "-hh" up to 23, or 0 when there is none.
fn signed_offset_len(value: &[u8]) -> usize {
    if !matches!(value.first(), Some(b'+' | b'-')) {
        return 0;
    }
    let digits = value[1..].iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 || digits > 2 || atoi(&value[1..1 + digits]).is_none_or(|h| h > 23) {
        return 0;
    }
    1 + digits
}

/// Go's `time.ParseInLocation(layout, value, local)`.
pub(crate) fn parse(
    layout_text: &str,
    value_text: &str,
    local: &TimeZone,
) -> Result<Zoned, String> {
    let mut layout = layout_text;
    let mut value = value_text.as_bytes();
    let (mut year, mut month, mut day, mut yday) = (0i64, -1i64, -1i64, -1i64);
    let (mut hour, mut min, mut sec, mut nsec) = (0i64, 0i64, 0i64, 0i64);
    let (mut am, mut pm) = (false, false);
    let mut utc = false;
    let mut zone_offset: Option<i64> = None;
    let mut zone_name: Option<String> = None;
    let range = |what: &str| Err(format!("parsing time: {what} out of range"));
    loop {
        let (prefix, std, rest) = next_chunk(layout);
        let element = &layout[prefix.len()..layout.len() - rest.len()];
        value = skip(value, prefix).ok_or_else(|| cannot_parse(layout_text, prefix))?;
        let Some(std) = std else {
            if !value.is_empty() {
                return Err("parsing time: extra text".into());
            }
            break;
        };
        layout = rest;
        let bad = || cannot_parse(layout_text, element);
        match std {
            Std::Year => {
                let y = value.get(..2).and_then(atoi).ok_or_else(bad)?;
                value = &value[2..];
                year = if y >= 69 { y + 1900 } else { y + 2000 };
            }
            Std::LongYear => {
                if value.len() < 4 || !digit_at(value, 0) {
                    return Err(bad());
                }
                year = atoi(&value[..4]).ok_or_else(bad)?;
                value = &value[4..];
            }
            Std::Month | Std::LongMonth => {
                let (m, rest) = lookup(&LONG_MONTHS, value, std == Std::Month).ok_or_else(bad)?;
                month = m as i64 + 1;
                value = rest;
            }
            Std::NumMonth | Std::ZeroMonth => {
                let (m, rest) = getnum(value, std == Std::ZeroMonth).ok_or_else(bad)?;
                if !(1..=12).contains(&m) {
                    return range("month");
                }
                month = m;
                value = rest;
            }
            Std::WeekDay | Std::LongWeekDay => {
                value = lookup(&LONG_DAYS, value, std == Std::WeekDay)
                    .ok_or_else(bad)?
                    .1;
            }
            Std::Day | Std::UnderDay | Std::ZeroDay => {
                if std == Std::UnderDay && value.first() == Some(&b' ') {
                    value = &value[1..];
                }
                let (d, rest) = getnum(value, std == Std::ZeroDay).ok_or_else(bad)?;
                day = d;
                value = rest;
            }
            Std::UnderYearDay | Std::ZeroYearDay => {
                for _ in 0..2 {
                    if std == Std::UnderYearDay && value.first() == Some(&b' ') {
                        value = &value[1..];
                    }
                }
                let (d, rest) = getnum3(value, std == Std::ZeroYearDay).ok_or_else(bad)?;
                yday = d;
                value = rest;
            }
            Std::Hour => {
                let (h, rest) = getnum(value, false).ok_or_else(bad)?;
                if h >= 24 {
                    return range("hour");
                }
                hour = h;
                value = rest;
            }
            Std::Hour12 | Std::ZeroHour12 => {
                let (h, rest) = getnum(value, std == Std::ZeroHour12).ok_or_else(bad)?;
                if h > 12 {
                    return range("hour");
                }
                hour = h;
                value = rest;
            }
            Std::Minute | Std::ZeroMinute => {
                let (m, rest) = getnum(value, std == Std::ZeroMinute).ok_or_else(bad)?;
                if m >= 60 {
                    return range("minute");
                }
                min = m;
                value = rest;
            }
            Std::Second | Std::ZeroSecond => {
                let (s, rest) = getnum(value, std == Std::ZeroSecond).ok_or_else(bad)?;
                if s >= 60 {
                    return range("second");
                }
                sec = s;
                value = rest;
                // A fraction right after the seconds is read even when the layout has none,
                // unless the layout's next element is the fraction.
                if value.len() >= 2
                    && matches!(value[0], b'.' | b',')
                    && digit_at(value, 1)
                    && !matches!(next_chunk(layout).1, Some(Std::Frac(..)))
                {
                    let n = 1 + value[1..].iter().take_while(|c| c.is_ascii_digit()).count();
                    nsec = nanoseconds(value, n).ok_or_else(bad)?;
                    value = &value[n..];
                }
            }
            Std::Pm | Std::LowerPm => {
                let p = value.get(..2).ok_or_else(bad)?;
                let (am_text, pm_text): (&[u8], &[u8]) = if std == Std::Pm {
                    (b"AM", b"PM")
                } else {
                    (b"am", b"pm")
                };
                if p == pm_text {
                    pm = true;
                } else if p == am_text {
                    am = true;
                } else {
                    return Err(bad());
                }
                value = &value[2..];
            }
            Std::Tz => {
                if value.starts_with(b"UTC") {
                    utc = true;
                    value = &value[3..];
                } else {
                    let n = zone_name_len(value).ok_or_else(bad)?;
                    zone_name = Some(String::from_utf8_lossy(&value[..n]).into_owned());
                    value = &value[n..];
                }
            }
            Std::Frac(_, digits, false) => {
                let n = 1 + digits;
                if value.len() < n {
                    return Err(bad());
                }
                nsec = nanoseconds(value, n).ok_or_else(bad)?;
                value = &value[n..];
            }
            Std::Frac(_, _, true) => {
                if value.len() >= 2 && matches!(value[0], b'.' | b',') && digit_at(value, 1) {
                    let n = 1 + value[1..].iter().take_while(|c| c.is_ascii_digit()).count();
                    nsec = nanoseconds(value, n).ok_or_else(bad)?;
                    value = &value[n..];
                }
            }
            zone => {
                let iso = matches!(
                    zone,
                    Std::Iso8601Tz
                        | Std::Iso8601ColonTz
                        | Std::Iso8601SecondsTz
                        | Std::Iso8601ShortTz
                        | Std::Iso8601ColonSecondsTz
                );
                if iso && value.first() == Some(&b'Z') {
                    value = &value[1..];
                    utc = true;
                } else {
                    let (offset, rest) = numeric_offset(value, zone).ok_or_else(bad)?;
                    zone_offset = Some(offset);
                    value = rest;
                }
            }
        }
    }
    if pm && hour < 12 {
        hour += 12;
    } else if am && hour == 12 {
        hour = 0;
    }
    if yday >= 0 {
        let (m, d) = month_day_of_year(year, yday)?;
        if month >= 0 && month != m {
            return Err("parsing time: day-of-year does not match month".into());
        }
        if day >= 0 && day != d {
            return Err("parsing time: day-of-year does not match day".into());
        }
        month = m;
        day = d;
    } else {
        if month < 0 {
            month = 1;
        }
        if day < 0 {
            day = 1;
        }
    }
    let out_of_range = || "parsing time: day out of range".to_owned();
    let date = civil::Date::new(
        i16::try_from(year).map_err(|_| out_of_range())?,
        month as i8,
        i8::try_from(day).map_err(|_| out_of_range())?,
    )
    .map_err(|_| out_of_range())?;
    let datetime = DateTime::from_parts(
        date,
        civil::Time::new(hour as i8, min as i8, sec as i8, nsec as i32)
            .map_err(|_| "parsing time: time out of range".to_owned())?,
    );
    let zoned = |tz: TimeZone| {
        datetime
            .to_zoned(tz)
            .map_err(|_| "parsing time: out of range".to_owned())
    };
    if utc {
        return zoned(TimeZone::UTC);
    }
    if let Some(offset) = zone_offset {
        let fixed = Offset::from_seconds(offset as i32)
            .map_err(|_| "parsing time: time zone offset out of range".to_owned())?;
        let instant = datetime
            .to_zoned(TimeZone::fixed(fixed))
            .map_err(|_| "parsing time: out of range".to_owned())?;
        // The local zone when it has that offset then, as Go does; else a fixed offset.
        if local.to_offset(instant.timestamp()) == fixed {
            return Ok(instant.with_time_zone(local.clone()));
        }
        return Ok(instant.with_time_zone(fixed_zone(None, fixed)));
    }
    if let Some(name) = zone_name {
        // Go looks the abbreviation up in the local zone; failing that, "GMT+h" gives that
        // offset and any other name stands for offset zero.
        let utc_instant = zoned(TimeZone::UTC)?;
        let local_offset = local.to_offset_info(utc_instant.timestamp());
        if local_offset.abbreviation() == name {
            let offset = i64::from(local_offset.offset().seconds());
            let shifted = utc_instant
                .timestamp()
                .checked_sub(jiff::SignedDuration::from_secs(offset))
                .map_err(|_| "parsing time: out of range".to_owned())?;
            return Ok(shifted.to_zoned(local.clone()));
        }
        let hours = name
            .strip_prefix("GMT")
            .filter(|h| !h.is_empty())
            .and_then(|h| atoi(h.as_bytes()))
            .unwrap_or(0);
        let fixed = Offset::from_seconds((hours * 3600) as i32).unwrap_or(Offset::UTC);
        // Go only attaches the zone here: the clock reading is taken as UTC, unshifted.
        let instant = utc_instant.timestamp();
        return Ok(instant.to_zoned(fixed_zone(Some(&name), fixed)));
    }
    zoned(local.clone())
}

/// The offset in seconds written in one of Go's numeric zone forms.
fn numeric_offset(value: &[u8], std: Std) -> Option<(i64, &[u8])> {
    let (sign, h, m, s, len): (u8, &[u8], &[u8], &[u8], usize) = match std {
        Std::Iso8601ColonTz | Std::NumColonTz => {
            if value.len() < 6 || value[3] != b':' {
                return None;
            }
            (value[0], &value[1..3], &value[4..6], b"00", 6)
        }
        Std::NumShortTz | Std::Iso8601ShortTz => {
            if value.len() < 3 {
                return None;
            }
            (value[0], &value[1..3], b"00", b"00", 3)
        }
        Std::Iso8601ColonSecondsTz | Std::NumColonSecondsTz => {
            if value.len() < 9 || value[3] != b':' || value[6] != b':' {
                return None;
            }
            (value[0], &value[1..3], &value[4..6], &value[7..9], 9)
        }
        Std::Iso8601SecondsTz | Std::NumSecondsTz => {
            if value.len() < 7 {
                return None;
            }
            (value[0], &value[1..3], &value[3..5], &value[5..7], 7)
        }
        _ => {
            if value.len() < 5 {
                return None;
            }
            (value[0], &value[1..3], &value[3..5], b"00", 5)
        }
    };
    let (h, _) = getnum(h, true)?;
    let (m, _) = getnum(m, true)?;
    let (s, _) = getnum(s, true)?;
    if h > 24 || m > 60 || s > 60 {
        return None;
    }
    let offset = (h * 60 + m) * 60 + s;
    let offset = match sign {
        b'+' => offset,
        b'-' => -offset,
        _ => return None,
    };
    Some((offset, &value[len..]))
}

/// Month and day of a day of the year, as Go's parse computes them.
fn month_day_of_year(year: i64, yday: i64) -> Result<(i64, i64), String> {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let mut yday = yday;
    if leap {
        if yday == 31 + 29 {
            return Ok((2, 29));
        }
        if yday > 31 + 29 {
            yday -= 1;
        }
    }
    if !(1..=365).contains(&yday) {
        return Err("parsing time: day-of-year out of range".into());
    }
    const DAYS_BEFORE: [i64; 13] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334, 365];
    let month = (1..=12).find(|m| DAYS_BEFORE[*m] >= yday).unwrap_or(12);
    Ok((month as i64, yday - DAYS_BEFORE[month - 1]))
}
