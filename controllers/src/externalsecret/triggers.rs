//! What makes an ExternalSecret reconcile: its own spec, its target Secret changing under it, a
//! change of a store it reads from or of the provider object behind that store (both force a
//! refresh), and a store turning Ready (a wake-up, not a refresh).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use api::external_secret::ExternalSecret;
use api::store::{ClusterSecretStore, SecretStore};
use clientmanager::{LoadedStore, StoreKind};
use futures::channel::mpsc::UnboundedReceiver;
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::core::{DeserializeGuard, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::utils::predicates;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use provider::ProviderIdentity;
use rand::Rng;

use crate::cluster::ClusterChildren;
use crate::context::{Context, ReadyStore};
use crate::externalsecret::desired::MANAGED_LABEL;
use crate::generations::Generations;
use crate::index::{self, SharedIndex};
use crate::outcome::{after_reconcile, error_policy};
use crate::own_writes::{OwnWriteLog, TargetChange, TargetRef};
use crate::secretstore::StoreObject;
use crate::watch::{
    Events, changed_objects, forgetting_departed, on_departure, once_needed, scoped,
};

/// An ExternalSecret as watched: one that does not fit our types (written under ESO's CRD, say)
/// must not stall the watch for all others; it gets a status condition instead.
pub(crate) type Watched = DeserializeGuard<ExternalSecret>;

/// ExternalSecrets to refresh regardless of their interval, because a store they use changed.
#[derive(Clone, Default)]
pub(crate) struct Forced {
    marked: Arc<Mutex<HashSet<ObjectRef<Watched>>>>,
    /// The ExternalSecrets there are: a mark comes up to [`MAX_SPREAD`] after the change, and
    /// one for an object deleted meanwhile, after its departure was handled, was never taken.
    watched: Arc<OnceLock<reflector::Store<Watched>>>,
}

impl Forced {
    pub(crate) fn watch(&self, reader: reflector::Store<Watched>) {
        let _ = self.watched.set(reader);
    }

    /// Marks `es` unless it has left the watch, saying whether it did. Checked under the lock
    /// that [`Forced::take`] takes when the watch has dropped an object, so a mark never
    /// outlives its object.
    fn mark(&self, es: &ObjectRef<Watched>) -> bool {
        let mut marked = self.lock();
        let there = self.watched.get().is_none_or(|w| w.get(es).is_some());
        if there {
            marked.insert(es.clone());
        }
        there
    }

    /// Whether `es` was marked, unmarking it.
    pub(crate) fn take(&self, es: &ObjectRef<Watched>) -> bool {
        self.lock().remove(es)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<ObjectRef<Watched>>> {
        self.marked.lock().expect("forced set poisoned")
    }
}

pub(crate) struct ExternalSecretTriggers {
    forced: Forced,
    /// Spec changes of stores, as opposed to first sights after a start: a change forces the
    /// ExternalSecrets reading from a store to refresh.
    pub(crate) store_generations: Arc<Generations>,
    provider_changes: UnboundedReceiver<ProviderIdentity>,
    ready_stores: UnboundedReceiver<ReadyStore>,
    /// Announces a store seen turning Ready (see [`on_turning_ready`]).
    store_ready: StoreReady,
    target_changes: UnboundedReceiver<TargetChange>,
}

/// The ExternalSecrets' reading of the store watches; no ClusterSecretStores in single-namespace
/// mode.
pub(crate) struct StoreEvents {
    pub(crate) secret_stores: Events<SecretStore>,
    pub(crate) cluster_secret_stores: Option<Events<ClusterSecretStore>>,
}

/// Announces a store that turned Ready to whatever waits on it.
pub(crate) type StoreReady = Arc<dyn Fn(ReadyStore) + Send + Sync>;

impl ExternalSecretTriggers {
    pub(crate) fn new(
        provider_changes: UnboundedReceiver<ProviderIdentity>,
        ready_stores: UnboundedReceiver<ReadyStore>,
        store_ready: StoreReady,
        target_changes: UnboundedReceiver<TargetChange>,
    ) -> Self {
        Self {
            forced: Forced::default(),
            store_generations: Default::default(),
            provider_changes,
            ready_stores,
            store_ready,
            target_changes,
        }
    }

    /// `stores`: the store watches this controller shares with the stores' controller.
    pub(crate) fn controller<F>(
        self,
        es_ctx: Arc<super::ExternalSecretContext>,
        cluster_children: Arc<ClusterChildren>,
        stores: StoreEvents,
        shutdown: F,
    ) -> impl Future<Output = ()>
    where
        F: Future<Output = ()> + Send + Sync + 'static,
    {
        let ctx = es_ctx.shared.clone();
        let namespace = ctx.settings.namespace.clone();
        let client = ctx.client.clone();
        let es_api: Api<Watched> = scoped(&client, namespace.as_deref());
        let (reader, writer) = reflector::store();
        cluster_children.external.use_cache(reader.clone());
        self.forced.watch(reader.clone());
        // Our own status writes must not trigger a reconcile: react to spec, labels and
        // annotations only, as ESO's predicate does.
        let (gone_ctx, gone_forced) = (ctx.clone(), self.forced.clone());
        let css_generations = self.store_generations.clone();
        let template_users = SharedIndex::<Watched, TemplateSource>::default();
        let (templates_needed, template_watch_needed) = tokio::sync::watch::channel(false);
        let writers = Writers::new(reader.clone());
        let store_users = StoreUsers::default();
        let queue = ctx.workqueue("externalsecret");
        let es_stream = watcher(es_api, watcher::Config::default())
            .default_backoff()
            // managedFields are often the larger part of an object and nothing here reads them.
            .modify(|es| es.managed_fields_mut().clear())
            .reflect(writer)
            .inspect_ok({
                let cluster_children = cluster_children.clone();
                move |e| cluster_children.external.observe(e)
            })
            .inspect_ok(index::kept(template_users.clone(), template_sources))
            .inspect_ok(index::needed_once_filled(
                template_users.clone(),
                templates_needed,
            ))
            .inspect_ok(writers.kept())
            .inspect_ok(index::kept(store_users.clone(), stores_read));
        // Only Secrets this operator manages, and only their metadata: no cache of Secret data.
        let (versions, failed) = (
            es_ctx.target_versions.clone(),
            es_ctx.target_versions.clone(),
        );
        let secrets = watcher(
            scoped::<PartialObjectMeta<Secret>>(&client, namespace.as_deref()),
            watcher::Config::default().labels(&format!("{MANAGED_LABEL}=true")),
        )
        .default_backoff()
        .inspect_ok(move |event| versions.apply(event))
        .inspect_err(move |_| failed.watch_failed())
        .touched_objects();
        let (ss_reader, ss_writer) = reflector::store::<SecretStore>();
        let (css_reader, css_writer) = reflector::store::<ClusterSecretStore>();
        let specs = ProviderSpecs::default();
        let (ss_generations, ss_specs) = (self.store_generations.clone(), specs.clone());
        let ss_changes = stores
            .secret_stores
            .inspect_ok(on_turning_ready(ss_reader.clone(), {
                let ready = self.store_ready.clone();
                move |store| ready(store)
            }))
            .reflect(ss_writer)
            .inspect_ok(on_departure(ss_reader.clone(), move |s| {
                ss_specs.forget(&s.extra.uid)
            }))
            .try_filter_map(changed_objects(predicates::generation))
            .filter_map(move |s| {
                futures::future::ready(s.ok().map(|s| {
                    let news = ss_generations.changed(&s);
                    (news, LoadedStore::from_secret_store(&s))
                }))
            });
        let (css_reader_gone, css_reader_ready) = (css_reader.clone(), css_reader.clone());
        let held = reader.clone();
        let writers_secrets = writers.clone();
        let secrets_ctx = es_ctx.clone();
        ctx.manager.use_store_caches(ss_reader, css_reader);
        let provider_triggers = provider_changes(
            ctx.clone(),
            store_users.clone(),
            self.forced.clone(),
            self.provider_changes,
        );
        let woken = wakes(store_users.clone(), self.ready_stores);
        // A generic target edited by hand: reconciled (not forced), so its data-hash decides.
        // Also someone else's change of any target that came during our write of it.
        let changes_ctx = es_ctx.clone();
        let target_changes = self.target_changes.flat_map(move |change| {
            futures::stream::iter(target_users(&changes_ctx.own_writes, &writers, &change))
        });
        let template_changes = template_source_changes(
            &client,
            namespace.as_deref(),
            template_users,
            self.forced.clone(),
            template_watch_needed,
        );
        let store_forced = store_changes(
            store_users.clone(),
            self.forced.clone(),
            specs.clone(),
            ss_changes,
        );
        let mut controller = queue
            .controller(es_stream, reader.clone(), (), move |es| {
                departed(&gone_ctx, &gone_forced, &es)
            })
            // By target name rather than owner reference: Orphan and Merge targets have none.
            .watches_stream(
                secrets,
                queue.mapper(move |secret: PartialObjectMeta<Secret>| {
                    let change = TargetChange {
                        target: TargetRef::secret(
                            secret.namespace().as_deref().unwrap_or_default(),
                            &secret.name_any(),
                        ),
                        resource_version: secret.resource_version(),
                        uid: secret.uid(),
                    };
                    target_users(&secrets_ctx.own_writes, &writers_secrets, &change)
                }),
            )
            .reconcile_on(queue.triggers(store_forced));
        if let Some(cluster_secret_stores) = stores.cluster_secret_stores {
            let css_specs = specs.clone();
            let css_changes = cluster_secret_stores
                .inspect_ok(on_turning_ready(css_reader_ready, {
                    let ready = self.store_ready.clone();
                    move |store| ready(store)
                }))
                .reflect(css_writer)
                .inspect_ok(on_departure(css_reader_gone, move |s| {
                    css_specs.forget(&s.extra.uid)
                }))
                .try_filter_map(changed_objects(predicates::generation))
                .filter_map(move |s| {
                    futures::future::ready(s.ok().map(|s| {
                        let news = css_generations.changed(&s);
                        // Its `conditions` may refuse or allow namespaces of cluster objects.
                        cluster_children.cluster_store_changed();
                        (news, LoadedStore::from_cluster_secret_store(&s))
                    }))
                });
            controller = controller.reconcile_on(queue.triggers(store_changes(
                store_users,
                self.forced.clone(),
                specs,
                css_changes,
            )));
        }
        let forced = self.forced;
        // ExternalSecrets set aside until the first list of their targets is in.
        let first_listed = es_ctx
            .target_versions
            .first_listed()
            .map(|(namespace, name)| ObjectRef::new(&name).within(&namespace));
        controller
            .reconcile_on(queue.triggers(first_listed))
            .reconcile_on(queue.triggers(provider_triggers))
            .reconcile_on(queue.triggers(woken))
            .reconcile_on(queue.triggers(target_changes))
            .reconcile_on(queue.triggers(template_changes))
            .graceful_shutdown_on(shutdown)
            .run(
                queue.reconciler(move |watched: Arc<Watched>, ctx: Arc<Context>| {
                    let object = ObjectRef::from(watched.as_ref());
                    let es = watched.0.clone().map(Arc::new);
                    let (held, forced, es_ctx) = (held.clone(), forced.clone(), es_ctx.clone());
                    let (marked, mark) = (forced.clone(), object.clone());
                    async move {
                        let reconcile = async {
                            match es {
                                Ok(es) => {
                                    let force = move || marked.take(&mark);
                                    super::reconcile(es, es_ctx, force).await
                                }
                                Err(invalid) => super::report_invalid(&ctx, invalid).await,
                            }
                        };
                        forgetting_departed(&held, object, reconcile, |es| {
                            departed(&ctx, &forced, &es)
                        })
                        .await
                    }
                }),
                queue.error_policy(error_policy("externalsecret")),
                ctx.clone(),
            )
            .for_each(after_reconcile(ctx, queue))
    }
}

/// Forgets what is kept of an ExternalSecret that left the watch.
fn departed(ctx: &Context, forced: &Forced, es: &ObjectRef<Watched>) {
    super::forget(
        ctx,
        &es.name,
        es.namespace.as_deref().unwrap_or_default(),
        es.extra.uid.as_deref(),
    );
    forced.take(es);
}

/// The ExternalSecrets by the targets they write.
/// The ExternalSecrets writing each target. Most write the Secret of their own name: those are
/// found in the watch's cache under the target's name and not indexed, as the index entry of
/// each took about 0.4 KiB (hack/README.md, session 16).
#[derive(Clone)]
pub(crate) struct Writers {
    renamed: SharedIndex<Watched, TargetRef>,
    watched: reflector::Store<Watched>,
}

impl Writers {
    pub(crate) fn new(watched: reflector::Store<Watched>) -> Self {
        Self {
            renamed: SharedIndex::default(),
            watched,
        }
    }

    /// Keeps the index from the watch's events (`inspect_ok`, after the reflector).
    pub(crate) fn kept(&self) -> impl FnMut(&watcher::Event<Watched>) + use<> {
        index::kept(self.renamed.clone(), |es: &Watched| {
            es.0.as_ref()
                .ok()
                .filter(|es| !writes_own_name(es))
                .map(TargetRef::of)
                .into_iter()
                .collect()
        })
    }

    fn of(&self, target: &TargetRef) -> Vec<ObjectRef<Watched>> {
        let mut users = self
            .renamed
            .lock()
            .expect("watch index poisoned")
            .get(target);
        if target.group.is_empty() && target.kind == "Secret" {
            let own = ObjectRef::new(&target.name).within(&target.namespace);
            let writes_it = self
                .watched
                .get(&own)
                .is_some_and(|es| es.0.as_ref().is_ok_and(writes_own_name));
            if writes_it {
                users.push(own);
            }
        }
        users
    }

    #[cfg(test)]
    pub(crate) fn indexed(&self) -> usize {
        self.renamed.lock().expect("watch index poisoned").len()
    }
}

/// Whether `es` writes the Secret of its own name (in its own namespace, as every target).
fn writes_own_name(es: &ExternalSecret) -> bool {
    super::generic::manifest(es).is_none() && super::desired::target_name(es) == es.name_any()
}

/// The ExternalSecrets that write the target a watch event showed: none for the event of our
/// own write.
pub(crate) fn target_users(
    own_writes: &OwnWriteLog,
    writers: &Writers,
    seen: &TargetChange,
) -> Vec<ObjectRef<Watched>> {
    if own_writes.own_write_seen(seen) {
        return Vec::new();
    }
    writers.of(&seen.target)
}

/// ExternalSecrets to resync when a provider object changes: those reading from a store that
/// references it, directly or as the object converted from its inline provider.
pub(crate) fn provider_changes(
    ctx: Arc<Context>,
    externalsecrets: StoreUsers,
    forced: Forced,
    changes: UnboundedReceiver<ProviderIdentity>,
) -> impl Stream<Item = ObjectRef<Watched>> + Send + 'static {
    changes.flat_map_unordered(None, move |identity| {
        let refs: Vec<_> = ctx
            .manager
            .stores_using(&identity)
            .iter()
            .flat_map(|store| {
                users(
                    &externalsecrets,
                    store.kind,
                    &store.name,
                    store.namespace.as_deref(),
                )
            })
            .collect();
        force(&forced, refs)
    })
}

/// ExternalSecrets to refresh when a store changes: only a change of what it fetches with (its
/// provider, providerRef or runtimeRef) forces them; `conditions`, `refreshInterval` or
/// `controller` cannot change what is fetched. An inline store's users are forced by the change
/// of its converted object instead: reads go through that object, so forced before the store
/// reconciler has rewritten it they would fetch with the old spec, and not be forced again.
/// Each store comes with whether it is news (a new generation, not a first sight after a
/// restart).
pub(crate) fn store_changes(
    externalsecrets: StoreUsers,
    forced: Forced,
    specs: ProviderSpecs,
    stores: impl Stream<Item = (bool, LoadedStore)> + Send + 'static,
) -> impl Stream<Item = ObjectRef<Watched>> + Send + 'static {
    stores.flat_map_unordered(None, move |(news, store)| {
        let inline = store.spec.provider_ref.is_none() && store.spec.provider.is_some();
        let refs = if specs.changed(&store) && news && !inline {
            users(
                &externalsecrets,
                store.kind,
                &store.name,
                store.namespace.as_deref(),
            )
        } else {
            Vec::new()
        };
        force(&forced, refs)
    })
}

