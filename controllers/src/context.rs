//! The handles every reconciler uses. What only some reconcilers keep (the ExternalSecrets'
//! own-write log, the stores' wake-ups, the generations seen of stores and provider objects)
//! lives in their own contexts, so that no reconciler reaches into another's state.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::events::{EventType, Recorder};
use clientmanager::{ClientManager, StoreKind};
use k8s_openapi::api::core::v1::ObjectReference;

use kube::runtime::controller::Action;

use crate::backoff::Backoff;
use crate::metrics::ErrorLabels;
use crate::metrics::Metrics;
use crate::status::{FIELD_MANAGER, StatusWriter, apply_status};

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
    pub manager: Arc<ClientManager>,
    pub metrics: Metrics,
    pub settings: Settings,
    pub backoff: Backoff,
    /// Status writes, with what this operator last wrote of each object.
    pub status: StatusWriter,
    recorder: Recorder,
}

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

impl Context {
    pub fn new(
        client: kube::Client,
        manager: ClientManager,
        metrics: Metrics,
        settings: Settings,
    ) -> Arc<Self> {
        let recorder = Recorder::start(
            client.clone(),
            FIELD_MANAGER,
            std::env::var("POD_NAME").ok(),
            usize::from(settings.concurrency),
            metrics.events_dropped.clone(),
        );
        Arc::new(Self {
            client,
            manager: Arc::new(manager),
            metrics,
            settings,
            backoff: Backoff::new(Duration::from_secs(1), Duration::from_secs(420)),
            status: StatusWriter::default(),
            recorder,
        })
    }

    /// The queue of the controller `name`, with `--concurrent` workers.
    pub fn workqueue(&self, name: impl Into<String>) -> crate::workqueue::Workqueue {
        self.metrics
            .workqueues
            .queue(name)
            .workers(self.settings.concurrency)
    }

    /// Whether this operator handles an object with this controller class.
    pub fn owns_class(&self, class: Option<&str>) -> bool {
        class.is_none_or(|c| c.is_empty() || c == self.settings.controller_class)
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

    /// Records an event, published in the background: the reconcile outcome does not depend on
    /// it, so a reconcile neither waits for it nor fails with it.
    pub fn event(&self, object: &ObjectReference, type_: EventType, reason: &str, note: String) {
        self.recorder.record(object, type_, reason, note);
    }
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
