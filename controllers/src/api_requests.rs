//! Requests this operator makes to the API server, counted by verb and resource
//! (`external_secrets_api_requests_total`): what a restart or a refresh wave costs the API
//! server is then read off the operator itself, without an audit log.

use std::task::{Context, Poll};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tower::{Layer, Service};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Kubernetes' verb: get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: &'static str,
    /// The resource, with its subresource: `secrets`, `externalsecrets/status`.
    pub resource: String,
}

#[derive(Clone, Default)]
pub struct ApiRequests(Family<RequestLabels, Counter>);

impl ApiRequests {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "external_secrets_api_requests",
            "Requests to the Kubernetes API server by verb and resource",
            self.0.clone(),
        );
    }

    fn count(&self, method: &http::Method, uri: &http::Uri) {
        let (verb, resource) = classify(method, uri);
        self.0
            .get_or_create(&RequestLabels { verb, resource })
            .inc();
    }
}

/// The verb and resource of a request, as the API server's own metrics name them.
fn classify(method: &http::Method, uri: &http::Uri) -> (&'static str, String) {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    // `/api/v1/...` or `/apis/<group>/<version>/...`.
    let rest = match segments.as_slice() {
        ["api", _, rest @ ..] => rest,
        ["apis", _, _, rest @ ..] => rest,
        _ => return (verb(method, false, uri), String::new()),
    };
    let rest = match rest {
        ["namespaces", _, resource, more @ ..] => {
            let mut r = vec![*resource];
            r.extend_from_slice(more);
            r
        }
        // A Namespace object itself, or a cluster-scoped resource.
        other => other.to_vec(),
    };
    let (resource, named) = match rest.as_slice() {
        [resource] => (resource.to_string(), false),
        [resource, _name] => (resource.to_string(), true),
        [resource, _name, sub, ..] => (format!("{resource}/{sub}"), true),
        [] => (String::new(), false),
    };
    (verb(method, named, uri), resource)
}

fn verb(method: &http::Method, named: bool, uri: &http::Uri) -> &'static str {
    let watch = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    match *method {
        http::Method::GET if watch => "watch",
        http::Method::GET if named => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if named => "delete",
        http::Method::DELETE => "deletecollection",
        _ => "other",
    }
}

impl<S> Layer<S> for ApiRequests {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            requests: self.clone(),
        }
    }
}

pub struct Counted<S> {
    inner: S,
    requests: ApiRequests,
}

impl<S, B> Service<http::Request<B>> for Counted<S>
where
    S: Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        self.requests.count(req.method(), req.uri());
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(method: http::Method, uri: &str) -> (&'static str, String) {
        classify(&method, &uri.parse().unwrap())
    }

    #[test]
    fn verbs_and_resources_as_the_api_server_names_them() {
        use http::Method;
        let cases = [
            (
                Method::GET,
                "/api/v1/namespaces/a/secrets/s",
                ("get", "secrets"),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/a/secrets?limit=500",
                ("list", "secrets"),
            ),
            (
                Method::GET,
                "/api/v1/secrets?labelSelector=x",
                ("list", "secrets"),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/a/secrets?watch=true&resourceVersion=5",
                ("watch", "secrets"),
            ),
            (
                Method::PATCH,
                "/apis/external-secrets.io/v1/namespaces/a/externalsecrets/e/status?fieldManager=x",
                ("patch", "externalsecrets/status"),
            ),
            (
                Method::PATCH,
                "/apis/external-secrets.io/v1alpha1/clusterproviderclasses/vault",
                ("patch", "clusterproviderclasses"),
            ),
            (
                Method::POST,
                "/api/v1/namespaces/a/serviceaccounts/sa/token",
                ("create", "serviceaccounts/token"),
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/a/secrets/s",
                ("delete", "secrets"),
            ),
            (Method::GET, "/api/v1/namespaces/a", ("get", "namespaces")),
            (Method::GET, "/version", ("list", "")),
        ];
        for (method, uri, (verb, resource)) in cases {
            assert_eq!(of(method, uri), (verb, resource.to_owned()), "{uri}");
        }
    }
}
