//! ESO's AWS provider: Secrets Manager and Parameter Store, chosen by `service`.
//!
//! One kind for both services rather than ESO v2's two (`SecretsManager`, `ParameterStore`): a
//! store's inline `spec.provider.aws` is one object whose `service` picks the backend, every
//! other field (region, auth, role chain, prefix) means the same for both, and a kind per store
//! key keeps conversion of an inline provider, `migrate` and a kind's versions one-to-one. A
//! cluster that uses AWS still installs exactly one CRD pair, and no other provider's.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{SecretKeySelector, ServiceAccountSelector};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsProvider {
    /// `SecretsManager` or `ParameterStore` (ESO's `CertificateManager` is refused).
    pub service: String,
    /// How to get credentials; unset means the SDK's default chain (the pod's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AwsAuth>,
    /// A role ARN assumed last, after `additionalRoles`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    pub region: String,
    /// Role ARNs assumed in order before `role`, each with the credentials of the one before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_roles: Option<Vec<String>>,
    /// External ID set when assuming `role`.
    #[serde(
        rename = "externalID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub external_id: Option<String>,
    /// Session tags set when assuming `role`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_tags: Option<Vec<AwsTag>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets_manager: Option<AwsSecretsManager>,
    /// Which of `sessionTags` are transitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transitive_tag_keys: Option<Vec<String>>,
    /// `None`, `Simple` (tags `esoNamespace`, `esoStoreName`, `esoStoreKind`) or `Custom`
    /// (those and `customSessionTags`): session tags made for each assumption of `role`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_tags_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_session_tags: Option<BTreeMap<String, String>>,
    /// Prepended to every remote key read or written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
}

/// At most one way; neither means the SDK's default chain.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsAuth {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<AwsAuthSecretRef>,
    /// A ServiceAccount's token exchanged with `AssumeRoleWithWebIdentity` for the role in its
    /// `eks.amazonaws.com/role-arn` annotation, as IRSA does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwt: Option<AwsJwtAuth>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsAuthSecretRef {
    #[serde(rename = "accessKeyIDSecretRef", default)]
    pub access_key_id: SecretKeySelector,
    #[serde(rename = "secretAccessKeySecretRef", default)]
    pub secret_access_key: SecretKeySelector,
    #[serde(
        rename = "sessionTokenSecretRef",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub session_token: Option<SecretKeySelector>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsJwtAuth {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_ref: Option<ServiceAccountSelector>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsSecretsManager {
    /// Delete without a recovery window; exclusive with `recoveryWindowInDays`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_delete_without_recovery: Option<bool>,
    /// Days (7 to 30) a deleted secret can be restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_window_in_days: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AwsTag {
    pub key: String,
    pub value: String,
}

crate::provider_kinds::provider_kind! {
    kind: "AWS",
    plural: "aws",
    store_key: "aws",
    version: "v1alpha1",
    spec: AwsProvider,
}
