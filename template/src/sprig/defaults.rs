//! sprig's defaults and flow control: `default`, `empty`, `coalesce`, `all`, `any`, `ternary`,
//! `fail`.

use super::args::{bool_param, string_param};
use crate::funcs::{Arity, FuncError, Funcs};
use crate::value::Value;

pub fn register(funcs: &mut Funcs) {
    use Arity::{AtLeast, Exact};
    // `default DEFAULT [GIVEN]`: a pipeline passes the given value last.
    funcs.insert("default", AtLeast(1), |a| {
        Ok(match a.get(1) {
            Some(given) if !is_empty(given) => given.clone(),
            _ => a[0].clone(),
        })
    });
    funcs.insert("empty", Exact(1), |a| Ok(is_empty(&a[0]).into()));
    funcs.insert("coalesce", AtLeast(0), |a| {
        Ok(a.iter()
            .find(|v| !is_empty(v))
            .cloned()
            .unwrap_or(Value::Nil))
    });
    funcs.insert("all", AtLeast(0), |a| {
        Ok(a.iter().all(|v| !is_empty(v)).into())
    });
    funcs.insert("any", AtLeast(0), |a| {
        Ok(a.iter().any(|v| !is_empty(v)).into())
    });
    funcs.insert("ternary", Exact(3), |a| {
        Ok(if bool_param(&a[2])? { &a[0] } else { &a[1] }.clone())
    });
    funcs.insert("fail", Exact(1), |a| {
        Err(FuncError(string_param(&a[0])?.to_owned()))
    });
}

/// sprig's `empty`: nil, false, zero, and empty strings, slices and maps; a `time.Time` (a
/// struct) never is.
pub fn is_empty(v: &Value) -> bool {
    match v {
        Value::Time(_) => false,
        other => !other.truth(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{b, check, f, i, l, m, nil, s, t};

    #[test]
    fn defaults_and_flow() {
        check(&[
            ("default", vec![s("d")], "d"),
            ("default", vec![s("d"), s("")], "d"),
            ("default", vec![s("d"), s("x")], "x"),
            ("default", vec![s("d"), i(0)], "d"),
            ("default", vec![s("d"), f(0.0)], "d"),
            ("default", vec![s("d"), t(false)], "d"),
            ("default", vec![s("d"), nil()], "d"),
            ("default", vec![s("d"), l(vec![])], "d"),
            ("default", vec![s("d"), m(&[])], "d"),
            ("default", vec![s("d"), l(vec![nil()])], "[<nil>]"),
            ("default", vec![s("d"), s("x"), s("y")], "x"),
            ("empty", vec![b(b"")], "true"),
            ("empty", vec![s(" ")], "false"),
            ("empty", vec![f(-0.0)], "true"),
            ("coalesce", vec![nil(), s(""), i(0), s("a"), s("b")], "a"),
            ("coalesce", vec![nil(), s("")], "<no value>"),
            ("coalesce", vec![], "<no value>"),
            ("all", vec![s("a"), i(1)], "true"),
            ("all", vec![s("a"), i(0)], "false"),
            ("all", vec![], "true"),
            ("any", vec![s(""), i(1)], "true"),
            ("any", vec![], "false"),
            ("ternary", vec![s("yes"), s("no"), t(true)], "yes"),
            ("ternary", vec![s("yes"), s("no"), t(false)], "no"),
            (
                "ternary",
                vec![s("yes"), s("no"), s("true")],
                "ERR:wrong type for value; expected bool; got string",
            ),
            ("fail", vec![s("custom message")], "ERR:custom message"),
        ]);
    }
}
