//! Which object of one controller is reconciled next, and when. Every trigger and requeue is
//! kept here as a reference and a time; kube-runtime's runner is handed an object only when a
//! worker is free for it, so a backlog costs an entry here, not a waiting reconcile.
//!
//! A worker that comes free goes to the next namespace in turn that has objects due, and there
//! to the one due first. So one namespace's backlog (10k ExternalSecrets created at once) holds
//! up a new object in another namespace for one turn of each namespace waiting, not for the
//! whole backlog, as a single first-come queue (ESO's) would. kube-runtime's own limit
//! (`Config::concurrency`) is not used: it parks the objects it has no worker for in a hash set
//! and takes the first it finds there, so under a load that never lets up the same objects are
//! taken each time and the others are never reconciled.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::object_name::ObjectName;

pub(crate) struct Gate {
    state: Mutex<State>,
    changed: Notify,
}

struct State {
    /// `None`: no limit.
    limit: Option<usize>,
    running: usize,
    objects: HashMap<u64, Object>,
    /// Objects due later, by the time they fall due.
    timers: BTreeSet<(Instant, u64)>,
    /// Namespaces with objects due now, in the order they get their next worker
    /// (cluster-scoped objects wait under "").
    turns: VecDeque<String>,
    /// Objects due now by namespace, first due first. A key whose object left or was taken
    /// since is skipped when its turn comes, rather than searched for.
    lanes: HashMap<String, VecDeque<u64>>,
}

struct Object {
    object: ObjectName,
    phase: Phase,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    Later(Instant),
    Due(Instant),
    /// Being reconciled since; due again at `again` once done (a trigger seen meanwhile),
    /// unless it `left` the cache meanwhile.
    Running {
        since: Instant,
        again: Option<Instant>,
        left: bool,
    },
}

/// An object handed to a worker.
#[derive(Debug, PartialEq)]
pub(crate) struct Released {
    pub object: ObjectName,
    /// Since it fell due.
    pub waited: Duration,
}

/// Objects due and not started, seconds of work in progress summed over the running
/// reconciles, and seconds the longest running one has run.
pub(crate) struct Readings {
    pub depth: usize,
    pub unfinished: f64,
    pub longest: f64,
}

impl Gate {
    /// At most `limit` reconciles at once (`None`: no limit).
    pub(crate) fn new(limit: Option<usize>) -> Self {
        Self {
            state: Mutex::new(State {
                limit,
                running: 0,
                objects: HashMap::new(),
                timers: BTreeSet::new(),
                turns: VecDeque::new(),
                lanes: HashMap::new(),
            }),
            changed: Notify::new(),
        }
    }

    /// At most `limit` reconciles at once from now on.
    pub(crate) fn limit(&self, limit: Option<usize>) {
        self.lock().limit = limit;
        self.changed.notify_one();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("gate poisoned")
    }

    /// The object is due at `at`, unless it is due earlier already.
    pub(crate) fn add(&self, key: u64, namespace: Option<&str>, name: &str, at: Instant) {
        let now = Instant::now();
        let mut state = self.lock();
        let phase = match state.objects.get_mut(&key) {
            None => {
                state.objects.insert(
                    key,
                    Object {
                        object: ObjectName::new(namespace, name),
                        phase: Phase::Later(at),
                    },
                );
                None
            }
            Some(object) => Some(object.phase),
        };
        match phase {
            None => state.schedule(key, at, now),
            Some(Phase::Later(t)) if at < t => {
                state.timers.remove(&(t, key));
                state.schedule(key, at, now);
            }
            Some(Phase::Running { since, again, .. }) => {
                let again = Some(again.map_or(at, |a| a.min(at)));
                let left = false;
                state.set(key, Phase::Running { since, again, left });
                return;
            }
            Some(_) => return,
        }
        drop(state);
        self.changed.notify_one();
    }

