//! The client cache, against a provider that records what it is asked and an API server stand-in
//! that only answers metadata reads of credential Secrets: the call sequence is the point here.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use provider::{
    Capabilities, FindRequest, PushRemoteRef, PushRequest, RemoteRef, SecretsClient, SpecReport,
    Validation,
};
use serde_json::{Value, json};

use super::*;

#[derive(Default)]
struct Recorder {
    referents: Mutex<Vec<(Caller, String)>>,
    built: AtomicUsize,
    closed: Arc<AtomicUsize>,
}

struct Recording(Arc<Recorder>);

#[async_trait]
impl provider::Provider for Recording {
    fn kind(&self) -> &'static str {
        "Recording"
    }
    fn plural(&self) -> &'static str {
        "recordings"
    }
    fn store_key(&self) -> &'static str {
        "recording"
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
        if caller == Caller::ClusterSecretStore || caller == Caller::SecretStore {
            spec["resolvedNamespace"] = json!(namespace);
        }
        Ok(spec)
    }
    fn validate_spec(&self, _: &Value) -> provider::Result<SpecReport> {
        Ok(SpecReport::default())
    }
    fn credential_refs(&self, spec: &Value, namespace: &str) -> Vec<CredentialRef> {
        spec["credentials"]
            .as_str()
            .map(|name| CredentialRef {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            })
            .into_iter()
            .collect()
    }
    async fn new_client(
        &self,
        request: ClientRequest,
        _: kube::Client,
    ) -> provider::Result<Box<dyn SecretsClient>> {
        self.0.built.fetch_add(1, Ordering::SeqCst);
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

/// Answers a GET of any Secret's metadata with the current `resource_version`.
fn kube_with_secret_version(version: Arc<AtomicU64>) -> kube::Client {
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let version = version.load(Ordering::SeqCst);
        async move {
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
                "metadata": {"name": name, "resourceVersion": version.to_string()},
            });
            Ok::<_, std::convert::Infallible>(http::Response::new(kube::client::Body::from(
                body.to_string().into_bytes(),
            )))
        }
    });
    kube::Client::new(service, "default")
}

fn manager(recorder: &Arc<Recorder>, version: Arc<AtomicU64>) -> ClientManager {
    let mut registry = Registry::default();
    registry.register(Arc::new(Recording(recorder.clone())));
    ClientManager::new(
        kube_with_secret_version(version),
        Arc::new(registry),
        true,
        "default".into(),
        Metrics::default(),
    )
}

fn object(registry: &Registry, generation: i64, spec: Value) -> ProviderObject {
    ProviderObject {
        provider: registry.by_kind("Recording").unwrap().clone(),
        identity: ProviderIdentity {
            kind: "Recording".into(),
            namespace: None,
            name: "shared".into(),
        },
        uid: Some("uid-1".into()),
        generation: Some(generation),
        spec,
    }
}

#[tokio::test]
async fn clients_are_reused_until_their_inputs_change() {
    let recorder = Arc::new(Recorder::default());
    let version = Arc::new(AtomicU64::new(1));
    let m = manager(&recorder, version.clone());
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

    // A new generation of the provider object replaces the client and closes the old one.
    let newer = get(2, "team-a").await;
    assert!(!Arc::ptr_eq(&first.client, &newer.client));
    assert_eq!(recorder.closed.load(Ordering::SeqCst), 1);

    // Rotated credentials do too.
    version.store(2, Ordering::SeqCst);
    let rotated = get(2, "team-a").await;
    assert!(!Arc::ptr_eq(&newer.client, &rotated.client));
    assert_eq!(recorder.closed.load(Ordering::SeqCst), 2);
    assert_eq!(recorder.built.load(Ordering::SeqCst), 4);

    // Forgetting the provider object closes every client built from it.
    m.forget(&rotated.identity).await;
    assert_eq!(recorder.closed.load(Ordering::SeqCst), 4);
}
