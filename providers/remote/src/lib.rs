//! The client-side adapter of design "out-of-process provider adapter": a provider served by a
//! gRPC server (ours or ESO's, `provider.v1.SecretStoreProvider`) as an ordinary
//! [`SecretsClient`], so reconcilers cannot tell it from one in process.
//!
//! Every client of one server address and TLS material shares the [`Pool`]'s connections to
//! that address's endpoints; a client is cheap (a reference and a namespace), so the client manager caches it as
//! it caches any other.

mod balance;
mod client;
mod pool;
mod probe;
mod tls;
mod transport;

pub use balance::Transport;
pub use client::RemoteClient;
pub use pool::{Connection, Pool, PoolMetrics};
pub use probe::{Probe, probe, service_methods};
pub use tls::{TlsError, TlsMaterial};
pub use transport::{ResponseBody, Settings};
