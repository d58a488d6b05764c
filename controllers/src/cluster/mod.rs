//! ClusterExternalSecret and ClusterPushSecret: one ExternalSecret or PushSecret per selected
//! namespace, owned by the cluster object, so that deleting it lets garbage collection take the
//! children (no request per child from here).
//!
//! What triggers a reconcile: the cluster object's own changes, a namespace gaining, losing or
//! changing labels (one namespace watch serves every cluster object and the stores'
//! `conditions`), a ClusterSecretStore's spec change, a child changed or deleted by someone else
//! (seen on the watch the child's own controller keeps, not on one more), and `refreshTime`. A reconcile reads only those caches, and
//! writes only what differs, so a steady state costs no request.

pub mod children;
pub mod plan;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use api::cluster_secrets::{
    CLUSTER_EXTERNAL_SECRET_FINALIZER, ClusterExternalSecret, ClusterExternalSecretStatus,
    ClusterPushSecret, ClusterPushSecretStatus,
};
use api::external_secret::{ANNOTATION_FORCE_SYNC, ExternalSecret, SecretStoreKind};
use api::push_secret::PushSecret;
use clientmanager::{StoreKind, StoreRef};
use futures::channel::mpsc::UnboundedReceiver;
use futures::{StreamExt, future};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::core::{DeserializeGuard, PartialObjectMeta};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tracing::{info, instrument, warn};

use crate::context::Context;
use crate::events::EventType;
use crate::metrics::{ConditionGauge, Metrics, ObjectLabels};
use crate::outcome::{after_reconcile, error_policy};
use crate::status::FIELD_MANAGER;
use crate::watch::Cached;
use children::owner_name;
pub use children::{ChildChanges, Children, ClusterChildren, children};
use plan::{Existing, NamespaceView, Reported, Selection};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

/// ESO's default resync of cluster objects without `refreshTime`.
const DEFAULT_REFRESH: Duration = Duration::from_secs(3600);

/// The namespace watch's cache, shared by every cluster object and the stores' `conditions`.
pub type Namespaces = Store<PartialObjectMeta<Namespace>>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("could not write {what}: {source}")]
    Write { what: String, source: kube::Error },
}

impl crate::outcome::ErrorKind for Error {
    fn kind(&self) -> &'static str {
        match self {
            Self::Write { .. } => "Write",
        }
    }
}

/// One cluster kind, as the reconciler sees it.
pub(crate) trait Fanout:
    Resource<DynamicType = (), Scope = ClusterResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Serialize
    + Send
    + Sync
    + 'static
{
    type Child: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Serialize
        + Send
        + Sync
        + 'static;
    type Status: Serialize + Send + Sync;
    /// The controller's name in metrics and logs.
    const CONTROLLER: &'static str;

    fn children(all: &ClusterChildren) -> &Children<Self::Child>;
    fn child_name(&self) -> String;
    fn selection(&self) -> Selection;
    /// Labels and annotations each child carries.
    fn child_metadata(&self) -> (BTreeMap<String, String>, BTreeMap<String, String>);
    fn child_spec(&self) -> Value;
    fn spec_of(child: &Self::Child) -> Value;
    /// ClusterSecretStores the child reads from by name.
    fn cluster_stores(&self) -> Vec<String>;
    fn refresh_time(&self) -> Option<&str>;
    fn status(&self, child_name: String, reported: Reported) -> Self::Status;
    /// The status the watch cache shows, for the comparison that spares a write.
    fn cached_status(&self) -> Self::Status;
    /// What that status reported, for the event a new failure raises.
    fn last_reported(&self) -> Reported;
    /// ESO's condition and reconcile-duration gauges of the kind.
    fn gauges(m: &Metrics) -> (&ConditionGauge, &Family<ObjectLabels, Gauge>);
}

impl Fanout for ClusterExternalSecret {
    type Child = ExternalSecret;
    type Status = ClusterExternalSecretStatus;
    const CONTROLLER: &'static str = "clusterexternalsecret";

    fn children(all: &ClusterChildren) -> &Children<ExternalSecret> {
        &all.external
    }

