//! A store as the client manager sees it, whichever kind it is: the ground that the cache, the
//! loaders and the conversion stand on.

use std::fmt;

use api::conditions::{ConditionStatus, READY, find};
use api::store::{ClusterSecretStore, SecretStore, SecretStoreSpec};
use kube::ResourceExt;

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
    pub uid: Option<String>,
    pub spec: SecretStoreSpec,
    pub ready: bool,
    /// For PushSecret `dataTo` entries that pick stores by label.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Being deleted: PushSecrets push nothing more to it, only remove what they pushed.
    pub deleting: bool,
}

impl LoadedStore {
    pub fn from_secret_store(store: &SecretStore) -> Self {
        Self {
            kind: StoreKind::SecretStore,
            namespace: store.namespace(),
            name: store.name_any(),
            uid: store.uid(),
            spec: store.spec.clone(),
            ready: is_ready(store.status.as_ref().map(|s| s.conditions.as_slice())),
            labels: store.labels().clone(),
            deleting: store.metadata.deletion_timestamp.is_some(),
        }
    }

    pub fn from_cluster_secret_store(store: &ClusterSecretStore) -> Self {
        Self {
            kind: StoreKind::ClusterSecretStore,
            namespace: None,
            name: store.name_any(),
            uid: store.uid(),
            spec: store.spec.store.clone(),
            ready: is_ready(store.status.as_ref().map(|s| s.conditions.as_slice())),
            labels: store.labels().clone(),
            deleting: store.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// Whether a store's conditions say Ready=True.
pub fn is_ready(conditions: Option<&[api::conditions::Condition]>) -> bool {
    conditions
        .and_then(|c| find(c, READY))
        .is_some_and(|c| c.status == ConditionStatus::True)
}
