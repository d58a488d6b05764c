//! An API server stand-in for reconciler tests: each request is answered by the test's handler
//! and kept, so a test can order events around a request deterministically and check what was
//! written.

use std::sync::{Arc, Mutex};

use http_body_util::BodyExt;
use serde_json::{Value, json};

use crate::context::{Context, Settings};
use crate::externalsecret::ExternalSecretContext;

#[derive(Clone, Debug)]
pub struct Request {
    pub method: http::Method,
    pub path: String,
    pub body: Value,
}

impl Request {
    pub fn is(&self, method: http::Method, path_end: &str) -> bool {
        self.method == method && self.path.ends_with(path_end)
    }
}

pub type Requests = Arc<Mutex<Vec<Request>>>;

/// The requests made so far to a path ending in `path_end`, with `method` when given.
fn matching(requests: &Requests, method: Option<&http::Method>, path_end: &str) -> Vec<Request> {
    let requests = requests.lock().unwrap();
    requests
        .iter()
        .filter(|r| method.is_none_or(|m| r.method == *m) && r.path.ends_with(path_end))
        .cloned()
        .collect()
}

/// How many requests went to a path ending in `path_end`.
pub fn count(requests: &Requests, path_end: &str) -> usize {
    matching(requests, None, path_end).len()
}

/// The statuses written, in order, by PATCHes of a path ending in `path_end`.
pub fn status_writes(requests: &Requests, path_end: &str) -> Vec<Value> {
    matching(requests, Some(&http::Method::PATCH), path_end)
        .into_iter()
        .map(|r| r.body["status"].clone())
        .collect()
}

/// A kube client whose requests `answer` serves as (status code, body).
pub fn client<F>(answer: F) -> (kube::Client, Requests)
where
    F: Fn(&Request) -> (u16, Value) + Send + Sync + 'static,
{
    let requests = Requests::default();
    let seen = requests.clone();
    let answer = Arc::new(answer);
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let (seen, answer) = (seen.clone(), answer.clone());
        async move {
            let (parts, body) = req.into_parts();
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let request = Request {
                method: parts.method,
                path: parts.uri.path().to_owned(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            let (code, body) = answer(&request);
            seen.lock().unwrap().push(request);
            let mut response =
                http::Response::new(kube::client::Body::from(body.to_string().into_bytes()));
            *response.status_mut() = http::StatusCode::from_u16(code).unwrap();
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    (kube::Client::new(service, "default"), requests)
}

/// The API server's answer to a request it refuses.
pub fn status(code: u16, reason: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": reason, "reason": reason, "code": code}),
    )
}

/// A context on `client` with the Fake provider built in.
pub fn context(client: kube::Client) -> Arc<Context> {
    context_with(client, Settings::default())
}

pub fn context_with(client: kube::Client, settings: Settings) -> Arc<Context> {
    context_in(
        client,
        settings,
        &mut prometheus_client::registry::Registry::default(),
    )
}

/// A context whose metrics are registered in `metrics`, for a test that reads them.
pub fn context_in(
    client: kube::Client,
    settings: Settings,
    metrics: &mut prometheus_client::registry::Registry,
) -> Arc<Context> {
    let mut registry = provider::ProviderRegistry::default();
    registry.register(Arc::new(provider_fake::Fake::default()));
    let manager = clientmanager::ClientManager::new(
        client.clone(),
        Arc::new(registry),
        true,
        "default".into(),
        clientmanager::Metrics::register(metrics),
    );
    // Watched but empty: no Fake object, so an inline store's converted form is used.
    let fake = kube::api::ApiResource {
        group: "providers.external-secrets.io".into(),
        version: "v1alpha1".into(),
        api_version: "providers.external-secrets.io/v1alpha1".into(),
        kind: "Fake".into(),
        plural: "fakes".into(),
    };
    let empty = kube::runtime::reflector::store::Writer::new(fake.clone()).as_reader();
    manager.use_provider_cache(fake, empty);
    Context::new(
        client,
        manager,
        crate::metrics::Metrics::register(metrics),
        settings,
    )
}

/// The ExternalSecret reconciler's context, and the events of targets it delivers to the
/// ExternalSecrets' trigger (generic targets' watch events and foreign events held during own
/// writes).
pub fn externalsecret_context(
    client: kube::Client,
    settings: Settings,
) -> (
    Arc<ExternalSecretContext>,
    futures::channel::mpsc::UnboundedReceiver<crate::own_writes::TargetChange>,
) {
    let (target_changed, target_changes) = futures::channel::mpsc::unbounded();
    (
        ExternalSecretContext::new(context_with(client, settings), target_changed),
        target_changes,
    )
}

/// Serves a Ready SecretStore `fake` in `namespace` with the Fake provider inline, serving
/// `data`: the store, and the Fake CRD (no Fake object: the store's converted form is used).
pub fn fake_store(request: &Request, namespace: &str, data: Value) -> Option<(u16, Value)> {
    if request.method != http::Method::GET {
        return None;
    }
    if request
        .path
        .ends_with(&format!("/namespaces/{namespace}/secretstores/fake"))
    {
        return Some((
            200,
            json!({
                "apiVersion": "external-secrets.io/v1",
                "kind": "SecretStore",
                "metadata": {"name": "fake", "namespace": namespace, "uid": "store-uid",
                             "generation": 1},
                "spec": {"provider": {"fake": {"data": data}}},
                "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Valid",
                    "message": "ok", "lastTransitionTime": "2024-01-01T00:00:00Z"}]},
            }),
        ));
    }
    let crd = "fakes.providers.external-secrets.io";
    if request.path.contains("/customresourcedefinitions/") && request.path.ends_with(crd) {
        return Some((
            200,
            json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": crd},
                "spec": {"group": "providers.external-secrets.io", "scope": "Namespaced",
                         "names": {"kind": "Fake", "plural": "fakes"}, "versions": []},
            }),
        ));
    }
    None
}
