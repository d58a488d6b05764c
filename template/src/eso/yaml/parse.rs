//! `fromYaml`'s reading: the first YAML document, scalars resolved as yaml.v2 does, `<<`
//! merges and aliases applied, then the JSON round trip sigs.k8s.io/yaml makes (keys become
//! strings, numbers float64, the top level must be a mapping).

use std::collections::BTreeMap;
use std::rc::Rc;

use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::TScalarStyle;

use super::resolve::{Scalar, resolve};
use crate::gofmt::format_shortest as go_float;
use crate::stack::with_stack;
use crate::value::{MAX_NESTING, Value};

/// A YAML node before conversion. An anchored node is shared with its aliases rather than
/// copied into them, so that a document of nested aliases costs its own size to read; what the
/// aliases expand to is counted when the tree is converted (see [`Decoder`]).
#[derive(Debug)]
enum Node {
    Scalar {
        text: String,
        plain: bool,
        tag: Option<String>,
    },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
    /// `&name NODE` where it stands.
    Anchored(Rc<Node>),
    /// `*name`.
    Alias(Rc<Node>),
}

fn tag_name(tag: Option<Tag>) -> Option<String> {
    tag.map(|t| {
        if t.handle == "!!" || t.handle == "tag:yaml.org,2002:" {
            format!("!!{}", t.suffix)
        } else {
            format!("{}{}", t.handle, t.suffix)
        }
    })
}

fn too_deep() -> String {
    format!("yaml: exceeded max depth of {MAX_NESTING}")
}

/// How deep flow collections (`[...]`, `{...}`) may nest. Go's YAML readers (yaml.v2 under
/// sigs.k8s.io/yaml, and yaml.v3) allow 10000 levels of either style; values here stop at
/// [`MAX_NESTING`] (they are dropped and printed recursively on a worker's stack), and
/// yaml-rust2's scanner counts flow levels in a `u8`, failing the 256th with "recursion limit
/// exceeded". Matching Go up to `MAX_NESTING` would take another YAML reader; no real document
/// nests flow collections 256 deep, so the limit stays and its error says what it is.
const FLOW_NESTING: usize = u8::MAX as usize;

/// The scanner's words when [`FLOW_NESTING`] is passed.
const FLOW_LIMIT_MESSAGE: &str = "recursion limit exceeded";

/// Builds the tree of the first document from the parser's events, pulled one at a time:
/// the parser's own loader recurses once per level of nesting, with no limit.
struct Builder<'a> {
    parser: Parser<std::str::Chars<'a>>,
    anchors: BTreeMap<usize, Rc<Node>>,
}

impl Builder<'_> {
    fn anchor(&mut self, id: usize, node: Node) -> Node {
        if id == 0 {
            return node;
        }
        let shared = Rc::new(node);
        self.anchors.insert(id, Rc::clone(&shared));
        Node::Anchored(shared)
    }

    /// The node `event` starts, `depth` collections deep.
    fn node(&mut self, event: Event, depth: usize) -> Result<Node, String> {
        if matches!(event, Event::SequenceStart(..) | Event::MappingStart(..))
            && depth >= MAX_NESTING
        {
            return Err(too_deep());
        }
        match event {
            Event::Scalar(text, style, id, tag) => {
                let node = Node::Scalar {
                    text,
                    plain: style == TScalarStyle::Plain,
                    tag: tag_name(tag),
                };
                Ok(self.anchor(id, node))
            }
            Event::Alias(id) => self
                .anchors
                .get(&id)
                .map(|node| Node::Alias(Rc::clone(node)))
                .ok_or_else(|| "yaml: unknown anchor referenced".to_owned()),
            Event::SequenceStart(id, _) => {
                let mut items = Vec::new();
                loop {
                    match self.next()? {
                        Event::SequenceEnd => break,
                        e => items.push(with_stack(|| self.node(e, depth + 1))?),
                    }
                }
                Ok(self.anchor(id, Node::Seq(items)))
            }
            Event::MappingStart(id, _) => {
                let mut entries = Vec::new();
                loop {
                    match self.next()? {
                        Event::MappingEnd => break,
                        e => {
                            let key = with_stack(|| self.node(e, depth + 1))?;
                            let e = self.next()?;
                            let value = with_stack(|| self.node(e, depth + 1))?;
                            entries.push((key, value));
                        }
                    }
                }
                Ok(self.anchor(id, Node::Map(entries)))
            }
            _ => Err("yaml: unexpected event".to_owned()),
        }
    }

    /// The next event, `None` at the end of the stream.
    fn event(&mut self) -> Result<Option<Event>, String> {
        match self.parser.next_token() {
            Ok((Event::StreamEnd, _)) => Ok(None),
            Ok((event, _)) => Ok(Some(event)),
            Err(e) if e.info() == FLOW_LIMIT_MESSAGE => Err(format!(
                "yaml: line {}: exceeded max depth of {FLOW_NESTING} in flow style ([...] and {{...}}); block style nests up to {MAX_NESTING}",
                e.marker().line()
            )),
            Err(e) => Err(format!("yaml: line {}: {}", e.marker().line(), e.info())),
        }
    }

    fn next(&mut self) -> Result<Event, String> {
        self.event()?
            .ok_or_else(|| "yaml: unexpected end of input".to_owned())
    }
}

