//! Loading stores and provider objects from the API server.

use std::sync::Arc;

use api::provider_kinds::Scope;
use api::store::{ClusterSecretStore, ProviderRef, SecretStore};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject};
use kube::{Api, ResourceExt};
use provider::{ProviderIdentity, ProviderRegistry};
use serde_json::Value;

use crate::cache::Caches;
use crate::store::{LoadedStore, StoreKind, StoreRef};
use crate::{Error, Result};

pub(crate) async fn load_store(
    kube: &kube::Client,
    store: &StoreRef,
    namespace: &str,
) -> Result<LoadedStore> {
    // A misspelt store name is the common case: say so plainly, not with the API's status dump.
    let err = |source| match source {
        kube::Error::Api(status) if status.code == 404 => Error::StoreMissing {
            kind: store.kind,
            name: store.name.clone(),
        },
        source => Error::StoreGet {
            kind: store.kind,
            name: store.name.clone(),
            source,
        },
    };
    match store.kind {
        StoreKind::SecretStore => {
            let api: Api<SecretStore> = Api::namespaced(kube.clone(), namespace);
            Ok(LoadedStore::from_secret_store(
                &api.get(&store.name).await.map_err(err)?,
            ))
        }
        StoreKind::ClusterSecretStore => {
            let api: Api<ClusterSecretStore> = Api::all(kube.clone());
            Ok(LoadedStore::from_cluster_secret_store(
                &api.get(&store.name).await.map_err(err)?,
            ))
        }
    }
}

/// The provider of a kind this operator was not built with: named as such when the API knows the
/// kind, so the user installs the right build rather than hunting for a typo.
pub(crate) fn not_compiled_in(
    registry: &ProviderRegistry,
    kind: Option<&str>,
    written: &str,
) -> Error {
    match kind {
        Some(kind) => Error::NotCompiledIn {
            kind: kind.to_owned(),
            compiled_in: registry.kinds().join(", "),
        },
        None => Error::UnknownProviderKind {
            written: written.to_owned(),
        },
    }
}

/// The compiled-in provider of `reference` and its API resource at the storage version.
pub fn provider_resource(
    registry: &ProviderRegistry,
    reference: &ProviderRef,
) -> Result<(Arc<dyn provider::Provider>, Scope, ApiResource)> {
    let written = format!("{} {}", reference.api_version, reference.kind);
    let foreign = || Error::NeedsRuntime {
        written: written.clone(),
    };
    let (group, version) = reference.api_version.split_once('/').ok_or_else(foreign)?;
    let scope = Scope::of_group(group).ok_or_else(foreign)?;
    let provider = registry.by_kind(&reference.kind).ok_or_else(|| {
        match api::providers::ALL
            .iter()
            .find(|d| d.kind == reference.kind)
        {
            Some(known) => not_compiled_in(registry, Some(known.kind), &written),
            None => foreign(),
        }
    })?;
    let descriptor = provider.descriptor();
    if !descriptor.serves(version) {
        return Err(Error::VersionNotServed {
            kind: reference.kind.clone(),
            version: version.to_owned(),
            served: descriptor
                .versions
                .iter()
                .map(|v| v.name)
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    // Read at the storage version whichever version the reference names: the provider code
    // knows that one shape, and the API server converts the rest (design 007: a store's
    // providerRef may name any served version).
    Ok((provider.clone(), scope, descriptor.storage_resource(scope)))
}

/// A provider object as loaded from the API server.
#[derive(Clone)]
pub struct ProviderObject {
    pub provider: Arc<dyn provider::Provider>,
    pub identity: ProviderIdentity,
    pub api_version: String,
    pub uid: Option<String>,
    pub generation: Option<i64>,
    pub spec: Value,
}

impl ProviderObject {
    pub fn from_dynamic(provider: Arc<dyn provider::Provider>, obj: &DynamicObject) -> Self {
        Self {
            identity: ProviderIdentity {
                kind: provider.descriptor().kind.to_owned(),
                namespace: obj.namespace(),
                name: obj.name_any(),
            },
            api_version: obj
                .types
                .as_ref()
                .map(|t| t.api_version.clone())
                .unwrap_or_default(),
            provider,
            uid: obj.uid(),
            generation: obj.metadata.generation,
            spec: obj.data.get("spec").cloned().unwrap_or(Value::Null),
        }
    }
}

pub(crate) async fn load_provider(
    kube: &kube::Client,
    registry: &ProviderRegistry,
    watched: &Caches,
    reference: &ProviderRef,
    store_namespace: Option<&str>,
) -> Result<ProviderObject> {
    let (provider, scope, resource) = provider_resource(registry, reference)?;
    let namespace = store_namespace.filter(|_| scope == Scope::Namespaced);
    if !watched.watches(&resource) {
        // At a start, before its controller has filled its cache: not an error to report.
        watched.discovery_settled().await;
    }
    if let Some(obj) = watched.provider(&resource, namespace, &reference.name) {
        return Ok(ProviderObject::from_dynamic(provider, &obj));
    }
    let crd = provider.descriptor().crd_name(scope);
    // A kind is read only once its controller watches it: before that its CRD is missing, or
    // (a chart upgrade that enables a provider installs the CRD before the RBAC) reading it
    // would be refused.
    if !watched.watches(&resource) {
        return Err(match missing(kube, crd.clone(), reference).await {
            not_installed @ Error::ProviderNotInstalled { .. } => not_installed,
            _ => Error::ProviderNotWatched {
                kind: reference.kind.clone(),
                crd,
            },
        });
    }
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(kube.clone(), ns, &resource),
        None => Api::all_with(kube.clone(), &resource),
    };
    match api.get_opt(&reference.name).await {
        Ok(Some(obj)) => Ok(ProviderObject::from_dynamic(provider, &obj)),
        Ok(None) => Err(missing(kube, crd, reference).await),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            Err(missing(kube, crd, reference).await)
        }
        Err(source) => Err(Error::ProviderGet {
            kind: reference.kind.clone(),
            name: reference.name.clone(),
            source,
        }),
    }
}

/// Tells a missing object from a missing CRD, so the store can say which to install.
async fn missing(kube: &kube::Client, crd: String, reference: &ProviderRef) -> Error {
    let crds: Api<CustomResourceDefinition> = Api::all(kube.clone());
    match crds.get_opt(&crd).await {
        Ok(None) => Error::provider_not_installed(&reference.kind, crd),
        _ => Error::ProviderObjectMissing {
            kind: reference.kind.clone(),
            name: reference.name.clone(),
        },
    }
}
