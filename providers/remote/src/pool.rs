//! One [`Connection`] per (address, TLS material), shared by every store and ExternalSecret
//! that uses it: an HTTP/2 connection to each endpoint the address resolves to, with calls
//! spread over them ([`crate::balance`]). A [`Connection`] is reference-counted; one no client
//! has held for [`Settings::idle`] is dropped at the next lookup. Its [`Transport`] dials again
//! on the first call after a failure; the client manager's breaker spaces those calls out, so a
//! server that is down is not dialled once per reconcile.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;

use crate::balance::{Dialler, Transport};
use crate::tls::{TlsError, TlsMaterial};
use crate::transport::{Dial, Dialled, Io, Settings};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AddressLabel {
    address: String,
}

/// What the pool did: in steady state no reconcile opens a connection.
#[derive(Clone, Default)]
pub struct PoolMetrics {
    opened: Family<AddressLabel, Counter>,
    failed: Family<AddressLabel, Counter>,
    pooled: Gauge,
}

impl PoolMetrics {
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "provider_connections_opened",
            "Connections to out-of-process provider servers established (TCP and TLS done)",
            self.opened.clone(),
        );
        registry.register(
            "provider_connection_failures",
            "Attempts to connect to an out-of-process provider server that failed",
            self.failed.clone(),
        );
        registry.register(
            "provider_connections_pooled",
            "Channels to out-of-process provider servers held in the pool",
            self.pooled.clone(),
        );
    }

    /// Connections opened to `address` so far.
    pub fn opened(&self, address: &str) -> u64 {
        self.opened
            .get_or_create(&AddressLabel {
                address: address.to_owned(),
            })
            .get()
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    address: String,
    tls: Option<TlsMaterial>,
}

struct Entry {
    connection: Connection,
    last_used: Instant,
}

pub struct Pool {
    settings: Settings,
    metrics: PoolMetrics,
    entries: Mutex<HashMap<Key, Entry>>,
}

/// A shared channel to one server. Cloning it is cheap and keeps the connection pooled.
#[derive(Clone)]
pub struct Connection {
    inner: Arc<Inner>,
}

struct Inner {
    transport: Transport,
    address: String,
    deadline: Duration,
}

impl Connection {
    /// What the generated stubs call through.
    pub fn transport(&self) -> Transport {
        self.inner.transport.clone()
    }

    pub fn address(&self) -> &str {
        &self.inner.address
    }

    pub fn deadline(&self) -> Duration {
        self.inner.deadline
    }
}

impl Pool {
    pub fn new(settings: Settings, metrics: PoolMetrics) -> Self {
        Self {
            settings,
            metrics,
            entries: Mutex::default(),
        }
    }

    pub fn metrics(&self) -> &PoolMetrics {
        &self.metrics
    }

    /// The connection to `address` (`host:port`) with `tls` (plaintext without), made on first
    /// use. Nothing is dialled here: the first call connects.
    pub fn get(&self, address: &str, tls: Option<&TlsMaterial>) -> Result<Connection, TlsError> {
        let key = Key {
            address: address.to_owned(),
            tls: tls.cloned(),
        };
        let mut entries = self.entries.lock().expect("connection pool lock poisoned");
        let idle = self.settings.idle;
        entries.retain(|_, e| {
            Arc::strong_count(&e.connection.inner) > 1 || e.last_used.elapsed() < idle
        });
        if let Some(entry) = entries.get_mut(&key) {
            entry.last_used = Instant::now();
            return Ok(entry.connection.clone());
        }
        let connection = self.connect(address, tls)?;
        entries.insert(
            key,
            Entry {
                connection: connection.clone(),
                last_used: Instant::now(),
            },
        );
        self.metrics.pooled.set(entries.len() as i64);
        Ok(connection)
    }

    fn connect(&self, address: &str, tls: Option<&TlsMaterial>) -> Result<Connection, TlsError> {
        let tls = match tls {
            Some(material) => {
                let host = host_of(address);
                let name = ServerName::try_from(host.to_owned()).map_err(|e| {
                    TlsError::Config(format!(
                        "address {address:?}: {host:?} is no server name: {e}"
                    ))
                })?;
                Some((material.client_config()?, name))
            }
            None => None,
        };
        let authority = address
            .parse::<http::uri::Authority>()
            .map_err(|e| TlsError::Config(format!("address {address:?}: {e}")))?;
        let transport = Transport::new(
            address.to_owned(),
            Box::new(Connectors {
                address: address.to_owned(),
                tls: tls.clone(),
                metrics: self.metrics.clone(),
            }),
            tls.is_some(),
            authority,
            self.settings.clone(),
        );
        Ok(Connection {
            inner: Arc::new(Inner {
                transport,
                address: address.to_owned(),
                deadline: self.settings.deadline,
            }),
        })
    }
}

/// `host` of `host:port`, without the brackets of an IPv6 address.
fn host_of(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

type ClientTls = Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>;

/// A [`Connector`] for each endpoint of one address.
struct Connectors {
    address: String,
    tls: ClientTls,
    metrics: PoolMetrics,
}

impl Dialler for Connectors {
    fn to(&self, endpoint: SocketAddr) -> Box<dyn Dial> {
        Box::new(Connector {
            address: self.address.clone(),
            endpoint,
            tls: self.tls.clone(),
            metrics: self.metrics.clone(),
        })
    }
}

/// Dials one endpoint and, with TLS, shakes hands itself: our own rustls configuration (ESO's
/// Secret keys, server name from the address, whichever endpoint answers) and a count of every
/// connection made, by the address the class names.
struct Connector {
    address: String,
    endpoint: SocketAddr,
    tls: ClientTls,
    metrics: PoolMetrics,
}

impl Dial for Connector {
    fn dial(&self) -> Dialled<'_> {
        Box::pin(async move {
            let label = AddressLabel {
                address: self.address.clone(),
            };
            let connected = async {
                let tcp = TcpStream::connect(self.endpoint).await?;
                tcp.set_nodelay(true)?;
                let io: Box<dyn Io> = match &self.tls {
                    Some((config, name)) => Box::new(
                        tokio_rustls::TlsConnector::from(config.clone())
                            .connect(name.clone(), tcp)
                            .await?,
                    ),
                    None => Box::new(tcp),
                };
                Ok::<_, std::io::Error>(io)
            }
            .await;
            match &connected {
                Ok(_) => {
                    self.metrics.opened.get_or_create(&label).inc();
                }
                Err(e) => {
                    self.metrics.failed.get_or_create(&label).inc();
                    tracing::debug!(address = %self.address, endpoint = %self.endpoint, error = %e, "connecting to a provider server failed");
                }
            }
            connected
        })
    }
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn the_server_name_is_the_address_host() {
        assert_eq!(host_of("vault.providers.svc:8080"), "vault.providers.svc");
        assert_eq!(host_of("127.0.0.1:9000"), "127.0.0.1");
        assert_eq!(host_of("[::1]:9000"), "::1");
    }
}
