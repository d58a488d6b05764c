//! The operator's reconcilers and the loop that runs them.

pub mod api_error;
pub mod api_requests;
pub mod backoff;
pub mod cluster;
pub mod context;
mod cron;
pub mod duration;
pub mod events;
pub mod externalsecret;
pub mod generations;
pub mod http;
mod index;
pub mod keys;
pub mod leadership;
pub mod metrics;
mod object_name;
mod operator;
pub(crate) mod outcome;
pub mod own_writes;
pub mod provider_class;
pub mod provider_objects;
pub mod pushsecret;
pub mod ratelimit;
pub mod readiness;
pub mod rename;
pub mod secretstore;
pub mod series;
#[cfg(test)]
mod standin;
pub mod status;
pub mod templating;
pub(crate) mod watch;
mod workers;
pub mod workqueue;

pub use context::{Context, Settings};
pub use operator::{Addresses, Operator};
