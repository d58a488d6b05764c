//! The ExternalSecret reconciler against an API server stand-in, for orderings a real API server
//! only shows by chance: a watch event that overtakes the answer to the write that caused it,
//! and a status write the watch cache has not caught up with.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use api::store::SecretStore;
use futures::StreamExt;
use http::Method;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::*;
use crate::own_writes::TargetChange;
use crate::standin::{self, Request};

const NS: &str = "team-a";
const TARGET_PATH: &str = "/api/v1/namespaces/team-a/secrets/target";

fn external_secret(status: Option<Value>) -> ExternalSecret {
    serde_json::from_value(json!({
        "apiVersion": "external-secrets.io/v1",
        "kind": "ExternalSecret",
        "metadata": {"name": "db", "namespace": NS, "uid": "es-uid", "generation": 1,
                     "resourceVersion": "1"},
        "spec": {
            "refreshInterval": "1h",
            "secretStoreRef": {"name": "fake", "kind": "SecretStore"},
            "target": {"name": "target"},
            "data": [{"secretKey": "password", "remoteRef": {"key": "db-password"}}],
        },
        "status": status,
    }))
    .unwrap()
}

/// What the stand-in serves besides the target Secret: the store, no provider object (the
/// inline store's converted form is used), and events.
fn common(request: &Request) -> (u16, Value) {
    let data = json!([{"key": "db-password", "value": "s3cret"}]);
    if let Some(answer) = standin::fake_store(request, NS, data) {
        return answer;
    }
    if request.method == Method::POST && request.path.contains("/events") {
        return (201, request.body.clone());
    }
    if request.method == Method::PATCH && request.path.ends_with("/status") {
        let mut object = serde_json::to_value(external_secret(None)).unwrap();
        object["status"] = request.body["status"].clone();
        // A write moves the object past the version the watch cache shows.
        object["metadata"]["resourceVersion"] = json!("2");
        return (200, object);
    }
    standin::status(404, "NotFound")
}

/// The Secret as the API server answers the apply, at `rv`.
fn applied(request: &Request, rv: &str) -> Value {
    let mut secret = request.body.clone();
    secret["metadata"]["resourceVersion"] = json!(rv);
    secret
}

fn watched(es: &ExternalSecret) -> triggers::Watched {
    serde_json::from_value(serde_json::to_value(es).unwrap()).unwrap()
}

/// The index of targets the ExternalSecret watch keeps, after `events`.
fn writers_after(events: Vec<watcher::Event<triggers::Watched>>) -> triggers::Writers {
    let (reader, mut cache) = reflector::store();
    let writers = triggers::Writers::new(reader);
    let mut keep = writers.kept();
    for event in &events {
        cache.apply_watcher_event(event);
        keep(event);
    }
    writers
}

/// A watch event of `target` at `rv`, of the object `target-uid`.
fn seen(target: &TargetRef, rv: &str) -> TargetChange {
    TargetChange {
        target: target.clone(),
        resource_version: Some(rv.into()),
        uid: Some("target-uid".into()),
    }
}

/// The ExternalSecrets the target watch wakes around a write of the target.
#[derive(Debug, Default)]
struct Woken {
    /// For an event delivered while the write is under way (just before its answer).
    during: usize,
    /// For an event delivered once it returned.
    after: usize,
    /// For the events held during the write and delivered again once it returned.
    again: usize,
}

/// What the target watch makes of an event at `during` while the write of the target is under
/// way and of one at `after` once it returned, and the reconcile's result. `is_write` tells the
/// request that writes `target`, answered with `code`; the target Secret exists when `existing`.
#[allow(clippy::too_many_arguments)]
async fn write_with_events(
    es: ExternalSecret,
    target: TargetRef,
    is_write: fn(&Request) -> bool,
    code: u16,
    existing: bool,
    during: Option<&'static str>,
    after: Option<&'static str>,
) -> (Woken, Result<Action, Error>) {
    let cache = writers_after(vec![watcher::Event::Apply(watched(&es))]);
    let ctx_cell: Arc<OnceLock<Arc<ExternalSecretContext>>> = Arc::default();
    let woken_during = Arc::new(Mutex::new(0));
    let (cell, woken, cached, written) = (
        ctx_cell.clone(),
        woken_during.clone(),
        cache.clone(),
        target.clone(),
    );
    let (client, _) = standin::client(move |request| {
        if is_write(request) {
            if let Some(rv) = during {
                let users = triggers::target_users(
                    &cell.get().unwrap().own_writes,
                    &cached,
                    &seen(&written, rv),
                );
                *woken.lock().unwrap() = users.len();
            }
            if code != 200 {
                return standin::status(code, "InternalError");
            }
            if request.method == Method::DELETE {
                return (
                    200,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
                );
            }
            return (200, applied(request, "10"));
        }
        if request.is(Method::GET, "/api/v1") {
            return (200, core_resources());
        }
        if existing && request.is(Method::GET, TARGET_PATH) {
            return (200, owned_target());
        }
        common(request)
    });
    let settings = crate::context::Settings {
        allow_generic_targets: true,
        ..Default::default()
    };
    let (ctx, mut released) = standin::externalsecret_context(client, settings);
    ctx_cell.set(ctx.clone()).ok().unwrap();
    let result = reconcile(Arc::new(es), ctx.clone(), || false).await;
    let after = after.map_or(0, |rv| {
        triggers::target_users(&ctx.own_writes, &cache, &seen(&target, rv)).len()
    });
    let mut again = 0;
    while let Ok(change) = released.try_recv() {
        again += triggers::target_users(&ctx.own_writes, &cache, &change).len();
    }
    let during = *woken_during.lock().unwrap();
    (
        Woken {
            during,
            after,
            again,
        },
        result,
    )
}

