//! The resourceVersion of every Secret this operator manages, from the watch of their metadata
//! that wakes ExternalSecrets anyway. An ExternalSecret whose status recorded its target at the
//! version the watch still shows, and that is not due for a refresh, needs no read of the Secret:
//! after a restart, every ExternalSecret in sync is checked without a request.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use tokio::sync::watch;
use tokio::time::Instant;

/// How long after the operator starts an ExternalSecret waits for the first list of Secrets
/// rather than reading its target: the list may hang, and then reads are what ESO does anyway.
/// A watch that fails ends the wait at once (`watch_failed`), so that the workers are not held.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(60);

type Key = (String, String);

#[derive(Default)]
struct State {
    versions: HashMap<Key, String>,
    /// Versions a reconcile read and found as the ExternalSecret wants, though its status
    /// recorded an older one (someone else changed what does not matter, such as an
    /// annotation of theirs, while the operator was down): not read again at each reconcile.
    confirmed: HashMap<Key, String>,
    /// During a re-list: the Secrets it held so far; the others were deleted meanwhile.
    relisted: Option<HashSet<Key>>,
}

#[derive(Clone)]
pub struct TargetVersions {
    state: Arc<Mutex<State>>,
    listed: watch::Sender<bool>,
    started: Instant,
}

impl Default for TargetVersions {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            listed: watch::Sender::new(false),
            started: Instant::now(),
        }
    }
}

fn key(secret: &PartialObjectMeta<Secret>) -> Key {
    (secret.namespace().unwrap_or_default(), secret.name_any())
}

impl TargetVersions {
    /// Takes in one event of the watch.
    pub(crate) fn apply(&self, event: &watcher::Event<PartialObjectMeta<Secret>>) {
        let mut state = self.state.lock().expect("target versions poisoned");
        match event {
            watcher::Event::Apply(secret) | watcher::Event::InitApply(secret) => {
                let key = key(secret);
                if let (watcher::Event::InitApply(_), Some(relisted)) = (event, &mut state.relisted)
                {
                    relisted.insert(key.clone());
                }
                match secret.resource_version() {
                    Some(rv) => state.versions.insert(key, rv),
                    None => state.versions.remove(&key),
                };
            }
            watcher::Event::Delete(secret) => {
                state.versions.remove(&key(secret));
                state.confirmed.remove(&key(secret));
            }
            watcher::Event::Init => state.relisted = Some(HashSet::new()),
            watcher::Event::InitDone => {
                if let Some(relisted) = state.relisted.take() {
                    state.versions.retain(|k, _| relisted.contains(k));
                    state.confirmed.retain(|k, _| relisted.contains(k));
                }
                drop(state);
                self.listed.send_replace(true);
            }
        }
    }

    /// The watch answered an error: until a list completes, the Secrets it misses are read
    /// instead of waited for.
    pub(crate) fn watch_failed(&self) {
        self.listed
            .send_if_modified(|listed| !std::mem::replace(listed, true));
    }

    /// The Secret `namespace/name` was read at `resource_version` and is as its ExternalSecret
    /// wants it.
    pub fn confirm(&self, namespace: &str, name: &str, resource_version: &str) {
        let mut state = self.state.lock().expect("target versions poisoned");
        state.confirmed.insert(
            (namespace.to_owned(), name.to_owned()),
            resource_version.to_owned(),
        );
    }