/// The provider spec each store was last seen with, by uid.
#[derive(Clone, Default)]
pub(crate) struct ProviderSpecs(Arc<Mutex<HashMap<String, u64>>>);

impl ProviderSpecs {
    /// Whether `store` fetches with another provider spec than when last seen (or is first seen).
    fn changed(&self, store: &LoadedStore) -> bool {
        let spec = &store.spec;
        let mut h = DefaultHasher::new();
        serde_json::to_string(&(&spec.provider, &spec.provider_ref, &spec.runtime_ref))
            .expect("a store spec serializes")
            .hash(&mut h);
        let hash = h.finish();
        let uid = store.uid.clone().unwrap_or_default();
        self.lock().insert(uid, hash) != Some(hash)
    }

    fn forget(&self, uid: &Option<String>) {
        self.lock().remove(uid.as_deref().unwrap_or_default());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.0.lock().expect("provider specs poisoned")
    }
}

/// ExternalSecrets whose `templateFrom` names a ConfigMap or Secret that changed: re-rendered
/// (and so refetched: fetched data is not kept) at once. Only metadata is watched, and the
/// initial list is not a change, so a restart re-renders nothing.
fn template_source_changes(
    client: &kube::Client,
    namespace: Option<&str>,
    users: SharedIndex<Watched, TemplateSource>,
    forced: Forced,
    needed: tokio::sync::watch::Receiver<bool>,
) -> impl Stream<Item = ObjectRef<Watched>> + Send + 'static {
    fn changed<K: kube::Resource>(
        event: Result<watcher::Event<K>, watcher::Error>,
    ) -> Option<(Option<String>, String)> {
        match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => Some((
                o.meta().namespace.clone(),
                o.meta().name.clone().unwrap_or_default(),
            )),
            _ => None,
        }
    }
    let config_maps = watcher(
        scoped::<PartialObjectMeta<ConfigMap>>(client, namespace),
        watcher::Config::default(),
    )
    .default_backoff()
    .filter_map(|e| futures::future::ready(changed(e).map(|(ns, name)| (true, ns, name))));
    let secrets = watcher(
        scoped::<PartialObjectMeta<Secret>>(client, namespace),
        watcher::Config::default(),
    )
    .default_backoff()
    .filter_map(|e| futures::future::ready(changed(e).map(|(ns, name)| (false, ns, name))));
    // Only once an ExternalSecret has a templateFrom: every ConfigMap and Secret of the cluster
    // streams by otherwise. A source changed while the first such ExternalSecret syncs and the
    // watch lists is seen at its next refresh, as one changed while the operator was down.
    let sources = futures::stream::select(config_maps, secrets);
    once_needed(needed, move || sources).flat_map_unordered(None, move |(config_map, ns, name)| {
        let key = TemplateSource {
            config_map,
            namespace: ns.unwrap_or_default(),
            name,
        };
        let users = users.lock().expect("watch index poisoned").get(&key);
        force(&forced, users)
    })
}

