//! `toYaml` and `fromYaml` as ESO runs them through sigs.k8s.io/yaml: `toYaml` marshals to
//! JSON, reads that back with yaml.v2 and marshals it as YAML (minus the final newline);
//! `fromYaml` reads YAML with yaml.v2, converts it to JSON and decodes that into a map, so
//! every number comes back as a float64, and failures land in the map's `Error` key.

mod emit;
mod parse;
mod resolve;

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use self::emit::Node;
use crate::eso::args::text;
use crate::funcs::FuncResult;
use crate::value::Value;

/// A JSON string read back by yaml.v2: Go's JSON leaves U+0085 unescaped, and YAML folds that
/// line break (with the blanks around it) into a space, or runs of them into newlines.
fn fold_nel(s: &str) -> String {
    if !s.contains('\u{85}') {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('\u{85}') {
        out.push_str(rest[..i].trim_end_matches([' ', '\t']));
        let run = &rest[i..];
        let end = run
            .find(|c: char| !matches!(c, '\u{85}' | ' ' | '\t'))
            .unwrap_or(run.len());
        let breaks = run[..end].matches('\u{85}').count();
        if breaks == 1 {
            out.push(' ');
        } else {
            out.extend(std::iter::repeat_n('\n', breaks - 1));
        }
        rest = &run[end..];
    }
    out.push_str(rest);
    out
}

/// yaml.v2's key order: letters after other characters, digit runs by their number.
fn key_less(a: &str, b: &str) -> bool {
    let (ar, br): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let is_digit = |c: char| c.is_ascii_digit() || (!c.is_ascii() && c.is_numeric());
    for i in 0..ar.len().min(br.len()) {
        if ar[i] == br[i] {
            continue;
        }
        let (al, bl) = (ar[i].is_alphabetic(), br[i].is_alphabetic());
        if al && bl {
            return ar[i] < br[i];
        }
        if al || bl {
            return bl;
        }
        let (mut an, mut bn) = (0i64, 0i64);
        if ar[i] == '0' || br[i] == '0' {
            for j in (0..i).rev() {
                if !is_digit(ar[j]) {
                    break;
                }
                if ar[j] != '0' {
                    an = 1;
                    bn = 1;
                    break;
                }
            }
        }
        let run = |chars: &[char], n: &mut i64| {
            let mut k = i;
            while k < chars.len() && is_digit(chars[k]) {
                let d = i64::from(u32::from(chars[k])) - i64::from(u32::from('0'));
                *n = n.wrapping_mul(10).wrapping_add(d);
                k += 1;
            }
            k
        };
        let (ai, bi) = (run(&ar, &mut an), run(&br, &mut bn));
        if an != bn {
            return an < bn;
        }
        if ai != bi {
            return ai < bi;
        }
        return ar[i] < br[i];
    }
    ar.len() < br.len()
}

/// `v` as Go's JSON encoder writes it and yaml.v2 reads it back; `None` where JSON fails.
fn to_node(v: &Value) -> Option<Node> {
    Some(match v {
        Value::Nil => Node::Null,
        Value::Bool(b) => Node::Bool(*b),
        Value::Int(i) => Node::Int(i128::from(*i)),
        Value::Float(f) if !f.is_finite() => return None,
        // Whole numbers below 1e21 are JSON integers, which yaml.v2 reads as ints when they fit.
        Value::Float(f) if f.fract() == 0.0 && f.abs() < 1e21 => {
            let text = format!("{f}");
            match text
                .parse::<i64>()
                .map(i128::from)
                .or_else(|_| text.parse::<u64>().map(i128::from))
            {
                Ok(i) => Node::Int(i),
                Err(_) => Node::Float(*f),
            }
        }
        Value::Float(f) => Node::Float(*f),
        Value::String(s) => Node::Str(fold_nel(s)),
        Value::Bytes(b) => Node::Str(STANDARD.encode(b)),
        Value::Time(t) => Node::Str(crate::gofmt::rfc3339_nano(t)),
        Value::List(items) => Node::Seq(items.iter().map(to_node).collect::<Option<_>>()?),
        Value::Map(m) => {
            let mut entries: Vec<(String, Node)> = m
                .iter()
                .map(|(k, v)| Some((fold_nel(k), to_node(v)?)))
                .collect::<Option<_>>()?;
            entries.sort_by(|(a, _), (b, _)| {
                if key_less(a, b) {
                    std::cmp::Ordering::Less
                } else if key_less(b, a) {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            });
            Node::Map(entries)
        }
    })
}

/// `toYaml VALUE`: never fails; what Go cannot marshal gives the empty string.
pub fn to_yaml(args: &[Value]) -> FuncResult {
    let out = to_node(&args[0])
        .map(|n| emit::emit(&n))
        .unwrap_or_default();
    let out = out.strip_suffix('\n').unwrap_or(&out);
    Ok(Value::String(out.to_owned()))
}

/// `fromYaml TEXT`: the top-level mapping, or a map holding the error under `Error`.
pub fn from_yaml(args: &[Value]) -> FuncResult {
    let map = match parse::parse(text(&args[0])?) {
        Ok(map) => map,
        Err(message) => BTreeMap::from([("Error".to_owned(), Value::String(message))]),
    };
    Ok(Value::Map(map))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eso::testutil::{call, call_values, fixture_text};

    /// JSON as sprig's `fromJson` gives it: numbers are float64.
    fn from_json(v: &serde_json::Value) -> Value {
        match v {
            serde_json::Value::Null => Value::Nil,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => Value::Float(n.as_f64().unwrap()),
            serde_json::Value::String(s) => Value::String(s.clone()),
            serde_json::Value::Array(a) => Value::List(a.iter().map(from_json).collect()),
            serde_json::Value::Object(o) => {
                Value::Map(o.iter().map(|(k, v)| (k.clone(), from_json(v))).collect())
            }
        }
    }

    fn pairs(name: &str) -> Vec<(String, String)> {
        serde_json::from_str(&fixture_text(name)).unwrap()
    }

    // Pairs of (JSON input, output) printed by ESO's toYAML after Go's json.Unmarshal.
    #[test]
    fn to_yaml_like_eso() {
        for (input, expected) in pairs("expected/to-yaml.json") {
            let value = from_json(&serde_json::from_str(&input).unwrap());
            assert_eq!(
                call_values("toYaml", &[value]).unwrap(),
                Value::String(expected),
                "{input}"
            );
        }
    }

    #[test]
    fn to_yaml_of_other_values() {
        let out = |v: Value| call_values("toYaml", &[v]).unwrap();
        assert_eq!(out(Value::Int(-3)), Value::from("-3"));
        assert_eq!(out(Value::Bytes(b"hi".to_vec())), Value::from("aGk="));
        assert_eq!(out(Value::Float(f64::NAN)), Value::from(""));
        let t: jiff::Zoned = "2024-01-02T03:04:05.5+02:00[+02:00]".parse().unwrap();
        assert_eq!(
            out(Value::Time(t)),
            Value::from("\"2024-01-02T03:04:05.5+02:00\"")
        );
    }

    // Pairs of (YAML input, the map as JSON) printed by ESO's fromYAML.
    #[test]
    fn from_yaml_like_eso() {
        for (input, expected) in pairs("expected/from-yaml.json") {
            let expected = from_json(&serde_json::from_str(&expected).unwrap());
            let got = call("fromYaml", &[&input]).unwrap();
            let Value::Map(expected_map) = &expected else {
                unreachable!()
            };
            match expected_map.get("Error") {
                // Syntax errors come from another parser: only the prefix is Go's.
                Some(Value::String(e)) if e.contains("yaml: ") => {
                    let Value::Map(got) = got else {
                        panic!("{input}")
                    };
                    let Some(Value::String(msg)) = got.get("Error") else {
                        panic!("{input}")
                    };
                    assert!(
                        msg.starts_with("error converting YAML to JSON: yaml: "),
                        "{msg}"
                    );
                }
                Some(Value::String(e)) if e.contains("unsupported map key") => {
                    let Value::Map(got) = got else {
                        panic!("{input}")
                    };
                    let Some(Value::String(msg)) = got.get("Error") else {
                        panic!("{input}")
                    };
                    assert!(msg.starts_with(
                        "error converting YAML to JSON: unsupported map key of type: "
                    ));
                }
                _ => assert_eq!(got, expected, "{input}"),
            }
        }
    }

    /// Nesting limits: block collections nest as deep as any value may (1000), flow collections
    /// only 255 deep (see `parse::FLOW_NESTING` for why not Go's 10000); beyond either, the
    /// error says which limit was met.
    #[test]
    fn nesting_limits() {
        let error = |yaml: &str| match call("fromYaml", &[yaml]).unwrap() {
            Value::Map(map) => match map.get("Error") {
                Some(Value::String(e)) => Some(e.clone()),
                _ => None,
            },
            other => panic!("{other:?}"),
        };
        let flow = |depth: usize| format!("a: {}x{}", "[".repeat(depth), "]".repeat(depth));
        assert_eq!(error(&flow(255)), None);
        assert_eq!(
            error(&flow(256)).as_deref(),
            Some(
                "error converting YAML to JSON: yaml: line 1: exceeded max depth of 255 in flow style ([...] and {...}); block style nests up to 1000"
            )
        );
        let mapping = format!("a: {}x: 1{}", "{".repeat(256), "}".repeat(256));
        assert!(error(&mapping).is_some_and(|e| e.contains("max depth of 255 in flow style")));
        // Block mappings, one more level per line: the document's mapping and 999 in it.
        let block = |depth: usize| -> String {
            (0..depth)
                .map(|i| format!("{}k:\n", " ".repeat(i)))
                .collect()
        };
        assert_eq!(error(&block(1000)), None);
        assert_eq!(
            error(&block(1001)).as_deref(),
            Some("error converting YAML to JSON: yaml: exceeded max depth of 1000")
        );
    }

    #[test]
    fn go_float_formatting() {
        assert_eq!(crate::gofmt::format_shortest(1e6, false), "1e+06");
        assert_eq!(crate::gofmt::format_shortest(123456.0, false), "123456");
        assert_eq!(crate::gofmt::format_shortest(0.0001, false), "0.0001");
        assert_eq!(crate::gofmt::format_shortest(0.00001, false), "1e-05");
        assert_eq!(crate::gofmt::format_shortest(-2.5, false), "-2.5");
        assert_eq!(crate::gofmt::format_shortest(0.1, true), "0.1");
        assert_eq!(crate::gofmt::format_shortest(1e21, false), "1e+21");
    }

    /// Random YAML-ish text never panics, and a string always survives `toYaml` then
    /// `fromYaml` unchanged.
    #[test]
    fn random_text() {
        let alphabet: Vec<char> = "ab01:-#&*!|>'\" ,[]{}?\n\t\r.~%@`<=\u{85}\u{2028}é😀"
            .chars()
            .collect();
        let mut seed = 11u64;
        for _ in 0..20_000 {
            let mut text = String::new();
            for _ in 0..(seed % 12) {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                text.push(alphabet[(seed >> 33) as usize % alphabet.len()]);
            }
            let _ = call("fromYaml", &[&text]);
            let map = Value::Map(BTreeMap::from([(
                "k".to_owned(),
                Value::String(text.clone()),
            )]));
            let Value::String(yaml) = call_values("toYaml", &[map]).unwrap() else {
                unreachable!()
            };
            let back = call("fromYaml", &[&yaml]).unwrap();
            let Value::Map(back) = back else {
                unreachable!()
            };
            if !text.contains(['\u{85}', '\r', '\u{2028}']) {
                assert_eq!(
                    back.get("k"),
                    Some(&Value::String(text.clone())),
                    "{text:?} -> {yaml:?}"
                );
            }
        }
    }
}
