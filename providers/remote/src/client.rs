//! [`RemoteClient`]: the `SecretsClient` of a provider served out of process.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::balance::Transport;
use api::provider_kinds::Capabilities;
use async_trait::async_trait;
use provider::{
    Error, FindRequest, PushRemoteRef, PushRequest, RemoteRef, Result, SecretsClient, Validation,
};
use provider_protocol::v1::secret_store_provider_client::SecretStoreProviderClient;
use provider_protocol::{self as protocol, v1};

use crate::pool::Connection;

/// Calls on behalf of one store and one namespace. It holds its connection, so the pool keeps
/// the connection while any store uses it.
pub struct RemoteClient {
    connection: Connection,
    reference: v1::ProviderReference,
    source_namespace: String,
    deadline: Duration,
    warnings: std::sync::Mutex<Vec<String>>,
}

impl RemoteClient {
    /// `reference` names the provider object the server loads; `source_namespace` is the
    /// namespace of the ExternalSecrets and PushSecrets this client serves. Every call has the
    /// connection's deadline; [`RemoteClient::with_deadline`] gives it another.
    pub fn new(
        connection: Connection,
        reference: v1::ProviderReference,
        source_namespace: String,
    ) -> Self {
        Self {
            deadline: connection.deadline(),
            connection,
            reference,
            source_namespace,
            warnings: Default::default(),
        }
    }

    /// Every call's deadline (a class's `spec.callTimeout`), sent to the server as
    /// `grpc-timeout`, whatever the connection's.
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    fn stub(&self) -> SecretStoreProviderClient<Transport> {
        SecretStoreProviderClient::new(self.connection.transport())
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(self.deadline);
        request
    }

    /// A status as the provider error it stands for; one that says the server could not be
    /// reached names the server, since the store's condition is all the user sees.
    fn failed(&self, status: &tonic::Status, method: &str) -> Error {
        // A status the server sent carries no source; one made here from a failed connection,
        // handshake or deadline does, whatever code tonic gave it: the server was not reached,
        // which the breaker must see as such.
        let local = std::error::Error::source(status).is_some();
        match protocol::error_from_status(status, method) {
            Error::Unavailable(_) => self.unreachable(status),
            _ if local => self.unreachable(status),
            other => other,
        }
    }

    fn unreachable(&self, status: &tonic::Status) -> Error {
        self.unavailable(&crate::probe::describe(status))
    }

    fn unavailable(&self, why: &str) -> Error {
        Error::Unavailable(format!(
            "provider server {}: {why}",
            self.connection.address()
        ))
    }

    fn provider_ref(&self) -> Option<v1::ProviderReference> {
        Some(self.reference.clone())
    }

    /// The server's capabilities for this provider object.
    pub async fn capabilities(&self) -> Result<Capabilities> {
        let answer = self
            .stub()
            .capabilities(self.request(v1::CapabilitiesRequest {
                provider_ref: self.provider_ref(),
                source_namespace: self.source_namespace.clone(),
            }))
            .await
            .map_err(|s| self.failed(&s, "Capabilities"))?;
        Ok(protocol::capabilities_from_wire(
            answer.into_inner().capabilities,
        ))
    }

    /// `Validate` with the server's warnings.
    pub async fn validate_with_warnings(&self) -> Result<(Validation, Vec<String>)> {
        let answer = self
            .stub()
            .validate(self.request(v1::ValidateRequest {
                provider_ref: self.provider_ref(),
                source_namespace: self.source_namespace.clone(),
            }))
            .await
            .map_err(|s| self.failed(&s, "Validate"))?
            .into_inner();
        if !answer.valid {
            // A failed validation is answered, as ESO's servers do, rather than a status (which
            // is read too, above); ours say what kind of failure in `failure`.
            return Err(match answer.failure {
                Some(failure) => match protocol::error_from_wire(failure, "Validate") {
                    Error::Unavailable(why) => self.unavailable(&why),
                    other => other,
                },
                None if answer.error.is_empty() => {
                    Error::Backend("the provider server found the configuration invalid".into())
                }
                None => Error::Backend(answer.error),
            });
        }
        let validation = if answer.unknown {
            Validation::Unknown
        } else {
            Validation::Ready
        };
        Ok((validation, answer.warnings))
    }
}

