//! Where a store's provider runs: in this process, or behind the gRPC server of a
//! `ProviderClass`/`ClusterProviderClass` (the store's `spec.runtimeRef`, or the operator's route
//! for the provider's kind). Out of process, the client is a [`RemoteClient`] on a pooled
//! connection; the server loads the provider object and its credentials itself.

use std::collections::BTreeMap;

use api::provider_class::{
    CLUSTER_PROVIDER_CLASS_KIND, ClusterProviderClass, DEFAULT_TLS_SECRET, PROVIDER_CLASS_KIND,
    ProviderClass, ProviderClassSpec,
};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};
use provider::{Caller, CredentialKind, CredentialRef};
use provider_protocol::v1;
use provider_remote::{Connection, Pool, TlsMaterial};

use crate::store::{LoadedStore, StoreKind};
use crate::{ClientManager, Error, Result};

/// A provider class, as a store or a route names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClassRef {
    /// `None` for a ClusterProviderClass.
    pub namespace: Option<String>,
    pub name: String,
}

impl ClassRef {
    pub fn kind(&self) -> &'static str {
        match self.namespace {
            Some(_) => PROVIDER_CLASS_KIND,
            None => CLUSTER_PROVIDER_CLASS_KIND,
        }
    }

    pub fn cluster(name: impl Into<String>) -> Self {
        Self {
            namespace: None,
            name: name.into(),
        }
    }
}

impl std::fmt::Display for ClassRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind(), self.name),
            None => write!(f, "{} {}", self.kind(), self.name),
        }
    }
}

/// What [`ClientManager::check_class`] found, in the terms of ESO's condition reasons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClassHealth {
    Healthy(provider_remote::Probe),
    TlsFailed(String),
    Unhealthy(String),
}

/// The class loaded, with what a client built through it depends on.
pub(crate) struct LoadedClass {
    pub(crate) reference: ClassRef,
    pub(crate) uid: Option<String>,
    pub(crate) generation: Option<i64>,
    pub(crate) spec: ProviderClassSpec,
}

/// What identifies a remote client's way to its server, so a change of any part yields a new
/// client: the class object and the TLS Secret's version; and the class's call deadline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RuntimeFingerprint {
    class: ClassRef,
    uid: Option<String>,
    generation: Option<i64>,
    tls: CredentialRef,
    tls_version: Option<String>,
    pub(crate) deadline: std::time::Duration,
}

/// Which class, if any, serves `store` whose provider has `kind`: its `runtimeRef`, else the
/// operator's route for the kind.
pub(crate) fn class_of(
    routes: &BTreeMap<String, String>,
    store: &LoadedStore,
    kind: &str,
) -> Result<Option<ClassRef>> {
    match &store.spec.runtime_ref {
        Some(r) if r.kind_or_default() == CLUSTER_PROVIDER_CLASS_KIND => {
            Ok(Some(ClassRef::cluster(&r.name)))
        }
        // The schema refuses this too; a store written before that rule must not slip through.
        Some(_) if store.kind == StoreKind::ClusterSecretStore => Err(Error::RuntimeRef {
            reason: "a ClusterSecretStore may only use a ClusterProviderClass".into(),
        }),
        Some(r) => Ok(Some(ClassRef {
            namespace: store.namespace.clone(),
            name: r.name.clone(),
        })),
        None => Ok(routes.get(kind).map(ClassRef::cluster)),
    }
}

/// The namespace of a Service address `svc.ns.svc...:port` (ESO's rule for the default TLS Secret).
fn service_namespace(address: &str) -> Option<&str> {
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
    let mut labels = host.split('.');
    let (_service, namespace) = (labels.next()?, labels.next()?);
    // An IP address has no Service namespace.
    (host.parse::<std::net::IpAddr>().is_err() && !namespace.is_empty()).then_some(namespace)
}

