//! The client cache, against a provider that records what it is asked and an API server stand-in
//! that only answers metadata reads of credential Secrets and counts them: the call sequence is
//! the point here.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use provider::{
    Capabilities, CredentialKind, CredentialsReader, Descriptor, FindRequest, ProviderRuntime,
    ProviderSchema, PushRemoteRef, PushRequest, RemoteRef, SecretsClient, SpecReport, Validation,
};
use provider_protocol::v1;
use serde_json::{Value, json};

use super::*;

#[derive(Default)]
struct Recorder {
    referents: Mutex<Vec<(Caller, String)>>,
    built: AtomicUsize,
    closed: Arc<AtomicUsize>,
}

struct Recording(Arc<Recorder>);

impl ProviderSchema for Recording {
    // Any descriptor will do: the cache keys on the object's identity, not on the kind's names.
    fn descriptor(&self) -> &'static Descriptor {
        &api::providers::fake::DESCRIPTOR
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::ReadOnly
    }
    fn apply_referent(
        &self,
        mut spec: Value,
        caller: Caller,
        namespace: &str,
    ) -> provider::Result<Value> {
        self.0
            .referents
            .lock()
            .unwrap()
            .push((caller, namespace.to_owned()));
        // As every provider's: the caller does not change what is resolved, only whether a
        // reference may leave `namespace` (refused by the client manager).
        spec["resolvedNamespace"] = json!(namespace);
        Ok(spec)
    }
    fn validate_spec(&self, _: &Value) -> provider::Result<SpecReport> {
        Ok(SpecReport::default())
    }
    fn credential_refs(&self, spec: &Value, namespace: &str) -> Vec<CredentialRef> {
        spec["credentials"]
            .as_str()
            .map(|name| CredentialRef {
                kind: CredentialKind::Secret,
                namespace: spec["credentialsNamespace"]
                    .as_str()
                    .unwrap_or(namespace)
                    .to_owned(),
                name: name.to_owned(),
            })
            .into_iter()
            .collect()
    }
}

#[async_trait]
impl ProviderRuntime for Recording {
    async fn new_client(
        &self,
        request: ClientRequest,
        _: Arc<dyn CredentialsReader>,
    ) -> provider::Result<Box<dyn SecretsClient>> {
        self.0.built.fetch_add(1, Ordering::SeqCst);
        // As a real build does I/O: other reconciles run meanwhile.
        tokio::task::yield_now().await;
        Ok(Box::new(RecordingClient {
            spec: request.spec,
            closed: self.0.closed.clone(),
        }))
    }
}

struct RecordingClient {
    spec: Value,
    closed: Arc<AtomicUsize>,
}

#[async_trait]
impl SecretsClient for RecordingClient {
    async fn get_secret(&self, _: &RemoteRef) -> provider::Result<Vec<u8>> {
        Ok(self.spec.to_string().into_bytes())
    }
    async fn get_secret_map(&self, _: &RemoteRef) -> provider::Result<BTreeMap<String, Vec<u8>>> {
        Err(provider::Error::NoSecret)
    }
    async fn get_all_secrets(
        &self,
        _: &FindRequest,
    ) -> provider::Result<BTreeMap<String, Vec<u8>>> {
        Err(provider::Error::NoSecret)
    }
    async fn push_secret(&self, _: &PushRequest) -> provider::Result<()> {
        Ok(())
    }
    async fn delete_secret(&self, _: &PushRemoteRef) -> provider::Result<()> {
        Ok(())
    }
    async fn secret_exists(&self, _: &PushRemoteRef) -> provider::Result<bool> {
        Ok(false)
    }
    async fn validate(&self) -> provider::Result<Validation> {
        Ok(Validation::Ready)
    }
    async fn close(&self) -> provider::Result<()> {
        self.closed.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Answers a GET of any Secret's metadata with resourceVersion 1 and counts those GETs; the
/// credential watch gets an error, and the tests play its part.
fn kube_counting_reads(reads: Arc<AtomicU64>) -> kube::Client {
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let watch = req.uri().query().is_some_and(|q| q.contains("watch"))
            || req.uri().path().ends_with("/secrets");
        if !watch {
            reads.fetch_add(1, Ordering::SeqCst);
        }
        async move {
            if watch {
                let mut answer = http::Response::new(kube::client::Body::from(Vec::new()));
                *answer.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
                return Ok::<_, std::convert::Infallible>(answer);
            }
            let name = req
                .uri()
                .path()
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_owned();
            let body = json!({
                "apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadata",
                "metadata": {"name": name, "resourceVersion": "1"},
            });
            Ok::<_, std::convert::Infallible>(http::Response::new(kube::client::Body::from(
                body.to_string().into_bytes(),
            )))
        }
    });
    kube::Client::new(service, "default")
}

