//! ESO's AWS provider: Secrets Manager and Parameter Store, read and written as ESO does
//! (`providers/v1/aws`), on the AWS SDK for Rust.
//!
//! One client per identity: the client manager caches a client per provider object and
//! consumer namespace, and the client's credentials ([`auth`]) are fetched once and kept until
//! shortly before they expire, so a role is assumed once however many ExternalSecrets read
//! through it. Endpoints follow the SDKs' standard environment (`AWS_ENDPOINT_URL`,
//! `AWS_ENDPOINT_URL_<SERVICE>`) and ESO's own (`AWS_SECRETSMANAGER_ENDPOINT`,
//! `AWS_SSM_ENDPOINT`, `AWS_STS_ENDPOINT`), so a VPC endpoint or a stand-in is set the way a
//! user of either sets it. Every call is counted by service, operation and outcome
//! ([`calls`]); throttled calls are retried by the SDK with backoff and counted as such.

mod auth;
mod calls;
mod errors;
mod parameter_store;
mod push_metadata;
mod referent;
mod secrets_manager;
mod spec;

use std::sync::Arc;

use api::provider_kinds::Descriptor;
use api::providers::aws::{AwsProvider, DESCRIPTOR};
use async_trait::async_trait;
use provider::{
    Caller, Capabilities, ClientRequest, CredentialKind, CredentialRef, CredentialsReader,
    ProviderRuntime, ProviderSchema, Result, SecretsClient, SpecReport, parse_spec,
};
use serde_json::Value;

pub use crate::calls::CallLabels;
use crate::calls::Calls;
use crate::spec::Service;

/// ESO's `GetSecretMap` for both services: the value must be a JSON object; strings are taken
/// as text, anything else as its JSON.
fn as_map(key: &str, value: &[u8]) -> Result<std::collections::BTreeMap<String, Vec<u8>>> {
    let object = provider::json_path::object(value).map_err(|why| {
        provider::Error::Backend(format!(
            "unable to unmarshal secret {key}: not a JSON object{why}"
        ))
    })?;
    Ok(object
        .into_iter()
        .map(|(k, v)| (k, provider::json_path::json_to_bytes(v)))
        .collect())
}

/// A referent cluster store checked on its own has no namespace to read credentials in: a call
/// through it says so.
fn no_namespace_yet() -> provider::Error {
    provider::Error::Credentials {
        reference: "auth".into(),
        reason: "a ClusterSecretStore's credentials without a namespace are read in the namespace of the ExternalSecret or PushSecret using it".into(),
    }
}

#[derive(Default)]
pub struct Aws {
    calls: Calls,
}

impl ProviderSchema for Aws {
    fn descriptor(&self) -> &'static Descriptor {
        &DESCRIPTOR
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ReadWrite
    }

    fn apply_referent(&self, spec: Value, caller: Caller, namespace: &str) -> Result<Value> {
        referent::REFERENCES.apply(spec, caller, namespace)
    }

    fn validate_spec(&self, spec: &Value) -> Result<SpecReport> {
        let spec: AwsProvider = parse_spec(spec)?;
        spec::check(&spec)?;
        Ok(SpecReport::default())
    }

    fn credential_refs(&self, spec: &Value, _namespace: &str) -> Vec<CredentialRef> {
        referent::REFERENCES.credential_refs(spec)
    }

    fn credential_kinds(&self) -> std::collections::BTreeSet<CredentialKind> {
        referent::REFERENCES.kinds()
    }
}

#[async_trait]
impl ProviderRuntime for Aws {
    async fn new_client(
        &self,
        request: ClientRequest,
        credentials: Arc<dyn CredentialsReader>,
    ) -> Result<Box<dyn SecretsClient>> {
        let spec: AwsProvider = parse_spec(&request.spec)?;
        let checked = spec::check(&spec)?;
        // A referent cluster store checked on its own has no namespace to read credentials in
        // yet; like ESO, it is usable and cannot be checked (`Validation::Unknown`).
        let config = if referent::REFERENCES.unresolved(&request.spec).is_empty() {
            Some(auth::sdk_config(&spec, credentials, self.calls.clone()).await?)
        } else {
            None
        };
        Ok(match checked.service {
            Service::SecretsManager => Box::new(secrets_manager::SecretsManager::new(
                config.as_ref(),
                checked,
                self.calls.clone(),
            )),
            Service::ParameterStore => Box::new(parameter_store::ParameterStore::new(
                config.as_ref(),
                checked,
                self.calls.clone(),
            )),
        })
    }

    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "aws_api_calls",
            "Calls to AWS APIs (each attempt) by service, operation and outcome",
            self.calls.clone(),
        );
    }
}
