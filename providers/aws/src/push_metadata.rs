//! A PushSecret entry's `metadata` for AWS, ESO's envelope and fields:
//!
//! ```yaml
//! metadata:
//!   apiVersion: kubernetes.external-secrets.io/v1alpha1
//!   kind: PushSecretMetadata
//!   spec: {...}   # SecretsManagerSpec or ParameterStoreSpec
//! ```
//!
//! ESO decodes with Go's JSON, which matches field names case-insensitively; its documentation
//! writes `kmsKeyID` where the field is `kmsKeyId`, so both spellings are read here.

use std::collections::BTreeMap;

use provider::{Error, Result};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The tag ESO puts on what it creates; only what carries it is overwritten or deleted.
pub(crate) const MANAGED_BY: (&str, &str) = ("managed-by", "external-secrets");
const API_VERSION: &str = "kubernetes.external-secrets.io/v1alpha1";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Envelope<S> {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    spec: Option<S>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct SecretsManagerSpec {
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    #[serde(default)]
    pub description: Option<String>,
    /// `binary` (ESO's default) or `string`.
    #[serde(default)]
    pub secret_push_format: Option<String>,
    #[serde(default, alias = "kmsKeyID")]
    pub kms_key_id: Option<String>,
    #[serde(default)]
    pub resource_policy: Option<Value>,
    #[serde(default)]
    pub replication_locations: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ParameterStoreSpec {
    /// `String` (the default), `StringList` or `SecureString`.
    #[serde(default)]
    pub secret_type: Option<String>,
    #[serde(default, rename = "kmsKeyID", alias = "kmsKeyId")]
    pub kms_key_id: Option<String>,
    #[serde(default)]
    pub tier: Option<Tier>,
    /// A whole-Secret push with its values as text rather than base64 (ESO's default).
    #[serde(default)]
    pub encode_as_decoded: bool,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    #[serde(default)]
    pub description: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Tier {
    #[serde(rename = "type", default)]
    pub type_: Option<String>,
    /// Parameter policies, passed to AWS as their JSON text (Advanced tier only).
    #[serde(default)]
    pub policies: Option<Value>,
}

/// Reads an entry's metadata (`None`: every default); errors name the field.
pub(crate) fn parse<S: DeserializeOwned + Default>(metadata: Option<&Value>) -> Result<S> {
    let Some(metadata) = metadata.filter(|m| !m.is_null()) else {
        return Ok(S::default());
    };
    let parsed: Envelope<S> = serde_json::from_value(metadata.clone())
        .map_err(|e| Error::InvalidSpec(format!("metadata: {e}")))?;
    if let Some(v) = parsed.api_version.as_deref()
        && v != API_VERSION
    {
        return Err(Error::InvalidSpec(format!(
            "metadata.apiVersion: {v:?} is not {API_VERSION:?}"
        )));
    }
    if let Some(k) = parsed.kind.as_deref()
        && k != "PushSecretMetadata"
    {
        return Err(Error::InvalidSpec(format!(
            "metadata.kind: {k:?} is not \"PushSecretMetadata\""
        )));
    }
    Ok(parsed.spec.unwrap_or_default())
}

/// The tags a push sets: the user's and ESO's marker, which the user may not set.
pub(crate) fn tags_with_marker(
    tags: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>> {
    if tags.contains_key(MANAGED_BY.0) {
        return Err(Error::InvalidSpec(format!(
            "metadata.spec.tags: cannot specify a {:?} tag",
            MANAGED_BY.0
        )));
    }
    let mut tags = tags.clone();
    tags.insert(MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned());
    Ok(tags)
}

pub(crate) fn is_managed(tags: &BTreeMap<String, String>) -> bool {
    tags.get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1)
}

/// ESO's description of what it creates, unless the push gives one.
pub(crate) fn description(given: Option<&str>) -> String {
    match given.filter(|d| !d.is_empty()) {
        Some(d) => d.to_owned(),
        None => format!("secret '{}:{}'", MANAGED_BY.0, MANAGED_BY.1),
    }
}

/// What to change on a remote object whose tags are `current` so that they become `wanted`:
/// keys to remove, and tags to set when any was added or changed (ESO's `computeTagsToUpdate`).
pub(crate) fn tag_changes(
    current: &BTreeMap<String, String>,
    wanted: &BTreeMap<String, String>,
) -> (Vec<String>, Option<BTreeMap<String, String>>) {
    let remove = current
        .keys()
        .filter(|k| !wanted.contains_key(*k))
        .cloned()
        .collect();
    let changed = wanted.iter().any(|(k, v)| current.get(k) != Some(v));
    (remove, changed.then(|| wanted.clone()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn eso_documentation_metadata_parses_with_either_spelling() {
        let sm: SecretsManagerSpec = parse(Some(&json!({
            "apiVersion": "kubernetes.external-secrets.io/v1alpha1",
            "kind": "PushSecretMetadata",
            "spec": {"kmsKeyID": "bb12", "secretPushFormat": "string",
                     "description": "d", "tags": {"secret-store": "teamb"}}
        })))
        .unwrap();
        assert_eq!(sm.kms_key_id.as_deref(), Some("bb12"));
        let ps: ParameterStoreSpec = parse(Some(&json!({
            "apiVersion": "kubernetes.external-secrets.io/v1alpha1",
            "kind": "PushSecretMetadata",
            "spec": {"secretType": "SecureString", "kmsKeyID": "k",
                     "tier": {"type": "Advanced", "policies": [{"type": "Expiration"}]}}
        })))
        .unwrap();
        assert_eq!(ps.tier.unwrap().type_.as_deref(), Some("Advanced"));
        let err = parse::<ParameterStoreSpec>(Some(&json!({"spec": {"secretTyp": "x"}})))
            .unwrap_err()
            .to_string();
        assert!(err.contains("secretTyp"), "{err}");
    }

    #[test]
    fn the_marker_is_ours_and_tags_change_only_when_they_differ() {
        let err = tags_with_marker(&BTreeMap::from([("managed-by".into(), "me".into())]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("metadata.spec.tags"), "{err}");
        let wanted = tags_with_marker(&BTreeMap::from([("team".into(), "a".into())])).unwrap();
        let (remove, set) = tag_changes(&wanted, &wanted);
        assert!(remove.is_empty() && set.is_none());
        let current = BTreeMap::from([
            ("managed-by".to_owned(), "external-secrets".to_owned()),
            ("old".to_owned(), "x".to_owned()),
        ]);
        let (remove, set) = tag_changes(&current, &wanted);
        assert_eq!(remove, vec!["old".to_owned()]);
        assert_eq!(set.unwrap().get("team").map(String::as_str), Some("a"));
    }
}
