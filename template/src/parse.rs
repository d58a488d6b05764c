//! The parser: Go's `text/template/parse` grammar, checks and error texts, producing the tree
//! the executor walks. Every `define` and `block` lands in the tree's template set.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::Error;
use crate::funcs::Funcs;
use crate::lex::{self, Kind, Token};
use crate::stack::with_stack;

/// How deep parentheses and control structures may nest: the parser and the executor recurse
/// on them, and a template is user input. Go allows 10000 parentheses on a growing stack.
const MAX_NESTING: usize = 100;

/// A parsed template text: the top-level template and every template it defines.
#[derive(Debug, Clone)]
pub struct Tree {
    /// The name given to `parse`, which Go's messages use for every location in the text.
    pub(crate) name: String,
    pub(crate) text: Arc<str>,
    pub(crate) templates: BTreeMap<String, Arc<[Node]>>,
}

impl Tree {
    /// Go's error location for a byte offset: the line and the byte column, counted from 0.
    pub(crate) fn line_column(&self, pos: usize) -> (usize, usize) {
        line_column(&self.text, pos)
    }
}

fn line_column(text: &str, pos: usize) -> (usize, usize) {
    let before = &text[..pos.min(text.len())];
    let line = 1 + before.matches('\n').count();
    let column = match before.rfind('\n') {
        Some(i) => pos - (i + 1),
        None => pos,
    };
    (line, column)
}

#[derive(Debug, Clone)]
pub(crate) enum Node {
    Text(String),
    Action(Pipe),
    If(Branch),
    Range(Branch),
    With(Branch),
    Template {
        pos: usize,
        name: String,
        pipe: Option<Pipe>,
    },
    Break,
    Continue,
}

/// `if`, `range` and `with`.
#[derive(Debug, Clone)]
pub(crate) struct Branch {
    pub pipe: Pipe,
    pub list: Vec<Node>,
    pub else_list: Option<Vec<Node>>,
}

#[derive(Debug, Clone)]
pub(crate) struct Pipe {
    pub pos: usize,
    /// `$x = ...` rather than `$x := ...`.
    pub is_assign: bool,
    pub decl: Vec<String>,
    pub cmds: Vec<Command>,
}

#[derive(Debug, Clone)]
pub(crate) struct Command {
    pub pos: usize,
    pub args: Vec<Arg>,
}

/// An operand of a command.
#[derive(Debug, Clone)]
pub(crate) enum Arg {
    Identifier {
        pos: usize,
        name: String,
    },
    Dot {
        pos: usize,
    },
    Nil {
        pos: usize,
    },
    /// `$x.a.b`: the variable's name, then the fields.
    Variable {
        pos: usize,
        idents: Vec<String>,
    },
    /// `.a.b`.
    Field {
        pos: usize,
        idents: Vec<String>,
    },
    /// `(pipeline).a.b` or `fn.a`.
    Chain {
        pos: usize,
        node: Box<Arg>,
        fields: Vec<String>,
    },
    Bool {
        pos: usize,
        value: bool,
    },
    Number {
        pos: usize,
        text: String,
        value: Number,
    },
    String {
        pos: usize,
        quoted: String,
        text: String,
    },
    Pipe(Box<Pipe>),
}

/// A numeric constant as the executor uses it for an `interface{}` argument.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Number {
    Int(i64),
    Float(f64),
    /// An unsigned value beyond int64: Go refuses it only when it is evaluated.
    Overflow,
}

impl Arg {
    pub fn pos(&self) -> usize {
        match self {
            Arg::Identifier { pos, .. }
            | Arg::Dot { pos }
            | Arg::Nil { pos }
            | Arg::Variable { pos, .. }
            | Arg::Field { pos, .. }
            | Arg::Chain { pos, .. }
            | Arg::Bool { pos, .. }
            | Arg::Number { pos, .. }
            | Arg::String { pos, .. } => *pos,
            Arg::Pipe(p) => p.pos,
        }
    }
}

// Go's `String()` of the nodes: the executor quotes them in its error messages.

