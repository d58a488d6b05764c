//! The resourceVersion of every Secret this operator manages, from the watch of their metadata
//! that wakes ExternalSecrets anyway. An ExternalSecret whose status recorded its target at the
//! version the watch still shows, and that is not due for a refresh, needs no read of the Secret:
//! after a restart, every ExternalSecret in sync is checked without a request.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use tokio::sync::watch;
use tokio::time::Instant;

/// How long after the operator starts an ExternalSecret waits for the first list of Secrets
/// rather than reading its target: the list may hang, and then reads are what ESO does anyway.
/// A watch that fails ends the wait at once (`watch_failed`). The wait holds no worker: an
/// ExternalSecret that needs the list is set aside and woken when the list is in
/// (`first_listed`), so that the others are served meanwhile.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(60);

type Key = (String, String);

/// A Secret as the maps know it, `namespace/name` in one block: a pair of strings and a
/// resourceVersion string were three blocks per managed Secret (heap profile, hack/README.md).
#[derive(Clone, PartialEq, Eq, Hash)]
struct Target(Box<str>);

impl Target {
    fn new(namespace: &str, name: &str) -> Self {
        Target(format!("{namespace}/{name}").into())
    }
}

/// A resourceVersion: opaque to clients, but etcd's revisions are numbers, kept as one.
#[derive(Clone, PartialEq, Eq)]
enum Version {
    Number(u64),
    Text(Box<str>),
}

impl Version {
    fn new(resource_version: &str) -> Self {
        // Only a number written as a number is one: "007" or "+7" must not equal "7" (the
        // parse alone takes both), and this runs for every Secret event and reconcile, so
        // no printing back to compare.
        let canonical = resource_version.bytes().all(|b| b.is_ascii_digit())
            && (resource_version == "0" || !resource_version.starts_with('0'));
        match resource_version.parse::<u64>() {
            Ok(n) if canonical => Version::Number(n),
            _ => Version::Text(resource_version.into()),
        }
    }
}

#[derive(Default)]
struct State {
    versions: HashMap<Target, Version>,
    /// Versions a reconcile read and found as the ExternalSecret wants, though its status
    /// recorded an older one (someone else changed what does not matter, such as an
    /// annotation of theirs, while the operator was down): not read again at each reconcile.
    confirmed: HashMap<Target, Version>,
    /// During a re-list: the Secrets it held so far; the others were deleted meanwhile.
    relisted: Option<HashSet<Target>>,
    /// ExternalSecrets (namespace, name) set aside until the first list is in.
    deferred: HashSet<Key>,
    /// The first list is in, or was waited for long enough: nothing is set aside any more.
    waited: bool,
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

fn key(secret: &PartialObjectMeta<Secret>) -> Target {
    Target::new(
        secret.metadata.namespace.as_deref().unwrap_or_default(),
        secret.metadata.name.as_deref().unwrap_or_default(),
    )
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
                match &secret.metadata.resource_version {
                    Some(rv) => state.versions.insert(key, Version::new(rv)),
                    None => state.versions.remove(&key),
                };
            }
            watcher::Event::Delete(secret) => {
                let key = key(secret);
                state.versions.remove(&key);
                state.confirmed.remove(&key);
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
        state
            .confirmed
            .insert(Target::new(namespace, name), Version::new(resource_version));
    }

    /// Whether the Secret `namespace/name` is still at `resource_version`, as far as the watch
    /// knows; `None` right after a start, until the first list is in (or the wait for it is
    /// over): the ExternalSecret `waiting` (namespace, name) is then woken by `first_listed`.
    pub fn unchanged_since(
        &self,
        waiting: (&str, &str),
        namespace: &str,
        name: &str,
        resource_version: &str,
    ) -> Option<bool> {
        let mut state = self.state.lock().expect("target versions poisoned");
        if !state.waited && !self.first_list_over() {
            state
                .deferred
                .insert((waiting.0.to_owned(), waiting.1.to_owned()));
            return None;
        }
        let (key, wanted) = (Target::new(namespace, name), Version::new(resource_version));
        Some(
            state.versions.get(&key).is_some_and(|rv| {
                *rv == wanted || state.confirmed.get(&key).is_some_and(|c| c == rv)
            }),
        )
    }

