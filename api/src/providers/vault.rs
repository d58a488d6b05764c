//! ESO's HashiCorp Vault provider: the KV secrets engine (v1 or v2), with every login method ESO
//! supports.
//!
//! The kind is served at two versions. `v1alpha1`, defined here, is ESO's shape, which is also
//! what a store's inline `spec.provider.vault` holds, forever; it stays the storage version.
//! [`v1beta1`] groups the same settings and allows exactly one login method; [`conversion`]
//! converts whole objects between the two without losing a field.

pub mod conversion;
pub mod v1beta1;

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{CaProvider, SecretKeySelector, ServiceAccountSelector};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VaultProvider {
    /// How to log in; unset sends requests without logging in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<VaultAuth>,
    /// Vault's address, for example `https://vault.example.com:8200`.
    pub server: String,
    /// Mount path of the KV engine, for example `secret`. v2's `data/` is inserted automatically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// KV engine version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "v2"))]
    pub version: Option<VaultKvVersion>,
    /// Vault Enterprise namespace for secret operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// PEM CA bundle for an `https` server, base64 on the wire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::meta::base64_bytes")]
    pub ca_bundle: Option<ByteString>,
    /// Client certificate for servers that require mutual TLS (not the `cert` login method).
    #[serde(rename = "tls", default, skip_serializing_if = "Option::is_none")]
    pub client_tls: Option<VaultClientTls>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_provider: Option<CaProvider>,
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

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum VaultKvVersion {
    #[serde(rename = "v1")]
    V1,
    #[default]
    #[serde(rename = "v2")]
    V2,
}

/// A client certificate for mutual TLS; the keys default to `tls.crt` and `tls.key`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VaultClientTls {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_secret_ref: Option<SecretKeySelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_secret_ref: Option<SecretKeySelector>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VaultCheckAndSet {
    /// Every write carries the version it expects to replace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
}

/// The login method. ESO documents "only one" but does not enforce it: with several set it uses
/// the first that is configured in the order token, appRole, kubernetes, ldap, userPass, jwt,
/// cert, iam, gcp, and that order is the contract here too.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    pub jwt: Option<VaultJwtAuth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<VaultCertAuth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iam: Option<VaultIamAuth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_pass: Option<VaultUserPassAuth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcp: Option<VaultGcpAuth>,
}

/// AppRole login. The role ID is given inline (`roleId`) or in a Secret (`roleRef`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VaultAppRole {
    /// Mount path of the AppRole method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "approle"))]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_ref: Option<SecretKeySelector>,
    /// The secret ID.
    pub secret_ref: SecretKeySelector,
}

/// Kubernetes login: a ServiceAccount token (requested, or read from a Secret, or the operator's
/// own) exchanged for a Vault token.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VaultKubernetesAuth {
    /// Mount path of the Kubernetes method. ESO's Go field is `Path`; the JSON name is `mountPath`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "kubernetes"))]
    pub mount_path: Option<String>,
    /// A ServiceAccount whose token is requested with the TokenRequest API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_ref: Option<ServiceAccountSelector>,
    /// A Secret key holding a ServiceAccount token (key defaults to `token`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretKeySelector>,
    /// The Vault role bound to the ServiceAccount.
    pub role: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VaultLdapAuth {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "ldap"))]
    pub path: Option<String>,
    pub username: String,
    /// The password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretKeySelector>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VaultUserPassAuth {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "userpass"))]
    pub path: Option<String>,
    pub username: String,
    /// The password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretKeySelector>,
}

/// JWT/OIDC login with a token from a Secret or a requested ServiceAccount token.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VaultJwtAuth {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "jwt"))]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretKeySelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_service_account_token: Option<VaultKubernetesServiceAccountTokenAuth>,
}

/// A ServiceAccount token requested for the JWT login.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VaultKubernetesServiceAccountTokenAuth {
    pub service_account_ref: ServiceAccountSelector,
    /// Deprecated in ESO in favour of `serviceAccountRef.audiences`; defaults to `vault`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audiences: Option<Vec<String>>,
    /// Deprecated in ESO; defaults to 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_seconds: Option<i64>,
}

/// TLS certificate login.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VaultCertAuth {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "cert"))]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vault_role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<SecretKeySelector>,
    /// The private key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretKeySelector>,
}

/// AWS IAM login. Without `secretRef` or `jwt`, the operator's own AWS identity is used.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VaultIamAuth {
    /// Mount path of the AWS method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// AWS role to assume before logging in (JSON `role`, unlike the Vault role).
    #[serde(rename = "role", default, skip_serializing_if = "Option::is_none")]
    pub aws_iam_role: Option<String>,
    /// The Vault role to log in as.
    pub vault_role: String,
    #[serde(
        rename = "externalID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub external_id: Option<String>,
    /// Value of the `X-Vault-AWS-IAM-Server-ID` header, against replay.
    #[serde(
        rename = "vaultAwsIamServerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub vault_aws_iam_server_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<VaultAwsAuthSecretRef>,
    #[serde(rename = "jwt", default, skip_serializing_if = "Option::is_none")]
    pub jwt_auth: Option<VaultAwsJwtAuth>,
}

/// Static AWS credentials.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VaultAwsAuthSecretRef {
    #[serde(
        rename = "accessKeyIDSecretRef",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub access_key_id: Option<SecretKeySelector>,
    #[serde(
        rename = "secretAccessKeySecretRef",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub secret_access_key: Option<SecretKeySelector>,
    /// Needed when the key pair is temporary.
    #[serde(
        rename = "sessionTokenSecretRef",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub session_token: Option<SecretKeySelector>,
}

/// AWS credentials from a ServiceAccount set up for IRSA.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VaultAwsJwtAuth {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_ref: Option<ServiceAccountSelector>,
}

/// Google Cloud login. Without `secretRef`, `workloadIdentity` or `serviceAccountRef`, the
/// operator's own Google identity is used.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VaultGcpAuth {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "gcp"))]
    pub path: Option<String>,
    /// The Vault role to log in as.
    pub role: String,
    #[serde(rename = "projectID", default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<GcpSecretRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_identity: Option<GcpWorkloadIdentity>,
    /// A ServiceAccount to impersonate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_ref: Option<ServiceAccountSelector>,
}

/// A Google service account key (ESO's `GCPSMAuthSecretRef`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GcpSecretRef {
    #[serde(
        rename = "secretAccessKeySecretRef",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub secret_access_key: Option<SecretKeySelector>,
}

/// GKE Workload Identity; unset cluster fields are read from the metadata server.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GcpWorkloadIdentity {
    #[serde(rename = "serviceAccountRef")]
    pub service_account_ref: ServiceAccountSelector,
    #[serde(
        rename = "clusterLocation",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_location: Option<String>,
    #[serde(
        rename = "clusterName",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_name: Option<String>,
    #[serde(
        rename = "clusterProjectID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_project_id: Option<String>,
}

crate::provider_kinds::provider_roots! {
    kind: "Vault",
    plural: "vaults",
    version: "v1alpha1",
    spec: VaultProvider,
    namespaced_doc: "Spec of the namespaced kind: exactly what the store's `spec.provider` holds.",
    cluster_doc: "Spec of the cluster-scoped twin.",
}

crate::provider_kinds::provider_kind! {
    kind: "Vault",
    plural: "vaults",
    store_key: "vault",
    store_spec: VaultProvider,
    versions: [
        { name: "v1alpha1", module: self, storage: true },
        { name: "v1beta1", module: v1beta1, storage: false },
    ],
    conversion: crate::conversion::convert::<conversion::Vault>,
}
