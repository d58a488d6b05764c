//! sprig's type conversions: `atoi`, `int`, `int64`, `float64`, `toDecimal`, `toString`,
//! `toStrings`.

use super::args::{string_param, strval, to_float64, to_int, to_int64, to_string_list};
use super::strings::strings_value;
use crate::funcs::{Arity, Funcs};
use crate::gofmt::sprint_value;
use crate::value::Value;

pub fn register(funcs: &mut Funcs) {
    use Arity::Exact;
    // `strconv.Atoi`: decimal only, an optional sign, and 0 for anything else.
    funcs.insert("atoi", Exact(1), |a| {
        Ok(Value::Int(string_param(&a[0])?.parse().unwrap_or(0)))
    });
    funcs.insert("int", Exact(1), |a| Ok(Value::Int(to_int(&a[0]))));
    funcs.insert("int64", Exact(1), |a| Ok(Value::Int(to_int64(&a[0]))));
    funcs.insert("float64", Exact(1), |a| Ok(Value::Float(to_float64(&a[0]))));
    // The value's `%v` read as an octal number (a Unix file mode), 0 when it is not one.
    funcs.insert("toDecimal", Exact(1), |a| {
        Ok(Value::Int(
            i64::from_str_radix(&sprint_value(&a[0]), 8).unwrap_or(0),
        ))
    });
    funcs.insert("toString", Exact(1), |a| Ok(Value::String(strval(&a[0]))));
    funcs.insert("toStrings", Exact(1), |a| {
        Ok(strings_value(to_string_list(&a[0])))
    });
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{b, check, f, i, l, nil, s, t};

    #[test]
    fn conversions_follow_sprig() {
        check(&[
            ("atoi", vec![s("42")], "42"),
            ("atoi", vec![s("+42")], "42"),
            ("atoi", vec![s("-42")], "-42"),
            ("atoi", vec![s("4_2")], "0"),
            ("atoi", vec![s("0x10")], "0"),
            ("atoi", vec![s(" 1")], "0"),
            (
                "atoi",
                vec![i(1)],
                "ERR:wrong type for value; expected string; got int",
            ),
            ("int", vec![s("0x10")], "16"),
            ("int", vec![s("1.9")], "1"),
            ("int", vec![f(-2.7)], "-2"),
            ("int", vec![t(true)], "1"),
            ("int", vec![nil()], "0"),
            ("int64", vec![s("010")], "8"),
            ("int64", vec![s("abc")], "0"),
            ("int64", vec![f(1e20)], "-9223372036854775808"),
            ("float64", vec![s("1.5")], "1.5"),
            ("float64", vec![s("1_000")], "1000"),
            ("float64", vec![s("1e400")], "0"),
            ("float64", vec![i(3)], "3"),
            ("float64", vec![s("1e6")], "1e+06"),
            ("toDecimal", vec![s("0777")], "511"),
            ("toDecimal", vec![i(777)], "511"),
            ("toDecimal", vec![s("-10")], "-8"),
            ("toDecimal", vec![s("8")], "0"),
            ("toDecimal", vec![f(777.0)], "511"),
            ("toString", vec![i(1)], "1"),
            ("toString", vec![f(1e6)], "1e+06"),
            ("toString", vec![nil()], "<nil>"),
            ("toString", vec![b(b"hi")], "hi"),
            ("toString", vec![l(vec![s("a"), nil()])], "[a <nil>]"),
            (
                "toStrings",
                vec![l(vec![s("a"), nil(), i(2), f(0.5)])],
                "[a 2 0.5]",
            ),
            ("toStrings", vec![s("a")], "[a]"),
            ("toStrings", vec![nil()], "[]"),
        ]);
    }
}
