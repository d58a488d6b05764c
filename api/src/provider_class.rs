//! ProviderClass and ClusterProviderClass (`external-secrets.io/v1alpha1`), ESO's v2 provider
//! protocol: where the gRPC server of a provider run out of process listens, and the Secret with
//! the mutual-TLS material used to reach it. A store names a class in `spec.runtimeRef`.
//!
//! The operator checks each class's server (gRPC health check, then the methods it serves) and
//! reports the outcome in the `Ready` condition with one of [`reason`]'s reasons.

use std::time::Duration;

use kube_derive::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conditions::Condition;
use crate::meta::{DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN};

pub const PROVIDER_CLASS_KIND: &str = "ProviderClass";
pub const CLUSTER_PROVIDER_CLASS_KIND: &str = "ClusterProviderClass";
/// ESO's Secret with the client's TLS material (`ca.crt`, `client.crt`, `client.key`), looked up
/// in the namespace of the address's Service when a class names none.
pub const DEFAULT_TLS_SECRET: &str = "external-secrets-provider-tls";
/// Keys of the TLS Secret the client reads (ESO's).
pub const TLS_CA_KEY: &str = "ca.crt";
pub const TLS_CLIENT_CERT_KEY: &str = "client.crt";
pub const TLS_CLIENT_KEY_KEY: &str = "client.key";

/// The deadline of every call through a class that sets no `spec.callTimeout` (ESO's).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest `spec.callTimeout`. A reconcile waits for its call, so a class whose server
/// never answers holds one of the operator's workers, shared by every namespace, this long; a
/// tenant's ProviderClass with a year-long deadline would hold them for good.
pub const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// `host:port`, the host a name or an address, an IPv6 address in brackets (`[::1]:8080`).
pub const ADDRESS_PATTERN: &str = r"^([^:/\s\[\]]+|\[[0-9a-fA-F:.]+\]):[0-9]{1,5}$";

/// Reasons of a class's `Ready` condition (ESO's).
pub mod reason {
    /// The server answered its health check.
    pub const HEALTHY: &str = "Healthy";
    /// The server could not be reached or did not answer SERVING.
    pub const HEALTH_CHECK_FAILED: &str = "HealthCheckFailed";
    /// The TLS Secret is missing or its material unusable.
    pub const TLS_CONFIG_FAILED: &str = "TLSConfigFailed";
}

/// Where a provider's gRPC server listens and how to reach it. A ClusterProviderClass has the
/// same fields.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(crates(kube_core = "::kube_core"))]
#[x_kube(crates(kube_core = "::kube_core"))]
#[kube(
    group = "external-secrets.io",
    version = "v1alpha1",
    kind = "ProviderClass",
    namespaced,
    status = "ProviderClassStatus",
    shortname = "pc",
    category = "external-secrets",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".spec.address"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ProviderClassSpec {
    /// `host:port` of the provider's gRPC server, for example
    /// `provider-fake.external-secrets.svc:8080` or `[::1]:8080`. The port is required.
    #[schemars(length(min = 1), regex(pattern = ADDRESS_PATTERN))]
    pub address: String,
    /// The Secret holding the client's TLS material: `ca.crt` (the CA that signed the server's
    /// certificate), `client.crt` and `client.key`. Without it, ESO's Secret
    /// `external-secrets-provider-tls` in the namespace of the address's Service (the `ns` of
    /// `svc.ns.svc...`) is used. `namespace` defaults, for a ProviderClass, to the class's own
    /// namespace, and for a ClusterProviderClass to the namespace of the address's Service. A
    /// ProviderClass may only name a Secret in its own namespace: the operator enforces it (no
    /// schema rule does) and reports TLSConfigFailed otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_secret_ref: Option<TlsSecretRef>,
    /// The deadline of every call to the server through this class, a duration such as `45s`
    /// or `2m` (default `30s`, at most `5m`), also sent to the server (`grpc-timeout`): a call
    /// still unanswered then fails as the server being unavailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::DURATION_PATTERN))]
    #[x_kube(
        validation = Rule::new("duration(self) > duration('0s')")
            .message("spec.callTimeout must be a duration above zero, such as \"45s\""),
        validation = Rule::new("duration(self) <= duration('5m')")
            .message("spec.callTimeout may be at most 5m")
    )]
    pub call_timeout: Option<String>,
}

impl ProviderClassSpec {
    /// `spec.callTimeout`, or the default; an error names the field. The schema refuses what
    /// this refuses; a class written before that rule existed is refused here.
    pub fn call_timeout(&self) -> Result<Duration, String> {
        let Some(written) = &self.call_timeout else {
            return Ok(DEFAULT_CALL_TIMEOUT);
        };
        match crate::duration::parse(written) {
            Ok(timeout) if timeout > MAX_CALL_TIMEOUT => Err(format!(
                "spec.callTimeout: {written:?} is longer than the longest allowed, 5m"
            )),
            Ok(timeout) if !timeout.is_zero() => Ok(timeout),
            Ok(_) => Err(format!(
                "spec.callTimeout: {written:?} must be a duration above zero"
            )),
            Err(e) => Err(format!("spec.callTimeout: {e}")),
        }
    }
}

/// A class served cluster-wide, usable by ClusterSecretStores and by SecretStores of any
/// namespace; its spec is a ProviderClass's.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(crates(kube_core = "::kube_core"))]
#[kube(
    group = "external-secrets.io",
    version = "v1alpha1",
    kind = "ClusterProviderClass",
    status = "ProviderClassStatus",
    shortname = "cpc",
    category = "external-secrets",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".spec.address"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProviderClassSpec {
    #[serde(flatten)]
    pub class: ProviderClassSpec,
}

impl std::ops::Deref for ClusterProviderClassSpec {
    type Target = ProviderClassSpec;

    fn deref(&self) -> &ProviderClassSpec {
        &self.class
    }
}

impl From<ProviderClassSpec> for ClusterProviderClassSpec {
    fn from(class: ProviderClassSpec) -> Self {
        Self { class }
    }
}

/// A Secret with the keys `ca.crt`, `client.crt` and `client.key`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsSecretRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub name: String,
    /// Namespace of the Secret; for a ProviderClass, only its own (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub namespace: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderClassStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The protocol methods the server says it serves (for example `GetSecret`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// How many addresses the server's host resolved to at the last health check (the Pods
    /// behind a headless Service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<u32>,
    /// How many of them answered the health check SERVING; calls go to those.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_endpoints: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(timeout: &str) -> ProviderClassSpec {
        ProviderClassSpec {
            call_timeout: Some(timeout.into()),
            ..Default::default()
        }
    }

    /// What the schema refuses, a class stored before its rules existed is refused at load.
    #[test]
    fn a_call_timeout_is_above_zero_and_at_most_five_minutes() {
        assert_eq!(
            ProviderClassSpec::default().call_timeout(),
            Ok(DEFAULT_CALL_TIMEOUT)
        );
        assert_eq!(with("45s").call_timeout(), Ok(Duration::from_secs(45)));
        assert_eq!(with("5m").call_timeout(), Ok(MAX_CALL_TIMEOUT));
        assert_eq!(
            with("876000h").call_timeout(),
            Err("spec.callTimeout: \"876000h\" is longer than the longest allowed, 5m".into())
        );
        assert_eq!(
            with("0s").call_timeout(),
            Err("spec.callTimeout: \"0s\" must be a duration above zero".into())
        );
    }
}
