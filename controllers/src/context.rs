//! State shared by every reconciler.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::events::{EventType, Recorder};
use clientmanager::{ClientManager, StoreKind};
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::ObjectReference;
use provider::ProviderIdentity;
use tracing::warn;

use kube::runtime::controller::Action;

use crate::backoff::Backoff;
use crate::externalsecret::generic::targets::{GenericTargets, TargetChange};
use crate::metrics::ErrorLabels;
use crate::metrics::Metrics;
use crate::own_writes::OwnWriteLog;

/// Operator settings that reconcilers read.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Stores whose `spec.controller` is set to another class are left alone.
    pub controller_class: String,
    /// Single-namespace mode: watch only this namespace (cluster-scoped kinds are then skipped).
    pub namespace: Option<String>,
    pub concurrency: u16,
    /// Revalidation period of stores without `spec.refreshInterval`.
    pub store_requeue_interval: Duration,
    /// ExternalSecrets may write ConfigMaps and custom resources (`spec.target.manifest`).
    pub allow_generic_targets: bool,
    /// Provider kinds served out of process: kind -> the ClusterProviderClass serving every
    /// store of that kind that names no class itself.
    pub out_of_process: std::collections::BTreeMap<String, String>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            controller_class: "default".into(),
            namespace: None,
            concurrency: 4,
            store_requeue_interval: Duration::from_secs(300),
            allow_generic_targets: false,
            out_of_process: Default::default(),
        }
    }
}

pub struct Context {
    pub client: kube::Client,
    pub manager: ClientManager,
    pub metrics: Metrics,
    pub settings: Settings,
    pub backoff: Backoff,
    /// Spec changes of stores and provider objects, as opposed to first sights after a start.
    pub generations: crate::generations::Generations,
    /// Provider objects whose spec changed: the ExternalSecrets reading through them resync.
    pub provider_changed: UnboundedSender<ProviderIdentity>,
    /// Where a store that turned Ready is announced to ExternalSecrets.
    externalsecret_wake: UnboundedSender<ReadyStore>,
    /// Where a store that turned Ready, or is being deleted, is announced to PushSecrets.
    pushsecret_wake: UnboundedSender<ReadyStore>,
    /// Every PushSecret, for the stores' finalizer; the PushSecret controller's watch cache.
    pub pushsecrets: OnceLock<PushSecretCache>,
    /// Targets this operator writes or wrote: the watch event of our own write needs no
    /// reconcile.
    pub own_writes: OwnWriteLog,
    /// A digest of the status this operator last wrote of each object (by uid) until its watch
    /// cache shows it: a status built on a cache that lags may equal the cached one and yet not
    /// be what the object holds.
    status_writes: Mutex<HashMap<String, StatusWrite>>,
    /// By PushSecret uid: what it pushed that a failed status write left off its record.
    unrecorded_pushes: Mutex<HashMap<String, crate::pushsecret::plan::Synced>>,
    recorder: Recorder,
    /// The kinds ExternalSecrets write besides Secrets.
    pub generic_targets: GenericTargets,
    /// The resourceVersions of the Secrets this operator manages, from their metadata watch.
    pub target_versions: crate::externalsecret::versions::TargetVersions,
    /// The ExternalSecrets and PushSecrets cluster objects own, as their kinds' watches see them.
    pub cluster_children: crate::cluster::children::ClusterChildren,
}

/// A status this operator wrote: its digest, and the object's resourceVersion the write made.
struct StatusWrite {
    digest: u64,
    resource_version: Option<u64>,
}

impl StatusWrite {
    /// Whether the watch cache, showing `cached` at `cached_version`, has seen this write: it
    /// shows what was written, or a later version of the object (someone wrote after us; what
    /// they wrote is the status now). resourceVersions are etcd revisions, which only grow; one
    /// that does not parse as a number is never taken as later.
    fn seen(&self, cached: u64, cached_version: Option<&str>) -> bool {
        let later = match (
            cached_version.and_then(|v| v.parse::<u64>().ok()),
            self.resource_version,
        ) {
            (Some(cached), Some(written)) => cached >= written,
            _ => false,
        };
        self.digest == cached || later
    }
}

/// The PushSecret controller's watch cache.
pub type PushSecretCache =
    kube::runtime::reflector::Store<kube::core::DeserializeGuard<api::push_secret::PushSecret>>;

/// A store whose Ready condition turned True (or, for PushSecrets, that is being deleted).
#[derive(Clone, Debug)]
pub struct ReadyStore {
    pub kind: StoreKind,
    pub name: String,
    /// `None` for a ClusterSecretStore.
    pub namespace: Option<String>,
    /// For PushSecrets that select stores by label.
    pub labels: BTreeMap<String, String>,
}

