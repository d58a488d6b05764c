//! What the controllers' watches share: the scope they watch and what counts as a change.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};

pub(crate) use watch_departures::{on_departure, on_departure_with};

use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};

/// All namespaces, or the one of single-namespace mode.
pub(crate) fn scoped<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Whether a watch's first list is in, for any number of tasks to ask or await. kube-runtime's
/// `Store::wait_until_ready` wakes only the task that polled it last, and every controller
/// awaits its own cache's: a second task awaiting the same cache could wait for good, and an
/// answer at once (`now_or_never`, a poll with no task to wake) took the controller's wake-up.
/// What our own code waits on is this, set where the watch's events pass.
#[derive(Clone)]
pub(crate) struct FirstList(std::sync::Arc<tokio::sync::watch::Sender<bool>>);

impl Default for FirstList {
    fn default() -> Self {
        Self(std::sync::Arc::new(tokio::sync::watch::channel(false).0))
    }
}

impl FirstList {
    /// Takes in one event of the watch, after its reflector (so the cache holds the list).
    pub(crate) fn observe<K>(&self, event: &watcher::Event<K>) {
        if matches!(event, watcher::Event::InitDone) {
            self.0.send_replace(true);
        }
    }

    pub(crate) fn is_in(&self) -> bool {
        *self.0.borrow()
    }

    pub(crate) async fn wait(&self) {
        // The sender lives as long as `self`: the wait ends only with the list.
        let _ = self.0.subscribe().wait_for(|listed| *listed).await;
    }
}

/// A watch's cache, and whether its first list is in.
pub struct Cached<K: Resource<DynamicType = ()> + 'static> {
    pub(crate) cache: Store<K>,
    pub(crate) listed: FirstList,
}

impl<K: Resource<DynamicType = ()> + 'static> Clone for Cached<K> {
    fn clone(&self) -> Self {
        Self {
            cache: self.cache.clone(),
            listed: self.listed.clone(),
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Cached<K> {
    pub(crate) fn new(cache: Store<K>) -> Self {
        Self {
            cache,
            listed: FirstList::default(),
        }
    }
}

/// A watch's events as one of its readers gets them (see [`shared`]).
pub(crate) type Events<K> =
    tokio_stream::wrappers::UnboundedReceiverStream<watcher::Result<watcher::Event<K>>>;

/// One watch of `api` (one list, one watch connection) for two readers, each of which keeps its
/// own cache of it: the stores' controller and the ExternalSecrets' trigger both need every
/// store event, and the second watch of the same kind cost a list at every start. Errors reach
/// the first reader only, which reports them.
pub(crate) fn shared<K>(api: Api<K>) -> (Events<K>, Events<K>)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    use kube::runtime::WatchStreamExt;

    fan_out(
        watcher(api, watcher::Config::default())
            .default_backoff()
            // managedFields are often the larger part of an object and no reader reads them.
            .modify(|o| o.managed_fields_mut().clear()),
    )
}

/// `events` for two readers, the errors for the first only. The watch stops as soon as both
/// readers are gone (the controllers stopped), not at the next event, which on a quiet kind
/// may never come.
fn fan_out<K>(
    events: impl futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
) -> (Events<K>, Events<K>)
where
    K: Clone + Send + 'static,
{
    use futures::StreamExt;
    use tokio::sync::mpsc::unbounded_channel;

    let (first_tx, first) = unbounded_channel();
    let (second_tx, second) = unbounded_channel();
    let mut events = events.boxed();
    tokio::spawn(async move {
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                () = async { tokio::join!(first_tx.closed(), second_tx.closed()); } => None,
            };
            let Some(event) = event else { break };
            if let Ok(e) = &event {
                let _ = second_tx.send(Ok(e.clone()));
            }
            let _ = first_tx.send(event);
        }
    });
    (
        tokio_stream::wrappers::UnboundedReceiverStream::new(first),
        tokio_stream::wrappers::UnboundedReceiverStream::new(second),
    )
}