    /// Whether the watch, its first list in, knows of no Secret `namespace/name` this operator
    /// manages: then one is unlikely to exist (it may still, made by someone else).
    pub fn unknown(&self, namespace: &str, name: &str) -> bool {
        *self.listed.borrow()
            && !self
                .state
                .lock()
                .expect("target versions poisoned")
                .versions
                .contains_key(&Target::new(namespace, name))
    }

    fn first_list_over(&self) -> bool {
        *self.listed.borrow() || Instant::now() >= self.started + FIRST_LIST_WAIT
    }

    /// The ExternalSecrets `unchanged_since` set aside, once the first list is in or the wait
    /// for it is over; then nothing more.
    pub fn first_listed(&self) -> impl futures::Stream<Item = Key> + Send + 'static {
        let this = self.clone();
        let woken = async move {
            let mut listed = this.listed.subscribe();
            let _ =
                tokio::time::timeout_at(this.started + FIRST_LIST_WAIT, listed.wait_for(|l| *l))
                    .await;
            let mut state = this.state.lock().expect("target versions poisoned");
            state.waited = true;
            futures::stream::iter(std::mem::take(&mut state.deferred))
        };
        futures::stream::once(woken)
            .flatten()
            .chain(futures::stream::pending())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_number_written_as_one_is_kept_as_a_number() {
        for (rv, number) in [("0", 0), ("7", 7), ("18446744073709551615", u64::MAX)] {
            assert!(Version::new(rv) == Version::Number(number), "{rv}");
        }
        for rv in ["007", "+7", "", "7a", "18446744073709551616", "-1"] {
            assert!(Version::new(rv) == Version::Text(rv.into()), "{rv}");
        }
    }

    fn secret(name: &str, rv: &str) -> PartialObjectMeta<Secret> {
        let mut s = PartialObjectMeta::<Secret>::default();
        s.metadata.name = Some(name.into());
        s.metadata.namespace = Some("n".into());
        s.metadata.resource_version = Some(rv.into());
        s
    }

    /// `unchanged_since` for the ExternalSecret n/es.
    fn at(versions: &TargetVersions, namespace: &str, name: &str, rv: &str) -> Option<bool> {
        versions.unchanged_since(("n", "es"), namespace, name, rv)
    }

    fn listed(versions: &TargetVersions, secrets: &[(&str, &str)]) {
        versions.apply(&watcher::Event::Init);
        for (name, rv) in secrets {
            versions.apply(&watcher::Event::InitApply(secret(name, rv)));
        }
        versions.apply(&watcher::Event::InitDone);
    }

    #[tokio::test]
    async fn follows_the_watch_and_forgets_what_a_relist_lost() {
        let versions = TargetVersions::default();
        listed(&versions, &[("a", "1"), ("b", "2")]);
        assert_eq!(at(&versions, "n", "a", "1"), Some(true));
        assert_eq!(
            at(&versions, "n", "a", "0"),
            Some(false),
            "an older version"
        );
        assert_eq!(
            at(&versions, "m", "a", "1"),
            Some(false),
            "another namespace"
        );

        versions.apply(&watcher::Event::Apply(secret("a", "3")));
        assert_eq!(
            at(&versions, "n", "a", "1"),
            Some(false),
            "changed by someone"
        );
        versions.apply(&watcher::Event::Delete(secret("a", "3")));
        assert_eq!(at(&versions, "n", "a", "3"), Some(false), "deleted");
        assert!(versions.unknown("n", "a"), "deleted");
        assert!(!versions.unknown("n", "b"));

        // The watch was down while b was deleted: the re-list no longer holds it.
        versions.apply(&watcher::Event::Init);
        versions.apply(&watcher::Event::InitApply(secret("c", "4")));
        assert_eq!(
            at(&versions, "n", "b", "2"),
            Some(true),
            "kept until the re-list is complete"
        );
        versions.apply(&watcher::Event::InitDone);
        assert_eq!(at(&versions, "n", "b", "2"), Some(false));
        assert_eq!(at(&versions, "n", "c", "4"), Some(true));
    }

