//! Writing variables (beyond ESO, whose GitLab provider is read-only): the PushSecret metadata
//! GitLab understands, the marker that says a variable is ours, and the decision between
//! creating, updating, leaving alone and refusing. Pure: the HTTP calls follow the plan.

use provider::{Error, Result};
use serde::Deserialize;
use serde_json::Value;

use crate::variables::Variable;

/// Written at the start of the `description` of every variable we create. Only variables
/// carrying it are updated or deleted.
pub(crate) const MANAGED_BY: &str = "managed-by: external-secrets";
/// GitLab's limit on `description`.
const DESCRIPTION_MAX: usize = 255;
/// The `apiVersion` of [`PushSecretMetadata`].
pub(crate) const METADATA_API_VERSION: &str = "gitlab.external-secrets.io/v1alpha1";

/// A PushSecret entry's `metadata` for GitLab, shaped like the Kubernetes provider's:
///
/// ```yaml
/// metadata:
///   apiVersion: gitlab.external-secrets.io/v1alpha1
///   kind: PushSecretMetadata
///   spec:
///     masked: true
///     protected: false
///     raw: true
///     variableType: env_var   # or file
///     description: database password for CI
/// ```
///
/// Unset fields take GitLab's defaults for a new variable (not masked, not protected, expanded,
/// `env_var`), so the variable always ends up as the PushSecret says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct PushSecretMetadata {
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub spec: MetadataSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct MetadataSpec {
    #[serde(default)]
    pub masked: Option<bool>,
    #[serde(default)]
    pub protected: Option<bool>,
    #[serde(default)]
    pub raw: Option<bool>,
    #[serde(default)]
    pub variable_type: Option<VariableType>,
    /// Kept after our marker.
    #[serde(default)]
    pub description: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum VariableType {
    #[default]
    EnvVar,
    File,
}

impl VariableType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::EnvVar => "env_var",
            Self::File => "file",
        }
    }
}

/// Reads a PushSecret entry's metadata; `None` means every default. Errors name the field.
pub(crate) fn parse_metadata(metadata: Option<&Value>) -> Result<MetadataSpec> {
    let Some(metadata) = metadata.filter(|m| !m.is_null()) else {
        return Ok(MetadataSpec::default());
    };
    let parsed: PushSecretMetadata = serde_json::from_value(metadata.clone())
        .map_err(|e| Error::InvalidSpec(format!("metadata: {e}")))?;
    if let Some(v) = parsed.api_version.as_deref()
        && v != METADATA_API_VERSION
    {
        return Err(Error::InvalidSpec(format!(
            "metadata.apiVersion: {v:?} is not {METADATA_API_VERSION:?}"
        )));
    }
    if let Some(k) = parsed.kind.as_deref()
        && k != "PushSecretMetadata"
    {
        return Err(Error::InvalidSpec(format!(
            "metadata.kind: {k:?} is not \"PushSecretMetadata\""
        )));
    }
    Ok(parsed.spec)
}

/// Whether a variable's description carries our marker.
pub(crate) fn is_managed(variable: &Variable) -> bool {
    variable
        .description
        .as_deref()
        .is_some_and(|d| d.starts_with(MANAGED_BY))
}

/// The description we write: the marker, then the user's own text.
fn description(spec: &MetadataSpec) -> Result<String> {
    let text = match spec.description.as_deref().filter(|d| !d.is_empty()) {
        None => MANAGED_BY.to_owned(),
        Some(d) => format!("{MANAGED_BY}; {d}"),
    };
    if text.chars().count() > DESCRIPTION_MAX {
        return Err(Error::InvalidSpec(format!(
            "metadata.spec.description: GitLab allows {DESCRIPTION_MAX} characters and {} are taken by {MANAGED_BY:?}",
            MANAGED_BY.len() + 2
        )));
    }
    Ok(text)
}

/// What a create or update (`POST /projects/:id/variables`, `PUT .../:key`) writes.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct VariableWrite {
    pub key: String,
    pub value: String,
    pub environment_scope: String,
    pub variable_type: VariableType,
    pub masked: bool,
    pub protected: bool,
    pub raw: bool,
    pub description: String,
}

