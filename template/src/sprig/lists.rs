//! sprig's list functions (`list.go`). They take any Go slice; on another kind sprig returns an
//! error from the `must` variant and panics in the plain one, which Go's executor reports as
//! the same error, so both variants behave alike here. A nil list makes sprig dereference a nil
//! type, which Go reports as a nil pointer dereference.

use super::args::{go_kind, int_param, list_items, nil_dereference, to_int};
use super::defaults::is_empty;
use crate::funcs::{Arity, FuncError, FuncResult, Funcs};
use crate::value::Value;

pub fn register(funcs: &mut Funcs) {
    use Arity::{AtLeast, Exact};
    funcs.insert("list", AtLeast(0), |a| Ok(Value::List(a.to_vec())));
    funcs.insert("tuple", AtLeast(0), |a| Ok(Value::List(a.to_vec())));
    for name in ["append", "push", "mustAppend", "mustPush"] {
        funcs.insert(name, Exact(2), |a| {
            let mut items = items(&a[0], "Cannot push on type")?;
            items.push(a[1].clone());
            Ok(Value::List(items))
        });
    }
    for name in ["prepend", "mustPrepend"] {
        funcs.insert(name, Exact(2), |a| {
            let mut items = items(&a[0], "Cannot prepend on type")?;
            items.insert(0, a[1].clone());
            Ok(Value::List(items))
        });
    }
    for name in ["first", "mustFirst"] {
        funcs.insert(name, Exact(1), |a| {
            let items = items(&a[0], "Cannot find first on type")?;
            Ok(items.into_iter().next().unwrap_or(Value::Nil))
        });
    }
    for name in ["last", "mustLast"] {
        funcs.insert(name, Exact(1), |a| {
            let items = items(&a[0], "Cannot find last on type")?;
            Ok(items.into_iter().next_back().unwrap_or(Value::Nil))
        });
    }
    for name in ["rest", "mustRest"] {
        funcs.insert(name, Exact(1), |a| {
            let items = items(&a[0], "Cannot find rest on type")?;
            Ok(Value::List(items.into_iter().skip(1).collect()))
        });
    }
    for name in ["initial", "mustInitial"] {
        funcs.insert(name, Exact(1), |a| {
            let mut items = items(&a[0], "Cannot find initial on type")?;
            items.pop();
            Ok(Value::List(items))
        });
    }
    for name in ["reverse", "mustReverse"] {
        funcs.insert(name, Exact(1), |a| {
            let mut items = items(&a[0], "Cannot find reverse on type")?;
            items.reverse();
            Ok(Value::List(items))
        });
    }
    for name in ["compact", "mustCompact"] {
        funcs.insert(name, Exact(1), |a| {
            let mut items = items(&a[0], "Cannot compact on type")?;
            items.retain(|v| !is_empty(v));
            Ok(Value::List(items))
        });
    }
    for name in ["uniq", "mustUniq"] {
        funcs.insert(name, Exact(1), |a| {
            let mut unique: Vec<Value> = Vec::new();
            for item in items(&a[0], "Cannot find uniq on type")? {
                if !unique.contains(&item) {
                    unique.push(item);
                }
            }
            Ok(Value::List(unique))
        });
    }
    for name in ["without", "mustWithout"] {
        funcs.insert(name, AtLeast(1), |a| {
            let mut items = items(&a[0], "Cannot find without on type")?;
            items.retain(|item| !a[1..].contains(item));
            Ok(Value::List(items))
        });
    }
    for name in ["has", "mustHas"] {
        funcs.insert(name, Exact(2), |a| {
            if a[1] == Value::Nil {
                return Ok(Value::Bool(false));
            }
            Ok(items(&a[1], "Cannot find has on type")?
                .contains(&a[0])
                .into())
        });
    }
    for name in ["slice", "mustSlice"] {
        funcs.insert(name, AtLeast(1), slice);
    }
    for name in ["chunk", "mustChunk"] {
        funcs.insert(name, Exact(2), chunk);
    }
    funcs.insert("concat", AtLeast(0), |a| {
        let mut all = Vec::new();
        for list in a {
            all.extend(items(list, "Cannot concat type")?);
        }
        Ok(Value::List(all))
    });
}