/// The target Secret at version 5, controlled by the ExternalSecret.
fn owned_target() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "target", "namespace": NS, "uid": "target-uid",
                     "resourceVersion": "5",
                     "ownerReferences": [{"apiVersion": "external-secrets.io/v1",
                         "kind": "ExternalSecret", "name": "db", "uid": "es-uid",
                         "controller": true}]},
        "data": {"password": "b2xk"},
    })
}

/// Discovery of the core group, for generic targets.
fn core_resources() -> Value {
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": [
        {"name": "configmaps", "singularName": "configmap", "namespaced": true,
         "kind": "ConfigMap", "verbs": ["get", "list", "watch", "create", "update", "delete"]},
    ]})
}

/// A write of the target Secret.
fn secret_write(request: &Request) -> bool {
    request.is(Method::PATCH, TARGET_PATH)
}

async fn secret_write_with_events(
    code: u16,
    during: Option<&'static str>,
    after: Option<&'static str>,
) -> (Woken, Result<Action, Error>) {
    let target = TargetRef::secret(NS, "target");
    write_with_events(
        external_secret(None),
        target,
        secret_write,
        code,
        false,
        during,
        after,
    )
    .await
}

/// The watch event of our own apply can come before its answer or after: either way it
/// reconciles nothing.
#[tokio::test]
async fn own_write_event_reconciles_nothing_whenever_it_comes() {
    for (during, after) in [(Some("10"), None), (None, Some("10"))] {
        let (woken, action) = secret_write_with_events(200, during, after).await;
        assert_eq!(
            (woken.during, woken.after, woken.again),
            (0, 0, 0),
            "the event of our own write woke the ExternalSecret"
        );
        assert_eq!(action.unwrap(), Action::requeue(Duration::from_secs(3600)));
    }
}

/// Someone else's write while ours is under way is not lost: its event is delivered again once
/// ours returned, which wakes the ExternalSecret at once, and the event of our own write that
/// comes later still wakes nothing.
#[tokio::test]
async fn foreign_write_during_ours_reconciles_at_once() {
    let (woken, _) = secret_write_with_events(200, Some("9"), Some("10")).await;
    assert_eq!(
        woken.after, 0,
        "the event of our own write woke the ExternalSecret"
    );
    assert_eq!(woken.again, 1, "the foreign write was lost");
}

/// Nor when our write fails: the failed reconcile is retried only at the end of its backoff
/// (minutes, for one that kept failing), while someone else's change may be what it waits for.
#[tokio::test]
async fn foreign_write_during_a_failed_write_of_ours_is_not_lost() {
    let (woken, result) = secret_write_with_events(500, Some("9"), None).await;
    assert!(result.is_err(), "the write failed");
    assert_eq!(woken.during, 0, "held while our write was under way");
    assert_eq!(
        woken.again, 1,
        "the foreign write was dropped with our failed one"
    );
}

/// The ExternalSecret, deletionPolicy Delete, whose provider now returns no data.
fn deleting_external_secret() -> ExternalSecret {
    let mut es = serde_json::to_value(external_secret(None)).unwrap();
    es["spec"]["target"]["deletionPolicy"] = json!("Delete");
    es["spec"]["data"] = json!(null);
    es["spec"]["dataFrom"] = json!([{"find": {"name": {"regexp": "^nothing-matches"}}}]);
    serde_json::from_value(es).unwrap()
}

/// Our own delete of the target (deletionPolicy Delete, the provider returned no data) is an
/// own write: its watch event, which carries a resourceVersion no answer gave, wakes nobody,
/// whether it comes before the answer or after; a read of the Secret and a fetch from the
/// provider otherwise.
#[tokio::test]
async fn own_delete_event_reconciles_nothing_whenever_it_comes() {
    let delete = |r: &Request| r.is(Method::DELETE, TARGET_PATH);
    let target = TargetRef::secret(NS, "target");
    for (during, after) in [(Some("11"), None), (None, Some("11"))] {
        let es = deleting_external_secret();
        let (woken, action) =
            write_with_events(es, target.clone(), delete, 200, true, during, after).await;
        action.unwrap();
        assert_eq!(
            (woken.during, woken.after, woken.again),
            (0, 0, 0),
            "the event of our own delete woke the ExternalSecret"
        );
    }
}

