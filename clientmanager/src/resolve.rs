//! Loading stores and provider objects from the API server.

use std::fmt;
use std::sync::Arc;

use api::conditions::{ConditionStatus, READY, find};
use api::store::{ClusterSecretStore, ProviderRef, SecretStore, SecretStoreSpec};
use api::{CLUSTER_PROVIDERS_GROUP, PROVIDERS_GROUP};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject};
use kube::{Api, ResourceExt};
use provider::{ProviderIdentity, Registry};
use serde_json::Value;

use crate::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreKind {
    SecretStore,
    ClusterSecretStore,
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::SecretStore => api::store::SECRET_STORE_KIND,
            Self::ClusterSecretStore => api::store::CLUSTER_SECRET_STORE_KIND,
        })
    }
}

impl StoreKind {
    /// ESO's rule: an empty or unknown kind means SecretStore.
    pub fn parse(kind: Option<&str>) -> Self {
        match kind {
            Some(api::store::CLUSTER_SECRET_STORE_KIND) => Self::ClusterSecretStore,
            _ => Self::SecretStore,
        }
    }
}

/// A store as an ExternalSecret or PushSecret names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StoreRef {
    pub kind: StoreKind,
    pub name: String,
}

/// The parts of a store the client manager needs, for either kind.
#[derive(Clone, Debug)]
pub struct LoadedStore {
    pub kind: StoreKind,
    /// `None` for a ClusterSecretStore.
    pub namespace: Option<String>,
    pub name: String,
    pub spec: SecretStoreSpec,
    pub ready: bool,
}

impl LoadedStore {
    pub fn from_secret_store(store: &SecretStore) -> Self {
        Self {
            kind: StoreKind::SecretStore,
            namespace: store.namespace(),
            name: store.name_any(),
            spec: store.spec.clone(),
            ready: is_ready(store.status.as_ref().map(|s| s.conditions.as_slice())),
        }
    }

    pub fn from_cluster_secret_store(store: &ClusterSecretStore) -> Self {
        Self {
            kind: StoreKind::ClusterSecretStore,
            namespace: None,
            name: store.name_any(),
            spec: store.spec.store.clone(),
            ready: is_ready(store.status.as_ref().map(|s| s.conditions.as_slice())),
        }
    }
}

fn is_ready(conditions: Option<&[api::conditions::Condition]>) -> bool {
    conditions
        .and_then(|c| find(c, READY))
        .is_some_and(|c| c.status == ConditionStatus::True)
}

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

/// Design 007's `GetProviderRefFromStore` for a store without `providerRef`: the provider object
/// the store reconciler generates carries the store's name, in the store's scope.
pub fn derived_provider_ref(
    registry: &Registry,
    kind: StoreKind,
    name: &str,
    spec: &SecretStoreSpec,
) -> Result<ProviderRef> {
    let (provider, _) = inline_provider(registry, kind, name, spec)?;
    let group = match kind {
        StoreKind::SecretStore => PROVIDERS_GROUP,
        StoreKind::ClusterSecretStore => CLUSTER_PROVIDERS_GROUP,
    };
    Ok(ProviderRef {
        api_version: format!("{group}/{}", api::provider_kinds::VERSION),
        kind: provider.kind().to_owned(),
        name: name.to_owned(),
    })
}

/// The registered provider of a store's inline `spec.provider` and that provider's JSON.
pub fn inline_provider(
    registry: &Registry,
    kind: StoreKind,
    name: &str,
    spec: &SecretStoreSpec,
) -> Result<(Arc<dyn provider::Provider>, Value)> {
    let no_provider = || Error::NoProvider {
        kind,
        name: name.to_owned(),
    };
    let inline = spec.provider.as_ref().ok_or_else(no_provider)?;
    let Ok(Value::Object(map)) = serde_json::to_value(inline) else {
        return Err(no_provider());
    };
    let mut entries = map.into_iter();
    let (Some((key, value)), None) = (entries.next(), entries.next()) else {
        return Err(no_provider());
    };
    let provider = registry
        .by_store_key(&key)
        .ok_or_else(|| Error::UnknownProviderKind {
            api_version: format!("spec.provider.{key}"),
            kind: key.clone(),
        })?;
    Ok((provider.clone(), value))
}

