//! `Vault` at `v1beta1`: the settings of v1alpha1 (ESO's shape) grouped by what they configure,
//! and exactly one login method, enforced by the API server. The login methods themselves are
//! v1alpha1's types.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use kube_derive::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    VaultAppRole, VaultCertAuth, VaultCheckAndSet, VaultGcpAuth, VaultIamAuth, VaultJwtAuth,
    VaultKubernetesAuth, VaultLdapAuth, VaultUserPassAuth,
};
use crate::meta::{CaProvider, SecretKeySelector};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VaultProvider {
    /// How to log in; unset sends requests without logging in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<VaultAuth>,
    /// Vault's address, for example `https://vault.example.com:8200`.
    pub server: String,
    /// The KV secrets engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv: Option<VaultKv>,
    /// Vault Enterprise namespace for secret operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// How the server's certificate is checked, and the client certificate for mutual TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<VaultTls>,
    /// Sends the replication state with every request so reads see earlier writes
    /// (Vault Enterprise performance standbys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_your_writes: Option<bool>,
    /// Asks standbys to forward inconsistent reads to the active node instead of retrying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_inconsistent: Option<bool>,
    /// Extra HTTP headers on every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
    /// Check-and-set for PushSecret writes (KV v2 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_and_set: Option<VaultCheckAndSet>,
}

/// The KV secrets engine: v1alpha1's `path` and `version`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VaultKv {
    /// Mount path of the engine, for example `secret`. v2's `data/` is inserted automatically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_path: Option<String>,
    /// Engine version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<KvVersion>,
}

/// The KV engine version, a number as Vault writes it (`vault secrets enable -version=2 kv`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KvVersion {
    V1,
    #[default]
    V2,
}

impl Serialize for KvVersion {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u8(match self {
            Self::V1 => 1,
            Self::V2 => 2,
        })
    }
}

impl<'de> Deserialize<'de> for KvVersion {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match u64::deserialize(deserializer)? {
            1 => Ok(Self::V1),
            2 => Ok(Self::V2),
            other => Err(serde::de::Error::custom(format!(
                "KV version {other} does not exist; expected 1 or 2"
            ))),
        }
    }
}

impl JsonSchema for KvVersion {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "KvVersion".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "integer", "enum": [1, 2], "default": 2})
    }
}

/// TLS towards Vault: v1alpha1's `caBundle`, `caProvider` and `tls`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VaultTls {
    /// PEM CA bundle for an `https` server, base64 on the wire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::meta::base64_bytes")]
    pub ca_bundle: Option<ByteString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_provider: Option<CaProvider>,
    /// Client certificate for servers that require mutual TLS (not the `cert` login method);
    /// the key defaults to `tls.crt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<SecretKeySelector>,
    /// Its private key; the key defaults to `tls.key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key: Option<SecretKeySelector>,
}

/// The login method: exactly one. v1alpha1 (like ESO) accepts several and uses the first in the
/// order of the fields below; here the API server refuses a second.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(
    validation = Rule::new(
        "(has(self.tokenSecretRef) ? 1 : 0) + (has(self.appRole) ? 1 : 0) + (has(self.kubernetes) ? 1 : 0) + (has(self.ldap) ? 1 : 0) + (has(self.userPass) ? 1 : 0) + (has(self.jwt) ? 1 : 0) + (has(self.cert) ? 1 : 0) + (has(self.iam) ? 1 : 0) + (has(self.gcp) ? 1 : 0) == 1"
    )
    .message("spec.auth must set exactly one of tokenSecretRef, appRole, kubernetes, ldap, userPass, jwt, cert, iam and gcp"),
)]
#[serde(rename_all = "camelCase")]
pub struct VaultAuth {
    /// Vault Enterprise namespace to log in to; defaults to the provider's `namespace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// A static token; never renewed or revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_secret_ref: Option<SecretKeySelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_role: Option<VaultAppRole>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<VaultKubernetesAuth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ldap: Option<VaultLdapAuth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_pass: Option<VaultUserPassAuth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwt: Option<VaultJwtAuth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<VaultCertAuth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iam: Option<VaultIamAuth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcp: Option<VaultGcpAuth>,
}

crate::provider_kinds::provider_roots! {
    kind: "Vault",
    plural: "vaults",
    version: "v1beta1",
    spec: VaultProvider,
    namespaced_doc: "Spec of the namespaced kind at v1beta1.",
    cluster_doc: "Spec of the cluster-scoped twin at v1beta1.",
}
