//! The lexer: Go's `text/template` tokens, with its trim markers (`{{- ` and ` -}}`), comments
//! and its exact error texts. The whole input is tokenised before parsing; an error token ends
//! the stream, so the parser reports it where it reaches it, as Go's does.

use unicode_general_category::{GeneralCategory, get_general_category};

const LEFT_DELIM: &str = "{{";
const RIGHT_DELIM: &str = "}}";
const LEFT_COMMENT: &str = "/*";
const RIGHT_COMMENT: &str = "*/";
/// A trim marker is the dash plus the space on its inner side.
const TRIM_MARKER_LEN: usize = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Error,
    Bool,
    /// A printable ASCII character outside the grammar, such as `,`.
    Char,
    CharConstant,
    Complex,
    Assign,
    Declare,
    Eof,
    Field,
    Identifier,
    LeftDelim,
    LeftParen,
    Number,
    Pipe,
    RawString,
    RightDelim,
    RightParen,
    Space,
    String,
    Text,
    Variable,
    // Keywords.
    Block,
    Break,
    Continue,
    Dot,
    Define,
    Else,
    End,
    If,
    Nil,
    Range,
    Template,
    With,
}

impl Kind {
    fn is_keyword(self) -> bool {
        matches!(
            self,
            Kind::Block
                | Kind::Break
                | Kind::Continue
                | Kind::Dot
                | Kind::Define
                | Kind::Else
                | Kind::End
                | Kind::If
                | Kind::Nil
                | Kind::Range
                | Kind::Template
                | Kind::With
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    pub kind: Kind,
    /// Byte offset of the token in the template text.
    pub pos: usize,
    pub val: String,
}

impl Token {
    /// How Go's parser names a token in "unexpected ..." messages.
    pub fn describe(&self) -> String {
        match self.kind {
            Kind::Eof => "EOF".to_owned(),
            Kind::Error => self.val.clone(),
            k if k.is_keyword() => format!("<{}>", self.val),
            _ if self.val.len() > 10 => {
                let head: String = self.val.chars().take(10).collect();
                format!("{}...", crate::gofmt::quote(&head))
            }
            _ => crate::gofmt::quote(&self.val),
        }
    }
}

/// Whether `break` and `continue` are keywords: Go lets a function of that name win.
#[derive(Clone, Copy)]
pub(crate) struct Options {
    pub break_ok: bool,
    pub continue_ok: bool,
}

/// Tokenises `input`; the last token is `Eof` or `Error`.
pub(crate) fn lex(input: &str, options: Options) -> Vec<Token> {
    let mut lexer = Lexer {
        input,
        pos: 0,
        start: 0,
        paren_depth: 0,
        options,
        tokens: Vec::new(),
    };
    lexer.run();
    lexer.tokens
}

struct Lexer<'a> {
    input: &'a str,
    pos: usize,
    start: usize,
    paren_depth: usize,
    options: Options,
    tokens: Vec<Token>,
}

/// Where the lexer is: between actions or inside one.
enum State {
    Text,
    Action,
    Done,
}

impl Lexer<'_> {
    fn run(&mut self) {
        let mut state = State::Text;
        loop {
            state = match state {
                State::Text => self.lex_text(),
                State::Action => self.lex_inside_action(),
                State::Done => return,
            };
        }
    }