    fn child_name(&self) -> String {
        self.spec
            .external_secret_name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| self.name_any())
    }

    fn selection(&self) -> Selection {
        let mut selectors = Vec::new();
        if let Some(s) = &self.spec.namespace_selector {
            selectors.push(("spec.namespaceSelector".to_owned(), s.clone()));
        }
        for (i, s) in self.spec.namespace_selectors.iter().flatten().enumerate() {
            selectors.push((format!("spec.namespaceSelectors[{i}]"), s.clone()));
        }
        Selection {
            selectors,
            names: self.spec.namespaces.clone().unwrap_or_default(),
        }
    }

    fn child_metadata(&self) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        let meta = self
            .spec
            .external_secret_metadata
            .clone()
            .unwrap_or_default();
        let mut annotations = meta.annotations.unwrap_or_default();
        // As ESO: forcing a sync of the ClusterExternalSecret forces one of every child.
        if let Some(value) = self.annotations().get(ANNOTATION_FORCE_SYNC) {
            annotations.insert(ANNOTATION_FORCE_SYNC.to_owned(), value.clone());
        }
        (meta.labels.unwrap_or_default(), annotations)
    }

    fn child_spec(&self) -> Value {
        serde_json::to_value(&self.spec.external_secret_spec).expect("a spec serializes")
    }

    fn spec_of(child: &ExternalSecret) -> Value {
        serde_json::to_value(&child.spec).expect("a spec serializes")
    }

    fn cluster_stores(&self) -> Vec<String> {
        let spec = &self.spec.external_secret_spec;
        let refs = spec.secret_store_ref.iter().cloned().chain(
            spec.data
                .iter()
                .flatten()
                .filter_map(|d| d.source_ref.as_ref()?.store_ref.clone())
                .chain(
                    spec.data_from
                        .iter()
                        .flatten()
                        .filter_map(|d| d.source_ref.as_ref()?.store_ref.clone()),
                ),
        );
        let mut names: Vec<String> = refs
            .filter(|r| r.kind == Some(SecretStoreKind::ClusterSecretStore))
            .map(|r| r.name)
            .collect();
        names.sort();
        names.dedup();
        names
    }

    fn refresh_time(&self) -> Option<&str> {
        self.spec.refresh_time.as_deref()
    }

    fn status(&self, child_name: String, reported: Reported) -> ClusterExternalSecretStatus {
        ClusterExternalSecretStatus {
            external_secret_name: Some(child_name),
            failed_namespaces: reported.failed,
            provisioned_namespaces: reported.provisioned,
            conditions: reported.conditions,
        }
    }

    fn cached_status(&self) -> ClusterExternalSecretStatus {
        self.status.clone().unwrap_or_default()
    }

    fn last_reported(&self) -> Reported {
        let status = self.cached_status();
        Reported {
            provisioned: status.provisioned_namespaces,
            failed: status.failed_namespaces,
            conditions: status.conditions,
        }
    }

    fn gauges(m: &Metrics) -> (&ConditionGauge, &Family<ObjectLabels, Gauge>) {
        (&m.ces_condition, &m.ces_reconcile_duration)
    }
}

impl Fanout for ClusterPushSecret {
    type Child = PushSecret;
    type Status = ClusterPushSecretStatus;
    const CONTROLLER: &'static str = "clusterpushsecret";

    fn children(all: &ClusterChildren) -> &Children<PushSecret> {
        &all.push
    }