/// The API resource of a provider kind in one of the two provider groups.
pub fn provider_resource(
    registry: &Registry,
    reference: &ProviderRef,
) -> Result<(Arc<dyn provider::Provider>, ApiResource)> {
    let unknown = || Error::UnknownProviderKind {
        api_version: reference.api_version.clone(),
        kind: reference.kind.clone(),
    };
    let (group, version) = reference.api_version.split_once('/').ok_or_else(unknown)?;
    if group != PROVIDERS_GROUP && group != CLUSTER_PROVIDERS_GROUP {
        return Err(unknown());
    }
    let provider = registry.by_kind(&reference.kind).ok_or_else(unknown)?;
    Ok((
        provider.clone(),
        ApiResource {
            group: group.to_owned(),
            version: version.to_owned(),
            api_version: reference.api_version.clone(),
            kind: reference.kind.clone(),
            plural: provider.plural().to_owned(),
        },
    ))
}

/// `<plural>.<group>` of a provider resource.
pub fn provider_crd_name(resource: &ApiResource) -> String {
    format!("{}.{}", resource.plural, resource.group)
}

/// A provider object as loaded from the API server.
#[derive(Clone)]
pub struct ProviderObject {
    pub provider: Arc<dyn provider::Provider>,
    pub identity: ProviderIdentity,
    pub uid: Option<String>,
    pub generation: Option<i64>,
    pub spec: Value,
}

impl ProviderObject {
    pub fn from_dynamic(provider: Arc<dyn provider::Provider>, obj: &DynamicObject) -> Self {
        Self {
            identity: ProviderIdentity {
                kind: provider.kind().to_owned(),
                namespace: obj.namespace(),
                name: obj.name_any(),
            },
            provider,
            uid: obj.uid(),
            generation: obj.metadata.generation,
            spec: obj.data.get("spec").cloned().unwrap_or(Value::Null),
        }
    }
}

pub(crate) async fn load_provider(
    kube: &kube::Client,
    registry: &Registry,
    watched: &crate::cache::Caches,
    reference: &ProviderRef,
    store_namespace: Option<&str>,
) -> Result<ProviderObject> {
    let (provider, resource) = provider_resource(registry, reference)?;
    let namespace = store_namespace.filter(|_| resource.group == PROVIDERS_GROUP);
    if let Some(obj) = watched.provider(&resource, namespace, &reference.name) {
        return Ok(ProviderObject::from_dynamic(provider, &obj));
    }
    let api: Api<DynamicObject> = match store_namespace {
        Some(ns) if resource.group == PROVIDERS_GROUP => {
            Api::namespaced_with(kube.clone(), ns, &resource)
        }
        _ => Api::all_with(kube.clone(), &resource),
    };
    match api.get_opt(&reference.name).await {
        Ok(Some(obj)) => Ok(ProviderObject::from_dynamic(provider, &obj)),
        Ok(None) => Err(missing(kube, &resource, reference).await),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            Err(missing(kube, &resource, reference).await)
        }
        Err(source) => Err(Error::ProviderGet {
            kind: reference.kind.clone(),
            name: reference.name.clone(),
            source,
        }),
    }
}

/// Tells a missing object from a missing CRD, so the store can say which to install.
async fn missing(kube: &kube::Client, resource: &ApiResource, reference: &ProviderRef) -> Error {
    let crd = provider_crd_name(resource);
    let crds: Api<CustomResourceDefinition> = Api::all(kube.clone());
    match crds.get_opt(&crd).await {
        Ok(None) => Error::ProviderNotInstalled {
            kind: reference.kind.clone(),
            crd,
        },
        _ => Error::ProviderObjectMissing {
            kind: reference.kind.clone(),
            name: reference.name.clone(),
        },
    }
}
