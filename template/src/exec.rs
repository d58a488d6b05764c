//! The executor: walks a parsed tree over the data as Go's `text/template` does with
//! `missingkey=error`, with Go's variable scoping, truth, `range` rules and error texts.

use std::collections::BTreeMap;

use crate::budget::{Budget, Exceeded};
use crate::builtins;
use crate::error::Error;
use crate::funcs::Arity;
use crate::funcs::Funcs;
use crate::gofmt;
use crate::parse::{Arg, Branch, Command, Node, Number, Pipe, Tree};
use crate::stack::with_stack;
use crate::value::{MAX_NESTING, Value};

/// Go allows 100000 nested template calls; each costs stack here.
const MAX_TEMPLATE_DEPTH: usize = 1000;

pub fn execute(
    tree: &Tree,
    funcs: &Funcs,
    data: &Value,
    limit: usize,
    budget: &mut Budget,
) -> Result<String, Error> {
    let mut state = State {
        budget,
        root: data,
        tree,
        funcs,
        out: String::new(),
        limit,
        vars: vec![Var {
            name: "$",
            value: data.clone(),
            boxed: false,
        }],
        template: &tree.name,
        at: At::Start,
        depth: 0,
    };
    let Some(root) = tree.templates.get(&tree.name) else {
        let name = gofmt::quote(&tree.name);
        return Err(state.fail(format!("{name} is an incomplete or empty template")));
    };
    state.walk_list(Dot::plain(data), root)?;
    Ok(state.out)
}

/// The cursor. `boxed` marks a value Go holds in an `interface{}` (an element of a list or of
/// a `map[string]interface{}`) apart from one a pipeline produced: Go's field-access errors
/// differ ("nil pointer evaluating interface {}.x" against "nil data; no entry for key").
#[derive(Clone, Copy)]
struct Dot<'v> {
    value: &'v Value,
    boxed: bool,
}

impl<'v> Dot<'v> {
    fn plain(value: &'v Value) -> Self {
        Dot {
            value,
            boxed: false,
        }
    }
}

struct Var<'t> {
    name: &'t str,
    value: Value,
    boxed: bool,
}

