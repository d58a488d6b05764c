//! sprig's dictionary functions (`dict.go`), on `map[string]interface {}`.
//!
//! Go's `set`, `unset` and the merges change the map they are given (and `merge` the maps
//! nested in it) as well as returning it; here they return a changed copy, so a template that
//! relies on the change showing through another reference to the map differs. `keys` and
//! `values` come in key order, where Go's come in random order.

use std::collections::BTreeMap;

use super::args::{map_param, string_param, strval};
use super::defaults::is_empty;
use super::strings::strings_value;
use crate::funcs::{Arity, FuncError, FuncResult, Funcs};
use crate::value::Value;

type Map = BTreeMap<String, Value>;

pub fn register(funcs: &mut Funcs) {
    use Arity::{AtLeast, Exact};
    funcs.insert("dict", AtLeast(0), |a| {
        let map = a
            .chunks(2)
            .map(|pair| {
                let value = pair.get(1).cloned().unwrap_or_else(|| Value::from(""));
                (strval(&pair[0]), value)
            })
            .collect();
        Ok(Value::Map(map))
    });
    funcs.insert("get", Exact(2), |a| {
        let map = map_param(&a[0])?;
        let key = string_param(&a[1])?;
        Ok(map.get(key).cloned().unwrap_or_else(|| Value::from("")))
    });
    funcs.insert("set", Exact(3), |a| {
        if a[0] == Value::Nil {
            return Err(FuncError("assignment to entry in nil map".into()));
        }
        let mut map = map_param(&a[0])?;
        map.insert(string_param(&a[1])?.to_owned(), a[2].clone());
        Ok(Value::Map(map))
    });
    funcs.insert("unset", Exact(2), |a| {
        let mut map = map_param(&a[0])?;
        map.remove(string_param(&a[1])?);
        Ok(Value::Map(map))
    });
    funcs.insert("hasKey", Exact(2), |a| {
        Ok(map_param(&a[0])?.contains_key(string_param(&a[1])?).into())
    });
    funcs.insert("pluck", AtLeast(1), |a| {
        let key = string_param(&a[0])?;
        let mut found = Vec::new();
        for map in &a[1..] {
            found.extend(map_param(map)?.get(key).cloned());
        }
        Ok(Value::List(found))
    });
    funcs.insert("keys", AtLeast(0), |a| {
        let mut keys = Vec::new();
        for map in a {
            keys.extend(map_param(map)?.into_keys());
        }
        Ok(strings_value(keys))
    });
    funcs.insert("values", Exact(1), |a| {
        Ok(Value::List(map_param(&a[0])?.into_values().collect()))
    });
    funcs.insert("pick", AtLeast(1), |a| {
        let map = map_param(&a[0])?;
        let mut picked = Map::new();
        for key in &a[1..] {
            let key = string_param(key)?;
            if let Some(v) = map.get(key) {
                picked.insert(key.to_owned(), v.clone());
            }
        }
        Ok(Value::Map(picked))
    });
    funcs.insert("omit", AtLeast(1), |a| {
        let mut map = map_param(&a[0])?;
        for key in &a[1..] {
            map.remove(string_param(key)?);
        }
        Ok(Value::Map(map))
    });
    for name in ["merge", "mustMerge"] {
        funcs.insert(name, AtLeast(1), |a| merge_all(a, false));
    }
    for name in ["mergeOverwrite", "mustMergeOverwrite"] {
        funcs.insert(name, AtLeast(1), |a| merge_all(a, true));
    }
    // copystructure copies; our values are already independent copies. It fails on nil
    // (and sprig's `deepCopy` panics with the same message).
    for name in ["deepCopy", "mustDeepCopy"] {
        funcs.insert(name, Exact(1), |a| match &a[0] {
            Value::Nil => Err(FuncError(
                "reflect: call of reflect.Value.Type on zero Value".into(),
            )),
            other => Ok(other.clone()),
        });
    }
    funcs.insert("dig", AtLeast(0), dig);
}

/// `merge DST SRC...`: mergo's `Merge` (or `MergeWithOverwrite`) of each source into DST in
/// turn. mergo cannot fail on these types, so the `must` variants never do either.
fn merge_all(args: &[Value], overwrite: bool) -> FuncResult {
    let mut dst = map_param(&args[0])?;
    for src in &args[1..] {
        merge(&mut dst, &map_param(src)?, overwrite);
    }
    Ok(Value::Map(dst))
}