/// The elements of a slice argument, or sprig's error naming the argument's kind.
fn items(v: &Value, message: &str) -> Result<Vec<Value>, FuncError> {
    if let Value::Nil = v {
        return Err(nil_dereference());
    }
    list_items(v).ok_or_else(|| {
        let suffix = if message == "Cannot concat type" {
            " as list"
        } else {
            ""
        };
        FuncError(format!("{message} {}{suffix}", go_kind(v)))
    })
}

/// `slice LIST [START [END]]`: Go's `list[start:end]`, keeping a `[]byte` a `[]byte`.
fn slice(args: &[Value]) -> FuncResult {
    let list = &args[0];
    if let Value::Nil = list {
        return Err(nil_dereference());
    }
    let items = list_items(list).ok_or_else(|| {
        FuncError(format!(
            "list should be type of slice or array but {}",
            go_kind(list)
        ))
    })?;
    if items.is_empty() {
        return Ok(Value::Nil);
    }
    let len = items.len() as i64;
    let start = args.get(1).map_or(0, to_int);
    let end = args.get(2).map_or(len, to_int);
    if start < 0 || end < start || end > len {
        return Err(FuncError(
            "reflect.Value.Slice: slice index out of bounds".into(),
        ));
    }
    let (start, end) = (start as usize, end as usize);
    Ok(match list {
        Value::Bytes(bytes) => Value::Bytes(bytes[start..end].to_vec()),
        _ => Value::List(items[start..end].to_vec()),
    })
}