/// A ConfigMap or Secret a `templateFrom` reads.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct TemplateSource {
    config_map: bool,
    namespace: String,
    name: String,
}

fn template_sources(es: &Watched) -> Vec<TemplateSource> {
    let Ok(valid) = &es.0 else {
        return Vec::new();
    };
    let namespace = es.namespace().unwrap_or_default();
    let template_from = valid
        .spec
        .target
        .as_ref()
        .and_then(|t| t.template.as_deref())
        .and_then(|t| t.template_from.as_deref())
        .unwrap_or_default();
    template_from
        .iter()
        .flat_map(|f| {
            [(true, &f.config_map), (false, &f.secret)]
                .into_iter()
                .filter_map(|(config_map, r)| {
                    r.as_ref().map(|r| TemplateSource {
                        config_map,
                        namespace: namespace.clone(),
                        name: r.name.clone(),
                    })
                })
        })
        .collect()
}

/// For a store watch whose events pass here before `reader`'s writer applies them: calls `wake`
/// for a store the reader held as not Ready that the event brings Ready. The client manager's
/// readiness gate reads this cache, so the wake comes when a woken ExternalSecret or PushSecret
/// will see the store Ready; woken sooner (when the store reconciler wrote the status), it could
/// still read the old status, fail with "not ready" and wait out its backoff with nothing left
/// to wake it. A store first seen (at start) wakes nothing: its users are reconciled anyway.
pub(super) fn on_turning_ready<K>(
    reader: reflector::Store<K>,
    wake: impl Fn(ReadyStore),
) -> impl FnMut(&watcher::Event<K>)
where
    K: StoreObject,
{
    // Loaded (its spec cloned) only when it did turn Ready, not at every event.
    let ready =
        |store: &K| clientmanager::is_ready(store.store_status().map(|s| s.conditions.as_slice()));
    move |event| {
        let (watcher::Event::Apply(new) | watcher::Event::InitApply(new)) = event else {
            return;
        };
        let Some(old) = reader.get(&ObjectRef::from_obj(new)) else {
            return;
        };
        if ready(new) && !ready(&old) {
            let new = new.loaded();
            wake(ReadyStore {
                kind: new.kind,
                name: new.name,
                namespace: new.namespace,
                labels: new.labels,
            });
        }
    }
}