/// mergo's `deepMerge` of two `map[string]interface {}`: a source entry is written when
/// overwriting or when the destination entry is missing or empty (nil, zero, empty); a nil
/// source entry only when overwriting; a map source is merged into a map destination instead.
/// (mergo's separate rules for slices come to the same.)
fn merge(dst: &mut Map, src: &Map, overwrite: bool) {
    for (key, s) in src {
        if let Value::Nil = s {
            if overwrite {
                dst.insert(key.clone(), Value::Nil);
            }
            continue;
        }
        if let (Some(Value::Map(d)), Value::Map(s_map)) = (dst.get_mut(key), s) {
            merge(d, s_map, overwrite);
            if !d.is_empty() {
                continue;
            }
        }
        if overwrite || dst.get(key).is_none_or(is_empty) {
            dst.insert(key.clone(), s.clone());
        }
    }
}

/// `dig KEY... DEFAULT DICT`: the value at the path of keys, or DEFAULT where a key is
/// missing. Go's type assertions on the arguments panic, and so report as errors here.
fn dig(args: &[Value]) -> FuncResult {
    if args.len() < 3 {
        return Err(FuncError("dig needs at least three arguments".into()));
    }
    let (keys, rest) = args.split_at(args.len() - 2);
    let (default, dict) = (&rest[0], &rest[1]);
    let mut map = as_map(dict)?;
    let keys = keys
        .iter()
        .map(|k| match k {
            Value::String(s) => Ok(s.as_str()),
            other => Err(conversion_error(other, "string")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    for (i, key) in keys.iter().enumerate() {
        let Some(step) = map.get(*key) else {
            return Ok(default.clone());
        };
        if i + 1 == keys.len() {
            return Ok(step.clone());
        }
        map = as_map(step)?;
    }
    Ok(default.clone())
}

fn as_map(v: &Value) -> Result<&Map, FuncError> {
    match v {
        Value::Map(m) => Ok(m),
        other => Err(conversion_error(other, "map[string]interface {}")),
    }
}

/// Go's panic message for a failed type assertion on an `interface{}`.
fn conversion_error(v: &Value, want: &str) -> FuncError {
    let got = match v {
        Value::Nil => "nil",
        other => other.go_type(),
    };
    FuncError(format!(
        "interface conversion: interface {{}} is {got}, not {want}"
    ))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{check, i, l, m, nil, s, t};

    #[test]
    fn building_and_reading() {
        check(&[
            (
                "dict",
                vec![s("a"), i(1), i(2), t(true), s("odd")],
                "map[2:true a:1 odd:]",
            ),
            ("dict", vec![], "map[]"),
            ("get", vec![m(&[("a", i(1))]), s("a")], "1"),
            ("get", vec![m(&[("a", i(1))]), s("b")], ""),
            ("get", vec![nil(), s("b")], ""),
            (
                "get",
                vec![s("x"), s("b")],
                "ERR:wrong type for value; expected map[string]interface {}; got string",
            ),
            ("set", vec![m(&[("a", i(1))]), s("b"), i(2)], "map[a:1 b:2]"),
            (
                "set",
                vec![nil(), s("b"), i(2)],
                "ERR:assignment to entry in nil map",
            ),
            (
                "unset",
                vec![m(&[("a", i(1)), ("b", i(2))]), s("a")],
                "map[b:2]",
            ),
            ("unset", vec![nil(), s("a")], "map[]"),
            ("hasKey", vec![m(&[("a", nil())]), s("a")], "true"),
            ("hasKey", vec![m(&[]), s("a")], "false"),
            (
                "pluck",
                vec![
                    s("a"),
                    m(&[("a", i(1))]),
                    m(&[("b", i(2))]),
                    m(&[("a", i(3))]),
                ],
                "[1 3]",
            ),
            ("pluck", vec![s("a")], "[]"),
            (
                "keys",
                vec![m(&[("b", i(1)), ("a", i(2))]), m(&[("a", i(3))])],
                "[a b a]",
            ),
            ("keys", vec![], "[]"),
            ("values", vec![m(&[("b", i(1)), ("a", i(2))])], "[2 1]"),
            (
                "pick",
                vec![m(&[("a", i(1)), ("b", i(2))]), s("a"), s("c")],
                "map[a:1]",
            ),
            (
                "omit",
                vec![m(&[("a", i(1)), ("b", i(2))]), s("a"), s("c")],
                "map[b:2]",
            ),
            ("deepCopy", vec![m(&[("a", l(vec![i(1)]))])], "map[a:[1]]"),
            (
                "mustDeepCopy",
                vec![nil()],
                "ERR:reflect: call of reflect.Value.Type on zero Value",
            ),
        ]);
    }

    #[test]
    fn merging_follows_mergo() {
        let dst = || {
            m(&[
                ("s", s("dst")),
                ("e", s("")),
                ("z", i(0)),
                ("n", nil()),
                ("l", l(vec![i(1)])),
                ("el", l(vec![])),
                ("m", m(&[("x", i(1)), ("y", s(""))])),
                ("em", m(&[])),
                ("sm", s("scalar")),
            ])
        };
        let src = || {
            m(&[
                ("s", s("src")),
                ("e", s("src")),
                ("z", i(5)),
                ("n", s("src")),
                ("l", l(vec![i(2)])),
                ("el", l(vec![i(2)])),
                ("m", m(&[("x", i(2)), ("y", s("src")), ("w", i(3))])),
                ("em", m(&[("k", i(1))])),
                ("sm", m(&[("k", i(1))])),
                ("new", s("src")),
                ("nl", l(vec![i(9)])),
                ("nilsrc", nil()),
                ("s2", nil()),
            ])
        };
        check(&[
            (
                "merge",
                vec![dst(), src()],
                "map[e:src el:[2] em:map[k:1] l:[1] m:map[w:3 x:1 y:src] n:src new:src nl:[9] s:dst sm:scalar z:5]",
            ),
            (
                "mergeOverwrite",
                vec![dst(), src()],
                "map[e:src el:[2] em:map[k:1] l:[2] m:map[w:3 x:2 y:src] n:src new:src nilsrc:<nil> nl:[9] s:src s2:<nil> sm:map[k:1] z:5]",
            ),
            (
                "merge",
                vec![
                    m(&[("a", i(1))]),
                    m(&[("a", i(2)), ("b", i(2))]),
                    m(&[("c", i(3))]),
                ],
                "map[a:1 b:2 c:3]",
            ),
            (
                "mustMerge",
                vec![m(&[]), m(&[("l", l(vec![i(1)]))])],
                "map[l:[1]]",
            ),
            (
                "mergeOverwrite",
                vec![m(&[("a", m(&[("b", i(1))]))]), m(&[("a", m(&[]))])],
                "map[a:map[b:1]]",
            ),
            ("merge", vec![nil(), m(&[("a", i(1))])], "map[a:1]"),
            ("merge", vec![m(&[])], "map[]"),
            (
                "mustMergeOverwrite",
                vec![m(&[("a", s("x"))]), s("y")],
                "ERR:wrong type for value; expected map[string]interface {}; got string",
            ),
        ]);
    }

    #[test]
    fn digging() {
        let data = || m(&[("a", m(&[("b", m(&[("c", s("found"))])), ("s", s("x"))]))]);
        check(&[
            (
                "dig",
                vec![s("a"), s("b"), s("c"), s("def"), data()],
                "found",
            ),
            ("dig", vec![s("a"), s("x"), s("c"), s("def"), data()], "def"),
            (
                "dig",
                vec![s("a"), s("def"), data()],
                "map[b:map[c:found] s:x]",
            ),
            (
                "dig",
                vec![s("a"), s("s"), s("c"), s("def"), data()],
                "ERR:interface conversion: interface {} is string, not map[string]interface {}",
            ),
            (
                "dig",
                vec![s("a"), s("def"), s("x")],
                "ERR:interface conversion: interface {} is string, not map[string]interface {}",
            ),
            (
                "dig",
                vec![i(1), s("def"), data()],
                "ERR:interface conversion: interface {} is int, not string",
            ),
            (
                "dig",
                vec![s("def"), data()],
                "ERR:dig needs at least three arguments",
            ),
            (
                "dig",
                vec![s("a"), s("def"), nil()],
                "ERR:interface conversion: interface {} is nil, not map[string]interface {}",
            ),
        ]);
    }
}