    /// Whether the Secret `namespace/name` is still at `resource_version`, as far as the watch
    /// knows; right after a start, once the first list is in (or the wait for it is over).
    pub async fn unchanged_since(
        &self,
        namespace: &str,
        name: &str,
        resource_version: &str,
    ) -> bool {
        let mut listed = self.listed.subscribe();
        let _ =
            tokio::time::timeout_at(self.started + FIRST_LIST_WAIT, listed.wait_for(|l| *l)).await;
        let state = self.state.lock().expect("target versions poisoned");
        let key = (namespace.to_owned(), name.to_owned());
        state.versions.get(&key).is_some_and(|rv| {
            rv == resource_version || state.confirmed.get(&key).is_some_and(|c| c == rv)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str, rv: &str) -> PartialObjectMeta<Secret> {
        let mut s = PartialObjectMeta::<Secret>::default();
        s.metadata.name = Some(name.into());
        s.metadata.namespace = Some("n".into());
        s.metadata.resource_version = Some(rv.into());
        s
    }

    #[tokio::test]
    async fn follows_the_watch_and_forgets_what_a_relist_lost() {
        let versions = TargetVersions::default();
        versions.apply(&watcher::Event::Init);
        versions.apply(&watcher::Event::InitApply(secret("a", "1")));
        versions.apply(&watcher::Event::InitApply(secret("b", "2")));
        versions.apply(&watcher::Event::InitDone);
        assert!(versions.unchanged_since("n", "a", "1").await);
        assert!(
            !versions.unchanged_since("n", "a", "0").await,
            "an older version"
        );
        assert!(
            !versions.unchanged_since("m", "a", "1").await,
            "another namespace"
        );

        versions.apply(&watcher::Event::Apply(secret("a", "3")));
        assert!(
            !versions.unchanged_since("n", "a", "1").await,
            "changed by someone"
        );
        versions.apply(&watcher::Event::Delete(secret("a", "3")));
        assert!(!versions.unchanged_since("n", "a", "3").await, "deleted");

        // The watch was down while b was deleted: the re-list no longer holds it.
        versions.apply(&watcher::Event::Init);
        versions.apply(&watcher::Event::InitApply(secret("c", "4")));
        assert!(
            versions.unchanged_since("n", "b", "2").await,
            "kept until the re-list is complete"
        );
        versions.apply(&watcher::Event::InitDone);
        assert!(!versions.unchanged_since("n", "b", "2").await);
        assert!(versions.unchanged_since("n", "c", "4").await);
    }

    #[tokio::test]
    async fn a_version_read_and_found_right_is_not_read_again() {
        let versions = TargetVersions::default();
        versions.apply(&watcher::Event::Init);
        versions.apply(&watcher::Event::InitApply(secret("a", "5")));
        versions.apply(&watcher::Event::InitDone);
        assert!(
            !versions.unchanged_since("n", "a", "1").await,
            "changed since 1"
        );
        versions.confirm("n", "a", "5");
        assert!(
            versions.unchanged_since("n", "a", "1").await,
            "5 was confirmed"
        );
        versions.apply(&watcher::Event::Apply(secret("a", "6")));
        assert!(
            !versions.unchanged_since("n", "a", "1").await,
            "changed after the confirmation"
        );
        versions.confirm("n", "a", "6");
        versions.apply(&watcher::Event::Delete(secret("a", "6")));
        versions.apply(&watcher::Event::Apply(secret("a", "6")));
        assert!(
            !versions.unchanged_since("n", "a", "1").await,
            "a confirmation ends with the Secret"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn waits_for_the_first_list_but_not_forever() {
        let versions = TargetVersions::default();
        let waiting = tokio::spawn({
            let versions = versions.clone();
            async move { versions.unchanged_since("n", "a", "1").await }
        });
        tokio::task::yield_now().await;
        versions.apply(&watcher::Event::Init);
        versions.apply(&watcher::Event::InitApply(secret("a", "1")));
        assert!(!waiting.is_finished(), "answered before the list was in");
        versions.apply(&watcher::Event::InitDone);
        assert!(waiting.await.unwrap(), "the listed version");

        let failing = TargetVersions::default();
        failing.apply(&watcher::Event::Init);
        failing.apply(&watcher::Event::InitApply(secret("a", "1")));
        failing.watch_failed();
        let started = Instant::now();
        assert!(
            failing.unchanged_since("n", "a", "1").await,
            "listed so far"
        );
        assert!(
            !failing.unchanged_since("n", "b", "1").await,
            "read instead"
        );
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "no wait once the watch failed"
        );

        let never = TargetVersions::default();
        let started = Instant::now();
        assert!(!never.unchanged_since("n", "a", "1").await);
        assert!(started.elapsed() >= FIRST_LIST_WAIT);
        let again = Instant::now();
        assert!(!never.unchanged_since("n", "a", "1").await);
        assert_eq!(
            again.elapsed(),
            Duration::ZERO,
            "waits once, at the start only"
        );
    }
}