/// A decoded scalar, as yaml.v2 hands it to an `interface{}`.
enum Decoded {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
}

fn decode_scalar(text: &str, plain: bool, tag: Option<&str>) -> Decoded {
    let resolved = match tag {
        Some("!!str" | "!!binary") => Scalar::Str,
        _ if plain || matches!(tag, Some("!!int" | "!!float" | "!!bool" | "!!null")) => {
            resolve(text)
        }
        _ => Scalar::Str,
    };
    match resolved {
        Scalar::Null => Decoded::Null,
        Scalar::Bool(b) => Decoded::Bool(b),
        Scalar::Int(i) if tag == Some("!!float") => Decoded::Float(i as f64),
        Scalar::Int(i) => Decoded::Int(i),
        Scalar::Float(f) => Decoded::Float(f),
        Scalar::Timestamp | Scalar::Str => Decoded::Str(text.to_owned()),
    }
}

fn is_merge_key(key: &Node) -> bool {
    match key {
        Node::Anchored(node) => is_merge_key(node),
        Node::Scalar { text, tag, .. } if text == "<<" => match tag {
            None => matches!(key, Node::Scalar { plain: true, .. }),
            Some(t) => t == "!!merge",
        },
        _ => false,
    }
}

/// sigs.k8s.io/yaml's key conversion: strings as they are, ints and bools printed, floats
/// with float32 precision; anything else is refused.
fn key_string(text: &str, plain: bool, tag: Option<&str>) -> Result<String, String> {
    match decode_scalar(text, plain, tag) {
        Decoded::Str(s) => Ok(s),
        Decoded::Bool(b) => Ok(b.to_string()),
        Decoded::Int(i) if i64::try_from(i).is_ok() => Ok(i.to_string()),
        Decoded::Int(_) => Err("unsupported map key of type: uint64".to_owned()),
        Decoded::Float(f) => Ok(match go_float(f, true).as_str() {
            "+Inf" => ".inf".to_owned(),
            "-Inf" => "-.inf".to_owned(),
            "NaN" => ".nan".to_owned(),
            s => s.to_owned(),
        }),
        Decoded::Null => Err("unsupported map key of type: <nil>".to_owned()),
    }
}

fn unsupported_float(f: f64) -> String {
    format!("json: unsupported value: {}", go_float(f, false))
}

const MERGE_NEEDS_MAPS: &str = "yaml: map merge requires map or sequence of maps as the value";

/// Converts the tree to values, expanding aliases, under yaml.v2's rule against documents
/// that are mostly aliases of aliases ("billion laughs"): every node converted is counted, and
/// so is every node reached through an alias; once past 1000 nodes and 100 of them aliased,
/// the aliased share may not exceed 99 % while the document stays under 400 000 nodes, a
/// share that falls evenly to 10 % at 4 000 000. A real document, even one built on anchors,
/// stays far below; a bomb crosses the line within its first few thousand nodes.
#[derive(Default)]
struct Decoder {
    decoded: u64,
    aliased: u64,
    /// How many aliases the node being converted is reached through.
    alias_depth: usize,
    /// How many lists and maps hold it, aliases expanded.
    depth: usize,
}

impl Decoder {
    fn count(&mut self) -> Result<(), String> {
        const SMALL: f64 = 400_000.0;
        const LARGE: f64 = 4_000_000.0;
        self.decoded += 1;
        if self.alias_depth > 0 {
            self.aliased += 1;
        }
        if self.aliased <= 100 || self.decoded <= 1000 {
            return Ok(());
        }
        let decoded = self.decoded as f64;
        let allowed = if decoded <= SMALL {
            0.99
        } else if decoded >= LARGE {
            0.10
        } else {
            0.99 - 0.89 * (decoded - SMALL) / (LARGE - SMALL)
        };
        if self.aliased as f64 / decoded > allowed {
            return Err("yaml: document contains excessive aliasing".to_owned());
        }
        Ok(())
    }