fn manager(recorder: &Arc<Recorder>, reads: Arc<AtomicU64>) -> ClientManager {
    let mut registry = ProviderRegistry::default();
    registry.register(Arc::new(Recording(recorder.clone())));
    ClientManager::new(
        kube_counting_reads(reads),
        Arc::new(registry),
        true,
        "default".into(),
        Metrics::default(),
    )
}

fn object(registry: &ProviderRegistry, generation: i64, spec: Value) -> ProviderObject {
    ProviderObject {
        provider: registry.by_kind("Fake").unwrap().clone(),
        api_version: "cluster.providers.external-secrets.io/v1alpha1".into(),
        identity: ProviderIdentity {
            kind: "Fake".into(),
            namespace: None,
            name: "shared".into(),
        },
        uid: Some("uid-1".into()),
        generation: Some(generation),
        spec,
    }
}

/// Reconciles that miss the cache together all end up holding the first client built: one
/// that replaced another under its users (closing it) lost their token and Vault's
/// read-your-writes state between a push and the read after it.
#[tokio::test]
async fn concurrent_builds_hand_out_one_client() {
    let recorder = Arc::new(Recorder::default());
    let m = manager(&recorder, Arc::default());
    let spec = json!({"credentials": "token"});
    let handles = futures::future::join_all((0..8).map(|_| {
        let o = object(m.registry(), 1, spec.clone());
        let m = &m;
        async move {
            m.client(o, Caller::ClusterSecretStore, "team-a")
                .await
                .unwrap()
        }
    }))
    .await;
    assert!(
        recorder.built.load(Ordering::SeqCst) > 1,
        "the builds did not overlap, so this proves nothing"
    );
    let later = m
        .client(
            object(m.registry(), 1, spec),
            Caller::ClusterSecretStore,
            "team-a",
        )
        .await
        .unwrap();
    for handle in &handles {
        assert!(
            Arc::ptr_eq(&handle.client, &later.client),
            "a caller holds a client the cache no longer has"
        );
    }
    assert_eq!(
        recorder.closed.load(Ordering::SeqCst),
        recorder.built.load(Ordering::SeqCst) - 1,
        "every surplus client is closed, the one in use is not"
    );
}

#[tokio::test]
async fn clients_are_reused_until_their_inputs_change() {
    let recorder = Arc::new(Recorder::default());
    let reads = Arc::new(AtomicU64::new(0));
    let m = manager(&recorder, reads.clone());
    let spec = json!({"credentials": "token"});
    let get = |generation, ns: &'static str| {
        let o = object(m.registry(), generation, spec.clone());
        let m = &m;
        async move { m.client(o, Caller::ClusterSecretStore, ns).await.unwrap() }
    };

    let first = get(1, "team-a").await;
    let again = get(1, "team-a").await;
    assert!(
        Arc::ptr_eq(&first.client, &again.client),
        "same inputs reuse the client"
    );
    assert_eq!(recorder.built.load(Ordering::SeqCst), 1);

    // A referent store used from another namespace gets a client of its own, resolved there.
    let other = get(1, "team-b").await;
    assert!(!Arc::ptr_eq(&first.client, &other.client));
    let resolved = other
        .client
        .get_secret(&RemoteRef::default())
        .await
        .unwrap();
    assert!(String::from_utf8(resolved).unwrap().contains("team-b"));
    assert!(
        recorder
            .referents
            .lock()
            .unwrap()
            .contains(&(Caller::ClusterSecretStore, "team-b".into()))
    );

    // A new generation of the provider object replaces the client; the old one is closed once
    // its users let go.
    let newer = get(2, "team-a").await;
    assert!(!Arc::ptr_eq(&first.client, &newer.client));
    drop((first, again));
    settle().await;
    assert_eq!(recorder.closed.load(Ordering::SeqCst), 1);

    // The credential Secret was read once per namespace, not once per call.
    assert_eq!(reads.load(Ordering::SeqCst), 2);

    // Rotated credentials, as the watch reports them, do too.
    credentials::CredentialVersions::observe(
        &m.credentials.versions,
        CredentialRef {
            kind: CredentialKind::Secret,
            namespace: "team-a".into(),
            name: "token".into(),
        },
        Some("2".into()),
    );
    let rotated = get(2, "team-a").await;
    assert!(!Arc::ptr_eq(&newer.client, &rotated.client));
    drop(newer);
    settle().await;
    assert_eq!(recorder.closed.load(Ordering::SeqCst), 2);
    assert_eq!(recorder.built.load(Ordering::SeqCst), 4);
    assert_eq!(
        reads.load(Ordering::SeqCst),
        2,
        "the watch, not a read, saw it"
    );

    // Forgetting the provider object closes every client built from it.
    let identity = rotated.identity.clone();
    drop((rotated, other));
    m.forget(&identity).await;
    assert_eq!(recorder.closed.load(Ordering::SeqCst), 4);
}

