//! Cron schedules as ESO reads a sync window's `schedule` (robfig/cron's standard parser with
//! descriptors): five fields, names for months and weekdays, `@hourly`-style descriptors and
//! `@every <duration>`, all in UTC. Only `next` is needed: ESO defines an open window through it.

use std::time::Duration;

use jiff::civil::{Date, DateTime, Time};
use jiff::{Timestamp, ToSpan, tz::TimeZone};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Schedule {
    Fields(Fields),
    /// `@every`: not anchored to the clock; the next firing is always one delay away.
    Every(Duration),
}

/// One bit per allowed value of each field. `any_day_*` records a `*` (or `?`) in the two day
/// fields, which changes how they combine (see `day_matches`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fields {
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
    any_dom: bool,
    any_dow: bool,
}

struct Bounds {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Bounds = Bounds {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Bounds = Bounds {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Bounds = Bounds {
    name: "day of month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Bounds = Bounds {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DOW: Bounds = Bounds {
    name: "day of week",
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

/// The bits of one field and whether it was a bare `*`/`?` (a star with a step above 1 is not).
fn parse_field(field: &str, b: &Bounds) -> Result<(u64, bool), String> {
    let mut bits = 0u64;
    let mut star = false;
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s
                    .parse()
                    .map_err(|_| format!("{}: bad step {s:?}", b.name))?;
                if step == 0 {
                    return Err(format!("{}: step of 0", b.name));
                }
                (r, Some(step))
            }
            None => (part, None),
        };
        let (start, end, is_star) = if range == "*" || range == "?" {
            (b.min, b.max, true)
        } else {
            let value = |v: &str| -> Result<u32, String> {
                if let Some(i) = b.names.iter().position(|n| n.eq_ignore_ascii_case(v)) {
                    return Ok(b.min + i as u32);
                }
                v.parse()
                    .map_err(|_| format!("{}: bad value {v:?}", b.name))
            };
            match range.split_once('-') {
                Some((lo, hi)) => (value(lo)?, value(hi)?, false),
                // A single value with a step runs to the field's end, as `5/15` in robfig/cron.
                None => {
                    let v = value(range)?;
                    (v, if step.is_some() { b.max } else { v }, false)
                }
            }
        };
        if start < b.min || end > b.max || start > end {
            return Err(format!(
                "{}: {range:?} is outside {}-{}",
                b.name, b.min, b.max
            ));
        }
        let step = step.unwrap_or(1);
        star |= is_star && step == 1;
        for v in (start..=end).step_by(step as usize) {
            bits |= 1 << v;
        }
    }
    Ok((bits, star))
}

impl Schedule {
    pub fn parse(spec: &str) -> Result<Schedule, String> {
        let spec = spec.trim();
        if let Some(every) = spec.strip_prefix("@every ") {
            let d = crate::duration::parse(every.trim())?;
            // robfig/cron rounds to whole seconds and never fires more often than each second.
            let d = Duration::from_secs(d.as_secs()).max(Duration::from_secs(1));
            return Ok(Schedule::Every(d));
        }
        let expanded = match spec {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            s if s.starts_with('@') => return Err(format!("unknown descriptor {s:?}")),
            s => s,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, dom, month, dow] = fields[..] else {
            return Err(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), found {}",
                fields.len()
            ));
        };
        let (dom, any_dom) = parse_field(dom, &DOM)?;
        let (dow, any_dow) = parse_field(dow, &DOW)?;
        Ok(Schedule::Fields(Fields {
            minute: parse_field(minute, &MINUTE)?.0,
            hour: parse_field(hour, &HOUR)?.0,
            dom,
            month: parse_field(month, &MONTH)?.0,
            dow,
            any_dom,
            any_dow,
        }))
    }

    /// The first firing strictly after `t`; `None` when there is none within five years (a
    /// day that never comes, such as February 30th).
    pub fn next(&self, t: Timestamp) -> Option<Timestamp> {
        match self {
            Schedule::Every(delay) => {
                let whole = t.as_second();
                Some(Timestamp::from_second(whole).ok()? + *delay)
            }
            Schedule::Fields(f) => f.next(t),
        }
    }
}

