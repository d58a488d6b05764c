//! Provider objects (design 007's provider reconcilers): one controller per installed provider
//! kind in each group, started when its CRD becomes Established and stopped when it is deleted,
//! so a provider installed or uninstalled while the operator runs is seen without a restart. A
//! provider object that changes or turns Ready wakes the stores that read through it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::conditions::{Condition, ConditionStatus, READY, set_condition};
use api::provider_kinds::{ProviderStatus, Scope};
use api::store::{ClusterSecretStore, SecretStore};
use clientmanager::{LoadedStore, ProviderObject, StoreKind};
use crd_watch::{Catalog, Summary};
use futures::channel::mpsc::UnboundedSender;
use futures::channel::oneshot;
use futures::{StreamExt, TryStreamExt, future};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use provider::{Caller, ProviderIdentity};
use tracing::{info, instrument, warn};

use crate::context::Context;
use crate::generations::Generations;
use crate::readiness::{self, StatusError, Subject};

/// What the provider reconcilers of every kind work with: the handles every reconciler shares,
/// the generations seen of provider objects, and where a changed one is announced.
pub struct ProviderObjectContext {
    pub shared: Arc<Context>,
    /// Spec changes of provider objects, as opposed to first sights after a start.
    pub generations: Arc<Generations>,
    /// Provider objects whose spec changed: the ExternalSecrets reading through them resync.
    provider_changed: UnboundedSender<ProviderIdentity>,
    /// Each watched kind's queue, by kind and whether it is the cluster-scoped one.
    queues: std::sync::Mutex<HashMap<(String, bool), crate::workqueue::Workqueue>>,
}

impl ProviderObjectContext {
    pub fn new(
        shared: Arc<Context>,
        provider_changed: UnboundedSender<ProviderIdentity>,
    ) -> Arc<Self> {
        Arc::new(Self {
            shared,
            generations: Default::default(),
            provider_changed,
            queues: Default::default(),
        })
    }

    /// Has the provider object `identity` validated now rather than at its interval; nothing
    /// while its kind is not watched.
    pub fn revalidate(&self, identity: &ProviderIdentity) {
        let queues = self.queues.lock().expect("provider queues poisoned");
        if let Some(queue) = queues.get(&(identity.kind.clone(), identity.namespace.is_none())) {
            queue.trigger(identity.namespace.as_deref(), &identity.name);
        }
    }
}

/// Where a provider reconciler sends the stores that read through an object it saw change.
#[derive(Clone)]
pub struct StoreNudges {
    pub secret_stores: UnboundedSender<ObjectRef<SecretStore>>,
    pub cluster_secret_stores: UnboundedSender<ObjectRef<ClusterSecretStore>>,
    /// Tells store controllers that a provider CRD appeared or was deleted.
    pub installed: Vec<UnboundedSender<()>>,
}

impl StoreNudges {
    /// Has `stores` revalidated now rather than at their interval.
    pub fn send(&self, stores: Vec<LoadedStore>) {
        for store in stores {
            match (store.kind, store.namespace) {
                (StoreKind::SecretStore, Some(ns)) => {
                    let _ = self
                        .secret_stores
                        .unbounded_send(ObjectRef::new(&store.name).within(&ns));
                }
                (StoreKind::ClusterSecretStore, _) => {
                    let _ = self
                        .cluster_secret_stores
                        .unbounded_send(ObjectRef::new(&store.name));
                }
                (StoreKind::SecretStore, None) => {}
            }
        }
    }
}

struct KindContext {
    objects: Arc<ProviderObjectContext>,
    provider: Arc<dyn provider::Provider>,
    resource: ApiResource,
    cluster: bool,
    nudges: StoreNudges,
}

/// Until the kinds of the first list of CRDs are watched, or wait for permission: lookups of a
/// kind not watched yet wait (rather than turning every store NotReady for a moment at each
/// start), and once it settles, a kind not watched is news.
type Settling = Arc<std::sync::Mutex<Option<oneshot::Sender<()>>>>;

/// Which CRDs the provider discovery reads: those of the provider groups.
pub fn provider_crds(crd: &CustomResourceDefinition) -> bool {
    Scope::of_group(&crd.spec.group).is_some()
}

