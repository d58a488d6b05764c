//! ESO's GitLab provider: CI/CD variables of a project and its groups. ESO only reads them; this
//! operator also writes them (PushSecret), see the provider crate.
//!
//! The kind is served at two versions. `v1alpha1`, defined here, is ESO's shape, which is also
//! what a store's inline `spec.provider.gitlab` holds, forever; it stays the storage version.
//! [`v1beta1`] spells the fields as Kubernetes does and makes the groups one choice;
//! [`conversion`] converts whole objects between the two without losing a field.

pub mod conversion;
pub mod v1beta1;

use k8s_openapi::ByteString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{CaProvider, SecretKeySelector};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitlabProvider {
    /// Base URL of the GitLab instance; unset means https://gitlab.com/.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub auth: GitlabAuth,
    /// Project whose variables are read.
    #[serde(rename = "projectID", default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// Also read the variables of the project's ancestor groups; exclusive with `groupIDs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inherit_from_groups: Option<bool>,
    /// Groups whose variables are read; on a conflict the project wins, then the later group.
    #[serde(rename = "groupIDs", default, skip_serializing_if = "Option::is_none")]
    pub group_ids: Option<Vec<String>>,
    /// `environment_scope` the variables must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// PEM CA bundle for the GitLab server, base64 on the wire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::meta::base64_bytes")]
    pub ca_bundle: Option<ByteString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_provider: Option<CaProvider>,
}

/// ESO spells the only key with a capital letter (`SecretRef`); kept for compatibility.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GitlabAuth {
    #[serde(rename = "SecretRef")]
    pub secret_ref: GitlabSecretRef,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitlabSecretRef {
    /// A personal, group or project access token with `read_api`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_token: Option<SecretKeySelector>,
}

crate::provider_kinds::provider_roots! {
    kind: "Gitlab",
    plural: "gitlabs",
    version: "v1alpha1",
    spec: GitlabProvider,
    namespaced_doc: "Spec of the namespaced kind: exactly what the store's `spec.provider` holds.",
    cluster_doc: "Spec of the cluster-scoped twin.",
}

crate::provider_kinds::provider_kind! {
    kind: "Gitlab",
    plural: "gitlabs",
    store_key: "gitlab",
    store_spec: GitlabProvider,
    versions: [
        { name: "v1alpha1", module: self, storage: true },
        { name: "v1beta1", module: v1beta1, storage: false },
    ],
    conversion: crate::conversion::convert::<conversion::Gitlab>,
}
