//! The children of the cluster kinds as their own kinds' controllers watch them: what a cluster
//! object owns, and where a change of a child, or of a ClusterSecretStore, is announced to its
//! owner. The operator hands them to the watches that fill them and to the cluster reconciler
//! that reads them.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, OnceLock};

use api::external_secret::ExternalSecret;
use api::push_secret::PushSecret;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::index::{Index, SharedIndex};
use crate::watch::FirstList;

/// The children of one cluster kind, as the child kind's own controller watches them: its cache,
/// an index of them by owner name, and where a change of one is announced to its owner.
pub struct Children<C: Resource<DynamicType = ()> + 'static> {
    pub(super) reader: OnceLock<Store<DeserializeGuard<C>>>,
    /// Whether that cache's first list is in.
    pub(super) listed: FirstList,
    by_owner: SharedIndex<DeserializeGuard<C>, String>,
    changed: UnboundedSender<String>,
    owner_kind: &'static str,
    /// (namespace, name) of children someone else owns, each keeping the owner named here out
    /// of that namespace: their deletion is announced to it, which nothing else would do.
    blocked: std::sync::Mutex<HashMap<(String, String), String>>,
}

impl<C> Children<C>
where
    C: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    pub(crate) fn new(owner_kind: &'static str, changed: UnboundedSender<String>) -> Self {
        Self {
            reader: OnceLock::new(),
            listed: FirstList::default(),
            by_owner: Arc::new(std::sync::Mutex::new(Index::default())),
            changed,
            owner_kind,
            blocked: Default::default(),
        }
    }

    /// Called by the child kind's controller with the cache its watch fills.
    pub(crate) fn use_cache(&self, reader: Store<DeserializeGuard<C>>) {
        let _ = self.reader.set(reader);
    }

    /// Takes in one event of the child kind's watch (after its reflector).
    pub(crate) fn observe(&self, event: &watcher::Event<DeserializeGuard<C>>) {
        self.listed.observe(event);
        let kind = self.owner_kind;
        self.by_owner
            .lock()
            .expect("children index poisoned")
            .apply(event, |child| owner_name(child, kind).into_iter().collect());
        // The first list is every child; each owner reconciles at its start anyway.
        if let watcher::Event::Apply(child) | watcher::Event::Delete(child) = event
            && let Some(owner) = owner_name(child, kind)
        {
            let _ = self.changed.unbounded_send(owner);
        }
        if let watcher::Event::Delete(child) = event
            && let Some(owner) = self
                .lock_blocked()
                .remove(&(child.namespace().unwrap_or_default(), child.name_any()))
        {
            let _ = self.changed.unbounded_send(owner);
        }
    }

    fn lock_blocked(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), String>> {
        self.blocked.lock().expect("blocked children poisoned")
    }

    /// Where `owner`'s child `name` is kept out by someone else's object, as of its reconcile:
    /// the deletion of one of those objects reconciles `owner`.
    pub(super) fn set_blocked(&self, owner: &str, name: &str, namespaces: Vec<String>) {
        let mut blocked = self.lock_blocked();
        blocked.retain(|_, o| o != owner);
        for ns in namespaces {
            blocked.insert((ns, name.to_owned()), owner.to_owned());
        }
    }

    /// `owner` is gone: nothing it was kept out by concerns anyone now.
    pub(super) fn forget_owner(&self, owner: &str) {
        self.lock_blocked().retain(|_, o| o != owner);
    }

    /// Every child `owner` controls, as (namespace, name).
    pub(super) fn owned_by(&self, owner: &str) -> Vec<(String, String)> {
        let mut owned: Vec<_> = self
            .by_owner
            .lock()
            .expect("children index poisoned")
            .get(&owner.to_owned())
            .into_iter()
            .map(|r| (r.namespace.unwrap_or_default(), r.name))
            .collect();
        owned.sort();
        owned
    }
}

/// The name of the cluster object of kind `kind` that controls `child`, if one does.
pub(super) fn owner_name(child: &impl Resource, kind: &str) -> Option<String> {
    child
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && is_cluster_owner(o, kind))
        .map(|o| o.name.clone())
}

/// ESO matches the owner by group, kind and name (not version), and so does this.
pub(super) fn is_cluster_owner(owner: &OwnerReference, kind: &str) -> bool {
    owner.kind == kind && owner.api_version.split('/').next() == Some(api::GROUP)
}

/// The children of both kinds, and where a ClusterSecretStore's change is announced to both.
pub struct ClusterChildren {
    pub external: Children<ExternalSecret>,
    pub push: Children<PushSecret>,
    stores_changed: [UnboundedSender<()>; 2],
}

impl ClusterChildren {
    /// A ClusterSecretStore's spec changed: its `conditions` may refuse or allow namespaces
    /// now, which every cluster object reports.
    pub(crate) fn cluster_store_changed(&self) {
        for to in &self.stores_changed {
            let _ = to.unbounded_send(());
        }
    }
}

/// Where the children's owners hear of their changes, by owner name, and of ClusterSecretStore
/// changes.
pub struct ChildChanges {
    pub external: UnboundedReceiver<String>,
    pub push: UnboundedReceiver<String>,
    pub external_stores: UnboundedReceiver<()>,
    pub push_stores: UnboundedReceiver<()>,
}

pub fn children() -> (ClusterChildren, ChildChanges) {
    let (external_tx, external) = futures::channel::mpsc::unbounded();
    let (push_tx, push) = futures::channel::mpsc::unbounded();
    let (external_stores_tx, external_stores) = futures::channel::mpsc::unbounded();
    let (push_stores_tx, push_stores) = futures::channel::mpsc::unbounded();
    (
        ClusterChildren {
            external: Children::new("ClusterExternalSecret", external_tx),
            push: Children::new("ClusterPushSecret", push_tx),
            stores_changed: [external_stores_tx, push_stores_tx],
        },
        ChildChanges {
            external,
            push,
            external_stores,
            push_stores,
        },
    )
}
