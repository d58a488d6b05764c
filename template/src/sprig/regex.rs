//! sprig's regular expression functions, with Go's `regexp` semantics on the `regex` crate.
//!
//! Both are RE2 with leftmost-first matching; the differences bridged here:
//! - Go's `\d`, `\w`, `\s`, `\b` are ASCII-only, Rust's Unicode: the pattern is rewritten to the
//!   ASCII classes. A `{` that does not start a repetition and `[`, `&`, `~` inside a class are
//!   literal in Go: they are escaped. `\Q...\E` is quoted.
//! - Go skips an empty match right after a previous match in `FindAll`, `ReplaceAll` and
//!   `Split`: those loops are Go's, on the crate's `find_at`.
//! - Go's replacement templates (`$1`, `${name}`, `$$`, and `$1x` meaning the group named
//!   `1x`) are expanded here rather than by the crate.
//!
//! Compile errors carry Go's error code (`missing closing )`) but not the pattern, which may
//! come from secret data.

use regex::Regex;

use super::args::{int_param, string_param};
use super::gounicode;
use super::strings::strings_value;
use crate::funcs::{Arity, FuncError, FuncResult, Funcs};
use crate::value::Value;

pub fn register(funcs: &mut Funcs) {
    use Arity::Exact;
    // The plain variants panic on a bad pattern (`regexp.MustCompile`), which Go's executor
    // reports; only `regexMatch` swallows the error.
    funcs.insert("regexMatch", Exact(2), |a| {
        let s = string_param(&a[1])?;
        Ok(compile(string_param(&a[0])?)
            .is_ok_and(|re| re.is_match(s))
            .into())
    });
    funcs.insert("mustRegexMatch", Exact(2), |a| {
        let s = string_param(&a[1])?;
        Ok(compile(string_param(&a[0])?)?.is_match(s).into())
    });
    funcs.insert("regexFindAll", Exact(3), |a| find_all(a, must_compile));
    funcs.insert("mustRegexFindAll", Exact(3), |a| find_all(a, compile));
    funcs.insert("regexFind", Exact(2), |a| find(a, must_compile));
    funcs.insert("mustRegexFind", Exact(2), |a| find(a, compile));
    funcs.insert("regexReplaceAll", Exact(3), |a| {
        replace(a, must_compile, true)
    });
    funcs.insert("mustRegexReplaceAll", Exact(3), |a| {
        replace(a, compile, true)
    });
    funcs.insert("regexReplaceAllLiteral", Exact(3), |a| {
        replace(a, must_compile, false)
    });
    funcs.insert("mustRegexReplaceAllLiteral", Exact(3), |a| {
        replace(a, compile, false)
    });
    funcs.insert("regexSplit", Exact(3), |a| split(a, must_compile));
    funcs.insert("mustRegexSplit", Exact(3), |a| split(a, compile));
    funcs.insert("regexQuoteMeta", Exact(1), |a| {
        Ok(quote_meta(string_param(&a[0])?).into())
    });
}

type Compiler = fn(&str) -> Result<Regex, FuncError>;

/// `regexp.Compile`.
fn compile(pattern: &str) -> Result<Regex, FuncError> {
    let code = |code: &str| FuncError(format!("error parsing regexp: {code}"));
    let translated = translate(pattern).map_err(code)?;
    Regex::new(&translated).map_err(|e| code(error_code(&translated, &e)))
}

/// `regexp.MustCompile`, whose panic names the function.
fn must_compile(pattern: &str) -> Result<Regex, FuncError> {
    compile(pattern).map_err(|e| FuncError(format!("regexp: Compile: {}", e.0)))
}

