//! sprig's string functions (`strings.go` and the `strings`/`goutils` wrappers in its function
//! map). Several of them work on bytes, as Go's do: where Go would cut a multi-byte character
//! in two and keep the raw bytes, our UTF-8 strings get U+FFFD instead.

use std::collections::BTreeMap;

use super::args::{int_param, string_param, strval, to_string_list};
use super::gounicode;
use crate::funcs::{Arity, FuncError, FuncResult, Funcs};
use crate::gofmt::sprint_value;
use crate::value::Value;

/// The most bytes `repeat`, `indent` and `replace` will build: the largest Kubernetes Secret,
/// and so more than any ESO template can usefully produce. Go has no such bound; here a tiny
/// template cannot make the operator allocate gigabytes before the output limit applies.
pub const MAX_RESULT: usize = 1 << 20;

pub fn register(funcs: &mut Funcs) {
    use Arity::{AtLeast, Exact};
    funcs.insert("trim", Exact(1), |a| string1(a, |s| s.trim().to_owned()));
    funcs.insert("hello", Exact(0), |_| Ok(Value::from("Hello!")));
    funcs.insert("trimAll", Exact(2), trim_all);
    funcs.insert("trimall", Exact(2), trim_all);
    funcs.insert("trimPrefix", Exact(2), |a| {
        let (prefix, s) = (string_param(&a[0])?, string_param(&a[1])?);
        Ok(s.strip_prefix(prefix).unwrap_or(s).into())
    });
    funcs.insert("trimSuffix", Exact(2), |a| {
        let (suffix, s) = (string_param(&a[0])?, string_param(&a[1])?);
        Ok(s.strip_suffix(suffix).unwrap_or(s).into())
    });
    funcs.insert("upper", Exact(1), |a| {
        string1(a, |s| s.chars().map(gounicode::to_upper).collect())
    });
    funcs.insert("lower", Exact(1), |a| {
        string1(a, |s| s.chars().map(gounicode::to_lower).collect())
    });
    funcs.insert("title", Exact(1), |a| string1(a, title));
    funcs.insert("untitle", Exact(1), |a| string1(a, untitle));
    funcs.insert("swapcase", Exact(1), |a| string1(a, swapcase));
    funcs.insert("substr", Exact(3), substr);
    funcs.insert("repeat", Exact(2), repeat);
    funcs.insert("nospace", Exact(1), |a| string1(a, nospace));
    funcs.insert("trunc", Exact(2), trunc);
    funcs.insert("abbrev", Exact(2), abbrev);
    funcs.insert("abbrevboth", Exact(3), abbrevboth);
    funcs.insert("initials", Exact(1), |a| string1(a, initials));
    funcs.insert("wrap", Exact(2), |a| {
        let width = int_param(&a[0])?;
        Ok(wrap(string_param(&a[1])?, width, "\n", false).into())
    });
    funcs.insert("wrapWith", Exact(3), |a| {
        let width = int_param(&a[0])?;
        let (sep, s) = (string_param(&a[1])?, string_param(&a[2])?);
        Ok(wrap(s, width, sep, true).into())
    });
    funcs.insert("contains", Exact(2), |a| {
        let (needle, s) = (string_param(&a[0])?, string_param(&a[1])?);
        Ok(s.contains(needle).into())
    });
    funcs.insert("hasPrefix", Exact(2), |a| {
        let (prefix, s) = (string_param(&a[0])?, string_param(&a[1])?);
        Ok(s.starts_with(prefix).into())
    });
    funcs.insert("hasSuffix", Exact(2), |a| {
        let (suffix, s) = (string_param(&a[0])?, string_param(&a[1])?);
        Ok(s.ends_with(suffix).into())
    });
    funcs.insert("quote", AtLeast(0), |a| {
        Ok(join_non_nil(a, |v| crate::gofmt::quote(&strval(v))).into())
    });
    funcs.insert("squote", AtLeast(0), |a| {
        Ok(join_non_nil(a, |v| format!("'{}'", sprint_value(v))).into())
    });
    funcs.insert("cat", AtLeast(0), |a| {
        Ok(join_non_nil(a, sprint_value).into())
    });
    funcs.insert("indent", Exact(2), |a| {
        indent(int_param(&a[0])?, string_param(&a[1])?).map(Value::from)
    });
    funcs.insert("nindent", Exact(2), |a| {
        let indented = indent(int_param(&a[0])?, string_param(&a[1])?)?;
        Ok(format!("\n{indented}").into())
    });
    funcs.insert("replace", Exact(3), replace);
    funcs.insert("plural", Exact(3), |a| {
        let (one, many) = (string_param(&a[0])?, string_param(&a[1])?);
        Ok(if int_param(&a[2])? == 1 { one } else { many }.into())
    });
    funcs.insert("snakecase", Exact(1), |a| {
        string1(a, |s| super::casing::to_lower_words(s, '_'))
    });
    funcs.insert("kebabcase", Exact(1), |a| {
        string1(a, |s| super::casing::to_lower_words(s, '-'))
    });
    funcs.insert("camelcase", Exact(1), |a| {
        string1(a, super::casing::to_pascal)
    });
    funcs.insert("join", Exact(2), |a| {
        let sep = string_param(&a[0])?;
        Ok(to_string_list(&a[1]).join(sep).into())
    });
    funcs.insert("splitList", Exact(2), |a| {
        let (sep, s) = (string_param(&a[0])?, string_param(&a[1])?);
        Ok(strings_value(go_split(s, sep, -1)))
    });
    funcs.insert("split", Exact(2), |a| {
        let (sep, s) = (string_param(&a[0])?, string_param(&a[1])?);
        Ok(indexed_map(go_split(s, sep, -1)))
    });
    funcs.insert("splitn", Exact(3), |a| {
        let sep = string_param(&a[0])?;
        let n = int_param(&a[1])?;
        Ok(indexed_map(go_split(string_param(&a[2])?, sep, n)))
    });
    funcs.insert("sortAlpha", Exact(1), |a| {
        let mut items = match &a[0] {
            Value::List(_) | Value::Bytes(_) => to_string_list(&a[0]),
            other => vec![strval(other)],
        };
        items.sort();
        Ok(strings_value(items))
    });
}

