//! The provider contract (design 007's `Provider` with `Convert` and `ApplyReferent`, and ESO's
//! `SecretsClient`), in two halves:
//!
//! - [`ProviderSchema`]: synchronous and cluster-free (descriptor, conversion, spec checks,
//!   referent namespaces). The operator calls it while reconciling stores.
//! - [`ProviderRuntime`]: building a client. It sees the provider object's apiVersion, its spec
//!   and a narrow [`CredentialsReader`], never a `kube::Client`, so the same provider code can run
//!   behind a gRPC server and tests can feed credentials without a cluster.
//!
//! Everything that crosses this boundary is owned data (JSON specs, plain request structs).

mod credentials;
pub mod json_path;
pub mod referent;
mod registry;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use api::provider_kinds::Capabilities;
pub use api::provider_kinds::Descriptor;
pub use credentials::{
    CredentialKind, CredentialRef, CredentialsReader, StaticCredentials, ca_pems,
};
pub use registry::ProviderRegistry;

/// Who asks for a client. It decides which namespace a credential reference without an explicit
/// namespace resolves to (ESO's referent authentication).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Caller {
    SecretStore,
    ClusterSecretStore,
    Provider,
    ClusterProvider,
}

impl Caller {
    /// Callers bound to one namespace, which their credentials may not leave.
    pub fn is_namespaced(self) -> bool {
        matches!(self, Self::SecretStore | Self::Provider)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The remote secret is absent; drives ExternalSecret `deletionPolicy`.
    #[error("Secret does not exist")]
    NoSecret,
    #[error("invalid provider configuration: {0}")]
    InvalidSpec(String),
    #[error("could not read {reference}: {reason}")]
    Credentials { reference: String, reason: String },
    #[error("{0}")]
    Backend(String),
    /// The provider could not be reached or answered that it cannot serve now (a transport
    /// error, a 5xx such as a sealed Vault): asking again at once is pointless.
    #[error("{0}")]
    Unavailable(String),
    /// The backend refuses on purpose, e.g. a push over a remote secret this operator does not
    /// manage: asking again changes nothing until someone acts.
    #[error("{0}")]
    Conflict(String),
    /// `provider` is empty when a provider server answered that it has no such method (an
    /// older or foreign server), which is all that is known then.
    #[error("{}", unsupported(provider, operation))]
    Unsupported { provider: String, operation: String },
}

fn unsupported(provider: &str, operation: &str) -> String {
    if provider.is_empty() {
        format!("this provider server does not support {operation}")
    } else {
        format!("{operation} is not supported by the {provider} provider")
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Deserializes a provider spec, naming what was wrong with it.
pub fn parse_spec<T: DeserializeOwned>(spec: &Value) -> Result<T> {
    serde_json::from_value(spec.clone()).map_err(|e| Error::InvalidSpec(e.to_string()))
}

/// Where the spec a client is built from came from: identifies the provider object.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProviderIdentity {
    pub kind: String,
    /// `None` for a cluster-scoped provider object.
    pub namespace: Option<String>,
    pub name: String,
}

/// Everything needed to build a client.
#[derive(Clone, Debug)]
pub struct ClientRequest {
    pub provider: ProviderIdentity,
    /// The apiVersion the spec is written in, so a provider with several versions reads it right.
    pub api_version: String,
    /// The provider object's spec after `apply_referent`.
    pub spec: Value,
    /// The namespace the client works for (the consumer's namespace).
    pub namespace: String,
}

/// Outcome of a spec check that needs no backend.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecReport {
    pub warnings: Vec<String>,
}

/// Outcome of `SecretsClient::validate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validation {
    Ready,
    /// The backend cannot be checked from here (e.g. referent credentials); the store is usable.
    Unknown,
}

/// ESO's `ExternalSecretDataRemoteRef`, the parts a provider sees.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemoteRef {
    pub key: String,
    pub property: Option<String>,
    pub version: Option<String>,
    /// ESO's `metadataPolicy: Fetch`: read the secret's metadata instead of its value.
    pub fetch_metadata: bool,
}

/// ESO's `ExternalSecretFind`, the parts a provider sees.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FindRequest {
    pub path: Option<String>,
    pub name_regexp: Option<String>,
    pub tags: BTreeMap<String, String>,
}

/// Where a pushed value goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PushRemoteRef {
    pub remote_key: String,
    pub property: Option<String>,
}

/// One value to push.
#[derive(Clone, Debug, PartialEq)]
pub struct PushRequest {
    pub remote: PushRemoteRef,
    /// The source Secret's key, or `None` when the whole Secret is pushed as a JSON object.
    pub secret_key: Option<String>,
    pub value: Vec<u8>,
    /// Provider-specific metadata from the PushSecret.
    pub metadata: Option<Value>,
    /// The source Secret's type, labels and annotations (after the PushSecret's template).
    pub source: PushSource,
}