/// Go's error code for a pattern the crate refused.
fn error_code(pattern: &str, err: &regex::Error) -> &'static str {
    use regex_syntax::ast::ErrorKind as K;
    if let regex::Error::CompiledTooBig(_) = err {
        return "expression too large";
    }
    let Err(e) = regex_syntax::ast::parse::Parser::new().parse(pattern) else {
        // The syntax is fine but a name is unknown (`\p{Foo}`).
        return "invalid character class range";
    };
    match e.kind() {
        K::GroupUnclosed => "missing closing )",
        K::GroupUnopened => "unexpected )",
        K::ClassUnclosed => "missing closing ]",
        K::ClassRangeInvalid | K::ClassRangeLiteral | K::UnicodeClassInvalid => {
            "invalid character class range"
        }
        K::ClassEscapeInvalid
        | K::EscapeUnrecognized
        | K::EscapeHexInvalid
        | K::EscapeHexInvalidDigit
        | K::EscapeHexEmpty => "invalid escape sequence",
        K::EscapeUnexpectedEof => "trailing backslash at end of expression",
        K::RepetitionMissing => "missing argument to repetition operator",
        K::RepetitionCountInvalid
        | K::RepetitionCountDecimalEmpty
        | K::RepetitionCountUnclosed
        | K::DecimalInvalid
        | K::DecimalEmpty => "invalid repeat count",
        K::GroupNameDuplicate { .. }
        | K::GroupNameEmpty
        | K::GroupNameInvalid
        | K::GroupNameUnexpectedEof => "invalid named capture",
        K::NestLimitExceeded(_) => "expression nests too deeply",
        _ => "invalid or unsupported Perl syntax",
    }
}

/// Go's largest repetition count.
const MAX_REPEAT: u32 = 1000;

/// Rewrites Go's syntax where the crate reads it differently (see the module comment).
fn translate(pattern: &str) -> Result<String, &'static str> {
    let mut out = String::with_capacity(pattern.len() + 16);
    let chars: Vec<char> = pattern.chars().collect();
    let mut in_class = false;
    let mut class_start = 0;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                let Some(&next) = chars.get(i + 1) else {
                    return Err("trailing backslash at end of expression");
                };
                i += 2;
                match next {
                    'd' => out.push_str("[0-9]"),
                    'D' => out.push_str("[^0-9]"),
                    'w' => out.push_str("[0-9A-Za-z_]"),
                    'W' => out.push_str("[^0-9A-Za-z_]"),
                    's' => out.push_str(r"[\t\n\f\r ]"),
                    'S' => out.push_str(r"[^\t\n\f\r ]"),
                    'b' if !in_class => out.push_str(r"(?-u:\b)"),
                    'B' if !in_class => out.push_str(r"(?-u:\B)"),
                    'Q' => {
                        let end = (i..chars.len())
                            .find(|&j| chars[j] == '\\' && chars.get(j + 1) == Some(&'E'))
                            .unwrap_or(chars.len());
                        let literal: String = chars[i..end].iter().collect();
                        out.push_str(&regex::escape(&literal));
                        i = (end + 2).min(chars.len());
                    }
                    // A Unicode class, `\pL` or `\p{Greek}`, reads alike in both; its braces are
                    // not a repetition.
                    'p' | 'P' => {
                        out.push('\\');
                        out.push(next);
                        if chars.get(i) == Some(&'{') {
                            let end = (i..chars.len()).find(|&j| chars[j] == '}');
                            let Some(end) = end else {
                                return Err("invalid character class range");
                            };
                            out.extend(&chars[i..=end]);
                            i = end + 1;
                        }
                    }
                    // Punctuation escapes are literals in Go; the crate gives `\<` and `\>`
                    // a meaning of their own.
                    '<' | '>' => out.push(next),
                    _ => {
                        out.push('\\');
                        out.push(next);
                    }
                }
                continue;
            }
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                i += 1;
                if chars.get(i) == Some(&'^') {
                    out.push('^');
                    i += 1;
                }
                class_start = i;
                // A `]` first in a class is a literal.
                if chars.get(i) == Some(&']') {
                    out.push_str(r"\]");
                    i += 1;
                }
                continue;
            }
            '[' if chars.get(i + 1) == Some(&':') => {
                // A POSIX class `[:alpha:]`, which both read alike.
                let end = (i + 2..chars.len().saturating_sub(1))
                    .find(|&j| chars[j] == ':' && chars[j + 1] == ']');
                if let Some(end) = end {
                    out.extend(&chars[i..end + 2]);
                    i = end + 2;
                    continue;
                }
                out.push_str(r"\[");
            }
            '[' | '&' | '~' if in_class => {
                out.push('\\');
                out.push(c);
            }
            '-' if in_class && chars.get(i + 1) == Some(&'-') && i > class_start => {
                out.push_str(r"\-");
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            '{' if !in_class => match repeat_len(&chars[i..]) {
                Some((len, max)) => {
                    if max > MAX_REPEAT {
                        return Err("invalid repeat count");
                    }
                    out.extend(&chars[i..i + len]);
                    i += len;
                    continue;
                }
                None => out.push_str(r"\{"),
            },
            '}' if !in_class => out.push_str(r"\}"),
            _ => out.push(c),
        }
        i += 1;
    }
    Ok(out)
}

