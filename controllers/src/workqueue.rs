//! The queue of each controller: which objects are due, handed to kube-runtime's runner only
//! when a worker is free for them (workers.rs), and controller-runtime's `workqueue_*` metrics
//! (ESO exports them; its dashboards and alerts read them) read off it.
//!
//! Every trigger of a controller (watch events, wake-ups, `watches` mappers) and every requeue
//! goes through its queue: the triggers reach kube-runtime's controller only as the objects the
//! queue releases (`released`, a `reconcile_on` stream), and a reconcile's requeue is kept here
//! while kube-runtime is told to wait for a change. An object is due from the earliest of the
//! triggers seen for it and the requeue its last reconcile or error policy asked for; it leaves
//! the queue when its reconcile starts, or when the controller finds it gone. Depth counts the
//! objects due and not started, so a refresh wave that waits for workers shows, although no
//! event caused it.

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt, TryStreamExt};
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{Controller, watcher};
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::time::Instant;

use crate::watch::{changed_objects, fingerprint, on_departure_with};
use crate::workers::Gate;

/// controller-runtime labels its queue metrics with the controller's name twice.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub name: String,
    pub controller: String,
}

type Histograms = Family<QueueLabels, Histogram, fn() -> Histogram>;

/// Every queue, for the series read at scrape time.
type Queues = Arc<Mutex<Vec<(QueueLabels, Arc<Gate>)>>>;

/// controller-runtime's buckets: 10 ns to 1000 s, a factor of ten apart.
fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(10e-9, 10.0, 12))
}

/// Every controller's queue, and the series they share.
#[derive(Clone)]
pub struct Workqueues {
    queues: Queues,
    adds: Family<QueueLabels, Counter>,
    retries: Family<QueueLabels, Counter>,
    queue_duration: Histograms,
    work_duration: Histograms,
}

impl Default for Workqueues {
    fn default() -> Self {
        Self {
            queues: Arc::default(),
            adds: Family::default(),
            retries: Family::default(),
            queue_duration: Family::new_with_constructor(seconds_histogram),
            work_duration: Family::new_with_constructor(seconds_histogram),
        }
    }
}

impl Workqueues {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            self.adds.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            self.retries.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            self.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            self.work_duration.clone(),
        );
        registry.register_collector(Box::new(Scraped(self.queues.clone())));
    }

    /// The controller `name` stopped for good (its provider CRD was deleted): its queue's
    /// readings go. Its counters stay, as a stopped controller's do.
    pub fn forget(&self, name: &str) {
        self.queues
            .lock()
            .expect("workqueues poisoned")
            .retain(|(labels, _)| labels.controller != name);
    }

    /// The queue of the controller `name`, without a limit of workers, counted from now on.
    pub fn queue(&self, name: impl Into<String>) -> Workqueue {
        let name = name.into();
        let labels = QueueLabels {
            controller: name.clone(),
            name,
        };
        let gate = Arc::new(Gate::new(None));
        let mut queues = self.queues.lock().expect("workqueues poisoned");
        // A controller made again under its name replaces the stopped one's readings: the
        // same series twice would make the scrape invalid.
        queues.retain(|(l, _)| *l != labels);
        queues.push((labels.clone(), gate.clone()));
        drop(queues);
        Workqueue {
            adds: self.adds.get_or_create(&labels).clone(),
            retries: self.retries.get_or_create(&labels).clone(),
            queue_duration: self.queue_duration.get_or_create(&labels).clone(),
            work_duration: self.work_duration.get_or_create(&labels).clone(),
            gate,
        }
    }
}

/// A queue's series that depend on the time they are read at: objects due and not started,
/// seconds of work in progress summed over the running reconciles, and seconds the longest
/// running one has run.
const SCRAPED: [(&str, &str); 3] = [
    ("workqueue_depth", "Current depth of workqueue"),
    (
        "workqueue_unfinished_work_seconds",
        "How many seconds of work has been done that is in progress and hasn't been observed by work_duration",
    ),
    (
        "workqueue_longest_running_processor_seconds",
        "How many seconds has the longest running processor for workqueue been running",
    ),
];

