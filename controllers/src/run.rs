//! Wires the reconcilers to their watches and runs them until shutdown.

use std::collections::HashSet;
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ::provider::ProviderIdentity;
use api::external_secret::ExternalSecret;
use api::push_secret::PushSecret;
use api::store::{ClusterSecretStore, SecretStore};
use clientmanager::{ClientManager, StoreKind};
use futures::channel::mpsc;
use futures::{StreamExt, TryStreamExt, future};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::core::{DeserializeGuard, PartialObjectMeta};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::utils::{PredicateConfig, predicates};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use prometheus_client::registry::Registry;
use tracing::{error, info};

use crate::context::{Context, Settings};
use crate::externalsecret::desired::MANAGED_LABEL;
use crate::metrics::Metrics;
use crate::provider::StoreNudges;
use crate::{externalsecret, provider, pushsecret, secretstore};

/// The providers compiled into this binary.
pub fn default_registry() -> ::provider::Registry {
    let mut registry = ::provider::Registry::default();
    registry.register(Arc::new(provider_fake::Fake::default()));
    registry
}

/// Where the operator serves HTTP; `None` serves nothing there.
#[derive(Clone, Copy, Debug, Default)]
pub struct Addresses {
    /// `/metrics`
    pub metrics: Option<SocketAddr>,
    /// `/healthz` and `/readyz`
    pub probes: Option<SocketAddr>,
}

/// An ExternalSecret as watched: one that does not fit our types (written under ESO's CRD, say)
/// must not stall the watch for all others; it gets a status condition instead.
type Watched = DeserializeGuard<ExternalSecret>;

pub struct Operator {
    pub ctx: Arc<Context>,
    pub metrics_registry: Arc<Registry>,
    ready: Arc<AtomicBool>,
    /// ExternalSecrets to refresh regardless of their interval, because a store they use changed.
    forced: Arc<Mutex<HashSet<ObjectRef<Watched>>>>,
    provider_changes: Mutex<Option<mpsc::UnboundedReceiver<ProviderIdentity>>>,
}

impl Operator {
    pub fn new(client: kube::Client, settings: Settings, providers: ::provider::Registry) -> Self {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let cache_metrics = clientmanager::Metrics::register(&mut registry);
        let manager = ClientManager::new(
            client.clone(),
            Arc::new(providers),
            true,
            settings.controller_class.clone(),
            cache_metrics,
        );
        let (provider_changed, provider_changes) = mpsc::unbounded();
        Self {
            ctx: Context::new(client, manager, metrics, settings, provider_changed),
            metrics_registry: Arc::new(registry),
            ready: Arc::default(),
            forced: Arc::default(),
            provider_changes: Mutex::new(Some(provider_changes)),
        }
    }

    /// Runs every controller until `shutdown` resolves.
    pub async fn run(
        self,
        addresses: Addresses,
        shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ) {
        let ctx = self.ctx.clone();
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
        let wc = watcher::Config::default();
        let ctrl_config =
            kube::runtime::controller::Config::default().concurrency(ctx.settings.concurrency);

        let ss_api: Api<SecretStore> = scoped(&client, namespace.as_deref());
        let stores = Controller::new(ss_api, wc.clone())
            .with_config(ctrl_config.clone())
            .reconcile_on(ss_rx)
            .reconcile_all_on(ss_installed_rx)
            .graceful_shutdown_on(shutdown.clone())
            .run(
                secretstore::reconcile::<SecretStore>,
                error_policy("secretstore"),
                ctx.clone(),
            )
            .for_each(outcome(ctx.clone()));

        let cluster_stores = async {
            if namespace.is_some() {
                return;
            }
            Controller::new(Api::<ClusterSecretStore>::all(client.clone()), wc.clone())
                .with_config(ctrl_config.clone())
                .reconcile_on(css_rx)
                .reconcile_all_on(css_installed_rx)
                .graceful_shutdown_on(shutdown.clone())
                .run(
                    secretstore::reconcile::<ClusterSecretStore>,
                    error_policy("clustersecretstore"),
                    ctx.clone(),
                )
                .for_each(outcome(ctx.clone()))
                .await
        };

        let pushsecrets = self.pushsecret_controller(shutdown.clone());
        let externalsecrets = self.externalsecret_controller(shutdown.clone());
        let discovery = provider::discover(ctx.clone(), nudges);
        let namespaces = self.namespace_cache();
        self.ready.store(true, Ordering::Relaxed);
        info!(namespace = ?namespace, class = %ctx.settings.controller_class, "controllers started");
        tokio::select! {
            _ = future::join4(stores, cluster_stores, externalsecrets, pushsecrets) => {}
            _ = discovery => {}
            _ = namespaces => {}
        }
    }