impl std::fmt::Display for Arg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arg::Identifier { name, .. } => f.write_str(name),
            Arg::Dot { .. } => f.write_str("."),
            Arg::Nil { .. } => f.write_str("nil"),
            Arg::Variable { idents, .. } => f.write_str(&idents.join(".")),
            Arg::Field { idents, .. } => {
                for ident in idents {
                    write!(f, ".{ident}")?;
                }
                Ok(())
            }
            Arg::Chain { node, fields, .. } => {
                match &**node {
                    Arg::Pipe(p) => write!(f, "({p})")?,
                    other => write!(f, "{other}")?,
                }
                for field in fields {
                    write!(f, ".{field}")?;
                }
                Ok(())
            }
            Arg::Bool { value, .. } => write!(f, "{value}"),
            Arg::Number { text, .. } => f.write_str(text),
            Arg::String { quoted, .. } => f.write_str(quoted),
            Arg::Pipe(p) => write!(f, "{p}"),
        }
    }
}

impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, arg) in self.args.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            match arg {
                Arg::Pipe(p) => write!(f, "({p})")?,
                other => write!(f, "{other}")?,
            }
        }
        Ok(())
    }
}

impl std::fmt::Display for Pipe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.decl.is_empty() {
            f.write_str(&self.decl.join(", "))?;
            f.write_str(if self.is_assign { " = " } else { " := " })?;
        }
        for (i, cmd) in self.cmds.iter().enumerate() {
            if i > 0 {
                f.write_str(" | ")?;
            }
            write!(f, "{cmd}")?;
        }
        Ok(())
    }
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let branch = |f: &mut std::fmt::Formatter<'_>, word: &str, b: &Branch| {
            write!(f, "{{{{{word} {}}}}}", b.pipe)?;
            write_list(f, &b.list)?;
            if let Some(else_list) = &b.else_list {
                f.write_str("{{else}}")?;
                write_list(f, else_list)?;
            }
            f.write_str("{{end}}")
        };
        match self {
            Node::Text(text) => f.write_str(text),
            Node::Action(pipe) => write!(f, "{{{{{pipe}}}}}"),
            Node::If(b) => branch(f, "if", b),
            Node::Range(b) => branch(f, "range", b),
            Node::With(b) => branch(f, "with", b),
            Node::Template { name, pipe, .. } => {
                write!(f, "{{{{template {}", crate::gofmt::quote(name))?;
                if let Some(pipe) = pipe {
                    write!(f, " {pipe}")?;
                }
                f.write_str("}}")
            }
            Node::Break => f.write_str("{{break}}"),
            Node::Continue => f.write_str("{{continue}}"),
        }
    }
}

fn write_list(f: &mut std::fmt::Formatter<'_>, list: &[Node]) -> std::fmt::Result {
    list.iter().try_for_each(|n| write!(f, "{n}"))
}

/// Parses `text` as Go's `template.New(name).Funcs(funcs).Parse(text)` does.
pub fn parse(name: &str, text: &str, funcs: &Funcs) -> Result<Tree, Error> {
    let has_function = |n: &str| crate::builtins::arity(n).is_some() || funcs.get(n).is_some();
    let options = lex::Options {
        break_ok: !has_function("break"),
        continue_ok: !has_function("continue"),
    };
    let mut parser = Parser {
        name,
        text,
        tokens: lex::lex(text, options),
        next: 0,
        furthest: 0,
        vars: vec!["$".to_owned()],
        range_depth: 0,
        nesting: 0,
        action_pos: None,
        has_function: &has_function,
        templates: BTreeMap::new(),
    };
    parser.parse_top(name)?;
    Ok(Tree {
        name: name.to_owned(),
        text: Arc::from(text),
        templates: parser.templates,
    })
}

/// What an action inside a list turned out to be.
enum Item {
    Node(Node),
    End,
    Else,
}

impl Item {
    fn describe(&self) -> &'static str {
        match self {
            Item::End => "{{end}}",
            Item::Else => "{{else}}",
            Item::Node(_) => "node",
        }
    }
}