/// Lets the tasks that close clients let go of (shared.rs) run.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

fn namespaced_object(registry: &ProviderRegistry, generation: i64) -> ProviderObject {
    let mut o = object(registry, generation, json!({"credentials": "token"}));
    o.identity.namespace = Some("team-a".into());
    o
}

/// A store's check, its provider object's own check (the store reconciler and the provider
/// reconciler) and its ExternalSecrets use one client: for Vault, one login rather than two.
#[tokio::test]
async fn callers_of_one_scope_share_a_client() {
    let recorder = Arc::new(Recorder::default());
    let m = manager(&recorder, Arc::default());
    let get = |caller, ns: &'static str| {
        let o = namespaced_object(m.registry(), 1);
        let m = &m;
        async move { m.client(o, caller, ns).await.unwrap() }
    };
    let store = get(Caller::SecretStore, "team-a").await;
    let own = get(Caller::Provider, "team-a").await;
    assert!(Arc::ptr_eq(&store.client, &own.client));
    // A ClusterSecretStore naming the namespaced object works in the object's namespace.
    let through_cluster_store = get(Caller::ClusterSecretStore, "team-b").await;
    assert!(Arc::ptr_eq(&store.client, &through_cluster_store.client));
    assert_eq!(recorder.built.load(Ordering::SeqCst), 1);

    // Cluster-scoped: a ClusterSecretStore's check and the object's own share one too, but
    // not with a namespaced caller, whose credentials follow other rules.
    let cluster = |caller, ns: &'static str| {
        let o = object(m.registry(), 1, json!({"credentials": "token"}));
        let m = &m;
        async move { m.client(o, caller, ns).await.unwrap() }
    };
    let cluster_store = cluster(Caller::ClusterSecretStore, "").await;
    let cluster_own = cluster(Caller::ClusterProvider, "").await;
    assert!(Arc::ptr_eq(&cluster_store.client, &cluster_own.client));
    assert!(!Arc::ptr_eq(&store.client, &cluster_store.client));
    assert_eq!(recorder.built.load(Ordering::SeqCst), 2);
}

/// The rule the reverted attempt at one shared client broke: a client replaced while a
/// reconcile holds it (its provider object changed) keeps working for that reconcile, its
/// token not revoked, and is closed when the last holder lets go.
#[tokio::test]
async fn a_replaced_client_is_closed_on_its_last_drop() {
    let recorder = Arc::new(Recorder::default());
    let m = manager(&recorder, Arc::default());
    let held = m
        .client(
            namespaced_object(m.registry(), 1),
            Caller::SecretStore,
            "team-a",
        )
        .await
        .unwrap();
    let also_held = held.clone();
    let newer = m
        .client(
            namespaced_object(m.registry(), 2),
            Caller::SecretStore,
            "team-a",
        )
        .await
        .unwrap();
    assert!(!Arc::ptr_eq(&held.client, &newer.client));
    settle().await;
    assert_eq!(recorder.closed.load(Ordering::SeqCst), 0, "still held");
    assert!(held.client.get_secret(&RemoteRef::default()).await.is_ok());
    drop(held);
    settle().await;
    assert_eq!(recorder.closed.load(Ordering::SeqCst), 0, "one holder left");
    drop(also_held);
    settle().await;
    assert_eq!(recorder.closed.load(Ordering::SeqCst), 1);

    // Evicted while held (its object deleted): closed when let go, not before.
    m.forget(&newer.identity).await;
    assert_eq!(recorder.closed.load(Ordering::SeqCst), 1);
    drop(newer);
    settle().await;
    assert_eq!(recorder.closed.load(Ordering::SeqCst), 2);
}