/// The node an error is reported at, as Go's `state.at`.
#[derive(Clone, Copy)]
enum At<'t> {
    Start,
    Pipe(&'t Pipe),
    Command(&'t Command),
    Arg(&'t Arg),
    Template(&'t Node, usize),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flow {
    Normal,
    Break,
    Continue,
}

type Exec<T> = Result<T, Error>;

struct State<'t, 'd> {
    budget: &'d mut Budget,
    /// The data: ESO's is a `map[string]string`, whose elements Go does not box.
    root: &'d Value,
    tree: &'t Tree,
    funcs: &'t Funcs,
    out: String,
    limit: usize,
    vars: Vec<Var<'t>>,
    /// The template being executed, which Go names after "executing".
    template: &'t str,
    at: At<'t>,
    depth: usize,
}

impl<'t> State<'t, '_> {
    /// Whether `map` is Go's `map[string]string` (the data ESO passes) rather than a
    /// `map[string]interface{}`: the data itself, or a copy of it, holding only strings.
    fn is_string_map(&self, map: &BTreeMap<String, Value>) -> bool {
        let Value::Map(root) = self.root else {
            return false;
        };
        (std::ptr::eq(root, map) || root == map)
            && map.values().all(|v| matches!(v, Value::String(_)))
    }

    fn holds_boxed(&self, map: &BTreeMap<String, Value>) -> bool {
        !self.is_string_map(map)
    }

    fn fail(&self, message: impl Into<String>) -> Error {
        let (name, template, line, column, context) = self.place();
        Error::Exec {
            name,
            template,
            line,
            column,
            context,
            message: message.into(),
        }
    }

    fn over_budget(&self, exceeded: Exceeded) -> Error {
        let (name, template, line, column, context) = self.place();
        Error::OverBudget {
            name,
            template,
            line,
            column,
            context,
            exceeded: Box::new(exceeded),
        }
    }

    /// Where an error is reported: the template's name, the one executing, the line, the
    /// column and the action's text.
    fn place(&self) -> (String, String, usize, usize, String) {
        let (pos, context) = match self.at {
            At::Start => (0, String::new()),
            At::Pipe(p) => (p.pos, p.to_string()),
            At::Command(c) => (c.pos, c.to_string()),
            At::Arg(a) => (a.pos(), a.to_string()),
            At::Template(n, pos) => (pos, n.to_string()),
        };
        let (line, column) = self.tree.line_column(pos);
        (
            self.tree.name.clone(),
            self.template.to_owned(),
            line,
            column,
            context,
        )
    }

    fn write(&mut self, s: &str) -> Exec<()> {
        if self.out.len() + s.len() > self.limit {
            return Err(self.too_large());
        }
        self.out.push_str(s);
        Ok(())
    }

    fn too_large(&self) -> Error {
        Error::TooLarge {
            name: self.tree.name.clone(),
            limit: self.limit,
        }
    }

    fn walk_list(&mut self, dot: Dot<'_>, list: &'t [Node]) -> Exec<Flow> {
        for node in list {
            let flow = self.walk(dot, node)?;
            if flow != Flow::Normal {
                return Ok(flow);
            }
        }
        Ok(Flow::Normal)
    }

    fn step(&mut self) -> Exec<()> {
        self.budget.spend(1).map_err(|e| self.over_budget(e))
    }

    /// Charges what a function returned by its size, so that values cannot grow without
    /// bound, and refuses one nested deeper than the decoders build: dropping, printing and
    /// encoding it recurse.
    fn charge_result(&mut self, value: &Value, call_at: At<'t>) -> Exec<()> {
        let size = value.size();
        if size.depth > MAX_NESTING {
            self.at = call_at;
            return Err(self.fail(format!("value nested deeper than {MAX_NESTING} levels")));
        }
        self.charge_bytes(size.bytes, call_at)
    }

    /// A step for every 16 bytes a value holds: what building or copying it costs.
    fn charge_bytes(&mut self, bytes: u64, at: At<'t>) -> Exec<()> {
        if let Err(exceeded) = self.budget.spend(bytes / 16) {
            self.at = at;
            return Err(self.over_budget(exceeded));
        }
        Ok(())
    }

    fn walk(&mut self, dot: Dot<'_>, node: &'t Node) -> Exec<Flow> {
        self.step()?;
        match node {
            Node::Text(text) => self.write(text)?,
            Node::Action(pipe) => {
                let value = self.eval_pipeline(dot, pipe)?;
                if pipe.decl.is_empty() {
                    self.print_value(&value)?;
                }
            }
            Node::If(branch) => return with_stack(|| self.walk_if_or_with(false, dot, branch)),
            Node::With(branch) => return with_stack(|| self.walk_if_or_with(true, dot, branch)),
            Node::Range(branch) => return with_stack(|| self.walk_range(dot, branch)),
            Node::Template { pos, name, pipe } => {
                with_stack(|| self.walk_template(dot, node, *pos, name, pipe.as_ref()))?;
            }
            Node::Break => return Ok(Flow::Break),
            Node::Continue => return Ok(Flow::Continue),
        }
        Ok(Flow::Normal)
    }

    fn print_value(&mut self, value: &Value) -> Exec<()> {
        match value {
            Value::Nil => self.write("<no value>"),
            Value::String(s) => self.write(s),
            other => self.write(&gofmt::sprint_value(other)),
        }
    }

    fn walk_if_or_with(&mut self, with: bool, dot: Dot<'_>, branch: &'t Branch) -> Exec<Flow> {
        let mark = self.vars.len();
        let result = self.if_or_with(with, dot, branch);
        self.vars.truncate(mark);
        result
    }

    fn if_or_with(&mut self, with: bool, dot: Dot<'_>, branch: &'t Branch) -> Exec<Flow> {
        let value = self.eval_pipeline(dot, &branch.pipe)?;
        if value.truth() {
            let inner = if with { Dot::plain(&value) } else { dot };
            self.walk_list(inner, &branch.list)
        } else if let Some(else_list) = &branch.else_list {
            self.walk_list(dot, else_list)
        } else {
            Ok(Flow::Normal)
        }
    }

    fn walk_range(&mut self, dot: Dot<'_>, branch: &'t Branch) -> Exec<Flow> {
        let mark = self.vars.len();
        let result = self.range(dot, branch);
        self.vars.truncate(mark);
        result.map(|_| Flow::Normal)
    }

    fn range(&mut self, dot: Dot<'_>, branch: &'t Branch) -> Exec<()> {
        let value = self.eval_pipeline(dot, &branch.pipe)?;
        let mark = self.vars.len();
        let ran = match &value {
            Value::Int(n) => {
                if branch.pipe.decl.len() > 1 {
                    return Err(self.fail(format!(
                        "can't use {n} to iterate over more than one variable"
                    )));
                }
                for i in 0..*n {
                    if self.iteration(branch, mark, Value::Nil, Value::Int(i), false)?
                        == Flow::Break
                    {
                        break;
                    }
                }
                *n > 0
            }
            Value::List(items) => {
                for (i, item) in items.iter().enumerate() {
                    let index = Value::Int(i64::try_from(i).unwrap_or(i64::MAX));
                    if self.iteration(branch, mark, index, item.clone(), true)? == Flow::Break {
                        break;
                    }
                }
                !items.is_empty()
            }
            Value::Bytes(bytes) => {
                for (i, b) in bytes.iter().enumerate() {
                    let index = Value::Int(i64::try_from(i).unwrap_or(i64::MAX));
                    if self.iteration(branch, mark, index, Value::Int(i64::from(*b)), false)?
                        == Flow::Break
                    {
                        break;
                    }
                }
                !bytes.is_empty()
            }
            Value::Map(map) => {
                let boxed = self.holds_boxed(map);
                for (key, item) in map {
                    let index = Value::String(key.clone());
                    if self.iteration(branch, mark, index, item.clone(), boxed)? == Flow::Break {
                        break;
                    }
                }
                !map.is_empty()
            }
            Value::Nil => false,
            // Go prints the value here; a string may be a secret, so only its type is named.
            Value::String(_) => return Err(self.fail("range can't iterate over a string")),
            other => {
                let shown = gofmt::sprint_value(other);
                return Err(self.fail(format!("range can't iterate over {shown}")));
            }
        };
        if !ran && let Some(else_list) = &branch.else_list {
            self.walk_list(dot, else_list)?;
        }
        Ok(())
    }

    fn iteration(
        &mut self,
        branch: &'t Branch,
        mark: usize,
        index: Value,
        elem: Value,
        boxed: bool,
    ) -> Exec<Flow> {
        self.step()?;
        let decl = &branch.pipe.decl;
        if branch.pipe.is_assign {
            match decl.len() {
                0 => {}
                1 => self.set_var(&decl[0], elem.clone(), boxed)?,
                _ => {
                    self.set_var(&decl[0], index, false)?;
                    self.set_var(&decl[1], elem.clone(), boxed)?;
                }
            }
        } else {
            let top = self.vars.len();
            if !decl.is_empty() {
                self.vars[top - 1].value = elem.clone();
                self.vars[top - 1].boxed = boxed;
            }
            if decl.len() > 1 {
                self.vars[top - 2].value = index;
                self.vars[top - 2].boxed = false;
            }
        }
        let flow = self.walk_list(
            Dot {
                value: &elem,
                boxed,
            },
            &branch.list,
        );
        self.vars.truncate(mark);
        flow
    }

    fn walk_template(
        &mut self,
        dot: Dot<'_>,
        node: &'t Node,
        pos: usize,
        name: &'t str,
        pipe: Option<&'t Pipe>,
    ) -> Exec<()> {
        self.at = At::Template(node, pos);
        let Some(body) = self.tree.templates.get(name) else {
            return Err(self.fail(format!("template {} not defined", gofmt::quote(name))));
        };
        if self.depth == MAX_TEMPLATE_DEPTH {
            return Err(self.fail(format!(
                "exceeded maximum template depth ({MAX_TEMPLATE_DEPTH})"
            )));
        }
        let value = match pipe {
            Some(pipe) => self.eval_pipeline(dot, pipe)?,
            None => Value::Nil,
        };
        let vars = std::mem::replace(
            &mut self.vars,
            vec![Var {
                name: "$",
                value: value.clone(),
                boxed: false,
            }],
        );
        let template = std::mem::replace(&mut self.template, name);
        self.depth += 1;
        let result = self.walk_list(Dot::plain(&value), body);
        self.depth -= 1;
        self.template = template;
        self.vars = vars;
        result.map(|_| ())
    }

    fn var_value(&self, name: &str) -> Exec<(Value, bool)> {
        match self.vars.iter().rev().find(|v| v.name == name) {
            Some(v) => Ok((v.value.clone(), v.boxed)),
            None => Err(self.fail(format!("undefined variable: {name}"))),
        }
    }

    fn set_var(&mut self, name: &str, value: Value, boxed: bool) -> Exec<()> {
        match self.vars.iter_mut().rev().find(|v| v.name == name) {
            Some(var) => {
                var.value = value;
                var.boxed = boxed;
                Ok(())
            }
            None => Err(self.fail(format!("undefined variable: {name}"))),
        }
    }

    fn eval_pipeline(&mut self, dot: Dot<'_>, pipe: &'t Pipe) -> Exec<Value> {
        self.at = At::Pipe(pipe);
        let mut value = None;
        for cmd in &pipe.cmds {
            value = Some(self.eval_command(dot, cmd, value)?);
        }
        let value = value.unwrap_or(Value::Nil);
        for name in &pipe.decl {
            if pipe.is_assign {
                self.set_var(name, value.clone(), false)?;
            } else {
                self.vars.push(Var {
                    name,
                    value: value.clone(),
                    boxed: false,
                });
            }
        }
        Ok(value)
    }

    fn not_a_function(&self, args: &[Arg], last: &Option<Value>) -> Exec<()> {
        if args.len() > 1 || last.is_some() {
            return Err(self.fail(format!("can't give argument to non-function {}", args[0])));
        }
        Ok(())
    }

    /// One command; `last` is the previous command's value, passed as the final argument.
    fn eval_command(&mut self, dot: Dot<'_>, cmd: &'t Command, last: Option<Value>) -> Exec<Value> {
        let first = &cmd.args[0];
        let has_args = cmd.args.len() > 1 || last.is_some();
        // A copy of data, a variable or a literal, charged as arguments are (`eval_arg_boxed`).
        let copied = match first {
            Arg::Field { idents, .. } => {
                self.at = At::Arg(first);
                self.eval_field_chain(dot.value, dot.boxed, idents, has_args)?
                    .0
            }
            Arg::Chain { .. } => self.eval_chain(dot, first, has_args)?.0,
            Arg::Identifier { .. } => {
                return self.eval_function(dot, first, At::Command(cmd), &cmd.args[1..], last);
            }
            Arg::Pipe(pipe) => {
                self.not_a_function(&cmd.args, &last)?;
                return with_stack(|| self.eval_pipeline(dot, pipe));
            }
            Arg::Variable { .. } => self.eval_variable(first, &cmd.args, last)?.0,
            _ => {
                self.at = At::Arg(first);
                self.not_a_function(&cmd.args, &last)?;
                match first {
                    Arg::Bool { value, .. } => return Ok(Value::Bool(*value)),
                    Arg::Dot { .. } => dot.value.clone(),
                    Arg::Nil { .. } => return Err(self.fail("nil is not a command")),
                    Arg::Number { .. } => return self.ideal_constant(first),
                    Arg::String { text, .. } => Value::String(text.clone()),
                    _ => {
                        return Err(self.fail(format!(
                            "can't evaluate command {}",
                            gofmt::quote(&first.to_string())
                        )));
                    }
                }
            }
        };
        self.charge_bytes(copied.size().bytes, At::Arg(first))?;
        Ok(copied)
    }

    fn ideal_constant(&mut self, arg: &'t Arg) -> Exec<Value> {
        self.at = At::Arg(arg);
        match arg {
            Arg::Number {
                value: Number::Int(i),
                ..
            } => Ok(Value::Int(*i)),
            Arg::Number {
                value: Number::Float(f),
                ..
            } => Ok(Value::Float(*f)),
            Arg::Number { text, .. } => Err(self.fail(format!("{text} overflows int"))),
            _ => Ok(Value::Nil),
        }
    }

    fn eval_chain(&mut self, dot: Dot<'_>, chain: &'t Arg, has_args: bool) -> Exec<(Value, bool)> {
        self.at = At::Arg(chain);
        let Arg::Chain { node, fields, .. } = chain else {
            return Ok((Value::Nil, false));
        };
        if let Arg::Nil { .. } = **node {
            return Err(self.fail(format!("indirection through explicit nil in {chain}")));
        }
        // A function's or a pipeline's result is never boxed.
        let receiver = self.eval_arg(dot, node)?;
        self.eval_field_chain(&receiver, false, fields, has_args)
    }

    fn eval_variable(
        &mut self,
        var: &'t Arg,
        args: &'t [Arg],
        last: Option<Value>,
    ) -> Exec<(Value, bool)> {
        self.at = At::Arg(var);
        let Arg::Variable { idents, .. } = var else {
            return Ok((Value::Nil, false));
        };
        let (value, boxed) = self.var_value(&idents[0])?;
        if idents.len() == 1 {
            if !args.is_empty() {
                self.not_a_function(args, &last)?;
            }
            return Ok((value, boxed));
        }
        let has_args = args.len() > 1 || last.is_some();
        self.eval_field_chain(&value, boxed, &idents[1..], has_args)
    }

    /// `.a.b.c` from `receiver`: the value and whether it is boxed.
    fn eval_field_chain(
        &self,
        receiver: &Value,
        boxed: bool,
        idents: &[String],
        has_args: bool,
    ) -> Exec<(Value, bool)> {
        let last = idents.len().saturating_sub(1);
        let Some(first) = idents.first() else {
            return Ok((receiver.clone(), boxed));
        };
        let mut value = self.eval_field(receiver, boxed, first, has_args && last == 0)?;
        for (i, ident) in idents.iter().enumerate().skip(1) {
            value = self.eval_field(&value.0, value.1, ident, has_args && i == last)?;
        }
        Ok(value)
    }

    fn eval_field(
        &self,
        receiver: &Value,
        boxed: bool,
        name: &str,
        has_args: bool,
    ) -> Exec<(Value, bool)> {
        match receiver {
            Value::Nil if boxed => {
                Err(self.fail(format!("nil pointer evaluating interface {{}}.{name}")))
            }
            Value::Nil => {
                Err(self.fail(format!("nil data; no entry for key {}", gofmt::quote(name))))
            }
            Value::Map(map) => {
                if has_args {
                    return Err(self.fail(format!("{name} is not a method but has arguments")));
                }
                match map.get(name) {
                    Some(v) => Ok((v.clone(), self.holds_boxed(map))),
                    None => {
                        Err(self.fail(format!("map has no entry for key {}", gofmt::quote(name))))
                    }
                }
            }
            Value::Time(t) => match builtins::time_method(t, name) {
                Some(_) if has_args => {
                    Err(self.fail(format!("wrong number of args for {name}: want 0 got 1")))
                }
                Some(v) => Ok((v, false)),
                None => Err(self.fail(format!("can't evaluate field {name} in type time.Time"))),
            },
            _ if boxed => Err(self.fail(format!(
                "can't evaluate field {name} in type interface {{}}"
            ))),
            other => Err(self.fail(format!(
                "can't evaluate field {name} in type {}",
                other.go_type()
            ))),
        }
    }

    /// An operand as a function argument (Go's `evalArg` for an `interface{}` parameter).
    fn eval_arg(&mut self, dot: Dot<'_>, arg: &'t Arg) -> Exec<Value> {
        Ok(self.eval_arg_boxed(dot, arg)?.0)
    }

    /// An operand, and whether Go would hold it boxed in an `interface{}`.
    fn eval_arg_boxed(&mut self, dot: Dot<'_>, arg: &'t Arg) -> Exec<(Value, bool)> {
        self.at = At::Arg(arg);
        let plain = |v| Ok((v, false));
        // What a function returns was charged when it returned; an argument read from data or
        // a variable is a copy of it (Go passes a reference), charged like a result so that a
        // loop cannot copy a large value many times for a few steps each.
        let copied = match arg {
            Arg::Dot { .. } => (dot.value.clone(), dot.boxed),
            Arg::Field { idents, .. } => {
                self.eval_field_chain(dot.value, dot.boxed, idents, false)?
            }
            Arg::Variable { .. } => self.eval_variable(arg, &[], None)?,
            Arg::Chain { .. } => self.eval_chain(dot, arg, false)?,
            Arg::String { text, .. } => (Value::String(text.clone()), false),
            Arg::Nil { .. } => return plain(Value::Nil),
            Arg::Pipe(pipe) => return plain(with_stack(|| self.eval_pipeline(dot, pipe))?),
            Arg::Identifier { .. } => {
                return plain(self.eval_function(dot, arg, At::Arg(arg), &[], None)?);
            }
            Arg::Bool { value, .. } => return plain(Value::Bool(*value)),
            Arg::Number { .. } => return plain(self.ideal_constant(arg)?),
        };
        self.charge_bytes(copied.0.size().bytes, At::Arg(arg))?;
        Ok(copied)
    }

    /// An argument for a Go `string` parameter (the format of `printf`).
    fn eval_string_arg(&mut self, dot: Dot<'_>, arg: &'t Arg) -> Exec<Value> {
        self.at = At::Arg(arg);
        match arg {
            Arg::Nil { .. } => Err(self.fail("cannot assign nil to string")),
            Arg::Bool { .. } | Arg::Number { .. } => {
                Err(self.fail(format!("expected string; found {arg}")))
            }
            _ => {
                let (value, boxed) = self.eval_arg_boxed(dot, arg)?;
                self.expect_string(value, boxed)
            }
        }
    }

    fn expect_string(&self, value: Value, boxed: bool) -> Exec<Value> {
        match value {
            Value::String(_) => Ok(value),
            Value::Nil if boxed => {
                Err(self.fail("wrong type for value; expected string; got interface {}"))
            }
            Value::Nil => Err(self.fail("invalid value; expected string")),
            other => Err(self.fail(format!(
                "wrong type for value; expected string; got {}",
                other.go_type()
            ))),
        }
    }

    /// Calls a builtin or a function with the operands `args` and the piped `last` value.
    fn eval_function(
        &mut self,
        dot: Dot<'_>,
        ident: &'t Arg,
        call_at: At<'t>,
        args: &'t [Arg],
        last: Option<Value>,
    ) -> Exec<Value> {
        self.at = At::Arg(ident);
        let Arg::Identifier { name, .. } = ident else {
            return Ok(Value::Nil);
        };
        // As in Go, a function of the table replaces a builtin of the same name: sprig's
        // `slice` is not Go's.
        let function = self.funcs.get(name);
        let builtin = if function.is_some() {
            None
        } else {
            builtins::arity(name)
        };
        let arity = match (function, builtin) {
            (Some(f), _) => f.arity,
            (None, Some(arity)) => arity,
            (None, None) => {
                return Err(self.fail(format!("{} is not a defined function", gofmt::quote(name))));
            }
        };
        let num_in = args.len() + usize::from(last.is_some());
        match arity {
            Arity::Exact(n) if num_in != n => {
                return Err(self.fail(format!(
                    "wrong number of args for {name}: want {n} got {num_in}"
                )));
            }
            Arity::AtLeast(n) if num_in < n => {
                return Err(self.fail(format!(
                    "wrong number of args for {name}: want at least {n} got {}",
                    args.len()
                )));
            }
            _ => {}
        }
        if builtin.is_some() && (name == "and" || name == "or") {
            let mut value = Value::Nil;
            for arg in args {
                value = self.eval_arg(dot, arg)?;
                if value.truth() == (name == "or") {
                    return Ok(value);
                }
            }
            return Ok(last.unwrap_or(value));
        }
        let mut argv = Vec::with_capacity(num_in);
        for (i, arg) in args.iter().enumerate() {
            if i == 0 && builtin.is_some() && name == "printf" {
                argv.push(self.eval_string_arg(dot, arg)?);
            } else {
                argv.push(self.eval_arg(dot, arg)?);
            }
        }
        if let Some(last) = last {
            if argv.is_empty() && builtin.is_some() && name == "printf" {
                argv.push(self.expect_string(last, false)?);
            } else {
                argv.push(last);
            }
        }
        if let Some(cost) = function.and_then(|f| f.cost) {
            let cost = cost(&argv);
            self.budget.spend_on_call(name, cost).map_err(|e| {
                self.at = call_at;
                self.over_budget(e)
            })?;
        }
        let result = if builtin.is_some() {
            self.call_builtin(name, args, &argv)
        } else {
            match function {
                Some(f) => (f.call)(&argv).map_err(|e| Failure::Message(e.0)),
                None => Ok(Value::Nil),
            }
        };
        if let Ok(value) = &result {
            self.charge_result(value, call_at)?;
        }
        // Go's maps are references: `set $d "k" v` changes `$d` itself, and templates rely on
        // it (`{{ $_ := set $d ... }}`). Our values are copies, so the changed map is written
        // back to the variable it came from.
        if let (Ok(Value::Map(changed)), Some(Arg::Variable { idents, .. })) =
            (&result, args.first())
            && function.is_some()
            && idents.len() == 1
            && matches!(
                name.as_str(),
                "set" | "unset" | "merge" | "mustMerge" | "mergeOverwrite" | "mustMergeOverwrite"
            )
        {
            let (_, boxed) = self.var_value(&idents[0])?;
            self.set_var(&idents[0], Value::Map(changed.clone()), boxed)?;
        }
        result.map_err(|failure| match failure {
            Failure::TooLarge => self.too_large(),
            Failure::Message(message) => {
                self.at = call_at;
                self.fail(format!("error calling {name}: {message}"))
            }
        })
    }

    fn call_builtin(&self, name: &str, args: &[Arg], argv: &[Value]) -> Result<Value, Failure> {
        match name {
            "printf" => {
                let Some(Value::String(format)) = argv.first() else {
                    return Ok(Value::Nil);
                };
                gofmt::sprintf_limited(format, &argv[1..], self.limit)
                    .map(Value::String)
                    .ok_or(Failure::TooLarge)
            }
            "call" => Err(Failure::Message(match argv.first() {
                Some(Value::Nil) | None => "call of nil".to_owned(),
                Some(other) => {
                    let callee = args
                        .first()
                        .map_or_else(|| "value".to_owned(), ToString::to_string);
                    format!("non-function {callee} of type {}", other.go_type())
                }
            })),
            _ => builtins::call(name, argv, &|m| self.is_string_map(m)).map_err(Failure::Message),
        }
    }
}

/// Why a call failed: the function's own error, or output beyond the limit.
enum Failure {
    Message(String),
    TooLarge,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::funcs::{FuncError, FuncResult, expect_string};
    use crate::{Arity, Error, Funcs, Template, Value};

    /// The functions the Go side of the table registered, with the same behaviour.
    fn test_funcs() -> Funcs {
        fn upper(a: &[Value]) -> FuncResult {
            Ok(Value::String(expect_string(&a[0])?.to_uppercase()))
        }
        fn list(a: &[Value]) -> FuncResult {
            Ok(Value::List(a.to_vec()))
        }
        fn dict(a: &[Value]) -> FuncResult {
            let mut map = BTreeMap::new();
            for pair in a.chunks(2) {
                if let [key, value] = pair {
                    map.insert(expect_string(key)?.to_owned(), value.clone());
                }
            }
            Ok(Value::Map(map))
        }
        fn nilv(_: &[Value]) -> FuncResult {
            Ok(Value::Nil)
        }
        fn bytes(a: &[Value]) -> FuncResult {
            Ok(Value::Bytes(expect_string(&a[0])?.as_bytes().to_vec()))
        }
        fn fail(_: &[Value]) -> FuncResult {
            Err(FuncError("boom".into()))
        }
        fn add(a: &[Value]) -> FuncResult {
            match (&a[0], &a[1]) {
                (Value::Int(x), Value::Int(y)) => Ok(Value::Int(x + y)),
                _ => Err(FuncError("add wants ints".into())),
            }
        }
        fn t0(_: &[Value]) -> FuncResult {
            let t = jiff::civil::date(2024, 3, 5).at(7, 8, 9, 0);
            Ok(Value::Time(
                t.to_zoned(jiff::tz::TimeZone::UTC)
                    .map_err(|e| FuncError(e.to_string()))?,
            ))
        }
        let mut funcs = Funcs::default();
        funcs.insert("upper", Arity::Exact(1), upper);
        funcs.insert("list", Arity::AtLeast(0), list);
        funcs.insert("dict", Arity::AtLeast(0), dict);
        funcs.insert("nilv", Arity::Exact(0), nilv);
        funcs.insert("bytes", Arity::Exact(1), bytes);
        funcs.insert("fail", Arity::Exact(0), fail);
        funcs.insert("add", Arity::Exact(2), add);
        funcs.insert("t0", Arity::Exact(0), t0);
        funcs
    }

    /// ESO's data: a `map[string]string`.
    fn eso_data() -> Value {
        let pairs = [
            ("a", "x"),
            ("n", "3"),
            ("s", "hello"),
            ("e", ""),
            ("k", "a.b"),
        ];
        Value::Map(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
                .collect(),
        )
    }

    /// JSON as Go's `encoding/json` decodes it into `interface{}`: numbers are float64.
    fn from_json(j: &serde_json::Value) -> Value {
        match j {
            serde_json::Value::Null => Value::Nil,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => Value::Float(n.as_f64().unwrap_or_default()),
            serde_json::Value::String(s) => Value::String(s.clone()),
            serde_json::Value::Array(a) => Value::List(a.iter().map(from_json).collect()),
            serde_json::Value::Object(o) => {
                Value::Map(o.iter().map(|(k, v)| (k.clone(), from_json(v))).collect())
            }
        }
    }

    fn render(text: &str, data: &Value) -> String {
        let funcs = test_funcs();
        let result = Template::parse("t", text, &funcs).and_then(|t| t.execute(data, 1 << 20));
        match result {
            Ok(out) => format!("OK:{out}"),
            // Go's parse errors have no column.
            Err(Error::Parse {
                name,
                line,
                message,
                ..
            }) => format!("PARSE:template: {name}:{line}: {message}"),
            Err(e @ (Error::Exec { .. } | Error::OverBudget { .. })) => format!("EXEC:{e}"),
            Err(e) => format!("OTHER:{e}"),
        }
    }

    /// (template, data or null for ESO's map, what Go 1.26 gives). Generated by running each
    /// template through Go's `text/template` with `missingkey=error` and the functions of
    /// `test_funcs`. Where this crate differs on purpose the expectation was edited: complex
    /// numbers are refused, the template depth is 1000 (Go: 100000), messages that would print
    /// data (`range` over a string, `eq` of lists) name types only, `%p` prints no address and
    /// `%d` of a time does not dump Go's struct.
    const CASES: &str = r####"[
["hello", null, "OK:hello"],
["", null, "OK:"],
["a{{.a}}b", null, "OK:axb"],
["a  {{- .a -}}  \n b", null, "OK:axb"],
["{{-3}}", null, "OK:-3"],
["{{- 3}}", null, "OK:3"],
["{{3 -}}", null, "OK:3"],
["x {{- /* c */ -}} y", null, "OK:xy"],
["x {{/* c */}} y", null, "OK:x  y"],
["{{/* multi\nline */}}z", null, "OK:z"],
["a\n{{- .a}}", null, "OK:ax"],
["{{.a}}\n\n{{- .a}}", null, "OK:xx"],
["{{ .a -}}\n\t\n{{ .a }}", null, "OK:xx"],
["{{`raw\\n`}}", null, "OK:raw\\n"],
["{{\"q\\tx\\u00e9\\x41\\101\"}}", null, "OK:q\txéAA"],
["{{'a'}} {{'\\n'}} {{'\\x41'}} {{'é'}}", null, "OK:97 10 65 233"],
["{{ 1 }} {{ -1 }} {{ +5 }} {{ 0x1F }} {{ 0o17 }} {{ 017 }} {{ 0b101 }} {{ 1_000 }}", null, "OK:1 -1 5 31 15 15 5 1000"],
["{{ 1.5 }} {{ 1e3 }} {{ 1.0 }} {{ .5 }} {{ 0x1p4 }} {{ 1E-7 }} {{ 123456789.0 }}", null, "OK:1.5 1000 1 0.5 16 1e-07 1.23456789e+08"],
["{{ 9223372036854775807 }}", null, "OK:9223372036854775807"],
["{{ 9223372036854775808 }}", null, "EXEC:template: t:1:3: executing \"t\" at <9223372036854775808>: 9223372036854775808 overflows int"],
["{{ 99999999999999999999 }}", null, "PARSE:template: t:1: integer overflow: \"99999999999999999999\""],
["{{ 1i }}", null, "PARSE:template: t:1: complex numbers are not supported: 1i"],
["{{ 08 }}", null, "PARSE:template: t:1: integer overflow: \"08\""],
["{{ 0x1.8 }}", null, "PARSE:template: t:1: illegal number syntax: \"0x1.8\""],
["{{ 1__0 }}", null, "PARSE:template: t:1: illegal number syntax: \"1__0\""],
["{{ true }} {{ false }}", null, "OK:true false"],
["{{ nil }}", null, "EXEC:template: t:1:3: executing \"t\" at <nil>: nil is not a command"],
["{{ . }}", null, "OK:map[a:x e: k:a.b n:3 s:hello]"],
["{{ .k }}", null, "OK:a.b"],
["{{ .a.b }}", null, "EXEC:template: t:1:5: executing \"t\" at <.a.b>: can't evaluate field b in type string"],
["{{ .zz }}", null, "EXEC:template: t:1:3: executing \"t\" at <.zz>: map has no entry for key \"zz\""],
["{{ .m.x }}", {"m": {"x": "y"}}, "OK:y"],
["{{ .m.x.y }}", {"m": {"x": "y"}}, "EXEC:template: t:1:5: executing \"t\" at <.m.x.y>: can't evaluate field y in type interface {}"],
["{{ .m.q }}", {"m": {"x": "y"}}, "EXEC:template: t:1:5: executing \"t\" at <.m.q>: map has no entry for key \"q\""],
["{{ .m.n.x }}", {"m": {"n": null}}, "EXEC:template: t:1:5: executing \"t\" at <.m.n.x>: nil pointer evaluating interface {}.x"],
["{{ .m.n }}", {"m": {"n": null}}, "OK:<no value>"],
["{{ .f }} {{ .i }} {{ .big }} {{ .t }} {{ .l }} {{ .m }}", {"f": 1.5, "i": 3, "big": 1000000.0, "t": true, "l": [1, "a", null, [2]], "m": {"b": 1, "a": [true]}}, "OK:1.5 3 1e+06 true [1 a <nil> [2]] map[a:[true] b:1]"],
["{{ .l.x }}", {"l": [1]}, "EXEC:template: t:1:5: executing \"t\" at <.l.x>: can't evaluate field x in type interface {}"],
["{{ .f.x }}", {"f": 1.5}, "EXEC:template: t:1:5: executing \"t\" at <.f.x>: can't evaluate field x in type interface {}"],
["{{ .a .n }}", null, "EXEC:template: t:1:3: executing \"t\" at <.a>: a is not a method but has arguments"],
["{{ .a | .n }}", null, "EXEC:template: t:1:8: executing \"t\" at <.n>: n is not a method but has arguments"],
["{{ $.a }} {{ $ }}", null, "OK:x map[a:x e: k:a.b n:3 s:hello]"],
["{{ $.a.b }}", null, "EXEC:template: t:1:4: executing \"t\" at <$.a.b>: can't evaluate field b in type string"],
["{{ $x := .a }}{{ $x }}", null, "OK:x"],
["{{ $x := 1 }}{{ $x = 2 }}{{ $x }}", null, "OK:2"],
["{{ $x = 1 }}", null, "EXEC:template: t:1:8: executing \"t\" at <1>: undefined variable: $x"],
["{{ $y }}", null, "PARSE:template: t:1: undefined variable \"$y\""],
["{{ if true }}{{ $x := 1 }}{{ end }}{{ $x }}", null, "PARSE:template: t:1: undefined variable \"$x\""],
["{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ end }}{{ $x }}", null, "OK:2"],
["{{ $x := 1 }}{{ if true }}{{ $x := 2 }}{{ $x }}{{ end }}{{ $x }}", null, "OK:21"],
["{{ $x := nilv }}{{ $x.y }}", null, "EXEC:template: t:1:21: executing \"t\" at <$x.y>: nil data; no entry for key \"y\""],
["{{ $x := .m }}{{ $x.a }}", {"m": {"a": "b"}}, "OK:b"],
["{{ $x := 1 }}{{ $x 2 }}", null, "EXEC:template: t:1:16: executing \"t\" at <$x>: can't give argument to non-function $x"],
["{{ with $x := .a }}{{ $x }}{{ . }}{{ end }}", null, "OK:xx"],
["{{ range $i, $v := list 1 2 }}{{ $i }}{{ $v }}{{ end }}{{ $i }}", null, "PARSE:template: t:1: undefined variable \"$i\""],
["{{ $x, $y := 1 }}", null, "PARSE:template: t:1: too many declarations in command"],
["{{ with $x, $y := 1 }}{{ end }}", null, "PARSE:template: t:1: too many declarations in with"],
["{{ range $i, $v, $w := 1 }}{{ end }}", null, "PARSE:template: t:1: too many declarations in range"],
["{{ range $i, 3 }}{{ end }}", null, "PARSE:template: t:1: range can only initialize variables"],
["{{ (.m).x }}", {"m": {"x": "y"}}, "OK:y"],
["{{ (dict \"a\" (dict \"b\" 7)).a.b }}", null, "OK:7"],
["{{ (nilv).x }}", null, "EXEC:template: t:1:4: executing \"t\" at <nilv>: nil data; no entry for key \"x\""],
["{{ nil.x }}", null, "PARSE:template: t:1: unexpected . after term \"nil\""],
["{{ (1).x }}", null, "EXEC:template: t:1:4: executing \"t\" at <1>: can't evaluate field x in type int"],
["{{ \"a\".x }}", null, "PARSE:template: t:1: unexpected . after term \"\\\"a\\\"\""],
["{{ (upper .a) }}", null, "OK:X"],
["{{ (upper .a) .a }}", null, "EXEC:template: t:1:3: executing \"t\" at <(upper .a) .a>: can't give argument to non-function upper .a"],
["{{ ((((1)))) }}", null, "OK:1"],
["{{ (1 }}", null, "PARSE:template: t:1: unclosed left paren"],
["{{ 1) }}", null, "PARSE:template: t:1: unexpected right paren"],
["{{ if .a }}y{{ else }}n{{ end }}", null, "OK:y"],
["{{ if .e }}y{{ else }}n{{ end }}", null, "OK:n"],
["{{ if .e }}1{{ else if .a }}2{{ else }}3{{ end }}", null, "OK:2"],
["{{ if .e }}1{{ else if .e }}2{{ else }}3{{ end }}", null, "OK:3"],
["{{ if .e }}1{{ else if .e }}2{{ end }}", null, "OK:"],
["{{ if 0 }}a{{ end }}{{ if 0.0 }}b{{ end }}{{ if list }}c{{ end }}{{ if dict }}d{{ end }}{{ if nilv }}e{{ end }}{{ if t0 }}f{{ end }}", null, "OK:f"],
["{{ if }}{{ end }}", null, "PARSE:template: t:1: missing value for if"],
["{{ if .a }}", null, "PARSE:template: t:1: unexpected EOF"],
["{{ if .a }}{{ else }}{{ else }}{{ end }}", null, "PARSE:template: t:1: expected end; found {{else}}"],
["{{ end }}", null, "PARSE:template: t:1: unexpected {{end}}"],
["{{ else }}", null, "PARSE:template: t:1: unexpected {{else}}"],
["{{ if .a }}x{{ end }}{{ end }}", null, "PARSE:template: t:1: unexpected {{end}}"],
["{{ if .a }}{{ else with .a }}{{ end }}", null, "PARSE:template: t:1: unexpected <with> in input"],
["{{ with .a }}[{{ . }}]{{ end }}", null, "OK:[x]"],
["{{ with .e }}[{{ . }}]{{ else }}none{{ end }}", null, "OK:none"],
["{{ with .e }}1{{ else with .a }}2{{ . }}{{ else }}3{{ end }}", null, "OK:2x"],
["{{ with .m }}{{ .x }}{{ end }}", {"m": {"x": "y"}}, "OK:y"],
["{{ range .l }}[{{ . }}]{{ end }}", {"l": ["a", "b"]}, "OK:[a][b]"],
["{{ range $i, $e := .l }}{{ $i }}={{ $e }};{{ end }}", {"l": ["a", "b"]}, "OK:0=a;1=b;"],
["{{ range $e := .l }}{{ $e }}{{ end }}", {"l": ["a", "b"]}, "OK:ab"],
["{{ range $k, $v := . }}{{ $k }}={{ $v }};{{ end }}", null, "OK:a=x;e=;k=a.b;n=3;s=hello;"],
["{{ range . }}{{ . }};{{ end }}", null, "OK:x;;a.b;3;hello;"],
["{{ range .l }}x{{ else }}empty{{ end }}", {"l": []}, "OK:empty"],
["{{ range nilv }}x{{ else }}nil{{ end }}", null, "OK:nil"],
["{{ range 3 }}{{ . }}{{ end }}", null, "OK:012"],
["{{ range $i := 3 }}{{ $i }}{{ end }}", null, "OK:012"],
["{{ range $i, $v := 3 }}{{ end }}", null, "EXEC:template: t:1:19: executing \"t\" at <3>: can't use 3 to iterate over more than one variable"],
["{{ range 0 }}x{{ else }}zero{{ end }}", null, "OK:zero"],
["{{ range -2 }}x{{ else }}neg{{ end }}", null, "OK:neg"],
["{{ range .a }}{{ end }}", null, "EXEC:template: t:1:9: executing \"t\" at <.a>: range can't iterate over a string"],
["{{ range 1.5 }}{{ end }}", null, "EXEC:template: t:1:9: executing \"t\" at <1.5>: range can't iterate over 1.5"],
["{{ range true }}{{ end }}", null, "EXEC:template: t:1:9: executing \"t\" at <true>: range can't iterate over true"],
["{{ range bytes \"ab\" }}{{ . }},{{ end }}", null, "OK:97,98,"],
["{{ range $i, $v := list 1 2 3 4 }}{{ if eq $v 2 }}{{ continue }}{{ end }}{{ if eq $v 4 }}{{ break }}{{ end }}{{ $v }}{{ end }}", null, "OK:13"],
["{{ break }}", null, "PARSE:template: t:1: {{break}} outside {{range}}"],
["{{ continue }}", null, "PARSE:template: t:1: {{continue}} outside {{range}}"],
["{{ range 2 }}{{ break 1 }}{{ end }}", null, "PARSE:template: t:1: unexpected \"1\" in {{break}}"],
["{{ $x := 0 }}{{ range $x = list 5 6 }}{{ end }}{{ $x }}", null, "OK:6"],
["{{ $i := 0 }}{{ $v := 0 }}{{ range $i, $v = list 5 6 }}{{ end }}{{ $i }}{{ $v }}", null, "OK:16"],
["{{ range list (nilv) }}{{ .x }}{{ end }}", null, "EXEC:template: t:1:26: executing \"t\" at <.x>: nil pointer evaluating interface {}.x"],
["{{ range $v := list 1 }}{{ $w := 2 }}{{ end }}{{ $w }}", null, "PARSE:template: t:1: undefined variable \"$w\""],
["{{ range list 1 2 }}{{ $.a }}{{ end }}", null, "OK:xx"],
["{{ define \"x\" }}X{{ . }}{{ end }}{{ template \"x\" .a }}", null, "OK:Xx"],
["{{ define \"x\" }}X{{ end }}{{ template \"x\" }}", null, "OK:X"],
["{{ template \"nope\" }}", null, "EXEC:template: t:1:12: executing \"t\" at <{{template \"nope\"}}>: template \"nope\" not defined"],
["{{ define \"x\" }}{{ .q }}{{ end }}{{ template \"x\" }}", null, "EXEC:template: t:1:19: executing \"x\" at <.q>: nil data; no entry for key \"q\""],
["{{ define \"x\" }}{{ .q }}{{ end }}{{ template \"x\" nilv }}", null, "EXEC:template: t:1:19: executing \"x\" at <.q>: nil data; no entry for key \"q\""],
["{{ define \"x\" }}{{ $ }}{{ end }}{{ template \"x\" 5 }}", null, "OK:5"],
["{{ block \"b\" .a }}[{{ . }}]{{ end }}", null, "OK:[x]"],
["{{ block \"b\" .a }}[{{ . }}]{{ end }}{{ define \"b\" }}other{{ end }}", null, "PARSE:template: t:1: template: multiple definition of template \"b\""],
["{{ define \"x\" }}a{{ end }}{{ define \"x\" }}b{{ end }}", null, "PARSE:template: t:1: template: multiple definition of template \"x\""],
["{{ define \"x\" }}a{{ end }}{{ define \"x\" }} {{ end }}{{ template \"x\" }}", null, "OK:a"],
["{{ define \"t\" }}override{{ end }}", null, "OK:override"],
["{{ define \"t\" }}override{{ end }}body", null, "PARSE:template: t:1: template: multiple definition of template \"t\""],
["{{ define \"r\" }}{{ template \"r\" }}{{ end }}{{ template \"r\" }}", null, "EXEC:template: t:1:28: executing \"r\" at <{{template \"r\"}}>: exceeded maximum template depth (1000)"],
["{{ define \"x\" }}{{ .q }}{{ end }}\n\n  {{ template \"x\" . }}", null, "EXEC:template: t:1:19: executing \"x\" at <.q>: map has no entry for key \"q\""],
["{{ if true }}{{ define \"x\" }}{{ end }}{{ end }}", null, "PARSE:template: t:1: unexpected <define> in command"],
["{{ define x }}{{ end }}", null, "PARSE:template: t:1: unexpected \"x\" in define clause"],
["{{ template x }}", null, "PARSE:template: t:1: unexpected \"x\" in template clause"],
["{{ define \"x\" }}", null, "PARSE:template: t:1: unexpected EOF"],
["{{ define \"x\" }}{{ else }}{{ end }}", null, "PARSE:template: t:1: unexpected {{else}} in define clause"],
["{{ define \"a\" }}{{ range . }}{{ break }}{{ end }}{{ end }}ok", null, "OK:ok"],
["{{ upper .a }}", null, "OK:X"],
["{{ .a | upper }}", null, "OK:X"],
["{{ .a | printf \"%s-%s\" \"p\" }}", null, "OK:p-x"],
["{{ upper }}", null, "EXEC:template: t:1:3: executing \"t\" at <upper>: wrong number of args for upper: want 1 got 0"],
["{{ upper .a .a }}", null, "EXEC:template: t:1:3: executing \"t\" at <upper>: wrong number of args for upper: want 1 got 2"],
["{{ .a | upper .a }}", null, "EXEC:template: t:1:8: executing \"t\" at <upper>: wrong number of args for upper: want 1 got 2"],
["{{ foo }}", null, "PARSE:template: t:1: function \"foo\" not defined"],
["{{ .a | foo }}", null, "PARSE:template: t:1: function \"foo\" not defined"],
["{{ fail }}", null, "EXEC:template: t:1:3: executing \"t\" at <fail>: error calling fail: boom"],
["{{ .a | fail }}", null, "EXEC:template: t:1:8: executing \"t\" at <fail>: wrong number of args for fail: want 0 got 1"],
["{{ list }}", null, "OK:[]"],
["{{ list 1 \"a\" nil .a }}", null, "OK:[1 a <nil> x]"],
["{{ 1 | 2 }}", null, "PARSE:template: t:1: non executable command in pipeline stage 2"],
["{{ .a | . }}", null, "PARSE:template: t:1: non executable command in pipeline stage 2"],
["{{ .a | \"s\" }}", null, "PARSE:template: t:1: non executable command in pipeline stage 2"],
["{{ .a | nil }}", null, "PARSE:template: t:1: non executable command in pipeline stage 2"],
["{{ .a | }}", null, "OK:x"],
["{{ | .a }}", null, "PARSE:template: t:1: unexpected \"|\" in command"],
["{{ .a }", null, "PARSE:template: t:1: unexpected \"}\" in operand"],
["{{ .a", null, "PARSE:template: t:1: unclosed action"],
["{{ .a\n\n", null, "PARSE:template: t:3: unclosed action started at t:1"],
["{{\n.a\n", null, "PARSE:template: t:3: unclosed action started at t:1"],
["{{ \"abc }}", null, "PARSE:template: t:1: unterminated quoted string"],
["{{ 'ab' }}", null, "PARSE:template: t:1: malformed character constant: 'ab'"],
["{{ '' }}", null, "PARSE:template: t:1: invalid syntax"],
["{{ (upper) }}", null, "EXEC:template: t:1:4: executing \"t\" at <upper>: wrong number of args for upper: want 1 got 0"],
["{{ 1 2 }}", null, "EXEC:template: t:1:3: executing \"t\" at <1>: can't give argument to non-function 1"],
["{{ \"a\" 2 }}", null, "EXEC:template: t:1:3: executing \"t\" at <\"a\">: can't give argument to non-function \"a\""],
["{{ . 2 }}", null, "EXEC:template: t:1:3: executing \"t\" at <.>: can't give argument to non-function ."],
["{{ true 2 }}", null, "EXEC:template: t:1:3: executing \"t\" at <true>: can't give argument to non-function true"],
["{{ nil 2 }}", null, "EXEC:template: t:1:3: executing \"t\" at <nil>: can't give argument to non-function nil"],
["{{ .a:=1 }}", null, "PARSE:template: t:1: unexpected \":=\" in operand"],
["{{ $x := }}", null, "PARSE:template: t:1: missing value for command"],
["{{ .a.b.c | upper }}", null, "EXEC:template: t:1:5: executing \"t\" at <.a.b.c>: can't evaluate field b in type string"],
["{{ a-b }}", null, "PARSE:template: t:1: bad character U+002D '-'"],
["{{ . | printf \"%v\" }}", null, "OK:map[a:x e: k:a.b n:3 s:hello]"],
["{{ printf }}", null, "EXEC:template: t:1:3: executing \"t\" at <printf>: wrong number of args for printf: want at least 1 got 0"],
["{{ 1 | printf }}", null, "EXEC:template: t:1:7: executing \"t\" at <printf>: wrong type for value; expected string; got int"],
["{{ printf 3 }}", null, "EXEC:template: t:1:10: executing \"t\" at <3>: expected string; found 3"],
["{{ printf nil }}", null, "EXEC:template: t:1:10: executing \"t\" at <nil>: cannot assign nil to string"],
["{{ printf true }}", null, "EXEC:template: t:1:10: executing \"t\" at <true>: expected string; found true"],
["{{ printf .q }}", {"q": 1}, "EXEC:template: t:1:10: executing \"t\" at <.q>: wrong type for value; expected string; got float64"],
["{{ printf .q }}", {"q": null}, "EXEC:template: t:1:10: executing \"t\" at <.q>: wrong type for value; expected string; got interface {}"],
["{{ call .a }}", null, "EXEC:template: t:1:3: executing \"t\" at <call .a>: error calling call: non-function .a of type string"],
["{{ call nilv }}", null, "EXEC:template: t:1:3: executing \"t\" at <call nilv>: error calling call: call of nil"],
["{{ call }}", null, "EXEC:template: t:1:3: executing \"t\" at <call>: wrong number of args for call: want at least 1 got 0"],
["{{ add 1 2 }}", null, "OK:3"],
["{{ t0 }}", null, "OK:2024-03-05 07:08:09 +0000 UTC"],
["{{ t0.Year }} {{ t0.Month }} {{ t0.Day }} {{ (t0).Hour }} {{ t0.Unix }}", null, "OK:2024 March 5 7 1709622489"],
["{{ t0.Nope }}", null, "EXEC:template: t:1:3: executing \"t\" at <t0>: can't evaluate field Nope in type time.Time"],
["{{ and 1 2 }} {{ and 0 2 }} {{ and 1 \"\" }} {{ or 0 \"\" }} {{ or 0 3 }} {{ or \"a\" fail }} {{ and 0 fail }}", null, "OK:2 0   3 a 0"],
["{{ and }}", null, "EXEC:template: t:1:3: executing \"t\" at <and>: wrong number of args for and: want at least 1 got 0"],
["{{ or }}", null, "EXEC:template: t:1:3: executing \"t\" at <or>: wrong number of args for or: want at least 1 got 0"],
["{{ 1 | and 2 }} {{ 0 | and 2 }} {{ 0 | or 0 }}", null, "OK:1 0 0"],
["{{ and 1 nilv }}", null, "OK:<no value>"],
["{{ not 0 }} {{ not .a }} {{ not nilv }}", null, "OK:true false true"],
["{{ not 1 2 }}", null, "EXEC:template: t:1:3: executing \"t\" at <not>: wrong number of args for not: want 1 got 2"],
["{{ len .a }} {{ len (list 1 2) }} {{ len . }} {{ len \"é\" }} {{ len (bytes \"ab\") }}", null, "OK:1 2 5 2 2"],
["{{ len 3 }}", null, "EXEC:template: t:1:3: executing \"t\" at <len 3>: error calling len: len of type int"],
["{{ len nil }}", null, "EXEC:template: t:1:3: executing \"t\" at <len nil>: error calling len: reflect: call of reflect.Value.Type on zero Value"],
["{{ index . \"a\" }}", null, "OK:x"],
["{{ index . \"zz\" }}", null, "OK:"],
["{{ index .m \"zz\" }}", {"m": {"a": 1}}, "OK:<no value>"],
["{{ index .m \"zz\" }}", {"m": {"a": "b"}}, "OK:<no value>"],
["{{ index (list 1 2 3) 1 }} {{ index \"abc\" 1 }} {{ index (list (list 1 2)) 0 1 }} {{ index (bytes \"ab\") 1 }}", null, "OK:2 98 2 98"],
["{{ index (list 1) 5 }}", null, "EXEC:template: t:1:3: executing \"t\" at <index (list 1) 5>: error calling index: index out of range: 5"],
["{{ index (list 1) 1 }}", null, "EXEC:template: t:1:3: executing \"t\" at <index (list 1) 1>: error calling index: reflect: slice index out of range"],
["{{ index (list 1) -1 }}", null, "EXEC:template: t:1:3: executing \"t\" at <index (list 1) -1>: error calling index: index out of range: -1"],
["{{ index \"abc\" 3 }}", null, "EXEC:template: t:1:3: executing \"t\" at <index \"abc\" 3>: error calling index: reflect: string index out of range"],
["{{ index (list 1) \"a\" }}", null, "EXEC:template: t:1:3: executing \"t\" at <index (list 1) \"a\">: error calling index: cannot index slice/array with type string"],
["{{ index (list 1) nil }}", null, "EXEC:template: t:1:3: executing \"t\" at <index (list 1) nil>: error calling index: cannot index slice/array with nil"],
["{{ index . 1 }}", null, "EXEC:template: t:1:3: executing \"t\" at <index . 1>: error calling index: value has type int; should be string"],
["{{ index . nil }}", null, "EXEC:template: t:1:3: executing \"t\" at <index . nil>: error calling index: value is nil; should be of type string"],
["{{ index nil 1 }}", null, "EXEC:template: t:1:3: executing \"t\" at <index nil 1>: error calling index: index of untyped nil"],
["{{ index 5 1 }}", null, "EXEC:template: t:1:3: executing \"t\" at <index 5 1>: error calling index: can't index item of type int"],
["{{ index (list nil) 0 0 }}", null, "EXEC:template: t:1:3: executing \"t\" at <index (list nil) 0 0>: error calling index: index of nil pointer"],
["{{ index .a }}", null, "OK:x"],
["{{ slice \"hello\" 1 3 }} {{ slice \"hello\" 2 }} {{ slice \"hello\" }} {{ slice (list 1 2 3) 1 }} {{ slice (list 1 2 3) 0 1 2 }}", null, "OK:el llo hello [2 3] [1]"],
["{{ slice \"abc\" 1 4 }}", null, "EXEC:template: t:1:3: executing \"t\" at <slice \"abc\" 1 4>: error calling slice: index out of range: 4"],
["{{ slice \"abc\" 2 1 }}", null, "EXEC:template: t:1:3: executing \"t\" at <slice \"abc\" 2 1>: error calling slice: invalid slice index: 2 > 1"],
["{{ slice \"abc\" 0 1 2 }}", null, "EXEC:template: t:1:3: executing \"t\" at <slice \"abc\" 0 1 2>: error calling slice: cannot 3-index slice a string"],
["{{ slice (list 1 2 3) 0 2 1 }}", null, "EXEC:template: t:1:3: executing \"t\" at <slice (list 1 2 3) 0 2 1>: error calling slice: invalid slice index: 2 > 1"],
["{{ slice (list 1) 0 1 1 1 }}", null, "EXEC:template: t:1:3: executing \"t\" at <slice (list 1) 0 1 1 1>: error calling slice: too many slice indexes: 4"],
["{{ slice 3 }}", null, "EXEC:template: t:1:3: executing \"t\" at <slice 3>: error calling slice: can't slice item of type int"],
["{{ slice nil }}", null, "EXEC:template: t:1:3: executing \"t\" at <slice nil>: error calling slice: slice of untyped nil"],
["{{ slice \"abc\" \"a\" }}", null, "EXEC:template: t:1:3: executing \"t\" at <slice \"abc\" \"a\">: error calling slice: cannot index slice/array with type string"],
["{{ print 1 2 \"a\" 3 \"b\" \"c\" nil }}", null, "OK:1 2a3bc<nil>"],
["{{ println 1 \"a\" }}", null, "OK:1 a\n"],
["{{ print }}", null, "OK:"],
["{{ printf \"%d-%s\" 1 \"a\" }}", null, "OK:1-a"],
["{{ html \"<a href='x'>&\\\"\" }} {{ html 1 2 }} {{ html nil }} {{ html \"a\" \"b\" }}", null, "OK:&lt;a href=&#39;x&#39;&gt;&amp;&#34; 1 2 &lt;no value&gt; ab"],
["{{ js \"a'b\\\"<>&=\\\\\" }} {{ js \"\\t\" }} {{ js 1 }}", null, "OK:a\\'b\\\"\\u003C\\u003E\\u0026\\u003D\\\\ \\u0009 1"],
["{{ urlquery \"a b&c=d/é\" }} {{ urlquery 1 \"x\" }}", null, "OK:a+b%26c%3Dd%2F%C3%A9 1x"],
["{{ eq 1 1 }} {{ eq 1 2 }} {{ eq \"a\" \"a\" }} {{ eq .a \"x\" }} {{ eq 1 2 3 1 }} {{ eq true true }} {{ eq 1.5 1.5 }}", null, "OK:true false true true true true true"],
["{{ eq 1 1.0 }}", null, "EXEC:template: t:1:3: executing \"t\" at <eq 1 1.0>: error calling eq: incompatible types for comparison: int and float64"],
["{{ eq \"a\" 1 }}", null, "EXEC:template: t:1:3: executing \"t\" at <eq \"a\" 1>: error calling eq: incompatible types for comparison: string and int"],
["{{ eq 1 }}", null, "EXEC:template: t:1:3: executing \"t\" at <eq 1>: error calling eq: missing argument for comparison"],
["{{ eq nilv nilv }} {{ eq nilv 1 }} {{ eq 1 nilv }} {{ eq nilv \"\" }}", null, "OK:true false false false"],
["{{ eq (list) (list) }}", null, "EXEC:template: t:1:3: executing \"t\" at <eq (list) (list)>: error calling eq: non-comparable type []interface {}"],
["{{ eq (list) (dict) }}", null, "EXEC:template: t:1:3: executing \"t\" at <eq (list) (dict)>: error calling eq: non-comparable types []interface {} and map[string]interface {}"],
["{{ eq (list) nilv }}", null, "OK:false"],
["{{ eq 1 2 \"a\" }}", null, "EXEC:template: t:1:3: executing \"t\" at <eq 1 2 \"a\">: error calling eq: incompatible types for comparison: int and string"],
["{{ eq 1 1 \"a\" }}", null, "OK:true"],
["{{ ne 1 2 }} {{ ne \"a\" \"a\" }}", null, "OK:true false"],
["{{ ne 1 2 3 }}", null, "EXEC:template: t:1:3: executing \"t\" at <ne>: wrong number of args for ne: want 2 got 3"],
["{{ lt 1 2 }} {{ lt 2 1 }} {{ le 2 2 }} {{ gt \"b\" \"a\" }} {{ ge 1.5 2.5 }} {{ lt \"B\" \"a\" }}", null, "OK:true false true true false true"],
["{{ lt 1 1.5 }}", null, "EXEC:template: t:1:3: executing \"t\" at <lt 1 1.5>: error calling lt: incompatible types for comparison: int and float64"],
["{{ lt true false }}", null, "EXEC:template: t:1:3: executing \"t\" at <lt true false>: error calling lt: invalid type for comparison"],
["{{ lt nilv 1 }}", null, "EXEC:template: t:1:3: executing \"t\" at <lt nilv 1>: error calling lt: invalid type for comparison"],
["{{ lt (list) 1 }}", null, "EXEC:template: t:1:3: executing \"t\" at <lt (list) 1>: error calling lt: invalid type for comparison"],
["{{ gt 1 \"a\" }}", null, "EXEC:template: t:1:3: executing \"t\" at <gt 1 \"a\">: error calling gt: incompatible types for comparison: int and string"],
["{{ eq .f 3.0 }} {{ eq .f 3 }}", {"f": 3}, "EXEC:template: t:1:19: executing \"t\" at <eq .f 3>: error calling eq: incompatible types for comparison: float64 and int"],
["{{ bytes \"ab\" }} {{ list (bytes \"a\") }}", null, "OK:[97 98] [[97]]"],
["{{ dict \"b\" 2 \"a\" (list 1 nil) }}", null, "OK:map[a:[1 <nil>] b:2]"],
["{{ nilv }}", null, "OK:<no value>"],
["{{ list nilv }}", null, "OK:[<nil>]"],
["{{ 1e21 }} {{ 1e20 }} {{ 100000.0 }} {{ 0.00001 }} {{ -0.0 }}", null, "OK:1e+21 1e+20 100000 1e-05 -0"],
["{{ printf \"%v %+v %#v\" 1 1 1 }}", null, "OK:1 1 1"],
["{{ printf \"%v|%#v\" \"a\" \"a\" }}", null, "OK:a|\"a\""],
["{{ printf \"%#v\" (list \"a\" 1 nil 1.5 true) }}", null, "OK:[]interface {}{\"a\", 1, interface {}(nil), 1.5, true}"],
["{{ printf \"%#v\" (dict \"a\" \"b\" \"c\" (list 1)) }}", null, "OK:map[string]interface {}{\"a\":\"b\", \"c\":[]interface {}{1}}"],
["{{ printf \"%#v\" (bytes \"ab\") }}", null, "OK:[]byte{0x61, 0x62}"],
["{{ printf \"%#v\" nilv }}", null, "OK:<nil>"],
["{{ printf \"%#v %#v\" 1.0 1e6 }}", null, "OK:1 1e+06"],
["{{ printf \"%s\" 1 }}", null, "OK:%!s(int=1)"],
["{{ printf \"%d\" \"hi\" }}", null, "OK:%!d(string=hi)"],
["{{ printf \"%s\" nilv }}", null, "OK:%!s(<nil>)"],
["{{ printf \"%d\" nilv }}", null, "OK:%!d(<nil>)"],
["{{ printf \"%v\" nilv }}", null, "OK:<nil>"],
["{{ printf \"%T %T %T %T %T %T %T %T\" 1 \"a\" 1.5 true nilv (list) (dict) (bytes \"\") }}", null, "OK:int string float64 bool <nil> []interface {} map[string]interface {} []uint8"],
["{{ printf \"%d %5d %-5d| %05d %+d % d %x %X %#x %o %#o %O %b %#b\" 42 42 42 42 42 42 255 255 255 8 8 8 5 5 }}", null, "OK:42    42 42   | 00042 +42  42 ff FF 0xff 10 010 0o10 101 0b101"],
["{{ printf \"%d %05d %x\" -42 -42 -255 }}", null, "OK:-42 -0042 -ff"],
["{{ printf \"%.3d %8.3d %.0d|%5.0d|\" 7 7 0 0 }}", null, "OK:007      007 |     |"],
["{{ printf \"%c %c %q %U %#U %q\" 65 233 65 233 233 10 }}", null, "OK:A é 'A' U+00E9 U+00E9 'é' '\\n'"],
["{{ printf \"%c\" -1 }}", null, "OK:�"],
["{{ printf \"%U\" 1114112 }}", null, "OK:U+110000"],
["{{ printf \"%s|%10s|%-10s|%.2s|%5.1s|\" \"hello\" \"hi\" \"hi\" \"hello\" \"hello\" }}", null, "OK:hello|        hi|hi        |he|    h|"],
["{{ printf \"%q %+q %#q %#q\" \"a\\\"b\\n\" \"é\" \"x\" \"`\" }}", null, "OK:\"a\\\"b\\n\" \"\\u00e9\" `x` \"`\""],
["{{ printf \"%x %X % x %#x %# x %10x\" \"hi\" \"hi\" \"hi\" \"hi\" \"hi\" \"hi\" }}", null, "OK:6869 6869 68 69 0x6869 0x68 0x69       6869"],
["{{ printf \"%x %s %q %v %d\" (bytes \"hi\") (bytes \"hi\") (bytes \"hi\") (bytes \"hi\") (bytes \"hi\") }}", null, "OK:6869 hi \"hi\" [104 105] [104 105]"],
["{{ printf \"%t %t %v %5t\" true false true true }}", null, "OK:true false true  true"],
["{{ printf \"%t\" 1 }}", null, "OK:%!t(int=1)"],
["{{ printf \"%d\" true }}", null, "OK:%!d(bool=true)"],
["{{ printf \"%e %E %f %F %g %G\" 1234.5678 1234.5678 1234.5678 1234.5678 1234.5678 1234.5678 }}", null, "OK:1.234568e+03 1.234568E+03 1234.567800 1234.567800 1234.5678 1234.5678"],
["{{ printf \"%.2f %05.2f %8.3f|%-8.3f|%+.1f % .1f\" 3.14159 3.14159 -3.14159 2.5 2.5 2.5 }}", null, "OK:3.14 03.14   -3.142|2.500   |+2.5  2.5"],
["{{ printf \"%.0f %.0f %.0f %.1f %.2f %.2f\" 0.5 1.5 2.5 0.25 1.005 0.125 }}", null, "OK:0 2 2 0.2 1.00 0.12"],
["{{ printf \"%.3e %.0e %.10e %e\" 123456.789 5.5 1.0 0.0 }}", null, "OK:1.235e+05 6e+00 1.0000000000e+00 0.000000e+00"],
["{{ printf \"%g %g %g %g %g %g\" 100000.0 1000000.0 0.0001 0.00001 1e100 123456789.0 }}", null, "OK:100000 1e+06 0.0001 1e-05 1e+100 1.23456789e+08"],
["{{ printf \"%.3g %.10g %.1g %.0g %g\" 1234.5678 1234.5678 0.15 7.5 1.0 }}", null, "OK:1.23e+03 1234.5678 0.1 8 1"],
["{{ printf \"%#g %#.3g %#f %#.0f %#e\" 1.0 1.0 1.0 1.0 1.0 }}", null, "OK:1.00000 1.00 1.000000 1. 1.000000e+00"],
["{{ printf \"%v %v %v\" 1e6 1e-7 123456.0 }}", null, "OK:1e+06 1e-07 123456"],
["{{ printf \"%b %x %X %.2x\" 1.0 1.0 -2.5 3.14159 }}", null, "OK:4503599627370496p-52 0x1p+00 -0X1.4P+01 0x1.92p+01"],
["{{ printf \"%010.3f|%-010.3f|%+010.3f\" 3.14159 3.14159 3.14159 }}", null, "OK:000003.142|3.142     |+00003.142"],
["{{ printf \"%d\" 1.5 }}", null, "OK:%!d(float64=1.5)"],
["{{ printf \"%s\" 1.5 }}", null, "OK:%!s(float64=1.5)"],
["{{ printf \"%f\" 1 }}", null, "OK:%!f(int=1)"],
["{{ printf \"%x\" 1.5 }}", null, "OK:0x1.8p+00"],
["{{ printf \"%v %d %s\" (list 1 2) (list 1 2) (list 1 2) }}", null, "OK:[1 2] [1 2] [%!s(int=1) %!s(int=2)]"],
["{{ printf \"%d\" (list \"a\" 1) }}", null, "OK:[%!d(string=a) 1]"],
["{{ printf \"%s\" (list \"a\" 1 nil) }}", null, "OK:[a %!s(int=1) <nil>]"],
["{{ printf \"%5d\" (list 1 2) }}", null, "OK:[    1     2]"],
["{{ printf \"%x\" (list \"hi\" 255) }}", null, "OK:[6869 ff]"],
["{{ printf \"%q\" (list \"a\" \"b\") }}", null, "OK:[\"a\" \"b\"]"],
["{{ printf \"%v %d\" (dict \"a\" 1) (dict \"a\" 1) }}", null, "OK:map[a:1] map[%!d(string=a):1]"],
["{{ printf \"%s\" (dict \"a\" (list 1)) }}", null, "OK:map[a:[%!s(int=1)]]"],
["{{ printf \"%v %s %d\" t0 t0 t0 }}", null, "OK:2024-03-05 07:08:09 +0000 UTC 2024-03-05 07:08:09 +0000 UTC %!d(time.Time=2024-03-05 07:08:09 +0000 UTC)"],
["{{ printf \"%#v\" t0 }}", null, "OK:time.Date(2024, time.March, 5, 7, 8, 9, 0, time.UTC)"],
["{{ printf \"%!\"  }}", null, "OK:%!!(MISSING)"],
["{{ printf \"%\"  }}", null, "OK:%!(NOVERB)"],
["{{ printf \"%d %d\" 1 }}", null, "OK:1 %!d(MISSING)"],
["{{ printf \"%d\" 1 2 \"a\" }}", null, "OK:1%!(EXTRA int=2, string=a)"],
["{{ printf \"%z\" 1 }}", null, "OK:%!z(int=1)"],
["{{ printf \"%[2]d %[1]d\" 1 2 }}", null, "OK:2 1"],
["{{ printf \"%[3]d\" 1 2 }}", null, "OK:%!d(BADINDEX)"],
["{{ printf \"%[0]d\" 1 }}", null, "OK:%!d(BADINDEX)"],
["{{ printf \"%[2]*[1]d|\" 12 5 }}", null, "OK:   12|"],
["{{ printf \"%*d|%-*d|\" 5 1 5 1 }}", null, "OK:    1|1    |"],
["{{ printf \"%*d\" \"x\" 1 }}", null, "OK:%!(BADWIDTH)1"],
["{{ printf \"%.*f\" 2 3.14159 }}", null, "OK:3.14"],
["{{ printf \"%.*f\" -1 3.14159 }}", null, "OK:%!(BADPREC)3.141590"],
["{{ printf \"%[1]d %[1]d %d\" 1 2 }}", null, "OK:1 1 2"],
["{{ printf \"%[1]d\" 1 2 }}", null, "OK:1"],
["{{ printf \"%p\" (list) }}", null, "OK:%!p([]interface {}=[])"],
["{{ printf \"%w\" 1 }}", null, "OK:%!w(int=1)"],
["{{ printf \"%%\"  }}", null, "OK:%"],
["{{ printf \"%5%\"  }}", null, "OK:%"],
["{{ printf \"%-+ #0d\" 1 }}", null, "OK:+1"],
["{{ printf \"%.f\" 2.5 }}", null, "OK:2"],
["{{ printf \"%3.2.1d\" 1 }}", null, "OK:%!.(int= 01)1d"],
["{{ printf \"%d %s\" nilv nilv }}", null, "OK:%!d(<nil>) %!s(<nil>)"],
["{{ printf \"%v\" (list nilv) }}", null, "OK:[<nil>]"],
["{{ printf \"%d\" (list nilv) }}", null, "OK:[<nil>]"],
["{{ printf \"%#v\" (list nilv (bytes \"a\")) }}", null, "OK:[]interface {}{interface {}(nil), []uint8{0x61}}"],
["{{ printf \"%x\" (list (bytes \"a\")) }}", null, "OK:[61]"],
["{{ printf \"%6.2f|%-8v|%08v|%x\" -1.0 \"ab\" \"ab\" -1 }}", null, "OK: -1.00|ab      |000000ab|-1"],
["{{ printf \"%e %g %f\" 1e300 1e-300 1e-7 }}", null, "OK:1.000000e+300 1e-300 0.000000"],
["{{ printf \"%#x %#o\" 0 0 }}", null, "OK:0x0 0"],
["{{ printf \"%x\" \"\" }}", null, "OK:"],
["{{ printf \"%5x|\" \"\" }}", null, "OK:     |"],
["{{ printf \"%08.3d|%+08d|% 08d\" 5 5 5 }}", null, "OK:     005|+0000005| 0000005"],
["{{ printf \"%c|%5c|%-3c|\" 0x1F600 120 120 }}", null, "OK:😀|    x|x  |"],
["{{ printf \"%q %+q\" 0x1F600 0x1F600 }}", null, "OK:'😀' '\\U0001f600'"],
["{{ printf \"%q\" \"\\x00\\u00ad\\u200b\\U0001F600\" }}", null, "OK:\"\\x00\\u00ad\\u200b😀\""],
["{{ printf \"%v\" (list 1.5 1e6) }}", null, "OK:[1.5 1e+06]"],
["{{ printf \"%.1v\" \"abc\" }}", null, "OK:a"],
["{{ printf \"%10.4v|\" 3.14159 }}", null, "OK:     3.142|"],
["{{ printf \"%v\" (dict) }}", null, "OK:map[]"],
["{{ printf \"%v\" (list) }}", null, "OK:[]"],
["{{ printf \"%s\" (bytes \"\") }}", null, "OK:"],
["{{ printf \"%d %s\" (bytes \"\") (list) }}", null, "OK:[] []"],
["{{ printf \"%o %O %b\" -8 -8 -5 }}", null, "OK:-10 -0o10 -101"],
["{{ printf \"%x\" 9223372036854775807 }}", null, "OK:7fffffffffffffff"],
["{{ printf \"%d\" -9223372036854775808 }}", null, "OK:-9223372036854775808"],
["line1\n{{ .a }}\n  {{ .zz }}", null, "EXEC:template: t:3:5: executing \"t\" at <.zz>: map has no entry for key \"zz\""],
["a\n{{ .m.x.y }}", {"m": {"x": "y"}}, "EXEC:template: t:2:5: executing \"t\" at <.m.x.y>: can't evaluate field y in type interface {}"],
["{{ range .l }}\n {{ .a }}{{ end }}", {"l": [1]}, "EXEC:template: t:2:4: executing \"t\" at <.a>: can't evaluate field a in type interface {}"],
["{{ $x := 1 }}{{ range $x = 3 }}{{ end }}{{ $x }}", null, "OK:2"],
["{{ with $x := 1 }}{{ $x }}{{ end }}{{ with $x := 2 }}{{ $x }}{{ end }}", null, "OK:12"],
["{{ . | len }}", null, "OK:5"],
["{{ .a | len }}", null, "OK:1"],
["{{ list 1 2 | len }}", null, "OK:2"],
["{{ \"x\" | printf \"%s%s\" \"y\" }}", null, "OK:yx"],
["{{ index (dict \"k\" (list 1 2)) \"k\" 1 }}", null, "OK:2"],
["{{ template \"t\" }}", null, "EXEC:template: t:1:12: executing \"t\" at <{{template \"t\"}}>: exceeded maximum template depth (1000)"],
["{{define \"a\"}}A{{template \"b\" .}}{{end}}{{define \"b\"}}B{{.zz}}{{end}}{{template \"a\" .}}", null, "EXEC:template: t:1:57: executing \"b\" at <.zz>: map has no entry for key \"zz\""],
["{{ $ := 1 }}{{ $ }}", null, "OK:1"],
["{{ .a.b }}", {"a": {"b": "c"}}, "OK:c"],
["{{ range $k, $v := .m }}{{ $k }}:{{ $v }} {{ end }}", {"m": {"z": 1, "a": 2, "m": [3]}}, "OK:a:2 m:[3] z:1 "],
["{{ if and .a (eq .n \"3\") }}yes{{ end }}", null, "OK:yes"],
["{{ range $i, $c := slice .s 1 3 }}{{ $c }}{{ end }}", null, "EXEC:template: t:1:30: executing \"t\" at <3>: range can't iterate over a string"],
["{{ printf \"%s\" (index . \"k\") }}", null, "OK:a.b"],
["{{ (index . \"k\") }}", null, "OK:a.b"]
]"####;

    #[test]
    fn renders_as_go_does() {
        let cases: Vec<(String, serde_json::Value, String)> = serde_json::from_str(CASES).unwrap();
        let mut failures = Vec::new();
        for (text, data, want) in &cases {
            let data = if data.is_null() {
                eso_data()
            } else {
                from_json(data)
            };
            let got = render(text, &data);
            if &got != want {
                failures.push(format!("{text:?}\n   want {want:?}\n    got {got:?}"));
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {} differ:\n{}",
            failures.len(),
            cases.len(),
            failures.join("\n")
        );
    }
    #[test]
    fn numbers_parse_as_go_reads_them() {
        let out = render(
            "{{ 1.e5 }} {{ 0x_1F }} {{ 1E3 }} {{ '\\'' }} {{ -0x10 }} {{ 0X1P-2 }} {{ 1_0.2_5 }}",
            &eso_data(),
        );
        assert_eq!(out, "OK:100000 31 1000 39 -16 0.25 10.25");
    }

    #[test]
    fn parse_errors_carry_line_and_column() {
        let funcs = test_funcs();
        let err = Template::parse("t", "a\n{{ foo }}", &funcs).unwrap_err();
        assert_eq!(
            err.to_string(),
            "template: t:2:3: function \"foo\" not defined"
        );
        let err = Template::parse("t", "{{ if .a }}\n\n{{ else }}{{ else }}{{ end }}", &funcs)
            .unwrap_err();
        assert!(matches!(err, Error::Parse { line: 3, .. }), "{err:?}");
        let err = Template::parse("t", "x{{ .a }", &funcs).unwrap_err();
        assert_eq!(
            err.to_string(),
            "template: t:1:7: unexpected \"}\" in operand"
        );
    }

    #[test]
    fn output_is_bounded() {
        let funcs = test_funcs();
        let data = eso_data();
        let t = Template::parse("t", "{{ range 100 }}0123456789{{ end }}", &funcs).unwrap();
        assert_eq!(t.execute(&data, 1000).unwrap().len(), 1000);
        assert_eq!(
            t.execute(&data, 999).unwrap_err(),
            Error::TooLarge {
                name: "t".into(),
                limit: 999
            }
        );
        // A width applied to each element must not build the whole string first.
        let t = Template::parse(
            "t",
            "{{ printf \"%999999d\" (list 1 2 3 4 5 6 7 8 9) | len }}",
            &funcs,
        )
        .unwrap();
        assert!(matches!(
            t.execute(&data, 1 << 20),
            Err(Error::TooLarge { .. })
        ));
        let t = Template::parse(
            "t",
            "{{ printf \"%99999d\" (list 1 2 3 4 5 6 7 8 9) | len }}",
            &funcs,
        )
        .unwrap();
        assert_eq!(t.execute(&data, 1 << 20).unwrap(), "900001");
    }

    #[test]
    fn nesting_is_bounded_and_never_overflows_the_stack() {
        let funcs = test_funcs();
        let parens = |n| format!("{{{{ {}1{} }}}}", "(".repeat(n), ")".repeat(n));
        assert_eq!(render(&parens(100), &eso_data()), "OK:1");
        let err = Template::parse("t", &parens(101), &funcs).unwrap_err();
        assert!(
            err.to_string().ends_with("max expression depth exceeded"),
            "{err}"
        );
        let ifs = format!("{}x{}", "{{ if 1 }}".repeat(5000), "{{ end }}".repeat(5000));
        let err = Template::parse("t", &ifs, &funcs).unwrap_err();
        assert!(
            err.to_string().ends_with("max expression depth exceeded"),
            "{err}"
        );
        let ifs = format!("{}x{}", "{{ if 1 }}".repeat(100), "{{ end }}".repeat(100));
        assert_eq!(render(&ifs, &eso_data()), "OK:x");
    }

    #[test]
    fn endless_loops_are_refused() {
        let out = render("{{ range 9223372036854775807 }}{{ end }}", &eso_data());
        assert!(
            out.ends_with("template exceeded its budget of 10000000 steps"),
            "{out}"
        );
    }

    #[test]
    fn deep_template_recursion_fits_a_small_stack() {
        // An async runtime's worker thread has a small stack; recursion must still end in
        // Go's error rather than a crash.
        let worker = std::thread::Builder::new().stack_size(256 * 1024);
        let out = worker
            .spawn(|| {
                render(
                    "{{ define \"r\" }}{{ template \"r\" . }}{{ end }}{{ template \"r\" . }}",
                    &eso_data(),
                )
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(
            out.ends_with("exceeded maximum template depth (1000)"),
            "{out}"
        );
    }

    #[test]
    fn error_messages_name_no_values() {
        let out = render("{{ range .a }}{{ end }}", &eso_data());
        assert!(!out.contains(": range can't iterate over x"), "{out}");
        let data = from_json(&serde_json::json!({"l": ["secret"], "m": {"k": "secret"}}));
        for text in [
            "{{ eq .l .l }}",
            "{{ eq .l .m }}",
            "{{ range .l.x }}{{ end }}",
        ] {
            let out = render(text, &data);
            assert!(out.starts_with("EXEC:") && !out.contains("secret"), "{out}");
        }
    }
}