/// A function of one `string` parameter.
fn string1(args: &[Value], f: impl Fn(&str) -> String) -> FuncResult {
    Ok(f(string_param(&args[0])?).into())
}

/// A Go `[]string` result.
pub fn strings_value<S: Into<String>>(items: Vec<S>) -> Value {
    Value::List(items.into_iter().map(|s| Value::String(s.into())).collect())
}

/// Bytes cut by Go's byte-indexed slicing, as a string.
fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn trim_all(args: &[Value]) -> FuncResult {
    let (cutset, s) = (string_param(&args[0])?, string_param(&args[1])?);
    Ok(s.trim_matches(|c| cutset.contains(c)).into())
}

/// `strings.Title`: the first letter of each word in title case, where a word starts after
/// anything but a letter, a digit or `_` (for non-ASCII runes: after a space).
fn title(s: &str) -> String {
    let mut prev = ' ';
    s.chars()
        .map(|c| {
            let starts_word = is_title_separator(prev);
            prev = c;
            if starts_word {
                gounicode::to_title(c)
            } else {
                c
            }
        })
        .collect()
}

fn is_title_separator(c: char) -> bool {
    if c.is_ascii() {
        return !(c.is_ascii_alphanumeric() || c == '_');
    }
    if gounicode::is_letter(c) || gounicode::is_digit(c) {
        return false;
    }
    gounicode::is_space(c)
}

/// goutils' `Uncapitalize`: the first rune of each space-separated word in lower case.
fn untitle(s: &str) -> String {
    let mut next = true;
    s.chars()
        .map(|c| {
            if gounicode::is_space(c) {
                next = true;
                c
            } else if next {
                next = false;
                gounicode::to_lower(c)
            } else {
                c
            }
        })
        .collect()
}

/// goutils' `SwapCase`: upper and title case to lower; lower case to title case at the start
/// of a word, else to upper case.
fn swapcase(s: &str) -> String {
    let mut after_space = true;
    s.chars()
        .map(|c| {
            if gounicode::is_upper(c) || gounicode::is_title(c) {
                after_space = false;
                gounicode::to_lower(c)
            } else if gounicode::is_lower(c) {
                if after_space {
                    after_space = false;
                    gounicode::to_title(c)
                } else {
                    gounicode::to_upper(c)
                }
            } else {
                after_space = gounicode::is_space(c);
                c
            }
        })
        .collect()
}

