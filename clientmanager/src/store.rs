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
    /// Why it is not Ready, as its Ready condition says; `None` while it is Ready.
    pub unready: Option<String>,
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
            unready: unready(store.status.as_ref().map(|s| s.conditions.as_slice())),
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
            unready: unready(store.status.as_ref().map(|s| s.conditions.as_slice())),
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

/// Why a store's conditions do not say Ready=True, in their words: what its users report, so
/// that an ExternalSecret on a store that cannot reach its provider names the cause, not only
/// the store.
fn unready(conditions: Option<&[api::conditions::Condition]>) -> Option<String> {
    match conditions.and_then(|c| find(c, READY)) {
        Some(c) if c.status == ConditionStatus::True => None,
        Some(c) => Some(
            c.message
                .clone()
                .filter(|m| !m.is_empty())
                .or_else(|| c.reason.clone())
                .unwrap_or_else(|| format!("Ready is {:?}", c.status)),
        ),
        None => Some("it has not been validated yet".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn store(conditions: serde_json::Value) -> LoadedStore {
        LoadedStore::from_secret_store(
            &serde_json::from_value(json!({
                "apiVersion": "external-secrets.io/v1", "kind": "SecretStore",
                "metadata": {"name": "remote", "namespace": "team-a"},
                "spec": {"provider": {"fake": {"data": []}}},
                "status": {"conditions": conditions},
            }))
            .unwrap(),
        )
    }

    /// What an ExternalSecret on a store that is not Ready reports: the store's own reason (a
    /// server it cannot reach, say), not only that it is not ready.
    #[test]
    fn a_store_that_is_not_ready_says_why() {
        let down = store(
            json!([{"type": "Ready", "status": "False", "reason": "ValidationFailed",
            "message": "could not reach https://127.0.0.1:6443: connection refused",
            "lastTransitionTime": "2026-11-28T00:00:00Z"}]),
        );
        let error = crate::Error::NotReady {
            kind: down.kind,
            name: down.name.clone(),
            why: down.unready.clone().expect("not ready"),
        };
        assert_eq!(
            error.to_string(),
            "SecretStore \"remote\" is not ready: could not reach https://127.0.0.1:6443: connection refused"
        );
        let up = store(
            json!([{"type": "Ready", "status": "True", "reason": "Valid",
            "message": "store validated", "lastTransitionTime": "2026-11-28T00:00:00Z"}]),
        );
        assert_eq!(up.unready, None);
        assert_eq!(
            store(json!([])).unready.as_deref(),
            Some("it has not been validated yet")
        );
    }
}
