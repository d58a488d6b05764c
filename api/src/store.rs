//! SecretStore and ClusterSecretStore (`external-secrets.io/v1`), with design 007's
//! `spec.providerRef` beside ESO's inline `spec.provider`, and ESO's v2 `spec.runtimeRef` to a
//! provider run out of process.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conditions::Condition;
use crate::meta::DNS_LABEL_PATTERN;
use crate::provider_class::{CLUSTER_PROVIDER_CLASS_KIND, PROVIDER_CLASS_KIND};
use crate::provider_kinds::Capabilities;
use crate::providers::SecretStoreProvider;

pub const SECRET_STORE_KIND: &str = "SecretStore";
pub const CLUSTER_SECRET_STORE_KIND: &str = "ClusterSecretStore";
/// The finalizer Go ESO puts on stores; this operator only removes it, so a store ESO left
/// behind can be deleted.
pub const FINALIZER: &str = "secretstore.externalsecrets.io/finalizer";
/// Label on a provider object converted from a store's inline `spec.provider`: the store's name.
pub const LABEL_CONVERTED_FROM: &str = "external-secrets.io/store";

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
// The root kube-derive writes derives KubeSchema (from `kube`) for its CEL rules.
#[kube(crates(kube_core = "::kube_core", kube = "::kube_derive"))]
#[kube(attr = r#"x_kube(crates(kube_core = "::kube_core"))"#)]
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
    validation = Rule::new("!has(self.spec.providerRef) || has(self.spec.runtimeRef) || self.spec.providerRef.apiVersion.startsWith('providers.external-secrets.io/')")
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
    /// Reference to a provider object that holds the configuration (design 007). Without a
    /// `runtimeRef`, a `providers.external-secrets.io` kind for a SecretStore and a
    /// `cluster.providers.external-secrets.io` kind for a ClusterSecretStore; with one, any kind
    /// the class's server reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_ref: Option<ProviderRef>,
    /// The ProviderClass or ClusterProviderClass whose gRPC server serves this store (ESO's v2
    /// provider protocol): a store with a `runtimeRef` is served out of process, one without in
    /// process. Unlike ESO, a `runtimeRef` may go with an inline `spec.provider`: the inline
    /// provider is still converted to a provider object, and the out-of-process server reads that
    /// object. A ClusterSecretStore may only use a ClusterProviderClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_ref: Option<RuntimeRef>,
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
/// `cluster.providers.external-secrets.io` kind, or, with a `runtimeRef` (a ClusterProviderClass
/// only), any kind the class's server reads.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
// The root kube-derive writes derives KubeSchema (from `kube`) for its CEL rules.
#[kube(crates(kube_core = "::kube_core", kube = "::kube_derive"))]
#[kube(attr = r#"x_kube(crates(kube_core = "::kube_core"))"#)]
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
    validation = Rule::new("!has(self.spec.providerRef) || has(self.spec.runtimeRef) || self.spec.providerRef.apiVersion.startsWith('cluster.providers.external-secrets.io/')")
        .message("spec.providerRef.apiVersion: a ClusterSecretStore references a cluster-scoped provider kind in cluster.providers.external-secrets.io")
        .field_path(".spec.providerRef.apiVersion"),
    validation = Rule::new("has(self.spec.provider) != has(self.spec.providerRef)")
        .message("exactly one of spec.provider and spec.providerRef must be set")
        .field_path(".spec"),
    validation = Rule::new("!has(self.spec.runtimeRef) || (has(self.spec.runtimeRef.kind) && self.spec.runtimeRef.kind == 'ClusterProviderClass')")
        .message("spec.runtimeRef.kind: a ClusterSecretStore may only use a ClusterProviderClass")
        .field_path(".spec.runtimeRef.kind"),
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
    /// `<group>/<version>` of the provider kind: `providers.external-secrets.io/<version>` for a
    /// SecretStore and `cluster.providers.external-secrets.io/<version>` for a ClusterSecretStore
    /// (rules of the store kinds); a store with a `runtimeRef` may name any group the class's
    /// server reads, for example ESO's `provider.external-secrets.io/v2alpha1`.
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/v[0-9]+((alpha|beta)[0-9]+)?$"))]
    pub api_version: String,
    /// The provider kind, for example `Fake` or `Vault`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Name of the provider object (in the store's namespace for a SecretStore).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace of the provider object (ESO's). For a SecretStore it may only be the store's own
    /// namespace, which the operator checks. For a ClusterSecretStore it names the namespace of a
    /// namespaced provider object served out of process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub namespace: Option<String>,
}

/// ESO's reference from a store to the class whose server serves it out of process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRef {
    /// `ProviderClass` (when absent; looked up in the store's namespace) or
    /// `ClusterProviderClass`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = [PROVIDER_CLASS_KIND, CLUSTER_PROVIDER_CLASS_KIND]))]
    pub kind: Option<String>,
    /// Name of the class.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

impl RuntimeRef {
    /// The class's kind, `ProviderClass` when the reference names none.
    pub fn kind_or_default(&self) -> &str {
        self.kind.as_deref().unwrap_or(PROVIDER_CLASS_KIND)
    }
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