/// The Secret a class's TLS material is read from.
pub(crate) fn tls_secret(class: &LoadedClass) -> Result<CredentialRef> {
    let spec = &class.spec;
    let name = spec
        .tls_secret_ref
        .as_ref()
        .map_or(DEFAULT_TLS_SECRET, |r| r.name.as_str());
    let written = spec
        .tls_secret_ref
        .as_ref()
        .and_then(|r| r.namespace.as_deref());
    let namespace = match (&class.reference.namespace, written) {
        (Some(own), Some(other)) if own != other => {
            return Err(Error::RuntimeTls {
                class: class.reference.clone(),
                reason: format!(
                    "spec.tlsSecretRef.namespace: a ProviderClass may only use a Secret in its own namespace {own:?}, not {other:?}"
                ),
            });
        }
        (Some(own), _) => own.clone(),
        (None, Some(ns)) => ns.to_owned(),
        (None, None) => service_namespace(&spec.address)
            .ok_or_else(|| Error::RuntimeTls {
                class: class.reference.clone(),
                reason: format!(
                    "spec.tlsSecretRef.namespace: required, since spec.address {:?} names no Service namespace",
                    spec.address
                ),
            })?
            .to_owned(),
    };
    Ok(CredentialRef {
        kind: CredentialKind::Secret,
        namespace,
        name: name.to_owned(),
    })
}

/// Reads the TLS material; the error names the Secret and the key, never a value.
pub(crate) async fn read_tls(
    kube: &kube::Client,
    class: &ClassRef,
    secret: &CredentialRef,
) -> Result<TlsMaterial> {
    let api: Api<Secret> = Api::namespaced(kube.clone(), &secret.namespace);
    let found = api
        .get_opt(&secret.name)
        .await
        .map_err(|e| Error::RuntimeTls {
            class: class.clone(),
            reason: format!("could not read {secret}: {e}"),
        })?
        .ok_or_else(|| Error::RuntimeTls {
            class: class.clone(),
            reason: format!("{secret} does not exist"),
        })?;
    let data = found.data.unwrap_or_default();
    TlsMaterial::from_secret_data(|key| data.get(key).map(|v| v.0.clone())).map_err(|e| {
        Error::RuntimeTls {
            class: class.clone(),
            reason: format!("{secret}: {e}"),
        }
    })
}

/// What a remote client tells the server about the object it reads through and who asks.
pub(crate) fn provider_reference(
    api_version: &str,
    identity: &provider::ProviderIdentity,
    caller: Caller,
    namespace: &str,
) -> v1::ProviderReference {
    let store_ref_kind = if caller.is_namespaced() {
        api::store::SECRET_STORE_KIND
    } else {
        api::store::CLUSTER_SECRET_STORE_KIND
    };
    v1::ProviderReference {
        api_version: api_version.to_owned(),
        kind: identity.kind.clone(),
        name: identity.name.clone(),
        // ESO's rule: a cluster-scoped reference carries the caller's namespace.
        namespace: identity
            .namespace
            .clone()
            .unwrap_or_else(|| namespace.to_owned()),
        store_ref_kind: store_ref_kind.into(),
    }
}

impl ClientManager {
    pub(crate) async fn load_class(&self, class: &ClassRef) -> Result<LoadedClass> {
        let missing = || Error::RuntimeMissing {
            class: class.clone(),
        };
        let get_error = |source| Error::RuntimeGet {
            class: class.clone(),
            source,
        };
        let (uid, generation, spec) = match &class.namespace {
            Some(ns) => {
                let found = match self.watched.provider_class(ns, &class.name) {
                    Some(c) => Some(c),
                    None => Api::<ProviderClass>::namespaced(self.kube.clone(), ns)
                        .get_opt(&class.name)
                        .await
                        .map_err(get_error)?
                        .map(std::sync::Arc::new),
                };
                let found = found.ok_or_else(missing)?;
                (found.uid(), found.metadata.generation, found.spec.clone())
            }
            None => {
                let found = match self.watched.cluster_provider_class(&class.name) {
                    Some(c) => Some(c),
                    None => Api::<ClusterProviderClass>::all(self.kube.clone())
                        .get_opt(&class.name)
                        .await
                        .map_err(get_error)?
                        .map(std::sync::Arc::new),
                };
                let found = found.ok_or_else(missing)?;
                (
                    found.uid(),
                    found.metadata.generation,
                    found.spec.class.clone(),
                )
            }
        };
        Ok(LoadedClass {
            reference: class.clone(),
            uid,
            generation,
            spec,
        })
    }

