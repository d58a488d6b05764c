//! Golden cases against Go: each call's `%v` output must equal what sprig printed. The Go
//! program ran in UTC, as this machine does: `date` and `toDate` read the local zone.

use crate::sprig::go_table::{A, A::*, Expect, Expect::*, check, funcs};
use crate::value::Value;

#[test]
fn matches_go() {
    check(CASES);
}

// Expected outputs were printed by a Go program running these calls through sprig v3.3.0's
// function map in Go's text/template (errors are checked as errors, not by message).
const CASES: &[(&str, &[A], Expect)] = &[
    ("date", &[S("2006-01-02"), I(0)], Out("1970-01-01")),
    (
        "dateInZone",
        &[S("2006-01-02 15:04:05.000 MST"), I(1700000000), S("UTC")],
        Out("2023-11-14 22:13:20.000 UTC"),
    ),
    (
        "dateInZone",
        &[
            S("Monday, January 2 2006 3:04:05 PM -0700 Z07:00 Z0700 -07 -07:00:00 Z070000"),
            I(1700000000),
            S("America/New_York"),
        ],
        Out("Tuesday, November 14 2023 5:13:20 PM -0500 -05:00 -0500 -05 -05:00:00 -050000"),
    ),
    (
        "dateInZone",
        &[
            S(
                "Mon Jan _2 __2 002 06 1 01 2 02 15 3 03 4 04 5 05 pm PM .0 .000000 .999 ,999999999 .000000000000",
            ),
            T(
                "2006-01-02T15:04:05.999999999Z07:00",
                "2024-03-05T07:08:09.012345678+02:00",
            ),
            S("Asia/Kolkata"),
        ],
        Out(
            "Tue Mar  5  65 065 24 3 03 5 05 10 10 10 38 38 9 09 am AM .0 .012345 .012 ,012345678 .012345678",
        ),
    ),
    (
        "dateInZone",
        &[
            S("Jan January Janx Mon Monx Monday MST"),
            T(
                "2006-01-02T15:04:05.999999999Z07:00",
                "2024-03-05T07:08:09.012345678+02:00",
            ),
            S("Europe/Berlin"),
        ],
        Out("Mar March Janx Tue Monx Tuesday CET"),
    ),
    (
        "dateInZone",
        &[
            S("2006 _2006 Z07 MST"),
            T(
                "2006-01-02T15:04:05.999999999Z07:00",
                "2024-03-05T07:08:09.012345678+02:00",
            ),
            S("UTC"),
        ],
        Out("2024 _2024 Z UTC"),
    ),
    (
        "dateInZone",
        &[S("15:04 MST"), I(1700000000), S("Nowhere/Zone")],
        Out("22:13 UTC"),
    ),
    (
        "dateInZone",
        &[S("15:04 MST"), I(1700000000), S("")],
        Out("22:13 UTC"),
    ),
    (
        "dateInZone",
        &[S("15:04 MST"), I(1700000000), S("europe/berlin")],
        Out("22:13 UTC"),
    ),
    (
        "dateInZone",
        &[S("15:04 MST -07:00:00"), I(1700000000), S("Asia/Kathmandu")],
        Out("03:58 +0545 +05:45:00"),
    ),
    (
        "dateInZone",
        &[S("15:04 MST"), I(-1700000000), S("Australia/Lord_Howe")],
        Out("11:46 AEST"),
    ),
    (
        "date_in_zone",
        &[
            S("2006-01-02"),
            T(
                "2006-01-02T15:04:05.999999999Z07:00",
                "2024-03-05T07:08:09.012345678+02:00",
            ),
            S("Pacific/Kiritimati"),
        ],
        Out("2024-03-05"),
    ),
    (
        "htmlDateInZone",
        &[I(1700000000), S("Asia/Tokyo")],
        Out("2023-11-15"),
    ),
    (
        "htmlDateInZone",
        &[
            T(
                "2006-01-02T15:04:05.999999999Z07:00",
                "2024-03-05T07:08:09.012345678+02:00",
            ),
            S("UTC"),
        ],
        Out("2024-03-05"),
    ),
    (
        "dateInZone",
        &[
            S("2006-01-02T15:04:05Z07:00"),
            T(
                "2006-01-02T15:04:05.999999999Z07:00",
                "2024-03-05T07:08:09.012345678+02:00",
            ),
            S("UTC"),
        ],
        Out("2024-03-05T05:08:09Z"),
    ),
    (
        "dateInZone",
        &[
            S(".9 .99 .000"),
            T("2006-01-02 15:04:05.000", "2024-01-01 00:00:00.100"),
            S("UTC"),
        ],
        Out(".1 .1 .100"),
    ),
    (
        "dateModify",
        &[
            S("1h30m"),
            T(
                "2006-01-02T15:04:05.999999999Z07:00",
                "2024-03-05T07:08:09.012345678+02:00",
            ),
        ],
        Out("2024-03-05 08:38:09.012345678 +0200 +0200"),
    ),
    (
        "dateModify",
        &[
            S("-1.5h"),
            T(
                "2006-01-02T15:04:05.999999999Z07:00",
                "2024-03-05T07:08:09.012345678+02:00",
            ),
        ],
        Out("2024-03-05 05:38:09.012345678 +0200 +0200"),
    ),
    (
        "dateModify",
        &[
            S("bogus"),
            T(
                "2006-01-02T15:04:05.999999999Z07:00",
                "2024-03-05T07:08:09.012345678+02:00",
            ),
        ],
        Out("2024-03-05 07:08:09.012345678 +0200 +0200"),
    ),
    (
        "date_modify",
        &[
            S("1us"),
            T(
                "2006-01-02T15:04:05.999999999Z07:00",
                "2024-03-05T07:08:09.012345678+02:00",
            ),
        ],
        Out("2024-03-05 07:08:09.012346678 +0200 +0200"),
    ),
    (
        "mustDateModify",
        &[
            S("2h45m10.5s"),
            T(
                "2006-01-02T15:04:05.999999999Z07:00",
                "2024-03-05T07:08:09.012345678+02:00",
            ),
        ],
        Out("2024-03-05 09:53:19.512345678 +0200 +0200"),
    ),
    (
        "mustDateModify",
        &[
            S("bogus"),
            T(
                "2006-01-02T15:04:05.999999999Z07:00",
                "2024-03-05T07:08:09.012345678+02:00",
            ),
        ],
        Fails,
    ),
    (
        "mustDateModify",
        &[
            S("10µs"),
            T(
                "2006-01-02T15:04:05.999999999Z07:00",
                "2024-03-05T07:08:09.012345678+02:00",
            ),
        ],
        Out("2024-03-05 07:08:09.012355678 +0200 +0200"),
    ),
    (
        "unixEpoch",
        &[T(
            "2006-01-02T15:04:05.999999999Z07:00",
            "2024-03-05T07:08:09.012345678+02:00",
        )],
        Out("1709615289"),
    ),
    ("duration", &[S("3661")], Out("1h1m1s")),
    ("duration", &[S("0")], Out("0s")),
    ("duration", &[S("59")], Out("59s")),
    ("duration", &[S("86400")], Out("24h0m0s")),
    ("duration", &[S("-90")], Out("-1m30s")),
    ("duration", &[S("x")], Out("0s")),
    ("duration", &[I(120)], Out("2m0s")),
    ("duration", &[S("9223372036854775807")], Out("-1s")),
    ("durationRound", &[S("2h10m")], Out("2h")),
    ("durationRound", &[S("0s")], Out("0s")),
    ("durationRound", &[S("1s")], Out("0s")),
    ("durationRound", &[S("1.5s")], Out("1s")),
    ("durationRound", &[S("-3h")], Out("3h")),
    ("durationRound", &[S("24h")], Out("24h")),
    ("durationRound", &[S("25h")], Out("1d")),
    ("durationRound", &[S("2400h")], Out("3mo")),
    ("durationRound", &[S("9000h")], Out("1y")),
    ("durationRound", &[S("x")], Out("0s")),
    ("durationRound", &[I(3600000000001)], Out("1h")),
    ("durationRound", &[S("61m")], Out("1h")),
    ("durationRound", &[S("1.000000001s")], Out("1s")),
    (
        "toDate",
        &[
            S("2006-01-02 15:04:05 -0700"),
            S("2024-02-29 13:14:15 +0530"),
        ],
        Out("2024-02-29 13:14:15 +0530 +0530"),
    ),
    (
        "toDate",
        &[
            S("2006-01-02 15:04:05 -0700"),
            S("2023-02-29 13:14:15 +0530"),
        ],
        Out("0001-01-01 00:00:00 +0000 UTC"),
    ),
    (
        "toDate",
        &[S("02 Jan 06 15:04 MST"), S("05 MAR 24 07:08 UTC")],
        Out("2024-03-05 07:08:00 +0000 UTC"),
    ),
    (
        "toDate",
        &[
            S("January 2, 2006 3:04:05.000 PM Z07:00"),
            S("march 5, 2024 7:08:09.123 pm Z"),
        ],
        Out("0001-01-01 00:00:00 +0000 UTC"),
    ),
    (
        "toDate",
        &[S("2006-002 Z07"), S("2024-060 +03")],
        Out("2024-02-29 00:00:00 +0300 +0300"),
    ),
    (
        "toDate",
        &[
            S("2006-01-02T15:04:05Z07:00"),
            S("2024-03-05T07:08:09.5+01:00"),
        ],
        Out("2024-03-05 07:08:09.5 +0100 +0100"),
    ),
    (
        "toDate",
        &[
            S("2006-01-02T15:04:05.999Z07:00"),
            S("2024-03-05T07:08:09Z"),
        ],
        Out("2024-03-05 07:08:09 +0000 UTC"),
    ),
    (
        "toDate",
        &[
            S("2006-01-02 15:04:05 Z0700"),
            S("2024-03-05  07:08:09 -0230"),
        ],
        Out("2024-03-05 07:08:09 -0230 -0230"),
    ),
    (
        "toDate",
        &[S("Mon Jan _2 2006 MST"), S("Tue Mar  5 2024 UTC")],
        Out("2024-03-05 00:00:00 +0000 UTC"),
    ),
    (
        "toDate",
        &[S("2006-01-02"), S("2024-13-01")],
        Out("0001-01-01 00:00:00 +0000 UTC"),
    ),
    (
        "toDate",
        &[S("2006-01-02"), S("2024-01-01 extra")],
        Out("0001-01-01 00:00:00 +0000 UTC"),
    ),
    (
        "toDate",
        &[S("2006-01-02 -07:00:00"), S("2024-01-01 +01:02:03")],
        Out("2024-01-01 00:00:00 +0102 +0102"),
    ),
    (
        "toDate",
        &[S("06/1/2 3PM"), S("70/2/3 12AM")],
        Out("1970-02-03 00:00:00 +0000 UTC"),
    ),
    ("mustToDate", &[S("2006-01-02"), S("nope")], Fails),
    (
        "mustToDate",
        &[S("2006-01-02 MST"), S("2024-01-02 GMT+3")],
        Out("2024-01-02 03:00:00 +0300 GMT+3"),
    ),
    (
        "mustToDate",
        &[S("2006-01-02 MST"), S("2024-01-02 CET")],
        Out("2024-01-02 00:00:00 +0000 CET"),
    ),
    (
        "mustToDate",
        &[S("2006-01-02 15:04:05.000"), S("2024-01-02 03:04:05.123")],
        Out("2024-01-02 03:04:05.123 +0000 UTC"),
    ),
    (
        "mustToDate",
        &[S("__2 2006"), S(" 45 2024")],
        Out("2024-02-14 00:00:00 +0000 UTC"),
    ),
];

