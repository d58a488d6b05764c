//! The kube-backed resolver against an API server stand-in: which references it serves, the
//! SecretStore namespace rule, ESO's v2alpha1 kinds, the watch cache (no GET per call once it is
//! filled) and the client cache.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use external_secrets_provider_server::{KubeResolver, Resolver, served_registry};
use provider::{Error, ProviderRegistry, RemoteRef};
use provider_protocol::v1;
use serde_json::{Value, json};

const NS: &str = "team-a";

fn fake_object(api_version: &str, name: &str, value: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": "Fake",
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "generation": 1, "resourceVersion": "1"},
        "spec": {"data": [{"key": "k", "value": value}]},
    })
}

/// A Vault object of team-a whose token is a Secret of another namespace.
fn vault_reading_kube_system() -> Value {
    json!({
        "apiVersion": "providers.external-secrets.io/v1alpha1",
        "kind": "Vault",
        "metadata": {"name": "vault", "namespace": NS, "uid": "uid-vault", "generation": 1, "resourceVersion": "1"},
        "spec": {"server": "http://127.0.0.1:1", "path": "secret", "version": "v2",
                 "auth": {"tokenSecretRef": {"name": "root", "namespace": "kube-system", "key": "token"}}},
    })
}

fn respond(status: u16, body: Value) -> http::Response<kube::client::Body> {
    let mut answer = http::Response::new(kube::client::Body::from(body.to_string().into_bytes()));
    *answer.status_mut() = http::StatusCode::from_u16(status).unwrap();
    answer
}

fn not_found() -> http::Response<kube::client::Body> {
    respond(
        404,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "not found", "reason": "NotFound", "code": 404}),
    )
}

/// Serves our namespaced Fake `db` by list (and a watch that never answers), ESO's Fake `eso-db`
/// by GET only (its CRD is "missing", so it is read per call), and records every other request.
fn api_server(gets: Arc<Mutex<Vec<String>>>) -> kube::Client {
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let path = req.uri().path().to_owned();
        let query = req.uri().query().unwrap_or_default().to_owned();
        let gets = gets.clone();
        async move {
            if query.contains("watch=true") {
                // A watch that stays open and quiet.
                futures::future::pending::<()>().await;
            }
            let ours = "/apis/providers.external-secrets.io/v1alpha1";
            let answer = match path.as_str() {
                p if p == format!("{ours}/fakes") => respond(
                    200,
                    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"},
                           "items": [fake_object("providers.external-secrets.io/v1alpha1", "db", "ours")]}),
                ),
                p if p == format!("{ours}/vaults") => respond(
                    200,
                    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"},
                           "items": [vault_reading_kube_system()]}),
                ),
                "/apis/cluster.providers.external-secrets.io/v1alpha1/fakes"
                | "/apis/cluster.providers.external-secrets.io/v1alpha1/vaults" => respond(
                    200,
                    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": []}),
                ),
                "/apis/provider.external-secrets.io/v2alpha1/namespaces/team-a/fakes/eso-db" => {
                    gets.lock().unwrap().push(path.clone());
                    respond(
                        200,
                        fake_object("provider.external-secrets.io/v2alpha1", "eso-db", "eso's"),
                    )
                }
                _ => {
                    gets.lock().unwrap().push(path.clone());
                    not_found()
                }
            };
            Ok::<_, std::convert::Infallible>(answer)
        }
    });
    kube::Client::new(service, "default")
}

fn reference(api_version: &str, kind: &str, name: &str, store: &str) -> v1::ProviderReference {
    v1::ProviderReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        namespace: NS.into(),
        store_ref_kind: store.into(),
    }
}

async fn resolver(gets: Arc<Mutex<Vec<String>>>) -> KubeResolver {
    let mut compiled_in = ProviderRegistry::default();
    compiled_in.register(Arc::new(provider_fake::Fake::default()));
    compiled_in.register(Arc::new(provider_vault::Vault::default()));
    let served = served_registry(&compiled_in, &["Fake".to_owned(), "Vault".to_owned()]).unwrap();
    KubeResolver::start(api_server(gets), served, &mut Default::default()).await
}

fn key() -> RemoteRef {
    RemoteRef {
        key: "k".into(),
        ..Default::default()
    }
}

#[test]
fn a_kind_not_compiled_in_is_named_with_the_ones_that_are() {
    let mut compiled_in = ProviderRegistry::default();
    compiled_in.register(Arc::new(provider_fake::Fake::default()));
    let e = served_registry(&compiled_in, &["Vault".to_owned()])
        .err()
        .unwrap();
    assert_eq!(
        e,
        "provider Vault is not compiled into this build (compiled in: Fake)"
    );
    assert!(served_registry(&compiled_in, &[]).is_err());
}

