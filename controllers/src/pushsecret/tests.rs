//! The PushSecret reconciler against an API server stand-in and the Fake provider: what was
//! pushed stays known to a later deletion whatever status write fails.

use std::sync::{Arc, Mutex};

use http::Method;
use serde_json::{Value, json};

use super::*;
use crate::standin::{self, Request};

const NS: &str = "team-a";

fn push_secret(status: Option<Value>, deleting: bool) -> PushSecret {
    let mut object = json!({
        "apiVersion": "external-secrets.io/v1alpha1",
        "kind": "PushSecret",
        "metadata": {"name": "ps", "namespace": NS, "uid": "ps-uid", "generation": 1,
                     "resourceVersion": "1", "finalizers": [FINALIZER]},
        "spec": {
            "deletionPolicy": "Delete",
            "secretStoreRefs": [{"name": "fake", "kind": "SecretStore"}],
            "selector": {"secret": {"name": "source"}},
            "data": [{"match": {"secretKey": "password", "remoteRef": {"remoteKey": "pushed"}}}],
        },
        "status": status,
    });
    if deleting {
        object["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
    }
    serde_json::from_value(object).unwrap()
}

/// What every stand-in here serves: the Fake store serving `data`, the source Secret and events.
fn served(request: &Request, data: Value) -> Option<(u16, Value)> {
    if let Some(answer) = standin::fake_store(request, NS, data) {
        return Some(answer);
    }
    if request.is(Method::GET, "/namespaces/team-a/secrets/source") {
        return Some((
            200,
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "source", "namespace": NS},
                   "data": {"password": "czNjcmV0"}}),
        ));
    }
    if request.method == Method::POST && request.path.contains("/events") {
        return Some((201, request.body.clone()));
    }
    None
}

/// Whether the Fake store holds `key`, as a client of the store sees it.
async fn remote_has(ctx: &Context, key: &str) -> bool {
    let store = StoreRef {
        kind: StoreKind::SecretStore,
        name: "fake".into(),
    };
    let handle = ctx.manager.get_ungated(&store, NS).await.unwrap();
    let remote = provider::PushRemoteRef {
        remote_key: key.into(),
        property: None,
    };
    handle.client.secret_exists(&remote).await.unwrap()
}

/// The status write after a push fails once; the PushSecret is then deleted (deletionPolicy
/// Delete) as the cache shows it, with every status write that did land. Nothing of the push is
/// kept in memory, which a restart would lose: the record written ahead of the push names it.
#[tokio::test]
async fn pushed_key_is_deleted_even_when_the_status_write_after_the_push_failed() {
    let failed_once = Arc::new(Mutex::new(false));
    let landed: Arc<Mutex<Option<Value>>> = Arc::default();
    let (failed, status) = (failed_once.clone(), landed.clone());
    let (client, _) = standin::client(move |request: &Request| {
        if let Some(answer) = served(request, json!([])) {
            return answer;
        }
        if request.is(Method::PATCH, "/pushsecrets/ps/status") {
            let reports = request.body["status"]["conditions"]
                .as_array()
                .is_some_and(|c| !c.is_empty());
            let mut failed = failed.lock().unwrap();
            if reports && !*failed {
                *failed = true;
                return standin::status(500, "InternalError");
            }
            *status.lock().unwrap() = Some(request.body["status"].clone());
            let mut object = serde_json::to_value(push_secret(None, false)).unwrap();
            object["status"] = request.body["status"].clone();
            return (200, object);
        }
        if request.is(Method::PATCH, "/pushsecrets/ps") {
            return (200, serde_json::to_value(push_secret(None, true)).unwrap());
        }
        standin::status(404, "NotFound")
    });
    let ctx = standin::context(client);

    let pushed = reconcile(Arc::new(push_secret(None, false)), ctx.clone()).await;
    assert!(pushed.is_err(), "the status write was to fail");
    assert!(*failed_once.lock().unwrap());
    assert!(remote_has(&ctx, "pushed").await, "the key was pushed");

    let cached = landed.lock().unwrap().clone();
    reconcile(Arc::new(push_secret(cached, true)), ctx.clone())
        .await
        .unwrap();
    assert!(
        !remote_has(&ctx, "pushed").await,
        "the pushed key survived deletionPolicy Delete"
    );
}

