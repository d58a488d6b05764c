//! Templates rendered into any object, for generic targets (`spec.target.manifest`), where a
//! `templateFrom` target may be a path such as `spec.database` or `spec.rules[0].from`, as ESO
//! does it: `template.data` lands in the object's `data`; a `KeysAndValues` result is merged
//! into the map at its path (or replaces a top-level field); a value put at a path is read as
//! YAML, so `5432` becomes a number.

use std::collections::BTreeMap;

use api::external_secret::{DecodingStrategy, Template, TemplateScope};
use serde_json::{Map, Value};

use super::{Renderer, Sources, TemplateError};

/// ESO's bound on an index in a path, which would otherwise let a path allocate at will.
const MAX_INDEX: usize = 10_000;

/// Renders `template` over `fetched` into `object`.
pub fn render_into(
    base: &str,
    template: &Template,
    fetched: &BTreeMap<String, Vec<u8>>,
    sources: &Sources,
    object: &mut Value,
) -> Result<(), TemplateError> {
    let mut renderer = Renderer::new(fetched);
    for (i, from) in template
        .template_from
        .as_deref()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let field = format!("{base}.templateFrom[{i}]");
        let target = from.target.as_deref().unwrap_or("Data");
        let target_field = format!("{field}.target");
        let decoding = from.values_decoding_strategy;
        if let Some(literal) = &from.literal {
            let rendered = renderer.render(&format!("{field}.literal"), literal, literal)?;
            put_keys_and_values(object, target, &rendered, decoding)
                .map_err(|m| failed(&target_field, m))?;
        }
        let named = [
            from.config_map.as_ref().map(|r| {
                let object = sources.config_maps.get(&r.name).map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
                        .collect()
                });
                ("configMap", "configmap", r, object)
            }),
            from.secret.as_ref().map(|r| {
                let object = sources.secrets.get(&r.name).cloned();
                ("secret", "secret", r, object)
            }),
        ];
        for (name, what, reference, source) in named.into_iter().flatten() {
            let field = format!("{field}.{name}");
            let source: BTreeMap<String, Vec<u8>> = source.ok_or_else(|| {
                failed(
                    &format!("{field}.name"),
                    format!("{what} {:?} not found", reference.name),
                )
            })?;
            for (j, item) in reference.items.iter().enumerate() {
                let item_field = format!("{field}.items[{j}]");
                let text = source
                    .get(&item.key)
                    .and_then(|t| String::from_utf8(t.clone()).ok())
                    .ok_or_else(|| {
                        failed(
                            &format!("{item_field}.key"),
                            format!(
                                "{what} {} has no UTF-8 template under key {}",
                                reference.name, item.key
                            ),
                        )
                    })?;
                let rendered = renderer.render(&item_field, &item.key, &text)?;
                let put = match item.template_as.unwrap_or_default() {
                    TemplateScope::Values => {
                        put_value(object, target, &item.key, rendered, decoding)
                    }
                    TemplateScope::KeysAndValues => {
                        put_keys_and_values(object, target, &rendered, decoding)
                    }
                };
                put.map_err(|m| failed(&target_field, m))?;
            }
        }
    }
    for (key, text) in template.data.iter().flatten() {
        let field = format!("{base}.data[{key}]");
        let rendered = renderer.render(&field, key, text)?;
        put_value(object, "Data", key, rendered, None).map_err(|m| failed(&field, m))?;
    }
    Ok(())
}

fn failed(field: &str, message: String) -> TemplateError {
    TemplateError {
        field: field.to_owned(),
        message,
    }
}

fn decode(value: Vec<u8>, decoding: Option<DecodingStrategy>) -> Result<Vec<u8>, String> {
    crate::keys::decode(value, decoding.into())
}

