//! yaml.v2's emitter (a port of libyaml) for the JSON-shaped data `toYaml` produces: block
//! style, two-space indentation, sequences in mappings not indented, no line folding, and
//! each string in the first style that can hold it (plain, single-quoted, literal block,
//! double-quoted).

use super::resolve::{self, Scalar};
use crate::gofmt::format_shortest as go_float;

/// A value as yaml.v2 marshals it.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

#[derive(Clone, Copy, PartialEq)]
enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn is_printable(c: char) -> bool {
    matches!(c, '\n' | '\u{20}'..='\u{7E}' | '\u{A0}'..='\u{D7FF}')
        || (('\u{E000}'..='\u{FFFD}').contains(&c) && c != '\u{FEFF}')
}

/// libyaml's `analyze_scalar`: which styles can hold `value`.
struct Analysis {
    multiline: bool,
    plain: bool,
    single: bool,
    block: bool,
}

fn analyze(value: &str) -> Analysis {
    if value.is_empty() {
        return Analysis {
            multiline: false,
            plain: true,
            single: true,
            block: false,
        };
    }
    let chars: Vec<char> = value.chars().collect();
    let mut block_indicators = value.starts_with("---") || value.starts_with("...");
    let (mut line_breaks, mut special) = (false, false);
    let (mut leading_space, mut leading_break) = (false, false);
    let (mut trailing_space, mut trailing_break) = (false, false);
    let (mut break_space, mut space_break) = (false, false);
    let (mut previous_space, mut previous_break) = (false, false);
    let mut preceded_by_whitespace = true;
    for (i, &c) in chars.iter().enumerate() {
        let last = i + 1 == chars.len();
        let followed_by_whitespace =
            last || matches!(chars[i + 1], ' ' | '\t') || is_break(chars[i + 1]);
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => block_indicators = true,
                '?' | ':' | '-' if followed_by_whitespace => block_indicators = true,
                _ => {}
            }
        } else {
            match c {
                ':' if followed_by_whitespace => block_indicators = true,
                '#' if preceded_by_whitespace => block_indicators = true,
                _ => {}
            }
        }
        if !is_printable(c) {
            special = true;
        }
        if c == ' ' {
            leading_space |= i == 0;
            trailing_space |= last;
            break_space |= previous_break;
            previous_space = true;
            previous_break = false;
        } else if is_break(c) {
            line_breaks = true;
            leading_break |= i == 0;
            trailing_break |= last;
            space_break |= previous_space;
            previous_space = false;
            previous_break = true;
        } else {
            previous_space = false;
            previous_break = false;
        }
        preceded_by_whitespace = matches!(c, ' ' | '\t' | '\0') || is_break(c);
    }
    let mut a = Analysis {
        multiline: line_breaks,
        plain: true,
        single: true,
        block: true,
    };
    if leading_space || leading_break || trailing_space || trailing_break || line_breaks {
        a.plain = false;
    }
    if trailing_space {
        a.block = false;
    }
    if break_space {
        a.plain = false;
        a.single = false;
    }
    if space_break || special {
        a.plain = false;
        a.single = false;
        a.block = false;
    }
    if block_indicators {
        a.plain = false;
    }
    a
}

/// The style yaml.v2 asks for, then libyaml's fallbacks (`select_scalar_style`).
fn style(value: &str, simple_key: bool) -> (Style, Analysis) {
    let plain_ok = resolve::resolve(value) == Scalar::Str && !resolve::is_base60_float(value);
    let mut style = if value.contains('\n') {
        Style::Literal
    } else if plain_ok {
        Style::Plain
    } else {
        Style::Double
    };
    let a = analyze(value);
    if simple_key && a.multiline {
        style = Style::Double;
    }
    if style == Style::Plain && (!a.plain || (value.is_empty() && simple_key)) {
        style = Style::Single;
    }
    if style == Style::Single && !a.single {
        style = Style::Double;
    }
    if style == Style::Literal && (!a.block || simple_key) {
        style = Style::Double;
    }
    (style, a)
}

