//! What makes a PushSecret reconcile: its own spec, a change of its source Secrets (by name or
//! by label), and a store it pushes to turning Ready or being deleted. Also what a PushSecret
//! change tells the store controllers: which stores' finalizers to look at again.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use api::push_secret::{PushSecret, PushSecretSecret};
use clientmanager::StoreKind;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::core::{PartialObjectMeta, Selector, SelectorExt};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use super::Watched;
use super::plan::{self, Uses};
use crate::cluster::ClusterChildren;
use crate::context::{Context, ReadyStore};
use crate::index::{self, SharedIndex};
use crate::outcome::{after_reconcile, error_policy};
use crate::watch::{FirstList, forgetting_departed, once_needed, scoped};

/// `cache` is filled by this controller's watch; the stores read it.
pub(crate) fn controller<F>(
    ctx: Arc<Context>,
    cache: reflector::store::Writer<Watched>,
    listed: FirstList,
    ready_stores: UnboundedReceiver<ReadyStore>,
    store_users: Vec<UnboundedSender<Vec<Uses>>>,
    cluster_children: Arc<ClusterChildren>,
    shutdown: F,
) -> impl Future<Output = ()>
where
    F: Future<Output = ()> + Send + Sync + 'static,
{
    let namespace = ctx.settings.namespace.clone();
    let client = ctx.client.clone();
    let (ps_reader, ps_writer) = (cache.as_reader(), cache);
    let sources = SharedIndex::<Watched, Source>::default();
    let stores = StoreUsers::default();
    let (needed, needed_by_sources) = tokio::sync::watch::channel(false);
    cluster_children.push.use_cache(ps_reader.clone());
    let queue = ctx.workqueue("pushsecret");
    let ps_stream = watcher(
        scoped::<Watched>(&client, namespace.as_deref()),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(|ps| ps.managed_fields_mut().clear())
    .reflect(ps_writer)
    .inspect_ok(move |e| listed.observe(e))
    .inspect_ok(move |e| cluster_children.push.observe(e))
    .inspect(store_use_changes(store_users))
    .inspect_ok(index::kept(sources.clone(), sources_of))
    .inspect_ok(index::kept(stores.clone(), stores_used))
    .inspect_ok(index::needed_once_filled(sources.clone(), needed));
    // Every Secret's metadata streams by (nothing is cached): a changed source is pushed at
    // once rather than at the next refresh. Only from the first PushSecret on; its list
    // reconciles the PushSecrets of every source, as at a start.
    let secrets = once_needed(needed_by_sources, move || {
        watcher(
            scoped::<PartialObjectMeta<Secret>>(&client, namespace.as_deref()),
            watcher::Config::default(),
        )
        .default_backoff()
        .touched_objects()
    });
    let ps_by_source = ps_reader.clone();
    let woken = wakes(ps_reader.clone(), stores.clone(), ready_stores);
    queue
        .controller(ps_stream, ps_reader.clone(), (), {
            let ctx = ctx.clone();
            move |ps| departed(&ctx, &ps)
        })
        .watches_stream(
            secrets,
            queue.mapper(move |secret: PartialObjectMeta<Secret>| {
                reading(&ps_by_source, &sources, &secret)
            }),
        )
        .reconcile_on(queue.triggers(woken))
        .graceful_shutdown_on(shutdown)
        .run(
            queue.reconciler(move |watched: Arc<Watched>, ctx: Arc<Context>| {
                let object = ObjectRef::from(watched.as_ref());
                let ps = watched.0.clone().map(Arc::new);
                let held = ps_reader.clone();
                async move {
                    let reconcile = async {
                        match ps {
                            Ok(ps) => super::reconcile(ps, ctx.clone()).await,
                            Err(invalid) => super::report_invalid(&ctx, invalid).await,
                        }
                    };
                    forgetting_departed(&held, object, reconcile, |ps| departed(&ctx, &ps)).await
                }
            }),
            queue.error_policy(error_policy("pushsecret")),
            ctx.clone(),
        )
        .for_each(after_reconcile(ctx, queue))
}

/// The PushSecrets whose source `secret` is: those naming it and those selecting in its
/// namespace whose selector matches it, found through `sources` rather than by a scan.
fn reading(
    reader: &Store<Watched>,
    sources: &SharedIndex<Watched, Source>,
    secret: &PartialObjectMeta<Secret>,
) -> Vec<ObjectRef<Watched>> {
    let ns = secret.namespace().unwrap_or_default();
    let candidates = {
        let index = sources.lock().expect("watch index poisoned");
        let mut candidates = index.get(&Source::Named(ns.clone(), secret.name_any()));
        candidates.extend(index.get(&Source::Selecting(ns)));
        candidates
    };
    candidates
        .into_iter()
        .filter(|candidate| {
            reader.get(candidate).is_some_and(|ps| {
                ps.0.as_ref()
                    .ok()
                    .and_then(|ps| ps.spec.selector.secret.as_ref())
                    .is_some_and(|s| is_source(s, secret))
            })
        })
        .collect()
}

/// Forgets what is kept of a PushSecret that left the watch.
fn departed(ctx: &Context, ps: &ObjectRef<Watched>) {
    ctx.status.forget(ps.extra.uid.as_deref());
    let m = &ctx.metrics;
    crate::metrics::forget(
        &m.ps_condition,
        &m.ps_reconcile_duration,
        &ps.name,
        ps.namespace.as_deref().unwrap_or_default(),
    );
}

/// What a PushSecret is found by when a Secret changes: the name of its source, or, for a
/// label selector, its namespace (the labels are matched then).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Source {
    Named(String, String),
    Selecting(String),
}