/// A failure right after a success the watch cache has not shown yet waits for the cache to show
/// it; if the cache never does, the failure is written all the same: built on the cached (older,
/// failed) status it equals that status, yet the object holds Ready=True.
#[tokio::test(start_paused = true)]
async fn failure_after_an_unseen_success_is_written() {
    let fail_reads = Arc::new(Mutex::new(true));
    let fail = fail_reads.clone();
    let (client, requests) = standin::client(move |request| {
        if request.is(Method::GET, TARGET_PATH) && *fail.lock().unwrap() {
            return standin::status(500, "InternalError");
        }
        if request.is(Method::PATCH, TARGET_PATH) {
            return (200, applied(request, "10"));
        }
        common(request)
    });
    let ctx = standin::externalsecret_context(client, Default::default()).0;
    let status_writes = || standin::status_writes(&requests, "/externalsecrets/db/status");
    let ready = |status: &Value| {
        status["conditions"][0]["status"]
            .as_str()
            .map(str::to_owned)
    };

    // The failure, as the cache will go on showing it.
    let _ = reconcile(Arc::new(external_secret(None)), ctx.clone(), || false).await;
    let failed = status_writes().pop().expect("the failure was written");
    assert_eq!(ready(&failed).as_deref(), Some("False"));
    let cached = Arc::new(external_secret(Some(failed)));

    *fail_reads.lock().unwrap() = false;
    reconcile(cached.clone(), ctx.clone(), || false)
        .await
        .unwrap();
    let synced = status_writes().pop().unwrap();
    assert_eq!(ready(&synced).as_deref(), Some("True"));

    *fail_reads.lock().unwrap() = true;
    let written = status_writes().len();
    let held = reconcile(cached.clone(), ctx.clone(), || false).await;
    assert_eq!(
        held.unwrap(),
        Action::requeue(crate::status::CATCH_UP_RETRY)
    );
    assert_eq!(status_writes().len(), written, "acted on a lagging cache");
    tokio::time::advance(Duration::from_secs(11)).await;
    let _ = reconcile(cached, ctx.clone(), || false).await;
    let last = status_writes().pop().unwrap();
    assert_eq!(
        ready(&last).as_deref(),
        Some("False"),
        "the object was left Ready=True while failing"
    );
}

/// With many ExternalSecrets, an event of each one's target wakes that one alone, at a cost that
/// does not grow with the number of ExternalSecrets: a scan of all of them for every event is
/// 10⁸ comparisons for 10k, minutes of a refresh wave.
#[tokio::test]
async fn target_events_find_their_external_secret_without_a_scan() {
    const COUNT: usize = 10_000;
    let writers = writers_after(numbered(COUNT, |es, i| {
        es["spec"]["target"]["name"] = json!(format!("target-{i}"));
    }));
    let (client, _) = standin::client(common);
    let (ctx, _) = standin::externalsecret_context(client, Default::default());
    let started = std::time::Instant::now();
    for i in 0..COUNT {
        let target = TargetRef::secret(NS, &format!("target-{i}"));
        let woken = triggers::target_users(&ctx.own_writes, &writers, &seen(&target, "5"));
        assert_eq!(woken.len(), 1);
        assert_eq!(woken[0].name, format!("es-{i}"));
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "{COUNT} target events took {took:?}"
    );
}

/// ExternalSecrets that write the Secret of their own name, most of them, are found from the
/// watch's cache and take no index entry (0.4 KiB each, hack/README.md).
#[tokio::test]
async fn a_target_of_its_own_name_is_found_without_an_index_entry() {
    const COUNT: usize = 1_000;
    let writers = writers_after(numbered(COUNT, |es, i| {
        if i % 2 == 0 {
            es["spec"]["target"]["name"] = json!(format!("es-{i}"));
        } else {
            es["spec"]["target"]
                .as_object_mut()
                .map(|t| t.remove("name"));
        }
    }));
    assert_eq!(writers.indexed(), 0);
    let (client, _) = standin::client(common);
    let (ctx, _) = standin::externalsecret_context(client, Default::default());
    for i in 0..COUNT {
        let target = TargetRef::secret(NS, &format!("es-{i}"));
        let woken = triggers::target_users(&ctx.own_writes, &writers, &seen(&target, "5"));
        assert_eq!(woken.len(), 1);
        assert_eq!(woken[0].name, format!("es-{i}"));
        let config_map = TargetRef {
            kind: "ConfigMap".into(),
            ..target
        };
        let woken = triggers::target_users(&ctx.own_writes, &writers, &seen(&config_map, "5"));
        assert!(
            woken.is_empty(),
            "a ConfigMap of its name is not its target"
        );
    }
}

