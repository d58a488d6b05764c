//! controller-runtime's `workqueue_*` metrics (ESO exports them; its dashboards and alerts read
//! them) for kube-runtime's controllers, which keep their queue to themselves.
//!
//! The queue is rebuilt from what goes in and out of it. An object is due from the earliest of
//! the triggers seen for it (watch events, wake-ups) and the requeue its last reconcile or error
//! policy asked for, as kube-runtime's scheduler keeps the earliest request; it leaves the queue
//! when its reconcile starts, or when the controller finds it gone. Depth counts the objects due
//! and not started, so a refresh wave that waits for workers shows, although no event caused it.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::{self, ObjectRef};
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::time::Instant;

use crate::workers::Workers;

/// controller-runtime labels its queue metrics with the controller's name twice.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub name: String,
    pub controller: String,
}

type Histograms = Family<QueueLabels, Histogram, fn() -> Histogram>;

/// Every queue's pending objects, for the series read at scrape time.
type Queues = Arc<Mutex<Vec<(QueueLabels, Arc<Mutex<Pending>>)>>>;

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

    /// The queue of the controller `name`, counted from now on.
    pub fn queue(&self, name: impl Into<String>) -> Workqueue {
        let name = name.into();
        let labels = QueueLabels {
            controller: name.clone(),
            name,
        };
        let pending = Arc::<Mutex<Pending>>::default();
        self.queues
            .lock()
            .expect("workqueues poisoned")
            .push((labels.clone(), pending.clone()));
        Workqueue {
            adds: self.adds.get_or_create(&labels).clone(),
            retries: self.retries.get_or_create(&labels).clone(),
            queue_duration: self.queue_duration.get_or_create(&labels).clone(),
            work_duration: self.work_duration.get_or_create(&labels).clone(),
            pending,
            workers: None,
        }
    }
}

/// The objects of one controller that are due or being reconciled, by a hash of their
/// namespace and name (a few bytes an object, since every object with a refresh interval has
/// a requeue pending).
#[derive(Debug, Default)]
struct Pending {
    due: HashMap<u64, Instant>,
    working: HashMap<u64, Instant>,
}

impl Pending {
    fn due_at(&mut self, key: u64, at: Instant) {
        self.due
            .entry(key)
            .and_modify(|t| *t = (*t).min(at))
            .or_insert(at);
    }