    /// The reconcile of the object ended; it is due again at `again`, or at a trigger seen
    /// while it ran, whichever is first. How long it ran, if a worker of this gate ran it.
    pub(crate) fn finish(
        &self,
        key: u64,
        namespace: Option<&str>,
        name: &str,
        again: Option<Instant>,
    ) -> Option<Duration> {
        let now = Instant::now();
        let mut state = self.lock();
        let Some(Phase::Running {
            since,
            again: seen,
            left,
        }) = state.objects.get(&key).map(|o| o.phase)
        else {
            // Reconciled by a trigger that did not come through here (none should): its
            // requeue is still kept.
            drop(state);
            if let Some(at) = again {
                self.add(key, namespace, name, at);
            }
            return None;
        };
        state.running -= 1;
        match [again, seen].into_iter().flatten().min() {
            Some(at) if !left => state.schedule(key, at, now),
            _ => {
                state.objects.remove(&key);
            }
        }
        drop(state);
        self.changed.notify_one();
        Some(now.saturating_duration_since(since))
    }

    /// The object was handed to a worker but was not found to reconcile: it leaves, and its
    /// worker is free.
    pub(crate) fn gone(&self, key: u64) {
        let mut state = self.lock();
        if let Some(Phase::Running { .. }) = state.objects.get(&key).map(|o| o.phase) {
            state.objects.remove(&key);
            state.running -= 1;
            drop(state);
            self.changed.notify_one();
        } else {
            state.leave(key);
        }
    }

    /// The object left the cache (deleted): it leaves the queue now rather than when its next
    /// requeue finds it gone, an hour later for a default refresh. A reconcile of it that is
    /// running still ends through `finish`, which then asks for nothing more.
    pub(crate) fn left(&self, key: u64) {
        self.lock().leave(key);
    }

    /// The next object for a free worker, or when to look again (`None`: when something
    /// changes).
    fn next(&self, now: Instant) -> Result<Released, Option<Instant>> {
        let mut state = self.lock();
        state.fall_due(now);
        if state.limit.is_some_and(|l| state.running >= l) {
            return Err(None);
        }
        match state.take(now) {
            Some(released) => Ok(released),
            None => Err(state.timers.first().map(|(t, _)| *t)),
        }
    }

