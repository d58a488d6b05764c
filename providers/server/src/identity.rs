//! The caller of a call, from the client certificate of its connection, and the check of what it
//! claims against it (`api::caller_identity`): a namespace's certificate is served only as a
//! SecretStore of that namespace, whatever the request says.

use api::caller_identity::{CallerIdentity, Claim};
use provider_protocol::v1;
use tonic::{Request, Status};

/// Who makes `request`. Without TLS (`--enable-tls=false`) there is no certificate and any
/// client is served as the cluster; with TLS the handshake already required one.
pub(crate) fn caller<T>(request: &Request<T>) -> Result<CallerIdentity, Status> {
    let Some(chain) = request.peer_certs() else {
        return Ok(CallerIdentity::Cluster);
    };
    let leaf = chain
        .first()
        .ok_or_else(|| Status::permission_denied("the client presented no certificate"))?;
    CallerIdentity::of_certificate(leaf).map_err(Status::permission_denied)
}

/// Refuses a call whose `reference` and `source_namespace` claim more than `caller` may.
pub(crate) fn check(
    caller: &CallerIdentity,
    reference: &v1::ProviderReference,
    source_namespace: &str,
) -> Result<(), Status> {
    caller
        .permits(&Claim {
            store_ref_kind: &reference.store_ref_kind,
            source_namespace,
            provider_namespace: &reference.namespace,
        })
        .map_err(|why| {
            // Beyond the PermissionDenied the metrics count: who claimed what, for whoever
            // looks into it (a tenant's key used outside its namespace). Names only, no content.
            if let CallerIdentity::Namespace(own) = caller {
                tracing::warn!(
                    certificate_namespace = %own,
                    store_ref_kind = %reference.store_ref_kind,
                    source_namespace = %source_namespace,
                    provider_namespace = %reference.namespace,
                    "refused a call claiming more than its client certificate's namespace"
                );
            }
            Status::permission_denied(why)
        })
}