/// One controller's queue.
#[derive(Clone)]
pub struct Workqueue {
    adds: Counter,
    retries: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
    gate: Arc<Gate>,
}

/// An object's key in its controller's queue: a hash of its namespace and name (a few bytes,
/// where every object with a refresh interval has a requeue pending).
pub(crate) fn key(namespace: Option<&str>, name: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (namespace, name).hash(&mut h);
    h.finish()
}

fn key_of<K: kube::Resource>(object: &ObjectRef<K>) -> u64 {
    key(object.namespace.as_deref(), &object.name)
}

/// How long `action` asks to wait. kube-runtime keeps the delay private; its `Debug` form
/// (`Action { requeue_after: Some(1.5s) }`) is the only reading of it, pinned by a test.
fn requeue_after(action: &Action) -> Option<Duration> {
    let text = format!("{action:?}");
    let delay = text.split_once("Some(")?.1.strip_suffix(") }")?;
    let unit_at = delay.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = delay.split_at(unit_at);
    let number: f64 = number.parse().ok()?;
    let per_second = match unit {
        "s" => 1.0,
        "ms" => 1e3,
        "µs" => 1e6,
        "ns" => 1e9,
        _ => return None,
    };
    Some(Duration::from_secs_f64(number / per_second))
}

impl Workqueue {
    /// At most `n` reconciles at once (0: no limit), each object in its turn.
    pub fn workers(self, n: u16) -> Self {
        self.gate.limit((n > 0).then_some(n.into()));
        self
    }

    /// A trigger for `object`: due now.
    pub fn add<K: kube::Resource>(&self, object: &ObjectRef<K>) {
        self.trigger(object.namespace.as_deref(), &object.name);
    }

    fn add_object<K: kube::Resource>(&self, object: &K) {
        let meta = object.meta();
        self.trigger(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        );
    }

    /// A trigger for the object `name` in `namespace`: due now.
    pub(crate) fn trigger(&self, namespace: Option<&str>, name: &str) {
        self.adds.inc();
        let at = Instant::now();
        self.gate.add(key(namespace, name), namespace, name, at);
    }

    /// kube-runtime's controller over `cache`, fed by this queue alone, from `events`: the
    /// watch after `cache`'s writer has applied them. An object whose spec, labels,
    /// annotations, finalizers or deletion changed is queued (its own status writes are no
    /// reason); one that left the watch leaves the queue, and `gone` is told. Add the other
    /// triggers with `triggers`, `mapper` and `all_on`, and run it with `reconciler` and
    /// `error_policy`.
    pub fn controller<K, S>(
        &self,
        events: S,
        cache: reflector::Store<K>,
        dyntype: K::DynamicType,
        mut gone: impl FnMut(ObjectRef<K>) + Send + 'static,
    ) -> Controller<K>
    where
        K: kube::Resource
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
        K::DynamicType: Clone + Eq + Hash + std::fmt::Debug + Unpin + Send + Sync + 'static,
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    {
        let queue = self.clone();
        let departed = on_departure_with(cache.clone(), dyntype.clone(), move |object| {
            queue.gate.left(key_of(&object));
            gone(object)
        });
        let queue = self.clone();
        // Watch errors pass on: kube-runtime reports them.
        let triggers = events
            .inspect_ok(departed)
            .try_filter_map(changed_objects(fingerprint))
            .filter_map(move |r| {
                futures::future::ready(match r {
                    Ok(object) => {
                        queue.add_object(&object);
                        None
                    }
                    Err(e) => Some(Err(e)),
                })
            });
        Controller::for_stream_with(triggers, cache, dyntype.clone())
            .reconcile_on(self.released(dyntype))
    }