    fn value(&mut self, node: &Node) -> Result<Value, String> {
        // An anchor names a node and is none of its own; everything else counts.
        if !matches!(node, Node::Anchored(_)) {
            self.count()?;
        }
        match node {
            Node::Anchored(node) => self.value(node),
            Node::Alias(target) => {
                self.alias_depth += 1;
                let value = self.value(target);
                self.alias_depth -= 1;
                value
            }
            Node::Scalar { text, plain, tag } => {
                Ok(match decode_scalar(text, *plain, tag.as_deref()) {
                    Decoded::Null => Value::Nil,
                    Decoded::Bool(b) => Value::Bool(b),
                    Decoded::Int(i) => Value::Float(i as f64),
                    Decoded::Float(f) if !f.is_finite() => return Err(unsupported_float(f)),
                    Decoded::Float(f) => Value::Float(f),
                    Decoded::Str(s) => Value::String(s),
                })
            }
            Node::Seq(items) => self.nested(|d| {
                let values = items.iter().map(|item| d.value(item));
                Ok(Value::List(values.collect::<Result<_, _>>()?))
            }),
            Node::Map(entries) => self.nested(|d| {
                let mut map = BTreeMap::new();
                d.fill_map(entries, &mut map)?;
                Ok(Value::Map(map))
            }),
        }
    }

    /// Converts a list's or a map's content one level deeper.
    fn nested(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<Value, String>,
    ) -> Result<Value, String> {
        if self.depth >= MAX_NESTING {
            return Err(too_deep());
        }
        self.depth += 1;
        let value = with_stack(|| f(self));
        self.depth -= 1;
        value
    }

    /// A mapping's entries into `out`, merges first where they stand, later keys winning.
    fn fill_map(
        &mut self,
        entries: &[(Node, Node)],
        out: &mut BTreeMap<String, Value>,
    ) -> Result<(), String> {
        for (key, value) in entries {
            if is_merge_key(key) {
                match self.value(value)? {
                    Value::Map(sub) => out.extend(sub),
                    Value::List(items) => {
                        for item in items.into_iter().rev() {
                            let Value::Map(sub) = item else {
                                return Err(MERGE_NEEDS_MAPS.to_owned());
                            };
                            out.extend(sub);
                        }
                    }
                    _ => return Err(MERGE_NEEDS_MAPS.to_owned()),
                }
                continue;
            }
            let key = self.key(key)?;
            out.insert(key, self.value(value)?);
        }
        Ok(())
    }

    fn key(&mut self, key: &Node) -> Result<String, String> {
        match key {
            Node::Anchored(node) => self.key(node),
            Node::Alias(target) => {
                self.count()?;
                self.alias_depth += 1;
                let key = self.key(target);
                self.alias_depth -= 1;
                key
            }
            Node::Scalar { text, plain, tag } => {
                self.count()?;
                key_string(text, *plain, tag.as_deref())
            }
            Node::Seq(_) | Node::Map(_) => Err("yaml: invalid map key".to_owned()),
        }
    }
}

fn first_document(input: &str) -> Result<Option<Node>, String> {
    let mut builder = Builder {
        parser: Parser::new_from_str(input),
        anchors: BTreeMap::new(),
    };
    let root = loop {
        match builder.event()? {
            None => return Ok(None),
            Some(Event::StreamStart | Event::DocumentStart | Event::Nothing) => {}
            Some(event) => break builder.node(event, 0)?,
        }
    };
    // Go reads the document to its end: text after the root that is no YAML is an error.
    builder.event()?;
    Ok(Some(root))
}

/// The top-level mapping of `input`, or the message Go would put under `Error`.
pub fn parse(input: &str) -> Result<BTreeMap<String, Value>, String> {
    let root = first_document(input).map_err(|m| format!("error converting YAML to JSON: {m}"))?;
    let Some(root) = root else {
        return Ok(BTreeMap::new());
    };
    let value = Decoder::default()
        .value(&root)
        .map_err(|m| format!("error converting YAML to JSON: {m}"))?;
    let kind = match value {
        Value::Map(map) => return Ok(map),
        Value::Nil => return Ok(BTreeMap::new()),
        Value::Bool(_) => "bool",
        Value::Float(_) => "number",
        Value::String(_) => "string",
        _ => "array",
    };
    Err(format!(
        "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}"
    ))
}
