//! Provider configuration: what `spec.provider.<name>` of a store holds, and also the `spec` of
//! that provider's own kind. One type serves both places, so converting a store's inline
//! provider into a provider object cannot lose a field.

pub mod fake;
pub mod gitlab;
pub mod kubernetes;
pub mod vault;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a provider can do, reported in store and provider status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Capabilities {
    ReadOnly,
    WriteOnly,
    ReadWrite,
}

/// `spec.provider` of a store: exactly one key.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
pub struct SecretStoreProvider {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fake: Option<fake::FakeProvider>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<kubernetes::KubernetesProvider>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vault: Option<vault::VaultProvider>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gitlab: Option<gitlab::GitlabProvider>,
}