/// The target an ExternalSecret writes follows its spec: after a rename the old Secret's events
/// wake nothing, and a generic target of the same name is another object.
#[tokio::test]
async fn target_events_follow_renames_and_kinds() {
    let es = external_secret(None);
    let mut renamed = serde_json::to_value(&es).unwrap();
    renamed["spec"]["target"]["name"] = json!("other");
    let renamed: ExternalSecret = serde_json::from_value(renamed).unwrap();
    let writers = writers_after(vec![
        watcher::Event::Apply(watched(&es)),
        watcher::Event::Apply(watched(&renamed)),
    ]);
    let (client, _) = standin::client(common);
    let (ctx, _) = standin::externalsecret_context(client, Default::default());
    let users =
        |target| triggers::target_users(&ctx.own_writes, &writers, &seen(&target, "5")).len();
    assert_eq!(users(TargetRef::secret(NS, "target")), 0);
    assert_eq!(users(TargetRef::secret(NS, "other")), 1);
    let config_map = TargetRef {
        kind: "ConfigMap".into(),
        ..TargetRef::secret(NS, "other")
    };
    assert_eq!(users(config_map), 0);
}

/// A generic target records its own writes as a Secret does: the watch event of the create
/// reconciles nothing, whether it comes before the answer or after.
#[tokio::test]
async fn own_generic_write_event_reconciles_nothing_whenever_it_comes() {
    let mut es = serde_json::to_value(external_secret(None)).unwrap();
    es["spec"]["target"]["manifest"] = json!({"apiVersion": "v1", "kind": "ConfigMap"});
    let es: ExternalSecret = serde_json::from_value(es).unwrap();
    let target = TargetRef {
        kind: "ConfigMap".into(),
        ..TargetRef::secret(NS, "target")
    };
    let create = |r: &Request| r.is(Method::POST, "/api/v1/namespaces/team-a/configmaps");
    for (during, after) in [(Some("10"), None), (None, Some("10"))] {
        let (woken, action) = write_with_events(
            es.clone(),
            target.clone(),
            create,
            200,
            false,
            during,
            after,
        )
        .await;
        assert_eq!(
            (woken.during, woken.after, woken.again),
            (0, 0, 0),
            "the event of our own write woke the ExternalSecret"
        );
        assert_eq!(action.unwrap(), Action::requeue(Duration::from_secs(3600)));
    }
}

/// The watch events of `count` copies of `external_secret`, named `es-{i}`, each changed by
/// `edit`.
fn numbered(
    count: usize,
    edit: impl Fn(&mut Value, usize),
) -> Vec<watcher::Event<triggers::Watched>> {
    (0..count)
        .map(|i| {
            let mut es = serde_json::to_value(external_secret(None)).unwrap();
            es["metadata"]["name"] = json!(format!("es-{i}"));
            edit(&mut es, i);
            watcher::Event::Apply(serde_json::from_value(es).unwrap())
        })
        .collect()
}

/// The index of stores' users holding `count` copies of `external_secret` (reading from the
/// store "fake").
fn es_cache(count: usize) -> triggers::StoreUsers {
    store_users_after(numbered(count, |_, _| {}))
}

/// The index of stores' users the ExternalSecret watch keeps, after `events`.
fn store_users_after(events: Vec<watcher::Event<triggers::Watched>>) -> triggers::StoreUsers {
    let users = triggers::StoreUsers::default();
    let mut keep = crate::index::kept(users.clone(), triggers::stores_read);
    events.iter().for_each(&mut keep);
    users
}

/// The SecretStore "fake" with the Fake provider inline serving `data`, with `spec` merged in.
fn fake_store(data: Value, spec: Value) -> SecretStore {
    let mut store = json!({
        "apiVersion": "external-secrets.io/v1", "kind": "SecretStore",
        "metadata": {"name": "fake", "namespace": NS, "uid": "store-uid", "generation": 1},
        "spec": {"provider": {"fake": {"data": data}}},
    });
    for (k, v) in spec.as_object().unwrap() {
        store["spec"][k] = v.clone();
    }
    serde_json::from_value(store).unwrap()
}

/// A store reading through the provider object `object` (`providerRef`).
fn ref_store(object: &str, spec: Value) -> SecretStore {
    let mut store = fake_store(json!([]), spec);
    store.spec.provider = None;
    store.spec.provider_ref = Some(
        serde_json::from_value(json!({
            "apiVersion": "providers.external-secrets.io/v1alpha1", "kind": "Fake", "name": object,
        }))
        .unwrap(),
    );
    store
}

/// The ExternalSecrets forced by a store watch showing `stores` (each with whether it is news).
async fn forced_by(count: usize, stores: Vec<(bool, SecretStore)>) -> Vec<(Duration, String)> {
    let stores = stores
        .into_iter()
        .map(|(news, s)| (news, clientmanager::LoadedStore::from_secret_store(&s)));
    let start = tokio::time::Instant::now();
    triggers::store_changes(
        es_cache(count),
        triggers::Forced::default(),
        triggers::ProviderSpecs::default(),
        futures::stream::iter(stores),
    )
    .map(|r| (start.elapsed(), r.name))
    .collect()
    .await
}