    /// The objects a worker is free for, as they fall due.
    fn released<K>(&self, dyntype: K::DynamicType) -> impl Stream<Item = ObjectRef<K>> + use<K>
    where
        K: kube::Resource,
        K::DynamicType: Clone,
    {
        let queue = self.clone();
        futures::stream::unfold((), move |()| {
            let (queue, dyntype) = (queue.clone(), dyntype.clone());
            async move {
                let released = queue.gate.release().await;
                queue.queue_duration.observe(released.waited.as_secs_f64());
                Some((released.object.to_ref(&dyntype), ()))
            }
        })
    }

    /// A stream of triggers (`reconcile_on`), taken into the queue.
    pub fn triggers<K, S>(&self, stream: S) -> impl Stream<Item = ObjectRef<K>> + use<K, S>
    where
        K: kube::Resource,
        S: Stream<Item = ObjectRef<K>>,
    {
        let queue = self.clone();
        stream.filter_map(move |object| {
            queue.add(&object);
            futures::future::ready(None)
        })
    }

    /// Every object of `cache`, at each item of `stream` (`reconcile_all_on`), taken into the
    /// queue.
    pub fn all_on<K, T, S>(
        &self,
        stream: S,
        cache: reflector::Store<K>,
    ) -> impl Stream<Item = ObjectRef<K>> + use<K, T, S>
    where
        K: kube::Resource + Clone,
        K::DynamicType: Clone + Eq + Hash,
        S: Stream<Item = T>,
    {
        let queue = self.clone();
        stream.filter_map(move |_| {
            for object in cache.state() {
                queue.add_object(object.as_ref());
            }
            futures::future::ready(None)
        })
    }

    /// A `watches_stream` mapper whose objects are taken into the queue.
    pub fn mapper<T, K, I, F>(&self, map: F) -> impl Fn(T) -> Vec<ObjectRef<K>> + use<T, K, I, F>
    where
        K: kube::Resource,
        I: IntoIterator<Item = ObjectRef<K>>,
        F: Fn(T) -> I,
    {
        let queue = self.clone();
        move |t| {
            map(t).into_iter().for_each(|o| queue.add(&o));
            Vec::new()
        }
    }

    /// `reconcile`, timed from the queue's side, its requeue kept in the queue.
    pub fn reconciler<K, C, E, F, Fut>(
        &self,
        reconcile: F,
    ) -> impl FnMut(Arc<K>, C) -> futures::future::BoxFuture<'static, Result<Action, E>>
    + use<K, C, E, F, Fut>
    where
        K: kube::Resource + Send + Sync + 'static,
        C: Send + 'static,
        F: Fn(Arc<K>, C) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Action, E>> + Send + 'static,
    {
        let queue = self.clone();
        let reconcile = Arc::new(reconcile);
        move |object, ctx| {
            let (queue, reconcile) = (queue.clone(), reconcile.clone());
            Box::pin(async move {
                let result = reconcile(object.clone(), ctx).await;
                match result {
                    // An error's retry is the error policy's to say.
                    Err(e) => Err(e),
                    Ok(action) => {
                        queue.finished(object.as_ref(), &action);
                        Ok(Action::await_change())
                    }
                }
            })
        }
    }

    /// `policy`, with the retry it asks for counted and kept in the queue.
    pub fn error_policy<K, E, C, P>(
        &self,
        policy: P,
    ) -> impl Fn(Arc<K>, &E, C) -> Action + use<K, E, C, P>
    where
        K: kube::Resource,
        P: Fn(Arc<K>, &E, C) -> Action,
    {
        let queue = self.clone();
        move |object, error, ctx| {
            let action = policy(object.clone(), error, ctx);
            queue.retries.inc();
            queue.finished(object.as_ref(), &action);
            Action::await_change()
        }
    }