type Parsed<T> = Result<T, Error>;

struct Parser<'a> {
    name: &'a str,
    text: &'a str,
    tokens: Vec<Token>,
    next: usize,
    /// The furthest token read: Go reports its line.
    furthest: usize,
    vars: Vec<String>,
    range_depth: usize,
    nesting: usize,
    /// Where the current action started, for "in action started at".
    action_pos: Option<usize>,
    has_function: &'a dyn Fn(&str) -> bool,
    templates: BTreeMap<String, Arc<[Node]>>,
}

impl Parser<'_> {
    fn token(&mut self, index: usize) -> Token {
        let index = index.min(self.tokens.len() - 1);
        self.furthest = self.furthest.max(index);
        self.tokens[index].clone()
    }

    fn next(&mut self) -> Token {
        let t = self.token(self.next);
        self.next += 1;
        t
    }

    fn backup(&mut self) {
        self.next -= 1;
    }

    fn peek(&mut self) -> Token {
        self.token(self.next)
    }

    fn next_non_space(&mut self) -> Token {
        loop {
            let t = self.next();
            if t.kind != Kind::Space {
                return t;
            }
        }
    }

    fn peek_non_space(&mut self) -> Token {
        let t = self.next_non_space();
        self.backup();
        t
    }

    fn error(&self, message: impl Into<String>) -> Error {
        let pos = self.tokens[self.furthest.min(self.tokens.len() - 1)].pos;
        let (line, column) = line_column(self.text, pos);
        Error::Parse {
            name: self.name.to_owned(),
            line,
            column,
            message: message.into(),
        }
    }

    fn unexpected(&self, token: &Token, context: &str) -> Error {
        if token.kind == Kind::Error {
            let mut extra = String::new();
            if let Some(start) = self.action_pos {
                let action_line = line_column(self.text, start).0;
                if action_line != line_column(self.text, token.pos).0 {
                    let started = format!("started at {}:{action_line}", self.name);
                    extra = if token.val.ends_with(" action") {
                        format!(" {started}")
                    } else {
                        format!(" in action {started}")
                    };
                }
            }
            return self.error(format!("{}{extra}", token.val));
        }
        self.error(format!("unexpected {} in {context}", token.describe()))
    }

    fn expect(&mut self, kind: Kind, context: &str) -> Parsed<Token> {
        let token = self.next_non_space();
        if token.kind != kind {
            return Err(self.unexpected(&token, context));
        }
        Ok(token)
    }

    fn nest(&mut self) -> Parsed<()> {
        if self.nesting >= MAX_NESTING {
            return Err(self.error("max expression depth exceeded"));
        }
        self.nesting += 1;
        Ok(())
    }

    /// Adds a template to the set as Go does: an empty body never replaces a non-empty one.
    fn add(&mut self, name: &str, root: Vec<Node>) -> Parsed<()> {
        match self.templates.get(name) {
            Some(existing) if !is_empty(existing) => {
                if !is_empty(&root) {
                    return Err(self.error(format!(
                        "template: multiple definition of template {}",
                        crate::gofmt::quote(name)
                    )));
                }
            }
            _ => {
                self.templates.insert(name.to_owned(), root.into());
            }
        }
        Ok(())
    }

    /// Runs `body` as the parse of a separate template: its own variables and range depth.
    fn in_subtree<T>(&mut self, body: impl FnOnce(&mut Self) -> Parsed<T>) -> Parsed<T> {
        let vars = std::mem::replace(&mut self.vars, vec!["$".to_owned()]);
        let range_depth = std::mem::take(&mut self.range_depth);
        let result = body(self);
        self.vars = vars;
        self.range_depth = range_depth;
        result
    }

    fn parse_top(&mut self, name: &str) -> Parsed<()> {
        let mut root = Vec::new();
        while self.peek().kind != Kind::Eof {
            if self.peek().kind == Kind::LeftDelim {
                let delim = self.next;
                self.next();
                if self.next_non_space().kind == Kind::Define {
                    self.in_subtree(Self::parse_definition)?;
                    continue;
                }
                self.next = delim;
            }
            match self.text_or_action()? {
                Item::Node(n) => root.push(n),
                other => return Err(self.error(format!("unexpected {}", other.describe()))),
            }
        }
        self.add(name, root)
    }

    fn parse_definition(&mut self) -> Parsed<()> {
        const CONTEXT: &str = "define clause";
        let token = self.next_non_space();
        if !matches!(token.kind, Kind::String | Kind::RawString) {
            return Err(self.unexpected(&token, CONTEXT));
        }
        let name = self.unquote(&token)?;
        self.expect(Kind::RightDelim, CONTEXT)?;
        let (root, end) = self.item_list()?;
        if !matches!(end, Item::End) {
            return Err(self.error(format!("unexpected {} in {CONTEXT}", end.describe())));
        }
        self.add(&name, root)
    }

    fn item_list(&mut self) -> Parsed<(Vec<Node>, Item)> {
        let mut list = Vec::new();
        while self.peek_non_space().kind != Kind::Eof {
            match self.text_or_action()? {
                Item::Node(n) => list.push(n),
                end => return Ok((list, end)),
            }
        }
        Err(self.error("unexpected EOF"))
    }

    fn text_or_action(&mut self) -> Parsed<Item> {
        let token = self.next_non_space();
        match token.kind {
            Kind::Text => Ok(Item::Node(Node::Text(token.val))),
            Kind::LeftDelim => {
                self.action_pos = Some(token.pos);
                let item = self.action();
                self.action_pos = None;
                item
            }
            _ => Err(self.unexpected(&token, "input")),
        }
    }

    fn action(&mut self) -> Parsed<Item> {
        let token = self.next_non_space();
        match token.kind {
            Kind::Block => return self.block_control(),
            Kind::Break | Kind::Continue => return self.loop_control(&token),
            Kind::Else => return self.else_control(),
            Kind::End => {
                self.expect(Kind::RightDelim, "end")?;
                return Ok(Item::End);
            }
            Kind::If => return self.branch("if").map(|b| Item::Node(Node::If(b))),
            Kind::Range => return self.branch("range").map(|b| Item::Node(Node::Range(b))),
            Kind::Template => return self.template_control(),
            Kind::With => return self.branch("with").map(|b| Item::Node(Node::With(b))),
            _ => {}
        }
        self.backup();
        let pipe = self.pipeline("command", Kind::RightDelim)?;
        Ok(Item::Node(Node::Action(pipe)))
    }

    fn loop_control(&mut self, keyword: &Token) -> Parsed<Item> {
        let context = format!("{{{{{}}}}}", keyword.val);
        let token = self.next_non_space();
        if token.kind != Kind::RightDelim {
            return Err(self.unexpected(&token, &context));
        }
        if self.range_depth == 0 {
            return Err(self.error(format!("{context} outside {{{{range}}}}")));
        }
        Ok(Item::Node(if keyword.kind == Kind::Break {
            Node::Break
        } else {
            Node::Continue
        }))
    }

    fn else_control(&mut self) -> Parsed<Item> {
        let peek = self.peek_non_space();
        if !matches!(peek.kind, Kind::If | Kind::With) {
            self.expect(Kind::RightDelim, "else")?;
        }
        Ok(Item::Else)
    }

    fn branch(&mut self, context: &str) -> Parsed<Branch> {
        self.nest()?;
        let vars = self.vars.len();
        let result = with_stack(|| self.branch_body(context));
        self.vars.truncate(vars);
        self.nesting -= 1;
        result
    }

    fn branch_body(&mut self, context: &str) -> Parsed<Branch> {
        let pipe = self.pipeline(context, Kind::RightDelim)?;
        if context == "range" {
            self.range_depth += 1;
        }
        let listed = self.item_list();
        if context == "range" {
            self.range_depth -= 1;
        }
        let (list, next) = listed?;
        let else_list = match next {
            Item::Else => {
                let chained = match self.peek().kind {
                    Kind::If if context == "if" => Some(Node::If as fn(Branch) -> Node),
                    Kind::With if context == "with" => Some(Node::With as fn(Branch) -> Node),
                    _ => None,
                };
                if let Some(make) = chained {
                    self.next();
                    Some(vec![make(self.branch(context)?)])
                } else {
                    let (else_list, next) = self.item_list()?;
                    if !matches!(next, Item::End) {
                        return Err(self.error(format!("expected end; found {}", next.describe())));
                    }
                    Some(else_list)
                }
            }
            _ => None,
        };
        Ok(Branch {
            pipe,
            list,
            else_list,
        })
    }

    fn block_control(&mut self) -> Parsed<Item> {
        const CONTEXT: &str = "block clause";
        let token = self.next_non_space();
        let name = self.template_name(&token, CONTEXT)?;
        let pipe = self.pipeline(CONTEXT, Kind::RightDelim)?;
        let (root, end) = self.in_subtree(Self::item_list)?;
        if !matches!(end, Item::End) {
            return Err(self.error(format!("unexpected {} in {CONTEXT}", end.describe())));
        }
        self.add(&name, root)?;
        Ok(Item::Node(Node::Template {
            pos: token.pos,
            name,
            pipe: Some(pipe),
        }))
    }

    fn template_control(&mut self) -> Parsed<Item> {
        const CONTEXT: &str = "template clause";
        let token = self.next_non_space();
        let name = self.template_name(&token, CONTEXT)?;
        let pipe = if self.next_non_space().kind == Kind::RightDelim {
            None
        } else {
            self.backup();
            Some(self.pipeline(CONTEXT, Kind::RightDelim)?)
        };
        Ok(Item::Node(Node::Template {
            pos: token.pos,
            name,
            pipe,
        }))
    }

    fn template_name(&mut self, token: &Token, context: &str) -> Parsed<String> {
        match token.kind {
            Kind::String | Kind::RawString => self.unquote(token),
            _ => Err(self.unexpected(token, context)),
        }
    }

    fn unquote(&self, token: &Token) -> Parsed<String> {
        unquote(&token.val).ok_or_else(|| self.error("invalid syntax"))
    }

    fn pipeline(&mut self, context: &str, end: Kind) -> Parsed<Pipe> {
        let pos = self.peek_non_space().pos;
        let mut pipe = Pipe {
            pos,
            is_assign: false,
            decl: Vec::new(),
            cmds: Vec::new(),
        };
        self.declarations(&mut pipe, context)?;
        loop {
            let token = self.next_non_space();
            match token.kind {
                k if k == end => {
                    self.check_pipeline(&pipe, context)?;
                    return Ok(pipe);
                }
                Kind::Bool
                | Kind::CharConstant
                | Kind::Complex
                | Kind::Dot
                | Kind::Field
                | Kind::Identifier
                | Kind::Number
                | Kind::Nil
                | Kind::RawString
                | Kind::String
                | Kind::Variable
                | Kind::LeftParen => {
                    self.backup();
                    let cmd = self.command()?;
                    pipe.cmds.push(cmd);
                }
                _ => return Err(self.unexpected(&token, context)),
            }
        }
    }

    /// `$x :=`, `$x =`, and `range`'s `$i, $v :=`.
    fn declarations(&mut self, pipe: &mut Pipe, context: &str) -> Parsed<()> {
        loop {
            let start = self.next;
            let v = self.next_non_space();
            if v.kind != Kind::Variable {
                self.next = start;
                return Ok(());
            }
            let next = self.peek_non_space();
            match next.kind {
                Kind::Assign | Kind::Declare => {
                    pipe.is_assign = next.kind == Kind::Assign;
                    self.next_non_space();
                    self.vars.push(v.val.clone());
                    pipe.decl.push(v.val);
                    return Ok(());
                }
                Kind::Char if next.val == "," => {
                    self.next_non_space();
                    self.vars.push(v.val.clone());
                    pipe.decl.push(v.val);
                    if context == "range" && pipe.decl.len() < 2 {
                        match self.peek_non_space().kind {
                            Kind::Variable | Kind::RightDelim | Kind::RightParen => continue,
                            _ => return Err(self.error("range can only initialize variables")),
                        }
                    }
                    return Err(self.error(format!("too many declarations in {context}")));
                }
                _ => {
                    self.next = start;
                    return Ok(());
                }
            }
        }
    }

    fn check_pipeline(&self, pipe: &Pipe, context: &str) -> Parsed<()> {
        if pipe.cmds.is_empty() {
            return Err(self.error(format!("missing value for {context}")));
        }
        for (i, cmd) in pipe.cmds.iter().enumerate().skip(1) {
            if matches!(
                cmd.args[0],
                Arg::Bool { .. }
                    | Arg::Dot { .. }
                    | Arg::Nil { .. }
                    | Arg::Number { .. }
                    | Arg::String { .. }
            ) {
                return Err(self.error(format!(
                    "non executable command in pipeline stage {}",
                    i + 1
                )));
            }
        }
        Ok(())
    }

    fn command(&mut self) -> Parsed<Command> {
        let pos = self.peek_non_space().pos;
        let mut args = Vec::new();
        loop {
            self.peek_non_space();
            if let Some(operand) = self.operand()? {
                args.push(operand);
            }
            let token = self.next();
            match token.kind {
                Kind::Space => continue,
                Kind::RightDelim | Kind::RightParen => self.backup(),
                Kind::Pipe => {}
                _ => return Err(self.unexpected(&token, "operand")),
            }
            break;
        }
        if args.is_empty() {
            return Err(self.error("empty command"));
        }
        Ok(Command { pos, args })
    }

    fn operand(&mut self) -> Parsed<Option<Arg>> {
        let Some(node) = self.term()? else {
            return Ok(None);
        };
        if self.peek().kind != Kind::Field {
            return Ok(Some(node));
        }
        let pos = self.peek().pos;
        let mut fields = Vec::new();
        while self.peek().kind == Kind::Field {
            fields.push(self.next().val[1..].to_owned());
        }
        Ok(Some(match node {
            Arg::Field { mut idents, .. } => {
                idents.extend(fields);
                Arg::Field { pos, idents }
            }
            Arg::Variable { mut idents, .. } => {
                idents.extend(fields);
                Arg::Variable { pos, idents }
            }
            Arg::Bool { .. }
            | Arg::String { .. }
            | Arg::Number { .. }
            | Arg::Nil { .. }
            | Arg::Dot { .. } => {
                let term = crate::gofmt::quote(&node.to_string());
                return Err(self.error(format!("unexpected . after term {term}")));
            }
            node => Arg::Chain {
                pos,
                node: Box::new(node),
                fields,
            },
        }))
    }

    fn term(&mut self) -> Parsed<Option<Arg>> {
        let token = self.next_non_space();
        let pos = token.pos;
        Ok(Some(match token.kind {
            Kind::Identifier => {
                if !(self.has_function)(&token.val) {
                    let name = crate::gofmt::quote(&token.val);
                    return Err(self.error(format!("function {name} not defined")));
                }
                Arg::Identifier {
                    pos,
                    name: token.val,
                }
            }
            Kind::Dot => Arg::Dot { pos },
            Kind::Nil => Arg::Nil { pos },
            Kind::Variable => {
                if !self.vars.contains(&token.val) {
                    let name = crate::gofmt::quote(&token.val);
                    return Err(self.error(format!("undefined variable {name}")));
                }
                Arg::Variable {
                    pos,
                    idents: vec![token.val],
                }
            }
            Kind::Field => Arg::Field {
                pos,
                idents: token.val[1..].split('.').map(str::to_owned).collect(),
            },
            Kind::Bool => Arg::Bool {
                pos,
                value: token.val == "true",
            },
            Kind::CharConstant | Kind::Complex | Kind::Number => {
                let value = number(&token).map_err(|m| self.error(m))?;
                Arg::Number {
                    pos,
                    text: token.val,
                    value,
                }
            }
            Kind::LeftParen => {
                self.nest()?;
                let pipe = with_stack(|| self.pipeline("parenthesized pipeline", Kind::RightParen));
                self.nesting -= 1;
                Arg::Pipe(Box::new(pipe?))
            }
            Kind::String | Kind::RawString => {
                let text = self.unquote(&token)?;
                Arg::String {
                    pos,
                    quoted: token.val,
                    text,
                }
            }
            _ => {
                self.backup();
                return Ok(None);
            }
        }))
    }
}