/// Two reconciles whose watch caches hold different generations of the provider object (the
/// store's check reads the object it just wrote before its cache has it) do not replace each
/// other's client back and forth, a login each time: the one behind uses the newer client.
#[tokio::test]
async fn a_caller_behind_by_a_generation_uses_the_newer_client() {
    let recorder = Arc::new(Recorder::default());
    let m = manager(&recorder, Arc::default());
    let get = |generation, caller| {
        let o = namespaced_object(m.registry(), generation);
        let m = &m;
        async move { m.client(o, caller, "team-a").await.unwrap() }
    };
    let newer = get(2, Caller::Provider).await;
    let behind = get(1, Caller::SecretStore).await;
    assert!(Arc::ptr_eq(&newer.client, &behind.client));
    let again = get(2, Caller::Provider).await;
    assert!(Arc::ptr_eq(&newer.client, &again.client));
    assert_eq!(recorder.built.load(Ordering::SeqCst), 1);
    // A recreated object (another uid) is not behind, whatever its generation.
    let mut recreated = namespaced_object(m.registry(), 1);
    recreated.uid = Some("uid-2".into());
    let fresh = m
        .client(recreated, Caller::SecretStore, "team-a")
        .await
        .unwrap();
    assert!(!Arc::ptr_eq(&newer.client, &fresh.client));
    assert_eq!(recorder.built.load(Ordering::SeqCst), 2);
}

/// A store deleted (or no longer used) leaves no client behind: its token is revoked and its
/// connections closed once no reconcile has asked for it for a while.
#[tokio::test(start_paused = true)]
async fn idle_clients_are_closed() {
    let recorder = Arc::new(Recorder::default());
    let m = manager(&recorder, Arc::default());
    let get = |name: &'static str| {
        let mut o = object(m.registry(), 1, json!({}));
        o.identity.name = name.into();
        let m = &m;
        async move {
            m.client(o, Caller::ClusterSecretStore, "team-a")
                .await
                .unwrap()
        }
    };
    let idle = std::time::Duration::from_secs(15 * 60);
    let kept = get("in-use").await;
    get("deleted").await;
    for _ in 0..3 {
        tokio::time::advance(idle / 2).await;
        assert!(Arc::ptr_eq(&kept.client, &get("in-use").await.client));
        m.evict_idle(idle).await;
    }
    assert_eq!(
        recorder.closed.load(Ordering::SeqCst),
        1,
        "only the unused client is closed"
    );
    assert!(Arc::ptr_eq(&kept.client, &get("in-use").await.client));
    get("deleted").await;
    assert_eq!(
        recorder.built.load(Ordering::SeqCst),
        3,
        "built again when asked for"
    );
}

/// The credentials of evicted clients are forgotten, and a namespace none of the cached clients
/// reads from is no longer watched: a namespace whose stores are gone costs nothing.
#[tokio::test(start_paused = true)]
async fn evicted_clients_take_their_credential_watches_with_them() {
    let recorder = Arc::new(Recorder::default());
    let reads = Arc::new(AtomicU64::default());
    let m = manager(&recorder, reads.clone());
    let get = |namespace: &'static str| {
        let o = object(m.registry(), 1, json!({"credentials": "token"}));
        let m = &m;
        async move {
            m.client(o, Caller::ClusterSecretStore, namespace)
                .await
                .unwrap()
        }
    };
    let secret = |ns: &str| (provider::CredentialKind::Secret, ns.to_owned());
    let idle = std::time::Duration::from_secs(15 * 60);
    get("team-a").await;
    tokio::time::advance(idle / 2).await;
    get("team-b").await;
    assert_eq!(
        m.credentials.watched(),
        [secret("team-a"), secret("team-b")].into_iter().collect()
    );
    tokio::time::advance(idle / 2).await;
    m.evict_idle(idle).await;
    assert_eq!(
        m.credentials.watched(),
        [secret("team-b")].into_iter().collect(),
        "team-a's only client was evicted"
    );
    let known: Vec<String> = m
        .credentials
        .versions
        .lock()
        .unwrap()
        .keys()
        .map(ToString::to_string)
        .collect();
    assert_eq!(known, ["Secret team-b/token"]);
    let before = reads.load(Ordering::SeqCst);
    get("team-a").await;
    assert_eq!(
        reads.load(Ordering::SeqCst),
        before + 1,
        "read again, since nothing watched it meanwhile"
    );
    assert_eq!(m.credentials.watched().len(), 2);
}