    /// Namespace labels for ClusterSecretStore `conditions`, so checking them costs no request
    /// per reconcile. Not in single-namespace mode, where cluster stores are not served.
    fn namespace_cache(&self) -> impl Future<Output = ()> + use<> {
        let ctx = self.ctx.clone();
        async move {
            if ctx.settings.namespace.is_some() {
                return std::future::pending().await;
            }
            let (reader, writer) = reflector::store::<PartialObjectMeta<Namespace>>();
            ctx.manager.use_namespace_cache(reader);
            let api: Api<PartialObjectMeta<Namespace>> = Api::all(ctx.client.clone());
            watcher(api, watcher::Config::default())
                .default_backoff()
                .modify(|ns| ns.managed_fields_mut().clear())
                .reflect(writer)
                .for_each(|_| future::ready(()))
                .await
        }
    }

    fn pushsecret_controller<F>(&self, shutdown: F) -> impl Future<Output = ()> + use<F>
    where
        F: Future<Output = ()> + Send + Sync + 'static,
    {
        let ctx = self.ctx.clone();
        let namespace = ctx.settings.namespace.clone();
        let client = ctx.client.clone();
        let ctrl_config =
            kube::runtime::controller::Config::default().concurrency(ctx.settings.concurrency);
        let (ps_reader, ps_writer) = reflector::store::<DeserializeGuard<PushSecret>>();
        let ps_stream = watcher(
            scoped::<DeserializeGuard<PushSecret>>(&client, namespace.as_deref()),
            watcher::Config::default(),
        )
        .default_backoff()
        .modify(|ps| ps.managed_fields_mut().clear())
        .reflect(ps_writer)
        .applied_objects()
        .predicate_filter(fingerprint, PredicateConfig::default());
        // Every Secret's metadata streams by (nothing is cached): a changed source is pushed at
        // once rather than at the next refresh.
        let sources = watcher(
            scoped::<PartialObjectMeta<Secret>>(&client, namespace.as_deref()),
            watcher::Config::default(),
        )
        .default_backoff()
        .touched_objects();
        let ps_by_source = ps_reader.clone();
        Controller::for_stream(ps_stream, ps_reader)
            .with_config(ctrl_config.clone())
            .watches_stream(sources, move |secret: PartialObjectMeta<Secret>| {
                let (name, ns) = (secret.name_any(), secret.namespace());
                ps_by_source
                    .state()
                    .iter()
                    .filter(|ps| {
                        ps.namespace() == ns
                            && ps
                                .0
                                .as_ref()
                                .ok()
                                .and_then(|ps| ps.spec.selector.secret.as_ref())
                                .and_then(|s| s.name.as_deref())
                                == Some(name.as_str())
                    })
                    .map(|ps| ObjectRef::from(ps.as_ref()))
                    .collect::<Vec<_>>()
            })
            .graceful_shutdown_on(shutdown)
            .run(
                |watched: Arc<DeserializeGuard<PushSecret>>, ctx| {
                    let ps = watched.0.clone().map(Arc::new);
                    async move {
                        match ps {
                            Ok(ps) => pushsecret::reconcile(ps, ctx).await,
                            Err(invalid) => pushsecret::report_invalid(&ctx, invalid).await,
                        }
                    }
                },
                error_policy("pushsecret"),
                ctx.clone(),
            )
            .for_each(outcome(ctx))
    }

