//! The function table a template is parsed with, and what the functions in it share: their
//! arity, error and argument conversions. The functions themselves (sprig's, ESO's) sit above
//! it and register into it; `Funcs::eso` assembles them.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::value::{Value, go_bytes, go_string};

/// How many arguments a function takes; the executor checks it before the call, with Go's
/// message ("wrong number of args for upper: want 1 got 2").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    Exact(usize),
    AtLeast(usize),
}

/// A function's failure; the executor wraps it as Go does: `error calling <name>: <message>`.
/// Argument type mismatches use Go's wording too: see [`expect_string`] and friends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuncError(pub String);

impl<T: std::fmt::Display> From<T> for FuncError
where
    T: std::error::Error,
{
    fn from(e: T) -> Self {
        FuncError(e.to_string())
    }
}

pub type FuncResult = Result<Value, FuncError>;

/// One callable function.
#[derive(Clone, Copy)]
pub struct Function {
    pub arity: Arity,
    pub call: fn(&[Value]) -> FuncResult,
    /// For a function whose one call takes milliseconds: the steps of the render's budget a
    /// call with these arguments costs, charged before it runs.
    pub cost: Option<fn(&[Value]) -> u64>,
}

/// The functions a template may call, by name. Cloned with every parsed template, so shared.
#[derive(Clone, Default)]
pub struct Funcs {
    table: Arc<BTreeMap<&'static str, Function>>,
}

impl std::fmt::Debug for Funcs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.table.keys()).finish()
    }
}

impl Funcs {
    pub fn insert(&mut self, name: &'static str, arity: Arity, call: fn(&[Value]) -> FuncResult) {
        let function = Function {
            arity,
            call,
            cost: None,
        };
        Arc::make_mut(&mut self.table).insert(name, function);
    }

    /// [`Funcs::insert`] for a function that costs `cost` steps a call (see [`Function::cost`]).
    pub fn insert_costly(
        &mut self,
        name: &'static str,
        arity: Arity,
        cost: fn(&[Value]) -> u64,
        call: fn(&[Value]) -> FuncResult,
    ) {
        let function = Function {
            arity,
            call,
            cost: Some(cost),
        };
        Arc::make_mut(&mut self.table).insert(name, function);
    }

    pub fn get(&self, name: &str) -> Option<&Function> {
        self.table.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &&'static str> {
        self.table.keys()
    }
}

/// Go's reflect-based argument conversion for a `string` parameter.
pub fn expect_string(v: &Value) -> Result<&str, FuncError> {
    match v {
        Value::String(s) => Ok(s),
        other => Err(wrong_type("string", other)),
    }
}

/// A `string` parameter read as the bytes of the Go string: binary data arrives escaped (see
/// [`go_string`]) and is handed to byte-oriented functions (hashes, base64, PKCS#12) as
/// the original bytes.
pub fn expect_go_bytes(v: &Value) -> Result<std::borrow::Cow<'_, [u8]>, FuncError> {
    match v {
        Value::String(s) => Ok(go_bytes(s)),
        Value::Bytes(b) => Ok(std::borrow::Cow::Borrowed(b)),
        other => Err(wrong_type("string", other)),
    }
}

/// A Go string result made of arbitrary bytes (decoded base64, decrypted data).
pub fn go_string_value(bytes: &[u8]) -> Value {
    Value::String(go_string(bytes))
}

/// Go's message when an argument cannot be assigned to a parameter's type.
pub fn wrong_type(expected: &str, got: &Value) -> FuncError {
    FuncError(format!(
        "wrong type for value; expected {expected}; got {}",
        got.go_type()
    ))
}
