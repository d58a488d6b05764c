//! Table tests for sprig's functions, called through the function table as the executor calls
//! them. Expected outputs are what Go prints for `{{ f args }}` with ESO's sprig (checked with
//! a Go program): the value's `%v`, `<no value>` for nil, or `ERR:` and the error after Go's
//! `error calling f: `.
//!
//! With `SPRIG_GO_CASES=<file>` set, each case is also appended to that file as a Go template
//! line with its expected and actual output, for comparing against Go.

use std::collections::BTreeMap;
use std::io::Write;

use crate::funcs::{Arity, Funcs};
use crate::gofmt::sprint_value;
use crate::value::Value;

pub fn s(v: &str) -> Value {
    Value::from(v)
}
pub fn i(v: i64) -> Value {
    Value::Int(v)
}
pub fn f(v: f64) -> Value {
    Value::Float(v)
}
pub fn b(v: &[u8]) -> Value {
    Value::Bytes(v.to_vec())
}
pub fn t(v: bool) -> Value {
    Value::Bool(v)
}
pub fn nil() -> Value {
    Value::Nil
}
pub fn l(v: Vec<Value>) -> Value {
    Value::List(v)
}
pub fn m(entries: &[(&str, Value)]) -> Value {
    Value::Map(
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
    )
}

/// Calls a sprig function as the executor would, arity check included.
pub fn call(name: &str, args: &[Value]) -> Result<Value, String> {
    let mut funcs = Funcs::default();
    super::register(&mut funcs);
    let func = funcs
        .get(name)
        .unwrap_or_else(|| panic!("{name} is not registered"));
    let arity_ok = match func.arity {
        Arity::Exact(n) => args.len() == n,
        Arity::AtLeast(n) => args.len() >= n,
    };
    assert!(arity_ok, "{name} called with {} arguments", args.len());
    (func.call)(args).map_err(|e| e.0)
}

/// What Go prints for `{{ name args }}`.
pub fn render(result: Result<Value, String>) -> String {
    match result {
        Ok(Value::Nil) => "<no value>".into(),
        Ok(v) => sprint_value(&v),
        Err(e) => format!("ERR:{e}"),
    }
}

pub fn check(cases: &[(&str, Vec<Value>, &str)]) {
    let dump = std::env::var("SPRIG_GO_CASES").ok();
    let mut failures = Vec::new();
    for (name, args, want) in cases {
        let got = render(call(name, args));
        let exprs = args.iter().map(go_expr).collect::<Option<Vec<_>>>();
        if let (Some(path), Some(exprs)) = (&dump, exprs) {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .expect("case file");
            // Arguments go through variables, as data does: Go's executor checks literal
            // constants differently.
            let mut line = String::new();
            for (i, e) in exprs.iter().enumerate() {
                line.push_str(&format!("{{{{ $a{i} := {e} }}}}"));
            }
            let vars: Vec<String> = (0..exprs.len()).map(|i| format!("$a{i}")).collect();
            line.push_str(&format!("{{{{ {name} {} }}}}", vars.join(" ")));
            let json = |s: &str| serde_json::to_string(s).expect("a string encodes");
            writeln!(file, "{line}\t{}\t{}", json(want), json(&got)).expect("case file");
        }
        if got != *want {
            failures.push(format!(
                "{name} {args:?}\n   got: {got:?}\n  want: {want:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// A Go template expression that builds `v`, where there is one.
fn go_expr(v: &Value) -> Option<String> {
    Some(match v {
        Value::Nil => "(first (list))".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(x) if x.is_finite() => {
            let text = crate::gofmt::format_float_v(*x);
            if text.contains(['.', 'e']) {
                text
            } else {
                format!("{text}.0")
            }
        }
        Value::Float(x) => format!("(float64 \"{}\")", crate::gofmt::format_float_v(*x)),
        Value::String(s) => serde_json::to_string(s).ok()?,
        Value::List(items) => {
            let inner = items.iter().map(go_expr).collect::<Option<Vec<_>>>()?;
            format!("(list {})", inner.join(" "))
        }
        Value::Map(map) => {
            let mut parts = Vec::new();
            for (k, item) in map {
                parts.push(serde_json::to_string(k).ok()?);
                parts.push(go_expr(item)?);
            }
            format!("(dict {})", parts.join(" "))
        }
        Value::Bytes(_) | Value::Time(_) => return None,
    })
}