    fn externalsecret_controller<F>(&self, shutdown: F) -> impl Future<Output = ()> + use<F>
    where
        F: Future<Output = ()> + Send + Sync + 'static,
    {
        let ctx = self.ctx.clone();
        let namespace = ctx.settings.namespace.clone();
        let client = ctx.client.clone();
        let es_api: Api<Watched> = scoped(&client, namespace.as_deref());
        let (reader, writer) = reflector::store();
        // Our own status writes must not trigger a reconcile: react to spec, labels and
        // annotations only, as ESO's predicate does.
        let metrics_ctx = ctx.clone();
        let es_stream = watcher(es_api, watcher::Config::default())
            .default_backoff()
            // managedFields are often the larger part of an object and nothing here reads them.
            .modify(|es| es.managed_fields_mut().clear())
            .reflect(writer)
            .inspect_ok(move |event| {
                if let watcher::Event::Delete(es) = event {
                    externalsecret::forget(
                        &metrics_ctx,
                        &es.name_any(),
                        &es.namespace().unwrap_or_default(),
                    );
                }
            })
            .applied_objects()
            .predicate_filter(fingerprint, PredicateConfig::default());
        // Only Secrets this operator manages, and only their metadata: no cache of Secret data.
        let secrets = watcher(
            scoped::<PartialObjectMeta<Secret>>(&client, namespace.as_deref()),
            watcher::Config::default().labels(&format!("{MANAGED_LABEL}=true")),
        )
        .default_backoff()
        .touched_objects();
        let (ss_reader, ss_writer) = reflector::store::<SecretStore>();
        let (css_reader, css_writer) = reflector::store::<ClusterSecretStore>();
        let ss_changes = watcher(
            scoped::<SecretStore>(&client, namespace.as_deref()),
            watcher::Config::default(),
        )
        .default_backoff()
        .modify(|s| s.managed_fields_mut().clear())
        .reflect(ss_writer)
        .applied_objects()
        .predicate_filter(predicates::generation, PredicateConfig::default());
        let (forced_ss, forced_css) = (self.forced.clone(), self.forced.clone());
        let (reader_ss, reader_css) = (reader.clone(), reader.clone());
        let reader_secrets = reader.clone();
        let secrets_ctx = ctx.clone();
        ctx.manager
            .use_store_caches(ss_reader.clone(), css_reader.clone());
        let provider_triggers = self.provider_triggers(reader.clone(), ss_reader, css_reader);
        let mut controller = Controller::for_stream(es_stream, reader)
            .with_config(
                kube::runtime::controller::Config::default().concurrency(ctx.settings.concurrency),
            )
            // By target name rather than owner reference: Orphan and Merge targets have none.
            .watches_stream(secrets, move |secret: PartialObjectMeta<Secret>| {
                let (name, namespace) = (secret.name_any(), secret.namespace());
                if secrets_ctx.own_write_seen(
                    namespace.as_deref().unwrap_or_default(),
                    &name,
                    secret.resource_version().as_deref(),
                ) {
                    return Vec::new();
                }
                reader_secrets
                    .state()
                    .iter()
                    .filter(|es| {
                        es.namespace() == namespace
                            && es
                                .0
                                .as_ref()
                                .is_ok_and(|es| externalsecret::desired::target_name(es) == name)
                    })
                    .map(|es| ObjectRef::from(es.as_ref()))
                    .collect::<Vec<_>>()
            })
            .watches_stream(ss_changes, move |store: SecretStore| {
                users(
                    &reader_ss,
                    &forced_ss,
                    StoreKind::SecretStore,
                    &store.name_any(),
                    store.namespace().as_deref(),
                )
            });
        if namespace.is_none() {
            let css_changes = watcher(
                Api::<ClusterSecretStore>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .modify(|s| s.managed_fields_mut().clear())
            .reflect(css_writer)
            .applied_objects()
            .predicate_filter(predicates::generation, PredicateConfig::default());
            controller =
                controller.watches_stream(css_changes, move |store: ClusterSecretStore| {
                    users(
                        &reader_css,
                        &forced_css,
                        StoreKind::ClusterSecretStore,
                        &store.name_any(),
                        None,
                    )
                });
        }
        let forced = self.forced.clone();
        controller
            .reconcile_on(provider_triggers)
            .graceful_shutdown_on(shutdown)
            .run(
                move |watched: Arc<Watched>, ctx| {
                    let force = forced
                        .lock()
                        .expect("forced set poisoned")
                        .remove(&ObjectRef::from(watched.as_ref()));
                    let es = watched.0.clone().map(Arc::new);
                    async move {
                        match es {
                            Ok(es) => externalsecret::reconcile(es, ctx, force).await,
                            Err(invalid) => externalsecret::report_invalid(&ctx, invalid).await,
                        }
                    }
                },
                error_policy("externalsecret"),
                ctx.clone(),
            )
            .for_each(outcome(ctx))
    }
}

impl Operator {
    /// ExternalSecrets to resync when a provider object changes: those reading from a store that
    /// references it, directly or as the object converted from its inline provider.
    fn provider_triggers(
        &self,
        externalsecrets: Store<Watched>,
        secret_stores: Store<SecretStore>,
        cluster_secret_stores: Store<ClusterSecretStore>,
    ) -> impl futures::Stream<Item = ObjectRef<Watched>> + Send + 'static {
        let changes = self
            .provider_changes
            .lock()
            .expect("provider changes poisoned")
            .take()
            .expect("the ExternalSecret controller is built once");
        let registry = self.ctx.manager.registry().clone();
        let forced = self.forced.clone();
        changes.flat_map(move |identity| {
            let matches = |kind: StoreKind, name: &str, spec: &api::store::SecretStoreSpec| {
                let reference = match &spec.provider_ref {
                    Some(r) => Some(r.clone()),
                    None => clientmanager::derived_provider_ref(&registry, kind, name, spec).ok(),
                };
                reference.is_some_and(|r| r.kind == identity.kind && r.name == identity.name)
            };
            let stores: Vec<(StoreKind, String, Option<String>)> = match &identity.namespace {
                Some(ns) => secret_stores
                    .state()
                    .iter()
                    .filter(|s| s.namespace().as_deref() == Some(ns))
                    .filter(|s| matches(StoreKind::SecretStore, &s.name_any(), &s.spec))
                    .map(|s| (StoreKind::SecretStore, s.name_any(), Some(ns.to_string())))
                    .collect(),
                None => cluster_secret_stores
                    .state()
                    .iter()
                    .filter(|s| {
                        matches(StoreKind::ClusterSecretStore, &s.name_any(), &s.spec.store)
                    })
                    .map(|s| (StoreKind::ClusterSecretStore, s.name_any(), None))
                    .collect(),
            };
            let refs: Vec<_> = stores
                .iter()
                .flat_map(|(kind, name, ns)| {
                    users(&externalsecrets, &forced, *kind, name, ns.as_deref())
                })
                .collect();
            futures::stream::iter(refs)
        })
    }
}