impl ReadyStore {
    /// Whether an object in `namespace` referring to `kind`/`name` means this store.
    pub fn is(&self, kind: StoreKind, name: &str, namespace: Option<&str>) -> bool {
        self.kind == kind
            && self.name == name
            && (kind == StoreKind::ClusterSecretStore || self.namespace.as_deref() == namespace)
    }
}

/// The field manager of everything this operator writes that is not per-ExternalSecret.
pub const FIELD_MANAGER: &str = "external-secrets";

impl Context {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: kube::Client,
        manager: ClientManager,
        metrics: Metrics,
        settings: Settings,
        provider_changed: UnboundedSender<ProviderIdentity>,
        externalsecret_wake: UnboundedSender<ReadyStore>,
        pushsecret_wake: UnboundedSender<ReadyStore>,
        generic_target_changed: UnboundedSender<TargetChange>,
        cluster_children: crate::cluster::children::ClusterChildren,
    ) -> Arc<Self> {
        let recorder = Recorder::new(
            client.clone(),
            FIELD_MANAGER,
            std::env::var("POD_NAME").ok(),
        );
        let generic_targets = GenericTargets::new(
            settings.allow_generic_targets,
            settings.namespace.clone(),
            generic_target_changed,
        );
        Arc::new(Self {
            client,
            manager,
            metrics,
            settings,
            backoff: Backoff::new(Duration::from_secs(1), Duration::from_secs(420)),
            generations: Default::default(),
            provider_changed,
            externalsecret_wake,
            pushsecret_wake,
            pushsecrets: OnceLock::new(),
            own_writes: OwnWriteLog::default(),
            status_writes: Mutex::default(),
            unrecorded_pushes: Mutex::default(),
            recorder,
            generic_targets,
            target_versions: Default::default(),
            cluster_children,
        })
    }

    /// Whether this operator handles an object with this controller class.
    pub fn owns_class(&self, class: Option<&str>) -> bool {
        class.is_none_or(|c| c.is_empty() || c == self.settings.controller_class)
    }

    /// Wakes the ExternalSecrets and PushSecrets that use `store`.
    pub fn store_ready(&self, store: ReadyStore) {
        let _ = self.externalsecret_wake.unbounded_send(store.clone());
        let _ = self.pushsecret_wake.unbounded_send(store);
    }

    /// Wakes the PushSecrets that pushed to `store`, which is being deleted, so that they delete
    /// what they pushed there (deletionPolicy Delete) while it still exists.
    pub fn store_deleting(&self, store: ReadyStore) {
        let _ = self.pushsecret_wake.unbounded_send(store);
    }

    /// Counts a failed reconcile of `object` (an `ObjectRef` display) and returns when to retry:
    /// exponentially later for each failure in a row.
    pub fn failed(&self, controller: &'static str, error: &'static str, object: &str) -> Action {
        self.metrics
            .reconcile_errors
            .get_or_create(&ErrorLabels { controller, error })
            .inc();
        Action::requeue(self.backoff.failed(object))
    }

    /// Server-side applies `new` as the status of the object `meta` describes, whose status in the
    /// watch cache is `cached`; skipped only when `new` is both what the cache shows and what
    /// this operator last wrote. Says whether it wrote.
    pub async fn update_status<K, S>(
        &self,
        api: &kube::Api<K>,
        dyntype: &K::DynamicType,
        meta: &kube::api::ObjectMeta,
        cached: &S,
        new: &S,
    ) -> Result<bool, kube::Error>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
        S: serde::Serialize,
    {
        // A hash, not the status: a record per object written since its last watch event is
        // held, which after a restart is every object.
        fn digest<S: serde::Serialize>(status: &S) -> u64 {
            use std::hash::{Hash, Hasher};
            let mut h = std::hash::DefaultHasher::new();
            serde_json::to_vec(status)
                .expect("a status serializes")
                .hash(&mut h);
            h.finish()
        }
        let uid = meta.uid.clone().unwrap_or_default();
        let (new_digest, cached_digest) = (digest(new), digest(cached));
        {
            let mut written = self.status_writes.lock().expect("status writes poisoned");
            if written
                .get(&uid)
                .is_some_and(|w| w.seen(cached_digest, meta.resource_version.as_deref()))
            {
                written.remove(&uid);
            }
            if new_digest == cached_digest && !written.contains_key(&uid) {
                return Ok(false);
            }
        }
        let name = meta.name.as_deref().unwrap_or_default();
        let resource_version = apply_status(api, dyntype, name, new).await?;
        self.status_writes
            .lock()
            .expect("status writes poisoned")
            .insert(
                uid,
                StatusWrite {
                    digest: new_digest,
                    resource_version: resource_version.and_then(|v| v.parse().ok()),
                },
            );
        Ok(true)
    }

    /// What the PushSecret `uid` pushed that its status does not record yet.
    pub fn unrecorded_pushes(&self, uid: Option<&str>) -> Option<crate::pushsecret::plan::Synced> {
        let unrecorded = self
            .unrecorded_pushes
            .lock()
            .expect("unrecorded pushes poisoned");
        unrecorded.get(uid?).cloned()
    }

    pub fn keep_unrecorded_pushes(
        &self,
        uid: Option<&str>,
        synced: crate::pushsecret::plan::Synced,
    ) {
        if let Some(uid) = uid {
            self.unrecorded_pushes
                .lock()
                .expect("unrecorded pushes poisoned")
                .insert(uid.to_owned(), synced);
        }
    }

    /// Once recorded in status, or when the PushSecret is gone.
    pub fn drop_unrecorded_pushes(&self, uid: Option<&str>) {
        if let Some(uid) = uid {
            self.unrecorded_pushes
                .lock()
                .expect("unrecorded pushes poisoned")
                .remove(uid);
        }
    }

    /// Forgets the status last written of a deleted object.
    pub fn forget_status(&self, uid: Option<&str>) {
        if let Some(uid) = uid {
            self.status_writes
                .lock()
                .expect("status writes poisoned")
                .remove(uid);
        }
    }

    /// Publishes an event; a failure to publish is logged and otherwise ignored, since the
    /// reconcile outcome does not depend on it.
    pub async fn event(
        &self,
        object: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        if let Err(e) = self.recorder.publish(object, type_, reason, note).await {
            warn!(error = %e, reason, "could not publish event");
        }
    }
}

