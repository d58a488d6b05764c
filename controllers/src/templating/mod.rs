//! Pure: fetched data, a `template` and the template sources it names → the data, labels,
//! annotations and type of the Secret to write, in ESO's order of precedence (`template.data`
//! over `templateFrom` over fetched data). Shared by ExternalSecret (`spec.target.template`) and
//! PushSecret (`spec.template`). Nothing here but `read` talks to the API server: the sources
//! are read first and passed in.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use api::external_secret::{
    DecodingStrategy, Template, TemplateFrom, TemplateMergePolicy, TemplateRef, TemplateScope,
};
use external_secrets_template::{Budget, Funcs, Template as Engine, Value};

pub mod object;
mod read;
pub use read::{SourceError, read_sources};

/// ESO's function set, built once: the table is read-only.
static FUNCS: LazyLock<Funcs> = LazyLock::new(Funcs::eso);

/// A Secret may hold at most 1 MiB; a template that would write more is refused while it renders.
pub const SECRET_SIZE_LIMIT: usize = 1024 * 1024;

/// Renders at once: a template may spend its whole budget (seconds of key generation), so
/// renders run on blocking threads, never on the async workers that also answer probes, the
/// conversion webhook and the lease renewal, and only as many at once as there are cores.
static RENDERS: LazyLock<tokio::sync::Semaphore> = LazyLock::new(|| {
    tokio::sync::Semaphore::new(std::thread::available_parallelism().map_or(2, usize::from))
});

/// Runs `render` (a [`shape`] or any other use of templates) off the async workers, waiting
/// for a free slot first; without a template (`templated` false) it is a copy of the fetched
/// data, not worth a thread hop.
pub async fn off_async<T: Send + 'static>(
    templated: bool,
    render: impl FnOnce() -> T + Send + 'static,
) -> T {
    if !templated {
        return render();
    }
    let _slot = RENDERS
        .acquire()
        .await
        .expect("the render slots are never closed");
    match tokio::task::spawn_blocking(render).await {
        Ok(rendered) => rendered,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// The ConfigMaps and Secrets a template's `templateFrom` names, by name, as read from the
/// ExternalSecret's own namespace. A missing object is simply absent here.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    pub config_maps: BTreeMap<String, BTreeMap<String, String>>,
    pub secrets: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
}

/// The named sources of a template, to be read before [`shape`].
pub fn source_names(template: Option<&Template>) -> (Vec<String>, Vec<String>) {
    let mut config_maps = Vec::new();
    let mut secrets = Vec::new();
    for from in template
        .and_then(|t| t.template_from.as_deref())
        .unwrap_or_default()
    {
        if let Some(r) = &from.config_map {
            config_maps.push(r.name.clone());
        }
        if let Some(r) = &from.secret {
            secrets.push(r.name.clone());
        }
    }
    config_maps.sort();
    config_maps.dedup();
    secrets.sort();
    secrets.dedup();
    (config_maps, secrets)
}

/// What the Secret gets, before the operator's own labels and annotations are added.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shaped {
    pub data: BTreeMap<String, Vec<u8>>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub type_: Option<String>,
    pub finalizers: Vec<String>,
}

/// A template that cannot be rendered, naming the field it came from. Never holds fetched data:
/// the engine's messages name keys and positions, not values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct TemplateError {
    pub field: String,
    pub message: String,
}

/// Applies `template` (under `base`, e.g. `spec.target.template`) to `fetched`. Without a
/// template the object's own labels and annotations are copied, as ESO does.
pub fn shape(
    base: &str,
    template: Option<&Template>,
    fetched: BTreeMap<String, Vec<u8>>,
    sources: &Sources,
    object_labels: &BTreeMap<String, String>,
    object_annotations: &BTreeMap<String, String>,
) -> Result<Shaped, TemplateError> {
    let Some(template) = template else {
        return Ok(Shaped {
            data: fetched,
            labels: object_labels.clone(),
            annotations: object_annotations.clone(),
            ..Shaped::default()
        });
    };
    let meta = template.metadata.clone().unwrap_or_default();
    let mut out = Shaped {
        // The metadata as written first, then the rendered values replace it: a label whose
        // template fails to parse never reaches the Secret, because the whole render fails.
        labels: meta.labels.clone().unwrap_or_default(),
        annotations: meta.annotations.clone().unwrap_or_default(),
        type_: template.type_.clone(),
        finalizers: meta.finalizers.clone().unwrap_or_default(),
        ..Shaped::default()
    };
    if template.merge_policy == Some(TemplateMergePolicy::Merge) {
        out.data = fetched.clone();
    }
    let mut renderer = Renderer::new(&fetched);
    let template_from = template.template_from.as_deref().unwrap_or_default();
    for (i, from) in template_from.iter().enumerate() {
        let field = format!("{base}.templateFrom[{i}]");
        renderer.template_from(&field, from, sources, &mut out)?;
    }
    let data = template.data.clone().unwrap_or_default();
    for (key, text) in &data {
        let field = format!("{base}.data[{key}]");
        let value = renderer.render(&field, key, text)?;
        out.data.insert(key.clone(), value);
    }
    for (key, text) in meta.labels.iter().flatten() {
        let field = format!("{base}.metadata.labels[{key}]");
        let value = renderer.render_text(&field, key, text)?;
        out.labels.insert(key.clone(), value);
    }
    for (key, text) in meta.annotations.iter().flatten() {
        let field = format!("{base}.metadata.annotations[{key}]");
        let value = renderer.render_text(&field, key, text)?;
        out.annotations.insert(key.clone(), value);
    }
    // A template that only sets the type or metadata keeps the fetched data.
    if data.is_empty() && template_from.is_empty() {
        out.data.extend(fetched);
    }
    Ok(out)
}