/// The length of a repetition `{n}`, `{n,}` or `{n,m}` at the start of `chars`, and its largest
/// count.
fn repeat_len(chars: &[char]) -> Option<(usize, u32)> {
    let close = chars.iter().position(|&c| c == '}')?;
    let body: String = chars[1..close].iter().collect();
    let (min, max) = body.split_once(',').unwrap_or((&body, &body));
    let number = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u32>().unwrap_or(u32::MAX))
    };
    let min = number(min)?;
    let max = if max.is_empty() { min } else { number(max)? };
    Some((close + 1, min.max(max)))
}

/// Go's `allMatches`: successive matches, skipping an empty match that touches the previous
/// match, at most `n` of them (`n < 0`: all).
fn go_matches(re: &Regex, s: &str, n: i64) -> Vec<(usize, usize)> {
    let limit = if n < 0 { s.len() + 1 } else { n as usize };
    let mut found = Vec::new();
    let mut pos = 0;
    let mut prev_end = None;
    while found.len() < limit && pos <= s.len() {
        let Some(m) = re.find_at(s, pos) else { break };
        let mut accept = true;
        if m.end() == pos {
            // An empty match: step over one character.
            if Some(m.start()) == prev_end {
                accept = false;
            }
            pos += s[pos..].chars().next().map_or(1, char::len_utf8);
        } else {
            pos = m.end();
        }
        prev_end = Some(m.end());
        if accept {
            found.push((m.start(), m.end()));
        }
    }
    found
}

fn find_all(args: &[Value], compile: Compiler) -> FuncResult {
    let re = compile(string_param(&args[0])?)?;
    let s = string_param(&args[1])?;
    let n = int_param(&args[2])?;
    let matches = go_matches(&re, s, n);
    Ok(strings_value(
        matches.iter().map(|&(a, b)| &s[a..b]).collect(),
    ))
}

fn find(args: &[Value], compile: Compiler) -> FuncResult {
    let re = compile(string_param(&args[0])?)?;
    let s = string_param(&args[1])?;
    Ok(re.find(s).map_or("", |m| m.as_str()).into())
}

/// Go's `ReplaceAllString` (`expand`) or `ReplaceAllLiteralString`.
fn replace(args: &[Value], compile: Compiler, expand: bool) -> FuncResult {
    let re = compile(string_param(&args[0])?)?;
    let src = string_param(&args[1])?;
    let repl = string_param(&args[2])?;
    let mut out = String::with_capacity(src.len());
    let mut last_end = 0;
    let mut search = 0;
    while search <= src.len() {
        let Some(caps) = re.captures_at(src, search) else {
            break;
        };
        let m = caps.get(0).expect("group 0 is the match");
        out.push_str(&src[last_end..m.start()]);
        // No replacement for an empty match right after the previous match.
        if m.end() > last_end || m.start() == 0 {
            if expand {
                expand_template(&mut out, repl, &re, &caps);
            } else {
                out.push_str(repl);
            }
        }
        last_end = m.end();
        let width = src[search..].chars().next().map_or(0, char::len_utf8);
        search = if search + width > m.end() {
            search + width
        } else if search + 1 > m.end() {
            search + 1
        } else {
            m.end()
        };
    }
    out.push_str(&src[last_end..]);
    Ok(out.into())
}

