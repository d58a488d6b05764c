//! The PushSecret entry's `metadata` for this provider, ESO's
//! `kubernetes.external-secrets.io/v1alpha1` `PushSecretMetadata`, and how it merges the source
//! Secret's labels and annotations into the remote Secret's.

use std::collections::BTreeMap;

use provider::{Error, PushSource, Result};
use serde::Deserialize;
use serde_json::Value;

pub(crate) const API_VERSION: &str = "kubernetes.external-secrets.io/v1alpha1";
const KIND: &str = "PushSecretMetadata";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    #[serde(default)]
    spec: PushMetadata,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct PushMetadata {
    #[serde(default)]
    pub(crate) source_merge_policy: SourceMergePolicy,
    #[serde(default)]
    pub(crate) target_merge_policy: TargetMergePolicy,
    #[serde(default)]
    pub(crate) labels: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) annotations: BTreeMap<String, String>,
    /// Pushes to another namespace than the store's `remoteNamespace`; ClusterSecretStores only.
    #[serde(default)]
    pub(crate) remote_namespace: Option<String>,
}

/// How the entry's labels and annotations combine with the source Secret's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize)]
pub(crate) enum SourceMergePolicy {
    #[default]
    Merge,
    Replace,
}

/// How the result combines with the remote Secret's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize)]
pub(crate) enum TargetMergePolicy {
    #[default]
    Merge,
    Replace,
    Ignore,
}

/// The entry's metadata, checked as ESO checks it (unknown fields, apiVersion and kind refused).
pub(crate) fn parse(metadata: Option<&Value>) -> Result<Option<PushMetadata>> {
    let Some(metadata) = metadata.filter(|m| !m.is_null()) else {
        return Ok(None);
    };
    let document: Document = serde_json::from_value(metadata.clone())
        .map_err(|e| Error::InvalidSpec(format!("metadata: not a {API_VERSION} {KIND}: {e}")))?;
    if document.api_version != API_VERSION {
        return Err(Error::InvalidSpec(format!(
            "metadata.apiVersion: {:?} is not {API_VERSION:?}",
            document.api_version
        )));
    }
    if document.kind != KIND {
        return Err(Error::InvalidSpec(format!(
            "metadata.kind: {:?} is not {KIND:?}",
            document.kind
        )));
    }
    Ok(Some(document.spec))
}

type Maps = (BTreeMap<String, String>, BTreeMap<String, String>);

/// The source Secret's labels and annotations with the entry's: added (the entry's win), or
/// instead of them.
pub(crate) fn source(source: &PushSource, metadata: Option<&PushMetadata>) -> Result<Maps> {
    let (mut labels, mut annotations) = (source.labels.clone(), source.annotations.clone());
    let Some(metadata) = metadata else {
        return Ok((labels, annotations));
    };
    match metadata.source_merge_policy {
        SourceMergePolicy::Merge => {
            labels.extend(metadata.labels.clone());
            annotations.extend(metadata.annotations.clone());
            Ok((labels, annotations))
        }
        SourceMergePolicy::Replace => Ok((metadata.labels.clone(), metadata.annotations.clone())),
    }
}

/// The remote Secret's labels and annotations after a push: its own with the source's added
/// (theirs win), the source's alone, or its own untouched.
pub(crate) fn target(
    labels: Option<&BTreeMap<String, String>>,
    annotations: Option<&BTreeMap<String, String>>,
    (source_labels, source_annotations): Maps,
    metadata: Option<&PushMetadata>,
) -> Maps {
    let mut labels = labels.cloned().unwrap_or_default();
    let mut annotations = annotations.cloned().unwrap_or_default();
    match metadata.map(|m| m.target_merge_policy).unwrap_or_default() {
        TargetMergePolicy::Merge => {
            labels.extend(source_labels);
            annotations.extend(source_annotations);
            (labels, annotations)
        }
        TargetMergePolicy::Replace => (source_labels, source_annotations),
        TargetMergePolicy::Ignore => (labels, annotations),
    }
}
