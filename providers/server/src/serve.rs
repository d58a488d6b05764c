//! The process around the service: one TCP port for gRPC (mTLS unless turned off) with health
//! and reflection beside `provider.v1`, one HTTP port for metrics, and a shutdown that first
//! reports NOT_SERVING while still serving (so endpoints drop the replica before it goes), then
//! stops accepting and sends GOAWAY, then lets the calls in flight finish within a grace period.
//!
//! Every connection is closed gracefully (GOAWAY) after a maximum age, so that clients resolve
//! and spread their calls again: behind a ClusterIP Service, or when replicas were added.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus_client::registry::Registry;
use provider_protocol::v1::secret_store_provider_server::SecretStoreProviderServer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tonic::transport::server::Connected;
use tonic_health::ServingStatus;
use tracing::{debug, info, warn};

use crate::metrics::GrpcMetrics;
use crate::service::{ProviderService, Resolver};
use crate::tls::{ReloadingConfig, TlsError, TlsFiles};

/// How often the TLS files are looked at.
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(2);
/// How long calls in flight may take to finish once shutdown begins.
pub const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(30);
/// How long the server keeps serving, NOT_SERVING, once shutdown begins: the time a Service's
/// endpoints and its clients take to drop the replica.
pub const DEFAULT_SHUTDOWN_DELAY: Duration = Duration::from_secs(5);
/// A connection's age at which it is closed gracefully (ESO's servers use the same).
pub const DEFAULT_MAX_CONNECTION_AGE: Duration = Duration::from_secs(30 * 60);
/// A client that has not finished its TLS handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Streams a client may reset before the server takes them up. hyper's default (20) is a guard
/// against rapid-reset floods, and it answers a 21st with GOAWAY: calls whose deadlines expire
/// together (a backend slow for every store at once) would end every other call on the one
/// connection an operator shares between its stores. Callers here hold a client certificate.
const PENDING_RESETS: usize = 1024;
/// Connections accepted but not yet handed to the gRPC server.
const ACCEPT_BACKLOG: usize = 64;

/// Where and how to serve.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The gRPC address (port 0 picks a free one; [`Server::grpc_addr`] tells which).
    pub grpc: SocketAddr,
    /// The address of `/metrics` (and `/healthz`, `/readyz`); `None` serves no HTTP.
    pub metrics: Option<SocketAddr>,
    /// mTLS from these files; `None` serves plaintext (local experiments only).
    pub tls: Option<TlsFiles>,
    pub reload_interval: Duration,
    pub grace_period: Duration,
    /// Serving on, NOT_SERVING, before the listener closes once shutdown begins.
    pub shutdown_delay: Duration,
    /// A connection older is sent GOAWAY; its calls in flight finish.
    pub max_connection_age: Duration,
}

