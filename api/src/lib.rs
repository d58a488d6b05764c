//! The project's API: ESO's `external-secrets.io` kinds, unchanged on the wire, plus design 007's
//! per-provider kinds in `providers.external-secrets.io` (namespaced) and
//! `cluster.providers.external-secrets.io` (cluster-scoped).

pub mod caller_identity;
pub mod chart;
pub mod cluster_secrets;
pub mod conditions;
pub mod conversion;
pub mod crds;
pub mod duration;
pub mod external_secret;
pub mod generators;
pub mod meta;
pub mod provider_class;
pub mod provider_kinds;
pub mod providers;
pub mod push_secret;
pub mod store;

/// Group of the ESO-compatible kinds.
pub const GROUP: &str = "external-secrets.io";
/// Group of the namespaced provider kinds.
pub const PROVIDERS_GROUP: &str = "providers.external-secrets.io";
/// Group of the cluster-scoped provider kinds.
pub const CLUSTER_PROVIDERS_GROUP: &str = "cluster.providers.external-secrets.io";

/// A Go duration as ESO accepts it (`metav1.Duration`): `0`, or numbers with units such as `1h30m`.
pub const DURATION_PATTERN: &str = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$";
