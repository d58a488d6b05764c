//! Selectors and schema pieces shared by the kinds and the provider specs (ESO's `apis/meta/v1`,
//! plus `CAProvider` from ESO's `secretstore_types.go`, which every TLS-speaking provider uses).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A DNS-1123 subdomain: what Kubernetes accepts as the name of most objects.
pub const DNS_SUBDOMAIN_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A DNS-1123 label: what Kubernetes accepts as a namespace name.
pub const DNS_LABEL_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// A key of a Secret's or ConfigMap's `data`.
pub const DATA_KEY_PATTERN: &str = r"^[-._a-zA-Z0-9]+$";

/// A key of a Kubernetes Secret. `namespace` is honoured only where the caller allows it
/// (a ClusterSecretStore, or a provider object); otherwise the consumer's namespace is used.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeySelector {
    /// Name of the Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub name: Option<String>,
    /// Namespace of the Secret; ignored for a namespaced SecretStore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub namespace: Option<String>,
    /// Key within the Secret's data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DATA_KEY_PATTERN))]
    pub key: Option<String>,
}

/// A ServiceAccount whose token a provider requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccountSelector {
    /// Name of the ServiceAccount.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub name: String,
    /// Namespace of the ServiceAccount; ignored for a namespaced SecretStore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub namespace: Option<String>,
    /// Audiences of the requested token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audiences: Option<Vec<String>>,
}

/// A CA certificate kept in a Secret or ConfigMap, for providers whose server certificate is not
/// signed by a public root.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CaProvider {
    /// Whether `name` is a Secret or a ConfigMap.
    #[serde(rename = "type")]
    pub type_: CaProviderType,
    /// Name of the Secret or ConfigMap.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub name: String,
    /// Key holding the PEM certificate(s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DATA_KEY_PATTERN))]
    pub key: Option<String>,
    /// Namespace of the object; only a cluster-scoped consumer may set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub namespace: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum CaProviderType {
    #[default]
    Secret,
    ConfigMap,
}

/// Schema of a `[]byte` field in ESO's Go types: base64 text on the wire. Used with
/// `k8s_openapi::ByteString`, which has no schema of its own.
pub(crate) fn base64_bytes(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "format": "byte"})
}