/// Starts a controller for each provider kind this operator knows, once, as the catalog of
/// provider CRDs (kept by the process's one CRD watch, see [`provider_crds`]) shows it
/// Established.
pub fn discover(
    objects_ctx: Arc<ProviderObjectContext>,
    nudges: StoreNudges,
    mut crds: Catalog,
) -> impl Future<Output = ()> {
    let ctx = objects_ctx.shared.clone();
    ctx.manager.discovering_providers();
    async move {
        let mut running: HashMap<String, Running> = HashMap::new();
        let mut first_listing = true;
        loop {
            let (listed, kinds, stopped) = match &*crds.borrow_and_update() {
                Some(listing) => {
                    // Deleted, or no longer serving the version watched: first stopped, so
                    // that the second is started again below at the version now stored.
                    let stopped: Vec<(String, Running)> = running
                        .extract_if(|name, kind| {
                            listing
                                .get(name)
                                .is_none_or(|crd| !crd.served.contains(&kind.kctx.resource.version))
                        })
                        .collect();
                    let kinds: Vec<_> = listing
                        .iter()
                        .filter_map(|(name, crd)| {
                            let kctx = kind_of(name, crd, &objects_ctx, &nudges, &running)?;
                            Some((name.clone(), kctx))
                        })
                        .collect();
                    (true, kinds, stopped)
                }
                None => (false, Vec::new(), Vec::new()),
            };
            for (name, kind) in stopped {
                let restarted = kinds.iter().any(|(n, _)| *n == name);
                kind.stop(&name, restarted);
            }
            // The kinds of the first listing are awaited (see `Settling`); later ones are news.
            let first = listed && std::mem::take(&mut first_listing);
            let mut settled = Vec::new();
            for (name, kctx) in kinds {
                let settling = first.then(|| {
                    let (settle, heard) = oneshot::channel();
                    settled.push(heard);
                    Arc::new(std::sync::Mutex::new(Some(settle)))
                });
                let task = tokio::spawn(run_kind(kctx.clone(), settling)).abort_handle();
                running.insert(name, Running { task, kctx });
            }
            if first {
                let manager = ctx.clone();
                tokio::spawn(async move {
                    future::join_all(settled).await;
                    manager.manager.providers_discovered();
                });
            }
            if crds.changed().await.is_err() {
                warn!("the watch of CRDs ended: no provider kind installed from now on is watched");
                return;
            }
        }
    }
}

/// The name a provider kind's controller and its queue go by.
fn queue_name(resource: &ApiResource) -> String {
    format!("{}.{}", resource.plural, resource.group)
}

/// A provider kind's controller, while its CRD is installed and serves the version it watches.
struct Running {
    task: tokio::task::AbortHandle,
    kctx: Arc<KindContext>,
}

impl Running {
    /// Its CRD `crd` was deleted or no longer serves the version watched: its watch would be
    /// refused for good (and retried with a warning each time). `restarted`: a controller at
    /// the version now stored replaces it, and its cache this one's once filled (lookups
    /// meanwhile read the API server). Else the cache goes too, and the stores are told, so
    /// that those reading through the kind say it is not installed or not watched.
    fn stop(self, crd: &str, restarted: bool) {
        self.task.abort();
        let (objects, resource) = (&self.kctx.objects, &self.kctx.resource);
        if restarted {
            info!(
                crd,
                version = resource.version,
                "provider CRD no longer serves the version watched; watching it anew"
            );
            return;
        }
        objects
            .queues
            .lock()
            .expect("provider queues poisoned")
            .remove(&(resource.kind.clone(), self.kctx.cluster));
        objects.shared.manager.drop_provider_cache(resource);
        objects
            .shared
            .metrics
            .workqueues
            .forget(&queue_name(resource));
        for tx in &self.kctx.nudges.installed {
            let _ = tx.unbounded_send(());
        }
        info!(
            crd,
            "provider CRD was deleted or no longer serves a version this build does; its controller stopped"
        );
    }
}