/// sprig's `substring` with Go's slice bounds: a bound outside the string is the runtime
/// panic that Go's executor reports.
fn substr(args: &[Value]) -> FuncResult {
    let start = int_param(&args[0])?;
    let end = int_param(&args[1])?;
    let s = string_param(&args[2])?.as_bytes();
    let len = s.len() as i64;
    let (from, to) = if start < 0 {
        (0, end)
    } else if end < 0 || end > len {
        (start, len)
    } else {
        (start, end)
    };
    if to < 0 {
        return Err(slice_error(&format!(":{to}"), None));
    }
    if to > len {
        return Err(slice_error(&format!(":{to}"), Some(len)));
    }
    if from > to {
        return Err(slice_error(&format!("{from}:{to}"), None));
    }
    Ok(lossy(&s[from as usize..to as usize]).into())
}

fn slice_error(bounds: &str, len: Option<i64>) -> FuncError {
    let len = len.map(|l| format!(" with length {l}")).unwrap_or_default();
    FuncError(format!(
        "runtime error: slice bounds out of range [{bounds}]{len}"
    ))
}

fn repeat(args: &[Value]) -> FuncResult {
    let count = int_param(&args[0])?;
    let s = string_param(&args[1])?;
    Ok(bounded_repeat(s, count)?.into())
}

/// `strings.Repeat`, refusing a result over [`MAX_RESULT`].
fn bounded_repeat(s: &str, count: i64) -> Result<String, FuncError> {
    let count =
        usize::try_from(count).map_err(|_| FuncError("strings: negative Repeat count".into()))?;
    check_size(s.len().saturating_mul(count))?;
    Ok(s.repeat(count))
}

fn check_size(len: usize) -> Result<(), FuncError> {
    if len > MAX_RESULT {
        return Err(FuncError(format!(
            "result of {len} bytes exceeds the limit of {MAX_RESULT} bytes"
        )));
    }
    Ok(())
}

/// goutils' `DeleteWhiteSpace`. It reads the string byte by byte as Latin-1, so once it has
/// removed a space every non-ASCII byte comes out as a separate (mis-encoded) character, and the
/// bytes 0x85 and 0xA0 inside multi-byte characters count as spaces. sprig's users get exactly
/// that, so we do too.
fn nospace(s: &str) -> String {
    let is_space = |b: u8| gounicode::is_space(char::from(b));
    if !s.bytes().any(is_space) {
        return s.to_owned();
    }
    s.bytes()
        .filter(|&b| !is_space(b))
        .map(char::from)
        .collect()
}

fn trunc(args: &[Value]) -> FuncResult {
    let c = int_param(&args[0])?;
    let s = string_param(&args[1])?;
    let bytes = s.as_bytes();
    let len = bytes.len() as i64;
    let out = if c < 0 && len + c > 0 {
        &bytes[(len + c) as usize..]
    } else if c >= 0 && len > c {
        &bytes[..c as usize]
    } else {
        bytes
    };
    Ok(lossy(out).into())
}

fn abbrev(args: &[Value]) -> FuncResult {
    let width = int_param(&args[0])?;
    let s = string_param(&args[1])?;
    if width < 4 {
        return Ok(s.into());
    }
    Ok(abbreviate(s.as_bytes(), 0, width).into())
}

fn abbrevboth(args: &[Value]) -> FuncResult {
    let left = int_param(&args[0])?;
    let right = int_param(&args[1])?;
    let s = string_param(&args[2])?;
    if right < 4 || (left > 0 && right < 7) {
        return Ok(s.into());
    }
    Ok(abbreviate(s.as_bytes(), left, right).into())
}

