//! Design 007's provider kinds. Each provider has a namespaced kind in
//! `providers.external-secrets.io` and a cluster-scoped twin with the same name in
//! `cluster.providers.external-secrets.io`. Both are generated from the provider's spec type by
//! one macro, so the two groups cannot drift apart.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conditions::Condition;
use crate::providers::Capabilities;

/// Status of every provider object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
}

/// The version every provider kind is served at today.
pub const VERSION: &str = "v1alpha1";

macro_rules! provider_kind {
    ($module:ident, $kind:literal, $plural:literal, $spec:ty) => {
        pub mod $module {
            use kube::CustomResource;
            use schemars::JsonSchema;
            use serde::{Deserialize, Serialize};

            use super::ProviderStatus;

            /// Spec of the namespaced kind: exactly what the store's `spec.provider` holds.
            #[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
            #[kube(
                group = "providers.external-secrets.io",
                version = "v1alpha1",
                kind = $kind,
                plural = $plural,
                namespaced,
                status = "ProviderStatus",
                category = "external-secrets-providers",
                printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
                printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
                printcolumn = r#"{"name":"Capabilities","type":"string","jsonPath":".status.capabilities"}"#,
                printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
                derive = "Default",
                derive = "PartialEq"
            )]
            pub struct NamespacedSpec {
                #[serde(flatten)]
                pub provider: $spec,
            }

            /// Spec of the cluster-scoped twin.
            #[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
            #[kube(
                group = "cluster.providers.external-secrets.io",
                version = "v1alpha1",
                kind = $kind,
                plural = $plural,
                root = "Cluster",
                status = "ProviderStatus",
                category = "external-secrets-providers",
                printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
                printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
                printcolumn = r#"{"name":"Capabilities","type":"string","jsonPath":".status.capabilities"}"#,
                printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
                derive = "Default",
                derive = "PartialEq"
            )]
            pub struct ClusterSpec {
                #[serde(flatten)]
                pub provider: $spec,
            }
        }
    };
}

provider_kind!(fake, "Fake", "fakes", crate::providers::fake::FakeProvider);
provider_kind!(
    kubernetes,
    "Kubernetes",
    "kubernetes",
    crate::providers::kubernetes::KubernetesProvider
);
provider_kind!(
    vault,
    "Vault",
    "vaults",
    crate::providers::vault::VaultProvider
);
provider_kind!(
    gitlab,
    "Gitlab",
    "gitlabs",
    crate::providers::gitlab::GitlabProvider
);
