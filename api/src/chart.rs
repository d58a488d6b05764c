//! The CRDs as templates of the Helm chart (`charts/external-secrets`), generated from the same
//! types as `crds/`, so that a cluster installs only the providers it uses.
//!
//! Each provider's two CRDs are rendered only when `providers.<store key>.enabled`, and the
//! store CRDs carry the inline `spec.provider.<store key>` schema of the enabled providers only:
//! the SecretStore CRD grows with what a cluster uses, not with what the project supports (ESO's
//! all-providers one outgrew client-side apply). A rule on `spec.provider` then refuses, with a
//! message, an inline provider this installation does not serve (the API server prunes the
//! unknown key first, so without the rule the user would only read "at least 1 properties").
//!
//! Templates are produced by serializing the CRD with placeholder values and replacing each
//! placeholder with template text, so the YAML itself is always serde's.

use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, ValidationRule,
};

use crate::provider_kinds::{Descriptor, Scope};
use crate::providers;

/// Folder of the generated CRD templates, inside the chart.
pub const CRD_TEMPLATES: &str = "templates/crds";
/// The generated helper with the table of provider kinds, inside the chart.
pub const PROVIDERS_HELPER: &str = "templates/_providers.tpl";

const WEBHOOK_NAMESPACE: &str = "__RELEASE_NAMESPACE__";
const WEBHOOK_SERVICE: &str = "__WEBHOOK_SERVICE__";
const PROVIDER_SCHEMAS: &str = "__PROVIDER_SCHEMAS__";
const PROVIDER_RULE: &str = "__PROVIDER_RULE__";
const PROVIDER_MESSAGE: &str = "__PROVIDER_MESSAGE__";

/// Every generated chart file as `(path inside the chart, contents)`.
pub fn files() -> Result<Vec<(String, String)>, serde_yaml::Error> {
    let mut files = vec![(PROVIDERS_HELPER.to_owned(), providers_helper())];
    for crd in crate::crds::all() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let path = format!("{CRD_TEMPLATES}/{name}.yaml");
        files.push((path, crd_template(crd)?));
    }
    Ok(files)
}

/// What `external-secrets crds` writes: the CRDs ([`crate::crds::files`]) into `crds`, and this
/// chart's generated templates ([`files`]) into `chart`, creating folders as needed.
pub fn write(crds: &Path, chart: &Path) -> Result<(), WriteError> {
    let crds = crate::crds::files()?
        .into_iter()
        .map(|(n, y)| (crds.join(n), y));
    let templates = files()?.into_iter().map(|(n, y)| (chart.join(n), y));
    for (path, yaml) in crds.chain(templates) {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| WriteError::Io("creating", dir.to_owned(), e))?;
        }
        std::fs::write(&path, yaml).map_err(|e| WriteError::Io("writing", path.clone(), e))?;
    }
    Ok(())
}

/// Why [`write`] failed.
#[derive(Debug)]
pub enum WriteError {
    Yaml(serde_yaml::Error),
    /// What was being done, to which path.
    Io(&'static str, PathBuf, std::io::Error),
}

impl From<serde_yaml::Error> for WriteError {
    fn from(e: serde_yaml::Error) -> Self {
        Self::Yaml(e)
    }
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Yaml(e) => write!(f, "serializing a CRD: {e}"),
            Self::Io(doing, path, e) => write!(f, "{doing} {}: {e}", path.display()),
        }
    }
}

impl std::error::Error for WriteError {}

