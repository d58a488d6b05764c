//! `/metrics`, `/healthz` and `/readyz` as routers, for the controller and the provider server
//! alike; each process decides where it serves them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

/// `/metrics` in the OpenMetrics text format.
pub fn metrics(registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/metrics", get(encode))
        .with_state(registry)
}

/// `/healthz`, and `/readyz` answering 503 with `not_ready` while `ready` is false.
pub fn probes(ready: Arc<AtomicBool>, not_ready: &'static str) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move |State(ready): State<Arc<AtomicBool>>| async move {
                if ready.load(Ordering::Relaxed) {
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, not_ready)
                }
            }),
        )
        .with_state(ready)
}

async fn encode(State(registry): State<Arc<Registry>>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            e.to_string(),
        ),
    }
}
