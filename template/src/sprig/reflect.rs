//! sprig's reflection functions. Our values stand for these Go types: nil, `bool`, `int`,
//! `float64`, `string`, `[]uint8`, `[]interface {}`, `map[string]interface {}` and
//! `time.Time` (see [`Value::go_type`]); Go's other types (`[]string`, `int64`, a pointer to a
//! semver version) are not told apart from those.

use super::args::{go_kind, string_param};
use crate::funcs::{Arity, Funcs};
use crate::value::Value;

pub fn register(funcs: &mut Funcs) {
    use Arity::Exact;
    funcs.insert("typeOf", Exact(1), |a| Ok(a[0].go_type().into()));
    funcs.insert("typeIs", Exact(2), |a| {
        Ok((string_param(&a[0])? == a[1].go_type()).into())
    });
    funcs.insert("typeIsLike", Exact(2), |a| {
        let target = string_param(&a[0])?;
        let actual = a[1].go_type();
        Ok((target == actual || actual.strip_prefix('*') == Some(target)).into())
    });
    funcs.insert("kindOf", Exact(1), |a| Ok(go_kind(&a[0]).into()));
    funcs.insert("kindIs", Exact(2), |a| {
        Ok((string_param(&a[0])? == go_kind(&a[1])).into())
    });
    // `reflect.DeepEqual`: the same type and equal contents (NaN equals nothing, an int never
    // equals a float).
    funcs.insert("deepEqual", Exact(2), |a| Ok(Value::Bool(a[0] == a[1])));
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{b, check, f, i, l, m, nil, s, t};

    #[test]
    fn reflection_names_go_types() {
        check(&[
            ("typeOf", vec![s("a")], "string"),
            ("typeOf", vec![i(1)], "int"),
            ("typeOf", vec![f(1.5)], "float64"),
            ("typeOf", vec![t(true)], "bool"),
            ("typeOf", vec![nil()], "<nil>"),
            ("typeOf", vec![l(vec![])], "[]interface {}"),
            ("typeOf", vec![m(&[])], "map[string]interface {}"),
            ("typeOf", vec![b(b"x")], "[]uint8"),
            ("typeIs", vec![s("int"), i(1)], "true"),
            ("typeIs", vec![s("int"), s("1")], "false"),
            ("typeIsLike", vec![s("string"), s("1")], "true"),
            ("kindOf", vec![l(vec![])], "slice"),
            ("kindOf", vec![m(&[])], "map"),
            ("kindOf", vec![nil()], "invalid"),
            ("kindOf", vec![f(1.0)], "float64"),
            ("kindIs", vec![s("map"), m(&[])], "true"),
            ("kindIs", vec![s("string"), i(1)], "false"),
            (
                "deepEqual",
                vec![l(vec![i(1), s("a")]), l(vec![i(1), s("a")])],
                "true",
            ),
            ("deepEqual", vec![i(1), f(1.0)], "false"),
            (
                "deepEqual",
                vec![m(&[("a", i(1))]), m(&[("a", i(1))])],
                "true",
            ),
            ("deepEqual", vec![nil(), nil()], "true"),
            ("deepEqual", vec![s("a"), s("b")], "false"),
        ]);
    }
}