/// An edit of a store that cannot change what is fetched forces nobody; a change of the
/// provider it reads through forces each user once. An inline store's users are forced by
/// its converted object instead, which the next test shows.
#[tokio::test(start_paused = true)]
async fn only_a_provider_change_of_a_store_forces_its_users() {
    let conditions = json!({"conditions": [{"namespaces": [NS]}]});
    let forced = forced_by(
        1,
        vec![
            (false, ref_store("a", json!({}))),
            (true, ref_store("a", json!({"refreshInterval": 60}))),
            (true, ref_store("a", conditions)),
            (true, ref_store("a", json!({"controller": "dev"}))),
            (true, ref_store("b", json!({"controller": "dev"}))),
        ],
    )
    .await;
    assert_eq!(forced.len(), 1, "forced: {forced:?}");
    let data = json!([{"key": "db-password", "value": "s3cret"}]);
    let other = json!([{"key": "db-password", "value": "changed"}]);
    let inline = forced_by(
        1,
        vec![
            (false, fake_store(data, json!({}))),
            (true, fake_store(other, json!({}))),
        ],
    )
    .await;
    assert!(
        inline.is_empty(),
        "forced before its object changed: {inline:?}"
    );
}

/// A provider change of a store used by 1000 ExternalSecrets refreshes them over a few seconds,
/// not all at once.
#[tokio::test(start_paused = true)]
async fn a_forced_refresh_of_many_is_spread_over_time() {
    let forced = forced_by(
        1000,
        vec![
            (false, ref_store("a", json!({}))),
            (true, ref_store("b", json!({}))),
        ],
    )
    .await;
    assert_eq!(forced.len(), 1000);
    let in_first_second = forced
        .iter()
        .filter(|(at, _)| *at < Duration::from_secs(1))
        .count();
    assert!(
        (200..500).contains(&in_first_second),
        "{in_first_second} of 1000 forced in the first second"
    );
    assert!(forced.iter().all(|(at, _)| *at <= Duration::from_secs(3)));
}

/// The users of each store follow the ExternalSecrets as the watch shows them: a store named in
/// `secretStoreRef` or a `sourceRef`, a SecretStore only in its own namespace, a move to another
/// store, a delete, and a delete missed while the watch was down (gone at the re-list).
#[test]
fn store_users_follow_specs_deletes_and_relists() {
    let es = |name: &str, namespace: &str, spec: Value| -> triggers::Watched {
        let mut es = serde_json::to_value(external_secret(None)).unwrap();
        es["metadata"]["name"] = json!(name);
        es["metadata"]["namespace"] = json!(namespace);
        for (k, v) in spec.as_object().unwrap() {
            es["spec"][k] = v.clone();
        }
        serde_json::from_value(es).unwrap()
    };
    let a = es("a", NS, json!({}));
    let moved = es("a", NS, json!({"secretStoreRef": {"name": "other"}}));
    let b = es(
        "b",
        NS,
        json!({
            "secretStoreRef": {"name": "shared", "kind": "ClusterSecretStore"},
            "data": [{"secretKey": "k", "remoteRef": {"key": "k"},
                      "sourceRef": {"storeRef": {"name": "fake", "kind": "SecretStore"}}}],
        }),
    );
    let c = es("c", "team-b", json!({}));
    let users = triggers::StoreUsers::default();
    let mut keep = crate::index::kept(users.clone(), triggers::stores_read);
    let names = |kind, name: &str, namespace: Option<&str>| {
        let mut found: Vec<_> = triggers::users(&users, kind, name, namespace)
            .into_iter()
            .map(|r| r.name)
            .collect();
        found.sort();
        found
    };
    use clientmanager::StoreKind::{ClusterSecretStore, SecretStore};
    for e in [&a, &b, &c] {
        keep(&watcher::Event::Apply(e.clone()));
    }
    assert_eq!(names(SecretStore, "fake", Some(NS)), ["a", "b"]);
    assert_eq!(names(SecretStore, "fake", Some("team-b")), ["c"]);
    assert_eq!(names(ClusterSecretStore, "shared", None), ["b"]);
    assert!(
        names(ClusterSecretStore, "fake", None).is_empty(),
        "another kind"
    );

    keep(&watcher::Event::Apply(moved.clone()));
    assert_eq!(names(SecretStore, "fake", Some(NS)), ["b"]);
    assert_eq!(names(SecretStore, "other", Some(NS)), ["a"]);

    keep(&watcher::Event::Delete(b));
    assert!(names(ClusterSecretStore, "shared", None).is_empty());
    assert!(names(SecretStore, "fake", Some(NS)).is_empty());

    // c was deleted while the watch was down.
    keep(&watcher::Event::Init);
    keep(&watcher::Event::InitApply(moved));
    keep(&watcher::Event::InitDone);
    assert!(names(SecretStore, "fake", Some("team-b")).is_empty());
    assert_eq!(names(SecretStore, "other", Some(NS)), ["a"]);
}