/// Go's `parse.IsEmptyTree`: only blank text (comments are dropped by the lexer).
fn is_empty(list: &[Node]) -> bool {
    list.iter()
        .all(|n| matches!(n, Node::Text(t) if t.trim().is_empty()))
}

/// The value of a number token, as Go's `parse.newNumber` and the executor's `idealConstant`
/// read it.
fn number(token: &Token) -> Result<Number, String> {
    let text = token.val.as_str();
    if token.kind == Kind::CharConstant {
        let inner = &text[1..];
        let (c, tail) = unquote_char(inner, '\'').ok_or("invalid syntax")?;
        if tail != "'" {
            return Err(format!("malformed character constant: {text}"));
        }
        return Ok(Number::Int(i64::from(u32::from(c))));
    }
    if token.kind == Kind::Complex || text.ends_with('i') {
        return Err(format!("complex numbers are not supported: {text}"));
    }
    let int = parse_int(text);
    let looks_float = text.contains(['.', 'e', 'E', 'p', 'P']) && !is_hex_int(text);
    match int {
        Some(IntValue::Int(i)) if !looks_float => Ok(Number::Int(i)),
        Some(IntValue::Uint) if !looks_float => Ok(Number::Overflow),
        _ => match parse_float(text) {
            Some(f) if text.contains(['.', 'e', 'E', 'p', 'P']) => Ok(Number::Float(f)),
            Some(_) => Err(format!("integer overflow: {}", crate::gofmt::quote(text))),
            None => Err(format!(
                "illegal number syntax: {}",
                crate::gofmt::quote(text)
            )),
        },
    }
}