/// Server-side applies `status` to the status subresource of `name`, as this operator's field
/// manager; forced, since no one else owns our status fields.
pub async fn apply_status<K>(
    api: &kube::Api<K>,
    dyntype: &K::DynamicType,
    name: &str,
    status: &impl serde::Serialize,
) -> Result<Option<String>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(dyntype),
        "kind": K::kind(dyntype),
        "status": status,
    });
    api.patch_status(
        name,
        &kube::api::PatchParams::apply(FIELD_MANAGER).force(),
        &kube::api::Patch::Apply(&patch),
    )
    .await
    .map(|written| written.meta().resource_version.clone())
}

/// An object this operator's types cannot read (written under another CRD, ESO's say): say so
/// in its Ready condition, naming what is wrong, and wait for it to change. Written without our
/// types, since they cannot read it.
pub async fn report_unreadable<K>(
    ctx: &Context,
    invalid: &kube::core::error_boundary::InvalidObject,
    reason: &str,
) -> Result<(), kube::Error>
where
    K: kube::Resource<DynamicType = ()>,
{
    let name = invalid.metadata.name.clone().unwrap_or_default();
    let namespace = invalid.metadata.namespace.clone().unwrap_or_default();
    let message = format!(
        "the {} cannot be read by this operator: {}",
        K::kind(&()),
        invalid.error
    );
    let mut conditions = Vec::new();
    api::conditions::set_condition(
        &mut conditions,
        api::conditions::Condition::ready(api::conditions::ConditionStatus::False, reason, message),
        jiff::Timestamp::now(),
    );
    let resource = kube::api::ApiResource::erase::<K>(&());
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(ctx.client.clone(), &namespace, &resource);
    let status = serde_json::json!({
        "conditions": conditions,
        "observedGeneration": invalid.metadata.generation,
    });
    apply_status(&api, &resource, &name, &status)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::StatusWrite;

    #[test]
    fn a_status_write_is_seen_at_its_digest_or_at_a_later_version() {
        let ours = StatusWrite {
            digest: 7,
            resource_version: Some(100),
        };
        assert!(ours.seen(7, Some("100")), "the cache shows our write");
        assert!(
            !ours.seen(3, Some("99")),
            "the cache lags behind our write: write again if it differs"
        );
        assert!(
            ours.seen(3, Some("101")),
            "someone wrote after us: the cache's status is the status now"
        );
        assert!(!ours.seen(3, Some("not-a-number")));
        assert!(!ours.seen(3, None));
    }
}
