//! Credentials as the client manager hands them to providers: read through a reader that stays
//! inside the caller's namespace, and watched so a rotated credential gives a new client
//! without a GET on every `client()` call.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use kube::api::PostParams;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use provider::{Caller, CredentialKind, CredentialRef, CredentialsReader};
use tracing::debug;

use crate::{Error, Result};

/// The one rule for every credential a provider reads: a SecretStore or a namespaced provider
/// object stays in its own namespace, whatever the provider's `apply_referent` resolved.
pub(crate) fn check_scope(caller: Caller, home: &str, reference: &CredentialRef) -> Result<()> {
    if caller.is_namespaced() && reference.namespace != home {
        return Err(Error::CredentialOutsideNamespace {
            reference: reference.to_string(),
            namespace: home.to_owned(),
        });
    }
    Ok(())
}

/// Reads credentials from the API server for one caller.
pub(crate) struct KubeCredentials {
    pub(crate) kube: kube::Client,
    pub(crate) caller: Caller,
    /// The caller's namespace.
    pub(crate) home: String,
}

impl KubeCredentials {
    fn allowed(&self, kind: CredentialKind, namespace: &str, name: &str) -> provider::Result<()> {
        let reference = CredentialRef {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
        check_scope(self.caller, &self.home, &reference).map_err(|e| provider::Error::Credentials {
            reference: reference.to_string(),
            reason: e.to_string(),
        })
    }
}

fn read_error(
    kind: CredentialKind,
    namespace: &str,
    name: &str,
    reason: String,
) -> provider::Error {
    let reference = CredentialRef {
        kind,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    };
    provider::Error::Credentials {
        reference: reference.to_string(),
        reason,
    }
}

#[async_trait]
impl CredentialsReader for KubeCredentials {
    async fn secret_key(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> provider::Result<Vec<u8>> {
        let kind = CredentialKind::Secret;
        self.allowed(kind, namespace, name)?;
        let api: Api<Secret> = Api::namespaced(self.kube.clone(), namespace);
        let secret = api
            .get(name)
            .await
            .map_err(|e| read_error(kind, namespace, name, e.to_string()))?;
        secret
            .data
            .and_then(|mut d| d.remove(key))
            .map(|v| v.0)
            .ok_or_else(|| read_error(kind, namespace, name, format!("no key {key:?}")))
    }

    async fn config_map_key(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> provider::Result<String> {
        let kind = CredentialKind::ConfigMap;
        self.allowed(kind, namespace, name)?;
        let api: Api<ConfigMap> = Api::namespaced(self.kube.clone(), namespace);
        let map = api
            .get(name)
            .await
            .map_err(|e| read_error(kind, namespace, name, e.to_string()))?;
        map.data
            .and_then(|mut d| d.remove(key))
            .ok_or_else(|| read_error(kind, namespace, name, format!("no key {key:?}")))
    }

    async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
        audiences: &[String],
    ) -> provider::Result<String> {
        let kind = CredentialKind::ServiceAccountToken;
        self.allowed(kind, namespace, name)?;
        let api: Api<ServiceAccount> = Api::namespaced(self.kube.clone(), namespace);
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: audiences.to_vec(),
                ..TokenRequestSpec::default()
            },
            ..TokenRequest::default()
        };
        let answer = api
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .map_err(|e| read_error(kind, namespace, name, e.to_string()))?;
        answer
            .status
            .map(|s| s.token)
            .ok_or_else(|| read_error(kind, namespace, name, "empty TokenRequest answer".into()))
    }

    async fn service_account_annotations(
        &self,
        namespace: &str,
        name: &str,
    ) -> provider::Result<std::collections::BTreeMap<String, String>> {
        let kind = CredentialKind::ServiceAccountToken;
        self.allowed(kind, namespace, name)?;
        let api: Api<ServiceAccount> = Api::namespaced(self.kube.clone(), namespace);
        let account = api
            .get_metadata(name)
            .await
            .map_err(|e| read_error(kind, namespace, name, e.to_string()))?;
        Ok(account.metadata.annotations.unwrap_or_default())
    }
}

type Versions = Mutex<HashMap<CredentialRef, Option<String>>>;

/// resourceVersions of the objects credentials come from. The first use of a reference reads its
/// metadata once; from then on a metadata watch of that kind in that namespace keeps it current.
pub(crate) struct CredentialVersions {
    kube: kube::Client,
    pub(crate) versions: Arc<Versions>,
    watching: Mutex<HashMap<(CredentialKind, String), tokio::task::AbortHandle>>,
}

impl CredentialVersions {
    pub(crate) fn new(kube: kube::Client) -> Self {
        Self {
            kube,
            versions: Arc::default(),
            watching: Mutex::default(),
        }
    }