/// ESO's `rewrite.transform`: a template that renders a key's new name from `.value`, the old
/// name. Parsed once, applied to every key of the entry.
pub struct KeyTransform {
    field: String,
    engine: Engine,
}

impl KeyTransform {
    pub fn new(field: &str, text: &str) -> Result<Self, TemplateError> {
        let engine = Engine::parse("transform", text, &FUNCS).map_err(|e| TemplateError {
            field: field.to_owned(),
            message: e.to_string(),
        })?;
        Ok(Self {
            field: field.to_owned(),
            engine,
        })
    }

    pub fn apply(&self, key: &str) -> Result<String, TemplateError> {
        let data = Value::Map(BTreeMap::from([("value".to_owned(), Value::from(key))]));
        // A key name is at most 253 bytes; anything longer is refused as the key it would be.
        let rendered = self
            .engine
            .execute(&data, 1024)
            .map_err(|e| TemplateError {
                field: self.field.clone(),
                message: e.to_string(),
            })?;
        Ok(String::from_utf8_lossy(&external_secrets_template::go_bytes(&rendered)).into_owned())
    }
}

/// Renders templates over one set of fetched data, within one Secret's size budget and one
/// budget of work for all of them, so that their number does not multiply it.
struct Renderer {
    data: Value,
    budget: usize,
    work: Budget,
}