    fn rest(&self) -> &str {
        &self.input[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn next(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn accept(&mut self, valid: &str) -> bool {
        match self.peek() {
            Some(c) if valid.contains(c) => {
                self.pos += c.len_utf8();
                true
            }
            _ => false,
        }
    }

    fn accept_run(&mut self, valid: &str) {
        while self.accept(valid) {}
    }

    fn emit(&mut self, kind: Kind) {
        self.tokens.push(Token {
            kind,
            pos: self.start,
            val: self.input[self.start..self.pos].to_owned(),
        });
        self.start = self.pos;
    }

    fn error(&mut self, message: String) -> State {
        self.tokens.push(Token {
            kind: Kind::Error,
            pos: self.start,
            val: message,
        });
        State::Done
    }

    fn lex_text(&mut self) -> State {
        let Some(x) = self.rest().find(LEFT_DELIM) else {
            self.pos = self.input.len();
            if self.pos > self.start {
                self.emit(Kind::Text);
            }
            self.emit(Kind::Eof);
            return State::Done;
        };
        let delim = self.pos + x;
        let mut text_end = delim;
        if has_left_trim_marker(&self.input[delim + LEFT_DELIM.len()..]) {
            text_end = self.start
                + self.input[self.start..delim]
                    .trim_end_matches(is_space)
                    .len();
        }
        if text_end > self.start {
            self.pos = text_end;
            self.emit(Kind::Text);
        }
        self.pos = delim;
        self.start = delim;
        self.lex_left_delim()
    }

    fn lex_left_delim(&mut self) -> State {
        self.pos += LEFT_DELIM.len();
        let after_marker = if has_left_trim_marker(self.rest()) {
            TRIM_MARKER_LEN
        } else {
            0
        };
        if self.input[self.pos + after_marker..].starts_with(LEFT_COMMENT) {
            self.pos += after_marker;
            self.start = self.pos;
            return self.lex_comment();
        }
        self.emit(Kind::LeftDelim);
        self.pos += after_marker;
        self.start = self.pos;
        self.paren_depth = 0;
        State::Action
    }

    fn lex_comment(&mut self) -> State {
        self.pos += LEFT_COMMENT.len();
        let Some(x) = self.rest().find(RIGHT_COMMENT) else {
            return self.error("unclosed comment".into());
        };
        self.pos += x + RIGHT_COMMENT.len();
        let (delim, trim) = self.at_right_delim();
        if !delim {
            return self.error("comment ends before closing delimiter".into());
        }
        if trim {
            self.pos += TRIM_MARKER_LEN;
        }
        self.pos += RIGHT_DELIM.len();
        if trim {
            self.skip_leading_spaces();
        }
        self.start = self.pos;
        State::Text
    }

    fn skip_leading_spaces(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start_matches(is_space).len();
    }

    /// Whether the input is at the right delimiter, and whether a trim marker precedes it.
    fn at_right_delim(&self) -> (bool, bool) {
        let rest = self.rest();
        if has_right_trim_marker(rest) && rest[TRIM_MARKER_LEN..].starts_with(RIGHT_DELIM) {
            return (true, true);
        }
        (rest.starts_with(RIGHT_DELIM), false)
    }

    fn lex_right_delim(&mut self) -> State {
        let (_, trim) = self.at_right_delim();
        if trim {
            self.pos += TRIM_MARKER_LEN;
            self.start = self.pos;
        }
        self.pos += RIGHT_DELIM.len();
        self.emit(Kind::RightDelim);
        if trim {
            self.skip_leading_spaces();
            self.start = self.pos;
        }
        State::Text
    }

    fn lex_inside_action(&mut self) -> State {
        if self.at_right_delim().0 {
            if self.paren_depth == 0 {
                return self.lex_right_delim();
            }
            return self.error("unclosed left paren".into());
        }
        let Some(r) = self.next() else {
            return self.error("unclosed action".into());
        };
        match r {
            _ if is_space(r) => {
                self.pos -= r.len_utf8();
                self.lex_space()
            }
            '=' => {
                self.emit(Kind::Assign);
                State::Action
            }
            ':' => {
                if self.next() != Some('=') {
                    return self.error("expected :=".into());
                }
                self.emit(Kind::Declare);
                State::Action
            }
            '|' => {
                self.emit(Kind::Pipe);
                State::Action
            }
            '"' => self.lex_quote(),
            '`' => self.lex_raw_quote(),
            '$' => self.lex_field_or_variable(Kind::Variable),
            '\'' => self.lex_char(),
            '.' if !self.peek().is_some_and(|c| c.is_ascii_digit())
                && self.pos < self.input.len() =>
            {
                self.lex_field_or_variable(Kind::Field)
            }
            '.' | '+' | '-' | '0'..='9' => {
                self.pos -= 1;
                self.lex_number()
            }
            _ if is_alphanumeric(r) => {
                self.pos -= r.len_utf8();
                self.lex_identifier()
            }
            '(' => {
                self.paren_depth += 1;
                self.emit(Kind::LeftParen);
                State::Action
            }
            ')' => {
                if self.paren_depth == 0 {
                    return self.error("unexpected right paren".into());
                }
                self.paren_depth -= 1;
                self.emit(Kind::RightParen);
                State::Action
            }
            _ if r.is_ascii() && !r.is_ascii_control() => {
                self.emit(Kind::Char);
                State::Action
            }
            _ => self.error(format!("unrecognized character in action: {}", sharp_u(r))),
        }
    }

    /// A run of spaces; the last one is left for ` -}}` when a trim marker follows.
    fn lex_space(&mut self) -> State {
        let mut count = 0;
        while self.peek().is_some_and(is_space) {
            self.pos += 1;
            count += 1;
        }
        let last = &self.input[self.pos - 1..];
        if has_right_trim_marker(last) && last[TRIM_MARKER_LEN..].starts_with(RIGHT_DELIM) {
            self.pos -= 1;
            if count == 1 {
                return self.lex_right_delim();
            }
        }
        self.emit(Kind::Space);
        State::Action
    }

    fn lex_identifier(&mut self) -> State {
        while self.peek().is_some_and(is_alphanumeric) {
            self.next();
        }
        if !self.at_terminator() {
            return self.bad_character();
        }
        let kind = match &self.input[self.start..self.pos] {
            "block" => Kind::Block,
            "break" if self.options.break_ok => Kind::Break,
            "continue" if self.options.continue_ok => Kind::Continue,
            "define" => Kind::Define,
            "else" => Kind::Else,
            "end" => Kind::End,
            "if" => Kind::If,
            "range" => Kind::Range,
            "nil" => Kind::Nil,
            "template" => Kind::Template,
            "with" => Kind::With,
            "true" | "false" => Kind::Bool,
            _ => Kind::Identifier,
        };
        self.emit(kind);
        State::Action
    }

    fn bad_character(&mut self) -> State {
        let r = self.peek().unwrap_or(char::REPLACEMENT_CHARACTER);
        self.error(format!("bad character {}", sharp_u(r)))
    }

    /// After the `.` or `$`: a lone one is dot or the root variable.
    fn lex_field_or_variable(&mut self, kind: Kind) -> State {
        if self.at_terminator() {
            self.emit(if kind == Kind::Variable {
                Kind::Variable
            } else {
                Kind::Dot
            });
            return State::Action;
        }
        while self.peek().is_some_and(is_alphanumeric) {
            self.next();
        }
        if !self.at_terminator() {
            return self.bad_character();
        }
        self.emit(kind);
        State::Action
    }

    /// Whether the next character may end a word.
    fn at_terminator(&self) -> bool {
        match self.peek() {
            None => true,
            Some(c) if is_space(c) => true,
            Some('.' | ',' | '|' | ':' | ')' | '(') => true,
            _ => self.rest().starts_with(RIGHT_DELIM),
        }
    }

    /// Scans a quoted literal up to `quote`; the parser unquotes it.
    fn scan_quoted(&mut self, quote: char, kind: Kind, unterminated: &str) -> State {
        loop {
            match self.next() {
                Some('\\') => match self.next() {
                    None | Some('\n') => return self.error(unterminated.into()),
                    Some(_) => {}
                },
                None | Some('\n') => return self.error(unterminated.into()),
                Some(c) if c == quote => break,
                Some(_) => {}
            }
        }
        self.emit(kind);
        State::Action
    }

    fn lex_char(&mut self) -> State {
        self.scan_quoted('\'', Kind::CharConstant, "unterminated character constant")
    }

    fn lex_quote(&mut self) -> State {
        self.scan_quoted('"', Kind::String, "unterminated quoted string")
    }

    fn lex_raw_quote(&mut self) -> State {
        loop {
            match self.next() {
                None => return self.error("unterminated raw quoted string".into()),
                Some('`') => break,
                Some(_) => {}
            }
        }
        self.emit(Kind::RawString);
        State::Action
    }

    fn lex_number(&mut self) -> State {
        if !self.scan_number() {
            return self.bad_number();
        }
        if matches!(self.peek(), Some('+' | '-')) {
            // A complex constant such as 1+2i.
            if !self.scan_number() || !self.input[..self.pos].ends_with('i') {
                return self.bad_number();
            }
            self.emit(Kind::Complex);
            return State::Action;
        }
        self.emit(Kind::Number);
        State::Action
    }

    fn bad_number(&mut self) -> State {
        let text = crate::gofmt::quote(&self.input[self.start..self.pos]);
        self.error(format!("bad number syntax: {text}"))
    }

    /// Go's lenient number scan: the parser decides what the text means.
    fn scan_number(&mut self) -> bool {
        self.accept("+-");
        let mut digits = "0123456789_";
        if self.accept("0") {
            if self.accept("xX") {
                digits = "0123456789abcdefABCDEF_";
            } else if self.accept("oO") {
                digits = "01234567_";
            } else if self.accept("bB") {
                digits = "01_";
            }
        }
        self.accept_run(digits);
        if self.accept(".") {
            self.accept_run(digits);
        }
        if digits.len() == 11 && self.accept("eE") {
            self.accept("+-");
            self.accept_run("0123456789_");
        }
        if digits.len() == 23 && self.accept("pP") {
            self.accept("+-");
            self.accept_run("0123456789_");
        }
        self.accept("i");
        if self.peek().is_some_and(is_alphanumeric) {
            self.next();
            return false;
        }
        true
    }
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// Go's `unicode.IsLetter || unicode.IsDigit || '_'`.
fn is_alphanumeric(c: char) -> bool {
    if c.is_ascii() {
        return c == '_' || c.is_ascii_alphanumeric();
    }
    matches!(
        get_general_category(c),
        GeneralCategory::UppercaseLetter
            | GeneralCategory::LowercaseLetter
            | GeneralCategory::TitlecaseLetter
            | GeneralCategory::ModifierLetter
            | GeneralCategory::OtherLetter
            | GeneralCategory::DecimalNumber
    )
}

fn has_left_trim_marker(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2 && b[0] == b'-' && is_space(b[1] as char)
}

fn has_right_trim_marker(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2 && is_space(b[0] as char) && b[1] == b'-'
}

/// Go's `%#U`: `U+0041 'A'`, without the quoted character when it is not printable.
fn sharp_u(r: char) -> String {
    if crate::gofmt::is_print(r) {
        format!("U+{:04X} '{r}'", r as u32)
    } else {
        format!("U+{:04X}", r as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(input: &str) -> Vec<(Kind, String)> {
        lex(
            input,
            Options {
                break_ok: true,
                continue_ok: true,
            },
        )
        .into_iter()
        .map(|t| (t.kind, t.val))
        .collect()
    }

    fn k(kind: Kind, val: &str) -> (Kind, String) {
        (kind, val.to_owned())
    }

    #[test]
    fn text_and_actions() {
        use Kind::*;
        assert_eq!(
            kinds("a{{.x | f 1 \"s\"}}b"),
            vec![
                k(Text, "a"),
                k(LeftDelim, "{{"),
                k(Field, ".x"),
                k(Space, " "),
                k(Pipe, "|"),
                k(Space, " "),
                k(Identifier, "f"),
                k(Space, " "),
                k(Number, "1"),
                k(Space, " "),
                k(String, "\"s\""),
                k(RightDelim, "}}"),
                k(Text, "b"),
                k(Eof, ""),
            ]
        );
    }

    #[test]
    fn trim_markers_and_comments() {
        use Kind::*;
        assert_eq!(
            kinds("a  {{- 3 -}}\n b"),
            vec![
                k(Text, "a"),
                k(LeftDelim, "{{"),
                k(Number, "3"),
                k(RightDelim, "}}"),
                k(Text, "b"),
                k(Eof, ""),
            ]
        );
        assert_eq!(
            kinds("{{-3}}"),
            vec![
                k(LeftDelim, "{{"),
                k(Number, "-3"),
                k(RightDelim, "}}"),
                k(Eof, "")
            ]
        );
        assert_eq!(
            kinds("x {{- /* c */ -}} y"),
            vec![k(Text, "x"), k(Text, "y"), k(Eof, "")]
        );
        assert_eq!(kinds("{{/* c */}}"), vec![k(Eof, "")]);
    }

    #[test]
    fn words() {
        use Kind::*;
        assert_eq!(
            kinds("{{$x := .a.b}}"),
            vec![
                k(LeftDelim, "{{"),
                k(Variable, "$x"),
                k(Space, " "),
                k(Declare, ":="),
                k(Space, " "),
                k(Field, ".a"),
                k(Field, ".b"),
                k(RightDelim, "}}"),
                k(Eof, ""),
            ]
        );
        assert_eq!(
            kinds("{{range $ . nil true 'a' `r`}}"),
            vec![
                k(LeftDelim, "{{"),
                k(Range, "range"),
                k(Space, " "),
                k(Variable, "$"),
                k(Space, " "),
                k(Dot, "."),
                k(Space, " "),
                k(Nil, "nil"),
                k(Space, " "),
                k(Bool, "true"),
                k(Space, " "),
                k(CharConstant, "'a'"),
                k(Space, " "),
                k(RawString, "`r`"),
                k(RightDelim, "}}"),
                k(Eof, ""),
            ]
        );
    }

    #[test]
    fn errors() {
        for (input, message) in [
            ("{{.x", "unclosed action"),
            ("{{(.x}}", "unclosed left paren"),
            ("{{.x)}}", "unexpected right paren"),
            ("{{\"abc}}", "unterminated quoted string"),
            ("{{`abc}}", "unterminated raw quoted string"),
            ("{{'a}}", "unterminated character constant"),
            ("{{/* x", "unclosed comment"),
            ("{{/* x */ .x}}", "comment ends before closing delimiter"),
            ("{{3x}}", "bad number syntax: \"3x\""),
            ("{{a:b}}", "expected :="),
            ("{{.a-b}}", "bad character U+002D '-'"),
            ("{{\u{1}}}", "unrecognized character in action: U+0001"),
        ] {
            let tokens = kinds(input);
            assert_eq!(tokens.last().unwrap(), &k(Kind::Error, message), "{input}");
        }
    }
}