impl std::fmt::Debug for VariableWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VariableWrite")
            .field("key", &self.key)
            .field("environment_scope", &self.environment_scope)
            .field("variable_type", &self.variable_type)
            .field("masked", &self.masked)
            .field("protected", &self.protected)
            .field("raw", &self.raw)
            .field("description", &self.description)
            .finish_non_exhaustive()
    }
}

/// What a push does.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    Create(VariableWrite),
    Update(VariableWrite),
    Unchanged,
}

/// The variable `key` in `scope` should hold `value` as `spec` says; `existing` is what GitLab
/// has there now. A variable without our marker is refused, naming it.
pub(crate) fn plan(
    key: &str,
    scope: &str,
    value: &[u8],
    spec: &MetadataSpec,
    existing: Option<&Variable>,
) -> Result<Plan> {
    let value = std::str::from_utf8(value).map_err(|_| {
        Error::Backend(format!(
            "variable {key}: GitLab variables hold text and the value is not UTF-8"
        ))
    })?;
    let desired = VariableWrite {
        key: key.to_owned(),
        value: value.to_owned(),
        environment_scope: scope.to_owned(),
        variable_type: spec.variable_type.unwrap_or_default(),
        masked: spec.masked.unwrap_or(false),
        protected: spec.protected.unwrap_or(false),
        raw: spec.raw.unwrap_or(false),
        description: description(spec)?,
    };
    let Some(existing) = existing else {
        return Ok(Plan::Create(desired));
    };
    if !is_managed(existing) {
        return Err(Error::Conflict(format!(
            "variable {key} (environment scope {scope:?}) exists and is not managed by external-secrets (its description does not start with {MANAGED_BY:?}); refusing to overwrite it"
        )));
    }
    let same = existing.value.as_deref() == Some(value)
        && existing.environment_scope == desired.environment_scope
        && existing.variable_type == desired.variable_type.as_str()
        && existing.masked == desired.masked
        && existing.protected == desired.protected
        && existing.raw == desired.raw
        && existing.description.as_deref() == Some(desired.description.as_str());
    Ok(if same {
        Plan::Unchanged
    } else {
        Plan::Update(desired)
    })
}

/// What a PushSecret deletion does with the variable there now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Removal {
    Delete,
    /// Absent already.
    Nothing,
    /// There, but not ours: left in place.
    NotOurs,
}

