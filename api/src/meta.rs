//! Selectors shared by the provider specs (ESO's `apis/meta/v1`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A key of a Kubernetes Secret. `namespace` is honoured only where the caller allows it
/// (a ClusterSecretStore, or a provider object); otherwise the consumer's namespace is used.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeySelector {
    /// Name of the Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"))]
    pub name: Option<String>,
    /// Namespace of the Secret; ignored for a namespaced SecretStore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub namespace: Option<String>,
    /// Key within the Secret's data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub key: Option<String>,
}

/// A ServiceAccount whose token a provider requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccountSelector {
    /// Name of the ServiceAccount.
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"))]
    pub name: String,
    /// Namespace of the ServiceAccount; ignored for a namespaced SecretStore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub namespace: Option<String>,
    /// Audiences of the requested token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audiences: Option<Vec<String>>,
}
