//! `Gitlab` at `v1beta1`: v1alpha1's settings (ESO's shape) spelled as Kubernetes APIs spell
//! them (`auth.secretRef`, `project`), and the groups whose variables are read as one choice,
//! enforced by the API server: listed (`groups.ids`) or the project's ancestors
//! (`groups.inherit`).

use k8s_openapi::ByteString;
use kube_derive::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::GitlabSecretRef;
use crate::meta::CaProvider;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitlabProvider {
    /// Base URL of the GitLab instance; unset means https://gitlab.com/.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub auth: GitlabAuth,
    /// Project whose variables are read: its numeric ID or its path (`group/project`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Groups whose variables are read after the project's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<GitlabGroups>,
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

/// v1alpha1's `auth.SecretRef`, spelled `secretRef`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitlabAuth {
    pub secret_ref: GitlabSecretRef,
}

/// v1alpha1's `groupIDs` and `inheritFromGroups`, which ESO refuses together; here the API server
/// does.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(
    validation = Rule::new("!(has(self.ids) && has(self.inherit))")
        .message("set at most one of groups.ids and groups.inherit: list the groups or inherit the project's, not both"),
)]
pub struct GitlabGroups {
    /// Groups by numeric ID or path; on a conflict the project wins, then the later group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ids: Option<Vec<String>>,
    /// Read the variables of the project's ancestor groups, nearest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inherit: Option<bool>,
}

crate::provider_kinds::provider_roots! {
    kind: "Gitlab",
    plural: "gitlabs",
    version: "v1beta1",
    spec: GitlabProvider,
    namespaced_doc: "Spec of the namespaced kind at v1beta1.",
    cluster_doc: "Spec of the cluster-scoped twin at v1beta1.",
}