/// However many ExternalSecrets one store change forces, they are all refreshed within a window
/// of bounded length: at 3 ms each, 100k would take five minutes to see the change.
#[tokio::test(start_paused = true)]
async fn a_forced_refresh_of_very_many_ends_within_a_bounded_window() {
    const COUNT: usize = 20_000;
    let forced = forced_by(
        COUNT,
        vec![
            (false, ref_store("a", json!({}))),
            (true, ref_store("b", json!({}))),
        ],
    )
    .await;
    assert_eq!(forced.len(), COUNT);
    let last = forced.iter().map(|(at, _)| *at).max().unwrap();
    assert!(
        last <= Duration::from_secs(30),
        "the last forced after {last:?}"
    );
    assert!(
        last >= Duration::from_secs(25),
        "still spread: the last after {last:?}"
    );
}

/// An ExternalSecret deleted between a store change and its moment in the spread keeps no
/// mark: its departure was handled before the mark came, and nothing would ever take it
/// (issue 21 §2, the `forced` set). Nor is it queued: there is nothing left to refresh.
#[tokio::test(start_paused = true)]
async fn a_forced_external_secret_deleted_before_its_turn_leaves_no_mark() {
    let events = numbered(2, |_, _| {});
    let mut writer = reflector::store::Writer::<triggers::Watched>::default();
    events.iter().for_each(|e| writer.apply_watcher_event(e));
    let (kept, deleted) = match (&events[0], &events[1]) {
        (watcher::Event::Apply(kept), watcher::Event::Apply(deleted)) => {
            (ObjectRef::from_obj(kept), deleted.clone())
        }
        _ => unreachable!(),
    };
    let forced = triggers::Forced::default();
    forced.watch(writer.as_reader());
    let mut store = ref_store("a", json!({}));
    store.metadata.uid = Some("uid-a".into());
    let mut marks = triggers::store_changes(
        store_users_after(events),
        forced.clone(),
        triggers::ProviderSpecs::default(),
        futures::stream::iter([(true, clientmanager::LoadedStore::from_secret_store(&store))]),
    );
    writer.apply_watcher_event(&watcher::Event::Delete(deleted.clone()));
    let mut queued = Vec::new();
    while let Some(es) = marks.next().await {
        queued.push(es);
    }
    assert_eq!(
        queued,
        std::slice::from_ref(&kept),
        "only the one still there is queued"
    );
    assert!(forced.take(&kept), "the one still there is forced");
    assert!(
        !forced.take(&ObjectRef::from_obj(&deleted)),
        "a mark was kept for an ExternalSecret that is gone"
    );
}

/// The users of a store that changed are found without a scan of every ExternalSecret: with
/// each of 10k ExternalSecrets reading from a store of its own, a change of every store is 10⁸
/// comparisons by a scan (here 5000: 2.5·10⁷).
#[tokio::test(start_paused = true)]
async fn store_changes_find_their_users_without_a_scan() {
    const COUNT: usize = 5_000;
    let events = numbered(COUNT, |es, i| {
        es["spec"]["secretStoreRef"]["name"] = json!(format!("store-{i}"));
    });
    let stores = (0..COUNT).map(|i| {
        let mut store = ref_store("a", json!({}));
        store.metadata.name = Some(format!("store-{i}"));
        store.metadata.uid = Some(format!("uid-{i}"));
        (true, clientmanager::LoadedStore::from_secret_store(&store))
    });
    let users = store_users_after(events);
    let started = std::time::Instant::now();
    let forced: Vec<_> = triggers::store_changes(
        users,
        triggers::Forced::default(),
        triggers::ProviderSpecs::default(),
        futures::stream::iter(stores),
    )
    .map(|r| r.name)
    .collect()
    .await;
    let took = started.elapsed();
    assert_eq!(forced.len(), COUNT);
    assert!(
        took < Duration::from_secs(2),
        "{COUNT} store changes took {took:?}"
    );
}

/// The object converted from an inline store forces its users when the store reconciler
/// rewrites it after a store edit (reads go through it, so forcing them at the store edit
/// would fetch with the old spec), and when it is edited by hand.
#[tokio::test]
async fn an_inline_store_s_converted_object_forces_its_users() {
    let (client, _) = standin::client(common);
    let ctx = standin::context(client);
    let store = fake_store(
        json!([{"key": "db-password", "value": "s3cret"}]),
        json!({}),
    );
    let (stores, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Apply(store.clone()));
    ctx.manager.use_store_caches(stores, reflector::store().0);
    let loaded = clientmanager::LoadedStore::from_secret_store(&store);
    let generated = clientmanager::convert(ctx.manager.registry(), &loaded)
        .unwrap()
        .generated
        .unwrap();
    let mut converted: kube::api::DynamicObject =
        serde_json::from_value(generated.object.clone()).unwrap();
    converted.metadata.uid = Some("converted-uid".into());
    let mut provider_writer = reflector::store::Writer::new(generated.resource.clone());
    let objects = provider_writer.as_reader();
    provider_writer.apply_watcher_event(&watcher::Event::Apply(converted.clone()));
    ctx.manager
        .use_provider_cache(generated.resource.clone(), objects);
    let identity = provider::ProviderIdentity {
        kind: generated.resource.kind.clone(),
        namespace: Some(NS.into()),
        name: "fake".into(),
    };
    let forced_by_change = || async {
        let (changes, received) = futures::channel::mpsc::unbounded();
        changes.unbounded_send(identity.clone()).unwrap();
        drop(changes);
        let forced = triggers::Forced::default();
        triggers::provider_changes(ctx.clone(), es_cache(1), forced, received)
            .count()
            .await
    };
    assert_eq!(forced_by_change().await, 1, "the rewrite forced nobody");
    converted.data["spec"] = json!({"data": [{"key": "db-password", "value": "by hand"}]});
    provider_writer.apply_watcher_event(&watcher::Event::Apply(converted));
    assert_eq!(forced_by_change().await, 1, "a hand edit forced nobody");
}