fn double_quoted(value: &str, out: &mut String) {
    out.push('"');
    for c in value.chars() {
        if is_printable(c) && !is_break(c) && !matches!(c, '\u{FEFF}' | '"' | '\\') {
            out.push(c);
            continue;
        }
        match c {
            '\0' => out.push_str("\\0"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{B}' => out.push_str("\\v"),
            '\u{C}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            '\u{1B}' => out.push_str("\\e"),
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{85}' => out.push_str("\\N"),
            '\u{A0}' => out.push_str("\\_"),
            '\u{2028}' => out.push_str("\\L"),
            '\u{2029}' => out.push_str("\\P"),
            c if u32::from(c) <= 0xFF => out.push_str(&format!("\\x{:02X}", u32::from(c))),
            c if u32::from(c) <= 0xFFFF => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push_str(&format!("\\U{:08X}", u32::from(c))),
        }
    }
    out.push('"');
}

/// A literal block: `|`, an indentation hint when the text starts with a blank, a chomping
/// hint from how it ends, then the lines at `indent` (empty lines stay empty).
fn literal(value: &str, indent: usize, out: &mut String) {
    out.push('|');
    let first = value.chars().next();
    if first.is_some_and(|c| c == ' ' || is_break(c)) {
        out.push('2');
    }
    let mut rev = value.chars().rev();
    match (rev.next(), rev.next()) {
        (Some(last), _) if !is_break(last) => out.push('-'),
        (Some(_), None) => out.push('+'),
        (Some(_), Some(before)) if is_break(before) => out.push('+'),
        (None, _) => out.push('-'),
        _ => {}
    }
    out.push('\n');
    let mut line_start = true;
    for c in value.chars() {
        if is_break(c) {
            out.push(c);
            line_start = true;
        } else {
            if line_start {
                out.extend(std::iter::repeat_n(' ', indent));
                line_start = false;
            }
            out.push(c);
        }
    }
}

struct Emitter {
    out: String,
}

impl Emitter {
    fn pad(&mut self, indent: usize) {
        self.out.extend(std::iter::repeat_n(' ', indent));
    }

    /// Ends the line unless a block scalar already did.
    fn newline(&mut self) {
        if !self.out.ends_with('\n') {
            self.out.push('\n');
        }
    }

    /// A scalar (or empty collection) where it stands; `indent` is for a literal's lines.
    fn scalar(&mut self, node: &Node, indent: usize, simple_key: bool) {
        match node {
            Node::Null => self.out.push_str("null"),
            Node::Bool(b) => self.out.push_str(if *b { "true" } else { "false" }),
            Node::Int(i) => self.out.push_str(&i.to_string()),
            Node::Float(f) => self.out.push_str(&go_float(*f, false)),
            Node::Seq(_) => self.out.push_str("[]"),
            Node::Map(_) => self.out.push_str("{}"),
            Node::Str(s) => match style(s, simple_key).0 {
                Style::Plain => self.out.push_str(s),
                Style::Single => {
                    self.out.push('\'');
                    self.out.push_str(&s.replace('\'', "''"));
                    self.out.push('\'');
                }
                Style::Double => double_quoted(s, &mut self.out),
                Style::Literal => literal(s, indent, &mut self.out),
            },
        }
    }

    fn node(&mut self, node: &Node, indent: usize) {
        match node {
            Node::Seq(items) if !items.is_empty() => self.seq(items, indent, false),
            Node::Map(entries) if !entries.is_empty() => self.map(entries, indent, false),
            _ => {
                self.scalar(node, indent + 2, false);
                self.newline();
            }
        }
    }

    fn seq(&mut self, items: &[Node], indent: usize, inline_first: bool) {
        for (i, item) in items.iter().enumerate() {
            if i > 0 || !inline_first {
                self.pad(indent);
            }
            self.out.push_str("- ");
            match item {
                Node::Seq(sub) if !sub.is_empty() => self.seq(sub, indent + 2, true),
                Node::Map(sub) if !sub.is_empty() => self.map(sub, indent + 2, true),
                _ => self.scalar(item, indent + 2, false),
            }
            self.newline();
        }
    }

    fn map(&mut self, entries: &[(String, Node)], indent: usize, inline_first: bool) {
        for (i, (key, value)) in entries.iter().enumerate() {
            if i > 0 || !inline_first {
                self.pad(indent);
            }
            // libyaml writes a key longer than 128 bytes or spanning lines as `? key`.
            let simple = key.len() <= 128 && !analyze(key).multiline;
            let key_node = Node::Str(key.clone());
            if simple {
                self.scalar(&key_node, indent + 2, true);
            } else {
                self.out.push_str("? ");
                self.scalar(&key_node, indent + 2, false);
                self.newline();
                self.pad(indent);
            }
            self.out.push(':');
            match value {
                Node::Seq(items) if !items.is_empty() => {
                    self.newline();
                    self.seq(items, indent, false);
                }
                Node::Map(sub) if !sub.is_empty() => {
                    self.newline();
                    self.map(sub, indent + 2, false);
                }
                _ => {
                    self.out.push(' ');
                    self.scalar(value, indent + 2, false);
                }
            }
            self.newline();
        }
    }
}

/// The document yaml.v2 writes for `node`, ending in a newline.
pub fn emit(node: &Node) -> String {
    let mut e = Emitter { out: String::new() };
    e.node(node, 0);
    e.out
}