#[tokio::test]
async fn namespaced_callers_cannot_reach_into_other_namespaces() {
    let recorder = Arc::new(Recorder::default());
    let m = manager(&recorder, Arc::default());
    let spec = json!({"credentials": "token", "credentialsNamespace": "kube-system"});
    for caller in [Caller::SecretStore, Caller::Provider] {
        let o = object(m.registry(), 1, spec.clone());
        let err = m.client(o, caller, "team-a").await.err().unwrap();
        assert_eq!(
            err.to_string(),
            r#"credentials must come from namespace "team-a", not Secret kube-system/token"#
        );
    }
    assert_eq!(recorder.built.load(Ordering::SeqCst), 0);
    // A cluster-wide caller may name any namespace.
    let o = object(m.registry(), 1, spec);
    m.client(o, Caller::ClusterSecretStore, "team-a")
        .await
        .unwrap();
}

#[tokio::test]
async fn the_credentials_reader_refuses_other_namespaces_too() {
    let reader = credentials::KubeCredentials {
        kube: kube_counting_reads(Arc::default()),
        caller: Caller::SecretStore,
        home: "team-a".into(),
    };
    let err = reader
        .secret_key("kube-system", "admin", "token")
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains(r#"must come from namespace "team-a""#),
        "{err}"
    );
}

#[test]
fn stores_are_used_only_for_what_they_can_do() {
    use api::provider_kinds::Capabilities::{ReadOnly, ReadWrite, WriteOnly};
    let table: Vec<_> = [ReadOnly, WriteOnly, ReadWrite]
        .into_iter()
        .map(|c| {
            (
                super::refusal(true, c).is_some(),
                super::refusal(false, c).is_some(),
            )
        })
        .collect();
    // (an ExternalSecret refused, a PushSecret refused)
    assert_eq!(table, [(false, true), (true, false), (false, false)]);
    assert_eq!(
        super::refusal(false, ReadOnly),
        Some("read-only: PushSecrets cannot write to it")
    );
}

