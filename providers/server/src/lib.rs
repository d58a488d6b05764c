//! The server-side adapter of ESO's out-of-process provider protocol (`provider.v1`): serves the
//! providers compiled into this build to any core that speaks it (ours, or ESO's), with the
//! same provider code that runs in process.
//!
//! - [`ProviderService`]: the gRPC service over a [`Resolver`], which hands out the client a call
//!   is about. Requests and answers go through `provider_protocol`'s conversions, errors through
//!   its one status mapping.
//! - [`KubeResolver`]: the resolver in a cluster, on top of the client manager (its watch caches,
//!   referent rule, namespace check and client cache), for this project's kinds and ESO's
//!   `provider.external-secrets.io/v2alpha1` ones.
//! - [`serve`] / [`Server`]: mTLS from reloaded files, health, reflection, metrics, and a
//!   shutdown that drains the calls in flight.
//! - Every call is checked against its client certificate first: a namespace's certificate may
//!   claim only a SecretStore of that namespace (`api::caller_identity`).

mod identity;
mod kube;
pub mod metrics;
mod serve;
mod service;
pub mod tls;

pub use kube::{ESO_GROUP, ESO_KINDS, ESO_VERSION, KubeResolver, served_registry};
pub use metrics::GrpcMetrics;
pub use serve::{
    DEFAULT_GRACE_PERIOD, DEFAULT_RELOAD_INTERVAL, ServeError, ServeOptions, Server, serve,
};
pub use service::{ProviderService, Resolved, Resolver};
pub use tls::{TlsError, TlsFiles};