fn is_hex_int(s: &str) -> bool {
    s.len() > 2 && (s.starts_with("0x") || s.starts_with("0X")) && !s.contains(['p', 'P'])
}

enum IntValue {
    Int(i64),
    /// Fits uint64 only.
    Uint,
}

/// Go's `strconv.ParseInt(s, 0, 64)`, telling apart values that fit only `uint64`.
fn parse_int(s: &str) -> Option<IntValue> {
    let (negative, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.contains('_') && !underscores_ok(&lower) {
        return None;
    }
    let digits: String = digits.chars().filter(|&c| c != '_').collect();
    if digits.is_empty() {
        return None;
    }
    let magnitude = u64::from_str_radix(&digits, radix).ok()?;
    if negative {
        if magnitude <= i64::MAX as u64 + 1 {
            return Some(IntValue::Int((magnitude as i128).wrapping_neg() as i64));
        }
        return None;
    }
    match i64::try_from(magnitude) {
        Ok(i) => Some(IntValue::Int(i)),
        Err(_) => Some(IntValue::Uint),
    }
}

/// Go's rule: an underscore only between digits, or right after a base prefix.
fn underscores_ok(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let b = s.as_bytes();
    let mut hex = false;
    let mut saw = '^';
    let mut rest = s;
    if b.len() >= 2 && b[0] == b'0' && matches!(b[1].to_ascii_lowercase(), b'b' | b'o' | b'x') {
        hex = b[1].eq_ignore_ascii_case(&b'x');
        saw = '0';
        rest = &s[2..];
    }
    for c in rest.chars() {
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = '0';
        } else if c == '_' {
            if saw != '0' {
                return false;
            }
            saw = '_';
        } else {
            if saw == '_' {
                return false;
            }
            saw = '!';
        }
    }
    saw != '_'
}

