//! SecretStore and ClusterSecretStore (`external-secrets.io/v1`), with design 007's
//! `spec.providerRef` beside ESO's inline `spec.provider`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conditions::Condition;
use crate::providers::{Capabilities, SecretStoreProvider};

pub const SECRET_STORE_KIND: &str = "SecretStore";
pub const CLUSTER_SECRET_STORE_KIND: &str = "ClusterSecretStore";
/// The finalizer Go ESO puts on stores; this operator only removes it, so a store ESO left
/// behind can be deleted.
pub const FINALIZER: &str = "secretstore.externalsecrets.io/finalizer";
/// Label on a provider object converted from a store's inline `spec.provider`: the store's name.
pub const LABEL_CONVERTED_FROM: &str = "external-secrets.io/store";

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "external-secrets.io",
    version = "v1",
    kind = "SecretStore",
    namespaced,
    status = "SecretStoreStatus",
    shortname = "ss",
    category = "external-secrets",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Capabilities","type":"string","jsonPath":".status.capabilities"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Provider","type":"string","jsonPath":".spec.providerRef.kind","priority":1}"#,
    validation = Rule::new("!has(self.spec.providerRef) || self.spec.providerRef.apiVersion.startsWith('providers.external-secrets.io/')")
        .message("spec.providerRef.apiVersion: a SecretStore references a namespaced provider kind in providers.external-secrets.io")
        .field_path(".spec.providerRef.apiVersion"),
    derive = "Default",
    derive = "PartialEq"
)]
#[kube(
    validation = Rule::new("has(self.spec.provider) != has(self.spec.providerRef)")
        .message("exactly one of spec.provider and spec.providerRef must be set")
        .field_path(".spec")
)]
#[serde(rename_all = "camelCase")]
pub struct SecretStoreSpec {
    /// Controller class: only the operator started with this `--controller-class` handles the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<String>,
    /// Inline provider configuration (ESO's form). The operator turns it into a provider object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<SecretStoreProvider>,
    /// Reference to a provider object that holds the configuration (design 007).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_ref: Option<ProviderRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_settings: Option<RetrySettings>,
    /// How often the store is revalidated: seconds, or a Go duration such as `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_duration")]
    pub refresh_interval: Option<IntOrString>,
    /// Which namespaces may use a ClusterSecretStore (ignored on a SecretStore).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<ClusterSecretStoreCondition>>,
}

fn int_or_duration(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "x-kubernetes-int-or-string": true,
        "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": crate::DURATION_PATTERN}]
    })
}

/// The ClusterSecretStore: same spec, cluster scope; its providerRef names a
/// `cluster.providers.external-secrets.io` kind.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "external-secrets.io",
    version = "v1",
    kind = "ClusterSecretStore",
    status = "SecretStoreStatus",
    shortname = "css",
    category = "external-secrets",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Capabilities","type":"string","jsonPath":".status.capabilities"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Provider","type":"string","jsonPath":".spec.providerRef.kind","priority":1}"#,
    validation = Rule::new("!has(self.spec.providerRef) || self.spec.providerRef.apiVersion.startsWith('cluster.providers.external-secrets.io/')")
        .message("spec.providerRef.apiVersion: a ClusterSecretStore references a cluster-scoped provider kind in cluster.providers.external-secrets.io")
        .field_path(".spec.providerRef.apiVersion"),
    validation = Rule::new("has(self.spec.provider) != has(self.spec.providerRef)")
        .message("exactly one of spec.provider and spec.providerRef must be set")
        .field_path(".spec"),
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSecretStoreSpec {
    #[serde(flatten)]
    pub store: SecretStoreSpec,
}

/// Design 007's reference from a store to a provider object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderRef {
    /// `providers.external-secrets.io/<version>` or `cluster.providers.external-secrets.io/<version>`.
    #[schemars(regex(
        pattern = r"^(cluster\.)?providers\.external-secrets\.io/v[0-9]+((alpha|beta)[0-9]+)?$"
    ))]
    pub api_version: String,
    /// The provider kind, for example `Fake` or `Vault`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Name of the provider object (in the store's namespace for a SecretStore).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetrySettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"))]
    pub retry_interval: Option<String>,
}

/// One rule of a ClusterSecretStore's `conditions`: the namespace must match every field set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSecretStoreCondition {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_regexes: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretStoreStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
