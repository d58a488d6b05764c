//! ESO's Kubernetes provider: Secrets of one namespace of another cluster (or of this one) read,
//! found and written through that cluster's API with credentials the store names, never with
//! the operator's own.

mod connect;
mod metadata;
mod secrets;

use std::collections::BTreeMap;
use std::sync::Arc;

use api::provider_kinds::Descriptor;
use api::providers::kubernetes::{DESCRIPTOR, KubernetesProvider};
use async_trait::async_trait;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    SelfSubjectRulesReview, SelfSubjectRulesReviewSpec,
};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use provider::referent::{Reference, References};
use provider::{
    Caller, Capabilities, ClientRequest, CredentialKind, CredentialRef, CredentialsReader, Error,
    FindRequest, ProviderRuntime, ProviderSchema, PushRemoteRef, PushRequest, RemoteRef, Result,
    SecretsClient, SpecReport, Validation, parse_spec,
};
use serde_json::Value;

use connect::Connection;
pub use connect::Home;
use secrets::Deletion;

/// Where credential references sit in a Kubernetes spec, and what they name.
const REFERENCES: References = References(&[
    (
        "/auth/token/bearerToken",
        Reference::Fixed(CredentialKind::Secret),
    ),
    (
        "/auth/cert/clientCert",
        Reference::Fixed(CredentialKind::Secret),
    ),
    (
        "/auth/cert/clientKey",
        Reference::Fixed(CredentialKind::Secret),
    ),
    (
        "/auth/serviceAccount",
        Reference::Fixed(CredentialKind::ServiceAccountToken),
    ),
    ("/authRef", Reference::Fixed(CredentialKind::Secret)),
    ("/server/caProvider", Reference::CaProvider),
]);

/// A write that met a newer version of the Secret is tried again this many times.
const CONFLICT_ATTEMPTS: usize = 3;

#[derive(Default)]
pub struct Kubernetes {
    home: Home,
}

impl Kubernetes {
    /// A provider whose stores without `server.url` reach `home`.
    pub fn new(home: Home) -> Self {
        Self { home }
    }
}

impl ProviderSchema for Kubernetes {
    fn descriptor(&self) -> &'static Descriptor {
        &DESCRIPTOR
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ReadWrite
    }

    fn apply_referent(&self, spec: Value, caller: Caller, namespace: &str) -> Result<Value> {
        REFERENCES.apply(spec, caller, namespace)
    }

    fn validate_spec(&self, spec: &Value) -> Result<SpecReport> {
        let spec: KubernetesProvider = parse_spec(spec)?;
        let mut warnings = Vec::new();
        match (&spec.auth, &spec.auth_ref) {
            (Some(_), Some(_)) => {
                return Err(Error::InvalidSpec("set auth or authRef, not both".into()));
            }
            (None, None) => {
                return Err(Error::InvalidSpec(
                    "set auth or authRef (the operator's own credentials are never used)".into(),
                ));
            }
            (Some(auth), None) => {
                connect::method(auth)?;
                let server = spec.server.clone().unwrap_or_default();
                if server.ca_bundle.is_none() && server.ca_provider.is_none() {
                    // ESO's admission warning, word for word.
                    warnings.push("No caBundle or caProvider specified; TLS connections will use system certificate roots.".to_owned());
                }
                if server
                    .url
                    .as_deref()
                    .is_some_and(|u| u.starts_with("http://"))
                {
                    warnings.push(
                        "server.url uses http://: the credentials are sent in clear".to_owned(),
                    );
                }
            }
            (None, Some(_)) => {}
        }
        Ok(SpecReport { warnings })
    }

    fn credential_refs(&self, spec: &Value, _namespace: &str) -> Vec<CredentialRef> {
        REFERENCES.credential_refs(spec)
    }

    fn credential_kinds(&self) -> std::collections::BTreeSet<CredentialKind> {
        REFERENCES.kinds()
    }
}

#[async_trait]
impl ProviderRuntime for Kubernetes {
    async fn new_client(
        &self,
        request: ClientRequest,
        credentials: Arc<dyn CredentialsReader>,
    ) -> Result<Box<dyn SecretsClient>> {
        let spec: KubernetesProvider = parse_spec(&request.spec)?;
        // A referent cluster store checked on its own has no namespace to read credentials in.
        let referent = !REFERENCES.unresolved(&request.spec).is_empty();
        let connection = if referent {
            None
        } else {
            Some(Connection::build(&spec, &self.home, credentials).await?)
        };
        Ok(Box::new(KubernetesSecrets {
            connection,
            remote_namespace: spec
                .remote_namespace
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "default".to_owned()),
            cluster_scoped: request.provider.namespace.is_none(),
        }))
    }
}