    pub(crate) async fn version(&self, reference: &CredentialRef) -> Result<Option<String>> {
        if let Some(v) = self.known(reference) {
            return Ok(v);
        }
        self.watch(reference.kind, &reference.namespace);
        let found = self
            .read(reference)
            .await
            .map_err(|source| Error::Credentials {
                reference: reference.to_string(),
                source,
            })?;
        let mut versions = self.versions.lock().expect("credential versions poisoned");
        // The watch may have been quicker; what it saw is at least as new.
        Ok(versions.entry(reference.clone()).or_insert(found).clone())
    }

    fn known(&self, reference: &CredentialRef) -> Option<Option<String>> {
        self.versions
            .lock()
            .expect("credential versions poisoned")
            .get(reference)
            .cloned()
    }

    /// Records a change of a watched object; objects nobody references are not kept.
    pub(crate) fn observe(versions: &Versions, reference: CredentialRef, version: Option<String>) {
        let mut versions = versions.lock().expect("credential versions poisoned");
        if let Some(slot) = versions.get_mut(&reference) {
            *slot = version;
        }
    }

    async fn read(&self, reference: &CredentialRef) -> Result<Option<String>, kube::Error> {
        let (ns, name) = (&reference.namespace, &reference.name);
        let meta = match reference.kind {
            CredentialKind::Secret => Api::<Secret>::namespaced(self.kube.clone(), ns)
                .get_metadata_opt(name)
                .await?
                .map(|m| m.metadata),
            CredentialKind::ConfigMap => Api::<ConfigMap>::namespaced(self.kube.clone(), ns)
                .get_metadata_opt(name)
                .await?
                .map(|m| m.metadata),
            CredentialKind::ServiceAccountToken => {
                Api::<ServiceAccount>::namespaced(self.kube.clone(), ns)
                    .get_metadata_opt(name)
                    .await?
                    .map(|m| m.metadata)
            }
        };
        Ok(meta.and_then(|m| m.resource_version))
    }

    /// Forgets the versions of references no cached client holds, and stops the watches of
    /// namespaces none of them is in: a namespace whose stores are gone costs nothing.
    pub(crate) fn retain(&self, in_use: &HashSet<CredentialRef>) {
        self.versions
            .lock()
            .expect("credential versions poisoned")
            .retain(|reference, _| in_use.contains(reference));
        let live: HashSet<(CredentialKind, &str)> = in_use
            .iter()
            .map(|r| (r.kind, r.namespace.as_str()))
            .collect();
        self.watching
            .lock()
            .expect("credential watches poisoned")
            .retain(|(kind, namespace), task| {
                let keep = live.contains(&(*kind, namespace.as_str()));
                if !keep {
                    task.abort();
                }
                keep
            });
    }

    /// The kinds and namespaces watched.
    #[cfg(test)]
    pub(crate) fn watched(&self) -> HashSet<(CredentialKind, String)> {
        self.watching
            .lock()
            .expect("credential watches poisoned")
            .keys()
            .cloned()
            .collect()
    }

    /// Starts the metadata watch of `kind` in `namespace`, once.
    fn watch(&self, kind: CredentialKind, namespace: &str) {
        let mut watching = self.watching.lock().expect("credential watches poisoned");
        let key = (kind, namespace.to_owned());
        if watching.contains_key(&key) {
            return;
        }
        let versions = Arc::downgrade(&self.versions);
        let kube = self.kube.clone();
        let namespace = namespace.to_owned();
        let task = tokio::spawn(async move {
            match kind {
                CredentialKind::Secret => follow::<Secret>(kube, namespace, kind, versions).await,
                CredentialKind::ConfigMap => {
                    follow::<ConfigMap>(kube, namespace, kind, versions).await
                }
                CredentialKind::ServiceAccountToken => {
                    follow::<ServiceAccount>(kube, namespace, kind, versions).await
                }
            }
        });
        watching.insert(key, task.abort_handle());
    }
}

/// Follows one kind's metadata in one namespace until the client manager is gone.
async fn follow<K>(
    kube: kube::Client,
    namespace: String,
    kind: CredentialKind,
    versions: Weak<Versions>,
) where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    let api: Api<PartialObjectMeta<K>> = Api::namespaced(kube, &namespace);
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(event) = events.next().await {
        let Some(versions) = versions.upgrade() else {
            return;
        };
        let (object, deleted) = match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => (o, false),
            Ok(watcher::Event::Delete(o)) => (o, true),
            Ok(_) => continue,
            Err(e) => {
                debug!(error = %e, %namespace, "watching credentials failed; retrying");
                continue;
            }
        };
        let reference = CredentialRef {
            kind,
            namespace: namespace.clone(),
            name: object.name_any(),
        };
        let version = if deleted {
            None
        } else {
            object.resource_version()
        };
        CredentialVersions::observe(&versions, reference, version);
    }
}