    fn child_name(&self) -> String {
        self.spec
            .push_secret_name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| self.name_any())
    }

    fn selection(&self) -> Selection {
        Selection {
            selectors: self
                .spec
                .namespace_selectors
                .iter()
                .flatten()
                .enumerate()
                .map(|(i, s)| (format!("spec.namespaceSelectors[{i}]"), s.clone()))
                .collect(),
            names: Vec::new(),
        }
    }

    fn child_metadata(&self) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        let meta = self.spec.push_secret_metadata.clone().unwrap_or_default();
        (
            meta.labels.unwrap_or_default(),
            meta.annotations.unwrap_or_default(),
        )
    }

    fn child_spec(&self) -> Value {
        serde_json::to_value(&self.spec.push_secret_spec).expect("a spec serializes")
    }

    fn spec_of(child: &PushSecret) -> Value {
        serde_json::to_value(&child.spec).expect("a spec serializes")
    }

    fn cluster_stores(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .spec
            .push_secret_spec
            .secret_store_refs
            .iter()
            .filter(|r| r.kind == Some(SecretStoreKind::ClusterSecretStore))
            .filter_map(|r| r.name.clone())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    fn refresh_time(&self) -> Option<&str> {
        self.spec.refresh_time.as_deref()
    }

    fn status(&self, child_name: String, reported: Reported) -> ClusterPushSecretStatus {
        ClusterPushSecretStatus {
            failed_namespaces: reported.failed,
            provisioned_namespaces: reported.provisioned,
            push_secret_name: Some(child_name),
            conditions: reported.conditions,
        }
    }

    fn cached_status(&self) -> ClusterPushSecretStatus {
        self.status.clone().unwrap_or_default()
    }

    fn last_reported(&self) -> Reported {
        let status = self.cached_status();
        Reported {
            provisioned: status.provisioned_namespaces,
            failed: status.failed_namespaces,
            conditions: status.conditions,
        }
    }

    fn gauges(m: &Metrics) -> (&ConditionGauge, &Family<ObjectLabels, Gauge>) {
        (&m.cps_condition, &m.cps_reconcile_duration)
    }
}

