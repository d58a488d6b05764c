//! `fromYaml`'s reading: the first YAML document, scalars resolved as yaml.v2 does, `<<`
//! merges and aliases applied, then the JSON round trip sigs.k8s.io/yaml makes (keys become
//! strings, numbers float64, the top level must be a mapping).

use std::collections::BTreeMap;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use super::resolve::{Scalar, resolve};
use crate::gofmt::format_shortest as go_float;
use crate::value::Value;

/// A YAML node before conversion.
#[derive(Debug, Clone)]
enum Node {
    Scalar {
        text: String,
        plain: bool,
        tag: Option<String>,
    },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

#[derive(Default)]
struct Events(Vec<(Event, Marker)>);

impl MarkedEventReceiver for Events {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        self.0.push((ev, mark));
    }
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

/// Builds the tree of the first document from the parser's events.
struct Builder {
    events: std::vec::IntoIter<(Event, Marker)>,
    anchors: BTreeMap<usize, Node>,
}

impl Builder {
    fn anchor(&mut self, id: usize, node: Node) -> Node {
        if id > 0 {
            self.anchors.insert(id, node.clone());
        }
        node
    }

    fn node(&mut self, event: Event) -> Result<Node, String> {
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
                .cloned()
                .ok_or_else(|| "yaml: unknown anchor referenced".to_owned()),
            Event::SequenceStart(id, _) => {
                let mut items = Vec::new();
                loop {
                    match self.next()? {
                        Event::SequenceEnd => break,
                        e => items.push(self.node(e)?),
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
                            let key = self.node(e)?;
                            let value = self.next().and_then(|e| self.node(e))?;
                            entries.push((key, value));
                        }
                    }
                }
                Ok(self.anchor(id, Node::Map(entries)))
            }
            _ => Err("yaml: unexpected event".to_owned()),
        }
    }

    fn next(&mut self) -> Result<Event, String> {
        self.events
            .next()
            .map(|(e, _)| e)
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
    matches!(key, Node::Scalar { text, plain: true, tag: None } if text == "<<")
        || matches!(key, Node::Scalar { text, tag: Some(t), .. } if text == "<<" && t == "!!merge")
}

/// sigs.k8s.io/yaml's key conversion: strings as they are, ints and bools printed, floats
/// with float32 precision; anything else is refused.
fn key_string(key: &Node) -> Result<String, String> {
    let Node::Scalar { text, plain, tag } = key else {
        return Err("yaml: invalid map key".to_owned());
    };
    match decode_scalar(text, *plain, tag.as_deref()) {
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

/// A mapping's entries into `out`, merges first where they stand, later keys winning.
fn fill_map(entries: &[(Node, Node)], out: &mut BTreeMap<String, Value>) -> Result<(), String> {
    for (key, value) in entries {
        if is_merge_key(key) {
            match value {
                Node::Map(sub) => fill_map(sub, out)?,
                Node::Seq(items) => {
                    for item in items.iter().rev() {
                        let Node::Map(sub) = item else {
                            return Err(
                                "yaml: map merge requires map or sequence of maps as the value"
                                    .to_owned(),
                            );
                        };
                        fill_map(sub, out)?;
                    }
                }
                _ => {
                    return Err(
                        "yaml: map merge requires map or sequence of maps as the value".to_owned(),
                    );
                }
            }
            continue;
        }
        out.insert(key_string(key)?, to_value(value)?);
    }
    Ok(())
}

fn to_value(node: &Node) -> Result<Value, String> {
    Ok(match node {
        Node::Scalar { text, plain, tag } => match decode_scalar(text, *plain, tag.as_deref()) {
            Decoded::Null => Value::Nil,
            Decoded::Bool(b) => Value::Bool(b),
            Decoded::Int(i) => Value::Float(i as f64),
            Decoded::Float(f) if !f.is_finite() => return Err(unsupported_float(f)),
            Decoded::Float(f) => Value::Float(f),
            Decoded::Str(s) => Value::String(s),
        },
        Node::Seq(items) => Value::List(items.iter().map(to_value).collect::<Result<_, _>>()?),
        Node::Map(entries) => {
            let mut map = BTreeMap::new();
            fill_map(entries, &mut map)?;
            Value::Map(map)
        }
    })
}

fn first_document(input: &str) -> Result<Option<Node>, String> {
    let mut events = Events::default();
    let mut parser = Parser::new_from_str(input);
    parser.load(&mut events, false).map_err(|e| {
        format!(
            "error converting YAML to JSON: yaml: line {}: {}",
            e.marker().line(),
            e.info()
        )
    })?;
    let mut builder = Builder {
        events: events.0.into_iter(),
        anchors: BTreeMap::new(),
    };
    loop {
        match builder.events.next() {
            None | Some((Event::StreamEnd, _)) => return Ok(None),
            Some((Event::StreamStart | Event::DocumentStart | Event::Nothing, _)) => {}
            Some((e, _)) => {
                return builder
                    .node(e)
                    .map(Some)
                    .map_err(|m| format!("error converting YAML to JSON: {m}"));
            }
        }
    }
}

/// The top-level mapping of `input`, or the message Go would put under `Error`.
pub fn parse(input: &str) -> Result<BTreeMap<String, Value>, String> {
    let Some(root) = first_document(input)? else {
        return Ok(BTreeMap::new());
    };
    let value = to_value(&root).map_err(|m| format!("error converting YAML to JSON: {m}"))?;
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