/// The stores woken by the ExternalSecret controller's store watch after `events`, each applied
/// to its cache as the watch does it: seen first, then the cache updated.
fn woken_by(events: Vec<watcher::Event<SecretStore>>) -> Vec<String> {
    let (reader, mut writer) = kube::runtime::reflector::store::<SecretStore>();
    let woken = std::sync::Mutex::new(Vec::new());
    let mut see = triggers::on_turning_ready(reader, |store: crate::context::ReadyStore| {
        woken.lock().unwrap().push(store.name)
    });
    for event in &events {
        see(event);
        writer.apply_watcher_event(event);
    }
    drop(see);
    woken.into_inner().unwrap()
}

fn with_ready(mut store: SecretStore, status: &str) -> SecretStore {
    store.status = serde_json::from_value(json!({
        "conditions": [{"type": "Ready", "status": status, "reason": "Valid", "message": ""}],
    }))
    .unwrap();
    store
}

#[test]
fn a_store_wakes_its_users_when_the_gates_cache_sees_it_turn_ready() {
    let store = || fake_store(json!([]), json!({}));
    // Known not Ready, then Ready: woken, once.
    assert_eq!(
        woken_by(vec![
            watcher::Event::Apply(with_ready(store(), "False")),
            watcher::Event::Apply(with_ready(store(), "True")),
            watcher::Event::Apply(with_ready(store(), "True")),
        ]),
        ["fake"]
    );
    // Seen first already Ready (the operator's start), or Ready again after Ready: no wake.
    assert!(woken_by(vec![watcher::Event::Apply(with_ready(store(), "True"))]).is_empty());
    // A re-list that brings it Ready after the cache held it failing wakes, as an update does.
    assert_eq!(
        woken_by(vec![
            watcher::Event::Apply(with_ready(store(), "False")),
            watcher::Event::Init,
            watcher::Event::InitApply(with_ready(store(), "True")),
            watcher::Event::InitDone,
        ]),
        ["fake"]
    );
}

/// `external_secret` as synced a minute ago, its target recorded at version 5.
fn in_sync() -> ExternalSecret {
    let es = external_secret(None);
    let synced = desired::synced_resource_version(&es);
    let refreshed = Timestamp::now() - jiff::SignedDuration::from_secs(60);
    external_secret(Some(json!({
        "refreshTime": refreshed.to_string(),
        "syncedResourceVersion": synced,
        "targetResourceVersion": "5",
        "conditions": [{"type": "Ready", "status": "True", "reason": "SecretSynced",
                        "message": "secret synced", "lastTransitionTime": refreshed.to_string()}],
    })))
}

/// While the first list of Secrets hangs, an ExternalSecret that needs it to skip a read holds
/// no worker: its reconcile returns at once without a request and it is woken once the list is
/// in; a new ExternalSecret is synced meanwhile. Before, the reconcile waited up to a minute.
#[tokio::test(start_paused = true)]
async fn a_hanging_first_list_of_secrets_holds_no_worker() {
    let (client, requests) = standin::client(|request| {
        if request.is(Method::PATCH, TARGET_PATH) {
            return (200, applied(request, "10"));
        }
        common(request)
    });
    let ctx = standin::externalsecret_context(client, Default::default()).0;
    let mut woken = Box::pin(ctx.target_versions.first_listed());
    let started = tokio::time::Instant::now();
    let action = reconcile(Arc::new(in_sync()), ctx.clone(), || false).await;
    assert_eq!(action.unwrap(), Action::await_change());
    assert_eq!(started.elapsed(), Duration::ZERO, "the reconcile waited");
    assert!(
        requests.lock().unwrap().is_empty(),
        "it asked the API server"
    );

    let new = reconcile(Arc::new(external_secret(None)), ctx.clone(), || false).await;
    assert_eq!(new.unwrap(), Action::requeue(Duration::from_secs(3600)));
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert!(
        requests.lock().unwrap().iter().any(secret_write),
        "the new ExternalSecret was not synced"
    );
    assert!(futures::poll!(woken.next()).is_pending());

    let target: PartialObjectMeta<Secret> = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "target", "namespace": NS, "resourceVersion": "5"},
    }))
    .unwrap();
    let versions = &ctx.target_versions;
    versions.apply(&watcher::Event::Init);
    versions.apply(&watcher::Event::InitApply(target));
    versions.apply(&watcher::Event::InitDone);
    assert_eq!(woken.next().await, Some((NS.to_owned(), "db".to_owned())));
    let count = requests.lock().unwrap().len();
    let action = reconcile(Arc::new(in_sync()), ctx.clone(), || false).await;
    assert_ne!(action.unwrap(), Action::await_change(), "set aside again");
    assert_eq!(
        requests.lock().unwrap().len(),
        count,
        "the listed target was read"
    );
}