/// The context of the controller the CRD `name` needs, when it is a provider kind this operator
/// serves, Established, and not `running` already.
fn kind_of(
    name: &str,
    crd: &Summary,
    objects_ctx: &Arc<ProviderObjectContext>,
    nudges: &StoreNudges,
    running: &HashMap<String, Running>,
) -> Option<Arc<KindContext>> {
    let ctx = objects_ctx.shared.as_ref();
    let cluster = match Scope::of_group(&crd.group) {
        Some(Scope::Namespaced) => false,
        Some(Scope::Cluster) if ctx.settings.namespace.is_none() => true,
        _ => return None,
    };
    let provider = ctx.manager.registry().by_kind(&crd.kind).cloned()?;
    if !crd.established || running.contains_key(name) {
        return None;
    }
    // Watched at the version the cluster stores, which this build must also serve; one it does
    // not is looked at again at the CRD's next change.
    let version = crd.storage_version.as_deref()?;
    let descriptor = provider.descriptor();
    if !descriptor.serves(version) {
        warn!(
            crd = name,
            version, "provider CRD stores a version this build does not serve; not watching it"
        );
        return None;
    }
    info!(
        crd = name,
        "provider CRD is installed; starting its controller"
    );
    let scope = if cluster {
        Scope::Cluster
    } else {
        Scope::Namespaced
    };
    let resource = descriptor.resource(scope, version);
    Some(Arc::new(KindContext {
        objects: objects_ctx.clone(),
        provider,
        resource,
        cluster,
        nudges: nudges.clone(),
    }))
}

/// Until the operator may list and watch `kctx`'s kind. A Helm upgrade that enables a provider
/// applies its CRD before the ClusterRole that grants it, and a watch started in between would
/// only be refused, and retried ever further apart.
async fn wait_for_permission(kctx: &KindContext) {
    let ctx = kctx.objects.shared.as_ref();
    let namespace = match (&ctx.settings.namespace, kctx.cluster) {
        (Some(ns), false) => Some(ns.clone()),
        _ => None,
    };
    let allowed = |verb: &'static str| {
        let attributes = access_review::ResourceAttributes {
            group: Some(kctx.resource.group.clone()),
            resource: Some(kctx.resource.plural.clone()),
            verb: Some(verb.to_owned()),
            namespace: namespace.clone(),
            ..Default::default()
        };
        async move {
            access_review::allowed(&ctx.client, attributes)
                .await
                // Cannot ask: start, and let the watch report what it meets.
                .unwrap_or_else(|e| {
                    warn!(error = %e, "could not check the permission to watch a provider kind");
                    true
                })
        }
    };
    let mut pause = None;
    while !(allowed("list").await && allowed("watch").await) {
        if pause.is_none() {
            info!(
                group = kctx.resource.group,
                resource = kctx.resource.plural,
                "waiting for permission to list and watch this provider kind"
            );
        }
        let next = pause.map_or(PERMISSION_POLL, |p: Duration| {
            (p * 2).min(PERMISSION_POLL_MAX)
        });
        tokio::time::sleep(next).await;
        pause = Some(next);
    }
}

/// The first pause between two asks for permission: an upgrade's RBAC lands seconds after its
/// CRD.
const PERMISSION_POLL: Duration = Duration::from_secs(2);

/// The longest: a kind refused for long is a provider disabled with its CRD kept, which may
/// stay so for good, and is asked about twice a minute rather than every 2 s.
const PERMISSION_POLL_MAX: Duration = Duration::from_secs(30);

fn forbidden(e: &watcher::Error) -> bool {
    matches!(
        e,
        watcher::Error::InitialListFailed(kube::Error::Api(status))
            | watcher::Error::WatchStartFailed(kube::Error::Api(status))
            | watcher::Error::WatchFailed(kube::Error::Api(status))
            if status.code == 403
    )
}