#[tokio::test]
async fn a_class_knows_the_stores_it_serves() {
    use api::store::{ClusterSecretStore, SecretStore};
    use kube::runtime::{reflector, watcher};

    let recorder = Arc::new(Recorder::default());
    let m = manager(&recorder, Arc::default())
        .route_kinds([("Fake".to_owned(), "fake-server".to_owned())].into());
    let fake = json!({"apiVersion": "providers.external-secrets.io/v1alpha1", "kind": "Fake", "name": "p"});
    let store = |ns: &str, name: &str, spec: Value| -> SecretStore {
        serde_json::from_value(json!({
            "apiVersion": "external-secrets.io/v1", "kind": "SecretStore",
            "metadata": {"name": name, "namespace": ns, "uid": name},
            "spec": spec,
        }))
        .unwrap()
    };
    let (stores, mut writer) = reflector::store::<SecretStore>();
    for s in [
        store(
            "team-a",
            "own",
            json!({"providerRef": fake, "runtimeRef": {"name": "vault"}}),
        ),
        store(
            "team-b",
            "elsewhere",
            json!({"providerRef": fake, "runtimeRef": {"name": "vault"}}),
        ),
        store(
            "team-a",
            "cluster",
            json!({"providerRef": fake, "runtimeRef": {"kind": "ClusterProviderClass", "name": "vault"}}),
        ),
        store("team-b", "routed", json!({"providerRef": fake})),
        store(
            "team-b",
            "inline-routed",
            json!({"provider": {"fake": {"data": []}}}),
        ),
        store(
            "team-a",
            "other-class",
            json!({"providerRef": fake, "runtimeRef": {"name": "other"}}),
        ),
    ] {
        writer.apply_watcher_event(&watcher::Event::Apply(s));
    }
    let (cluster_stores, mut cluster_writer) = reflector::store::<ClusterSecretStore>();
    cluster_writer.apply_watcher_event(&watcher::Event::Apply(
        serde_json::from_value(json!({
            "apiVersion": "external-secrets.io/v1", "kind": "ClusterSecretStore",
            "metadata": {"name": "cluster-wide", "uid": "cluster-wide"},
            "spec": {"providerRef": {"apiVersion": "cluster.providers.external-secrets.io/v1alpha1", "kind": "Fake", "name": "p"},
                     "runtimeRef": {"kind": "ClusterProviderClass", "name": "vault"}},
        }))
        .unwrap(),
    ));
    m.use_store_caches(stores, cluster_stores);

    let served = |class: ClassRef| {
        let mut names: Vec<_> = m
            .stores_using_class(&class)
            .into_iter()
            .map(|s| s.name)
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        served(ClassRef {
            namespace: Some("team-a".into()),
            name: "vault".into()
        }),
        ["own"]
    );
    assert_eq!(
        served(ClassRef::cluster("vault")),
        ["cluster", "cluster-wide"]
    );
    assert_eq!(
        served(ClassRef::cluster("fake-server")),
        ["inline-routed", "routed"],
        "stores without a runtimeRef, by the route of their kind"
    );
}

/// A SecretStore past the CRD's rule (written before it, or with validation off) naming a
/// cluster-scoped provider object gets no client from it.
#[tokio::test]
async fn a_secret_store_never_reads_a_cluster_scoped_provider_object() {
    use api::provider_kinds::Scope;
    use api::store::{ClusterSecretStore, SecretStore};
    use kube::runtime::{reflector, watcher};

    let recorder = Arc::new(Recorder::default());
    let m = manager(&recorder, Arc::default());
    let (stores, mut writer) = reflector::store::<SecretStore>();
    writer.apply_watcher_event(&watcher::Event::Apply(
        serde_json::from_value(json!({
            "apiVersion": "external-secrets.io/v1", "kind": "SecretStore",
            "metadata": {"name": "escape", "namespace": "team-a", "uid": "escape"},
            "spec": {"providerRef": {"apiVersion": "cluster.providers.external-secrets.io/v1alpha1", "kind": "Fake", "name": "shared"}},
        }))
        .unwrap(),
    ));
    m.use_store_caches(stores, reflector::store::<ClusterSecretStore>().0);
    let resource = api::providers::fake::DESCRIPTOR.storage_resource(Scope::Cluster);
    let mut writer = reflector::store::Writer::new(resource.clone());
    writer.apply_watcher_event(&watcher::Event::Apply(
        serde_json::from_value::<DynamicObject>(json!({
            "apiVersion": resource.api_version, "kind": "Fake",
            "metadata": {"name": "shared", "uid": "shared", "generation": 1},
            "spec": {"credentials": "token"},
        }))
        .unwrap(),
    ));
    m.use_provider_cache(resource, writer.as_reader());

    let store = StoreRef {
        kind: StoreKind::SecretStore,
        name: "escape".into(),
    };
    let err = m.get_ungated(&store, "team-a").await.err().unwrap();
    assert!(
        err.to_string().starts_with(
            "spec.providerRef.apiVersion: a SecretStore references a namespaced provider kind"
        ),
        "{err}"
    );
    assert_eq!(recorder.built.load(Ordering::SeqCst), 0);
}