/// Go's `strconv.ParseFloat(s, 64)` for the literals the lexer lets through, including hex
/// floats; out-of-range values fail as in Go.
fn parse_float(s: &str) -> Option<f64> {
    let (negative, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if body.contains('_') && !underscores_ok(&body.to_ascii_lowercase()) {
        return None;
    }
    let body: String = body.chars().filter(|&c| c != '_').collect();
    let lower = body.to_ascii_lowercase();
    let value = if let Some(hex) = lower.strip_prefix("0x") {
        parse_hex_float(hex)?
    } else {
        if !lower
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'+' | b'-'))
        {
            return None;
        }
        lower.parse::<f64>().ok()?
    };
    if value.is_infinite() {
        return None;
    }
    Some(if negative { -value } else { value })
}

fn parse_hex_float(s: &str) -> Option<f64> {
    // Go requires the binary exponent of a hexadecimal float.
    let (mantissa, exponent) = s.split_once('p')?;
    let exponent = exponent.parse::<i32>().ok()?;
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut value = 0f64;
    for c in int.chars().chain(frac.chars()) {
        value = value * 16.0 + f64::from(c.to_digit(16)?);
    }
    let scale = exponent.checked_sub(4 * i32::try_from(frac.len()).ok()?)?;
    Some(value * 2f64.powi(scale))
}