impl Fields {
    fn day_matches(&self, d: Date) -> bool {
        let dom = self.dom & (1 << d.day()) != 0;
        let dow = self.dow & (1 << d.weekday().to_sunday_zero_offset()) != 0;
        // cron's old rule: when either day field is `*`, both must match; when both are
        // restricted, either may.
        if self.any_dom || self.any_dow {
            dom && dow
        } else {
            dom || dow
        }
    }

    fn next(&self, t: Timestamp) -> Option<Timestamp> {
        let utc = TimeZone::UTC;
        let start = t.to_zoned(utc.clone()).datetime();
        // Firings fall on whole minutes; the first candidate is the next one after `t`.
        let mut at: DateTime = start
            .with()
            .second(0)
            .subsec_nanosecond(0)
            .build()
            .ok()?
            .checked_add(1.minute())
            .ok()?;
        let limit = start.year() + 5;
        while at.year() <= limit {
            if self.month & (1 << at.month()) == 0 {
                let first = at.date().first_of_month();
                at = first
                    .checked_add(1.month())
                    .ok()?
                    .to_datetime(Time::midnight());
                continue;
            }
            if !self.day_matches(at.date()) {
                at = at.date().tomorrow().ok()?.to_datetime(Time::midnight());
                continue;
            }
            if self.hour & (1 << at.hour()) == 0 {
                at = at
                    .with()
                    .minute(0)
                    .build()
                    .ok()?
                    .checked_add(1.hour())
                    .ok()?;
                continue;
            }
            if self.minute & (1 << at.minute()) == 0 {
                at = at.checked_add(1.minute()).ok()?;
                continue;
            }
            return at.to_zoned(utc).ok().map(|z| z.timestamp());
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn next(spec: &str, after: &str) -> String {
        Schedule::parse(spec)
            .unwrap()
            .next(ts(after))
            .map(|t| t.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn next_firing_as_robfig_cron() {
        let cases = [
            (
                "0 22 * * 1-5",
                "2026-11-20T23:00:00Z",
                "2026-11-23T22:00:00Z",
            ), // Friday night → Monday
            (
                "0 22 * * 1-5",
                "2026-11-23T22:00:00Z",
                "2026-11-24T22:00:00Z",
            ), // strictly after
            (
                "*/15 * * * *",
                "2026-11-23T10:07:30Z",
                "2026-11-23T10:15:00Z",
            ),
            (
                "5/20 * * * *",
                "2026-11-23T10:26:00Z",
                "2026-11-23T10:45:00Z",
            ),
            (
                "0 0 1 jan *",
                "2026-11-23T00:00:00Z",
                "2027-01-01T00:00:00Z",
            ),
            (
                "30 2 * * sun",
                "2026-11-23T00:00:00Z",
                "2026-11-29T02:30:00Z",
            ),
            (
                "0 9 1,15 * *",
                "2026-11-16T00:00:00Z",
                "2026-12-01T09:00:00Z",
            ),
            // Both day fields restricted: either matches (the 13th, or any Friday).
            ("0 0 13 * 5", "2026-11-23T00:00:00Z", "2026-11-27T00:00:00Z"),
            ("@daily", "2026-11-23T10:00:00Z", "2026-11-24T00:00:00Z"),
            ("@hourly", "2026-11-23T10:00:00Z", "2026-11-23T11:00:00Z"),
            ("@weekly", "2026-11-23T10:00:00Z", "2026-11-29T00:00:00Z"),
            ("@monthly", "2026-11-23T10:00:00Z", "2026-12-01T00:00:00Z"),
            ("@yearly", "2026-11-23T10:00:00Z", "2027-01-01T00:00:00Z"),
            (
                "@every 90m",
                "2026-11-23T10:00:00.5Z",
                "2026-11-23T11:30:00Z",
            ),
            ("0 0 30 2 *", "2026-11-23T10:00:00Z", ""),
        ];
        for (spec, after, want) in cases {
            assert_eq!(next(spec, after), want, "{spec} after {after}");
        }
    }

    #[test]
    fn bad_schedules_say_why() {
        for (spec, why) in [
            ("61 * * * *", "minute"),
            ("* * * * 7", "day of week"),
            ("* * * *", "expected 5 fields"),
            ("@fortnightly", "unknown descriptor"),
            ("*/0 * * * *", "step of 0"),
            ("* * * foo *", "month"),
            ("@every soon", "duration"),
        ] {
            let e = Schedule::parse(spec).unwrap_err();
            assert!(e.contains(why), "{spec}: {e}");
        }
    }
}
