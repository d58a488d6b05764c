//! ClusterExternalSecret (`external-secrets.io/v1`) and ClusterPushSecret
//! (`external-secrets.io/v1alpha1`), field for field as ESO serves them: one ExternalSecret or
//! PushSecret, of the same spec, in every namespace a cluster object selects.
//!
//! Both kinds share the selection (`namespaceSelectors`, OR'ed) and the shape of their status
//! (the namespaces provisioned, those that failed with a reason each, a Ready condition).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conditions::Condition;
use crate::external_secret::ExternalSecretSpec;
use crate::meta::DNS_SUBDOMAIN_PATTERN;
use crate::push_secret::PushSecretSpec;

/// ESO's finalizer on a ClusterExternalSecret: ESO deleted the children itself; here owner
/// references do, so the finalizer is only ever removed, never added.
pub const CLUSTER_EXTERNAL_SECRET_FINALIZER: &str =
    "externalsecrets.external-secrets.io/clusterexternalsecret-cleanup";

/// The `spec` of a ClusterExternalSecret.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(crates(kube_core = "::kube_core"))]
#[kube(
    group = "external-secrets.io",
    version = "v1",
    kind = "ClusterExternalSecret",
    status = "ClusterExternalSecretStatus",
    shortname = "ces",
    category = "external-secrets",
    printcolumn = r#"{"name":"Store","type":"string","jsonPath":".spec.externalSecretSpec.secretStoreRef.name"}"#,
    printcolumn = r#"{"name":"Refresh Interval","type":"string","jsonPath":".spec.refreshTime"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterExternalSecretSpec {
    /// The spec of the ExternalSecrets to create.
    pub external_secret_spec: ExternalSecretSpec,

    /// Name of the ExternalSecrets to create; the ClusterExternalSecret's name when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub external_secret_name: Option<String>,

    /// Labels and annotations of the ExternalSecrets to create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_secret_metadata: Option<ChildMetadata>,

    /// Deprecated (use `namespaceSelectors`): one more selector, OR'ed with the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,

    /// Namespaces to create the ExternalSecrets in, by labels; the selectors are OR'ed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selectors: Option<Vec<LabelSelector>>,

    /// Deprecated (use `namespaceSelectors`): namespaces by name, OR'ed with the selectors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(inner(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    ))]
    pub namespaces: Option<Vec<String>>,

    /// Go duration between full re-checks of the namespaces and the ExternalSecrets.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "refreshTime"
    )]
    #[schemars(regex(pattern = crate::DURATION_PATTERN))]
    pub refresh_time: Option<String>,
}

/// Labels and annotations given to every child.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChildMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
}

/// A namespace its child could not be made in, and why.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub struct NamespaceFailure {
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterExternalSecretStatus {
    /// Name of the ExternalSecrets it created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_secret_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_namespaces: Vec<NamespaceFailure>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provisioned_namespaces: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The `spec` of a ClusterPushSecret.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(crates(kube_core = "::kube_core"))]
#[kube(
    group = "external-secrets.io",
    version = "v1alpha1",
    kind = "ClusterPushSecret",
    status = "ClusterPushSecretStatus",
    category = "external-secrets",
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPushSecretSpec {
    /// The spec of the PushSecrets to create.
    pub push_secret_spec: PushSecretSpec,

    /// Go duration between full re-checks of the namespaces and the PushSecrets.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "refreshTime"
    )]
    #[schemars(regex(pattern = crate::DURATION_PATTERN))]
    pub refresh_time: Option<String>,

    /// Name of the PushSecrets to create; the ClusterPushSecret's name when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub push_secret_name: Option<String>,

    /// Labels and annotations of the PushSecrets to create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_secret_metadata: Option<ChildMetadata>,

    /// Namespaces to create the PushSecrets in, by labels; the selectors are OR'ed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selectors: Option<Vec<LabelSelector>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPushSecretStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_namespaces: Vec<NamespaceFailure>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provisioned_namespaces: Vec<String>,
    /// Name of the PushSecrets it created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_secret_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