impl ServeOptions {
    pub fn new(grpc: SocketAddr, metrics: Option<SocketAddr>, tls: Option<TlsFiles>) -> Self {
        Self {
            grpc,
            metrics,
            tls,
            reload_interval: DEFAULT_RELOAD_INTERVAL,
            grace_period: DEFAULT_GRACE_PERIOD,
            shutdown_delay: DEFAULT_SHUTDOWN_DELAY,
            max_connection_age: DEFAULT_MAX_CONNECTION_AGE,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// A bound server, not serving yet.
pub struct Server {
    grpc: TcpListener,
    metrics: Option<TcpListener>,
    tls: Option<Arc<ReloadingConfig>>,
    service: ProviderService,
    registry: Registry,
    options: ServeOptions,
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

impl Server {
    /// Loads the TLS files and binds both ports. `registry` holds the metrics served beside the
    /// server's own (the client manager's, the providers').
    pub async fn bind(
        options: ServeOptions,
        resolver: Arc<dyn Resolver>,
        mut registry: Registry,
    ) -> Result<Self, ServeError> {
        let tls = match &options.tls {
            Some(files) => Some(Arc::new(ReloadingConfig::load(files.clone()).await?)),
            None => None,
        };
        let grpc = bind(options.grpc).await?;
        let metrics = match options.metrics {
            Some(addr) => Some(bind(addr).await?),
            None => None,
        };
        let service = ProviderService::new(resolver, GrpcMetrics::register(&mut registry));
        Ok(Self {
            grpc,
            metrics,
            tls,
            service,
            registry,
            options,
        })
    }

    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc.local_addr().unwrap_or(self.options.grpc)
    }

    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Serves until `shutdown` resolves, then drains (see the module's documentation).
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), ServeError> {
        let grpc_addr = self.grpc_addr();
        let metrics_addr = self.metrics_addr();
        let Self {
            grpc,
            metrics,
            tls,
            service,
            registry,
            options,
        } = self;

        let serving = Arc::new(AtomicBool::new(true));
        let (metrics_stop, metrics_stopped) = oneshot::channel::<()>();
        let metrics_task = metrics.map(|listener| {
            tokio::spawn(crate::metrics::serve_http(
                listener,
                Arc::new(registry),
                serving.clone(),
                async {
                    let _ = metrics_stopped.await;
                },
            ))
        });

        let (health, health_service) = tonic_health::server::health_reporter();
        health
            .set_serving::<SecretStoreProviderServer<ProviderService>>()
            .await;
        let reflection = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(provider_protocol::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        };
        let reflection_v1 = reflection()
            .build_v1()
            .expect("the provider.v1 and health descriptors are valid");
        let reflection_v1alpha = reflection()
            .build_v1alpha()
            .expect("the provider.v1 and health descriptors are valid");
        let router = tonic::transport::Server::builder()
            .http2_max_pending_accept_reset_streams(Some(PENDING_RESETS))
            // No `max_connection_age_grace`: with one, tonic 0.14 sends no GOAWAY at the age but
            // cuts the connection off at age + grace, failing its calls in flight. Without, it
            // sends GOAWAY at the age and the calls in flight finish (their deadlines bound them).
            .max_connection_age(options.max_connection_age)
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(SecretStoreProviderServer::new(service));

        let (stop, stopped) = oneshot::channel::<()>();
        let stopped = async {
            let _ = stopped.await;
        };
        let mut tasks = Vec::new();
        let grpc_result = match tls {
            Some(tls) => {
                let (tx, rx) = mpsc::channel(ACCEPT_BACKLOG);
                tasks.push(tokio::spawn(tls.clone().watch(options.reload_interval)));
                tasks.push(tokio::spawn(accept_tls(grpc, tls, tx)));
                info!(tls = true, metrics = ?metrics_addr, "provider server listening on {grpc_addr}");
                let served = router.serve_with_incoming_shutdown(incoming(rx), stopped);
                until_drained(served, shutdown, &health, &serving, stop, &tasks, &options).await
            }
            None => {
                warn!(
                    "TLS is off (--enable-tls=false): calls and secrets travel in plaintext and any client is served; for local experiments only"
                );
                let (tx, rx) = mpsc::channel(ACCEPT_BACKLOG);
                tasks.push(tokio::spawn(accept_plain(grpc, tx)));
                info!(tls = false, metrics = ?metrics_addr, "provider server listening on {grpc_addr}");
                let served = router.serve_with_incoming_shutdown(incoming(rx), stopped);
                until_drained(served, shutdown, &health, &serving, stop, &tasks, &options).await
            }
        };
        for task in &tasks {
            task.abort();
        }
        let _ = metrics_stop.send(());
        if let Some(task) = metrics_task {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
        info!("provider server stopped");
        grpc_result
    }
}

/// Binds and serves until `shutdown`: [`Server::bind`] then [`Server::run`].
pub async fn serve(
    options: ServeOptions,
    resolver: Arc<dyn Resolver>,
    registry: Registry,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    Server::bind(options, resolver, registry)
        .await?
        .run(shutdown)
        .await
}

/// Serves until `shutdown`, then reports NOT_SERVING and serves on for the shutdown delay, then
/// stops accepting, sends GOAWAY and waits for the calls in flight, at most the grace period.
async fn until_drained(
    served: impl Future<Output = Result<(), tonic::transport::Error>>,
    shutdown: impl Future<Output = ()>,
    health: &tonic_health::server::HealthReporter,
    serving: &AtomicBool,
    stop: oneshot::Sender<()>,
    accepting: &[JoinHandle<()>],
    options: &ServeOptions,
) -> Result<(), ServeError> {
    let mut served = pin!(served);
    tokio::select! {
        result = &mut served => return result.map_err(Into::into),
        () = shutdown => {}
    }
    serving.store(false, Ordering::Relaxed);
    health
        .set_service_status("", ServingStatus::NotServing)
        .await;
    health
        .set_not_serving::<SecretStoreProviderServer<ProviderService>>()
        .await;
    info!(
        delay = ?options.shutdown_delay,
        "shutting down: reporting NOT_SERVING, serving on while clients and endpoints drop this replica"
    );
    tokio::select! {
        result = &mut served => return result.map_err(Into::into),
        () = tokio::time::sleep(options.shutdown_delay) => {}
    }
    info!(
        grace_period = ?options.grace_period,
        "shutting down: accepting no more connections, waiting for the calls in flight"
    );
    // Closes the listening socket: new clients are refused at once rather than left hanging.
    for task in accepting {
        task.abort();
    }
    let _ = stop.send(());
    match tokio::time::timeout(options.grace_period, served).await {
        Ok(result) => result.map_err(Into::into),
        Err(_) => {
            warn!(grace_period = ?options.grace_period, "calls still in flight after the grace period are cut off");
            Ok(())
        }
    }
}

/// The connections the accept loop hands over, as the stream tonic serves.
fn incoming<IO>(
    mut rx: mpsc::Receiver<IO>,
) -> impl futures::Stream<Item = Result<IO, std::io::Error>>
where
    IO: Connected,
{
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|io| io.map(Ok)))
}

async fn accept(listener: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                return (stream, peer);
            }
            // Out of file descriptors, say: wait rather than spin.
            Err(e) => {
                warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn accept_plain(listener: TcpListener, tx: mpsc::Sender<TcpStream>) {
    loop {
        let (stream, _) = accept(&listener).await;
        if tx.send(stream).await.is_err() {
            return;
        }
    }
}

/// Each connection is accepted with the configuration current when it arrives, so a reload
/// takes effect at the next connection; the handshake runs on its own task, so a slow client
/// holds up nobody.
async fn accept_tls(
    listener: TcpListener,
    tls: Arc<ReloadingConfig>,
    tx: mpsc::Sender<tokio_rustls::server::TlsStream<TcpStream>>,
) {
    loop {
        let (stream, peer) = accept(&listener).await;
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.current());
        let tx = tx.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => {
                    let _ = tx.send(stream).await;
                }
                // A client without an acceptable certificate, or a TCP probe: not worth more
                // than a debug line each.
                Ok(Err(e)) => debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}