fn call(name: &str, args: &[Value]) -> crate::funcs::FuncResult {
    (funcs().get(name).unwrap().call)(args)
}

#[test]
fn clock_functions() {
    let Ok(Value::Time(now)) = call("now", &[]) else {
        panic!("now gives a time");
    };
    let hour_ago = call(
        "dateModify",
        &[Value::from("-1h"), Value::Time(now.clone())],
    )
    .unwrap();
    assert_eq!(
        call("ago", std::slice::from_ref(&hour_ago)),
        Ok(Value::from("1h0m0s"))
    );
    assert_eq!(call("durationRound", &[hour_ago]), Ok(Value::from("1h")));
    let epoch = now.timestamp().as_second();
    // Unix seconds drop the fraction, so the rounded distance may be a second more.
    let ago = call("ago", &[Value::Int(epoch - 90)]).unwrap();
    assert!(
        ago == Value::from("1m30s") || ago == Value::from("1m31s"),
        "{ago:?}"
    );
    assert_eq!(call("ago", &[Value::from("x")]), Ok(Value::from("0s")));
    assert_eq!(
        call("unixEpoch", &[Value::Time(now)]),
        Ok(Value::String(epoch.to_string()))
    );
    assert!(call("unixEpoch", &[Value::Int(5)]).is_err());
    assert!(
        call(
            "dateModify",
            &[Value::from("1h"), Value::from("2024-01-01")]
        )
        .is_err()
    );
}

#[test]
fn durations_print_and_parse_like_go() {
    use super::duration::{parse, to_string};
    for (nanos, text) in [
        (1, "1ns"),
        (1_500, "1.5µs"),
        (1_000_000, "1ms"),
        (1_234_567_890, "1.23456789s"),
        (-5_400_000_000_000, "-1h30m0s"),
        (i64::MIN, "-2562047h47m16.854775808s"),
    ] {
        assert_eq!(to_string(nanos), text);
    }
    for (text, nanos) in [
        ("0", Ok(0)),
        ("+5m", Ok(300_000_000_000)),
        (".5s", Ok(500_000_000)),
        ("1h1.5m", Ok(3_690_000_000_000)),
        ("1.0000000001s", Ok(1_000_000_000)),
        ("-9223372036854775808ns", Ok(i64::MIN)),
    ] {
        assert_eq!(parse(text), nanos, "{text}");
    }
    for bad in ["", "1", "1x", ".s", "9223372036854775808ns", "-", "1h-1m"] {
        assert!(parse(bad).is_err(), "{bad}");
    }
}