/// Which CRD this is, decided from its group and, for a provider kind, its descriptor.
enum Owner {
    Core,
    Provider(&'static Descriptor, Scope),
    /// A generator kind, by its key under `generators.` in the values.
    Generator(String),
}

fn owner(crd: &CustomResourceDefinition) -> Owner {
    let group = crd.spec.group.as_str();
    match Scope::of_group(group) {
        Some(scope) => {
            let descriptor = providers::ALL
                .iter()
                .find(|d| d.plural == crd.spec.names.plural)
                .expect("every provider CRD comes from a descriptor");
            Owner::Provider(descriptor, scope)
        }
        None if group == crate::generators::GROUP => {
            let kind = &crd.spec.names.kind;
            let mut key = kind.to_lowercase();
            if kind == "ClusterGenerator" {
                key = "clusterGenerator".into();
            }
            Owner::Generator(key)
        }
        None => Owner::Core,
    }
}

fn crd_template(mut crd: CustomResourceDefinition) -> Result<String, serde_yaml::Error> {
    let owner = owner(&crd);
    let condition = match owner {
        Owner::Core => "and .Values.installCRDs .Values.crds.core".to_owned(),
        Owner::Generator(key) => {
            format!(
                "and .Values.installCRDs .Values.crds.generators .Values.generators.{key}.enabled"
            )
        }
        Owner::Provider(d, scope) => format!(
            "and .Values.installCRDs .Values.crds.{} (include \"external-secrets.providerEnabled\" (list . {:?}))",
            match scope {
                Scope::Namespaced => "providers",
                Scope::Cluster => "clusterProviders",
            },
            d.store_key
        ),
    };
    if let Some(service) = crd
        .spec
        .conversion
        .as_mut()
        .and_then(|c| c.webhook.as_mut())
        .and_then(|w| w.client_config.as_mut())
        .and_then(|c| c.service.as_mut())
    {
        service.namespace = WEBHOOK_NAMESPACE.to_owned();
        service.name = WEBHOOK_SERVICE.to_owned();
    }
    let converts = crd
        .spec
        .conversion
        .as_ref()
        .is_some_and(|c| c.webhook.is_some());
    let fragments = take_provider_schemas(&mut crd);
    let mut yaml = serde_yaml::to_string(&crd)?;
    yaml = yaml
        .replacen(
            "\nmetadata:\n",
            &format!(
                "\nmetadata:\n  {{{{- include \"external-secrets.crdMetadata\" (list . {converts}) | nindent 2 }}}}\n"
            ),
            1,
        )
        .replace(WEBHOOK_NAMESPACE, "{{ .Release.Namespace }}")
        .replace(
            WEBHOOK_SERVICE,
            "{{ include \"external-secrets.webhookServiceName\" . }}",
        )
        .replace(
            PROVIDER_RULE,
            "{{ include \"external-secrets.providerRule\" . | quote }}",
        )
        .replace(
            PROVIDER_MESSAGE,
            "{{ include \"external-secrets.providerMessage\" . | quote }}",
        );
    if let Some(fragments) = fragments {
        yaml = replace_schema_placeholder(&yaml, &fragments)?;
    }
    Ok(format!(
        "# Generated by `cargo run -- crds`; do not edit.\n{{{{- if {condition} }}}}\n{yaml}{{{{- end }}}}\n"
    ))
}

/// Moves the per-provider schemas out of a store CRD's `spec.provider`, leaving a placeholder
/// and the rule; `None` for CRDs without an inline provider.
fn take_provider_schemas(
    crd: &mut CustomResourceDefinition,
) -> Option<Vec<(&'static Descriptor, JSONSchemaProps)>> {
    let mut fragments = None;
    for version in &mut crd.spec.versions {
        let Some(provider) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("spec"))
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("provider"))
        else {
            continue;
        };
        let mut properties = provider.properties.take().unwrap_or_default();
        let taken: Vec<_> = providers::ALL
            .iter()
            .filter_map(|d| properties.remove(d.store_key).map(|s| (*d, s)))
            .collect();
        assert!(
            properties.is_empty(),
            "spec.provider holds only provider schemas"
        );
        provider.properties =
            Some([(PROVIDER_SCHEMAS.to_owned(), JSONSchemaProps::default())].into());
        provider
            .x_kubernetes_validations
            .get_or_insert_with(Vec::new)
            .push(ValidationRule {
                rule: PROVIDER_RULE.to_owned(),
                message: Some(PROVIDER_MESSAGE.to_owned()),
                ..ValidationRule::default()
            });
        fragments = Some(taken);
    }
    fragments
}

/// The placeholder's line becomes one `if`-guarded block per provider, at its indentation.
fn replace_schema_placeholder(
    yaml: &str,
    fragments: &[(&'static Descriptor, JSONSchemaProps)],
) -> Result<String, serde_yaml::Error> {
    let mut out = String::with_capacity(yaml.len() * 2);
    for line in yaml.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if !trimmed.starts_with(&format!("{PROVIDER_SCHEMAS}:")) {
            out.push_str(line);
            continue;
        }
        let indent = &line[..line.len() - trimmed.len()];
        for (descriptor, schema) in fragments {
            let block = serde_yaml::to_string(&std::collections::BTreeMap::from([(
                descriptor.store_key,
                schema,
            )]))?;
            out.push_str(&format!(
                "{{{{- if include \"external-secrets.providerEnabled\" (list $ {:?}) }}}}\n",
                descriptor.store_key
            ));
            for block_line in block.lines() {
                out.push_str(indent);
                out.push_str(block_line);
                out.push('\n');
            }
            out.push_str("{{- end }}\n");
        }
    }
    Ok(out)
}

/// `external-secrets.providerKinds`: the provider kinds as a YAML list (store key, kind, plural,
/// whether it converts through the webhook), for the RBAC and CRD templates.
fn providers_helper() -> String {
    let mut out = String::from(
        "{{/* Generated by `cargo run -- crds` from the provider descriptors; do not edit. */}}\n\
         {{- define \"external-secrets.providerKinds\" -}}\n",
    );
    for d in providers::ALL {
        out.push_str(&format!(
            "- key: {}\n  kind: {}\n  plural: {}\n  conversion: {}\n",
            d.store_key,
            d.kind,
            d.plural,
            d.conversion.is_some()
        ));
    }
    out.push_str("{{- end }}\n");
    out
}
