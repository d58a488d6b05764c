//! The operator: builds the shared context and each reconciler's own, serves HTTP, and runs
//! every controller until shutdown. What triggers each controller lives with its kind.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use api::cluster_secrets::{ClusterExternalSecret, ClusterPushSecret};
use api::provider_class::{ClusterProviderClass, ProviderClass};
use api::store::{ClusterSecretStore, SecretStore};
use clientmanager::ClientManager;
use futures::channel::mpsc;
use futures::{StreamExt, TryStreamExt, future};
use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use prometheus_client::registry::Registry as MetricsRegistry;
use provider::ProviderRegistry;
use tracing::{error, info, warn};

use crate::context::{Context, ReadyStore, Settings};
use crate::externalsecret::ExternalSecretContext;
use crate::externalsecret::triggers::{ExternalSecretTriggers, StoreEvents};
use crate::generations::Generations;
use crate::metrics::Metrics;
use crate::outcome::{after_reconcile, error_policy};
use crate::provider_class::ProviderClassContext;
use crate::provider_objects::{ProviderObjectContext, StoreNudges};
use crate::secretstore::{StoreContext, StoreObject};
use crate::watch::{Cached, Events, FirstList, changed_objects, on_departure, scoped, shared};
use crate::{provider_objects, pushsecret, secretstore};

/// How often the generations of deleted stores, classes and provider objects are forgotten.
const GENERATIONS_SWEEP: std::time::Duration = std::time::Duration::from_secs(600);

/// Where the operator serves HTTP; `None` serves nothing there.
#[derive(Clone, Copy, Debug, Default)]
pub struct Addresses {
    /// `/metrics`
    pub metrics: Option<SocketAddr>,
    /// `/healthz` and `/readyz`
    pub probes: Option<SocketAddr>,
}

pub struct Operator {
    shared: Arc<Context>,
    /// The contexts of the other reconcilers; built here, with the shared one, so that the
    /// generations seen date from the start rather than from taking the lead. The
    /// ExternalSecrets' is built when the controllers start: its wait for the first list of
    /// Secrets counts from then.
    stores: Arc<StoreContext>,
    classes: Arc<ProviderClassContext>,
    provider_objects: Arc<ProviderObjectContext>,
    /// Filled by the PushSecret controller's watch; the stores read it.
    pushsecret_cache: reflector::store::Writer<pushsecret::Watched>,
    pub metrics_registry: Arc<MetricsRegistry>,
    ready: Arc<AtomicBool>,
    externalsecret_triggers: ExternalSecretTriggers,
    pushsecret_wakes: mpsc::UnboundedReceiver<ReadyStore>,
    /// Where generic targets' watch events, and foreign events held during our own writes, go
    /// to the ExternalSecrets' trigger.
    generic_changed: mpsc::UnboundedSender<crate::own_writes::TargetChange>,
    /// The ExternalSecrets and PushSecrets cluster objects own, as their kinds' watches see them.
    cluster_children: Arc<crate::cluster::ClusterChildren>,
    child_changes: crate::cluster::ChildChanges,
    /// The provider CRDs, summarized, kept from the process's start: a replica that becomes
    /// the leader lists nothing to learn them.
    provider_crds: crd_watch::Catalog,
}

impl Operator {
    /// Reads the provider CRDs from `crds`, the process's watch of CRDs, which must run for
    /// any provider kind to be watched.
    pub fn new(
        client: kube::Client,
        settings: Settings,
        providers: ProviderRegistry,
        crds: &mut crd_watch::CrdWatch,
    ) -> Self {
        let mut registry = MetricsRegistry::default();
        let metrics = Metrics::register(&mut registry);
        let cache_metrics = clientmanager::Metrics::register(&mut registry);
        for provider in providers.iter() {
            provider.register_metrics(&mut registry);
        }
        let manager = ClientManager::new(
            client.clone(),
            Arc::new(providers),
            true,
            settings.controller_class.clone(),
            cache_metrics,
        )
        .route_kinds(settings.out_of_process.clone());
        manager.pool().metrics().register(&mut registry);
        let (provider_changed, provider_changes) = mpsc::unbounded();
        let (es_wake, es_wakes) = mpsc::unbounded();
        let (ps_wake, pushsecret_wakes) = mpsc::unbounded();
        let (generic_changed, generic_changes) = mpsc::unbounded();
        let (cluster_children, child_changes) = crate::cluster::children();
        let shared = Context::new(client, manager, metrics, settings);
        let (pushsecrets, pushsecret_cache) = reflector::store();
        let pushsecrets = pushsecret::Known::new(pushsecrets);
        let store_ready: crate::externalsecret::triggers::StoreReady = Arc::new({
            let (es_wake, ps_wake) = (es_wake.clone(), ps_wake.clone());
            move |store: ReadyStore| {
                let _ = es_wake.unbounded_send(store.clone());
                let _ = ps_wake.unbounded_send(store);
            }
        });
        Self {
            stores: StoreContext::new(shared.clone(), store_ready.clone(), ps_wake, pushsecrets),
            classes: ProviderClassContext::new(shared.clone()),
            provider_objects: ProviderObjectContext::new(shared.clone(), provider_changed),
            pushsecret_cache,
            shared,
            metrics_registry: Arc::new(registry),
            ready: Arc::default(),
            externalsecret_triggers: ExternalSecretTriggers::new(
                provider_changes,
                es_wakes,
                store_ready,
                generic_changes,
            ),
            pushsecret_wakes,
            generic_changed,
            cluster_children: Arc::new(cluster_children),
            child_changes,
            provider_crds: crds.catalog(provider_objects::provider_crds),
        }
    }

