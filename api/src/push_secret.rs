//! PushSecret (`external-secrets.io/v1alpha1`), field for field as ESO serves it: the reverse of an
//! ExternalSecret, writing keys of a Kubernetes Secret (or of a generator's output) to providers.
//!
//! As in `external_secret`, optional fields are `Option`s so that manifests round-trip unchanged;
//! defaults live in the schema only.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube_derive::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conditions::Condition;
use crate::external_secret::{
    GeneratorRef, RewriteRegexp, RewriteTransform, SecretStoreKind, Template,
};
use crate::meta::DNS_SUBDOMAIN_PATTERN;

/// ESO's finalizer, present while `deletionPolicy` is Delete.
pub const FINALIZER: &str = "pushsecret.externalsecrets.io/finalizer";

/// Condition reasons ESO reports.
pub mod reason {
    pub const SYNCED: &str = "Synced";
    pub const ERRORED: &str = "Errored";
    pub const SOURCE_DELETED: &str = "SourceDeleted";
}

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(crates(kube_core = "::kube_core"))]
#[kube(
    group = "external-secrets.io",
    version = "v1alpha1",
    kind = "PushSecret",
    namespaced,
    status = "PushSecretStatus",
    shortname = "ps",
    category = "external-secrets",
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Last Sync","type":"date","jsonPath":".status.refreshTime"}"#,
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct PushSecretSpec {
    /// Go duration between pushes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::DURATION_PATTERN), extend("default" = "1h"))]
    pub refresh_interval: Option<String>,

    /// The stores to push to.
    pub secret_store_refs: Vec<PushSecretStoreRef>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Replace"))]
    pub update_policy: Option<PushSecretUpdatePolicy>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "None"))]
    pub deletion_policy: Option<PushSecretDeletionPolicy>,

    /// Where the pushed values come from.
    pub selector: PushSecretSelector,

    /// One remote entry per source key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Vec<PushSecretData>>,

    /// Bulk rules: every matching key, or all of them bundled into one remote secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_to: Option<Vec<PushSecretDataTo>>,

    /// Renders the source Secret before it is pushed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<Template>,
}

/// A store (by name) or a set of stores (by label) to push to.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(
    validation = Rule::new("has(self.name) != has(self.labelSelector)")
        .message("a PushSecret store reference must set exactly one of name and labelSelector"),
)]
#[serde(rename_all = "camelCase")]
pub struct PushSecretStoreRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "SecretStore"))]
    pub kind: Option<SecretStoreKind>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PushSecretUpdatePolicy {
    /// Overwrite what the provider has.
    #[default]
    Replace,
    /// Write only keys the provider does not have yet.
    IfNotExists,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PushSecretDeletionPolicy {
    /// Remove pushed entries when the PushSecret (or the entry) goes away.
    Delete,
    /// Leave pushed entries in the provider.
    #[default]
    None,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PushSecretConversionStrategy {
    #[default]
    None,
    /// Turn `_Uxxxx_` escapes in key names back into their characters (the reverse of an
    /// ExternalSecret's `conversionStrategy: Unicode`).
    ReverseUnicode,
}

/// The source of the pushed values.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(
    validation = Rule::new("has(self.secret) != has(self.generatorRef)")
        .message("spec.selector must set exactly one of secret and generatorRef"),
)]
#[serde(rename_all = "camelCase")]
pub struct PushSecretSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<PushSecretSecret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator_ref: Option<GeneratorRef>,
}

/// A Secret in the PushSecret's namespace, by name or by labels.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(
    validation = Rule::new("has(self.name) != has(self.selector)")
        .message("spec.selector.secret must set exactly one of name and selector"),
)]
#[serde(rename_all = "camelCase")]
pub struct PushSecretSecret {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// Where a value goes in the provider.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PushSecretRemoteRef {
    /// Name of the remote secret.
    pub remote_key: String,
    /// Property inside the remote secret; unset writes the whole secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub property: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PushSecretMatch {
    /// Key of the source Secret; unset pushes the whole Secret as one JSON object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key: Option<String>,
    pub remote_ref: PushSecretRemoteRef,
}

/// One pushed entry. Also the value type of `status.syncedPushSecrets`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PushSecretData {
    #[serde(rename = "match")]
    pub match_: PushSecretMatch,
    /// Provider-specific settings (for Kubernetes, a `PushSecretMetadata` object); kept as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_json")]
    pub metadata: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "None"))]
    pub conversion_strategy: Option<PushSecretConversionStrategy>,
}

/// A bulk push rule.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(
    validation = Rule::new("!has(self.remoteKey) || !has(self.rewrite) || size(self.rewrite) == 0")
        .message("spec.dataTo[].remoteKey and spec.dataTo[].rewrite are mutually exclusive: rewrite applies only when each key is pushed on its own")
        .reason(Reason::FieldValueForbidden)
        .field_path(".rewrite"),
)]
#[serde(rename_all = "camelCase")]
pub struct PushSecretDataTo {
    /// The store to push to; required, unlike `secretStoreRefs` this rule targets one store.
    pub store_ref: PushSecretStoreRef,
    /// Bundles every matched key into this one remote secret as a JSON object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_key: Option<String>,
    /// Selects keys; unset selects all.
    #[serde(rename = "match", default, skip_serializing_if = "Option::is_none")]
    pub match_: Option<PushSecretDataToMatch>,
    /// Renames keys before they are pushed, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<Vec<PushSecretRewrite>>,
    /// Provider-specific settings, as in `data[].metadata`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_json")]
    pub metadata: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "None"))]
    pub conversion_strategy: Option<PushSecretConversionStrategy>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PushSecretDataToMatch {
    /// Regular expression on source keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regexp: Option<String>,
}

/// One key rename of a bulk push.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(
    validation = Rule::new("has(self.regexp) != has(self.transform)")
        .message("each spec.dataTo[].rewrite entry must set exactly one of regexp and transform"),
)]
#[serde(rename_all = "camelCase")]
pub struct PushSecretRewrite {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regexp: Option<RewriteRegexp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transform: Option<RewriteTransform>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PushSecretStatus {
    /// Start of the last successful push.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synced_resource_version: Option<String>,
    /// `<Kind>/<store name>` to remote key (with property) to what was pushed there; also entries
    /// that already existed with updatePolicy IfNotExists. Drives deletion of removed entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synced_push_secrets: Option<BTreeMap<String, BTreeMap<String, PushSecretData>>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Not in ESO: the generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Any JSON value, kept as is by the API server.
fn free_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"x-kubernetes-preserve-unknown-fields": true})
}

impl PushSecretSpec {
    /// `spec.data`, empty when unset.
    pub fn data(&self) -> &[PushSecretData] {
        self.data.as_deref().unwrap_or_default()
    }

    /// `spec.dataTo`, empty when unset.
    pub fn data_to(&self) -> &[PushSecretDataTo] {
        self.data_to.as_deref().unwrap_or_default()
    }

    /// The deletion policy after ESO's default.
    pub fn deletion_policy(&self) -> PushSecretDeletionPolicy {
        self.deletion_policy.unwrap_or_default()
    }

    /// The update policy after ESO's default.
    pub fn update_policy(&self) -> PushSecretUpdatePolicy {
        self.update_policy.unwrap_or_default()
    }
}