#[tokio::test]
async fn serves_our_kinds_from_the_watch_cache_and_caches_clients() {
    let gets = Arc::new(Mutex::new(Vec::new()));
    let resolver = resolver(gets.clone()).await;
    let db = reference(
        "providers.external-secrets.io/v1alpha1",
        "Fake",
        "db",
        "SecretStore",
    );
    // Once the cache holds the object, a call reads nothing.
    let mut cached = false;
    for _ in 0..100 {
        gets.lock().unwrap().clear();
        let resolved = resolver.resolve(&db, NS).await.unwrap();
        assert_eq!(resolved.client.get_secret(&key()).await.unwrap(), b"ours");
        if gets.lock().unwrap().is_empty() {
            cached = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(cached, "every call still reads: {:?}", gets.lock().unwrap());
    let (a, b) = (
        resolver.resolve(&db, NS).await.unwrap(),
        resolver.resolve(&db, NS).await.unwrap(),
    );
    assert!(
        Arc::ptr_eq(&a.client, &b.client),
        "the client is built again"
    );
    assert_eq!(a.spec["data"][0]["value"], "ours");
}

#[tokio::test]
async fn refuses_what_it_does_not_serve_and_a_secret_store_of_another_namespace() {
    let gets = Arc::new(Mutex::new(Vec::new()));
    let resolver = resolver(gets.clone()).await;
    for (api_version, kind) in [
        ("providers.external-secrets.io/v1alpha1", "Gitlab"),
        ("example.com/v1", "Fake"),
        ("provider.external-secrets.io/v1", "Fake"),
        ("provider.external-secrets.io/v2alpha1", "SecretsManager"),
        ("nonsense", "Fake"),
    ] {
        match resolver
            .resolve(&reference(api_version, kind, "db", "SecretStore"), NS)
            .await
        {
            Err(Error::InvalidSpec(m)) => assert_eq!(
                m,
                format!("this server serves Fake, Vault; not {api_version} {kind}")
            ),
            Err(e) => panic!("{api_version} {kind}: {e:?}"),
            Ok(_) => panic!("{api_version} {kind} was served"),
        }
    }
    // Capabilities need no object.
    let served = reference(
        "providers.external-secrets.io/v1alpha1",
        "Fake",
        "anything",
        "",
    );
    let count = gets.lock().unwrap().len();
    assert_eq!(
        resolver
            .provider(&served, NS)
            .await
            .unwrap()
            .descriptor()
            .kind,
        "Fake"
    );
    assert_eq!(
        gets.lock().unwrap().len(),
        count,
        "Capabilities read something"
    );

    // A SecretStore's ExternalSecrets share its namespace.
    let db = reference(
        "providers.external-secrets.io/v1alpha1",
        "Fake",
        "db",
        "SecretStore",
    );
    match resolver.resolve(&db, "team-b").await {
        Err(e @ Error::Credentials { .. }) => {
            assert_eq!(
                provider_protocol::error_to_status(&e).code(),
                tonic::Code::PermissionDenied
            );
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    // A ClusterSecretStore may be used from any namespace.
    let cluster = reference(
        "providers.external-secrets.io/v1alpha1",
        "Fake",
        "db",
        "ClusterSecretStore",
    );
    assert!(resolver.resolve(&cluster, "team-b").await.is_ok());

    // An object that does not exist is a configuration error, never NOT_FOUND.
    let missing = reference(
        "providers.external-secrets.io/v1alpha1",
        "Fake",
        "missing",
        "SecretStore",
    );
    match resolver.resolve(&missing, NS).await {
        Err(Error::InvalidSpec(_)) => {}
        other => panic!("{:?}", other.map(|_| ())),
    }
}

#[tokio::test]
async fn serves_esos_own_fake_kind_apart_from_ours() {
    let gets = Arc::new(Mutex::new(Vec::new()));
    let resolver = resolver(gets.clone()).await;
    let eso = reference(
        "provider.external-secrets.io/v2alpha1",
        "Fake",
        "eso-db",
        "SecretStore",
    );
    let resolved = resolver.resolve(&eso, NS).await.unwrap();
    assert_eq!(resolved.client.get_secret(&key()).await.unwrap(), b"eso's");
    // Its CRD is "missing": read per call.
    let reads = gets
        .lock()
        .unwrap()
        .iter()
        .filter(|p| p.ends_with("/fakes/eso-db"))
        .count();
    assert_eq!(reads, 1);
    let missing = reference(
        "provider.external-secrets.io/v2alpha1",
        "Fake",
        "nope",
        "SecretStore",
    );
    match resolver.resolve(&missing, NS).await {
        Err(Error::InvalidSpec(m)) => assert!(m.contains("does not exist"), "{m}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
}

/// A namespaced provider object reads credentials only from its own namespace, also when a
/// ClusterSecretStore names it: whoever may edit the object must not reach, through a cluster
/// store, the Secrets of namespaces they cannot read.
#[tokio::test]
async fn a_namespaced_object_reads_credentials_of_its_namespace_only_whoever_calls() {
    let gets = Arc::new(Mutex::new(Vec::new()));
    let resolver = resolver(gets.clone()).await;
    for store in ["SecretStore", "ClusterSecretStore"] {
        let vault = reference(
            "providers.external-secrets.io/v1alpha1",
            "Vault",
            "vault",
            store,
        );
        // Until the watch cache holds the object the error is another one.
        let mut refusal = String::new();
        for _ in 0..100 {
            refusal = match resolver.resolve(&vault, NS).await {
                Ok(resolved) => format!("{:?}", resolved.client.get_secret(&key()).await),
                Err(e) => format!("{e:?}"),
            };
            if refusal.contains("kube-system") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            refusal.starts_with("InvalidSpec(")
                && refusal.contains("auth.tokenSecretRef.namespace")
                && refusal.contains("is not allowed"),
            "{store}: {refusal}"
        );
        let read: Vec<_> = gets
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.contains("/namespaces/kube-system/"))
            .cloned()
            .collect();
        assert!(read.is_empty(), "{store}: read {read:?}");
    }
}