/// The controller of one cluster kind. Starts once the namespace and children caches are filled:
/// on empty caches every child would look missing and be written again.
pub(crate) async fn controller<K: Fanout>(
    ctx: Arc<Context>,
    children: Arc<ClusterChildren>,
    namespaces: Cached<PartialObjectMeta<Namespace>>,
    namespace_changes: UnboundedReceiver<()>,
    store_changes: UnboundedReceiver<()>,
    child_changes: UnboundedReceiver<String>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let own = K::children(&children);
    future::join(own.listed.wait(), namespaces.listed.wait()).await;
    // The child kind's controller hands its cache over before its watch starts.
    if own.reader.get().is_none() {
        warn!(
            kind = K::CONTROLLER,
            "the children's cache was never handed over; not started"
        );
        return;
    }
    // Guarded: one object these types cannot read (written under another CRD) is reported on
    // its own, rather than stopping the watch of all.
    let (cached, writer) = reflector::store::<DeserializeGuard<K>>();
    let queue = ctx.workqueue(K::CONTROLLER);
    let stream = watcher(
        Api::<DeserializeGuard<K>>::all(ctx.client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(|o| o.managed_fields_mut().clear())
    .reflect(writer);
    let departed = {
        let (ctx, children) = (ctx.clone(), children.clone());
        move |gone: ObjectRef<DeserializeGuard<K>>| {
            ctx.status.forget(gone.extra.uid.as_deref());
            K::children(&children).forget_owner(&gone.name);
            let (condition, duration) = K::gauges(&ctx.metrics);
            crate::metrics::forget(condition, duration, &gone.name, "");
        }
    };
    let owners = child_changes.map(|name| ObjectRef::<DeserializeGuard<K>>::new(&name));
    let state = Arc::new(State {
        ctx: ctx.clone(),
        children,
        namespaces: namespaces.cache,
    });
    queue
        .controller(stream, cached.clone(), (), departed)
        .reconcile_on(queue.triggers(owners))
        .reconcile_on(queue.all_on(
            futures::stream::select(namespace_changes, store_changes),
            cached,
        ))
        .graceful_shutdown_on(shutdown)
        .run(
            queue.reconciler(|watched: Arc<DeserializeGuard<K>>, state: Arc<State>| {
                let object = watched.0.clone().map(Arc::new);
                async move {
                    match object {
                        Ok(object) => reconcile(object, state).await,
                        Err(invalid) => report_unreadable::<K>(&state.ctx, invalid).await,
                    }
                }
            }),
            queue.error_policy(error_policy_for::<K>()),
            state,
        )
        .for_each(after_reconcile(ctx.clone(), queue.clone()))
        .await
}

struct State {
    ctx: Arc<Context>,
    children: Arc<ClusterChildren>,
    namespaces: Namespaces,
}

fn error_policy_for<K: Fanout>() -> impl Fn(Arc<DeserializeGuard<K>>, &Error, Arc<State>) -> Action
{
    let inner = error_policy::<DeserializeGuard<K>, Error>(K::CONTROLLER);
    move |obj, error, state| inner(obj, error, state.ctx.clone())
}

#[instrument(skip_all, fields(kind = K::CONTROLLER, name = %object.name_any()))]
async fn reconcile<K: Fanout>(object: Arc<K>, state: Arc<State>) -> Result<Action, Error> {
    let ctx = &state.ctx;
    // What was last reported decides whether a failure is new (a Warning) and what to write.
    if let Some(wait) = ctx
        .status
        .catching_up(object.meta(), || object.cached_status())
    {
        return Ok(Action::requeue(wait));
    }
    let started = std::time::Instant::now();
    let api: Api<K> = Api::all(ctx.client.clone());
    let name = object.name_any();
    if object.meta().deletion_timestamp.is_some() {
        release_eso_finalizer(&api, object.as_ref()).await?;
        return Ok(Action::await_change());
    }
    let children = K::children(&state.children);
    let child_name = object.child_name();
    let owned = children.owned_by(&name);
    let namespaces = state.namespaces.state();
    let views = namespaces.iter().map(|ns| NamespaceView {
        name: ns.metadata.name.as_deref().unwrap_or_default(),
        labels: ns.metadata.labels.as_ref().unwrap_or(&EMPTY),
        terminating: ns.metadata.deletion_timestamp.is_some(),
    });
    let selected = plan::selected(&object.selection(), views);
    // An invalid selector stays invalid until the spec changes, which is reconciled anyway.
    let next = match &selected {
        Err(_) => Action::await_change(),
        Ok(_) => Action::requeue(refresh(object.refresh_time())),
    };
    let reported = match selected {
        Err(message) => plan::invalid(message, &owned, &child_name),
        Ok(targets) => {
            let desired = Desired::of(object.as_ref());
            let reader = children
                .reader
                .get()
                .expect("started with the children cache");
            let existing = |ns: &str| {
                let key = ObjectRef::new(&child_name).within(ns);
                match reader.get(&key) {
                    None => Existing::Absent,
                    Some(child) => desired.compare::<K>(&child, &name),
                }
            };
            let stores = cluster_store_conditions(ctx, &object.cluster_stores()).await;
            let refused = |ns: &NamespaceView| refusal(&stores, ns);
            let mut plan = plan::plan(
                K::Child::kind(&()).as_ref(),
                &child_name,
                targets,
                &owned,
                existing,
                refused,
            );
            for (namespace, child) in std::mem::take(&mut plan.delete) {
                let uid = reader
                    .get(&ObjectRef::new(&child).within(&namespace))
                    .and_then(|c| c.uid());
                delete_child::<K::Child>(ctx, &namespace, &child, uid).await?;
            }
            let mut blocked: Vec<String> = plan
                .failed
                .keys()
                .filter(|ns| existing(ns) == Existing::Foreign)
                .cloned()
                .collect();
            for namespace in std::mem::take(&mut plan.apply) {
                let new = existing(&namespace) == Existing::Absent;
                if let Err(e) = desired
                    .apply::<K>(ctx, object.as_ref(), &child_name, &namespace, new)
                    .await
                {
                    warn!(%namespace, error = %e.message(), "could not write the child");
                    if let WriteFailure::Foreign(_) = e {
                        blocked.push(namespace.clone());
                    }
                    plan::write_failed(&mut plan, &namespace, e.message().to_owned());
                }
            }
            children.set_blocked(&name, &child_name, blocked);
            plan::report(&plan)
        }
    };
    let warning = reported.warning_after(&object.last_reported());
    let ready = reported.ready();
    let status = object.status(child_name, reported);
    ctx.status
        .update(&api, &(), object.meta(), &object.cached_status(), &status)
        .await
        .map_err(|source| Error::Write {
            what: "status".into(),
            source,
        })?;
    let (condition, duration) = K::gauges(&ctx.metrics);
    condition.set(&name, "", api::conditions::READY, ready);
    duration
        .get_or_create(&crate::metrics::labels(&name, ""))
        .set(started.elapsed().as_nanos() as i64);
    if let Some(note) = warning {
        ctx.event(&object.object_ref(&()), EventType::Warning, ERRORED, note);
    }
    Ok(next)
}

static EMPTY: BTreeMap<String, String> = BTreeMap::new();

/// ESO's reason for a ClusterPushSecret that failed; its ClusterExternalSecret raises no event,
/// ours raises the same.
const ERRORED: &str = "Errored";

/// A cluster object these types cannot read: Ready=False naming what is wrong, its children left
/// as they are, until it changes.
async fn report_unreadable<K: Fanout>(
    ctx: &Context,
    invalid: kube::core::error_boundary::InvalidObject,
) -> Result<Action, Error> {
    let resource = kube::api::ApiResource::erase::<K>(&());
    let api: Api<kube::api::DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
    let message = format!(
        "the {} cannot be read by this operator: {}",
        K::kind(&()),
        invalid.error
    );
    let status = json!({"conditions": [{"type": api::conditions::READY, "status": "False", "message": message}]});
    let name = invalid.metadata.name.unwrap_or_default();
    crate::status::apply_status(&api, &resource, &name, &status)
        .await
        .map_err(|source| Error::Write {
            what: "status".into(),
            source,
        })?;
    Ok(Action::await_change())
}

fn refresh(refresh_time: Option<&str>) -> Duration {
    refresh_time
        .and_then(|t| crate::duration::parse(t).ok())
        .filter(|d| !d.is_zero())
        .unwrap_or(DEFAULT_REFRESH)
}

/// Why a child was not written, as its namespace's failure says it.
enum WriteFailure {
    /// An object of its name that someone else owns is there.
    Foreign(String),
    Api(String),
}

impl WriteFailure {
    fn of(e: &kube::Error) -> Self {
        Self::Api(crate::api_error::redact(&e.to_string()))
    }

    fn message(&self) -> &str {
        match self {
            Self::Foreign(m) | Self::Api(m) => m,
        }
    }
}

/// What every child should be: the same for all namespaces but for the namespace itself.
struct Desired {
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    spec: Value,
    owner: OwnerReference,
}

impl Desired {
    fn of<K: Fanout>(object: &K) -> Self {
        let (labels, annotations) = object.child_metadata();
        Self {
            labels,
            annotations,
            spec: object.child_spec(),
            // As ESO's: blocking, so that a foreground deletion waits for the children.
            owner: OwnerReference {
                block_owner_deletion: Some(true),
                ..object
                    .controller_owner_ref(&())
                    .expect("a cluster object read from the API server has a name and uid")
            },
        }
    }

    /// Whether `child`, found under the child's name, is ours and current. Its labels and
    /// annotations are the cluster object's exactly, as ESO sets them, so that one removed there
    /// is seen (the apply then drops it); one someone else adds makes the child applied again
    /// at each reconcile, changing nothing, since another manager's fields are theirs.
    fn compare<K: Fanout>(&self, child: &DeserializeGuard<K::Child>, owner: &str) -> Existing {
        if owner_name(child, &K::kind(&())).as_deref() != Some(owner) {
            return Existing::Foreign;
        }
        let Ok(child) = &child.0 else {
            return Existing::Ours { current: false };
        };
        let current = *child.labels() == self.labels
            && *child.annotations() == self.annotations
            && child.owner_references().contains(&self.owner)
            && K::spec_of(child) == self.spec;
        Existing::Ours { current }
    }

    async fn apply<K: Fanout>(
        &self,
        ctx: &Context,
        object: &K,
        child_name: &str,
        namespace: &str,
        new: bool,
    ) -> Result<(), WriteFailure> {
        let api: Api<K::Child> = Api::namespaced(ctx.client.clone(), namespace);
        let child = json!({
            "apiVersion": K::Child::api_version(&()),
            "kind": K::Child::kind(&()),
            "metadata": {
                "name": child_name,
                "namespace": namespace,
                "labels": self.labels,
                "annotations": self.annotations,
                "ownerReferences": [self.owner],
            },
            "spec": self.spec,
        });
        info!(%namespace, child = child_name, owner = %object.name_any(), "writing the child");
        let mut params = PatchParams::apply(FIELD_MANAGER).force();
        if new {
            // The cache may not show yet an object of that name made just before, someone
            // else's, which a forced apply would take over: the server is asked. One made after
            // this read conflicts with the unforced apply wherever its fields differ.
            match api.get_metadata_opt(child_name).await {
                Ok(None) => params.force = false,
                Ok(Some(live)) if owner_name(&live, &K::kind(&())) == Some(object.name_any()) => {}
                Ok(Some(_)) => {
                    return Err(WriteFailure::Foreign(format!(
                        "{} {child_name:?} was made there by someone else; it is not taken over",
                        K::Child::kind(&())
                    )));
                }
                Err(e) => return Err(WriteFailure::of(&e)),
            }
        }
        api.patch(child_name, &params, &Patch::Apply(&child))
            .await
            .map(drop)
            .map_err(|e| WriteFailure::of(&e))
    }
}

/// Deletes a child of ours, only if it is still the one the cache showed (a child recreated
/// meanwhile by someone else is not ours to delete).
async fn delete_child<C>(
    ctx: &Context,
    namespace: &str,
    name: &str,
    uid: Option<String>,
) -> Result<(), Error>
where
    C: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned,
{
    let api: Api<C> = Api::namespaced(ctx.client.clone(), namespace);
    info!(%namespace, child = name, "deleting a child no longer wanted");
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        // Gone already, or no longer the one we own.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(source) => Err(Error::Write {
            what: format!("{} {namespace}/{name}", C::kind(&())),
            source,
        }),
    }
}