/// Only a store whose converted object differs from what its inline provider converts to is
/// named: the hand edit its store puts back, without revalidating every store at each event.
#[tokio::test]
async fn a_converted_object_edited_by_hand_names_its_store() {
    use api::store::{ClusterSecretStore, SecretStore};
    use kube::runtime::{reflector, watcher};

    let recorder = Arc::new(Recorder::default());
    let m = manager(&recorder, Arc::default());
    let (stores, mut writer) = reflector::store::<SecretStore>();
    for (name, spec) in [
        (
            "inline",
            json!({"provider": {"fake": {"data": [{"key": "a", "value": "1"}]}}}),
        ),
        (
            "by-ref",
            json!({"providerRef": {"apiVersion": "providers.external-secrets.io/v1alpha1", "kind": "Fake", "name": "inline"}}),
        ),
    ] {
        writer.apply_watcher_event(&watcher::Event::Apply(
            serde_json::from_value(json!({
                "apiVersion": "external-secrets.io/v1", "kind": "SecretStore",
                "metadata": {"name": name, "namespace": "team-a", "uid": name},
                "spec": spec,
            }))
            .unwrap(),
        ));
    }
    m.use_store_caches(stores, reflector::store::<ClusterSecretStore>().0);
    let identity = ProviderIdentity {
        kind: "Fake".into(),
        namespace: Some("team-a".into()),
        name: "inline".into(),
    };
    let drifted = |spec: Value| -> Vec<String> {
        m.stores_drifted_from(&identity, &spec)
            .into_iter()
            .map(|s| s.name)
            .collect()
    };
    assert!(drifted(json!({"data": [{"key": "a", "value": "1"}]})).is_empty());
    assert_eq!(
        drifted(json!({"data": [{"key": "a", "value": "edited"}]})),
        ["inline"]
    );
    assert_eq!(m.stores_using(&identity).len(), 2);
}

