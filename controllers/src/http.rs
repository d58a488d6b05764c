//! `/metrics` on one address, `/healthz` and `/readyz` on another, as ESO serves them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

#[derive(Clone)]
struct Shared {
    registry: Arc<Registry>,
    ready: Arc<AtomicBool>,
}

/// Serves `/metrics` until the process ends.
pub async fn serve_metrics(addr: SocketAddr, registry: Arc<Registry>) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(Shared {
            registry,
            ready: Arc::default(),
        });
    axum::serve(tokio::net::TcpListener::bind(addr).await?, app).await
}

/// Serves `/healthz` and `/readyz`; `ready` flips `/readyz` once the controllers run.
pub async fn serve_probes(addr: SocketAddr, ready: Arc<AtomicBool>) -> std::io::Result<()> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(Shared {
            registry: Arc::default(),
            ready,
        });
    axum::serve(tokio::net::TcpListener::bind(addr).await?, app).await
}

async fn metrics(State(s): State<Shared>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &s.registry) {
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

async fn readyz(State(s): State<Shared>) -> impl IntoResponse {
    if s.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}