/// `settling`: this kind was in the first list of CRDs, and is awaited until its cache is
/// filled or its list refused. Its permission is asked only once a list was refused: installed
/// before the operator started, it is granted by the same release, and a restart asks nothing.
/// A kind installed later is asked about first.
async fn run_kind(kctx: Arc<KindContext>, settling: Option<Settling>) {
    if settling.is_none() {
        wait_for_permission(&kctx).await;
    }
    let ctx = kctx.objects.shared.clone();
    let api: Api<DynamicObject> = match (&ctx.settings.namespace, kctx.cluster) {
        (Some(ns), false) => Api::namespaced_with(ctx.client.clone(), ns, &kctx.resource),
        _ => Api::all_with(ctx.client.clone(), &kctx.resource),
    };
    // Whether lookups were still waiting for this kind, which they stop doing now.
    let settled = move || {
        settling
            .as_ref()
            .and_then(|s| s.lock().expect("settling poisoned").take())
            .is_some()
    };
    let writer = kube::runtime::reflector::store::Writer::new(kctx.resource.clone());
    let store = writer.as_reader();
    let queue = ctx.workqueue(queue_name(&kctx.resource));
    kctx.objects
        .queues
        .lock()
        .expect("provider queues poisoned")
        .insert((kctx.resource.kind.clone(), kctx.cluster), queue.clone());
    let departed = ctx.manager.forget_departed(kctx.provider.descriptor().kind);
    let refused = {
        let (kctx, settled) = (kctx.clone(), settled.clone());
        move |event: watcher::Result<watcher::Event<DynamicObject>>| {
            let (kctx, settled) = (kctx.clone(), settled.clone());
            async move {
                if let Err(e) = &event
                    && forbidden(e)
                {
                    let _ = settled();
                    wait_for_permission(&kctx).await;
                }
                event
            }
        }
    };
    // Its cache is used, and stores that found the kind missing are told, once its first list
    // is in. Seen in the stream rather than awaited on the cache: the controller waits on the
    // cache's readiness too, and it wakes only one waiter.
    let mut filled = Some({
        let (kctx, store) = (kctx.clone(), store.clone());
        move || {
            let ctx = &kctx.objects.shared;
            // Lookups that waited for it need no telling, unless they gave up waiting.
            let given_up = ctx.manager.providers_known();
            ctx.manager.use_provider_cache(kctx.resource.clone(), store);
            if !settled() || given_up {
                for tx in &kctx.nudges.installed {
                    let _ = tx.unbounded_send(());
                }
            }
        }
    });
    let objects = watcher(api, watcher::Config::default())
        .then(refused)
        .default_backoff()
        .reflect(writer)
        .inspect_ok(move |event| {
            if matches!(event, watcher::Event::InitDone)
                && let Some(filled) = filled.take()
            {
                filled();
            }
        });
    let controller = queue.controller(objects, store, kctx.resource.clone(), departed);
    let reconcile = queue.reconciler(reconcile);
    controller
        .run(reconcile, queue.error_policy(error_policy), kctx.clone())
        .for_each(crate::outcome::after_reconcile(ctx.clone(), queue))
        .await;
}

fn error_policy(obj: Arc<DynamicObject>, error: &StatusError, kctx: Arc<KindContext>) -> Action {
    use crate::outcome::ErrorKind;
    let object = ObjectRef::from_obj_with(obj.as_ref(), kctx.resource.clone());
    kctx.objects
        .shared
        .failed("provider", error.kind(), &object.to_string())
}

/// Whether a change of `obj` is announced to the ExternalSecrets reading through it: when it is
/// news (a new generation, or created while this operator runs), except a store's converted
/// object just written, which holds the store's own spec: its ExternalSecrets already read
/// through it (and a store change wakes them itself). Announcing it would refetch every
/// ExternalSecret of every inline store when an operator takes over from Go ESO, which made
/// none.
fn announced(generations: &Generations, obj: &DynamicObject) -> bool {
    let converted_just_now = obj.labels().contains_key(api::store::LABEL_CONVERTED_FROM)
        && obj.metadata.generation == Some(1);
    generations.changed(obj) && !converted_just_now
}