/// `chunk SIZE LIST`, with sprig's float arithmetic for the chunk count and Go's panic for a
/// negative length (which a zero or negative size leads to).
fn chunk(args: &[Value]) -> FuncResult {
    let size = int_param(&args[0])?;
    let items = items(&args[1], "Cannot chunk type")?;
    let len = items.len() as i64;
    let out_of_range = || FuncError("runtime error: makeslice: len out of range".into());
    let count = super::args::float_to_int(((len - 1) as f64 / size as f64).floor() + 1.0);
    if count < 0 {
        return Err(out_of_range());
    }
    let mut chunks = Vec::new();
    for i in 0..count {
        let mut clen = size;
        if i == count - 1 {
            clen = super::args::float_to_int((len as f64 % size as f64).floor());
            if clen == 0 {
                clen = size;
            }
        }
        if clen < 0 {
            return Err(out_of_range());
        }
        let from = i.saturating_mul(size);
        let chunk = items
            .get(from as usize..from.saturating_add(clen) as usize)
            .ok_or_else(|| FuncError("runtime error: index out of range".into()))?;
        chunks.push(Value::List(chunk.to_vec()));
    }
    Ok(Value::List(chunks))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{b, check, f, i, l, m, nil, s};
    use crate::value::Value;

    fn abc() -> Value {
        l(vec![s("a"), s("b"), s("c")])
    }

    #[test]
    fn building_lists() {
        check(&[
            ("list", vec![i(1), s("a"), nil()], "[1 a <nil>]"),
            ("tuple", vec![], "[]"),
            ("append", vec![abc(), s("d")], "[a b c d]"),
            ("push", vec![l(vec![]), i(1)], "[1]"),
            (
                "mustPush",
                vec![s("x"), i(1)],
                "ERR:Cannot push on type string",
            ),
            (
                "append",
                vec![nil(), i(1)],
                "ERR:runtime error: invalid memory address or nil pointer dereference",
            ),
            ("prepend", vec![abc(), s("z")], "[z a b c]"),
            (
                "mustPrepend",
                vec![m(&[]), s("z")],
                "ERR:Cannot prepend on type map",
            ),
            ("concat", vec![abc(), l(vec![i(1)]), l(vec![])], "[a b c 1]"),
            ("concat", vec![], "[]"),
            (
                "concat",
                vec![abc(), i(1)],
                "ERR:Cannot concat type int as list",
            ),
            ("append", vec![b(b"ab"), i(1)], "[97 98 1]"),
        ]);
    }

    #[test]
    fn taking_apart() {
        check(&[
            ("first", vec![abc()], "a"),
            ("first", vec![l(vec![])], "<no value>"),
            (
                "mustFirst",
                vec![s("abc")],
                "ERR:Cannot find first on type string",
            ),
            ("last", vec![abc()], "c"),
            ("last", vec![l(vec![])], "<no value>"),
            ("mustLast", vec![i(1)], "ERR:Cannot find last on type int"),
            ("rest", vec![abc()], "[b c]"),
            ("rest", vec![l(vec![])], "[]"),
            (
                "mustRest",
                vec![f(1.0)],
                "ERR:Cannot find rest on type float64",
            ),
            ("initial", vec![abc()], "[a b]"),
            ("initial", vec![l(vec![])], "[]"),
            (
                "mustInitial",
                vec![s("x")],
                "ERR:Cannot find initial on type string",
            ),
            ("reverse", vec![abc()], "[c b a]"),
            (
                "mustReverse",
                vec![s("x")],
                "ERR:Cannot find reverse on type string",
            ),
            ("slice", vec![abc()], "[a b c]"),
            ("slice", vec![abc(), i(1)], "[b c]"),
            ("slice", vec![abc(), i(1), i(2)], "[b]"),
            ("slice", vec![abc(), s("1"), f(2.9)], "[b]"),
            ("slice", vec![l(vec![]), i(1)], "<no value>"),
            (
                "slice",
                vec![abc(), i(2), i(1)],
                "ERR:reflect.Value.Slice: slice index out of bounds",
            ),
            (
                "mustSlice",
                vec![abc(), i(0), i(4)],
                "ERR:reflect.Value.Slice: slice index out of bounds",
            ),
            (
                "mustSlice",
                vec![s("abc"), i(1)],
                "ERR:list should be type of slice or array but string",
            ),
            (
                "chunk",
                vec![i(2), l(vec![i(1), i(2), i(3), i(4), i(5)])],
                "[[1 2] [3 4] [5]]",
            ),
            (
                "chunk",
                vec![i(2), l(vec![i(1), i(2), i(3), i(4)])],
                "[[1 2] [3 4]]",
            ),
            ("chunk", vec![i(3), l(vec![])], "[]"),
            (
                "chunk",
                vec![i(0), abc()],
                "ERR:runtime error: makeslice: len out of range",
            ),
            (
                "chunk",
                vec![i(-1), abc()],
                "ERR:runtime error: makeslice: len out of range",
            ),
            ("chunk", vec![i(-5), abc()], "[]"),
            (
                "mustChunk",
                vec![i(1), s("x")],
                "ERR:Cannot chunk type string",
            ),
        ]);
    }

    #[test]
    fn filtering_and_searching() {
        check(&[
            (
                "compact",
                vec![l(vec![
                    s("a"),
                    s(""),
                    i(0),
                    nil(),
                    l(vec![]),
                    s("b"),
                    f(0.0),
                ])],
                "[a b]",
            ),
            (
                "mustCompact",
                vec![s("x")],
                "ERR:Cannot compact on type string",
            ),
            (
                "uniq",
                vec![l(vec![
                    i(1),
                    s("1"),
                    i(1),
                    l(vec![i(2)]),
                    l(vec![i(2)]),
                    f(1.0),
                ])],
                "[1 1 [2] 1]",
            ),
            (
                "mustUniq",
                vec![s("x")],
                "ERR:Cannot find uniq on type string",
            ),
            (
                "without",
                vec![l(vec![i(1), i(2), s("1"), i(3)]), i(1), i(3)],
                "[2 1]",
            ),
            ("without", vec![abc()], "[a b c]"),
            (
                "mustWithout",
                vec![s("x"), i(1)],
                "ERR:Cannot find without on type string",
            ),
            ("has", vec![s("b"), abc()], "true"),
            ("has", vec![i(1), l(vec![f(1.0)])], "false"),
            ("has", vec![s("b"), nil()], "false"),
            (
                "mustHas",
                vec![s("b"), s("abc")],
                "ERR:Cannot find has on type string",
            ),
        ]);
    }
}
