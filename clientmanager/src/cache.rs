//! Reads of stores, provider objects and namespace labels from the controllers' watch caches, so that a reconcile
//! does not cost two API requests before it reaches the provider. A miss (a cache not filled
//! yet, an object created a moment ago) falls back to a GET.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, OnceLock};

use std::sync::Arc;

use api::provider_class::{ClusterProviderClass, ProviderClass};
use api::provider_kinds::Scope;
use api::store::{ClusterSecretStore, SecretStore, SecretStoreSpec};
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::store::{LoadedStore, StoreKind, StoreRef};

/// A provider kind's cache, with the resource (and so the version) it was built for.
type ProviderCache = (ApiResource, Store<DynamicObject>);

#[derive(Default)]
pub(crate) struct Caches {
    secret_stores: OnceLock<Store<SecretStore>>,
    cluster_secret_stores: OnceLock<Store<ClusterSecretStore>>,
    namespaces: OnceLock<Store<PartialObjectMeta<Namespace>>>,
    provider_classes: OnceLock<Store<ProviderClass>>,
    cluster_provider_classes: OnceLock<Store<ClusterProviderClass>>,
    /// By (group, kind); a kind's cache is here once its first list has filled it.
    providers: Mutex<HashMap<(String, String), ProviderCache>>,
    discovery: Discovery,
}

/// Whether the provider kinds installed when the operator started have been found and their
/// caches filled. Until then a kind not watched yet is not news: its controller is starting.
struct Discovery(tokio::sync::watch::Sender<bool>);

impl Default for Discovery {
    /// Settled, for a manager whose owner never discovers kinds (the provider server).
    fn default() -> Self {
        Self(tokio::sync::watch::Sender::new(true))
    }
}