impl Renderer {
    fn new(fetched: &BTreeMap<String, Vec<u8>>) -> Self {
        // ESO hands templates a map[string]string; Go strings carry any bytes, so values that
        // are not UTF-8 (a PKCS#12 archive, say) go through the engine's lossless encoding.
        let data = fetched
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    Value::String(external_secrets_template::go_string(v)),
                )
            })
            .collect();
        Self {
            data: Value::Map(data),
            budget: SECRET_SIZE_LIMIT,
            work: Budget::default(),
        }
    }

    fn render(&mut self, field: &str, name: &str, text: &str) -> Result<Vec<u8>, TemplateError> {
        let failed = |e: external_secrets_template::Error| TemplateError {
            field: field.to_owned(),
            message: e.to_string(),
        };
        let engine = Engine::parse(name, text, &FUNCS).map_err(failed)?;
        let rendered = engine
            .execute_within(&self.data, self.budget, &mut self.work)
            .map_err(failed)?;
        let bytes = external_secrets_template::go_bytes(&rendered).into_owned();
        self.budget = self.budget.saturating_sub(bytes.len());
        Ok(bytes)
    }

    /// Labels and annotations are strings; bytes that are not UTF-8 cannot be one.
    fn render_text(
        &mut self,
        field: &str,
        name: &str,
        text: &str,
    ) -> Result<String, TemplateError> {
        String::from_utf8(self.render(field, name, text)?).map_err(|_| TemplateError {
            field: field.to_owned(),
            message: "the rendered value is not valid UTF-8".into(),
        })
    }

    fn template_from(
        &mut self,
        field: &str,
        from: &TemplateFrom,
        sources: &Sources,
        out: &mut Shaped,
    ) -> Result<(), TemplateError> {
        let target = Target::parse(field, from.target.as_deref())?;
        let decoding = from.values_decoding_strategy;
        if let Some(r) = &from.config_map {
            let field = format!("{field}.configMap");
            let object = sources.config_maps.get(&r.name);
            self.items(
                &field,
                "configmap",
                r,
                object.map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
                        .collect()
                }),
                target,
                decoding,
                out,
            )?;
        }
        if let Some(r) = &from.secret {
            let field = format!("{field}.secret");
            self.items(
                &field,
                "secret",
                r,
                sources.secrets.get(&r.name).cloned(),
                target,
                decoding,
                out,
            )?;
        }
        if let Some(literal) = &from.literal {
            let field = format!("{field}.literal");
            self.keys_and_values(&field, literal, literal, target, decoding, out)?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn items(
        &mut self,
        field: &str,
        what: &str,
        reference: &TemplateRef,
        object: Option<BTreeMap<String, Vec<u8>>>,
        target: Target,
        decoding: Option<DecodingStrategy>,
        out: &mut Shaped,
    ) -> Result<(), TemplateError> {
        let Some(object) = object else {
            return Err(TemplateError {
                field: format!("{field}.name"),
                message: format!("{what} {:?} not found", reference.name),
            });
        };
        for (i, item) in reference.items.iter().enumerate() {
            let item_field = format!("{field}.items[{i}]");
            // ESO's wording for a missing key.
            let text = object.get(&item.key).ok_or_else(|| TemplateError {
                field: format!("{item_field}.key"),
                message: format!(
                    "error in {what} {}: missing key {}",
                    reference.name, item.key
                ),
            })?;
            let text = String::from_utf8(text.clone()).map_err(|_| TemplateError {
                field: format!("{item_field}.key"),
                message: format!(
                    "{what} {} key {} is not a UTF-8 template",
                    reference.name, item.key
                ),
            })?;
            match item.template_as.unwrap_or_default() {
                TemplateScope::Values => {
                    let value = self.render(&item_field, &item.key, &text)?;
                    target.put(&item_field, &item.key, value, decoding, out)?;
                }
                TemplateScope::KeysAndValues => {
                    self.keys_and_values(&item_field, &text, &text, target, decoding, out)?;
                }
            }
        }
        Ok(())
    }

    /// The template renders a YAML map of keys to values, each put into the target.
    fn keys_and_values(
        &mut self,
        field: &str,
        name: &str,
        text: &str,
        target: Target,
        decoding: Option<DecodingStrategy>,
        out: &mut Shaped,
    ) -> Result<(), TemplateError> {
        let rendered = self.render(field, name, text)?;
        let map: BTreeMap<String, String> = if rendered.iter().all(u8::is_ascii_whitespace) {
            BTreeMap::new()
        } else {
            serde_yaml::from_slice(&rendered).map_err(|e| TemplateError {
                field: field.to_owned(),
                // The YAML error's location, not its snippet: the text is rendered secret data.
                message: format!(
                    "could not unmarshal template to 'map[string][]byte'{}",
                    e.location()
                        .map(|l| format!(" (line {}, column {})", l.line(), l.column()))
                        .unwrap_or_default()
                ),
            })?
        };
        for (key, value) in map {
            target.put(field, &key, value.into_bytes(), decoding, out)?;
        }
        Ok(())
    }
}

/// Where a `templateFrom` result goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Data,
    Labels,
    Annotations,
}

impl Target {
    fn parse(field: &str, target: Option<&str>) -> Result<Self, TemplateError> {
        match target.map(str::to_ascii_lowercase).as_deref() {
            None | Some("") | Some("data") => Ok(Target::Data),
            Some("labels") => Ok(Target::Labels),
            Some("annotations") => Ok(Target::Annotations),
            Some(_) => Err(TemplateError {
                field: format!("{field}.target"),
                message: "must be Data, Annotations or Labels when the target is a Secret".into(),
            }),
        }
    }

    fn put(
        self,
        field: &str,
        key: &str,
        value: Vec<u8>,
        decoding: Option<DecodingStrategy>,
        out: &mut Shaped,
    ) -> Result<(), TemplateError> {
        let failed = |message: String| TemplateError {
            field: field.to_owned(),
            message,
        };
        // ESO decodes each rendered value (valuesDecodingStrategy) before it lands anywhere.
        let value = crate::keys::decode(value, decoding.into()).map_err(failed)?;
        match self {
            Target::Data => {
                if !crate::keys::valid_key(key) {
                    return Err(failed(format!("{key:?} is not a valid Secret key")));
                }
                out.data.insert(key.to_owned(), value);
            }
            Target::Labels | Target::Annotations => {
                let value = String::from_utf8(value)
                    .map_err(|_| failed("the rendered value is not valid UTF-8".into()))?;
                let map = if self == Target::Labels {
                    &mut out.labels
                } else {
                    &mut out.annotations
                };
                map.insert(key.to_owned(), value);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