/// ExternalSecrets that read from a store that turned Ready: they may have been waiting on it
/// with a long backoff.
fn wakes(
    externalsecrets: StoreUsers,
    ready_stores: UnboundedReceiver<ReadyStore>,
) -> impl Stream<Item = ObjectRef<Watched>> + Send + 'static {
    ready_stores.flat_map(move |store| {
        futures::stream::iter(users(
            &externalsecrets,
            store.kind,
            &store.name,
            store.namespace.as_deref(),
        ))
    })
}

/// A store as ExternalSecrets name it; a ClusterSecretStore has no namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct StoreKey {
    kind: StoreKind,
    namespace: Option<String>,
    name: String,
}

impl StoreKey {
    fn new(kind: StoreKind, name: &str, namespace: Option<&str>) -> Self {
        Self {
            kind,
            namespace: namespace
                .filter(|_| kind == StoreKind::SecretStore)
                .map(str::to_owned),
            name: name.to_owned(),
        }
    }
}

/// The ExternalSecrets by the stores they read from: a store's change costs its users, not a
/// scan of every ExternalSecret.
pub(crate) type StoreUsers = SharedIndex<Watched, StoreKey>;

/// The stores an ExternalSecret reads from, directly or through a `sourceRef`.
pub(crate) fn stores_read(es: &Watched) -> Vec<StoreKey> {
    let Ok(valid) = &es.0 else {
        return Vec::new();
    };
    let namespace = es.namespace();
    let mut keys: Vec<_> = super::store_refs(valid)
        .map(|r| {
            let kind = StoreKind::parse(r.kind.map(|k| k.as_str()));
            StoreKey::new(kind, &r.name, namespace.as_deref())
        })
        .collect();
    keys.sort_by(|a, b| (&a.name, &a.namespace).cmp(&(&b.name, &b.namespace)));
    keys.dedup();
    keys
}