/// goutils' `AbbreviateFull` (byte based), for the widths sprig lets through: at least 4, and
/// at least 7 when there is an offset to honour.
fn abbreviate(s: &[u8], offset: i64, max_width: i64) -> String {
    let len = s.len() as i64;
    if s.is_empty() || len <= max_width {
        return lossy(s);
    }
    let mut offset = offset.min(len);
    if len - offset < max_width - 3 {
        offset = len - (max_width - 3);
    }
    if offset <= 4 {
        return format!("{}...", lossy(&s[..(max_width - 3) as usize]));
    }
    if offset + max_width - 3 < len {
        return format!("...{}", abbreviate(&s[offset as usize..], 0, max_width - 3));
    }
    format!("...{}", lossy(&s[(len - (max_width - 3)) as usize..]))
}

/// goutils' `Initials`: the first byte of each space-separated word, read as Latin-1 like
/// [`nospace`] does.
fn initials(s: &str) -> String {
    let mut out = String::new();
    let mut gap = true;
    for b in s.bytes() {
        let c = char::from(b);
        if gounicode::is_space(c) {
            gap = true;
        } else if gap {
            out.push(c);
            gap = false;
        }
    }
    out
}

/// goutils' `WrapCustom` (byte based): break at the last space that keeps a line within
/// `width` bytes; a longer word is cut when `wrap_long` holds, else kept whole.
fn wrap(s: &str, width: i64, newline: &str, wrap_long: bool) -> String {
    if s.is_empty() {
        return String::new();
    }
    let newline = if newline.is_empty() { "\n" } else { newline };
    let width = usize::try_from(width.max(1)).unwrap_or(usize::MAX);
    let b = s.as_bytes();
    let len = b.len();
    let mut offset = 0;
    let mut out = Vec::new();
    while len - offset > width {
        if b[offset] == b' ' {
            offset += 1;
            continue;
        }
        let window = &b[offset..offset + width + 1];
        if let Some(space) = window.iter().rposition(|&c| c == b' ') {
            out.extend_from_slice(&b[offset..offset + space]);
            out.extend_from_slice(newline.as_bytes());
            offset += space + 1;
        } else if wrap_long {
            out.extend_from_slice(&b[offset..offset + width]);
            out.extend_from_slice(newline.as_bytes());
            offset += width;
        } else {
            let end = offset + width;
            match b[end..].iter().position(|&c| c == b' ') {
                None => {
                    out.extend_from_slice(&b[offset..]);
                    offset = len;
                }
                Some(i) => {
                    out.extend_from_slice(&b[offset..end + i]);
                    out.extend_from_slice(newline.as_bytes());
                    offset = end + i + 1;
                }
            }
        }
    }
    out.extend_from_slice(&b[offset..]);
    lossy(&out)
}

fn join_non_nil(args: &[Value], f: impl Fn(&Value) -> String) -> String {
    args.iter()
        .filter(|v| !matches!(v, Value::Nil))
        .map(f)
        .collect::<Vec<_>>()
        .join(" ")
}

fn indent(spaces: i64, s: &str) -> Result<String, FuncError> {
    let pad = bounded_repeat(" ", spaces)?;
    let lines = s.bytes().filter(|&b| b == b'\n').count() + 1;
    check_size(s.len().saturating_add(pad.len().saturating_mul(lines)))?;
    Ok(format!("{pad}{}", s.replace('\n', &format!("\n{pad}"))))
}

fn replace(args: &[Value]) -> FuncResult {
    let (old, new) = (string_param(&args[0])?, string_param(&args[1])?);
    let src = string_param(&args[2])?;
    let matches = if old.is_empty() {
        src.chars().count() + 1
    } else {
        src.matches(old).count()
    };
    let grows = new.len().saturating_sub(old.len());
    check_size(src.len().saturating_add(grows.saturating_mul(matches)))?;
    Ok(src.replace(old, new).into())
}

/// `strings.SplitN(s, sep, n)` (`n < 0`: all parts); an empty separator splits into runes.
fn go_split(s: &str, sep: &str, n: i64) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    let limit = usize::try_from(n).unwrap_or(usize::MAX);
    if sep.is_empty() {
        let chars: Vec<char> = s.chars().collect();
        let head = chars.len().min(limit.saturating_sub(1));
        let mut parts: Vec<String> = chars[..head].iter().map(char::to_string).collect();
        if head < chars.len() {
            parts.push(chars[head..].iter().collect());
        }
        return parts;
    }
    s.splitn(limit, sep).map(str::to_owned).collect()
}

