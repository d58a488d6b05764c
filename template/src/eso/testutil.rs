//! Calls a function through the ESO table, as the executor would.

use crate::funcs::{FuncResult, Funcs};
use crate::value::Value;

pub fn call_values(name: &str, args: &[Value]) -> FuncResult {
    let mut funcs = Funcs::default();
    super::register(&mut funcs);
    let f = funcs.get(name).expect("registered");
    (f.call)(args)
}

pub fn call(name: &str, args: &[&str]) -> FuncResult {
    let args: Vec<Value> = args.iter().map(|&a| Value::from(a)).collect();
    call_values(name, &args)
}

/// A fixture under `src/eso/testdata/` (made with openssl and Go; see its README).
pub fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/src/eso/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn fixture_text(name: &str) -> String {
    String::from_utf8(fixture(name)).expect("text fixture")
}