/// The ExternalSecrets that read from a store.
pub(crate) fn users(
    index: &StoreUsers,
    kind: StoreKind,
    name: &str,
    namespace: Option<&str>,
) -> Vec<ObjectRef<Watched>> {
    index
        .lock()
        .expect("watch index poisoned")
        .get(&StoreKey::new(kind, name, namespace))
}

/// How long a forced refresh is spread over, per ExternalSecret: thousands that one change
/// forces must not all fetch from the backend at once.
const SPREAD_PER_OBJECT: Duration = Duration::from_millis(3);

/// The longest a forced refresh is spread over: a store edit must show in every user within
/// half a minute, however many there are (100k at 3 ms each would take five minutes). The
/// backend then sees at most count/30 fetches a second, which the request limiter and the
/// workers' concurrency pace further.
const MAX_SPREAD: Duration = Duration::from_secs(30);

/// The window `count` forced refreshes are spread over.
fn spread(count: usize) -> Duration {
    (SPREAD_PER_OBJECT * u32::try_from(count).unwrap_or(u32::MAX)).min(MAX_SPREAD)
}

/// `refs`, each marked for a refresh regardless of its interval at a random moment within a
/// window that grows with their number, up to [`MAX_SPREAD`].
fn force(
    forced: &Forced,
    refs: Vec<ObjectRef<Watched>>,
) -> futures::stream::BoxStream<'static, ObjectRef<Watched>> {
    let window = spread(refs.len());
    let mut rng = rand::rng();
    let mut due: Vec<_> = refs
        .into_iter()
        .map(|r| (window.mul_f64(rng.random_range(0.0..1.0)), r))
        .collect();
    due.sort_by_key(|(at, _)| *at);
    let start = tokio::time::Instant::now();
    let forced = forced.clone();
    futures::stream::iter(due)
        .filter_map(move |(at, r)| {
            let forced = forced.clone();
            async move {
                tokio::time::sleep_until(start + at).await;
                // One deleted while it waited its turn has nothing left to refresh.
                forced.mark(&r).then_some(r)
            }
        })
        .boxed()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A ConfigMap's or Secret's event finds the ExternalSecrets whose `templateFrom` reads it
    /// through the index the watch keeps: 10k ExternalSecrets each reading a ConfigMap and a
    /// Secret of its own, an event for each source.
    #[test]
    fn template_sources_find_their_users_without_a_scan() {
        const COUNT: usize = 10_000;
        let users = SharedIndex::<Watched, TemplateSource>::default();
        let mut keep = index::kept(users.clone(), template_sources);
        for i in 0..COUNT {
            let es: ExternalSecret = serde_json::from_value(json!({
                "apiVersion": "external-secrets.io/v1", "kind": "ExternalSecret",
                "metadata": {"name": format!("es-{i}"), "namespace": "team-a"},
                "spec": {"target": {"template": {"templateFrom": [
                    {"configMap": {"name": format!("cm-{i}"), "items": [{"key": "k"}]}},
                    {"secret": {"name": format!("s-{i}"), "items": [{"key": "k"}]}},
                ]}}},
            }))
            .unwrap();
            keep(&watcher::Event::Apply(DeserializeGuard(Ok(es))));
        }
        let users_of = |config_map, name: String| -> Vec<String> {
            let key = TemplateSource {
                config_map,
                namespace: "team-a".into(),
                name,
            };
            let found = users.lock().unwrap().get(&key);
            found.into_iter().map(|r| r.name).collect()
        };
        assert!(
            users_of(false, "cm-0".into()).is_empty(),
            "a Secret named as a ConfigMap is another source"
        );
        let started = std::time::Instant::now();
        for i in 0..COUNT {
            assert_eq!(users_of(true, format!("cm-{i}")), [format!("es-{i}")]);
            assert_eq!(users_of(false, format!("s-{i}")), [format!("es-{i}")]);
        }
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(2),
            "{} source events took {took:?}",
            2 * COUNT
        );
    }
}