/// sprig's `split` result: `map[string]string` keyed `_0`, `_1`, ...
fn indexed_map(parts: Vec<String>) -> Value {
    let map: BTreeMap<String, Value> = parts
        .into_iter()
        .enumerate()
        .map(|(i, part)| (format!("_{i}"), Value::String(part)))
        .collect();
    Value::Map(map)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{b, check, f, i, l, m, nil, s};

    #[test]
    fn trimming_and_case() {
        check(&[
            ("trim", vec![s(" \t a b \n\u{a0}")], "a b"),
            ("trimAll", vec![s("$-"), s("$-a$b-$")], "a$b"),
            ("trimall", vec![s("x"), s("xxaxx")], "a"),
            ("trimPrefix", vec![s("-"), s("--a")], "-a"),
            ("trimSuffix", vec![s("-"), s("a--")], "a-"),
            ("upper", vec![s("héllo ß ǆ")], "HÉLLO ß Ǆ"),
            ("lower", vec![s("HÉLLO İ Σ")], "héllo i σ"),
            (
                "title",
                vec![s("hello wORLD ǆa a_b c-d é.é")],
                "Hello WORLD ǅa A_b C-D É.É",
            ),
            ("untitle", vec![s("Hello WORLD  Ab")], "hello wORLD  ab"),
            (
                "swapcase",
                vec![s("Hello wORLD ǅx 1a")],
                "hELLO World ǆX 1A",
            ),
            (
                "upper",
                vec![i(1)],
                "ERR:wrong type for value; expected string; got int",
            ),
            ("upper", vec![nil()], "ERR:invalid value; expected string"),
        ]);
    }

    #[test]
    fn slicing() {
        check(&[
            ("substr", vec![i(1), i(3), s("hello")], "el"),
            ("substr", vec![i(0), i(5), s("abc")], "abc"),
            ("substr", vec![i(-1), i(2), s("abc")], "ab"),
            ("substr", vec![i(1), i(-1), s("abc")], "bc"),
            (
                "substr",
                vec![i(-1), i(-1), s("abc")],
                "ERR:runtime error: slice bounds out of range [:-1]",
            ),
            (
                "substr",
                vec![i(-1), i(5), s("abc")],
                "ERR:runtime error: slice bounds out of range [:5] with length 3",
            ),
            (
                "substr",
                vec![i(5), i(-1), s("abc")],
                "ERR:runtime error: slice bounds out of range [5:3]",
            ),
            (
                "substr",
                vec![i(2), i(1), s("abc")],
                "ERR:runtime error: slice bounds out of range [2:1]",
            ),
            ("substr", vec![i(1), i(2), s("héllo")], "\u{fffd}"),
            ("trunc", vec![i(3), s("hello")], "hel"),
            ("trunc", vec![i(-3), s("hello")], "llo"),
            ("trunc", vec![i(-9), s("hello")], "hello"),
            ("trunc", vec![i(9), s("hello")], "hello"),
            ("trunc", vec![i(2), s("héllo")], "h\u{fffd}"),
            ("abbrev", vec![i(5), s("hello world")], "he..."),
            ("abbrev", vec![i(3), s("hello world")], "hello world"),
            ("abbrev", vec![i(20), s("hello world")], "hello world"),
            (
                "abbrevboth",
                vec![i(5), i(10), s("1234 5678 9123")],
                "...5678...",
            ),
            (
                "abbrevboth",
                vec![i(1), i(6), s("1234 5678 9123")],
                "1234 5678 9123",
            ),
            ("abbrevboth", vec![i(0), i(4), s("1234 5678 9123")], "1..."),
            (
                "abbrevboth",
                vec![i(10), i(7), s("abcdefghijklmnop")],
                "...k...",
            ),
            (
                "abbrevboth",
                vec![i(30), i(8), s("abcdefghijklmnop")],
                "...lmnop",
            ),
        ]);
    }

    #[test]
    fn building() {
        check(&[
            ("repeat", vec![i(3), s("ab")], "ababab"),
            ("repeat", vec![i(0), s("ab")], ""),
            (
                "repeat",
                vec![i(-1), s("a")],
                "ERR:strings: negative Repeat count",
            ),
            (
                "repeat",
                vec![i(1 << 40), s("a")],
                "ERR:result of 1099511627776 bytes exceeds the limit of 1048576 bytes",
            ),
            (
                "repeat",
                vec![s("3"), s("a")],
                "ERR:wrong type for value; expected int; got string",
            ),
            ("indent", vec![i(2), s("a\nb")], "  a\n  b"),
            ("nindent", vec![i(2), s("a\nb")], "\n  a\n  b"),
            (
                "indent",
                vec![i(-1), s("a")],
                "ERR:strings: negative Repeat count",
            ),
            ("replace", vec![s("a"), s("xy"), s("banana")], "bxynxynxy"),
            ("replace", vec![s(""), s("-"), s("hé")], "-h-é-"),
            ("plural", vec![s("one"), s("many"), i(1)], "one"),
            ("plural", vec![s("one"), s("many"), i(0)], "many"),
            ("cat", vec![s("a"), nil(), i(1), l(vec![i(2)])], "a 1 [2]"),
            ("cat", vec![], ""),
            (
                "quote",
                vec![s("a\u{a0}b\u{200b}\u{1}\u{7f}\"\\é😀\u{378}"), i(1), nil()],
                r#""a\u00a0b\u200b\x01\x7f\"\\é😀\u0378" "1""#,
            ),
            ("quote", vec![b(b"hi"), f(1.5)], r#""hi" "1.5""#),
            (
                "squote",
                vec![s("a"), i(1), nil(), l(vec![i(1)])],
                "'a' '1' '[1]'",
            ),
            ("nospace", vec![s("a b\u{a0}c é")], "abÂcÃ©"),
            ("nospace", vec![s("héllo")], "héllo"),
            ("initials", vec![s("élan vital")], "Ãv"),
            ("initials", vec![s(" john  ronald tolkien")], "jrt"),
            (
                "wrap",
                vec![i(5), s("hello world foo bar")],
                "hello\nworld\nfoo\nbar",
            ),
            ("wrap", vec![i(3), s("abcdefgh ij")], "abcdefgh\nij"),
            ("wrap", vec![i(0), s("a b")], "a\nb"),
            (
                "wrapWith",
                vec![i(3), s("<br>"), s("abcdefgh ij")],
                "abc<br>def<br>gh<br>ij",
            ),
            (
                "wrapWith",
                vec![i(5), s(""), s("  hello   world")],
                "hello\nworld",
            ),
        ]);
    }

    #[test]
    fn searching_and_splitting() {
        check(&[
            ("contains", vec![s("ell"), s("hello")], "true"),
            ("hasPrefix", vec![s("he"), s("hello")], "true"),
            ("hasSuffix", vec![s("he"), s("hello")], "false"),
            ("join", vec![s("-"), l(vec![s("a"), nil(), i(1)])], "a-1"),
            ("join", vec![s("-"), s("ab")], "ab"),
            ("join", vec![s("-"), nil()], ""),
            ("splitList", vec![s(","), s("a,b,,c")], "[a b  c]"),
            ("splitList", vec![s(""), s("héy")], "[h é y]"),
            ("splitList", vec![s(""), s("")], "[]"),
            ("splitList", vec![s(","), s("")], "[]"),
            ("split", vec![s(","), s("a,b")], "map[_0:a _1:b]"),
            ("splitn", vec![s(","), i(2), s("a,b,c")], "map[_0:a _1:b,c]"),
            ("splitn", vec![s(""), i(2), s("héy")], "map[_0:h _1:éy]"),
            ("splitn", vec![s(","), i(0), s("a,b")], "map[]"),
            ("splitn", vec![s(","), i(-1), s("a,b")], "map[_0:a _1:b]"),
            (
                "sortAlpha",
                vec![l(vec![s("b"), i(1), s("a"), nil()])],
                "[1 a b]",
            ),
            ("sortAlpha", vec![s("b")], "[b]"),
            ("sortAlpha", vec![nil()], "[<nil>]"),
            ("sortAlpha", vec![m(&[("a", i(1))])], "[map[a:1]]"),
        ]);
    }
}