/// What a push carries of the source Secret besides its data: providers whose remote secrets
/// have a type and metadata of their own (the Kubernetes provider) copy them, as ESO does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PushSource {
    /// `None` when the source says nothing (a Secret's type defaults to `Opaque`).
    pub type_: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// A push of a whole Secret (or a bundle of its keys) carries them as one JSON object of strings.
/// Fails with the first key whose value is not UTF-8.
pub fn whole_secret_json<'a>(
    entries: impl IntoIterator<Item = (&'a String, &'a [u8])>,
) -> Result<Vec<u8>, String> {
    let mut object = serde_json::Map::new();
    for (k, v) in entries {
        let text = std::str::from_utf8(v).map_err(|_| k.clone())?;
        object.insert(k.clone(), Value::String(text.to_owned()));
    }
    Ok(Value::Object(object).to_string().into_bytes())
}

/// The keys of a whole-Secret push again, as [`whole_secret_json`] wrote them; a value that is
/// not such an object yields nothing.
pub fn whole_secret_entries(value: &[u8]) -> std::collections::HashMap<String, Vec<u8>> {
    match serde_json::from_slice::<serde_json::Map<String, Value>>(value) {
        Ok(object) => object
            .into_iter()
            .filter_map(|(k, v)| match v {
                Value::String(s) => Some((k, s.into_bytes())),
                _ => None,
            })
            .collect(),
        Err(_) => Default::default(),
    }
}

/// The half of the contract that needs neither a cluster nor the backend.
pub trait ProviderSchema: Send + Sync {
    /// The provider's kinds, as the API crate defines them.
    fn descriptor(&self) -> &'static Descriptor;

    fn capabilities(&self) -> Capabilities;

    /// Turns a store's inline `spec.provider.<key>` into the provider object's spec at the kind's
    /// storage version. Today the two share one schema, so the default only checks the spec.
    fn convert(&self, inline: &Value) -> Result<Value> {
        self.validate_spec(inline)?;
        Ok(inline.clone())
    }

    /// Resolves namespaces of credential references for `caller` working in `namespace`. The
    /// result may depend on the caller only through `Caller::is_namespaced`: the client manager
    /// shares one client (one login) between callers of the same scope.
    fn apply_referent(&self, spec: Value, caller: Caller, namespace: &str) -> Result<Value>;

    /// Static checks; errors name the offending field.
    fn validate_spec(&self, spec: &Value) -> Result<SpecReport>;

    /// What a client built from `spec` (after `apply_referent`) for `namespace` reads its
    /// credentials from. The client manager watches these and rebuilds the client when one
    /// changes.
    fn credential_refs(&self, _spec: &Value, _namespace: &str) -> Vec<CredentialRef> {
        Vec::new()
    }

    /// Every kind [`credential_refs`](Self::credential_refs) names for some spec: what a
    /// process that runs this provider must be allowed to read (the chart's RBAC follows it).
    fn credential_kinds(&self) -> std::collections::BTreeSet<CredentialKind> {
        std::collections::BTreeSet::new()
    }
}

/// The half of the contract that talks to the backend.
#[async_trait]
pub trait ProviderRuntime: Send + Sync {
    async fn new_client(
        &self,
        request: ClientRequest,
        credentials: Arc<dyn CredentialsReader>,
    ) -> Result<Box<dyn SecretsClient>>;

    /// Metrics of the provider's own (login counts, say), registered once by the operator.
    fn register_metrics(&self, _registry: &mut prometheus_client::registry::Registry) {}
}

/// A whole provider: both halves.
pub trait Provider: ProviderSchema + ProviderRuntime {}

impl<T: ProviderSchema + ProviderRuntime> Provider for T {}

/// ESO's `SecretsClient`.
#[async_trait]
pub trait SecretsClient: Send + Sync {
    async fn get_secret(&self, remote: &RemoteRef) -> Result<Vec<u8>>;
    async fn get_secret_map(&self, remote: &RemoteRef) -> Result<BTreeMap<String, Vec<u8>>>;
    async fn get_all_secrets(&self, find: &FindRequest) -> Result<BTreeMap<String, Vec<u8>>>;
    async fn push_secret(&self, push: &PushRequest) -> Result<()>;
    async fn delete_secret(&self, remote: &PushRemoteRef) -> Result<()>;
    async fn secret_exists(&self, remote: &PushRemoteRef) -> Result<bool>;
    async fn validate(&self) -> Result<Validation>;
    /// What the last `validate` warned about, for a client whose backend says so (a provider
    /// server's `ValidateResponse.warnings`); in process the spec check gives the warnings.
    fn validation_warnings(&self) -> Vec<String> {
        Vec::new()
    }
    async fn close(&self) -> Result<()>;
}