    /// What a client through `class` depends on, from the watch caches, and the server's
    /// address.
    pub(crate) async fn runtime_fingerprint(
        &self,
        class: &ClassRef,
    ) -> Result<(RuntimeFingerprint, String)> {
        let loaded = self.load_class(class).await?;
        let deadline = loaded
            .spec
            .call_timeout()
            .map_err(|reason| Error::RuntimeSpec {
                class: class.clone(),
                reason,
            })?;
        let tls = tls_secret(&loaded)?;
        let tls_version = self.credentials.version(&tls).await?;
        Ok((
            RuntimeFingerprint {
                class: class.clone(),
                uid: loaded.uid,
                generation: loaded.generation,
                tls,
                tls_version,
                deadline,
            },
            loaded.spec.address,
        ))
    }

    /// The pooled connection to `address` with the TLS material `runtime` names.
    pub(crate) async fn connection(
        &self,
        runtime: &RuntimeFingerprint,
        address: &str,
    ) -> Result<Connection> {
        let material = read_tls(&self.kube, &runtime.class, &runtime.tls).await?;
        self.pool
            .get(address, Some(&material))
            .map_err(|e| Error::RuntimeTls {
                class: runtime.class.clone(),
                reason: e.to_string(),
            })
    }

    /// Whether `class`'s server can be used: its TLS material, its gRPC health, its methods.
    pub async fn check_class(&self, class: &ClassRef) -> ClassHealth {
        let tls_failed = |e: Error| ClassHealth::TlsFailed(e.to_string());
        let (runtime, address) = match self.runtime_fingerprint(class).await {
            Ok(found) => found,
            Err(e @ (Error::RuntimeTls { .. } | Error::Credentials { .. })) => {
                return tls_failed(e);
            }
            Err(e) => return ClassHealth::Unhealthy(e.to_string()),
        };
        let connection = match self.connection(&runtime, &address).await {
            Ok(c) => c,
            Err(e) => return tls_failed(e),
        };
        match provider_remote::probe(&connection).await {
            Ok(probe) => ClassHealth::Healthy(probe),
            Err(reason) => ClassHealth::Unhealthy(reason),
        }
    }

    /// The pool every remote client's connection comes from.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_tls_secret_lives_in_the_service_namespace() {
        assert_eq!(
            service_namespace("provider-vault.external-secrets.svc:8080"),
            Some("external-secrets")
        );
        assert_eq!(
            service_namespace("provider-vault.tools.svc.cluster.local:8080"),
            Some("tools")
        );
        assert_eq!(service_namespace("127.0.0.1:8080"), None);
        assert_eq!(service_namespace("localhost:8080"), None);
    }

    fn class(namespace: Option<&str>, tls: Option<(&str, Option<&str>)>) -> LoadedClass {
        LoadedClass {
            reference: ClassRef {
                namespace: namespace.map(str::to_owned),
                name: "vault".into(),
            },
            uid: None,
            generation: None,
            spec: ProviderClassSpec {
                address: "provider-vault.secrets.svc:8080".into(),
                tls_secret_ref: tls.map(|(name, ns)| api::provider_class::TlsSecretRef {
                    name: name.into(),
                    namespace: ns.map(str::to_owned),
                }),
                call_timeout: None,
            },
        }
    }

    #[test]
    fn a_class_finds_its_tls_secret_by_eso_rules_and_a_namespaced_one_stays_home() {
        let at = |c: &LoadedClass| tls_secret(c).map(|r| format!("{}/{}", r.namespace, r.name));
        assert_eq!(
            at(&class(None, None)).unwrap(),
            "secrets/external-secrets-provider-tls"
        );
        assert_eq!(
            at(&class(None, Some(("mine", Some("pki"))))).unwrap(),
            "pki/mine"
        );
        assert_eq!(
            at(&class(Some("team"), None)).unwrap(),
            "team/external-secrets-provider-tls"
        );
        let err = at(&class(Some("team"), Some(("mine", Some("pki"))))).unwrap_err();
        assert!(
            err.to_string().contains("spec.tlsSecretRef.namespace"),
            "{err}"
        );
    }
}
