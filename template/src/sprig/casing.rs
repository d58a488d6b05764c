//! huandu/xstrings v1.5.0's word-case conversions, which sprig calls `snakecase`, `kebabcase`
//! and `camelcase` (xstrings' `ToPascalCase`). Their word splitting has many corner cases
//! (`HTTPServer` → `http_server`, digits joining the word before them), reproduced step by
//! step here.

use super::gounicode::{is_letter, is_number, is_punct, is_space, is_upper, to_lower, to_upper};

/// What xstrings takes for an invalid rune: a literal U+FFFD decodes as Go's `RuneError`.
const RUNE_ERROR: char = '\u{fffd}';

#[derive(Clone, Copy, PartialEq, Eq)]
enum Word {
    Invalid,
    Number,
    Upper,
    Alphabet,
    Connector,
    Punct,
    Other,
}

fn is_connector(c: char) -> bool {
    c == '-' || c == '_' || is_space(c)
}

/// A letter that is not one of the common CJK ideographs.
fn is_alphabet(c: char) -> bool {
    if !is_letter(c) {
        return false;
    }
    let cp = c as u32;
    !((0x4E00..=0x9FCC).contains(&cp)
        || (0x3400..=0x4D85).contains(&cp)
        || (0x20000..=0x2B81D).contains(&cp))
}

/// The next rune that is not U+FFFD, and the bytes up to and including it; `prev` when there
/// is none.
fn next_valid(s: &str, prev: char) -> (char, usize) {
    let mut size = 0;
    for c in s.chars() {
        size += c.len_utf8();
        if c != RUNE_ERROR {
            return (c, size);
        }
    }
    (prev, size)
}

/// Extends a word while `keep` holds for the next rune; `r` ends as the rune that stopped it.
fn extend_while(r: &mut char, offset: &mut usize, rest: &mut &str, keep: &dyn Fn(char) -> bool) {
    while !rest.is_empty() {
        let (next, len) = next_valid(rest, *r);
        *r = next;
        if !keep(next) {
            break;
        }
        *offset += len;
        *rest = &rest[len..];
    }
}

/// Splits off the next word: its type, its text, and the rest.
fn next_word(s: &str) -> (Word, &str, &str) {
    if s.is_empty() {
        return (Word::Invalid, "", "");
    }
    let (mut r, mut size) = next_valid(s, RUNE_ERROR);
    let mut offset = size;
    if r == RUNE_ERROR {
        return (Word::Invalid, &s[..offset], &s[offset..]);
    }
    let mut rest = &s[size..];
    let kind = if is_connector(r) {
        extend_while(&mut r, &mut offset, &mut rest, &is_connector);
        Word::Connector
    } else if is_punct(r) {
        extend_while(&mut r, &mut offset, &mut rest, &is_punct);
        Word::Punct
    } else if is_upper(r) {
        if !rest.is_empty() {
            (r, size) = next_valid(rest, r);
            if is_upper(r) {
                // A run of capitals; in "HTTPServer" the last one starts the next word.
                let mut last = size;
                offset += size;
                rest = &rest[size..];
                while !rest.is_empty() {
                    (r, size) = next_valid(rest, r);
                    if !is_upper(r) {
                        break;
                    }
                    last = size;
                    offset += size;
                    rest = &rest[size..];
                }
                if !rest.is_empty() && is_alphabet(r) {
                    offset -= last;
                    rest = &s[offset..];
                }
            } else if is_alphabet(r) {
                offset += size;
                rest = &rest[size..];
                extend_while(&mut r, &mut offset, &mut rest, &|c| {
                    is_alphabet(c) && !is_upper(c)
                });
            }
        }
        Word::Upper
    } else if is_alphabet(r) {
        extend_while(&mut r, &mut offset, &mut rest, &|c| {
            is_alphabet(c) && !is_upper(c)
        });
        Word::Alphabet
    } else if is_number(r) {
        extend_while(&mut r, &mut offset, &mut rest, &is_number);
        Word::Number
    } else {
        extend_while(&mut r, &mut offset, &mut rest, &|c| {
            !(is_connector(c) || is_alphabet(c) || is_number(c) || is_punct(c))
        });
        Word::Other
    };
    (kind, &s[..offset], rest)
}

/// Writes a word, lower-casing capitals and replacing connectors in upper-case and connector
/// words.
fn push_lower(out: &mut String, kind: Word, word: &str, connector: char) {
    if kind != Word::Upper && kind != Word::Connector {
        out.push_str(word);
        return;
    }
    for c in word.chars() {
        if is_connector(c) {
            out.push(connector);
        } else if is_upper(c) {
            out.push(to_lower(c));
        } else {
            out.push(c);
        }
    }
}