#[async_trait]
impl SecretsClient for RemoteClient {
    async fn get_secret(&self, remote: &RemoteRef) -> Result<Vec<u8>> {
        let answer = self
            .stub()
            .get_secret(self.request(v1::GetSecretRequest {
                remote_ref: Some(protocol::remote_to_wire(remote)),
                provider_ref: self.provider_ref(),
                source_namespace: self.source_namespace.clone(),
            }))
            .await
            .map_err(|s| self.failed(&s, "GetSecret"))?;
        Ok(answer.into_inner().value)
    }

    async fn get_secret_map(&self, remote: &RemoteRef) -> Result<BTreeMap<String, Vec<u8>>> {
        let answer = self
            .stub()
            .get_secret_map(self.request(v1::GetSecretMapRequest {
                remote_ref: Some(protocol::remote_to_wire(remote)),
                provider_ref: self.provider_ref(),
                source_namespace: self.source_namespace.clone(),
            }))
            .await
            .map_err(|s| self.failed(&s, "GetSecretMap"))?;
        Ok(answer.into_inner().secrets.into_iter().collect())
    }

    async fn get_all_secrets(&self, find: &FindRequest) -> Result<BTreeMap<String, Vec<u8>>> {
        let answer = self
            .stub()
            .get_all_secrets(self.request(v1::GetAllSecretsRequest {
                provider_ref: self.provider_ref(),
                find: Some(protocol::find_to_wire(find)),
                source_namespace: self.source_namespace.clone(),
            }))
            .await
            .map_err(|s| self.failed(&s, "GetAllSecrets"))?;
        Ok(answer.into_inner().secrets.into_iter().collect())
    }

    async fn push_secret(&self, push: &PushRequest) -> Result<()> {
        self.stub()
            .push_secret(self.request(v1::PushSecretRequest {
                provider_ref: self.provider_ref(),
                source_namespace: self.source_namespace.clone(),
                ..protocol::push_to_wire(push)
            }))
            .await
            .map_err(|s| self.failed(&s, "PushSecret"))?;
        Ok(())
    }

    async fn delete_secret(&self, remote: &PushRemoteRef) -> Result<()> {
        self.stub()
            .delete_secret(self.request(v1::DeleteSecretRequest {
                provider_ref: self.provider_ref(),
                remote_ref: Some(protocol::push_remote_to_wire(remote)),
                source_namespace: self.source_namespace.clone(),
            }))
            .await
            .map_err(|s| self.failed(&s, "DeleteSecret"))?;
        Ok(())
    }

    async fn secret_exists(&self, remote: &PushRemoteRef) -> Result<bool> {
        let answer = self
            .stub()
            .secret_exists(self.request(v1::SecretExistsRequest {
                provider_ref: self.provider_ref(),
                remote_ref: Some(protocol::push_remote_to_wire(remote)),
                source_namespace: self.source_namespace.clone(),
            }))
            .await
            .map_err(|s| self.failed(&s, "SecretExists"))?;
        Ok(answer.into_inner().exists)
    }

    async fn validate(&self) -> Result<Validation> {
        let (validation, warnings) = self.validate_with_warnings().await?;
        *self.warnings.lock().expect("warnings lock poisoned") = warnings;
        Ok(validation)
    }

    fn validation_warnings(&self) -> Vec<String> {
        self.warnings
            .lock()
            .expect("warnings lock poisoned")
            .clone()
    }

    async fn close(&self) -> Result<()> {
        // The connection is shared; dropping this client releases its hold on it.
        Ok(())
    }
}