    /// Adds metrics of what runs beside the operator in its process (the conversion webhook)
    /// to its `/metrics`; before [`Operator::run`].
    pub fn register_metrics(&mut self, register: impl FnOnce(&mut MetricsRegistry)) {
        register(
            Arc::get_mut(&mut self.metrics_registry)
                .expect("the metrics registry is shared only once the operator runs"),
        );
    }

    /// Serves HTTP at once, runs every controller once `leadership` resolves (at once without
    /// leader election), until `shutdown` resolves.
    pub async fn run(
        self,
        addresses: Addresses,
        leadership: impl Future<Output = ()> + Send,
        shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ) {
        let ctx = self.shared.clone();
        if let Some(addr) = addresses.metrics {
            let registry = self.metrics_registry.clone();
            tokio::spawn(async move {
                if let Err(e) = crate::http::serve_metrics(addr, registry).await {
                    error!(error = %e, %addr, "metrics server failed");
                }
            });
        }
        if let Some(addr) = addresses.probes {
            let ready = self.ready.clone();
            tokio::spawn(async move {
                if let Err(e) = crate::http::serve_probes(addr, ready).await {
                    error!(error = %e, %addr, "probe server failed");
                }
            });
        }
        let shutdown = future::Shared::clone(&futures::FutureExt::shared(Box::pin(shutdown)));
        // Every replica serves probes and metrics; only the leader reconciles.
        self.ready.store(true, Ordering::Relaxed);
        tokio::select! {
            _ = leadership => info!("leading: starting the controllers"),
            _ = shutdown.clone() => return,
        }
        ctx.metrics.leader.set(1);
        let sweeper = ctx.clone();
        tokio::spawn(async move { sweeper.manager.sweep_idle().await });
        tokio::spawn(sweep_generations(
            ctx.clone(),
            [
                self.externalsecret_triggers.store_generations.clone(),
                self.classes.generations.clone(),
                self.provider_objects.generations.clone(),
            ],
        ));
        let (ss_tx, ss_rx) = mpsc::unbounded();
        let (css_tx, css_rx) = mpsc::unbounded();
        let (ss_installed_tx, ss_installed_rx) = mpsc::unbounded();
        let (css_installed_tx, css_installed_rx) = mpsc::unbounded();
        let nudges = StoreNudges {
            secret_stores: ss_tx,
            cluster_secret_stores: css_tx,
            installed: vec![ss_installed_tx, css_installed_tx],
        };
        let namespace = ctx.settings.namespace.clone();
        let client = ctx.client.clone();
        // PushSecret changes that concern stores' finalizers.
        let (ss_users_tx, ss_users_rx) = mpsc::unbounded();
        let (css_users_tx, css_users_rx) = mpsc::unbounded();

        let (ss_events, ss_for_externalsecrets) = shared(scoped(&client, namespace.as_deref()));
        // Not in single-namespace mode, where cluster stores are not served.
        let (css_events, css_for_externalsecrets) = match namespace {
            None => {
                let (stores, externalsecrets) = shared(Api::all(client.clone()));
                (Some(stores), Some(externalsecrets))
            }
            Some(_) => (None, None),
        };
        let stores = store_controller::<SecretStore>(
            self.stores.clone(),
            ss_events,
            ss_rx,
            ss_installed_rx,
            ss_users_rx,
            shutdown.clone(),
            "secretstore",
        );
        // Not in single-namespace mode, where cluster stores are not served.
        let mut store_users = vec![ss_users_tx];
        if namespace.is_none() {
            store_users.push(css_users_tx);
        }
        let cluster_stores = async {
            if let Some(events) = css_events {
                store_controller::<ClusterSecretStore>(
                    self.stores.clone(),
                    events,
                    css_rx,
                    css_installed_rx,
                    css_users_rx,
                    shutdown.clone(),
                    "clustersecretstore",
                )
                .await
            }
        };

        let pushsecrets = pushsecret::triggers::controller(
            ctx.clone(),
            self.pushsecret_cache,
            self.stores.pushsecrets_listing(),
            self.pushsecret_wakes,
            store_users,
            self.cluster_children.clone(),
            shutdown.clone(),
        );
        let externalsecrets = self.externalsecret_triggers.controller(
            ExternalSecretContext::new(ctx.clone(), self.generic_changed),
            self.cluster_children.clone(),
            StoreEvents {
                secret_stores: ss_for_externalsecrets,
                cluster_secret_stores: css_for_externalsecrets,
            },
            shutdown.clone(),
        );
        let discovery = provider_objects::discover(
            self.provider_objects.clone(),
            nudges.clone(),
            self.provider_crds,
        );
        let (namespaces_cached, namespaces_writer) = reflector::store();
        let namespaces_cached = Cached::new(namespaces_cached);
        let (ces_namespaces_tx, ces_namespaces) = mpsc::unbounded();
        let (cps_namespaces_tx, cps_namespaces) = mpsc::unbounded();
        let namespaces = namespace_cache(
            ctx.clone(),
            namespaces_writer,
            namespaces_cached.listed.clone(),
            vec![ces_namespaces_tx, cps_namespaces_tx],
        );
        // Not in single-namespace mode, where cluster kinds are not served.
        let cluster_kinds = async {
            if namespace.is_none() {
                future::join(
                    crate::cluster::controller::<ClusterExternalSecret>(
                        ctx.clone(),
                        self.cluster_children.clone(),
                        namespaces_cached.clone(),
                        ces_namespaces,
                        self.child_changes.external_stores,
                        self.child_changes.external,
                        shutdown.clone(),
                    ),
                    crate::cluster::controller::<ClusterPushSecret>(
                        ctx.clone(),
                        self.cluster_children.clone(),
                        namespaces_cached.clone(),
                        cps_namespaces,
                        self.child_changes.push_stores,
                        self.child_changes.push,
                        shutdown.clone(),
                    ),
                )
                .await;
            }
        };
        let availability = availability(
            self.stores.clone(),
            self.provider_objects.clone(),
            nudges.clone(),
        );
        let classes = crate::provider_class::controller::<ProviderClass>(
            self.classes.clone(),
            scoped(&client, namespace.as_deref()),
            nudges.clone(),
            shutdown.clone(),
            "providerclass",
        )
        .await;
        let cluster_classes = match namespace {
            None => {
                crate::provider_class::controller::<ClusterProviderClass>(
                    self.classes,
                    Api::all(client.clone()),
                    nudges,
                    shutdown.clone(),
                    "clusterproviderclass",
                )
                .await
            }
            // Not watched in single-namespace mode: looked up when used.
            Some(_) => reflector::store().0,
        };
        ctx.manager.use_class_caches(classes, cluster_classes);
        info!(namespace = ?namespace, class = %ctx.settings.controller_class, "controllers started");
        tokio::select! {
            _ = future::join5(stores, cluster_stores, externalsecrets, pushsecrets, cluster_kinds) => {}
            _ = discovery => {}
            _ = namespaces => {}
            _ = availability => {}
        }
    }
}

