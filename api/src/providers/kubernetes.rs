//! ESO's Kubernetes provider: Secrets of another (or the same) cluster, read through its API.

use k8s_openapi::ByteString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{CaProvider, DNS_LABEL_PATTERN, SecretKeySelector, ServiceAccountSelector};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesProvider {
    /// The API server to talk to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<KubernetesServer>,
    /// Credentials given piece by piece; exclusive with `authRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<KubernetesAuth>,
    /// A Secret key holding a whole kubeconfig; exclusive with `auth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_ref: Option<SecretKeySelector>,
    /// Namespace of the remote cluster to read Secrets from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN), extend("default" = "default"))]
    pub remote_namespace: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesServer {
    /// Address of the API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "kubernetes.default"))]
    pub url: Option<String>,
    /// PEM CA bundle for the API server, base64 on the wire. Without it (or `caProvider`) the
    /// system roots are used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::meta::base64_bytes")]
    pub ca_bundle: Option<ByteString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_provider: Option<CaProvider>,
}

/// Exactly one way to authenticate; ESO's schema enforces the same with min/max properties.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
pub struct KubernetesAuth {
    /// A client certificate and key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<KubernetesCertAuth>,
    /// A static bearer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<KubernetesTokenAuth>,
    /// A ServiceAccount whose token is requested with the TokenRequest API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ServiceAccountSelector>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesCertAuth {
    pub client_cert: SecretKeySelector,
    pub client_key: SecretKeySelector,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesTokenAuth {
    pub bearer_token: SecretKeySelector,
}

crate::provider_kinds::provider_kind! {
    kind: "Kubernetes",
    plural: "kubernetes",
    store_key: "kubernetes",
    version: "v1alpha1",
    spec: KubernetesProvider,
}