    /// The next object for a free worker, when there is one.
    pub(crate) async fn release(&self) -> Released {
        loop {
            let wake = match self.next(Instant::now()) {
                Ok(released) => return released,
                Err(wake) => wake,
            };
            // A change since `next` left a permit: this returns at once then.
            let changed = self.changed.notified();
            match wake {
                Some(at) => {
                    tokio::select! {
                        () = changed => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => changed.await,
            }
        }
    }

    pub(crate) fn readings(&self, now: Instant) -> Readings {
        let state = self.lock();
        let mut readings = Readings {
            depth: 0,
            unfinished: 0.0,
            longest: 0.0,
        };
        for object in state.objects.values() {
            match object.phase {
                Phase::Due(_) => readings.depth += 1,
                Phase::Later(t) if t <= now => readings.depth += 1,
                Phase::Running { since, .. } => {
                    let ran = (now - since).as_secs_f64();
                    readings.unfinished += ran;
                    readings.longest = readings.longest.max(ran);
                }
                Phase::Later(_) => {}
            }
        }
        readings
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Gate")
            .field("limit", &state.limit)
            .field("running", &state.running)
            .field("objects", &state.objects.len())
            .finish()
    }
}

impl State {
    fn leave(&mut self, key: u64) {
        let Some(object) = self.objects.get_mut(&key) else {
            return;
        };
        match object.phase {
            Phase::Running { since, .. } => {
                object.phase = Phase::Running {
                    since,
                    again: None,
                    left: true,
                };
            }
            Phase::Later(t) => {
                self.timers.remove(&(t, key));
                self.objects.remove(&key);
            }
            // Left in its lane, skipped there.
            Phase::Due(_) => {
                self.objects.remove(&key);
            }
        }
    }

    fn set(&mut self, key: u64, phase: Phase) {
        if let Some(object) = self.objects.get_mut(&key) {
            object.phase = phase;
        }
    }

    /// Due at `at`: in its namespace's lane if that is now, among the timers otherwise.
    fn schedule(&mut self, key: u64, at: Instant, now: Instant) {
        if at <= now {
            self.make_due(key, at);
        } else {
            self.set(key, Phase::Later(at));
            self.timers.insert((at, key));
        }
    }

    fn make_due(&mut self, key: u64, at: Instant) {
        self.set(key, Phase::Due(at));
        let namespace = self.objects[&key].object.namespace().unwrap_or_default();
        let namespace = namespace.to_owned();
        match self.lanes.get_mut(&namespace) {
            Some(lane) => lane.push_back(key),
            None => {
                self.lanes.insert(namespace.clone(), VecDeque::from([key]));
                self.turns.push_back(namespace);
            }
        }
    }

    fn fall_due(&mut self, now: Instant) {
        while let Some(&(at, key)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            self.make_due(key, at);
        }
    }

    fn take(&mut self, now: Instant) -> Option<Released> {
        while let Some(namespace) = self.turns.pop_front() {
            let lane = self
                .lanes
                .get_mut(&namespace)
                .expect("a namespace in turn has a lane");
            let mut taken = None;
            while let Some(key) = lane.pop_front() {
                if let Some(object) = self.objects.get_mut(&key)
                    && let Phase::Due(at) = object.phase
                {
                    object.phase = Phase::Running {
                        since: now,
                        again: None,
                        left: false,
                    };
                    taken = Some(Released {
                        object: object.object.clone(),
                        waited: now.saturating_duration_since(at),
                    });
                    break;
                }
            }
            if lane.is_empty() {
                self.lanes.remove(&namespace);
            } else {
                self.turns.push_back(namespace);
            }
            if taken.is_some() {
                self.running += 1;
                return taken;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> u64 {
        crate::workqueue::key(Some("ns"), name)
    }

    fn released(gate: &Gate) -> Option<String> {
        gate.next(Instant::now())
            .ok()
            .map(|r| r.object.name().to_owned())
    }

    /// One worker, 50 objects of namespace `a` due, then one of `b`: `b` is second, not 51st.
    #[tokio::test(start_paused = true)]
    async fn a_namespace_waits_one_turn_of_each_other_namespace_not_for_their_backlog() {
        let gate = Gate::new(Some(1));
        let now = Instant::now();
        for i in 0..50 {
            let name = format!("a-{i}");
            gate.add(
                crate::workqueue::key(Some("a"), &name),
                Some("a"),
                &name,
                now,
            );
        }
        gate.add(
            crate::workqueue::key(Some("b"), "b-0"),
            Some("b"),
            "b-0",
            now,
        );
        let mut order = Vec::new();
        while let Ok(r) = gate.next(Instant::now()) {
            assert_eq!(gate.next(Instant::now()), Err(None), "one worker");
            let key = crate::workqueue::key(r.object.namespace(), r.object.name());
            assert!(gate.finish(key, None, "", None).is_some());
            order.push(r.object.name().to_owned());
        }
        assert_eq!(order[..3], ["a-0", "b-0", "a-1"], "{order:?}");
        assert_eq!(order.len(), 51);
        assert!(gate.lock().objects.is_empty(), "nothing is kept once done");
    }

    /// Requeues wait for their time, a trigger makes an object due at once, and a trigger seen
    /// while the object runs makes it due again when it is done, not twice at once.
    #[tokio::test(start_paused = true)]
    async fn objects_fall_due_at_the_earliest_time_asked_and_run_one_at_a_time() {
        let gate = Gate::new(None);
        let t0 = Instant::now();
        gate.add(
            key("later"),
            Some("ns"),
            "later",
            t0 + Duration::from_secs(60),
        );
        gate.add(
            key("later"),
            Some("ns"),
            "later",
            t0 + Duration::from_secs(90),
        );
        assert_eq!(
            gate.next(t0),
            Err(Some(t0 + Duration::from_secs(60))),
            "the earlier of two requeues"
        );
        gate.add(key("later"), Some("ns"), "later", t0);
        assert_eq!(released(&gate).as_deref(), Some("later"), "a trigger: now");
        gate.add(key("later"), Some("ns"), "later", t0);
        assert_eq!(released(&gate), None, "not while it runs");
        tokio::time::advance(Duration::from_secs(2)).await;
        let ran = gate.finish(key("later"), None, "", Some(t0 + Duration::from_secs(60)));
        assert_eq!(ran, Some(Duration::from_secs(2)));
        assert_eq!(
            released(&gate).as_deref(),
            Some("later"),
            "the trigger seen while it ran comes before its requeue"
        );
        gate.finish(key("later"), None, "", Some(t0 + Duration::from_secs(60)));
        assert_eq!(gate.readings(Instant::now()).depth, 0);
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(gate.readings(Instant::now()).depth, 1);
        assert_eq!(released(&gate).as_deref(), Some("later"));
    }

    /// An object deleted while due or running leaves, and its worker goes to the next.
    #[tokio::test(start_paused = true)]
    async fn a_gone_object_leaves_and_frees_its_worker() {
        let gate = Gate::new(Some(1));
        let now = Instant::now();
        for name in ["a", "b", "c"] {
            gate.add(key(name), Some("ns"), name, now);
        }
        assert_eq!(released(&gate).as_deref(), Some("a"));
        gate.gone(key("b"));
        gate.gone(key("a"));
        assert_eq!(released(&gate).as_deref(), Some("c"));
        assert_eq!(gate.readings(now).depth, 0);
        gate.gone(key("c"));
        assert!(gate.lock().objects.is_empty());
        assert_eq!(gate.lock().running, 0);
    }

    /// A deleted object leaves at once, not when its requeue falls due; one deleted while it
    /// runs keeps its worker until its reconcile ends, and asks for nothing after it.
    #[tokio::test(start_paused = true)]
    async fn a_deleted_object_leaves_at_once_and_a_running_one_when_done() {
        let gate = Gate::new(Some(1));
        let now = Instant::now();
        gate.add(
            key("later"),
            Some("ns"),
            "later",
            now + Duration::from_secs(3600),
        );
        gate.add(key("running"), Some("ns"), "running", now);
        gate.add(key("due"), Some("ns"), "due", now);
        assert_eq!(released(&gate).as_deref(), Some("running"));
        gate.left(key("later"));
        gate.left(key("due"));
        gate.left(key("running"));
        assert_eq!(released(&gate), None, "its worker is still busy");
        gate.add(key("running"), Some("ns"), "running", now);
        gate.left(key("running"));
        gate.finish(
            key("running"),
            None,
            "",
            Some(now + Duration::from_secs(60)),
        );
        let state = gate.lock();
        assert!(state.objects.is_empty() && state.timers.is_empty());
        assert_eq!(state.running, 0);
    }

    /// `release` waits for a worker or a timer and hands the object over as soon as either.
    #[tokio::test(start_paused = true)]
    async fn release_waits_for_a_free_worker_and_for_timers() {
        let gate = std::sync::Arc::new(Gate::new(Some(1)));
        let t0 = Instant::now();
        gate.add(key("a"), Some("ns"), "a", t0);
        gate.add(key("b"), Some("ns"), "b", t0 + Duration::from_secs(5));
        assert_eq!(gate.release().await.object.name(), "a");
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.release().await }
        });
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(
            !waiting.is_finished(),
            "b is due but the only worker is busy"
        );
        gate.finish(key("a"), None, "", None);
        let b = waiting.await.unwrap();
        assert_eq!((b.object.name(), b.waited), ("b", Duration::from_secs(5)));
    }
}