/// Go's `strconv.Unquote` for the string literals the lexer produces. Escapes that make
/// invalid UTF-8 become U+FFFD: our strings are Rust strings.
fn unquote(s: &str) -> Option<String> {
    if let Some(raw) = s.strip_prefix('`').and_then(|r| r.strip_suffix('`')) {
        if raw.contains('`') {
            return None;
        }
        return Some(raw.replace('\r', ""));
    }
    let mut rest = s.strip_prefix('"')?.strip_suffix('"')?;
    let mut bytes = Vec::with_capacity(rest.len());
    while !rest.is_empty() {
        if rest.starts_with('"') || rest.starts_with('\n') {
            return None;
        }
        let (piece, tail) = unquote_piece(rest, '"')?;
        match piece {
            Piece::Char(c) => bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            Piece::Byte(b) => bytes.push(b),
        }
        rest = tail;
    }
    Some(match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

enum Piece {
    Char(char),
    Byte(u8),
}

fn unquote_char(s: &str, quote: char) -> Option<(char, &str)> {
    if s.starts_with(quote) {
        return None;
    }
    match unquote_piece(s, quote)? {
        (Piece::Char(c), tail) => Some((c, tail)),
        (Piece::Byte(b), tail) => Some((char::from(b), tail)),
    }
}

/// One character or escape of a quoted literal (Go's `strconv.UnquoteChar`).
fn unquote_piece(s: &str, quote: char) -> Option<(Piece, &str)> {
    let mut chars = s.chars();
    let c = chars.next()?;
    if c != '\\' {
        return Some((Piece::Char(c), chars.as_str()));
    }
    let e = chars.next()?;
    let rest = chars.as_str();
    let simple = match e {
        'a' => Some('\u{7}'),
        'b' => Some('\u{8}'),
        'f' => Some('\u{c}'),
        'n' => Some('\n'),
        'r' => Some('\r'),
        't' => Some('\t'),
        'v' => Some('\u{b}'),
        '\\' => Some('\\'),
        '\'' | '"' if e == quote => Some(e),
        _ => None,
    };
    if let Some(c) = simple {
        return Some((Piece::Char(c), rest));
    }
    let hex = |n: usize| -> Option<u32> {
        let digits = rest.get(..n)?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u32::from_str_radix(digits, 16).ok()
    };
    match e {
        'x' => Some((Piece::Byte(u8::try_from(hex(2)?).ok()?), &rest[2..])),
        'u' => Some((Piece::Char(char::from_u32(hex(4)?)?), &rest[4..])),
        'U' => Some((Piece::Char(char::from_u32(hex(8)?)?), &rest[8..])),
        '0'..='7' => {
            let digits = s.get(1..4)?;
            if !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
                return None;
            }
            let v = u32::from_str_radix(digits, 8).ok()?;
            Some((Piece::Byte(u8::try_from(v).ok()?), &s[4..]))
        }
        _ => None,
    }
}