/// A push the store refuses, retried while the watch cache still shows the record written
/// ahead of the failed push rather than the failure's own write: the retry must not take the
/// record written ahead for what was pushed, or the refused key goes back on record for a
/// deletion to act on, and stays there at every later retry.
#[tokio::test]
async fn a_retry_on_a_cache_behind_its_last_status_write_keeps_no_refused_key_on_record() {
    // The Fake store refuses a push to a key its spec holds.
    let data = json!([{"key": "handmade", "value": "by hand"}]);
    let version = Arc::new(Mutex::new(1u64));
    let writes: Arc<Mutex<Vec<Value>>> = Arc::default();
    let ps = |status: Option<Value>, rv: u64| {
        let mut ps = serde_json::to_value(push_secret(status, false)).unwrap();
        ps["spec"]["data"].as_array_mut().unwrap().push(
            json!({"match": {"secretKey": "password", "remoteRef": {"remoteKey": "handmade"}}}),
        );
        ps["metadata"]["resourceVersion"] = json!(rv.to_string());
        serde_json::from_value::<PushSecret>(ps).unwrap()
    };
    let (answer_version, answer_writes) = (version.clone(), writes.clone());
    let (client, _) = standin::client(move |request: &Request| {
        if let Some(answer) = served(request, data.clone()) {
            return answer;
        }
        if request.is(Method::PATCH, "/pushsecrets/ps/status") {
            let mut version = answer_version.lock().unwrap();
            *version += 1;
            answer_writes
                .lock()
                .unwrap()
                .push(request.body["status"].clone());
            let mut object = serde_json::to_value(push_secret(None, false)).unwrap();
            object["status"] = request.body["status"].clone();
            object["metadata"]["resourceVersion"] = json!(version.to_string());
            return (200, object);
        }
        standin::status(404, "NotFound")
    });
    let ctx = standin::context(client);
    let on_record = |status: &Value| -> Vec<String> {
        let mut keys: Vec<String> = status["syncedPushSecrets"]["SecretStore/fake"]
            .as_object()
            .map(|entries| entries.keys().cloned().collect())
            .unwrap_or_default();
        keys.sort();
        keys
    };

    let first = reconcile(Arc::new(ps(None, 1)), ctx.clone()).await;
    assert!(first.is_err(), "the store was to refuse `handmade`");
    let (ahead, after_failure) = {
        let writes = writes.lock().unwrap();
        assert_eq!(
            writes.len(),
            2,
            "the record ahead, then the failure: {writes:?}"
        );
        (writes[0].clone(), writes[1].clone())
    };
    assert_eq!(on_record(&ahead), ["handmade", "pushed"]);
    assert_eq!(on_record(&after_failure), ["pushed"]);

    // The retry comes while the cache still shows the record written ahead.
    let _ = reconcile(Arc::new(ps(Some(ahead), 2)), ctx.clone()).await;
    let last = writes.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        on_record(&last),
        ["pushed"],
        "a key the store refused is on record as pushed"
    );

    // Once the cache shows the failure, the retry goes on as any other.
    let retried = reconcile(Arc::new(ps(Some(after_failure), 3)), ctx.clone()).await;
    assert!(retried.is_err(), "the store still refuses `handmade`");
    let last = writes.lock().unwrap().last().cloned().unwrap();
    assert_eq!(on_record(&last), ["pushed"]);
}

fn fake_store() -> LoadedStore {
    let store: SecretStore = serde_json::from_value(json!({
        "apiVersion": "external-secrets.io/v1",
        "kind": "SecretStore",
        "metadata": {"name": "fake", "namespace": NS, "uid": "store-uid"},
        "spec": {"provider": {"fake": {"data": []}}},
    }))
    .unwrap();
    LoadedStore::from_secret_store(&store)
}

/// A store's reconcile is told at once that the PushSecrets are not known yet, rather than wait
/// for their first list in a worker (up to 10 s before); once they are listed it gets the answer.
#[tokio::test]
async fn a_store_is_not_kept_waiting_for_the_pushsecrets_to_be_listed() {
    use kube::runtime::{reflector, watcher};
    let (cache, mut writer) = reflector::store::<Watched>();
    let loaded = fake_store();
    let known = Known::new(cache);
    assert_eq!(holding(&known, &loaded), None, "not known yet");
    let mut listed = std::pin::pin!(listed(known.clone()));
    assert!(futures::poll!(futures::StreamExt::next(&mut listed)).is_pending());
    writer.apply_watcher_event(&watcher::Event::Init);
    writer.apply_watcher_event(&watcher::Event::InitApply(kube::core::DeserializeGuard(
        Ok(push_secret(None, false)),
    )));
    writer.apply_watcher_event(&watcher::Event::InitDone);
    known.listed.observe(&watcher::Event::<Watched>::InitDone);
    assert_eq!(
        futures::StreamExt::next(&mut listed).await,
        Some(()),
        "the stores are told once"
    );
    assert_eq!(
        holding(&known, &loaded),
        Some(true),
        "a Delete PushSecret holds it"
    );
}

/// Asking early whether PushSecrets hold a store takes nothing from the PushSecret controller,
/// which awaits the same cache's first list: kube-runtime wakes only the task that polled that
/// readiness last, and an answer at once (a poll with no task to wake) took the wake-up, so the
/// controller waited for its watch's next event after the list was in.
#[tokio::test]
async fn an_early_answer_leaves_the_pushsecret_controller_its_wake_up() {
    use kube::runtime::{reflector, watcher};
    let (cache, mut writer) = reflector::store::<Watched>();
    // As kube's controller does before its first reconcile.
    let controller = tokio::spawn({
        let cache = cache.clone();
        async move { cache.wait_until_ready().await.is_ok() }
    });
    tokio::task::yield_now().await;
    let loaded = fake_store();
    let known = Known::new(cache);
    assert_eq!(holding(&known, &loaded), None, "not known yet");
    writer.apply_watcher_event(&watcher::Event::Init);
    writer.apply_watcher_event(&watcher::Event::InitDone);
    known.listed.observe(&watcher::Event::<Watched>::InitDone);
    let waited = tokio::time::timeout(std::time::Duration::from_secs(2), controller).await;
    assert!(
        matches!(waited, Ok(Ok(true))),
        "the controller still waits for the first list, which is in"
    );
}