    #[tokio::test]
    async fn a_version_read_and_found_right_is_not_read_again() {
        let versions = TargetVersions::default();
        listed(&versions, &[("a", "5")]);
        assert_eq!(at(&versions, "n", "a", "1"), Some(false), "changed since 1");
        versions.confirm("n", "a", "5");
        assert_eq!(at(&versions, "n", "a", "1"), Some(true), "5 was confirmed");
        versions.apply(&watcher::Event::Apply(secret("a", "6")));
        assert_eq!(
            at(&versions, "n", "a", "1"),
            Some(false),
            "changed after the confirmation"
        );
        versions.confirm("n", "a", "6");
        versions.apply(&watcher::Event::Delete(secret("a", "6")));
        versions.apply(&watcher::Event::Apply(secret("a", "6")));
        assert_eq!(
            at(&versions, "n", "a", "1"),
            Some(false),
            "a confirmation ends with the Secret"
        );
    }

    /// A first list that hangs holds no worker: the ExternalSecrets that need it are answered
    /// at once (set aside), and woken when it is in.
    #[tokio::test(start_paused = true)]
    async fn sets_aside_until_the_first_list_and_wakes_them() {
        let versions = TargetVersions::default();
        let mut woken = Box::pin(versions.first_listed());
        let started = Instant::now();
        assert_eq!(versions.unchanged_since(("n", "x"), "n", "a", "1"), None);
        assert_eq!(versions.unchanged_since(("n", "y"), "n", "b", "1"), None);
        assert_eq!(versions.unchanged_since(("n", "x"), "n", "a", "1"), None);
        assert_eq!(started.elapsed(), Duration::ZERO, "answered without a wait");
        assert!(
            !versions.unknown("n", "a"),
            "nothing is known before the list"
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(
            futures::poll!(woken.next()).is_pending(),
            "woken before the list is in"
        );

        listed(&versions, &[("a", "1")]);
        let mut set_aside = vec![woken.next().await.unwrap(), woken.next().await.unwrap()];
        set_aside.sort();
        assert_eq!(
            set_aside,
            [("n".into(), "x".into()), ("n".into(), "y".into())],
            "each once"
        );
        assert!(futures::poll!(woken.next()).is_pending());
        assert_eq!(
            at(&versions, "n", "a", "1"),
            Some(true),
            "the listed version"
        );
        assert_eq!(
            at(&versions, "n", "b", "1"),
            Some(false),
            "not listed: read"
        );
        assert!(versions.unknown("n", "b"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_watch_ends_the_wait_and_a_hanging_list_is_not_waited_for_forever() {
        let failing = TargetVersions::default();
        failing.apply(&watcher::Event::Init);
        failing.apply(&watcher::Event::InitApply(secret("a", "1")));
        failing.watch_failed();
        assert_eq!(at(&failing, "n", "a", "1"), Some(true), "listed so far");
        assert_eq!(at(&failing, "n", "b", "1"), Some(false), "read instead");

        let never = TargetVersions::default();
        let mut woken = Box::pin(never.first_listed());
        assert_eq!(at(&never, "n", "a", "1"), None);
        let started = Instant::now();
        assert_eq!(woken.next().await, Some(("n".into(), "es".into())));
        assert_eq!(
            started.elapsed(),
            FIRST_LIST_WAIT,
            "woken when the wait is over"
        );
        assert_eq!(at(&never, "n", "a", "1"), Some(false), "read from now on");
        assert!(
            !never.unknown("n", "a"),
            "never taken as absent without a list"
        );
    }
}