/// Go's `Regexp.expand`: `$$` is `$`; `$name` takes the longest run of letters, digits and
/// `_` as the name (`${name}` delimits it); a name of digits is a group number; a group that
/// did not match or does not exist gives nothing; a `$` not followed by a name is literal.
fn expand_template(out: &mut String, template: &str, re: &Regex, caps: &regex::Captures) {
    let mut rest = template;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        rest = &rest[dollar + 1..];
        if let Some(after) = rest.strip_prefix('$') {
            out.push('$');
            rest = after;
            continue;
        }
        let Some((name, after)) = template_name(rest) else {
            out.push('$');
            continue;
        };
        rest = after;
        let group = match group_number(name) {
            Some(n) => caps.get(n),
            None => re
                .capture_names()
                .position(|n| n == Some(name))
                .and_then(|i| caps.get(i)),
        };
        if let Some(m) = group {
            out.push_str(m.as_str());
        }
    }
    out.push_str(rest);
}

/// The name after a `$`, and the text after it.
fn template_name(s: &str) -> Option<(&str, &str)> {
    let (braced, body) = match s.strip_prefix('{') {
        Some(body) => (true, body),
        None => (false, s),
    };
    let len = body
        .char_indices()
        .find(|&(_, c)| !(gounicode::is_letter(c) || gounicode::is_digit(c) || c == '_'))
        .map_or(body.len(), |(i, _)| i);
    if len == 0 {
        return None;
    }
    let name = &body[..len];
    if braced {
        let after = body[len..].strip_prefix('}')?;
        return Some((name, after));
    }
    Some((name, &body[len..]))
}

/// A group number: ASCII digits, no leading zero, below 10^8.
fn group_number(name: &str) -> Option<usize> {
    if !name.bytes().all(|b| b.is_ascii_digit()) || (name.len() > 1 && name.starts_with('0')) {
        return None;
    }
    name.parse::<usize>().ok().filter(|&n| n < 100_000_000)
}

/// Go's `Regexp.Split`.
fn split(args: &[Value], compile: Compiler) -> FuncResult {
    let pattern = string_param(&args[0])?;
    let re = compile(pattern)?;
    let s = string_param(&args[1])?;
    let n = int_param(&args[2])?;
    if n == 0 {
        return Ok(Value::List(Vec::new()));
    }
    if !pattern.is_empty() && s.is_empty() {
        return Ok(strings_value(vec![""]));
    }
    let mut parts = Vec::new();
    let (mut begin, mut end) = (0, 0);
    for (start, stop) in go_matches(&re, s, n) {
        if n > 0 && parts.len() as i64 == n - 1 {
            break;
        }
        end = start;
        if stop != 0 {
            parts.push(&s[begin..end]);
        }
        begin = stop;
    }
    if end != s.len() {
        parts.push(&s[begin..]);
    }
    Ok(strings_value(parts))
}