    /// What the controller yielded: an object it found gone leaves the queue.
    pub fn outcome<K: kube::Resource, E, Q>(
        &self,
        result: &Result<(ObjectRef<K>, Action), controller::Error<E, Q>>,
    ) {
        if let Err(controller::Error::ObjectNotFound(gone)) = result {
            self.gate.gone(key_of(gone.as_ref()));
        }
    }

    fn finished<K: kube::Resource>(&self, object: &K, action: &Action) {
        let meta = object.meta();
        let name = meta.name.as_deref().unwrap_or_default();
        let again = requeue_after(action).map(|after| Instant::now() + after);
        let ran = self.gate.finish(
            key(meta.namespace.as_deref(), name),
            meta.namespace.as_deref(),
            name,
            again,
        );
        if let Some(ran) = ran {
            self.work_duration.observe(ran.as_secs_f64());
        }
    }
}

/// The series that depend on the time they are read at.
#[derive(Debug)]
struct Scraped(Queues);

impl prometheus_client::collector::Collector for Scraped {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let now = Instant::now();
        let readings: Vec<_> = self
            .0
            .lock()
            .expect("workqueues poisoned")
            .iter()
            .map(|(labels, gate)| {
                let r = gate.readings(now);
                (labels.clone(), [r.depth as f64, r.unfinished, r.longest])
            })
            .collect();
        for (i, (name, help)) in SCRAPED.into_iter().enumerate() {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            for (labels, reading) in &readings {
                ConstGauge::new(reading[i]).encode(family.encode_family(labels)?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::text;
    use k8s_openapi::api::core::v1::Secret;
    use std::collections::HashMap;

    fn value(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{series} ")))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
            .parse()
            .unwrap()
    }

    /// The sample of `metric` of the test's queue.
    fn series(text: &str, metric: &str) -> f64 {
        value(
            text,
            &format!(r#"{metric}{{name="secret",controller="secret"}}"#),
        )
    }

    /// A controller started again under its name (a provider kind whose CRD was deleted and
    /// installed again) is one series, read from the new queue: two would make the scrape
    /// invalid (the same series twice).
    #[test]
    fn a_queue_made_again_under_its_name_replaces_the_old_one() {
        let mut registry = Registry::default();
        let queues = Workqueues::default();
        queues.register(&mut registry);
        let old = queues.queue("secret");
        old.trigger(Some("ns"), "a");
        old.trigger(Some("ns"), "b");
        let new = queues.queue("secret");
        new.trigger(Some("ns"), "c");
        let both = text(&registry);
        let depths = both
            .lines()
            .filter(|l| l.starts_with("workqueue_depth{"))
            .count();
        assert_eq!(depths, 1, "{both}");
        assert_eq!(series(&both, "workqueue_depth"), 1.0, "the new queue's");
        queues.forget("secret");
        let after = text(&registry);
        assert!(!after.contains("workqueue_depth{"), "{after}");
    }

    #[test]
    fn the_delay_of_every_action_is_read() {
        for d in [
            Duration::ZERO,
            Duration::from_nanos(7),
            Duration::from_micros(250),
            Duration::from_millis(1500),
            Duration::from_secs(3600),
            Duration::from_secs_f64(1.000_000_001),
        ] {
            let read = requeue_after(&Action::requeue(d)).unwrap();
            assert!(
                read.abs_diff(d) < Duration::from_nanos(2),
                "{d:?} read as {read:?}"
            );
        }
        assert_eq!(requeue_after(&Action::await_change()), None);
    }

    fn secret(name: &str) -> Arc<Secret> {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s.metadata.namespace = Some("ns".into());
        Arc::new(s)
    }

    #[tokio::test(start_paused = true)]
    async fn triggers_and_requeues_fall_due_and_leave_when_reconciled() {
        let mut registry = Registry::default();
        let queues = Workqueues::default();
        queues.register(&mut registry);
        let queue = queues.queue("secret");
        let mut reconcile = queue.reconciler(|_: Arc<Secret>, after: Duration| async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            Ok::<_, ()>(Action::requeue(after))
        });
        for name in ["a", "b", "c"] {
            queue.add(&ObjectRef::from_obj(secret(name).as_ref()));
        }
        // Two triggers of one object are one item, due from the first.
        queue.add(&ObjectRef::from_obj(secret("a").as_ref()));
        assert_eq!(series(&text(&registry), "workqueue_depth"), 3.0);

        tokio::time::advance(Duration::from_secs(1)).await;
        let mut released = std::pin::pin!(queue.released::<Secret>(()));
        assert_eq!(released.next().await.unwrap().name, "a");
        let running = tokio::spawn(reconcile(secret("a"), Duration::from_secs(60)));
        tokio::task::yield_now().await;
        tokio::time::advance(Duration::from_secs(1)).await;
        let t = text(&registry);
        assert_eq!(series(&t, "workqueue_depth"), 2.0);
        assert_eq!(
            series(&t, "workqueue_longest_running_processor_seconds"),
            1.0
        );
        assert_eq!(
            running.await.unwrap(),
            Ok(Action::await_change()),
            "kube-runtime is not asked to requeue: the queue keeps it"
        );
        let t = text(&registry);
        assert_eq!(series(&t, "workqueue_adds_total"), 4.0);
        assert_eq!(series(&t, "workqueue_queue_duration_seconds_sum"), 1.0);
        assert_eq!(series(&t, "workqueue_work_duration_seconds_sum"), 2.0);
        assert_eq!(series(&t, "workqueue_unfinished_work_seconds"), 0.0);

        // Its requeue falls due in a minute; the gone object leaves without a reconcile.
        queue.outcome::<Secret, (), ()>(&Err(controller::Error::ObjectNotFound(Box::new(
            ObjectRef::from_obj(secret("b").as_ref()).erase(),
        ))));
        assert_eq!(series(&text(&registry), "workqueue_depth"), 1.0);
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(series(&text(&registry), "workqueue_depth"), 2.0);

        // An error's retry is counted and falls due when the policy says.
        assert_eq!(released.next().await.unwrap().name, "c");
        let policy = queue
            .error_policy(|_: Arc<Secret>, _: &(), ()| Action::requeue(Duration::from_secs(5)));
        assert_eq!(policy(secret("c"), &(), ()), Action::await_change());
        let t = text(&registry);
        assert_eq!(series(&t, "workqueue_depth"), 1.0);
        assert_eq!(series(&t, "workqueue_retries_total"), 1.0);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(series(&text(&registry), "workqueue_depth"), 2.0);
    }

    /// More objects due than workers, for good (a refresh interval shorter than a worker takes
    /// to get round them all): every object still gets its turn. kube-runtime's own limit
    /// (`Config::concurrency`) parks the objects it has no worker for in a hash set and takes
    /// the first it finds there, so the same few ran again and again and the rest waited
    /// forever (found by the out-of-process kill trial on a loaded machine).
    #[tokio::test(start_paused = true)]
    async fn every_object_gets_a_worker_when_more_are_due_than_there_are_workers() {
        use kube::runtime::{reflector, watcher};
        let (reader, mut writer) = reflector::store::<Secret>();
        let secrets: Vec<Secret> = (0..20)
            .map(|i| secret(&format!("s-{i}")).as_ref().clone())
            .collect();
        writer.apply_watcher_event(&watcher::Event::Init);
        for s in &secrets {
            writer.apply_watcher_event(&watcher::Event::InitApply(s.clone()));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let triggers =
            futures::stream::iter(secrets.into_iter().map(|s| Ok(watcher::Event::Apply(s))))
                .chain(futures::stream::pending());
        let queue = Workqueues::default().queue("secret").workers(1);
        let reconciled = Arc::new(Mutex::new(HashMap::<String, u32>::new()));
        let counted = reconciled.clone();
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let reconcile = queue.reconciler(move |secret: Arc<Secret>, _: Arc<()>| {
            let (counted, running) = (counted.clone(), running.clone());
            async move {
                use std::sync::atomic::Ordering::SeqCst;
                assert_eq!(running.fetch_add(1, SeqCst), 0, "one worker");
                tokio::time::sleep(Duration::from_millis(10)).await;
                running.fetch_sub(1, SeqCst);
                *counted
                    .lock()
                    .unwrap()
                    .entry(secret.metadata.name.clone().unwrap_or_default())
                    .or_default() += 1;
                // Due again at once: the worker never runs out of work.
                Ok::<_, std::convert::Infallible>(Action::requeue(Duration::from_millis(1)))
            }
        });
        let run = queue
            .controller(triggers, reader, (), |_| {})
            .run(reconcile, |_, _, _| Action::await_change(), Arc::new(()))
            .for_each(|_| async {});
        let _ = tokio::time::timeout(Duration::from_secs(2), run).await;
        let reconciled = reconciled.lock().unwrap();
        let fewest = (0..20)
            .map(|i| reconciled.get(&format!("s-{i}")).copied().unwrap_or(0))
            .min();
        assert!(
            fewest >= Some(5),
            "2 s of one worker at 10 ms a reconcile is 200 turns for 20 objects: {reconciled:?}"
        );
    }

    /// An object waits for a worker as a reference: it is reconciled as the cache has it when
    /// its turn comes, and not at all if it was deleted meanwhile, which frees its place.
    #[tokio::test(start_paused = true)]
    async fn a_waiting_object_is_reconciled_as_it_is_when_its_turn_comes() {
        use kube::runtime::watcher;
        let (reader, mut writer) = reflector::store::<Secret>();
        let labelled = |name: &str, label: &str| {
            let mut s = secret(name).as_ref().clone();
            s.metadata.labels = Some([("v".to_owned(), label.to_owned())].into());
            s
        };
        writer.apply_watcher_event(&watcher::Event::Init);
        for name in ["busy", "edited", "deleted"] {
            writer.apply_watcher_event(&watcher::Event::InitApply(labelled(name, "1")));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let triggers = futures::stream::iter(
            ["busy", "edited", "deleted"].map(|n| Ok(watcher::Event::Apply(labelled(n, "1")))),
        )
        .chain(futures::stream::pending());
        let queue = Workqueues::default().queue("secret").workers(1);
        let seen = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
        let saw = seen.clone();
        let reconcile = queue.reconciler(move |s: Arc<Secret>, _: Arc<()>| {
            let saw = saw.clone();
            async move {
                let label = s.metadata.labels.as_ref().map(|l| l["v"].clone());
                saw.lock()
                    .unwrap()
                    .push((s.metadata.name.clone().unwrap(), label.unwrap_or_default()));
                tokio::time::sleep(Duration::from_secs(1)).await;
                Ok::<_, std::convert::Infallible>(Action::await_change())
            }
        });
        let edits = async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            writer.apply_watcher_event(&watcher::Event::Apply(labelled("edited", "2")));
            writer.apply_watcher_event(&watcher::Event::Delete(labelled("deleted", "1")));
            futures::future::pending::<()>().await
        };
        let outcomes = queue.clone();
        let run = queue
            .controller(triggers, reader, (), |_| {})
            .run(reconcile, |_, _, _| Action::await_change(), Arc::new(()))
            .for_each(|r| {
                outcomes.outcome(&r);
                async {}
            });
        let _ =
            tokio::time::timeout(Duration::from_secs(5), futures::future::join(run, edits)).await;
        assert_eq!(
            *seen.lock().unwrap(),
            [("busy".into(), "1".into()), ("edited".into(), "2".into())]
        );
        let readings = queue.gate.readings(Instant::now());
        assert_eq!(
            (readings.depth, readings.longest),
            (0, 0.0),
            "nothing left waiting or running"
        );
    }
}
