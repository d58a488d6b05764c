//! The table behind the `matches_go` tests of math, encoding, dates and paths: calls of one
//! sprig function with literal arguments, and the `%v` Go printed for each (or that Go failed).

use std::collections::BTreeMap;

use crate::funcs::{Arity, Funcs};
use crate::gofmt::sprint_value;
use crate::value::Value;

#[allow(dead_code)] // each module's table uses only some kinds of argument
pub enum A {
    S(&'static str),
    I(i64),
    F(f64),
    B(bool),
    N,
    L(&'static [A]),
    M(&'static [(&'static str, A)]),
    /// A time, as `mustToDate layout value` gives it.
    T(&'static str, &'static str),
}
use A::*;

pub enum Expect {
    Out(&'static str),
    Fails,
}
use Expect::*;

pub fn funcs() -> Funcs {
    let mut funcs = Funcs::default();
    crate::sprig::register(&mut funcs);
    funcs
}

fn value(funcs: &Funcs, a: &A) -> Value {
    match a {
        S(s) => Value::from(*s),
        I(i) => Value::Int(*i),
        F(f) => Value::Float(*f),
        B(b) => Value::Bool(*b),
        N => Value::Nil,
        L(items) => Value::List(items.iter().map(|x| value(funcs, x)).collect()),
        M(pairs) => Value::Map(
            pairs
                .iter()
                .map(|(k, x)| ((*k).to_owned(), value(funcs, x)))
                .collect::<BTreeMap<_, _>>(),
        ),
        T(layout, text) => {
            let f = funcs.get("mustToDate").expect("mustToDate is registered");
            (f.call)(&[Value::from(*layout), Value::from(*text)]).expect("a valid time")
        }
    }
}

/// Calls every case and fails once, listing each that differs from Go.
pub fn check(cases: &[(&str, &[A], Expect)]) {
    let funcs = funcs();
    let mut failures = Vec::new();
    for (name, args, expect) in cases {
        let f = funcs
            .get(name)
            .unwrap_or_else(|| panic!("{name} is not registered"));
        let args: Vec<Value> = args.iter().map(|a| value(&funcs, a)).collect();
        let arity_ok = match f.arity {
            Arity::Exact(n) => args.len() == n,
            Arity::AtLeast(n) => args.len() >= n,
        };
        assert!(arity_ok, "{name}: arity");
        let got = (f.call)(&args);
        match (expect, &got) {
            (Out(want), Ok(v)) if sprint_value(v) == *want => {}
            (Fails, Err(_)) => {}
            _ => failures.push(format!("{name} {args:?}: got {got:?}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