/// Go's `regexp.QuoteMeta`: a backslash before each of `\.+*?()|[]{}^$`.
fn quote_meta(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for c in s.chars() {
        if r"\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{check, i, s};

    #[test]
    fn matching_and_finding() {
        check(&[
            ("regexMatch", vec![s("^[a-z]+\\d$"), s("abc1")], "true"),
            ("regexMatch", vec![s("\\d"), s("٣")], "false"),
            ("regexMatch", vec![s("\\w+"), s("é")], "false"),
            ("regexMatch", vec![s("\\s"), s("\u{a0}")], "false"),
            ("regexMatch", vec![s("\\bé"), s("é")], "false"),
            ("regexMatch", vec![s("("), s("x")], "false"),
            (
                "mustRegexMatch",
                vec![s("("), s("x")],
                "ERR:error parsing regexp: missing closing )",
            ),
            ("mustRegexMatch", vec![s("a{2"), s("a{2")], "true"),
            ("mustRegexMatch", vec![s("[[]"), s("[")], "true"),
            ("mustRegexMatch", vec![s("[a&&b]"), s("&")], "true"),
            ("mustRegexMatch", vec![s("\\Qa.b\\E+"), s("a.bb")], "true"),
            ("mustRegexMatch", vec![s("[[:digit:]]x"), s("1x")], "true"),
            (
                "mustRegexMatch",
                vec![s("a{1001}"), s("a")],
                "ERR:error parsing regexp: invalid repeat count",
            ),
            (
                "mustRegexMatch",
                vec![s("x)"), s("a")],
                "ERR:error parsing regexp: unexpected )",
            ),
            (
                "mustRegexMatch",
                vec![s("[a"), s("a")],
                "ERR:error parsing regexp: missing closing ]",
            ),
            (
                "mustRegexMatch",
                vec![s("*"), s("a")],
                "ERR:error parsing regexp: missing argument to repetition operator",
            ),
            (
                "mustRegexMatch",
                vec![s("a\\"), s("a")],
                "ERR:error parsing regexp: trailing backslash at end of expression",
            ),
            (
                "mustRegexMatch",
                vec![s("\\q"), s("a")],
                "ERR:error parsing regexp: invalid escape sequence",
            ),
            (
                "mustRegexMatch",
                vec![s("[z-a]"), s("a")],
                "ERR:error parsing regexp: invalid character class range",
            ),
            ("regexFindAll", vec![s("a*"), s("baaab"), i(-1)], "[ aaa ]"),
            (
                "regexFindAll",
                vec![s("[0-9]+"), s("a1b22c333"), i(2)],
                "[1 22]",
            ),
            ("regexFindAll", vec![s("[0-9]+"), s("abc"), i(-1)], "[]"),
            ("regexFindAll", vec![s("x*"), s("héllo"), i(-1)], "[     ]"),
            (
                "regexFindAll",
                vec![s("("), s("x"), i(-1)],
                "ERR:regexp: Compile: error parsing regexp: missing closing )",
            ),
            (
                "mustRegexFindAll",
                vec![s("("), s("x"), i(-1)],
                "ERR:error parsing regexp: missing closing )",
            ),
            ("regexFind", vec![s("[a-z]+"), s("12abc34def")], "abc"),
            ("regexFind", vec![s("z"), s("abc")], ""),
            (
                "regexFind",
                vec![s("("), s("x")],
                "ERR:regexp: Compile: error parsing regexp: missing closing )",
            ),
            ("mustRegexFind", vec![s("a|ab"), s("ab")], "a"),
        ]);
    }

    #[test]
    fn replacing() {
        check(&[
            (
                "regexReplaceAll",
                vec![s("a*"), s("baaab"), s("X")],
                "XbXbX",
            ),
            (
                "regexReplaceAll",
                vec![s("a(x*)b"), s("-ab-axxb-"), s("${1}W")],
                "-W-xxW-",
            ),
            (
                "regexReplaceAll",
                vec![s("a(x*)b"), s("-ab-axxb-"), s("$1W")],
                "---",
            ),
            (
                "regexReplaceAll",
                vec![s("a(?P<mid>x*)b"), s("-axb-"), s("[$mid]")],
                "-[x]-",
            ),
            (
                "regexReplaceAll",
                vec![s("a(x*)b"), s("-axb-"), s("$$1 $ $2 $01 ${1")],
                "-$1 $   ${1-",
            ),
            ("regexReplaceAll", vec![s(""), s("hé"), s("-")], "-h-é-"),
            (
                "regexReplaceAllLiteral",
                vec![s("a(x*)b"), s("-axb-"), s("$1")],
                "-$1-",
            ),
            (
                "mustRegexReplaceAll",
                vec![s("("), s("x"), s("y")],
                "ERR:error parsing regexp: missing closing )",
            ),
            (
                "regexQuoteMeta",
                vec![s("1.5+[a]{b}$^\\")],
                "1\\.5\\+\\[a\\]\\{b\\}\\$\\^\\\\",
            ),
        ]);
    }

    #[test]
    fn splitting() {
        check(&[
            ("regexSplit", vec![s("a*"), s("baaab"), i(-1)], "[b b]"),
            ("regexSplit", vec![s(","), s("a,b,c"), i(2)], "[a b,c]"),
            ("regexSplit", vec![s(","), s("a,b,c"), i(0)], "[]"),
            ("regexSplit", vec![s(","), s(""), i(-1)], "[]"),
            ("regexSplit", vec![s(","), s("a,b,"), i(-1)], "[a b ]"),
            ("regexSplit", vec![s(""), s("abc"), i(-1)], "[a b c]"),
            ("regexSplit", vec![s("x*"), s("axbc"), i(-1)], "[a b c]"),
            (
                "mustRegexSplit",
                vec![s("("), s("x"), i(1)],
                "ERR:error parsing regexp: missing closing )",
            ),
        ]);
    }
}
