//! Helpers that tests share: namespaces, applying manifests of any kind, polling.

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use kube::{Api, Client};
use serde_json::Value;

const FIELD_MANAGER: &str = "external-secrets-testenv";

/// How long `apply_yaml` waits for a kind whose CRD it applied earlier in the same call.
const NEW_KIND_TIMEOUT: Duration = Duration::from_secs(30);

/// Creates a namespace named `<prefix>-<random suffix>` and returns the name.
pub async fn create_namespace(client: &Client, prefix: &str) -> Result<String> {
    // RandomState is seeded randomly per instance: enough entropy for a name, no extra crate.
    let mut n = RandomState::new().build_hasher().finish();
    let suffix: String = (0..6)
        .map(|_| {
            let c = b"abcdefghijklmnopqrstuvwxyz0123456789"[(n % 36) as usize];
            n /= 36;
            char::from(c)
        })
        .collect();
    let prefix = prefix.trim_end_matches('-');
    let prefix = &prefix[..prefix.len().min(63 - 1 - suffix.len())];
    let name = format!("{prefix}-{suffix}");
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(name)
}

/// Splits multi-document YAML into objects, skipping empty documents.
pub fn parse_yaml(yaml: &str) -> Result<Vec<Value>> {
    let mut objects = Vec::new();
    for (i, document) in serde_yaml::Deserializer::from_str(yaml).enumerate() {
        let value: Value = serde::Deserialize::deserialize(document)
            .with_context(|| format!("YAML document {} is not valid", i + 1))?;
        match value {
            Value::Null => {}
            Value::Object(_) => objects.push(value),
            other => bail!("YAML document {} is not an object: {other}", i + 1),
        }
    }
    Ok(objects)
}

/// Server-side applies every object in `yaml` (any kind, found through discovery), in order.
///
/// Namespaced objects without `metadata.namespace` go to the client's default namespace.
/// With `field_validation_strict` the apiserver rejects unknown and duplicate fields
/// (`fieldValidation=Strict`; server-side apply reports an unknown field as
/// `.spec.foo: field not declared in schema`).
pub async fn apply_yaml(
    client: &Client,
    yaml: &str,
    field_validation_strict: bool,
) -> Result<Vec<DynamicObject>> {
    apply(
        client,
        client.default_namespace(),
        yaml,
        field_validation_strict,
    )
    .await
}

/// [`apply_yaml`] with `namespace` for namespaced objects that do not name one.
pub async fn apply_yaml_in(
    client: &Client,
    namespace: &str,
    yaml: &str,
    field_validation_strict: bool,
) -> Result<Vec<DynamicObject>> {
    apply(client, namespace, yaml, field_validation_strict).await
}

async fn apply(
    client: &Client,
    namespace: &str,
    yaml: &str,
    strict: bool,
) -> Result<Vec<DynamicObject>> {
    let mut params = PatchParams::apply(FIELD_MANAGER).force();
    if strict {
        params = params.validation_strict();
    }
    let mut applied_crd = false;
    let mut applied = Vec::new();
    for object in parse_yaml(yaml)? {
        let field = |name: &str| object.get(name).and_then(Value::as_str).unwrap_or_default();
        let (api_version, kind) = (field("apiVersion"), field("kind"));
        if api_version.is_empty() || kind.is_empty() {
            bail!("an object lacks apiVersion or kind: {object}");
        }
        let metadata = |name: &str| object["metadata"].get(name).and_then(Value::as_str);
        let name = metadata("name").ok_or_else(|| anyhow!("a {kind} lacks metadata.name"))?;
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);

        let resolve = || async {
            discovery::pinned_kind(client, &gvk)
                .await
                .map_err(|e| anyhow!("the apiserver serves no kind {kind} in {api_version}: {e}"))
        };
        // A CRD applied a moment ago is served only once it is Established.
        let (resource, capabilities) = if applied_crd {
            wait_for(
                NEW_KIND_TIMEOUT,
                &format!("{kind} in {api_version} to be served"),
                resolve,
            )
            .await?
        } else {
            resolve().await?
        };

        let (api, place) = match capabilities.scope {
            Scope::Namespaced => {
                let ns = metadata("namespace").unwrap_or(namespace);
                (
                    Api::<DynamicObject>::namespaced_with(client.clone(), ns, &resource),
                    format!("{ns}/{name}"),
                )
            }
            Scope::Cluster => (
                Api::<DynamicObject>::all_with(client.clone(), &resource),
                name.to_owned(),
            ),
        };
        let result = api
            .patch(name, &params, &Patch::Apply(&object))
            .await
            .with_context(|| format!("applying {kind} {place}"))?;
        applied_crd |= group == "apiextensions.k8s.io" && kind == "CustomResourceDefinition";
        applied.push(result);
    }
    Ok(applied)
}

/// Polls `check` until it returns `Ok` or `timeout` passes; an `Err` means "not yet" and the
/// last one is reported on time-out, so make it say what was seen.
pub async fn wait_for<T, E, F, Fut>(timeout: Duration, what: &str, mut check: F) -> Result<T>
where
    E: Into<anyhow::Error>,
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, E>>,
{
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(50);
    loop {
        match check().await {
            Ok(value) => return Ok(value),
            Err(last) if Instant::now() >= deadline => {
                return Err(last
                    .into()
                    .context(format!("timed out after {timeout:?} waiting for {what}")));
            }
            Err(_) => {}
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

/// Waits until the CRD `name` has condition Established=True.
pub async fn wait_for_crd_established(
    client: &Client,
    name: &str,
    timeout: Duration,
) -> Result<()> {
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    wait_for(
        timeout,
        &format!("CRD {name} to be Established"),
        || async {
            let crd = crds.get(name).await?;
            let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
            if conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
            {
                return Ok(());
            }
            let seen: Vec<String> = conditions
                .iter()
                .map(|c| {
                    format!(
                        "{}={} ({})",
                        c.type_,
                        c.status,
                        c.message.as_deref().unwrap_or("")
                    )
                })
                .collect();
            bail!("conditions: [{}]", seen.join(", "))
        },
    )
    .await
}

/// Applies every `*.yaml`/`*.yml` in `dir` (strict validation, sorted by file name) and waits
/// until each CRD among them is Established; returns the CRD names.
pub async fn install_crds(client: &Client, dir: impl AsRef<Path>) -> Result<Vec<String>> {
    let dir = dir.as_ref();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"));
    files.sort();
    let mut names = Vec::new();
    for file in &files {
        let yaml =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        for object in apply_yaml(client, &yaml, true)
            .await
            .with_context(|| format!("applying {}", file.display()))?
        {
            if object
                .types
                .as_ref()
                .is_some_and(|t| t.kind == "CustomResourceDefinition")
            {
                names.extend(object.metadata.name);
            }
        }
    }
    for name in &names {
        wait_for_crd_established(client, name, Duration::from_secs(60)).await?;
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_yaml_skips_empty_documents_and_keeps_order() {
        let objects =
            parse_yaml("---\n# only a comment\n---\nkind: A\n---\n\n---\nkind: B\n").unwrap();
        let kinds: Vec<_> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["A", "B"]);
    }

    #[test]
    fn parse_yaml_rejects_a_scalar_document() {
        assert!(parse_yaml("kind: A\n---\njust text\n").is_err());
    }
}