/// An object Go ESO finalized is released at its deletion: the children go by garbage
/// collection here, so nothing is left for the finalizer to do.
async fn release_eso_finalizer<K: Fanout>(api: &Api<K>, object: &K) -> Result<(), Error> {
    let finalizers = object.finalizers();
    let Some(at) = finalizers
        .iter()
        .position(|f| f == CLUSTER_EXTERNAL_SECRET_FINALIZER)
    else {
        return Ok(());
    };
    let patch = json!([
        {"op": "test", "path": format!("/metadata/finalizers/{at}"), "value": CLUSTER_EXTERNAL_SECRET_FINALIZER},
        {"op": "remove", "path": format!("/metadata/finalizers/{at}")},
    ]);
    let patch: json_patch::Patch = serde_json::from_value(patch).expect("a valid JSON patch");
    match api
        .patch(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 422 => Ok(()),
        Err(source) => Err(Error::Write {
            what: "finalizers".into(),
            source,
        }),
    }
}

/// For each ClusterSecretStore named: its `conditions`, `None` when it is not known (the child
/// then reports that itself).
async fn cluster_store_conditions(
    ctx: &Context,
    names: &[String],
) -> Vec<(String, Option<Vec<api::store::ClusterSecretStoreCondition>>)> {
    let mut stores = Vec::new();
    for name in names {
        let store = StoreRef {
            kind: StoreKind::ClusterSecretStore,
            name: name.clone(),
        };
        let conditions = ctx
            .manager
            .load(&store, "")
            .await
            .ok()
            .and_then(|s| s.spec.conditions);
        stores.push((name.clone(), conditions));
    }
    stores
}

fn refusal(
    stores: &[(String, Option<Vec<api::store::ClusterSecretStoreCondition>>)],
    ns: &NamespaceView,
) -> Option<String> {
    stores.iter().find_map(|(store, conditions)| {
        let conditions = conditions.as_deref()?;
        match clientmanager::namespace_allowed(conditions, ns.name, ns.labels) {
            Ok(true) => None,
            Ok(false) => Some(format!(
                "ClusterSecretStore {store:?} does not allow namespace {:?} (spec.conditions)",
                ns.name
            )),
            Err(reason) => Some(format!("ClusterSecretStore {store:?}: {reason}")),
        }
    })
}

/// Whether a namespace event changes what cluster objects select: a new or deleted namespace, or
/// one whose labels or deletion changed.
pub(crate) fn namespace_fingerprint(ns: &PartialObjectMeta<Namespace>) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    ns.labels().hash(&mut h);
    ns.metadata.deletion_timestamp.is_some().hash(&mut h);
    Some(h.finish())
}