/// xstrings' `camelCaseToLowerCase`: `snakecase` with `_`, `kebabcase` with `-`.
pub fn to_lower_words(s: &str, connector: char) -> String {
    if s.is_empty() {
        return String::new();
    }
    let mut out = String::with_capacity(s.len() + s.len() / 2);
    let (mut kind, mut word, mut rest) = next_word(s);
    while !rest.is_empty() {
        if kind != Word::Connector {
            push_lower(&mut out, kind, word, connector);
        }
        let prev = kind;
        let last = word;
        (kind, word, rest) = next_word(rest);
        match prev {
            Word::Number => {
                while kind == Word::Alphabet || kind == Word::Number {
                    push_lower(&mut out, kind, word, connector);
                    (kind, word, rest) = next_word(rest);
                }
                if !matches!(kind, Word::Invalid | Word::Punct | Word::Connector) {
                    out.push(connector);
                }
            }
            Word::Connector => push_lower(&mut out, prev, last, connector),
            Word::Punct => {}
            _ => {
                if kind != Word::Number {
                    if kind != Word::Connector && kind != Word::Punct {
                        out.push(connector);
                    }
                    continue;
                }
                if rest.is_empty() {
                    continue;
                }
                let number = word;
                (kind, word, rest) = next_word(rest);
                if kind != Word::Alphabet {
                    push_lower(&mut out, Word::Number, number, connector);
                    if kind != Word::Connector && kind != Word::Punct {
                        out.push(connector);
                    }
                    continue;
                }
                out.push(connector);
                push_lower(&mut out, Word::Number, number, connector);
                while kind == Word::Alphabet || kind == Word::Number {
                    push_lower(&mut out, kind, word, connector);
                    (kind, word, rest) = next_word(rest);
                }
                if !matches!(kind, Word::Invalid | Word::Connector | Word::Punct) {
                    out.push(connector);
                }
            }
        }
    }
    push_lower(&mut out, kind, word, connector);
    out
}

/// xstrings' `ToPascalCase` (sprig's `camelcase`): connectors dropped, the rune after them
/// upper-cased, and a capital that starts a run of capitals lower-cases the rest of the run.
pub fn to_pascal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    let mut first_upper = false;
    let mut r0 = None;
    for c in chars.by_ref() {
        if !is_connector(c) {
            first_upper = is_upper(c);
            r0 = Some(to_upper(c));
            break;
        }
        out.push(c);
        r0 = Some(c);
    }
    let Some(mut r0) = r0 else {
        return out;
    };
    for c in chars {
        let r1 = r0;
        r0 = c;
        if is_connector(r0) && is_connector(r1) {
            out.push(r1);
            continue;
        }
        if is_connector(r1) {
            first_upper = is_upper(r0);
            r0 = to_upper(r0);
        } else {
            if first_upper {
                if is_upper(r0) {
                    r0 = to_lower(r0);
                } else {
                    first_upper = false;
                }
            }
            out.push(r1);
        }
    }
    out.push(r0);
    out
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{check, s};

    #[test]
    fn word_cases_follow_xstrings() {
        let mut cases = Vec::new();
        for (input, snake, kebab, pascal) in [
            ("", "", "", ""),
            ("FirstName", "first_name", "first-name", "FirstName"),
            ("HTTPServer", "http_server", "http-server", "Httpserver"),
            ("NoHTTPS", "no_https", "no-https", "NoHTTPS"),
            ("GO_PATH", "go_path", "go-path", "GoPath"),
            ("GO PATH", "go_path", "go-path", "GoPath"),
            ("GO-PATH", "go_path", "go-path", "GoPath"),
            ("http2xx", "http_2xx", "http-2xx", "Http2xx"),
            ("HTTP20xOK", "http_20x_ok", "http-20x-ok", "Http20xOK"),
            (
                "Duration2m3s",
                "duration_2m3s",
                "duration-2m3s",
                "Duration2m3s",
            ),
            (
                "Bld4Floor3rd",
                "bld4_floor_3rd",
                "bld4-floor-3rd",
                "Bld4Floor3rd",
            ),
            ("a__b", "a__b", "a--b", "A_B"),
            ("__a", "__a", "--a", "__A"),
            ("__", "__", "--", "___"),
            (
                "hello world!",
                "hello_world!",
                "hello-world!",
                "HelloWorld!",
            ),
            (
                "中文Name 名字",
                "中文_name_名字",
                "中文-name-名字",
                "中文Name名字",
            ),
            ("ÉtéDéjà", "été_déjà", "été-déjà", "ÉtéDéjà"),
            ("a.b,c", "a.b,c", "a.b,c", "A.b,c"),
            ("x\u{fffd}Y", "x_\u{fffd}y", "x-\u{fffd}y", "X\u{fffd}Y"),
        ] {
            cases.push(("snakecase", vec![s(input)], snake));
            cases.push(("kebabcase", vec![s(input)], kebab));
            cases.push(("camelcase", vec![s(input)], pascal));
        }
        check(&cases);
    }
}