struct KubernetesSecrets {
    /// `None` for a referent cluster store checked on its own: usable, but not here.
    connection: Option<Connection>,
    remote_namespace: String,
    /// Reached through a ClusterSecretStore (a cluster-scoped provider object): only then may a
    /// push name another namespace.
    cluster_scoped: bool,
}

impl KubernetesSecrets {
    fn connection(&self) -> Result<&Connection> {
        self.connection.as_ref().ok_or_else(|| {
            Error::Backend("a referent ClusterSecretStore reads credentials in the namespace of the ExternalSecret or PushSecret that uses it".into())
        })
    }

    async fn secrets(&self, namespace: &str) -> Result<Api<Secret>> {
        Ok(Api::namespaced(
            self.connection()?.client().await?,
            namespace,
        ))
    }

    /// The contract's error for what the remote API server answered.
    fn error(&self, e: kube::Error) -> Error {
        let url = self
            .connection
            .as_ref()
            .map(Connection::url)
            .unwrap_or_default();
        match e {
            kube::Error::Api(status) => match status.code {
                404 => Error::NoSecret,
                401 => Error::Credentials {
                    reference: self
                        .connection
                        .as_ref()
                        .map(|c| c.described.clone())
                        .unwrap_or_default(),
                    reason: format!("the API server at {url} refused them (401 Unauthorized)"),
                },
                429 | 500..=599 => Error::Unavailable(format!(
                    "the API server at {url} answered {}: {}",
                    status.code, status.message
                )),
                409 => Error::Conflict(status.message),
                _ => Error::Backend(format!("the API server at {url}: {}", status.message)),
            },
            kube::Error::HyperError(_) | kube::Error::Service(_) => {
                Error::Unavailable(format!("the API server at {url} cannot be reached: {e}"))
            }
            other => Error::Backend(format!("the API server at {url}: {other}")),
        }
    }

    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Secret>> {
        let api = self.secrets(namespace).await?;
        api.get_opt(name).await.map_err(|e| self.error(e))
    }

    async fn read(&self, remote: &RemoteRef) -> Result<Secret> {
        self.get(&self.remote_namespace, &remote.key)
            .await?
            .ok_or(Error::NoSecret)
    }

