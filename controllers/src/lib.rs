//! The operator's reconcilers and the loop that runs them.

pub mod backoff;
pub mod context;
pub mod duration;
pub mod events;
pub mod externalsecret;
pub mod http;
pub mod metrics;
pub mod provider;
pub mod pushsecret;
pub mod ratelimit;
pub(crate) mod run;
pub mod secretstore;

pub use context::{Context, Settings};
pub use run::{Addresses, Operator, default_registry};
