//! How many reconciles of one kind run at once, and which object goes next. A worker that
//! comes free goes to the next namespace in turn that has objects waiting, and there to the one
//! that has waited longest. So one namespace's backlog (10k ExternalSecrets created at once)
//! holds up a new object in another namespace for one turn of each namespace waiting, not for
//! the whole backlog, as a single first-come queue (ESO's) would.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

pub(crate) struct Workers {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    free: usize,
    /// Namespaces with objects waiting, in the order they get their next worker
    /// (cluster-scoped objects wait under "").
    turns: VecDeque<String>,
    waiting: HashMap<String, VecDeque<oneshot::Sender<Worker>>>,
}

/// A worker held; handed to the next object waiting when dropped.
pub(crate) struct Worker {
    workers: Arc<Workers>,
}

impl Workers {
    pub(crate) fn new(n: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                free: n,
                ..State::default()
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("workers poisoned")
    }

    /// A worker for an object of `namespace`, when its turn comes.
    pub(crate) async fn acquire(self: &Arc<Self>, namespace: &str) -> Worker {
        let handed = {
            let mut state = self.lock();
            // Nobody waits while a worker is free: a freed worker goes to a waiting object first.
            if state.free > 0 {
                state.free -= 1;
                return Worker {
                    workers: self.clone(),
                };
            }
            let (to, handed) = oneshot::channel();
            if !state.waiting.contains_key(namespace) {
                state.turns.push_back(namespace.to_owned());
            }
            state
                .waiting
                .entry(namespace.to_owned())
                .or_default()
                .push_back(to);
            handed
        };
        // The sender lives in `waiting` until it hands a worker over.
        handed.await.expect("a waiting object is handed a worker")
    }

    fn release(self: &Arc<Self>) {
        let next = {
            let mut state = self.lock();
            let Some(namespace) = state.turns.pop_front() else {
                state.free += 1;
                return;
            };
            let lane = state
                .waiting
                .get_mut(&namespace)
                .expect("a namespace in turn has objects waiting");
            let next = lane.pop_front().expect("a lane in turn is not empty");
            if lane.is_empty() {
                state.waiting.remove(&namespace);
            } else {
                state.turns.push_back(namespace);
            }
            next
        };
        // An object that stopped waiting (its reconcile was dropped) gives the worker back to
        // the next, through this worker's drop.
        let _ = next.send(Worker {
            workers: self.clone(),
        });
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.workers.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// One worker, 50 objects of namespace `a` waiting, then one of `b`: `b` is second, not 51st.
    #[tokio::test(start_paused = true)]
    async fn a_namespace_waits_one_turn_of_each_other_namespace_not_for_their_backlog() {
        let workers = Workers::new(1);
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = workers.acquire("a").await;
        let mut runs = Vec::new();
        let objects = (0..50)
            .map(|i| ("a", format!("a-{i}")))
            .chain([("b", "b-0".to_owned())]);
        for (namespace, name) in objects {
            let (workers, order) = (workers.clone(), order.clone());
            runs.push(tokio::spawn(async move {
                let _worker = workers.acquire(namespace).await;
                order.lock().unwrap().push(name);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }));
            tokio::task::yield_now().await;
        }
        drop(first);
        for run in runs {
            run.await.unwrap();
        }
        let order = order.lock().unwrap();
        assert_eq!(order[..3], ["a-0", "b-0", "a-1"], "{order:?}");
        assert_eq!(order.len(), 51);
        assert_eq!(workers.lock().free, 1, "the worker is free again");
    }

    /// An object that stops waiting does not keep the worker from the next.
    #[tokio::test(start_paused = true)]
    async fn a_worker_handed_to_an_object_that_left_goes_to_the_next() {
        let workers = Workers::new(1);
        let held = workers.acquire("a").await;
        let left = tokio::spawn({
            let workers = workers.clone();
            async move { workers.acquire("a").await }
        });
        tokio::task::yield_now().await;
        let next = tokio::spawn({
            let workers = workers.clone();
            async move {
                let _worker = workers.acquire("b").await;
            }
        });
        tokio::task::yield_now().await;
        left.abort();
        drop(held);
        tokio::time::timeout(Duration::from_secs(1), next)
            .await
            .expect("the next object got the worker")
            .unwrap();
        assert_eq!(workers.lock().free, 1);
    }
}