    /// Whether the credentials may get Secrets in the remote namespace: ESO asks for the rules
    /// first and falls back to an access review.
    async fn may_get_secrets(&self) -> Result<bool> {
        let client = self.connection()?.client().await?;
        let namespace = self.remote_namespace.clone();
        let rules = Api::<SelfSubjectRulesReview>::all(client.clone())
            .create(
                &PostParams::default(),
                &SelfSubjectRulesReview {
                    spec: SelfSubjectRulesReviewSpec {
                        namespace: Some(namespace.clone()),
                    },
                    ..Default::default()
                },
            )
            .await;
        if let Ok(review) = &rules {
            let any = |list: &Option<Vec<String>>, wanted: &[&str]| {
                list.iter().flatten().any(|v| wanted.contains(&v.as_str()))
            };
            let granted = review
                .status
                .iter()
                .flat_map(|s| &s.resource_rules)
                .any(|r| {
                    any(&r.resources, &["secrets", "*"])
                        && r.verbs.iter().any(|v| v == "get" || v == "*")
                        && r.api_groups.as_ref().is_none_or(|g| {
                            g.is_empty() || g.iter().any(|g| g.is_empty() || g == "*")
                        })
                });
            if granted {
                return Ok(true);
            }
        }
        let review = Api::<SelfSubjectAccessReview>::all(client)
            .create(
                &PostParams::default(),
                &SelfSubjectAccessReview {
                    spec: SelfSubjectAccessReviewSpec {
                        resource_attributes: Some(ResourceAttributes {
                            resource: Some("secrets".into()),
                            namespace: Some(namespace),
                            verb: Some("get".into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| self.error(e))?;
        Ok(review.status.is_some_and(|s| s.allowed))
    }

    /// Writes `desired` over `existing` (or creates it), keeping what else the Secret carries.
    async fn write(
        &self,
        api: &Api<Secret>,
        existing: Option<Secret>,
        desired: Secret,
    ) -> Result<()> {
        match existing {
            None => api
                .create(&PostParams::default(), &desired)
                .await
                .map(drop)
                .map_err(|e| self.error(e)),
            Some(mut existing) => {
                existing.type_ = desired.type_;
                existing.data = desired.data;
                existing.string_data = None;
                existing.metadata.labels = desired.metadata.labels;
                existing.metadata.annotations = desired.metadata.annotations;
                let name = existing.metadata.name.clone().unwrap_or_default();
                api.replace(&name, &PostParams::default(), &existing)
                    .await
                    .map(drop)
                    .map_err(|e| self.error(e))
            }
        }
    }

    async fn push_once(&self, push: &PushRequest) -> Result<()> {
        let metadata = metadata::parse(push.metadata.as_ref())?;
        let namespace = match metadata
            .as_ref()
            .and_then(|m| m.remote_namespace.clone())
            .filter(|n| !n.is_empty())
        {
            Some(_) if !self.cluster_scoped => {
                return Err(Error::InvalidSpec(
                    "metadata.spec.remoteNamespace: only a ClusterSecretStore may push to another namespace than its remoteNamespace".into(),
                ));
            }
            Some(namespace) => namespace,
            None => self.remote_namespace.clone(),
        };
        let api = self.secrets(&namespace).await?;
        let existing = api
            .get_opt(&push.remote.remote_key)
            .await
            .map_err(|e| self.error(e))?;
        let desired = secrets::desired(existing.as_ref(), &namespace, push, metadata.as_ref())?;
        if existing
            .as_ref()
            .is_some_and(|e| secrets::unchanged(e, &desired))
        {
            return Ok(());
        }
        self.write(&api, existing, desired).await
    }

    async fn delete_once(&self, remote: &PushRemoteRef) -> Result<()> {
        let api = self.secrets(&self.remote_namespace).await?;
        let Some(existing) = api
            .get_opt(&remote.remote_key)
            .await
            .map_err(|e| self.error(e))?
        else {
            return Ok(());
        };
        match secrets::deletion(&existing, remote.property.as_deref()) {
            Deletion::Nothing => Ok(()),
            Deletion::Update(data) => {
                let mut updated = existing;
                updated.data = Some(data);
                api.replace(&remote.remote_key, &PostParams::default(), &updated)
                    .await
                    .map(drop)
                    .map_err(|e| self.error(e))
            }
            Deletion::Delete => match api
                .delete(&remote.remote_key, &DeleteParams::default())
                .await
                .map_err(|e| self.error(e))
            {
                Ok(_) | Err(Error::NoSecret) => Ok(()),
                Err(e) => Err(e),
            },
        }
    }
}

/// Runs a read-modify-write again when the Secret changed in between (409).
async fn retrying_conflicts<F, Fut>(mut attempt: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let mut left = CONFLICT_ATTEMPTS;
    loop {
        match attempt().await {
            Err(Error::Conflict(_)) if left > 1 => left -= 1,
            other => return other,
        }
    }
}

#[async_trait]
impl SecretsClient for KubernetesSecrets {
    async fn get_secret(&self, remote: &RemoteRef) -> Result<Vec<u8>> {
        secrets::value(&self.read(remote).await?, remote)
    }

    async fn get_secret_map(&self, remote: &RemoteRef) -> Result<BTreeMap<String, Vec<u8>>> {
        secrets::map(&self.read(remote).await?, remote)
    }

    async fn get_all_secrets(&self, find: &FindRequest) -> Result<BTreeMap<String, Vec<u8>>> {
        let api = self.secrets(&self.remote_namespace).await?;
        let listed = api
            .list(&ListParams::default().labels(&secrets::label_selector(&find.tags)))
            .await
            .map_err(|e| self.error(e))?;
        secrets::found(&listed.items, find)
    }

    async fn push_secret(&self, push: &PushRequest) -> Result<()> {
        retrying_conflicts(|| self.push_once(push)).await
    }

    async fn delete_secret(&self, remote: &PushRemoteRef) -> Result<()> {
        retrying_conflicts(|| self.delete_once(remote)).await
    }

    async fn secret_exists(&self, remote: &PushRemoteRef) -> Result<bool> {
        let existing = self.get(&self.remote_namespace, &remote.remote_key).await?;
        Ok(secrets::exists(
            existing.as_ref(),
            remote.property.as_deref(),
        ))
    }

    async fn validate(&self) -> Result<Validation> {
        let Some(connection) = &self.connection else {
            return Ok(Validation::Unknown);
        };
        if self.may_get_secrets().await? {
            return Ok(Validation::Ready);
        }
        Err(Error::Backend(format!(
            "{} may not get secrets in namespace {:?} of {} (SelfSubjectRulesReview and SelfSubjectAccessReview: get secrets not allowed)",
            connection.described,
            self.remote_namespace,
            connection.url()
        )))
    }

    async fn close(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