/// A reconcile right after a sync, on a watch cache that has not shown the sync's status write
/// yet (no `refreshTime` in it), comes back shortly instead of refreshing again: no second read
/// from the store, no second write. Once the cache shows the sync, the ExternalSecret is in sync
/// and waits for its interval.
#[tokio::test]
async fn a_reconcile_before_the_cache_shows_the_sync_comes_back_for_it() {
    let target: Arc<Mutex<Option<Value>>> = Arc::default();
    let (client, requests) = standin::client(move |request| {
        let mut target = target.lock().unwrap();
        if request.is(Method::PATCH, TARGET_PATH) {
            *target = Some(applied(request, "10"));
        }
        if request.path.ends_with(TARGET_PATH)
            && let Some(target) = target.as_ref()
        {
            return (200, target.clone());
        }
        common(request)
    });
    // What the reconciler asks of the API server and the store, not the events it publishes
    // on its own time.
    let asked = |from: usize| -> Vec<String> {
        requests.lock().unwrap()[from..]
            .iter()
            .filter(|r| !r.path.contains("/events"))
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    };
    let ctx = standin::externalsecret_context(client, Default::default()).0;
    ctx.target_versions.apply(&watcher::Event::Init);
    ctx.target_versions.apply(&watcher::Event::InitDone);
    let hour = Action::requeue(Duration::from_secs(3600));
    let action = reconcile(Arc::new(external_secret(None)), ctx.clone(), || false).await;
    assert_eq!(action.unwrap(), hour);
    let synced = requests
        .lock()
        .unwrap()
        .iter()
        .rfind(|r| r.is(Method::PATCH, "/externalsecrets/db/status"))
        .map(|r| r.body["status"].clone())
        .expect("the sync was written");
    let count = requests.lock().unwrap().len();

    let action = reconcile(Arc::new(external_secret(None)), ctx.clone(), || false).await;
    let again = asked(count);
    assert!(
        again.is_empty(),
        "synced again on a lagging cache: {again:?}"
    );
    assert_eq!(
        action.unwrap(),
        Action::requeue(crate::status::CATCH_UP_RETRY)
    );

    // The cache shows the sync (the write moved the object to version 2).
    let mut cached = external_secret(Some(synced));
    cached.metadata.resource_version = Some("2".into());
    let action = reconcile(Arc::new(cached), ctx.clone(), || false).await;
    assert_ne!(
        action.unwrap(),
        Action::requeue(crate::status::CATCH_UP_RETRY)
    );
    let done = asked(count);
    assert!(
        done == ["GET /api/v1/namespaces/team-a/secrets/target"],
        "nothing but a look at the target once in sync: {done:?}"
    );
}

/// A new ExternalSecret whose target the listed watch does not know: its Secret is created by
/// one apply that no existing Secret would meet, without a read first. When a Secret by that
/// name exists after all (the apiserver answers 409), it is read and written as any existing one.
#[tokio::test]
async fn a_new_target_is_applied_without_a_read_and_read_when_it_exists() {
    for exists in [false, true] {
        let (client, requests) = standin::client(move |request| {
            if request.is(Method::PATCH, TARGET_PATH) {
                if exists && request.body["metadata"]["resourceVersion"] == "1" {
                    return standin::status(409, "Conflict");
                }
                return (200, applied(request, "10"));
            }
            if exists && request.is(Method::GET, TARGET_PATH) {
                return (200, owned_target());
            }
            common(request)
        });
        let ctx = standin::externalsecret_context(client, Default::default()).0;
        ctx.target_versions.apply(&watcher::Event::Init);
        ctx.target_versions.apply(&watcher::Event::InitDone);
        let action = reconcile(Arc::new(external_secret(None)), ctx, || false).await;
        assert_eq!(action.unwrap(), Action::requeue(Duration::from_secs(3600)));
        let to_target: Vec<(Method, Value)> = requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.path.ends_with(TARGET_PATH))
            .map(|r| {
                (
                    r.method.clone(),
                    r.body["metadata"]["resourceVersion"].clone(),
                )
            })
            .collect();
        let expected = if exists {
            vec![
                (Method::PATCH, json!("1")),
                (Method::GET, Value::Null),
                (Method::PATCH, Value::Null),
            ]
        } else {
            vec![(Method::PATCH, json!("1"))]
        };
        assert_eq!(to_target, expected, "exists: {exists}");
    }
}
