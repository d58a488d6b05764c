//! `/metrics` on one address, `/healthz` and `/readyz` on another, as ESO serves them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use prometheus_client::registry::Registry;

/// Serves `/metrics` until the process ends.
pub async fn serve_metrics(addr: SocketAddr, registry: Arc<Registry>) -> std::io::Result<()> {
    let app = http_endpoints::metrics(registry);
    axum::serve(tokio::net::TcpListener::bind(addr).await?, app).await
}

/// Serves `/healthz` and `/readyz`; `ready` flips `/readyz` once the controllers run.
pub async fn serve_probes(addr: SocketAddr, ready: Arc<AtomicBool>) -> std::io::Result<()> {
    let app = http_endpoints::probes(ready, "starting");
    axum::serve(tokio::net::TcpListener::bind(addr).await?, app).await
}
