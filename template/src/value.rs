//! The values a template works on, modelled on the Go types that ESO's templates see: the data
//! map is `map[string]string`, and functions return strings, numbers, `[]interface{}`,
//! `map[string]interface{}`, `[]byte` and `time.Time`.

use std::collections::BTreeMap;
use std::fmt;

/// A Go value as a template sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Go's `nil` (an empty interface); printed `<nil>` inside a container and `<no value>` on its own.
    Nil,
    Bool(bool),
    /// Every signed integer kind; Go's templates compare and print them alike.
    Int(i64),
    Float(f64),
    String(String),
    /// `[]byte`: `%v` prints the numbers, `%s` the text.
    Bytes(Vec<u8>),
    /// `[]interface{}` (and `[]string`, which prints the same).
    List(Vec<Value>),
    /// `map[string]interface{}`; Go's fmt and `range` both visit keys in sorted order.
    Map(BTreeMap<String, Value>),
    Time(jiff::Zoned),
}

impl Value {
    /// The Go type name, as Go's error messages print it.
    pub fn go_type(&self) -> &'static str {
        match self {
            Value::Nil => "<nil>",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float64",
            Value::String(_) => "string",
            Value::Bytes(_) => "[]uint8",
            Value::List(_) => "[]interface {}",
            Value::Map(_) => "map[string]interface {}",
            Value::Time(_) => "time.Time",
        }
    }

    /// Go's template truth: false, 0, nil, and empty strings, slices and maps are false.
    pub fn truth(&self) -> bool {
        match self {
            Value::Nil => false,
            Value::Bool(b) => *b,
            Value::Int(i) => *i != 0,
            Value::Float(f) => *f != 0.0,
            Value::String(s) => !s.is_empty(),
            Value::Bytes(b) => !b.is_empty(),
            Value::List(l) => !l.is_empty(),
            Value::Map(m) => !m.is_empty(),
            Value::Time(_) => true,
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::String(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::String(s)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Int(i)
    }
}

impl From<f64> for Value {
    fn from(f: f64) -> Self {
        Value::Float(f)
    }
}

/// `fmt.Sprint(v)` (the `%v` verb): what a template prints for an action's value.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::gofmt::sprint_value(self))
    }
}