/// The stores that read through a provider that became unreachable, and its provider object,
/// are validated now, so that their status says so rather than stay Ready until their next
/// check (minutes); the client answers for the provider while it waits, so nothing is asked of
/// it. Once it is reachable
/// again they are validated again, and their ExternalSecrets and PushSecrets are woken as when
/// a store turns Ready: held back, they may be deep in their backoff.
async fn availability(
    store_ctx: Arc<StoreContext>,
    provider_objects: Arc<ProviderObjectContext>,
    nudges: StoreNudges,
) {
    let ctx = store_ctx.shared.as_ref();
    let (to, mut changes) = mpsc::unbounded();
    ctx.manager.on_availability(to);
    // The manager keeps the sender while it lives; should it not take this one, the loop ends
    // at once, and that must not end the select in `run` that stops every controller.
    while let Some(change) = changes.next().await {
        let stores = ctx.manager.stores_using(&change.identity);
        for store in &stores {
            let (name, namespace) = (&store.name, &store.namespace);
            if change.available {
                info!(store = %name, ?namespace, "provider reachable again");
                store_ctx.store_ready(ReadyStore {
                    kind: store.kind,
                    name: store.name.clone(),
                    namespace: store.namespace.clone(),
                    labels: store.labels.clone(),
                });
            } else {
                warn!(store = %name, ?namespace, "provider unreachable; validating the store now");
            }
        }
        nudges.send(stores);
        provider_objects.revalidate(&change.identity);
    }
    future::pending::<()>().await;
}