fn sources_of(ps: &Watched) -> Vec<Source> {
    let namespace = ps.namespace().unwrap_or_default();
    let Some(selector) =
        ps.0.as_ref()
            .ok()
            .and_then(|ps| ps.spec.selector.secret.as_ref())
    else {
        return Vec::new();
    };
    match (&selector.name, &selector.selector) {
        (Some(name), _) if !name.is_empty() => vec![Source::Named(namespace, name.clone())],
        (_, Some(_)) => vec![Source::Selecting(namespace)],
        _ => Vec::new(),
    }
}

/// Whether `secret` is (or, by its labels, is one of) the source Secrets `selector` names.
/// A Secret that stops matching is no longer seen here; the next refresh drops it.
fn is_source(selector: &PushSecretSecret, secret: &PartialObjectMeta<Secret>) -> bool {
    match (&selector.name, &selector.selector) {
        (Some(name), _) if !name.is_empty() => *name == secret.name_any(),
        (_, Some(labels)) => {
            Selector::try_from(labels.clone()).is_ok_and(|s| s.matches(secret.labels()))
        }
        _ => false,
    }
}

/// Watches the PushSecret stream for changes of what decides the stores a PushSecret uses
/// (`plan::Uses`), and sends each change, before and after, to the store controllers: they add or
/// remove their finalizer. Status writes that change nothing of it (a refresh) send nothing, so a
/// PushSecret's refresh does not revalidate its stores.
fn store_use_changes(
    store_users: Vec<UnboundedSender<Vec<Uses>>>,
) -> impl FnMut(&Result<watcher::Event<Watched>, watcher::Error>) {
    let mut known: HashMap<ObjectRef<Watched>, Uses> = HashMap::new();
    // During a re-list: what it held so far. A PushSecret deleted while the watch was down
    // gets no Delete event; without this its stores kept its finalizer for ever.
    let mut relisted: Option<HashSet<ObjectRef<Watched>>> = None;
    move |event| {
        let changed = match event {
            Ok(watcher::Event::Init) => {
                relisted = Some(HashSet::new());
                return;
            }
            Ok(watcher::Event::InitDone) => {
                let Some(relisted) = relisted.take() else {
                    return;
                };
                let gone: Vec<_> = known
                    .keys()
                    .filter(|ps| !relisted.contains(*ps))
                    .cloned()
                    .collect();
                let gone: Vec<_> = gone.iter().filter_map(|ps| known.remove(ps)).collect();
                if gone.is_empty() {
                    return;
                }
                gone
            }
            Ok(watcher::Event::Apply(ps) | watcher::Event::InitApply(ps)) => {
                if let (Some(relisted), Ok(watcher::Event::InitApply(_))) = (&mut relisted, event) {
                    relisted.insert(ObjectRef::from(ps));
                }
                let Ok(valid) = &ps.0 else { return };
                let uses = Uses::of(valid);
                let before = known.insert(ObjectRef::from(ps), uses.clone());
                if before.as_ref() == Some(&uses) {
                    return;
                }
                before.into_iter().chain([uses]).collect()
            }
            Ok(watcher::Event::Delete(ps)) => match known.remove(&ObjectRef::from(ps)) {
                Some(before) => vec![before],
                None => return,
            },
            _ => return,
        };
        for tx in &store_users {
            let _ = tx.unbounded_send(Vec::clone(&changed));
        }
    }
}