fn text(value: Vec<u8>) -> String {
    String::from_utf8(value).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// One rendered value under `key`: a key of the object's labels, annotations, `data` or `spec`;
/// for any other target the whole path is set to the value (read as YAML), as ESO does.
fn put_value(
    object: &mut Value,
    target: &str,
    key: &str,
    value: Vec<u8>,
    decoding: Option<DecodingStrategy>,
) -> Result<(), String> {
    let value = text(decode(value, decoding)?);
    let map = match target.to_ascii_lowercase().as_str() {
        "annotations" => map_at(object, &["metadata", "annotations"])?,
        "labels" => map_at(object, &["metadata", "labels"])?,
        "data" => map_at(object, &["data"])?,
        "spec" => map_at(object, &["spec"])?,
        _ => {
            let parsed = yaml_value(&value).unwrap_or(Value::String(value));
            return set_at_path(object, &parse_path(target)?, move |_| parsed);
        }
    };
    map.insert(key.to_owned(), Value::String(value));
    Ok(())
}

/// The map at `path`, created on the way.
fn map_at<'a>(object: &'a mut Value, path: &[&str]) -> Result<&'a mut Map<String, Value>, String> {
    let mut node = object;
    for step in path {
        node = as_map(node, step)?
            .entry(step.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    as_map(node, path.last().copied().unwrap_or_default())
}

/// A rendered YAML map: each entry put under its key for labels, annotations and `data`;
/// otherwise the whole structure goes to the path, merged into a map already there (a single
/// top-level field such as `spec` is replaced, as in ESO).
fn put_keys_and_values(
    object: &mut Value,
    target: &str,
    rendered: &[u8],
    decoding: Option<DecodingStrategy>,
) -> Result<(), String> {
    if matches!(
        target.to_ascii_lowercase().as_str(),
        "annotations" | "labels" | "data"
    ) {
        let map: BTreeMap<String, String> = if rendered.iter().all(u8::is_ascii_whitespace) {
            BTreeMap::new()
        } else {
            serde_yaml::from_slice(rendered).map_err(|e| yaml_error("map[string]string", &e))?
        };
        for (key, value) in map {
            put_value(object, target, &key, value.into_bytes(), decoding)?;
        }
        return Ok(());
    }
    let parsed: Value = serde_yaml::from_slice(rendered).map_err(|e| yaml_error("YAML", &e))?;
    let path = parse_path(target)?;
    if let [Step::Key(_)] = path.as_slice() {
        return set_at_path(object, &path, move |_| parsed);
    }
    set_at_path(object, &path, move |existing| match (existing, parsed) {
        (Some(Value::Object(mut have)), Value::Object(new)) => {
            have.extend(new);
            Value::Object(have)
        }
        (_, parsed) => parsed,
    })
}

/// The YAML error's position only: its snippet would be rendered secret data.
fn yaml_error(what: &str, e: &serde_yaml::Error) -> String {
    format!(
        "could not unmarshal the rendered template into {what}{}",
        e.location()
            .map(|l| format!(" (line {}, column {})", l.line(), l.column()))
            .unwrap_or_default()
    )
}

fn yaml_value(text: &str) -> Option<Value> {
    serde_yaml::from_str(text).ok()
}

fn as_map<'a>(node: &'a mut Value, at: &str) -> Result<&'a mut Map<String, Value>, String> {
    if node.is_null() {
        *node = Value::Object(Map::new());
    }
    node.as_object_mut()
        .ok_or_else(|| format!("expected a map at {at:?}"))
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// `spec.rules[0].from[0].source` into its keys and indexes.
fn parse_path(path: &str) -> Result<Vec<Step>, String> {
    let bad = |why: &str| format!("invalid path {path:?}: {why}");
    let mut steps = Vec::new();
    for segment in path.split('.') {
        let (name, mut rest) = segment.split_at(segment.find('[').unwrap_or(segment.len()));
        if name.is_empty() && rest.is_empty() {
            return Err(bad("empty segment"));
        }
        if !name.is_empty() {
            steps.push(Step::Key(name.to_owned()));
        }
        while !rest.is_empty() {
            let inner = rest
                .strip_prefix('[')
                .ok_or_else(|| bad(&format!("expected '[' near {rest:?}")))?;
            let (index, after) = inner
                .split_once(']')
                .ok_or_else(|| bad("unterminated '['"))?;
            let index: usize = index
                .parse()
                .map_err(|_| bad(&format!("bad index {index:?}")))?;
            if index > MAX_INDEX {
                return Err(bad(&format!("index {index} exceeds {MAX_INDEX}")));
            }
            steps.push(Step::Index(index));
            rest = after;
        }
    }
    match steps.first() {
        Some(Step::Key(_)) => Ok(steps),
        _ => Err(bad("a path starts with a key")),
    }
}

