//! `POST /convert` over HTTPS, with a certificate that can be swapped while serving: every TLS
//! handshake asks [`CertResolver`] for the current one, so a rotation needs no restart and
//! connections opened before it keep the certificate they started with.

use std::net::SocketAddr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::Converters;

/// The path the CRDs' `clientConfig` names.
pub const PATH: &str = "/convert";

/// The API server sends every object of a list that needs converting in one review, so a
/// review can be large; the limit only keeps a stray client from exhausting memory.
const BODY_LIMIT: usize = 256 * 1024 * 1024;

/// A client that does not finish its handshake in this time is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The certificate handed to each new TLS connection.
#[derive(Debug)]
pub struct CertResolver {
    current: RwLock<Arc<CertifiedKey>>,
}

impl CertResolver {
    pub fn new(key: CertifiedKey) -> Self {
        Self {
            current: RwLock::new(Arc::new(key)),
        }
    }

    /// Serves `key` to every connection from now on.
    pub fn set(&self, key: CertifiedKey) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(key);
    }

    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// Serves `POST /convert` on `listener` until `stop` turns true; then stops accepting at once
/// (so that the port refuses connections) and finishes the requests under way.
pub async fn serve(
    listener: TcpListener,
    resolver: Arc<CertResolver>,
    converters: Arc<dyn Converters>,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let local = listener.local_addr()?;
    let mut config =
        rustls::ServerConfig::builder_with_provider(Arc::new(crate::crypto_provider()))
            .with_safe_default_protocol_versions()
            .map_err(std::io::Error::other)?
            .with_no_client_auth()
            .with_cert_resolver(resolver);
    // axum is built with HTTP/1 only; offering h2 would make Go clients try it.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));

    let (tx, rx) = mpsc::channel(64);
    let accept_stop = stop.clone();
    tokio::spawn(accept_loop(listener, acceptor, tx, accept_stop));

    let app = Router::new()
        .route(PATH, post(convert))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(converters);
    tracing::info!(address = %local, "conversion webhook serving {PATH}");
    axum::serve(TlsListener { rx, local }, app)
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|stop| *stop).await;
        })
        .await
}

async fn convert(State(converters): State<Arc<dyn Converters>>, body: Bytes) -> impl IntoResponse {
    // A large review is CPU work; off the async threads, and a panicking converter is
    // answered like any other failure instead of dropping the connection.
    let answer = tokio::task::spawn_blocking(move || crate::review(&body, converters.as_ref()))
        .await
        .unwrap_or_else(|e| crate::review::failure_review(format!("the converter panicked: {e}")));
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        answer,
    )
}

/// Accepts TCP connections and completes their handshakes concurrently, so one slow client
/// does not hold up the others.
async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    tx: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            () = tx.closed() => return,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Typically out of file descriptors; accepting again at once would spin.
                tracing::warn!(error = %e, "accepting a connection to the conversion webhook");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => {
                    let _ = tx.send((tls, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

/// Connections whose handshake is done, for `axum::serve`.
struct TlsListener {
    rx: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(connection) => connection,
            // The accept loop stopped: nothing will come any more, and the graceful shutdown
            // that stopped it ends `serve`.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