#[instrument(skip_all, fields(kind = %kctx.resource.kind, group = %kctx.resource.group, namespace = obj.namespace(), name = obj.name_any()))]
async fn reconcile(obj: Arc<DynamicObject>, kctx: Arc<KindContext>) -> Result<Action, StatusError> {
    let ctx = kctx.objects.shared.as_ref();
    let started = Instant::now();
    let object = ProviderObject::from_dynamic(kctx.provider.clone(), &obj);
    let identity = object.identity.clone();
    let changed = announced(&kctx.objects.generations, &obj);
    if changed {
        let _ = kctx
            .objects
            .provider_changed
            .unbounded_send(identity.clone());
    }
    // A hand edit of a converted object is put back before it is validated, whatever
    // generations were seen (the edit may be the first this operator sees of the object).
    let drifted = if obj.labels().contains_key(api::store::LABEL_CONVERTED_FROM) {
        let spec = obj.data.get("spec").unwrap_or(&serde_json::Value::Null);
        ctx.manager.stores_drifted_from(&identity, spec)
    } else {
        Vec::new()
    };
    for store in &drifted {
        crate::secretstore::put_back_converted(store, ctx).await;
    }
    let (caller, namespace) = match &identity.namespace {
        Some(ns) => (Caller::Provider, ns.clone()),
        None => (Caller::ClusterProvider, String::new()),
    };
    let readiness = readiness::check(
        ctx,
        Subject::Provider,
        object,
        (caller, &namespace),
        ctx.manager.class_of_kind(&identity.kind),
    )
    .await;
    let (status, reason, message) = (readiness.status, readiness.reason, readiness.message);
    let previous: ProviderStatus = obj
        .data
        .get("status")
        .and_then(|s| serde_json::from_value(s.clone()).ok())
        .unwrap_or_default();
    let mut conditions = previous.conditions.clone();
    set_condition(
        &mut conditions,
        Condition::ready(status, reason, message.clone()),
        jiff::Timestamp::now(),
    );
    let new = ProviderStatus {
        conditions,
        observed_generation: obj.metadata.generation,
        capabilities: readiness.capabilities,
    };
    let was_ready = api::conditions::find(&previous.conditions, READY)
        .is_some_and(|c| c.status == ConditionStatus::True);
    if changed || (status == ConditionStatus::True && !was_ready) {
        // The stores reading through it revalidate now rather than at their interval.
        kctx.nudges.send(ctx.manager.stores_using(&identity));
    } else {
        kctx.nudges.send(drifted);
    }
    let api: Api<DynamicObject> = match obj.namespace() {
        Some(ns) => Api::namespaced_with(ctx.client.clone(), &ns, &kctx.resource),
        None => Api::all_with(ctx.client.clone(), &kctx.resource),
    };
    let written = ctx
        .status
        .update(&api, &kctx.resource, &obj.metadata, &previous, &new)
        .await
        .map_err(|source| StatusError {
            part: "status",
            kind: kctx.resource.kind.clone(),
            name: obj.name_any(),
            source,
        })?;
    if written {
        let was = api::conditions::find(&previous.conditions, READY);
        if was.is_none_or(|c| c.reason.as_deref() != Some(reason)) {
            let type_ = if status == ConditionStatus::False {
                EventType::Warning
            } else {
                EventType::Normal
            };
            ctx.event(&obj.object_ref(&kctx.resource), type_, reason, message);
        }
    }
    tracing::debug!(elapsed = ?started.elapsed(), "provider reconciled");
    Ok(Action::requeue(ctx.settings.store_requeue_interval))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fake(
        name: &str,
        generation: i64,
        converted: bool,
        created: jiff::Timestamp,
    ) -> DynamicObject {
        let labels = if converted {
            json!({api::store::LABEL_CONVERTED_FROM: "store"})
        } else {
            json!({})
        };
        serde_json::from_value(json!({
            "apiVersion": "providers.external-secrets.io/v1alpha1", "kind": "Fake",
            "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}"),
                         "generation": generation, "labels": labels,
                         "creationTimestamp": created.to_string()},
            "spec": {"data": []},
        }))
        .unwrap()
    }

    const FAKES: &str = "fakes.providers.external-secrets.io";

    fn fake_crd(storage_version: &str) -> Summary {
        Summary {
            group: "providers.external-secrets.io".into(),
            kind: "Fake".into(),
            established: true,
            storage_version: Some(storage_version.into()),
            served: vec![storage_version.into()],
        }
    }

    /// What discovery starts a kind's controller with, on `client`.
    fn contexts(client: kube::Client) -> (Arc<ProviderObjectContext>, StoreNudges) {
        let objects = ProviderObjectContext::new(
            crate::standin::context(client),
            futures::channel::mpsc::unbounded().0,
        );
        let nudges = StoreNudges {
            secret_stores: futures::channel::mpsc::unbounded().0,
            cluster_secret_stores: futures::channel::mpsc::unbounded().0,
            installed: Vec::new(),
        };
        (objects, nudges)
    }

    /// A provider CRD that stores a version this build does not serve is not watched; once it
    /// stores one this build serves (a chart rolled back, say), its controller starts, without
    /// a restart of the operator.
    #[tokio::test]
    async fn a_crd_is_watched_once_it_stores_a_version_this_build_serves() {
        let (client, _) = crate::standin::client(|_| crate::standin::status(404, "NotFound"));
        let (objects, nudges) = contexts(client);
        let mut running = HashMap::new();
        let kind = |version, running: &HashMap<String, Running>| {
            kind_of(FAKES, &fake_crd(version), &objects, &nudges, running)
        };
        assert!(
            kind("v9", &running).is_none(),
            "a version this build does not serve"
        );
        let watched = kind("v1alpha1", &running).expect("a version this build serves is watched");
        assert_eq!(watched.resource.version, "v1alpha1");
        let task = tokio::spawn(async {}).abort_handle();
        let kctx = watched;
        running.insert(FAKES.to_owned(), Running { task, kctx });
        assert!(kind("v1alpha1", &running).is_none(), "started once");
    }

    /// A provider kind the operator may not list (a provider disabled by a Helm upgrade keeps
    /// its CRD, and loses its RBAC) is asked about ever further apart, up to every 30 s rather
    /// than every 2 s for as long as it stays refused; once allowed, its controller starts
    /// within those 30 s.
    #[tokio::test(start_paused = true)]
    async fn a_refused_kind_is_asked_about_ever_further_apart() {
        use std::sync::Mutex;

        let allowed = Arc::new(Mutex::new(false));
        let asked: Arc<Mutex<Vec<tokio::time::Instant>>> = Arc::default();
        let (answer, times) = (allowed.clone(), asked.clone());
        let (client, _) = crate::standin::client(move |request| {
            if request.is(http::Method::POST, "/selfsubjectaccessreviews") {
                times.lock().unwrap().push(tokio::time::Instant::now());
                let mut review = request.body.clone();
                review["status"] = json!({"allowed": *answer.lock().unwrap()});
                return (201, review);
            }
            crate::standin::status(404, "NotFound")
        });
        let (objects, nudges) = contexts(client);
        let crd = fake_crd("v1alpha1");
        let kctx = kind_of(FAKES, &crd, &objects, &nudges, &HashMap::new()).unwrap();
        let waiting = tokio::spawn(async move { wait_for_permission(&kctx).await });

        tokio::time::sleep(Duration::from_secs(600)).await;
        let polls = asked.lock().unwrap().len();
        assert!(polls <= 30, "{polls} permission checks in 10 minutes");
        assert!(!waiting.is_finished());

        *allowed.lock().unwrap() = true;
        let refused_until = tokio::time::Instant::now();
        waiting.await.unwrap();
        let waited = tokio::time::Instant::now() - refused_until;
        assert!(
            waited <= Duration::from_secs(30),
            "started {waited:?} after it was allowed"
        );
        let gaps: Vec<Duration> = asked
            .lock()
            .unwrap()
            .windows(2)
            .map(|w| w[1] - w[0])
            .collect();
        assert_eq!(
            gaps.first(),
            Some(&PERMISSION_POLL),
            "the first pause: {gaps:?}"
        );
        assert_eq!(gaps.iter().max(), Some(&PERMISSION_POLL_MAX), "{gaps:?}");
    }

    /// Discovery running on an API server that allows every watch and has no provider object:
    /// its context, the catalog it reads, and the requests it made.
    fn discovering() -> (
        Arc<ProviderObjectContext>,
        tokio::sync::watch::Sender<crd_watch::Listing>,
        crate::standin::Requests,
    ) {
        let (client, requests) = crate::standin::client(|request| {
            if request.is(http::Method::POST, "/selfsubjectaccessreviews") {
                let mut review = request.body.clone();
                review["status"] = json!({"allowed": true});
                return (201, review);
            }
            crate::standin::status(404, "NotFound")
        });
        let (objects, nudges) = contexts(client);
        let (listing, catalog) = tokio::sync::watch::channel(Some(Default::default()));
        tokio::spawn(discover(objects.clone(), nudges, catalog));
        (objects, listing, requests)
    }

    /// A provider CRD deleted while the operator runs (a provider uninstalled with its CRDs)
    /// stops its kind's controller: its watch is not retried for good against a resource that
    /// is gone (a warning each time), and once the CRD is installed again the kind is watched
    /// again at once, at the version it then stores.
    #[tokio::test(start_paused = true)]
    async fn a_deleted_crd_stops_its_kind_and_a_reinstalled_one_starts_it_again() {
        use std::collections::BTreeMap;

        let (objects, listing, requests) = discovering();
        let asked = || crate::standin::count(&requests, "/fakes");
        let watched = |objects: &ProviderObjectContext| {
            objects
                .queues
                .lock()
                .unwrap()
                .contains_key(&("Fake".to_owned(), false))
        };
        let installed = || Some(BTreeMap::from([(FAKES.to_owned(), fake_crd("v1alpha1"))]));

        listing.send_replace(installed());
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(asked() > 0, "the kind is watched");
        assert!(watched(&objects));

        listing.send_replace(Some(BTreeMap::new()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let deleted = asked();
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(
            asked(),
            deleted,
            "a kind whose CRD is gone is asked nothing"
        );
        assert!(!watched(&objects), "its queue is gone with it");

        listing.send_replace(installed());
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(asked() > deleted, "watched again once installed again");
        assert!(watched(&objects));
    }

    /// A CRD that stops serving the version a kind is watched at (a release that drops it once
    /// `migrate storage` moved every object) has the kind watched anew, at the version it then
    /// stores; where this build serves none, the kind is not watched, rather than its watch
    /// refused for good.
    #[tokio::test(start_paused = true)]
    async fn a_kind_whose_watched_version_is_no_longer_served_is_watched_anew() {
        use std::collections::BTreeMap;

        let (_objects, listing, requests) = discovering();
        let asked = || crate::standin::count(&requests, "/v1alpha1/fakes");
        let at = |crd: Summary| Some(BTreeMap::from([(FAKES.to_owned(), crd)]));

        listing.send_replace(at(fake_crd("v1alpha1")));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(asked() > 0, "watched at v1alpha1");

        // Stored and served at a version this build does not serve: not watched at all.
        listing.send_replace(at(fake_crd("v9")));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let dropped = asked();
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(
            asked(),
            dropped,
            "v1alpha1 is not served: nothing asks for it"
        );

        // Served again beside v9: watched again.
        let mut both = fake_crd("v1alpha1");
        both.served.push("v9".into());
        listing.send_replace(at(both));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(asked() > dropped, "watched at v1alpha1 again");
    }

    /// The decision `an_inline_store_s_converted_object_forces_its_users` (externalsecret
    /// tests) takes as given: which provider object changes reach the ExternalSecrets.
    #[test]
    fn a_converted_object_is_announced_from_its_second_generation_a_hand_made_one_at_once() {
        let before = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60);
        let generations = Generations::default();
        let now = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(1);
        // In order: each sight is recorded, as the watch shows them one after another.
        let sights = [
            (
                "converted",
                1,
                true,
                now,
                false,
                "a converted object just written holds its store's spec",
            ),
            ("converted", 2, true, now, true, "a store edit rewrote it"),
            (
                "converted",
                2,
                true,
                now,
                false,
                "the same generation again (a status write)",
            ),
            (
                "by-hand",
                1,
                false,
                now,
                true,
                "a provider object made while the operator runs",
            ),
            (
                "older",
                3,
                false,
                before,
                false,
                "an object first seen after a start is no news",
            ),
        ];
        for (name, generation, converted, created, expected, why) in sights {
            let obj = fake(name, generation, converted, created);
            assert_eq!(announced(&generations, &obj), expected, "{why}");
        }
    }
}