/// Walks `path`, creating maps and growing lists on the way, and sets the last step to
/// `leaf(what was there)`.
fn set_at_path(
    node: &mut Value,
    path: &[Step],
    leaf: impl FnOnce(Option<Value>) -> Value,
) -> Result<(), String> {
    let (step, rest) = path.split_first().expect("a parsed path has a step");
    let slot: &mut Value = match step {
        Step::Key(key) => as_map(node, key)?.entry(key.clone()).or_insert(Value::Null),
        Step::Index(index) => {
            if node.is_null() {
                *node = Value::Array(Vec::new());
            }
            let list = node
                .as_array_mut()
                .ok_or_else(|| format!("expected a list at index {index}"))?;
            if list.len() <= *index {
                list.resize(index + 1, Value::Null);
            }
            &mut list[*index]
        }
    };
    if rest.is_empty() {
        let existing = (!slot.is_null()).then(|| slot.take());
        *slot = leaf(existing);
        Ok(())
    } else {
        set_at_path(slot, rest, leaf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(yaml: &str) -> Template {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn fetched() -> BTreeMap<String, Vec<u8>> {
        [
            ("dbHost", "db.internal"),
            ("dbPort", "5432"),
            ("dbUser", "app"),
            ("dbPassword", "s3cret"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.as_bytes().to_vec()))
        .collect()
    }

    #[test]
    fn literal_at_nested_paths_merges_as_eso() {
        // ESO's documented "advanced path" example.
        let t = template(
            "templateFrom:\n- literal: |\n    host: {{ .dbHost }}\n    port: {{ .dbPort }}\n    credentials:\n      username: {{ .dbUser }}\n      password: {{ .dbPassword }}\n  target: spec.database\n- literal: |\n    level: info\n    format: json\n  target: spec.logging\n",
        );
        let mut object = json!({"spec": {"database": {"pool": 5}, "other": true}});
        render_into("t", &t, &fetched(), &Sources::default(), &mut object).unwrap();
        assert_eq!(
            object,
            json!({"spec": {
                "database": {"pool": 5, "host": "db.internal", "port": 5432,
                             "credentials": {"username": "app", "password": "s3cret"}},
                "logging": {"level": "info", "format": "json"},
                "other": true,
            }})
        );
    }

    #[test]
    fn data_labels_and_top_level_fields() {
        let t = template(
            "data:\n  url: 'postgres://{{ .dbHost }}:{{ .dbPort }}'\ntemplateFrom:\n- literal: 'team: {{ .dbUser }}'\n  target: Labels\n- literal: 'replicas: 2'\n  target: spec\n",
        );
        let mut object = json!({"spec": {"old": 1}, "data": {}});
        render_into("t", &t, &fetched(), &Sources::default(), &mut object).unwrap();
        assert_eq!(
            object,
            json!({
                "metadata": {"labels": {"team": "app"}},
                "spec": {"replicas": 2},
                "data": {"url": "postgres://db.internal:5432"},
            })
        );
    }

    #[test]
    fn list_indexes_grow_and_keep_siblings() {
        let mut object = json!({"spec": {"rules": [{"from": [{"source": {"keep": 1}}]}]}});
        let t = template(
            "templateFrom:\n- literal: |\n    - 10.0.0.0/8\n  target: spec.rules[0].from[0].source.notRemoteIpBlocks\n- literal: 'x: 1'\n  target: spec.rules[2].to\n",
        );
        render_into("t", &t, &fetched(), &Sources::default(), &mut object).unwrap();
        assert_eq!(
            object,
            json!({"spec": {"rules": [
                {"from": [{"source": {"keep": 1, "notRemoteIpBlocks": ["10.0.0.0/8"]}}]},
                null,
                {"to": {"x": 1}},
            ]}})
        );
    }

    #[test]
    fn bad_paths_are_named() {
        for (path, why) in [
            ("[0].spec", "starts with a key"),
            ("spec..a", "empty segment"),
            ("spec[x]", "bad index"),
            ("spec[1", "unterminated"),
            ("spec[10001]", "exceeds"),
        ] {
            let t = template(&format!(
                "templateFrom:\n- literal: 'a: b'\n  target: '{path}'\n"
            ));
            let e =
                render_into("t", &t, &fetched(), &Sources::default(), &mut json!({})).unwrap_err();
            assert_eq!(e.field, "t.templateFrom[0].target");
            assert!(e.message.contains(why), "{path}: {}", e.message);
        }
        let t = template("templateFrom:\n- literal: 'a: b'\n  target: spec.x.y\n");
        let e = render_into(
            "t",
            &t,
            &fetched(),
            &Sources::default(),
            &mut json!({"spec": {"x": 3}}),
        )
        .unwrap_err();
        assert!(e.message.contains("expected a map"), "{}", e.message);
    }

    #[test]
    fn template_sources_render_into_the_target() {
        let t = template(
            "templateFrom:\n- configMap:\n    name: tpl\n    items:\n    - key: conf\n    - key: more\n      templateAs: KeysAndValues\n",
        );
        let sources = Sources {
            config_maps: BTreeMap::from([(
                "tpl".to_owned(),
                BTreeMap::from([
                    ("conf".to_owned(), "host={{ .dbHost }}".to_owned()),
                    ("more".to_owned(), "user: {{ .dbUser }}".to_owned()),
                ]),
            )]),
            ..Sources::default()
        };
        let mut object = json!({"data": {}});
        render_into("t", &t, &fetched(), &sources, &mut object).unwrap();
        assert_eq!(
            object,
            json!({"data": {"conf": "host=db.internal", "user": "app"}})
        );
    }
}
