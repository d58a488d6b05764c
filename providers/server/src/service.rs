//! `provider.v1.SecretStoreProvider` over a [`Resolver`]: each call converts its request with the
//! protocol crate, asks the resolved client, and converts the answer back. Provider errors become
//! a status through `provider_protocol::error_to_status` and nothing else, but for a failed
//! validation, which ESO answers as `valid: false`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use api::caller_identity::CallerIdentity;
use async_trait::async_trait;
use provider::{SecretsClient, Validation};
use provider_protocol::v1;
use provider_protocol::v1::secret_store_provider_server::SecretStoreProvider;
use provider_protocol::{
    capabilities_to_wire, error_to_status, error_to_wire, find_from_wire, push_from_wire,
    push_remote_from_wire, remote_from_wire,
};
use serde_json::Value;
use tonic::{Request, Response, Status};

use crate::identity;
use crate::metrics::GrpcMetrics;

/// What a call is served with.
#[derive(Clone)]
pub struct Resolved {
    /// The (cached) client of the referenced provider object, for the caller.
    pub client: Arc<dyn SecretsClient>,
    pub provider: Arc<dyn provider::Provider>,
    /// The provider object's spec as written, for `validate_spec`.
    pub spec: Value,
}

/// Finds the client a call is about. The kube-backed one is [`crate::KubeResolver`]; tests hand
/// out clients of their own.
#[async_trait]
pub trait Resolver: Send + Sync + 'static {
    /// The client for the provider object `reference` names, used on behalf of
    /// `source_namespace` (the ExternalSecret's or PushSecret's namespace; empty for a store's
    /// validation).
    async fn resolve(
        &self,
        reference: &v1::ProviderReference,
        source_namespace: &str,
    ) -> Result<Resolved, provider::Error>;

    /// The provider of `reference`'s kind, for `Capabilities`. The default resolves the whole
    /// client; a resolver that can tell the provider from the kind alone overrides it, so the
    /// call costs neither a read nor a backend login.
    async fn provider(
        &self,
        reference: &v1::ProviderReference,
        source_namespace: &str,
    ) -> Result<Arc<dyn provider::Provider>, provider::Error> {
        Ok(self.resolve(reference, source_namespace).await?.provider)
    }
}

/// The gRPC service.
pub struct ProviderService {
    resolver: Arc<dyn Resolver>,
    metrics: GrpcMetrics,
}

impl ProviderService {
    pub fn new(resolver: Arc<dyn Resolver>, metrics: GrpcMetrics) -> Self {
        Self { resolver, metrics }
    }

    /// Runs one call, counting it.
    async fn observe<T>(
        &self,
        method: &'static str,
        call: impl Future<Output = Result<T, Status>>,
    ) -> Result<Response<T>, Status> {
        let in_flight = self.metrics.start(method);
        let result = call.await;
        in_flight.finish(match &result {
            Ok(_) => tonic::Code::Ok,
            Err(status) => status.code(),
        });
        result.map(Response::new)
    }

    /// The client for a data call: both the reference and the caller's namespace are required.
    async fn data_client(
        &self,
        caller: &CallerIdentity,
        reference: Option<v1::ProviderReference>,
        source_namespace: &str,
    ) -> Result<Arc<dyn SecretsClient>, Status> {
        let reference = required(reference, "provider_ref")?;
        if source_namespace.is_empty() {
            return Err(Status::invalid_argument(
                "source_namespace is required: the namespace of the ExternalSecret or PushSecret",
            ));
        }
        Ok(self
            .resolve(caller, &reference, source_namespace)
            .await?
            .client)
    }

    /// The resolved client, once the caller's certificate allows what the call claims.
    async fn resolve(
        &self,
        caller: &CallerIdentity,
        reference: &v1::ProviderReference,
        source_namespace: &str,
    ) -> Result<Resolved, Status> {
        identity::check(caller, reference, source_namespace)?;
        self.resolver
            .resolve(reference, source_namespace)
            .await
            .map_err(|e| error_to_status(&e))
    }
}

fn required<T>(value: Option<T>, field: &str) -> Result<T, Status> {
    value.ok_or_else(|| Status::invalid_argument(format!("{field} is required")))
}

fn status(error: provider::Error) -> Status {
    error_to_status(&error)
}

fn wire_map(map: std::collections::BTreeMap<String, Vec<u8>>) -> HashMap<String, Vec<u8>> {
    map.into_iter().collect()
}

#[async_trait]
impl SecretStoreProvider for ProviderService {
    async fn get_secret(
        &self,
        request: Request<v1::GetSecretRequest>,
    ) -> Result<Response<v1::GetSecretResponse>, Status> {
        self.observe("GetSecret", async {
            let caller = identity::caller(&request)?;
            let r = request.into_inner();
            let client = self
                .data_client(&caller, r.provider_ref, &r.source_namespace)
                .await?;
            let remote = remote_from_wire(required(r.remote_ref, "remote_ref")?);
            let value = client.get_secret(&remote).await.map_err(status)?;
            Ok(v1::GetSecretResponse { value })
        })
        .await
    }