pub(crate) fn removal(existing: Option<&Variable>) -> Removal {
    match existing {
        None => Removal::Nothing,
        Some(v) if is_managed(v) => Removal::Delete,
        Some(_) => Removal::NotOurs,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ours(value: &str, scope: &str) -> Variable {
        Variable {
            key: "DB_PASSWORD".into(),
            value: Some(value.into()),
            environment_scope: scope.into(),
            variable_type: "env_var".into(),
            description: Some(MANAGED_BY.into()),
            ..Variable::default()
        }
    }

    #[test]
    fn metadata_is_read_and_unknown_fields_are_refused_by_name() {
        assert_eq!(parse_metadata(None).unwrap(), MetadataSpec::default());
        assert_eq!(
            parse_metadata(Some(&Value::Null)).unwrap(),
            MetadataSpec::default()
        );
        let spec = parse_metadata(Some(&json!({
            "apiVersion": METADATA_API_VERSION,
            "kind": "PushSecretMetadata",
            "spec": {"masked": true, "protected": true, "raw": true, "variableType": "file", "description": "ci"},
        })))
        .unwrap();
        assert_eq!(
            spec,
            MetadataSpec {
                masked: Some(true),
                protected: Some(true),
                raw: Some(true),
                variable_type: Some(VariableType::File),
                description: Some("ci".into()),
            }
        );

        let err = |m: Value| parse_metadata(Some(&m)).unwrap_err().to_string();
        assert!(err(json!({"spec": {"hidden": true}})).contains("unknown field `hidden`"));
        assert!(err(json!({"masked": true})).contains("unknown field `masked`"));
        assert!(err(json!({"spec": {"variableType": "secret"}})).contains("metadata:"));
        assert!(
            err(json!({"apiVersion": "kubernetes.external-secrets.io/v1alpha1"}))
                .contains("metadata.apiVersion")
        );
        assert!(err(json!({"kind": "Other"})).contains("metadata.kind"));
    }

    #[test]
    fn a_missing_variable_is_created_with_our_marker() {
        let spec = MetadataSpec {
            masked: Some(true),
            description: Some("for CI".into()),
            ..MetadataSpec::default()
        };
        let Plan::Create(body) = plan("DB_PASSWORD", "*", b"hunter22", &spec, None).unwrap() else {
            panic!("expected a create");
        };
        assert_eq!(body.key, "DB_PASSWORD");
        assert_eq!(body.value, "hunter22");
        assert_eq!(body.environment_scope, "*");
        assert!(body.masked && !body.protected && !body.raw);
        assert_eq!(body.variable_type, VariableType::EnvVar);
        assert_eq!(body.description, "managed-by: external-secrets; for CI");
        assert!(!format!("{body:?}").contains("hunter22"));
    }

    #[test]
    fn an_equal_variable_is_left_alone_and_a_different_one_updated() {
        let spec = MetadataSpec::default();
        let existing = ours("hunter22", "production");
        assert_eq!(
            plan(
                "DB_PASSWORD",
                "production",
                b"hunter22",
                &spec,
                Some(&existing)
            )
            .unwrap(),
            Plan::Unchanged
        );
        assert!(matches!(
            plan(
                "DB_PASSWORD",
                "production",
                b"changed!",
                &spec,
                Some(&existing)
            )
            .unwrap(),
            Plan::Update(_)
        ));
        // A flag the metadata changes (or no longer sets) is an update too.
        let masked = MetadataSpec {
            masked: Some(true),
            ..MetadataSpec::default()
        };
        assert!(matches!(
            plan(
                "DB_PASSWORD",
                "production",
                b"hunter22",
                &masked,
                Some(&existing)
            )
            .unwrap(),
            Plan::Update(_)
        ));
        let was_masked = Variable {
            masked: true,
            ..existing.clone()
        };
        assert!(matches!(
            plan(
                "DB_PASSWORD",
                "production",
                b"hunter22",
                &spec,
                Some(&was_masked)
            )
            .unwrap(),
            Plan::Update(_)
        ));
        // A hidden value cannot be compared: written again.
        let hidden = Variable {
            value: None,
            hidden: true,
            ..existing
        };
        assert!(matches!(
            plan(
                "DB_PASSWORD",
                "production",
                b"hunter22",
                &spec,
                Some(&hidden)
            )
            .unwrap(),
            Plan::Update(_)
        ));
    }

    #[test]
    fn a_variable_we_did_not_create_is_refused_by_name() {
        let theirs = Variable {
            description: Some("set by hand".into()),
            ..ours("their value", "*")
        };
        let err = plan(
            "DB_PASSWORD",
            "*",
            b"hunter22",
            &MetadataSpec::default(),
            Some(&theirs),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("variable DB_PASSWORD (environment scope \"*\") exists and is not managed by external-secrets"),
            "{err}"
        );
        assert!(
            !err.contains("hunter22") && !err.contains("their value"),
            "{err}"
        );
        let no_description = Variable {
            description: None,
            ..theirs
        };
        assert!(
            plan(
                "DB_PASSWORD",
                "*",
                b"x",
                &MetadataSpec::default(),
                Some(&no_description)
            )
            .is_err()
        );
    }

    #[test]
    fn values_must_be_text_and_descriptions_fit() {
        let err = plan("BIN", "*", &[0xff, 0xfe], &MetadataSpec::default(), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("variable BIN") && err.contains("not UTF-8"),
            "{err}"
        );
        let long = MetadataSpec {
            description: Some("x".repeat(240)),
            ..MetadataSpec::default()
        };
        let err = plan("K", "*", b"v", &long, None).unwrap_err().to_string();
        assert!(err.contains("metadata.spec.description"), "{err}");
    }

    #[test]
    fn only_our_variables_are_deleted() {
        assert_eq!(removal(None), Removal::Nothing);
        assert_eq!(removal(Some(&ours("v", "*"))), Removal::Delete);
        let theirs = Variable {
            description: Some("mine, not yours".into()),
            ..ours("v", "*")
        };
        assert_eq!(removal(Some(&theirs)), Removal::NotOurs);
    }
}
