//! A conformance run for provider servers: drives any `provider.v1.SecretStoreProvider` server
//! (ours, ESO's, or one written in another language) through the out-of-process contract the
//! README describes ("Providers out of process") and reports, check by check, what it keeps and
//! what it does not. `external-secrets provider conformance` prints the [`Report`]; tests and the
//! end-to-end suite call [`run`] and inspect it.
//!
//! The run talks to the server as the operator does: through `provider_remote`'s [`Pool`] (the
//! same TLS configuration, server name from the address, deadline on every call), with raw
//! `provider.v1`, health and reflection calls where the adapter would hide a status code or a
//! deadline. It writes one fresh remote key of its own (and deletes it again) when the server
//! says it can write.
//!
//! [`Pool`]: provider_remote::Pool

mod checks;
mod options;
mod report;

pub use checks::run;
pub use options::{Options, Read, parse_provider_ref, tls_from_dir};
pub use provider_remote::TlsMaterial;
pub use report::{Check, Outcome, Report};

/// The names of the checks, as [`Report::get`] finds them and the report prints them.
pub mod names {
    /// The TLS material could not be used (no call was made).
    pub const CONNECTION: &str = "connection";
    /// `grpc.health.v1.Health/Check` for service `""` answers SERVING.
    pub const HEALTH: &str = "health";
    /// Server reflection lists `provider.v1.SecretStoreProvider` and its methods.
    pub const REFLECTION: &str = "reflection";
    /// `Validate` answers valid (or unknown).
    pub const VALIDATE: &str = "validate";
    /// `Capabilities` answers a known value.
    pub const CAPABILITIES: &str = "capabilities";
    /// `GetSecret` of a key that does not exist answers NOT_FOUND.
    pub const NOT_FOUND: &str = "not-found";
    /// The details of that NOT_FOUND, if any, are a `google.rpc.Status` of the same code (what
    /// grpc-go requires).
    pub const ERROR_DETAILS: &str = "error-details";
    /// `GetSecretMap` answers for a `--read-key`.
    pub const GET_SECRET_MAP: &str = "get-secret-map";
    /// `GetAllSecrets` answers for a find by the name of a `--read-key`.
    pub const GET_ALL_SECRETS: &str = "get-all-secrets";
    /// PushSecret does what Capabilities promises (a fresh key, then SecretExists true), or is
    /// refused by a READ_ONLY server.
    pub const PUSH: &str = "push";
    /// DeleteSecret makes SecretExists false, or is refused by a READ_ONLY server.
    pub const DELETE: &str = "delete";
    /// A provider object that does not exist is not NOT_FOUND (which only means "no such
    /// secret", and makes the core act on deletionPolicy).
    pub const UNKNOWN_PROVIDER_REF: &str = "unknown-provider-ref";
    /// Provoked errors come back as statuses sent by the server, with fitting codes.
    pub const ERRORS_AS_STATUS: &str = "errors-as-status";
    /// Every data call refuses an empty `source_namespace` with INVALID_ARGUMENT.
    pub const SOURCE_NAMESPACE: &str = "source-namespace-required";
    /// A caller without a client certificate is refused (by the handshake, or with
    /// UNAUTHENTICATED or PERMISSION_DENIED).
    pub const CLIENT_CERTIFICATE_REQUIRED: &str = "client-certificate-required";
    /// With a namespace's client certificate (`spiffe://external-secrets.io/ns/<namespace>`), a
    /// call claiming a ClusterSecretStore or another namespace is refused with
    /// PERMISSION_DENIED.
    pub const NAMESPACE_CLAIMS: &str = "namespace-claims";
    /// Many `GetSecret` calls at once are all answered within the deadline.
    pub const CONCURRENCY: &str = "concurrency";
    /// A call with a very short deadline ends with DEADLINE_EXCEEDED or CANCELLED, and the
    /// server answers afterwards.
    pub const DEADLINE: &str = "deadline";
    /// With `--max-connection-age`: the server ends a connection of that age with GOAWAY, the
    /// calls in flight finish, and the next ones go over a new connection; no call fails.
    pub const GOAWAY: &str = "goaway";
    /// No error status seen in the run carries a secret value.
    pub const NO_SECRET_IN_ERRORS: &str = "no-secret-in-errors";
    /// Something the run wrote could not be deleted (only reported when that happens).
    pub const CLEANUP: &str = "cleanup";
    /// Stands for every check not run after the server could not be reached.
    pub const NOT_RUN: &str = "remaining checks";

    /// The check that `GetSecret` of `key` returns its `--read-value`.
    pub fn get_secret(key: &str) -> String {
        format!("get-secret:{key}")
    }
}