    async fn get_secret_map(
        &self,
        request: Request<v1::GetSecretMapRequest>,
    ) -> Result<Response<v1::GetSecretMapResponse>, Status> {
        self.observe("GetSecretMap", async {
            let caller = identity::caller(&request)?;
            let r = request.into_inner();
            let client = self
                .data_client(&caller, r.provider_ref, &r.source_namespace)
                .await?;
            let remote = remote_from_wire(required(r.remote_ref, "remote_ref")?);
            let secrets = client.get_secret_map(&remote).await.map_err(status)?;
            Ok(v1::GetSecretMapResponse {
                secrets: wire_map(secrets),
            })
        })
        .await
    }

    async fn push_secret(
        &self,
        request: Request<v1::PushSecretRequest>,
    ) -> Result<Response<v1::PushSecretResponse>, Status> {
        self.observe("PushSecret", async {
            let caller = identity::caller(&request)?;
            let mut r = request.into_inner();
            let client = self
                .data_client(&caller, r.provider_ref.take(), &r.source_namespace)
                .await?;
            let push = push_from_wire(r).map_err(Status::invalid_argument)?;
            client.push_secret(&push).await.map_err(status)?;
            Ok(v1::PushSecretResponse {})
        })
        .await
    }

    async fn delete_secret(
        &self,
        request: Request<v1::DeleteSecretRequest>,
    ) -> Result<Response<v1::DeleteSecretResponse>, Status> {
        self.observe("DeleteSecret", async {
            let caller = identity::caller(&request)?;
            let r = request.into_inner();
            let client = self
                .data_client(&caller, r.provider_ref, &r.source_namespace)
                .await?;
            let remote = push_remote_from_wire(required(r.remote_ref, "remote_ref")?);
            client.delete_secret(&remote).await.map_err(status)?;
            Ok(v1::DeleteSecretResponse {})
        })
        .await
    }

    async fn secret_exists(
        &self,
        request: Request<v1::SecretExistsRequest>,
    ) -> Result<Response<v1::SecretExistsResponse>, Status> {
        self.observe("SecretExists", async {
            let caller = identity::caller(&request)?;
            let r = request.into_inner();
            let client = self
                .data_client(&caller, r.provider_ref, &r.source_namespace)
                .await?;
            let remote = push_remote_from_wire(required(r.remote_ref, "remote_ref")?);
            let exists = client.secret_exists(&remote).await.map_err(status)?;
            Ok(v1::SecretExistsResponse { exists })
        })
        .await
    }

    async fn get_all_secrets(
        &self,
        request: Request<v1::GetAllSecretsRequest>,
    ) -> Result<Response<v1::GetAllSecretsResponse>, Status> {
        self.observe("GetAllSecrets", async {
            let caller = identity::caller(&request)?;
            let r = request.into_inner();
            let client = self
                .data_client(&caller, r.provider_ref, &r.source_namespace)
                .await?;
            let find = find_from_wire(required(r.find, "find")?);
            let secrets = client.get_all_secrets(&find).await.map_err(status)?;
            Ok(v1::GetAllSecretsResponse {
                secrets: wire_map(secrets),
            })
        })
        .await
    }

    async fn validate(
        &self,
        request: Request<v1::ValidateRequest>,
    ) -> Result<Response<v1::ValidateResponse>, Status> {
        self.observe("Validate", async {
            let caller = identity::caller(&request)?;
            let r = request.into_inner();
            let reference = required(r.provider_ref, "provider_ref")?;
            let resolved = self
                .resolve(&caller, &reference, &r.source_namespace)
                .await?;
            // A check that fails is answered as ESO's servers answer it, `valid: false` with the
            // error's text; `failure` keeps its kind, so that a backend that cannot be reached
            // stays that for our operator rather than reading as an invalid configuration.
            let checked = match resolved.provider.validate_spec(&resolved.spec) {
                Ok(report) => resolved
                    .client
                    .validate()
                    .await
                    .map(|validation| (report.warnings, validation)),
                Err(e) => Err(e),
            };
            Ok(match checked {
                Ok((warnings, validation)) => v1::ValidateResponse {
                    valid: true,
                    error: String::new(),
                    warnings,
                    unknown: validation == Validation::Unknown,
                    failure: None,
                },
                Err(e) => v1::ValidateResponse {
                    valid: false,
                    error: e.to_string(),
                    warnings: Vec::new(),
                    unknown: false,
                    failure: Some(error_to_wire(&e)),
                },
            })
        })
        .await
    }

    async fn capabilities(
        &self,
        request: Request<v1::CapabilitiesRequest>,
    ) -> Result<Response<v1::CapabilitiesResponse>, Status> {
        self.observe("Capabilities", async {
            let caller = identity::caller(&request)?;
            let r = request.into_inner();
            let reference = required(r.provider_ref, "provider_ref")?;
            identity::check(&caller, &reference, &r.source_namespace)?;
            let provider = self
                .resolver
                .provider(&reference, &r.source_namespace)
                .await
                .map_err(status)?;
            Ok(v1::CapabilitiesResponse {
                capabilities: capabilities_to_wire(provider.capabilities()).into(),
            })
        })
        .await
    }
}