/// How long a lookup of a kind not watched yet waits for the discovery to settle: beyond it,
/// the caller hears that the kind is not watched and retries later.
const DISCOVERY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Caches {
    pub(crate) fn set_stores(
        &self,
        stores: Store<SecretStore>,
        cluster: Store<ClusterSecretStore>,
    ) {
        let _ = self.secret_stores.set(stores);
        let _ = self.cluster_secret_stores.set(cluster);
    }

    pub(crate) fn set_classes(
        &self,
        classes: Store<ProviderClass>,
        cluster: Store<ClusterProviderClass>,
    ) {
        let _ = self.provider_classes.set(classes);
        let _ = self.cluster_provider_classes.set(cluster);
    }

    pub(crate) fn provider_class(&self, namespace: &str, name: &str) -> Option<Arc<ProviderClass>> {
        self.provider_classes
            .get()?
            .get(&ObjectRef::new(name).within(namespace))
    }

    pub(crate) fn cluster_provider_class(&self, name: &str) -> Option<Arc<ClusterProviderClass>> {
        self.cluster_provider_classes
            .get()?
            .get(&ObjectRef::new(name))
    }

    pub(crate) fn set_namespaces(&self, namespaces: Store<PartialObjectMeta<Namespace>>) {
        let _ = self.namespaces.set(namespaces);
    }

    pub(crate) fn namespace_labels(&self, name: &str) -> Option<BTreeMap<String, String>> {
        self.namespaces
            .get()?
            .get(&ObjectRef::new(name))
            .map(|ns| ns.metadata.labels.clone().unwrap_or_default())
    }

    pub(crate) fn set_provider(&self, resource: ApiResource, store: Store<DynamicObject>) {
        self.providers
            .lock()
            .expect("provider caches poisoned")
            .insert(
                (resource.group.clone(), resource.kind.clone()),
                (resource, store),
            );
    }

    pub(crate) fn unset_provider(&self, resource: &ApiResource) {
        self.providers
            .lock()
            .expect("provider caches poisoned")
            .remove(&(resource.group.clone(), resource.kind.clone()));
    }

    /// From now until [`Caches::discovered`], a lookup of a kind not watched waits.
    pub(crate) fn discovering(&self) {
        self.discovery.0.send_replace(false);
    }

    pub(crate) fn discovered(&self) {
        self.discovery.0.send_replace(true);
    }

    /// Whether the discovery has settled, or been given up on.
    pub(crate) fn discovery_over(&self) -> bool {
        *self.discovery.0.borrow()
    }

    /// Until the kinds installed at the start are watched, within [`DISCOVERY_WAIT`]. Past it
    /// (the CRDs cannot be listed, say), the discovery is given up on, so that every later
    /// lookup is answered at once rather than after the same wait.
    pub(crate) async fn discovery_settled(&self) {
        let mut settled = self.discovery.0.subscribe();
        if tokio::time::timeout(DISCOVERY_WAIT, settled.wait_for(|s| *s))
            .await
            .is_err()
        {
            tracing::warn!(
                waited = ?DISCOVERY_WAIT,
                "provider kinds not all watched yet; lookups of those report them as not watched"
            );
            self.discovered();
        }
    }

    /// Whether provider objects of `resource`'s kind are watched (at any version): its CRD is
    /// installed, the operator may list and watch it, and its cache is filled.
    pub(crate) fn watches(&self, resource: &ApiResource) -> bool {
        self.providers
            .lock()
            .expect("provider caches poisoned")
            .contains_key(&(resource.group.clone(), resource.kind.clone()))
    }

    /// The uids of every cached store, class and provider object.
    pub(crate) fn uids(&self) -> HashSet<String> {
        fn of<K: kube::Resource + Clone>(store: Option<&Store<K>>) -> Vec<String>
        where
            K::DynamicType: Eq + std::hash::Hash + Clone,
        {
            store.map_or_else(Vec::new, |s| {
                s.state().iter().filter_map(|o| o.uid()).collect()
            })
        }
        let mut uids: HashSet<String> = of(self.secret_stores.get()).into_iter().collect();
        uids.extend(of(self.cluster_secret_stores.get()));
        uids.extend(of(self.provider_classes.get()));
        uids.extend(of(self.cluster_provider_classes.get()));
        for (_, store) in self
            .providers
            .lock()
            .expect("provider caches poisoned")
            .values()
        {
            uids.extend(store.state().iter().filter_map(|o| o.uid()));
        }
        uids
    }

    pub(crate) fn store(&self, store: &StoreRef, namespace: &str) -> Option<LoadedStore> {
        match store.kind {
            StoreKind::SecretStore => self
                .secret_stores
                .get()?
                .get(&ObjectRef::new(&store.name).within(namespace))
                .map(|s| LoadedStore::from_secret_store(&s)),
            StoreKind::ClusterSecretStore => self
                .cluster_secret_stores
                .get()?
                .get(&ObjectRef::new(&store.name))
                .map(|s| LoadedStore::from_cluster_secret_store(&s)),
        }
    }

    /// Cached stores in `namespace` (`None`: ClusterSecretStores) that `keep` accepts by name and
    /// spec; only those are copied out.
    pub(crate) fn stores_where(
        &self,
        namespace: Option<&str>,
        keep: impl Fn(&str, &SecretStoreSpec) -> bool,
    ) -> Vec<LoadedStore> {
        match namespace {
            Some(ns) => self.secret_stores.get().map_or_else(Vec::new, |s| {
                s.state()
                    .iter()
                    .filter(|s| s.namespace().as_deref() == Some(ns))
                    .filter(|s| keep(&s.name_any(), &s.spec))
                    .map(|s| LoadedStore::from_secret_store(s))
                    .collect()
            }),
            None => self.cluster_secret_stores.get().map_or_else(Vec::new, |s| {
                s.state()
                    .iter()
                    .filter(|s| keep(&s.name_any(), &s.spec.store))
                    .map(|s| LoadedStore::from_cluster_secret_store(s))
                    .collect()
            }),
        }
    }

    /// Cached stores of every namespace and cluster stores that `keep` accepts by name and spec.
    pub(crate) fn every_store_where(
        &self,
        keep: impl Fn(&str, &SecretStoreSpec) -> bool,
    ) -> Vec<LoadedStore> {
        let namespaced = self.secret_stores.get().map_or_else(Vec::new, |s| {
            s.state()
                .iter()
                .filter(|s| keep(&s.name_any(), &s.spec))
                .map(|s| LoadedStore::from_secret_store(s))
                .collect()
        });
        let mut stores = namespaced;
        stores.extend(self.stores_where(None, keep));
        stores
    }

    /// Cached provider objects of every kind in `scope` whose label `key` is `value`.
    pub(crate) fn providers_labelled(
        &self,
        scope: Scope,
        key: &str,
        value: &str,
    ) -> Vec<(ApiResource, DynamicObject)> {
        let providers = self.providers.lock().expect("provider caches poisoned");
        providers
            .values()
            .filter(|(resource, _)| resource.group == scope.group())
            .flat_map(|(resource, store)| {
                store
                    .state()
                    .into_iter()
                    .filter(|o| o.labels().get(key).is_some_and(|v| v == value))
                    .map(|o| (resource.clone(), (*o).clone()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    pub(crate) fn provider(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<DynamicObject> {
        let providers = self.providers.lock().expect("provider caches poisoned");
        let (cached_resource, store) =
            providers.get(&(resource.group.clone(), resource.kind.clone()))?;
        // Another served version would be converted by the API server; only the cached one is
        // answered from here.
        if cached_resource.version != resource.version {
            return None;
        }
        let mut key = ObjectRef::new_with(name, cached_resource.clone());
        if let Some(ns) = namespace {
            key = key.within(ns);
        }
        store.get(&key).map(|o| (*o).clone())
    }
}
