//! Golden cases against Go: each call's `%v` output must equal what sprig printed. The Go
//! program ran in UTC, as this machine does: `date` and `toDate` read the local zone.

use crate::sprig::go_table::{A, A::*, Expect, Expect::*, check, funcs};
use crate::value::Value;

#[test]
fn matches_go() {
    check(CASES);
}

// Expected outputs were printed by a Go program running these calls through sprig v3.3.0's
// function map in Go's text/template (errors are checked as errors, not by message), with the
// libraries ESO's vendored sprig builds with (cast 1.10 parses "12.5" as 12).
const CASES: &[(&str, &[A], Expect)] = &[
    ("add", &[], Out("0")),
    ("add", &[I(1), S("2"), F(3.9)], Out("6")),
    (
        "add",
        &[
            S("0x10"),
            S("010"),
            S("1_000"),
            S("12.00"),
            S("12.5"),
            B(true),
            N,
        ],
        Out("1049"),
    ),
    ("add1", &[S("41")], Out("42")),
    ("add1", &[F(-1.5)], Out("0")),
    ("sub", &[I(10), S("3")], Out("7")),
    ("sub", &[S("x"), I(3)], Out("-3")),
    ("div", &[I(7), I(2)], Out("3")),
    ("div", &[I(-7), I(2)], Out("-3")),
    ("div", &[I(7), I(0)], Fails),
    (
        "div",
        &[I(-9223372036854775808), I(-1)],
        Out("-9223372036854775808"),
    ),
    ("mod", &[I(7), I(3)], Out("1")),
    ("mod", &[I(-7), I(3)], Out("-1")),
    ("mod", &[I(1), S("0")], Fails),
    ("mul", &[I(3)], Out("3")),
    ("mul", &[I(3), S("4"), F(2.5)], Out("24")),
    ("max", &[I(1), S("7"), F(3.2)], Out("7")),
    ("biggest", &[I(-1), I(-5)], Out("-1")),
    ("min", &[I(4), S("-2"), I(9)], Out("-2")),
    ("floor", &[F(1.7)], Out("1")),
    ("floor", &[S("-1.2")], Out("-2")),
    ("ceil", &[F(1.2)], Out("2")),
    ("ceil", &[S("abc")], Out("0")),
    ("floor", &[I(1000000)], Out("1e+06")),
    ("round", &[F(3.14169), I(2)], Out("3.14")),
    ("round", &[F(2.5), I(0)], Out("3")),
    ("round", &[F(-2.5), I(0)], Out("-3")),
    ("round", &[F(1.2345), I(3), F(0.4)], Out("1.235")),
    ("round", &[S("12.3456"), I(1)], Out("12.3")),
    ("round", &[F(1234.5), I(-2)], Out("1200")),
    ("round", &[F(0.125), I(2)], Out("0.13")),
    ("round", &[F(1.5), F(1.0)], Fails),
    ("addf", &[], Out("0")),
    ("addf", &[F(1.1), F(2.2)], Out("3.3")),
    ("addf", &[F(0.1), F(0.2), S("0.3")], Out("0.6")),
    ("add1f", &[F(0.1)], Out("1.1")),
    ("add1f", &[S("x")], Out("1")),
    ("subf", &[F(3.3), F(1.1)], Out("2.2")),
    ("subf", &[F(1.0)], Out("1")),
    ("subf", &[F(1e+300), F(1e-300)], Out("1e+300")),
    ("mulf", &[F(1.1), F(3.0)], Out("3.3")),
    ("mulf", &[F(0.1), F(0.1), F(0.1)], Out("0.001")),
    ("divf", &[F(10.0), F(3.0)], Out("3.3333333333333335")),
    ("divf", &[F(2.0), F(3.0)], Out("0.6666666666666667")),
    ("divf", &[F(-2.0), F(3.0)], Out("-0.6666666666666667")),
    ("divf", &[F(1.0), F(0.0)], Fails),
    ("divf", &[F(1e-20), F(3.0)], Out("0")),
    ("divf", &[F(7.0)], Out("7")),
    ("maxf", &[F(1.5), S("2.5"), I(2)], Out("2.5")),
    ("minf", &[F(1.5), S("-2.5"), I(2)], Out("-2.5")),
    ("maxf", &[F(-0.0), F(0.0)], Out("0")),
    ("until", &[I(5)], Out("[0 1 2 3 4]")),
    ("until", &[I(-3)], Out("[0 -1 -2]")),
    ("until", &[I(0)], Out("[]")),
    ("until", &[S("3")], Fails),
    ("untilStep", &[I(0), I(10), I(3)], Out("[0 3 6 9]")),
    ("untilStep", &[I(10), I(0), I(-4)], Out("[10 6 2]")),
    ("untilStep", &[I(0), I(10), I(-1)], Out("[]")),
    ("untilStep", &[I(0), I(10), I(0)], Out("[]")),
    ("seq", &[], Out("")),
    ("seq", &[I(5)], Out("1 2 3 4 5")),
    ("seq", &[I(-2)], Out("1 0 -1 -2")),
    ("seq", &[I(0)], Out("1 0")),
    ("seq", &[I(1)], Out("1")),
    ("seq", &[I(2), I(6)], Out("2 3 4 5 6")),
    ("seq", &[I(6), I(2)], Out("6 5 4 3 2")),
    ("seq", &[I(0), I(2), I(9)], Out("0 2 4 6 8")),
    ("seq", &[I(9), I(-3), I(0)], Out("9 6 3 0")),
    ("seq", &[I(9), I(3), I(0)], Out("")),
    ("seq", &[I(1), I(2), I(3), I(4)], Out("")),
    ("seq", &[I(3), I(0), I(5)], Out("")),
];

fn call(name: &str, args: &[Value]) -> crate::funcs::FuncResult {
    (funcs().get(name).unwrap().call)(args)
}

#[test]
fn integer_math_wraps_like_go() {
    assert_eq!(
        call("add", &[Value::Int(i64::MAX), Value::Int(1)]),
        Ok(Value::Int(i64::MIN))
    );
    assert_eq!(
        call("mul", &[Value::Int(i64::MAX), Value::Int(2)]),
        Ok(Value::Int(-2))
    );
    assert_eq!(
        call("mod", &[Value::Int(i64::MIN), Value::Int(-1)]),
        Ok(Value::Int(0))
    );
    assert_eq!(call("add1", &[Value::from("7")]), Ok(Value::Int(8)));
    assert_eq!(call("floor", &[Value::Int(2)]), Ok(Value::Float(2.0)));
}

#[test]
fn sequences_are_bounded() {
    let limit = super::MAX_SEQUENCE as i64;
    let Ok(Value::List(items)) = call("until", &[Value::Int(limit)]) else {
        panic!("until at the limit works");
    };
    assert_eq!(items.len(), super::MAX_SEQUENCE);
    assert!(call("until", &[Value::Int(limit + 1)]).is_err());
    assert!(
        call(
            "untilStep",
            &[Value::Int(0), Value::Int(i64::MAX), Value::Int(1)]
        )
        .is_err()
    );
    assert!(call("seq", &[Value::Int(-limit - 5)]).is_err());
    // A step that overflows wraps in Go and goes on; here it stops at the limit.
    let wrap = [
        Value::Int(0),
        Value::Int(i64::MAX),
        Value::Int(i64::MAX / 2 + 1),
    ];
    assert!(call("untilStep", &wrap).is_err());
}