/// The controller of one store kind: its store watch (shared with the ExternalSecrets), stores
/// nudged by provider objects, stores whose PushSecrets changed (their finalizer), and all of
/// them when a provider CRD appears.
fn store_controller<S: StoreObject>(
    store_ctx: Arc<StoreContext>,
    events: Events<S>,
    nudged: mpsc::UnboundedReceiver<ObjectRef<S>>,
    installed: mpsc::UnboundedReceiver<()>,
    users: mpsc::UnboundedReceiver<Vec<pushsecret::plan::Uses>>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    name: &'static str,
) -> impl Future<Output = ()> {
    let ctx = store_ctx.shared.clone();
    let (cached, writer) = reflector::store::<S>();
    let queue = ctx.workqueue(name);
    let gone_ctx = ctx.clone();
    let controller = queue.controller(
        events.reflect(writer),
        cached.clone(),
        (),
        move |store: ObjectRef<S>| {
            gone_ctx.status.forget(store.extra.uid.as_deref());
            let (condition, duration) = S::gauges(&gone_ctx.metrics);
            crate::metrics::forget(
                condition,
                duration,
                &store.name,
                store.namespace.as_deref().unwrap_or_default(),
            );
        },
    );
    let listing = store_ctx.pushsecrets_listing();
    // Set before the controller starts: whether its first reconciles waited for the list.
    let listed_in_time = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let listed_late = store_ctx.pushsecrets_listed().filter({
        let in_time = listed_in_time.clone();
        move |()| future::ready(!in_time.load(std::sync::atomic::Ordering::Relaxed))
    });
    let reconcile = queue.reconciler(move |store, _: Arc<Context>| {
        secretstore::reconcile::<S>(store, store_ctx.clone())
    });
    let all = cached.clone();
    let used = users
        .flat_map(move |uses| futures::stream::iter(secretstore::used_by::<S>(&uses, &cached)));
    let run = controller
        .reconcile_on(queue.triggers(nudged))
        .reconcile_on(queue.triggers(used))
        // A store's finalizer waits for the PushSecrets to be known (pushsecret::holding).
        .reconcile_on(queue.all_on(futures::stream::select(installed, listed_late), all))
        .graceful_shutdown_on(shutdown)
        .run(
            // The controller's context is the shared one, which its error policy reads.
            reconcile,
            queue.error_policy(error_policy(name)),
            ctx.clone(),
        )
        .for_each(after_reconcile(ctx, queue));
    async move {
        // The first reconciles wait for the PushSecrets' first list (usually a moment), so that
        // they settle the finalizer and are not all made again, backend validation included,
        // when it is in. A list slower than that is not waited for, and reconciles them all
        // again when it comes.
        let in_time = tokio::time::timeout(PUSHSECRETS_WAIT, listing.wait()).await;
        listed_in_time.store(in_time.is_ok(), std::sync::atomic::Ordering::Relaxed);
        run.await
    }
}

/// How long the stores' first reconciles wait for the PushSecrets' first list.
const PUSHSECRETS_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Forgets, now and then, the generations seen of objects deleted since.
async fn sweep_generations<const N: usize>(ctx: Arc<Context>, generations: [Arc<Generations>; N]) {
    // Not at once: the caches are still filling.
    let first = tokio::time::Instant::now() + GENERATIONS_SWEEP;
    let mut every = tokio::time::interval_at(first, GENERATIONS_SWEEP);
    loop {
        every.tick().await;
        let live = ctx.manager.watched_uids();
        for seen in &generations {
            seen.retain(&live);
        }
    }
}

/// Namespaces' labels, one watch for all who read them: ClusterSecretStore `conditions`, so
/// checking them costs no request per reconcile, and the cluster kinds, told of each change
/// that may change what they select. Not in single-namespace mode, where cluster kinds are not
/// served.
async fn namespace_cache(
    ctx: Arc<Context>,
    writer: reflector::store::Writer<PartialObjectMeta<Namespace>>,
    listed: FirstList,
    changed: Vec<mpsc::UnboundedSender<()>>,
) {
    if ctx.settings.namespace.is_some() {
        return std::future::pending().await;
    }
    ctx.manager.use_namespace_cache(writer.as_reader());
    let api: Api<PartialObjectMeta<Namespace>> = Api::all(ctx.client.clone());
    let mut gone = on_departure(writer.as_reader(), |_| {
        for to in &changed {
            let _ = to.unbounded_send(());
        }
    });
    watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|ns| ns.managed_fields_mut().clear())
        .reflect(writer)
        .inspect_ok(move |e| listed.observe(e))
        .inspect_ok(move |e| gone(e))
        .try_filter_map(changed_objects(crate::cluster::namespace_fingerprint))
        .for_each(|_| {
            for to in &changed {
                let _ = to.unbounded_send(());
            }
            future::ready(())
        })
        .await
}
