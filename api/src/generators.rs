//! ESO's `generators.external-secrets.io/v1alpha1`: one kind per generator, which is what design
//! 007 asks of providers too, so a cluster installs only the generator CRDs it uses. The kinds
//! this build serves are listed in [`SERVED`]; `ClusterGenerator` wraps one of their specs.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "generators.external-secrets.io";
pub const VERSION: &str = "v1alpha1";

/// ESO's Password generator: `length` characters of which `digits` digits and `symbols` of
/// `symbolCharacters`, the rest letters; once per key of `secretKeys`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(crates(kube_core = "::kube_core"))]
#[kube(
    group = "generators.external-secrets.io",
    version = "v1alpha1",
    kind = "Password",
    namespaced,
    category = "external-secrets",
    category = "external-secrets-generators",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct PasswordSpec {
    /// Characters in all; 24 when 0 or unset.
    #[serde(default)]
    #[schemars(range(min = 0, max = 4096), extend("default" = 24))]
    pub length: i64,
    /// Digits among them; a quarter of `length` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digits: Option<i64>,
    /// Symbols among them; a quarter of `length` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbols: Option<i64>,
    /// The symbols to pick from; ESO's set ``~!@#$%^&*()_+`-={}|[]\:"<>?,./`` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbol_characters: Option<String>,
    /// Letters are lower case only.
    #[serde(default)]
    pub no_upper: bool,
    /// A character may appear more than once.
    #[serde(default)]
    pub allow_repeat: bool,
    /// One password per key; `password` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_keys: Option<Vec<String>>,
    /// `raw` (the default), `base64`, `base64url`, `base32` or `hex`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["base64", "base64url", "base32", "hex", "raw"]))]
    pub encoding: Option<String>,
}

/// ESO's UUID generator: a random (version 4) UUID under the key `uuid`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(crates(kube_core = "::kube_core"))]
#[kube(
    group = "generators.external-secrets.io",
    version = "v1alpha1",
    kind = "UUID",
    plural = "uuids",
    namespaced,
    category = "external-secrets",
    category = "external-secrets-generators",
    derive = "Default",
    derive = "PartialEq"
)]
pub struct UuidSpec {}

/// ESO's Fake generator: `data` as it is, for tests and examples.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(crates(kube_core = "::kube_core"))]
#[kube(
    group = "generators.external-secrets.io",
    version = "v1alpha1",
    kind = "Fake",
    namespaced,
    category = "external-secrets",
    category = "external-secrets-generators",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct FakeSpec {
    /// The controller class it is meant for (ESO's field; generators are used by whichever
    /// controller handles the ExternalSecret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<BTreeMap<String, String>>,
}

/// ESO's MFA generator: the TOTP code (RFC 6238) of the base32 seed in a Secret of the
/// ExternalSecret's namespace, under `token`, and the seconds it stays valid, under `timeLeft`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(crates(kube_core = "::kube_core"))]
#[kube(
    group = "generators.external-secrets.io",
    version = "v1alpha1",
    kind = "MFA",
    plural = "mfas",
    namespaced,
    category = "external-secrets",
    category = "external-secrets-generators",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct MfaSpec {
    /// The Secret key holding the seed (base32; spaces and case do not matter).
    pub secret: crate::meta::SecretKeySelector,
    /// Digits of the code; 6 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<i64>,
    /// Seconds a code is valid; 30 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_period: Option<i64>,
    /// `sha1` (the default), `sha256`, `sha384`, `sha512` or `sha512_256`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["sha1", "sha256", "sha384", "sha512", "sha512_256"]))]
    pub algorithm: Option<String>,
    /// The time the code is made for; now when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<Time>,
}

/// ESO's ClusterGenerator: a generator of `kind` usable from every namespace, its spec under
/// `generator.<kind>Spec`. Only the kinds this build serves have a field there, so the API
/// server refuses a ClusterGenerator of another kind when it is written.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(crates(kube_core = "::kube_core"))]
#[kube(
    group = "generators.external-secrets.io",
    version = "v1alpha1",
    kind = "ClusterGenerator",
    category = "external-secrets",
    category = "external-secrets-generators",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterGeneratorSpec {
    #[schemars(extend("enum" = ["Password", "UUID", "Fake", "MFA"]))]
    pub kind: String,
    pub generator: GeneratorSpec,
}

/// One of these, the one `kind` names.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
pub struct GeneratorSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_spec: Option<PasswordSpec>,
    #[serde(rename = "uuidSpec", default, skip_serializing_if = "Option::is_none")]
    pub uuid_spec: Option<UuidSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fake_spec: Option<FakeSpec>,
    #[serde(rename = "mfaSpec", default, skip_serializing_if = "Option::is_none")]
    pub mfa_spec: Option<MfaSpec>,
}

/// The generator kinds this build serves (each a CRD of its own), as `generatorRef.kind` names
/// them; `ClusterGenerator` is served besides.
pub const SERVED: [&str; 4] = ["Password", "UUID", "Fake", "MFA"];