/// What a reconcile reacts to: spec (generation), labels, annotations, finalizers and deletion,
/// not status, which the reconcile itself writes.
pub(crate) fn fingerprint<K: Resource>(obj: &K) -> Option<u64> {
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

/// What [`changed_objects`] keeps of a watch: by a hash of each object's namespace and name, a
/// hash of its uid (an object deleted and created again under its name is new) and its
/// fingerprint. kube's `predicate_filter` keeps the name, namespace and uid as strings, and
/// keeps a deleted object's entry for an hour. Two objects whose keys collide cost a needless
/// pass, never a missed one: their uids differ.
#[derive(Default)]
pub(crate) struct Changes {
    seen: HashMap<u64, (u64, u64)>,
    /// During a re-list: the objects it held so far.
    relisted: Option<HashSet<u64>>,
}

impl Changes {
    /// The object of an `Apply` or `InitApply` whose fingerprint changed (or that has none);
    /// other events only update what is kept.
    pub(crate) fn apply<K: Resource>(
        &mut self,
        event: watcher::Event<K>,
        fingerprint: impl Fn(&K) -> Option<u64>,
    ) -> Option<K> {
        let (obj, relisted) = match event {
            watcher::Event::Apply(obj) => (obj, false),
            watcher::Event::InitApply(obj) => (obj, true),
            watcher::Event::Delete(obj) => {
                self.seen.remove(&key(&obj));
                return None;
            }
            watcher::Event::Init => {
                self.relisted = Some(HashSet::new());
                return None;
            }
            watcher::Event::InitDone => {
                if let Some(relisted) = self.relisted.take() {
                    self.seen.retain(|k, _| relisted.contains(k));
                }
                return None;
            }
        };
        let key = key(&obj);
        if let (true, Some(r)) = (relisted, &mut self.relisted) {
            r.insert(key);
        }
        let Some(fingerprint) = fingerprint(&obj) else {
            return Some(obj);
        };
        let now = (hash(&obj.meta().uid), fingerprint);
        (self.seen.insert(key, now) != Some(now)).then_some(obj)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.seen.len()
    }
}

fn hash(value: &impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

fn key<K: Resource>(obj: &K) -> u64 {
    hash(&(&obj.meta().namespace, &obj.meta().name))
}

/// For `try_filter_map` on a watch's events, in place of kube's `applied_objects` and
/// `predicate_filter`: the applied objects whose `fingerprint` changed, forgetting each object
/// when it leaves the watch, at its delete or at the end of the re-list that misses it.
pub(crate) fn changed_objects<K: Resource>(
    fingerprint: impl Fn(&K) -> Option<u64>,
) -> impl FnMut(watcher::Event<K>) -> std::future::Ready<Result<Option<K>, watcher::Error>> {
    let mut changes = Changes::default();
    move |event| std::future::ready(Ok(changes.apply(event, &fingerprint)))
}

/// The stream `start` makes, started once `needed` turns true: a watch no object needs yet lists
/// and streams nothing (the metadata of every Secret of the cluster, for PushSecret sources and
/// `templateFrom`, in a cluster that has neither).
pub(crate) fn once_needed<S>(
    mut needed: tokio::sync::watch::Receiver<bool>,
    start: impl FnOnce() -> S + Send + 'static,
) -> impl futures::Stream<Item = S::Item> + Send
where
    S: futures::Stream + Send + 'static,
    S::Item: Send,
{
    use futures::StreamExt;
    futures::stream::once(async move {
        match needed.wait_for(|n| *n).await {
            Ok(_) => start().left_stream(),
            // The operator is stopping.
            Err(_) => futures::stream::empty().right_stream(),
        }
    })
    .flatten()
}

/// `reconcile` of `object`, then `gone` if the watch no longer holds it: a reconcile in flight
/// while its object departed records its series and state after [`on_departure`] forgot them.
/// Either this check sees the object gone, or its departure comes later and forgets them then.
pub(crate) async fn forgetting_departed<K, T>(
    reader: &Store<K>,
    object: ObjectRef<K>,
    reconcile: impl std::future::Future<Output = T>,
    gone: impl FnOnce(ObjectRef<K>),
) -> T
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    let result = reconcile.await;
    if reader.get(&object).is_none() {
        gone(object);
    }
    result
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;

    use super::*;

    fn cm(name: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("n".into());
        cm
    }

    #[test]
    fn changes_pass_once_and_nothing_is_kept_of_departed_objects() {
        let version = |name: &str, uid: &str, data: &str| {
            let mut cm = cm(name);
            cm.metadata.uid = Some(uid.into());
            cm.data = Some([("k".to_owned(), data.to_owned())].into());
            cm
        };
        let by_data = |cm: &ConfigMap| Some(hash(&cm.data));
        let mut changes = Changes::default();
        let passed = |changes: &mut Changes, e: watcher::Event<ConfigMap>| {
            changes
                .apply(e, by_data)
                .map(|cm| cm.metadata.name.unwrap())
        };
        let a = version("a", "uid-a", "1");
        assert_eq!(
            passed(&mut changes, watcher::Event::Apply(a.clone())).as_deref(),
            Some("a")
        );
        assert_eq!(
            passed(&mut changes, watcher::Event::Apply(a)),
            None,
            "unchanged"
        );
        let a2 = version("a", "uid-a", "2");
        assert!(passed(&mut changes, watcher::Event::Apply(a2)).is_some());
        let again = version("a", "uid-a2", "2");
        assert!(
            passed(&mut changes, watcher::Event::Apply(again.clone())).is_some(),
            "deleted and created again under its name: a new object"
        );
        passed(
            &mut changes,
            watcher::Event::Apply(version("b", "uid-b", "1")),
        );
        passed(
            &mut changes,
            watcher::Event::Apply(version("c", "uid-c", "1")),
        );
        assert_eq!(changes.len(), 3);
        passed(&mut changes, watcher::Event::Delete(again));
        assert_eq!(changes.len(), 2, "a deleted object is forgotten at once");
        // The watch broke; "b" was deleted meanwhile.
        passed(&mut changes, watcher::Event::Init);
        assert_eq!(
            passed(
                &mut changes,
                watcher::Event::InitApply(version("c", "uid-c", "1"))
            ),
            None,
            "a re-list passes only what changed"
        );
        passed(&mut changes, watcher::Event::InitDone);
        assert_eq!(
            changes.len(),
            1,
            "the re-list that misses an object forgets it"
        );
        assert!(
            passed(
                &mut changes,
                watcher::Event::Apply(version("b", "uid-b", "1"))
            )
            .is_some(),
            "forgotten, so new again"
        );
    }

    #[tokio::test]
    async fn a_reconcile_that_outlived_its_object_forgets_it_again() {
        let (reader, mut writer) = reflector::store::<ConfigMap>();
        writer.apply_watcher_event(&watcher::Event::Apply(cm("kept")));
        let mut forgotten = Vec::new();
        for name in ["kept", "departed"] {
            let object = ObjectRef::from_obj(&cm(name));
            let answer =
                forgetting_departed(&reader, object, async { 7 }, |o| forgotten.push(o.name)).await;
            assert_eq!(answer, 7, "the reconcile's own result");
        }
        assert_eq!(forgotten, ["departed"]);
    }

    /// The shared watch of stores ends when both its readers do (the controllers stopped on a
    /// lost lease, say), though no event comes to tell it.
    #[tokio::test]
    async fn a_shared_watch_ends_with_its_readers_without_waiting_for_an_event() {
        use futures::StreamExt;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};

        struct Watching(Arc<AtomicBool>);
        impl Drop for Watching {
            fn drop(&mut self) {
                self.0.store(false, Ordering::SeqCst);
            }
        }
        let watching = Arc::new(AtomicBool::new(true));
        let guard = Watching(watching.clone());
        let quiet = futures::stream::pending::<watcher::Result<watcher::Event<ConfigMap>>>().map(
            move |event| {
                let _ = &guard;
                event
            },
        );
        let (first, second) = fan_out(quiet);
        drop(first);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(watching.load(Ordering::SeqCst), "one reader is left");
        drop(second);
        tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while watching.load(Ordering::SeqCst) {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the watch ended with its last reader");
    }

    /// Each reader sees every event; only the first sees errors, which it reports.
    #[tokio::test]
    async fn both_readers_see_the_events_and_the_first_the_errors() {
        use futures::StreamExt;

        let events = futures::stream::iter([
            Ok(watcher::Event::Apply(cm("a"))),
            Err(watcher::Error::NoResourceVersion),
            Ok(watcher::Event::Delete(cm("a"))),
        ]);
        let (first, second) = fan_out(events);
        let first: Vec<_> = first.map(|e| e.is_ok()).collect().await;
        let second: Vec<_> = second.map(|e| e.is_ok()).collect().await;
        assert_eq!(first, [true, false, true]);
        assert_eq!(second, [true, true]);
    }

    #[tokio::test]
    async fn a_watch_starts_once_needed() {
        use futures::StreamExt;
        let started = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (needed, needs) = tokio::sync::watch::channel(false);
        let flag = started.clone();
        let mut stream = Box::pin(once_needed(needs, move || {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            futures::stream::iter([1, 2])
        }));
        let early = tokio::time::timeout(std::time::Duration::from_millis(50), stream.next()).await;
        assert!(early.is_err(), "nothing streams before it is needed");
        assert!(!started.load(std::sync::atomic::Ordering::SeqCst));
        needed.send_replace(true);
        assert_eq!(stream.collect::<Vec<_>>().await, [1, 2]);
    }
}