/// What a store's event finds PushSecrets by: the store by name (named in `secretStoreRefs`, or
/// holding entries on record: its status key), or a kind of store a label selector picks from;
/// with the namespace of a SecretStore.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum StoreUse {
    Named(String, Option<String>),
    Selecting(StoreKind, Option<String>),
}

/// The PushSecrets by the stores they push to or pushed to.
type StoreUsers = SharedIndex<Watched, StoreUse>;

/// A SecretStore serves its own namespace; a ClusterSecretStore, every one.
fn scope(kind: StoreKind, namespace: Option<&str>) -> Option<String> {
    namespace
        .filter(|_| kind == StoreKind::SecretStore)
        .map(str::to_owned)
}

fn stores_used(ps: &Watched) -> Vec<StoreUse> {
    let Ok(valid) = &ps.0 else {
        return Vec::new();
    };
    let namespace = ps.namespace();
    let uses = Uses::of(valid);
    let named = uses.refs.iter().map(|r| {
        let kind = plan::ref_kind(r);
        let scope = scope(kind, namespace.as_deref());
        match r.name.as_deref().filter(|n| !n.is_empty()) {
            Some(name) => StoreUse::Named(plan::store_key(kind, name), scope),
            None => StoreUse::Selecting(kind, scope),
        }
    });
    let pushed = uses.synced.iter().map(|key| {
        let kind = StoreKind::parse(key.split_once('/').map(|(kind, _)| kind));
        StoreUse::Named(key.clone(), scope(kind, namespace.as_deref()))
    });
    named.chain(pushed).collect()
}

/// The PushSecrets that push to, or pushed to, `store`: those the index names, checked.
fn pushers(
    pushsecrets: &Store<Watched>,
    users: &StoreUsers,
    store: &ReadyStore,
) -> Vec<ObjectRef<Watched>> {
    let scope = scope(store.kind, store.namespace.as_deref());
    let mut candidates = {
        let users = users.lock().expect("watch index poisoned");
        let mut found = users.get(&StoreUse::Named(
            plan::store_key(store.kind, &store.name),
            scope.clone(),
        ));
        found.extend(users.get(&StoreUse::Selecting(store.kind, scope)));
        found
    };
    candidates.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    candidates.dedup();
    candidates
        .into_iter()
        .filter(|candidate| {
            pushsecrets
                .get(candidate)
                .is_some_and(|ps| ps.0.as_ref().is_ok_and(|ps| pushes_to(ps, store)))
        })
        .collect()
}

/// The PushSecrets that push to, or pushed to, a store that turned Ready or is being deleted.
fn wakes(
    pushsecrets: Store<Watched>,
    users: StoreUsers,
    ready_stores: UnboundedReceiver<ReadyStore>,
) -> impl Stream<Item = ObjectRef<Watched>> + Send + 'static {
    ready_stores.flat_map(move |store| futures::stream::iter(pushers(&pushsecrets, &users, &store)))
}

