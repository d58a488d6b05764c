//! The argument and result conversions ESO's functions share.

use crate::funcs::{FuncError, expect_go_bytes, expect_string, go_string_value};
use crate::value::Value;

/// A `string` parameter that may carry binary data: a [`Value::String`], or [`Value::Bytes`] for
/// the Go strings that are not UTF-8.
pub(super) fn expect_binary(v: &Value) -> Result<std::borrow::Cow<'_, [u8]>, FuncError> {
    expect_go_bytes(v)
}

/// A Go string result that may be binary: text when it is UTF-8, bytes otherwise.
pub(super) fn binary_result(bytes: Vec<u8>) -> Value {
    go_string_value(&bytes)
}

pub(super) fn text(v: &Value) -> Result<&str, FuncError> {
    expect_string(v)
}

/// What Go's template engine reports when a function dereferences a nil pointer: ESO's PKCS#12
/// builders do so when an argument holds no PEM block, and text/template turns the panic into
/// this error.
pub(super) fn nil_dereference() -> FuncError {
    FuncError("runtime error: invalid memory address or nil pointer dereference".to_owned())
}
