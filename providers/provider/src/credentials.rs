//! What a provider may read from the cluster to log in: one key of a Secret or a ConfigMap, or a
//! token of a ServiceAccount. Nothing wider, so the same provider code works in-process, behind a
//! gRPC adapter, and in tests fed from memory.

use std::collections::BTreeMap;
use std::fmt;

use async_trait::async_trait;

use api::meta::{CaProvider, CaProviderType};

use crate::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CredentialKind {
    Secret,
    ConfigMap,
    /// A token requested for the ServiceAccount (TokenRequest).
    ServiceAccountToken,
}

/// An object a client's credentials come from. The client manager watches it, so a rotated
/// credential gives a new client.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CredentialRef {
    pub kind: CredentialKind,
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for CredentialRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            CredentialKind::Secret => "Secret",
            CredentialKind::ConfigMap => "ConfigMap",
            CredentialKind::ServiceAccountToken => "ServiceAccount",
        };
        write!(f, "{kind} {}/{}", self.namespace, self.name)
    }
}

/// Reads credentials on a provider's behalf. Implementations refuse what the caller may not
/// read (another namespace for a SecretStore), so a provider cannot widen its reach.
#[async_trait]
pub trait CredentialsReader: Send + Sync {
    async fn secret_key(&self, namespace: &str, name: &str, key: &str) -> Result<Vec<u8>>;
    async fn config_map_key(&self, namespace: &str, name: &str, key: &str) -> Result<String>;
    async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
        audiences: &[String],
    ) -> Result<String>;
    /// The ServiceAccount's annotations: IRSA names the role its tokens may assume in one
    /// (`eks.amazonaws.com/role-arn`). Same object, so same kind, as its tokens.
    async fn service_account_annotations(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<BTreeMap<String, String>>;
}

/// Credentials held in memory: for tests, and for providers that need none.
#[derive(Clone, Debug, Default)]
pub struct StaticCredentials {
    /// By (namespace, name, key).
    pub secrets: BTreeMap<(String, String, String), Vec<u8>>,
    pub config_maps: BTreeMap<(String, String, String), String>,
    /// By (namespace, service account name).
    pub tokens: BTreeMap<(String, String), String>,
    /// By (namespace, service account name).
    pub service_accounts: BTreeMap<(String, String), BTreeMap<String, String>>,
}

fn missing(kind: CredentialKind, namespace: &str, name: &str, what: &str) -> Error {
    let reference = CredentialRef {
        kind,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    };
    Error::Credentials {
        reference: reference.to_string(),
        reason: format!("{what} not found"),
    }
}

fn key(namespace: &str, name: &str, key: &str) -> (String, String, String) {
    (namespace.to_owned(), name.to_owned(), key.to_owned())
}

#[async_trait]
impl CredentialsReader for StaticCredentials {
    async fn secret_key(&self, namespace: &str, name: &str, k: &str) -> Result<Vec<u8>> {
        self.secrets
            .get(&key(namespace, name, k))
            .cloned()
            .ok_or_else(|| {
                missing(
                    CredentialKind::Secret,
                    namespace,
                    name,
                    &format!("key {k:?}"),
                )
            })
    }

    async fn config_map_key(&self, namespace: &str, name: &str, k: &str) -> Result<String> {
        self.config_maps
            .get(&key(namespace, name, k))
            .cloned()
            .ok_or_else(|| {
                missing(
                    CredentialKind::ConfigMap,
                    namespace,
                    name,
                    &format!("key {k:?}"),
                )
            })
    }

    async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
        _audiences: &[String],
    ) -> Result<String> {
        self.tokens
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
            .ok_or_else(|| {
                missing(
                    CredentialKind::ServiceAccountToken,
                    namespace,
                    name,
                    "token",
                )
            })
    }

    async fn service_account_annotations(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<BTreeMap<String, String>> {
        self.service_accounts
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
            .ok_or_else(|| {
                missing(
                    CredentialKind::ServiceAccountToken,
                    namespace,
                    name,
                    "ServiceAccount",
                )
            })
    }
}

/// The PEM text of ESO's `caBundle` and `caProvider` (key `ca.crt` unless named), in that order:
/// what a provider's HTTP client trusts. `caProvider`'s namespace was resolved by the referent
/// rule before the client is built.
pub async fn ca_pems(
    ca_bundle: Option<&[u8]>,
    ca_provider: Option<&CaProvider>,
    credentials: &dyn CredentialsReader,
) -> Result<Vec<Vec<u8>>> {
    let mut pems: Vec<Vec<u8>> = ca_bundle.map(<[u8]>::to_vec).into_iter().collect();
    if let Some(ca) = ca_provider {
        let (namespace, key) = (
            ca.namespace.as_deref().unwrap_or_default(),
            ca.key.as_deref().unwrap_or("ca.crt"),
        );
        pems.push(match ca.type_ {
            CaProviderType::Secret => credentials.secret_key(namespace, &ca.name, key).await?,
            CaProviderType::ConfigMap => credentials
                .config_map_key(namespace, &ca.name, key)
                .await?
                .into_bytes(),
        });
    }
    Ok(pems)
}