fn scoped<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// What a reconcile reacts to: spec (generation), labels, annotations, finalizers and deletion,
/// not status, which the reconcile itself writes.
fn fingerprint<K: Resource>(obj: &K) -> Option<u64> {
    let mut h = DefaultHasher::new();
    obj.meta().generation.hash(&mut h);
    obj.labels().hash(&mut h);
    obj.annotations().hash(&mut h);
    obj.finalizers().hash(&mut h);
    obj.meta()
        .deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .hash(&mut h);
    Some(h.finish())
}

/// The ExternalSecrets that read from a store, marked for a forced refresh.
fn users(
    reader: &Store<Watched>,
    forced: &Mutex<HashSet<ObjectRef<Watched>>>,
    kind: StoreKind,
    name: &str,
    namespace: Option<&str>,
) -> Vec<ObjectRef<Watched>> {
    let refs: Vec<_> = reader
        .state()
        .iter()
        .filter(|es| namespace.is_none_or(|ns| es.namespace().as_deref() == Some(ns)))
        .filter(|es| {
            es.0.as_ref()
                .is_ok_and(|es| externalsecret::uses_store(es, kind, name))
        })
        .map(|es| ObjectRef::from(es.as_ref()))
        .collect();
    forced
        .lock()
        .expect("forced set poisoned")
        .extend(refs.iter().cloned());
    refs
}

/// Errors that can name their kind with a bounded label.
pub(crate) trait ErrorKind {
    fn kind(&self) -> &'static str;
}

impl ErrorKind for secretstore::Error {
    fn kind(&self) -> &'static str {
        secretstore::Error::kind(self)
    }
}

impl ErrorKind for externalsecret::Error {
    fn kind(&self) -> &'static str {
        externalsecret::Error::kind(self)
    }
}

impl ErrorKind for pushsecret::Error {
    fn kind(&self) -> &'static str {
        pushsecret::Error::kind(self)
    }
}

/// The error policy of every typed controller: count the failure by kind, back off per object.
fn error_policy<K, E>(controller: &'static str) -> impl Fn(Arc<K>, &E, Arc<Context>) -> Action
where
    K: kube::Resource<DynamicType = ()>,
    E: ErrorKind,
{
    move |obj, error, ctx| {
        ctx.failed(
            controller,
            error.kind(),
            &ObjectRef::from(obj.as_ref()).to_string(),
        )
    }
}

/// Logs failures (already counted and backed off) and forgets the backoff of objects that
/// reconciled: one place for every controller, so none can miss the reset.
/// What a controller's `run` stream yields for each reconcile.
type Outcome<K, E, Q> = Result<(ObjectRef<K>, Action), kube::runtime::controller::Error<E, Q>>;

pub(crate) fn outcome<K, E, Q>(
    ctx: Arc<Context>,
) -> impl FnMut(Outcome<K, E, Q>) -> future::Ready<()>
where
    K: kube::Resource,
    K::DynamicType: std::fmt::Debug,
    E: std::fmt::Display,
    Q: std::fmt::Display,
{
    move |result| {
        match result {
            Ok((object, _)) => {
                ctx.backoff.succeeded(&object.to_string());
                tracing::debug!(%object, "reconciled");
            }
            Err(e) => tracing::warn!(error = %e, "reconcile failed"),
        }
        future::ready(())
    }
}