/// Whether `ps` names or selects `store`, or has entries recorded there.
fn pushes_to(ps: &PushSecret, store: &ReadyStore) -> bool {
    let uses = Uses::of(ps);
    let as_planned = plan::Store {
        kind: store.kind,
        name: &store.name,
        labels: &store.labels,
    };
    let namespace = store.namespace.as_deref();
    uses.references(as_planned, namespace) || uses.pushed_to(as_planned, namespace)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kube::core::DeserializeGuard;
    use serde_json::json;

    use super::*;

    fn push_secret(refs: serde_json::Value) -> PushSecret {
        serde_json::from_value(json!({
            "apiVersion": "external-secrets.io/v1alpha1",
            "kind": "PushSecret",
            "metadata": {"name": "p", "namespace": "team-a"},
            "spec": {"secretStoreRefs": refs, "selector": {"secret": {"name": "s"}}, "data": []},
        }))
        .unwrap()
    }

    fn ready(kind: StoreKind, name: &str, namespace: Option<&str>, tier: &str) -> ReadyStore {
        ReadyStore {
            kind,
            name: name.into(),
            namespace: namespace.map(Into::into),
            labels: BTreeMap::from([("tier".to_owned(), tier.to_owned())]),
        }
    }

    #[test]
    fn a_store_that_turns_ready_wakes_the_push_secrets_naming_or_selecting_it() {
        let by_name = push_secret(json!([{"name": "vault"}]));
        assert!(pushes_to(
            &by_name,
            &ready(StoreKind::SecretStore, "vault", Some("team-a"), "x")
        ));
        assert!(!pushes_to(
            &by_name,
            &ready(StoreKind::SecretStore, "vault", Some("team-b"), "x")
        ));
        assert!(!pushes_to(
            &by_name,
            &ready(StoreKind::ClusterSecretStore, "vault", None, "x")
        ));

        let cluster = push_secret(json!([{"name": "shared", "kind": "ClusterSecretStore"}]));
        assert!(pushes_to(
            &cluster,
            &ready(StoreKind::ClusterSecretStore, "shared", None, "x")
        ));

        let selected = push_secret(json!([{"labelSelector": {"matchLabels": {"tier": "prod"}}}]));
        assert!(pushes_to(
            &selected,
            &ready(StoreKind::SecretStore, "a", Some("team-a"), "prod")
        ));
        assert!(!pushes_to(
            &selected,
            &ready(StoreKind::SecretStore, "a", Some("team-a"), "dev")
        ));
    }

    #[test]
    fn a_store_being_deleted_wakes_the_push_secrets_with_entries_there() {
        let mut moved = push_secret(json!([{"name": "new"}]));
        moved.status = serde_json::from_value(json!({
            "syncedPushSecrets": {"SecretStore/old": {"k": {"match": {"remoteRef": {"remoteKey": "k"}}}}},
        }))
        .unwrap();
        assert!(pushes_to(
            &moved,
            &ready(StoreKind::SecretStore, "old", Some("team-a"), "x")
        ));
        assert!(!pushes_to(
            &moved,
            &ready(StoreKind::SecretStore, "old", Some("team-b"), "x")
        ));
    }

    /// A store's event finds the PushSecrets to wake through the index, which follows them as
    /// the watch shows them: by name, by selector, by entries on record, a move to another
    /// store, a delete, and a delete missed while the watch was down.
    #[test]
    fn a_store_finds_its_push_secrets_through_the_index() {
        let (reader, mut writer) = reflector::store::<Watched>();
        let users = StoreUsers::default();
        let mut keep = index::kept(users.clone(), stores_used);
        let mut event = |e: watcher::Event<Watched>| {
            writer.apply_watcher_event(&e);
            keep(&e);
        };
        let named = |name: &str, refs: serde_json::Value| {
            let mut ps = push_secret(refs);
            ps.metadata.name = Some(name.into());
            DeserializeGuard(Ok(ps))
        };
        let by_name = named("by-name", json!([{"name": "vault"}]));
        let selecting = named(
            "selecting",
            json!([{"labelSelector": {"matchLabels": {"tier": "prod"}}}]),
        );
        let mut pushed = push_secret(json!([{"name": "new"}]));
        pushed.metadata.name = Some("pushed".into());
        pushed.status = serde_json::from_value(json!({
            "syncedPushSecrets": {"SecretStore/vault": {"k": {"match": {"remoteRef": {"remoteKey": "k"}}}}},
        }))
        .unwrap();
        let pushed = DeserializeGuard(Ok(pushed));
        let cluster = named(
            "cluster",
            json!([{"name": "vault", "kind": "ClusterSecretStore"}]),
        );
        for ps in [&by_name, &selecting, &pushed, &cluster] {
            event(watcher::Event::Apply(ps.clone()));
        }
        let woken = |kind, name: &str, namespace: Option<&str>, tier: &str| {
            let mut names: Vec<_> = pushers(&reader, &users, &ready(kind, name, namespace, tier))
                .into_iter()
                .map(|r| r.name)
                .collect();
            names.sort();
            names
        };
        assert_eq!(
            woken(StoreKind::SecretStore, "vault", Some("team-a"), "prod"),
            ["by-name", "pushed", "selecting"]
        );
        assert_eq!(
            woken(StoreKind::SecretStore, "vault", Some("team-a"), "dev"),
            ["by-name", "pushed"]
        );
        assert!(woken(StoreKind::SecretStore, "vault", Some("team-b"), "prod").is_empty());
        assert_eq!(
            woken(StoreKind::ClusterSecretStore, "vault", None, "dev"),
            ["cluster"]
        );

        event(watcher::Event::Apply(named(
            "by-name",
            json!([{"name": "other"}]),
        )));
        assert_eq!(
            woken(StoreKind::SecretStore, "vault", Some("team-a"), "dev"),
            ["pushed"]
        );
        assert_eq!(
            woken(StoreKind::SecretStore, "other", Some("team-a"), "dev"),
            ["by-name"]
        );
        event(watcher::Event::Delete(pushed));
        assert!(woken(StoreKind::SecretStore, "vault", Some("team-a"), "dev").is_empty());

        // "cluster" was deleted while the watch was down.
        event(watcher::Event::Init);
        event(watcher::Event::InitApply(selecting));
        event(watcher::Event::InitDone);
        assert!(woken(StoreKind::ClusterSecretStore, "vault", None, "dev").is_empty());
        assert_eq!(
            woken(StoreKind::SecretStore, "any", Some("team-a"), "prod"),
            ["selecting"]
        );
    }

    fn secret(name: &str, labels: &[(&str, &str)]) -> PartialObjectMeta<Secret> {
        let mut meta = PartialObjectMeta::<Secret>::default();
        meta.metadata.name = Some(name.into());
        meta.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        meta
    }

    /// A Secret's event finds the PushSecrets reading it without a scan of every PushSecret:
    /// 10k PushSecrets each pushing a Secret of its own, plus one selecting by label, and an
    /// event for each Secret (a scan is 10⁸ comparisons).
    #[test]
    fn secret_events_find_their_push_secrets_without_a_scan() {
        const COUNT: usize = 10_000;
        let (reader, mut writer) = reflector::store::<Watched>();
        let sources = SharedIndex::<Watched, Source>::default();
        let mut keep = index::kept(sources.clone(), sources_of);
        let mut event = |e: watcher::Event<Watched>| {
            writer.apply_watcher_event(&e);
            keep(&e);
        };
        let pushing = |name: String, selector: serde_json::Value| {
            let mut ps = push_secret(json!([{"name": "vault"}]));
            ps.metadata.name = Some(name);
            ps.spec.selector = serde_json::from_value(json!({"secret": selector})).unwrap();
            DeserializeGuard(Ok(ps))
        };
        for i in 0..COUNT {
            event(watcher::Event::Apply(pushing(
                format!("ps-{i}"),
                json!({"name": format!("src-{i}")}),
            )));
        }
        event(watcher::Event::Apply(pushing(
            "selecting".into(),
            json!({"selector": {"matchLabels": {"push": "yes"}}}),
        )));
        let src = |i: usize, labels: &[(&str, &str)]| {
            let mut secret = secret(&format!("src-{i}"), labels);
            secret.metadata.namespace = Some("team-a".into());
            secret
        };
        let names = |refs: Vec<ObjectRef<Watched>>| {
            let mut names: Vec<_> = refs.into_iter().map(|r| r.name).collect();
            names.sort();
            names
        };
        assert_eq!(
            names(reading(&reader, &sources, &src(7, &[("push", "yes")]))),
            ["ps-7", "selecting"]
        );
        let mut other = src(7, &[]);
        other.metadata.namespace = Some("team-b".into());
        assert!(reading(&reader, &sources, &other).is_empty());
        let started = std::time::Instant::now();
        for i in 0..COUNT {
            assert_eq!(
                names(reading(&reader, &sources, &src(i, &[]))),
                [format!("ps-{i}")]
            );
        }
        let took = started.elapsed();
        assert!(
            took < std::time::Duration::from_secs(2),
            "{COUNT} Secret events took {took:?}"
        );
    }

    /// A PushSecret that leaves the watch takes its series with it (issue 21 §2); another's
    /// stay.
    #[tokio::test]
    async fn a_departed_push_secrets_series_go_with_it() {
        let (client, _) = crate::standin::client(|_| crate::standin::status(404, "NotFound"));
        let mut registry = prometheus_client::registry::Registry::default();
        let ctx = crate::standin::context_in(client, Default::default(), &mut registry);
        for name in ["gone", "kept"] {
            ctx.metrics.ps_condition.set(
                name,
                "team-a",
                api::conditions::READY,
                api::conditions::ConditionStatus::True,
            );
        }
        let series = |name: &str| {
            crate::metrics::text(&registry)
                .lines()
                .filter(|l| l.starts_with("pushsecret_") && l.contains(&format!("name=\"{name}\"")))
                .count()
        };
        assert!(series("gone") > 0 && series("kept") > 0);
        departed(&ctx, &ObjectRef::new("gone").within("team-a"));
        assert_eq!(
            series("gone"),
            0,
            "a departed PushSecret's series are still there"
        );
        assert!(series("kept") > 0, "another PushSecret's series went too");
    }

    #[test]
    fn a_source_is_the_named_secret_or_one_the_selector_matches() {
        let named: PushSecretSecret = serde_json::from_value(json!({"name": "src"})).unwrap();
        assert!(is_source(&named, &secret("src", &[])));
        assert!(!is_source(&named, &secret("other", &[])));
        let selected: PushSecretSecret =
            serde_json::from_value(json!({"selector": {"matchLabels": {"push": "bulk"}}})).unwrap();
        assert!(is_source(&selected, &secret("any", &[("push", "bulk")])));
        assert!(!is_source(&selected, &secret("any", &[("push", "no")])));
    }

    #[test]
    fn only_changes_of_the_stores_a_push_secret_uses_reach_the_store_controllers() {
        let (tx, mut rx) = futures::channel::mpsc::unbounded();
        let mut tap = store_use_changes(vec![tx]);
        let watched = |ps: &PushSecret| DeserializeGuard(Ok(ps.clone()));
        let mut ps = push_secret(json!([{"name": "a"}]));
        tap(&Ok(watcher::Event::Apply(watched(&ps))));
        assert_eq!(rx.try_recv().unwrap(), vec![Uses::of(&ps)]);

        // A refresh (status time, conditions) changes nothing a store cares about.
        let mut refreshed = ps.clone();
        refreshed.status = Some(Default::default());
        tap(&Ok(watcher::Event::Apply(watched(&refreshed))));
        assert!(rx.try_recv().is_err(), "nothing sent");

        // A new store reference: both the old and the new uses go, so the store left behind
        // is looked at too.
        let before = Uses::of(&ps);
        ps.spec.secret_store_refs[0].name = Some("b".into());
        tap(&Ok(watcher::Event::Apply(watched(&ps))));
        assert_eq!(rx.try_recv().unwrap(), vec![before, Uses::of(&ps)]);

        tap(&Ok(watcher::Event::Delete(watched(&ps))));
        assert_eq!(rx.try_recv().unwrap(), vec![Uses::of(&ps)]);

        // Deleted while the watch was down: the re-list no longer holds it.
        let mut gone = push_secret(json!([{"name": "c"}]));
        gone.metadata.name = Some("gone".into());
        tap(&Ok(watcher::Event::Apply(watched(&gone))));
        tap(&Ok(watcher::Event::Apply(watched(&ps))));
        while rx.try_recv().is_ok() {}
        tap(&Ok(watcher::Event::Init));
        tap(&Ok(watcher::Event::InitApply(watched(&ps))));
        tap(&Ok(watcher::Event::InitDone));
        assert_eq!(rx.try_recv().unwrap(), vec![Uses::of(&gone)]);
        assert!(rx.try_recv().is_err(), "the one still there is not gone");
    }
}