    /// The series of `SCRAPED` at `now`.
    fn at(&self, now: Instant) -> [f64; 3] {
        let running = self.working.values().map(|t| (now - *t).as_secs_f64());
        let (unfinished, longest) = running.fold((0.0, 0.0_f64), |(s, m), r| (s + r, m.max(r)));
        let depth = self.due.values().filter(|t| **t <= now).count() as f64;
        [depth, unfinished, longest]
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

/// One controller's queue, as seen from its inputs and its reconciles.
#[derive(Clone)]
pub struct Workqueue {
    adds: Counter,
    retries: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
    pending: Arc<Mutex<Pending>>,
    /// How many reconciles run at once, and which object goes next (workers.rs); `None`, no
    /// limit. kube-runtime's own limit is not used: it parks the objects it has no worker for
    /// in a hash set and takes the first it finds there, so under a load that never lets up
    /// the same objects are taken each time and the others are never reconciled.
    workers: Option<Arc<Workers>>,
}

fn key(namespace: Option<&str>, name: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (namespace, name).hash(&mut h);
    h.finish()
}

fn key_of<K: kube::Resource>(object: &ObjectRef<K>) -> u64 {
    key(object.namespace.as_deref(), &object.name)
}

fn key_of_object<K: kube::Resource>(object: &K) -> u64 {
    let meta = object.meta();
    key(
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
    )
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
    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().expect("workqueue poisoned")
    }

    /// At most `n` reconciles at once (0: no limit), each object in its turn.
    pub fn workers(mut self, n: u16) -> Self {
        self.workers = (n > 0).then(|| Workers::new(n.into()));
        self
    }

    /// A trigger for `object`: due now.
    pub fn add<K: kube::Resource>(&self, object: &ObjectRef<K>) {
        self.added(key_of(object));
    }

    fn added(&self, key: u64) {
        self.adds.inc();
        self.pending().due_at(key, Instant::now());
    }

    /// The controller's main stream, each object it yields a trigger.
    pub fn watched<K, E, S>(&self, stream: S) -> impl Stream<Item = Result<K, E>> + use<K, E, S>
    where
        K: kube::Resource,
        S: Stream<Item = Result<K, E>>,
    {
        let queue = self.clone();
        stream.inspect(move |r| {
            if let Ok(object) = r {
                queue.added(key_of_object(object));
            }
        })
    }

    /// A stream of triggers (`reconcile_on`).
    pub fn triggers<K, S>(&self, stream: S) -> impl Stream<Item = ObjectRef<K>> + use<K, S>
    where
        K: kube::Resource,
        S: Stream<Item = ObjectRef<K>>,
    {
        let queue = self.clone();
        stream.inspect(move |object| queue.add(object))
    }

    /// A `watches_stream` mapper whose objects are triggers.
    pub fn mapper<T, K, I, F>(&self, map: F) -> impl Fn(T) -> Vec<ObjectRef<K>> + use<T, K, I, F>
    where
        K: kube::Resource,
        I: IntoIterator<Item = ObjectRef<K>>,
        F: Fn(T) -> I,
    {
        let queue = self.clone();
        move |t| {
            let objects: Vec<_> = map(t).into_iter().collect();
            objects.iter().for_each(|o| queue.add(o));
            objects
        }
    }

    /// `reconcile`, run when a worker is free on the object as `cache` has it then, timed from
    /// the queue's side: how long the object waited, how long it took, and when it is due
    /// again. An object deleted while it waited is not reconciled.
    pub fn reconciler<K, C, E, F, Fut>(
        &self,
        cache: reflector::Store<K>,
        dyntype: K::DynamicType,
        reconcile: F,
    ) -> impl FnMut(Arc<K>, C) -> futures::future::BoxFuture<'static, Result<Action, E>>
    + use<K, C, E, F, Fut>
    where
        K: kube::Resource + Clone + Send + Sync + 'static,
        K::DynamicType: Clone + Eq + Hash + Send + Sync,
        C: Send + 'static,
        F: Fn(Arc<K>, C) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Action, E>> + Send + 'static,
    {
        let queue = self.clone();
        let reconcile = Arc::new(reconcile);
        move |object, ctx| {
            let key = key_of_object(object.as_ref());
            let (queue, reconcile, cache) = (queue.clone(), reconcile.clone(), cache.clone());
            let dyntype = dyntype.clone();
            Box::pin(async move {
                let (object, _worker) = match &queue.workers {
                    None => (object, None),
                    Some(workers) => {
                        let namespace = object.meta().namespace.as_deref().unwrap_or_default();
                        let worker = workers.acquire(namespace).await;
                        let at = ObjectRef::from_obj_with(object.as_ref(), dyntype);
                        let Some(latest) = cache.get(&at) else {
                            queue.pending().due.remove(&key);
                            return Ok(Action::await_change());
                        };
                        (latest, Some(worker))
                    }
                };
                queue.started(key);
                // Boxed apart so that an object waiting for a worker holds a few words, not
                // the whole reconcile's state.
                let result = Box::pin(reconcile(object, ctx)).await;
                queue.finished(key, result.as_ref().ok());
                result
            })
        }
    }

    /// `policy`, with the retry it asks for counted and scheduled.
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
            let key = key_of_object(object.as_ref());
            let action = policy(object, error, ctx);
            queue.retries.inc();
            queue.requeued(key, &action);
            action
        }
    }

    /// What the controller yielded: an object it found gone leaves the queue.
    pub fn outcome<K: kube::Resource, E, Q>(
        &self,
        result: &Result<(ObjectRef<K>, Action), controller::Error<E, Q>>,
    ) {
        if let Err(controller::Error::ObjectNotFound(gone)) = result {
            self.pending().due.remove(&key_of(gone.as_ref()));
        }
    }

    fn started(&self, key: u64) {
        let now = Instant::now();
        let waited = {
            let mut pending = self.pending();
            pending.working.insert(key, now);
            pending.due.remove(&key)
        };
        // A reconcile that nothing seen asked for (a trigger of all objects) has no wait to tell.
        if let Some(due) = waited {
            self.queue_duration
                .observe(now.saturating_duration_since(due).as_secs_f64());
        }
    }

    fn finished(&self, key: u64, action: Option<&Action>) {
        let started = self.pending().working.remove(&key);
        if let Some(started) = started {
            self.work_duration.observe(started.elapsed().as_secs_f64());
        }
        if let Some(action) = action {
            self.requeued(key, action);
        }
    }

    fn requeued(&self, key: u64, action: &Action) {
        if let Some(after) = requeue_after(action) {
            self.pending().due_at(key, Instant::now() + after);
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
            .map(|(labels, pending)| {
                let reading = pending.lock().expect("workqueue poisoned").at(now);
                (labels.clone(), reading)
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
    use k8s_openapi::api::core::v1::Secret;

    fn text(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

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

    #[tokio::test(start_paused = true)]
    async fn triggers_and_requeues_fall_due_and_leave_when_reconciled() {
        let mut registry = Registry::default();
        let queues = Workqueues::default();
        queues.register(&mut registry);
        let queue = queues.queue("secret");
        let cache = reflector::store::<Secret>().0;
        let reconcile = queue.reconciler(cache, (), |_: Arc<Secret>, after: Duration| async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            Ok::<_, ()>(Action::requeue(after))
        });
        let mut reconcile = reconcile;
        let secret = |name: &str| {
            let mut s = Secret::default();
            s.metadata.name = Some(name.into());
            s.metadata.namespace = Some("ns".into());
            Arc::new(s)
        };
        for name in ["a", "b", "c"] {
            queue.add(&ObjectRef::from_obj(secret(name).as_ref()));
        }
        // Two triggers of one object are one item, due from the first.
        queue.add(&ObjectRef::from_obj(secret("a").as_ref()));
        assert_eq!(series(&text(&registry), "workqueue_depth"), 3.0);

        tokio::time::advance(Duration::from_secs(1)).await;
        let running = tokio::spawn(reconcile(secret("a"), Duration::from_secs(60)));
        tokio::task::yield_now().await;
        tokio::time::advance(Duration::from_secs(1)).await;
        let t = text(&registry);
        assert_eq!(series(&t, "workqueue_depth"), 2.0);
        assert_eq!(
            series(&t, "workqueue_longest_running_processor_seconds"),
            1.0
        );
        running.await.unwrap().unwrap();
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
        let policy = queue
            .error_policy(|_: Arc<Secret>, _: &(), ()| Action::requeue(Duration::from_secs(5)));
        reconcile(secret("c"), Duration::from_secs(3600))
            .await
            .unwrap();
        policy(secret("c"), &(), ());
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
        use futures::StreamExt;
        use kube::runtime::{Controller, reflector, watcher};
        let (reader, mut writer) = reflector::store::<Secret>();
        let secrets: Vec<Secret> = (0..20)
            .map(|i| {
                let mut s = Secret::default();
                s.metadata.name = Some(format!("s-{i}"));
                s.metadata.namespace = Some("ns".into());
                s
            })
            .collect();
        writer.apply_watcher_event(&watcher::Event::Init);
        for s in &secrets {
            writer.apply_watcher_event(&watcher::Event::InitApply(s.clone()));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let triggers =
            futures::stream::iter(secrets.into_iter().map(Ok)).chain(futures::stream::pending());
        let queue = Workqueues::default().queue("secret").workers(1);
        let reconciled = Arc::new(Mutex::new(HashMap::<String, u32>::new()));
        let counted = reconciled.clone();
        let reconcile = queue.reconciler(
            reader.clone(),
            (),
            move |secret: Arc<Secret>, _: Arc<()>| {
                let counted = counted.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    *counted
                        .lock()
                        .unwrap()
                        .entry(secret.metadata.name.clone().unwrap_or_default())
                        .or_default() += 1;
                    // Due again at once: the worker never runs out of work.
                    Ok::<_, std::convert::Infallible>(Action::requeue(Duration::from_millis(1)))
                }
            },
        );
        let run = Controller::for_stream(triggers, reader)
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

    /// An object waits for a worker with the object as it was when it fell due: it is
    /// reconciled as the cache has it when its turn comes, and not at all if it was deleted
    /// meanwhile.
    #[tokio::test(start_paused = true)]
    async fn a_waiting_object_is_reconciled_as_it_is_when_its_turn_comes() {
        use kube::runtime::watcher;
        let (reader, mut writer) = reflector::store::<Secret>();
        let secret = |name: &str, label: &str| {
            let mut s = Secret::default();
            s.metadata.name = Some(name.into());
            s.metadata.namespace = Some("ns".into());
            s.metadata.labels = Some([("v".to_owned(), label.to_owned())].into());
            s
        };
        for s in [
            secret("busy", "1"),
            secret("edited", "1"),
            secret("deleted", "1"),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(s));
        }
        let queue = Workqueues::default().queue("secret").workers(1);
        let seen = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
        let saw = seen.clone();
        let mut reconcile = queue.reconciler(reader, (), move |s: Arc<Secret>, _: ()| {
            let saw = saw.clone();
            async move {
                let label = s.metadata.labels.as_ref().map(|l| l["v"].clone());
                saw.lock()
                    .unwrap()
                    .push((s.metadata.name.clone().unwrap(), label.unwrap_or_default()));
                tokio::time::sleep(Duration::from_secs(1)).await;
                Ok::<_, ()>(Action::await_change())
            }
        });
        let runs: Vec<_> = ["busy", "edited", "deleted"]
            .map(|name| tokio::spawn(reconcile(Arc::new(secret(name, "1")), ())))
            .into();
        tokio::task::yield_now().await;
        writer.apply_watcher_event(&watcher::Event::Apply(secret("edited", "2")));
        writer.apply_watcher_event(&watcher::Event::Delete(secret("deleted", "1")));
        for run in runs {
            assert_eq!(run.await.unwrap(), Ok(Action::await_change()));
        }
        assert_eq!(
            *seen.lock().unwrap(),
            [("busy".into(), "1".into()), ("edited".into(), "2".into())]
        );
    }
}