/// At a start, a store that looks up a provider kind whose controller is still filling its
/// cache waits for it, instead of hearing that the kind is not watched: that turned every store
/// NotReady (with a Warning event) and Ready again at each restart, and read the provider
/// object and its CRD one by one.
#[tokio::test]
async fn a_lookup_at_a_start_waits_for_the_kinds_cache() {
    use api::provider_kinds::Scope;
    use kube::runtime::{reflector, watcher};

    let reads = Arc::new(AtomicU64::new(0));
    let m = Arc::new(manager(&Arc::default(), reads.clone()));
    m.discovering_providers();
    let reference = namespaced_fake();
    let lookup = tokio::spawn({
        let (m, reference) = (m.clone(), reference.clone());
        async move { m.provider_object(&reference, Some("team-a")).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(!lookup.is_finished(), "the lookup waits for the kind");

    let resource = api::providers::fake::DESCRIPTOR.storage_resource(Scope::Namespaced);
    let mut writer = reflector::store::Writer::new(resource.clone());
    writer.apply_watcher_event(&watcher::Event::Apply(
        serde_json::from_value::<DynamicObject>(json!({
            "apiVersion": resource.api_version, "kind": "Fake",
            "metadata": {"name": "fake", "namespace": "team-a", "uid": "fake", "generation": 1},
            "spec": {"data": []},
        }))
        .unwrap(),
    ));
    m.use_provider_cache(resource, writer.as_reader());
    m.providers_discovered();
    let found = lookup.await.unwrap().map_err(|e| e.to_string()).unwrap();
    assert_eq!(found.identity.name, "fake");
    assert_eq!(reads.load(Ordering::SeqCst), 0, "nothing read one by one");
}

/// A discovery that never settles (the CRDs cannot be listed) holds one lookup for the bound,
/// not every lookup after it: it is given up on, and the kind reported as not watched.
#[tokio::test(start_paused = true)]
async fn a_discovery_that_never_settles_is_given_up_on() {
    let m = manager(&Arc::default(), Arc::default());
    m.discovering_providers();
    let reference = namespaced_fake();
    let started = tokio::time::Instant::now();
    let first = m.provider_object(&reference, Some("team-a")).await;
    assert!(first.is_err(), "the kind is not watched");
    assert!(started.elapsed() >= std::time::Duration::from_secs(10));
    assert!(m.providers_known(), "given up on");
    let again = tokio::time::Instant::now();
    let _ = m.provider_object(&reference, Some("team-a")).await;
    assert!(
        again.elapsed() < std::time::Duration::from_secs(1),
        "no second wait"
    );
}

/// A reference to the namespaced Fake object `fake`.
fn namespaced_fake() -> api::store::ProviderRef {
    api::store::ProviderRef {
        api_version: "providers.external-secrets.io/v1alpha1".into(),
        kind: "Fake".into(),
        name: "fake".into(),
        ..Default::default()
    }
}

/// A provider server that serves only Capabilities: UNAVAILABLE to the first question (it is
/// starting), READ_ONLY after.
#[derive(Default)]
struct Starting {
    asked: AtomicUsize,
}

type Answer<T> = std::result::Result<tonic::Response<T>, tonic::Status>;

#[tonic::async_trait]
impl provider_protocol::v1::secret_store_provider_server::SecretStoreProvider for Starting {
    async fn get_secret(
        &self,
        _: tonic::Request<v1::GetSecretRequest>,
    ) -> Answer<v1::GetSecretResponse> {
        Err(tonic::Status::unimplemented("GetSecret"))
    }
    async fn get_secret_map(
        &self,
        _: tonic::Request<v1::GetSecretMapRequest>,
    ) -> Answer<v1::GetSecretMapResponse> {
        Err(tonic::Status::unimplemented("GetSecretMap"))
    }
    async fn get_all_secrets(
        &self,
        _: tonic::Request<v1::GetAllSecretsRequest>,
    ) -> Answer<v1::GetAllSecretsResponse> {
        Err(tonic::Status::unimplemented("GetAllSecrets"))
    }
    async fn push_secret(
        &self,
        _: tonic::Request<v1::PushSecretRequest>,
    ) -> Answer<v1::PushSecretResponse> {
        Err(tonic::Status::unimplemented("PushSecret"))
    }
    async fn delete_secret(
        &self,
        _: tonic::Request<v1::DeleteSecretRequest>,
    ) -> Answer<v1::DeleteSecretResponse> {
        Err(tonic::Status::unimplemented("DeleteSecret"))
    }
    async fn secret_exists(
        &self,
        _: tonic::Request<v1::SecretExistsRequest>,
    ) -> Answer<v1::SecretExistsResponse> {
        Err(tonic::Status::unimplemented("SecretExists"))
    }
    async fn validate(
        &self,
        _: tonic::Request<v1::ValidateRequest>,
    ) -> Answer<v1::ValidateResponse> {
        Err(tonic::Status::unimplemented("Validate"))
    }
    async fn capabilities(
        &self,
        _: tonic::Request<v1::CapabilitiesRequest>,
    ) -> Answer<v1::CapabilitiesResponse> {
        if self.asked.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(tonic::Status::unavailable("starting"));
        }
        Ok(tonic::Response::new(v1::CapabilitiesResponse {
            capabilities: v1::SecretStoreCapabilities::ReadOnly.into(),
        }))
    }
}

/// A server that could not state its capabilities when its client was built is asked again
/// (after the breaker's first wait, since it answered UNAVAILABLE), not taken as READ_WRITE for
/// the client's life; what it states then is kept.
#[tokio::test]
async fn capabilities_a_server_could_not_state_are_asked_again_not_cached() {
    let recorder = Arc::new(Recorder::default());
    let m = manager(&recorder, Arc::default());
    let server = Arc::new(Starting::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(
                provider_protocol::v1::secret_store_provider_server::SecretStoreProviderServer::from_arc(
                    server.clone(),
                ),
            )
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let connection = m.pool().get(&address, None).unwrap();
    let slot = Slot {
        provider: ProviderIdentity {
            kind: "SqliteStore".into(),
            namespace: Some("team-a".into()),
            name: "db".into(),
        },
        namespaced: true,
        namespace: "team-a".into(),
    };
    let fingerprint = Fingerprint {
        uid: None,
        generation: None,
        credentials: BTreeMap::new(),
        runtime: None,
    };
    let lookup = async || {
        let (_, capabilities) = m
            .cached_or_build(slot.clone(), fingerprint.clone(), async || {
                Ok(Built::remote(
                    connection.clone(),
                    v1::ProviderReference::default(),
                    "team-a",
                    std::time::Duration::from_secs(5),
                ))
            })
            .await
            .unwrap();
        capabilities
    };

    // Not known yet: nothing is refused before the call.
    assert_eq!(lookup().await, Capabilities::ReadWrite);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(lookup().await, Capabilities::ReadOnly);
    assert_eq!(lookup().await, Capabilities::ReadOnly);
    assert_eq!(server.asked.load(Ordering::SeqCst), 2, "kept once stated");
    assert_eq!(m.cache.lock().unwrap().len(), 1, "one client all along");
}
