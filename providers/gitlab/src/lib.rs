//! ESO's GitLab provider: CI/CD variables of a project and of groups (`groupIDs`, or the
//! project's ancestors with `inheritFromGroups`), read as ESO reads them, and, beyond ESO,
//! written by PushSecret.
//!
//! Reading follows ESO (`providers/v1/gitlab`): keys take `_` for `-`; a single variable is
//! looked up in the project, then in the groups from last to first, each time with the store's
//! `environment` as `filter[environment_scope]` and then with `*`; `find` lists the groups left to
//! right, then the project, and the more specific value of a key wins (see
//! [`variables::Merge`]). Writing creates or updates a variable of the project (of the first of
//! `groupIDs` when there is no project) in the store's environment scope, and marks it in its
//! `description` ([`push::MANAGED_BY`]): a variable without the marker is never overwritten or
//! deleted.
//!
//! The requests are the `gitlab` crate's typed endpoints and page walk, sent through our own
//! `reqwest` client ([`http`]): one client with the store's CA roots per provider client, 429s
//! waited out as `Retry-After` says, `X-Next-Page` ending a walk, per-call metrics and errors
//! that never carry values stay ours.

mod http;
mod ops;
mod push;
mod referent;
mod variables;

use std::collections::BTreeMap;
use std::sync::Arc;

use api::provider_kinds::Descriptor;
use api::providers::gitlab::{DESCRIPTOR, GitlabProvider};
use async_trait::async_trait;
use provider::{
    Caller, Capabilities, ClientRequest, CredentialKind, CredentialRef, CredentialsReader, Error,
    FindRequest, ProviderRuntime, ProviderSchema, PushRemoteRef, PushRequest, RemoteRef, Result,
    SecretsClient, SpecReport, Validation, parse_spec,
};
use serde_json::Value;

use crate::http::{ApiError, Calls, GitlabApi};
use crate::ops::Scope;
use crate::push::VariableWrite;
use crate::variables::{Place, Variable};

pub use crate::http::CallLabels;

#[derive(Default)]
pub struct Gitlab {
    calls: Calls,
}

impl ProviderSchema for Gitlab {
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
        let spec: GitlabProvider = parse_spec(spec)?;
        let base = http::api_base(spec.url.as_deref())?;
        let project = spec.project_id.as_deref().filter(|p| !p.is_empty());
        let groups = spec.group_ids.as_deref().unwrap_or_default();
        let inherit = spec.inherit_from_groups == Some(true);
        if inherit && project.is_none() {
            return Err(Error::InvalidSpec(
                "inheritFromGroups needs projectID (the project whose groups are inherited)".into(),
            ));
        }
        if project.is_none() && groups.is_empty() {
            return Err(Error::InvalidSpec(
                "projectID or groupIDs is required".into(),
            ));
        }
        if let Some(i) = groups.iter().position(|g| g.is_empty()) {
            return Err(Error::InvalidSpec(format!(
                "groupIDs[{i}] must not be empty"
            )));
        }
        if inherit && !groups.is_empty() {
            return Err(Error::InvalidSpec(
                "groupIDs and inheritFromGroups are exclusive: list the groups or inherit them from the project, not both".into(),
            ));
        }
        let token =
            spec.auth.secret_ref.access_token.as_ref().ok_or_else(|| {
                Error::InvalidSpec("auth.SecretRef.accessToken is required".into())
            })?;
        if token.name.as_deref().is_none_or(str::is_empty) {
            return Err(Error::InvalidSpec(
                "auth.SecretRef.accessToken.name is required".into(),
            ));
        }
        if token.key.as_deref().is_none_or(str::is_empty) {
            return Err(Error::InvalidSpec(
                "auth.SecretRef.accessToken.key is required".into(),
            ));
        }
        // Accepted as ESO does, for a server on the developer's machine, but said.
        let warnings = (base.scheme() == "http")
            .then(|| "url uses http://: the access token is sent in clear".to_owned())
            .into_iter()
            .collect();
        Ok(SpecReport { warnings })
    }

    fn credential_refs(&self, spec: &Value, _namespace: &str) -> Vec<CredentialRef> {
        referent::REFERENCES.credential_refs(spec)
    }

    fn credential_kinds(&self) -> std::collections::BTreeSet<CredentialKind> {
        referent::REFERENCES.kinds()
    }
}

#[async_trait]
impl ProviderRuntime for Gitlab {
    async fn new_client(
        &self,
        request: ClientRequest,
        credentials: Arc<dyn CredentialsReader>,
    ) -> Result<Box<dyn SecretsClient>> {
        self.validate_spec(&request.spec)?;
        let spec: GitlabProvider = parse_spec(&request.spec)?;
        let config = Config::from_spec(&spec);
        // A referent cluster store checked on its own has no namespace to read the token in.
        if !referent::REFERENCES.unresolved(&request.spec).is_empty() {
            return Ok(Box::new(GitlabSecrets { api: None, config }));
        }
        let token = read_token(&config.token, credentials.as_ref()).await?;
        let api =
            GitlabApi::connect(&spec, &token, credentials.as_ref(), self.calls.clone()).await?;
        Ok(Box::new(GitlabSecrets {
            api: Some(api),
            config,
        }))
    }

    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "gitlab_api_calls",
            "Calls to the GitLab API by ESO call name and outcome",
            self.calls.clone(),
        );
    }
}

/// Where the access token is: `Secret namespace/name`, key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct TokenRef {
    namespace: String,
    name: String,
    key: String,
}

impl std::fmt::Display for TokenRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Secret {}/{} (key {:?})",
            self.namespace, self.name, self.key
        )
    }
}

async fn read_token(token: &TokenRef, credentials: &dyn CredentialsReader) -> Result<String> {
    let bytes = credentials
        .secret_key(&token.namespace, &token.name, &token.key)
        .await?;
    let text = String::from_utf8(bytes).map_err(|_| Error::Credentials {
        reference: format!("Secret {}/{}", token.namespace, token.name),
        reason: format!("key {:?} is not UTF-8 text", token.key),
    })?;
    let text = text.trim();
    if text.is_empty() {
        return Err(Error::Credentials {
            reference: format!("Secret {}/{}", token.namespace, token.name),
            reason: format!("key {:?} is empty: no GitLab access token", token.key),
        });
    }
    Ok(text.to_owned())
}

/// What a client needs of the spec.
#[derive(Clone, Debug, Default)]
struct Config {
    scope: Scope,
    token: TokenRef,
}

impl Config {
    fn from_spec(spec: &GitlabProvider) -> Self {
        let token = spec
            .auth
            .secret_ref
            .access_token
            .clone()
            .unwrap_or_default();
        Self {
            scope: Scope {
                project: spec.project_id.clone().filter(|p| !p.is_empty()),
                groups: spec.group_ids.clone().unwrap_or_default(),
                inherit_from_groups: spec.inherit_from_groups == Some(true),
                environment: spec.environment.clone().unwrap_or_default(),
            },
            token: TokenRef {
                namespace: token.namespace.unwrap_or_default(),
                name: token.name.unwrap_or_default(),
                key: token.key.unwrap_or_default(),
            },
        }
    }
}

struct GitlabSecrets {
    /// `None` for a referent cluster store checked on its own: usable, but not here.
    api: Option<GitlabApi>,
    config: Config,
}

impl GitlabSecrets {
    fn backend(&self) -> Result<Http<'_>> {
        let api = self.api.as_ref().ok_or_else(|| {
            Error::Backend("a referent ClusterSecretStore reads its GitLab token in the namespace of the ExternalSecret or PushSecret that uses it".into())
        })?;
        Ok(Http {
            api,
            token: &self.config.token,
        })
    }
}

/// The operations' [`ops::Backend`] over HTTP, with GitLab's refusals explained.
struct Http<'a> {
    api: &'a GitlabApi,
    token: &'a TokenRef,
}

/// Turns GitLab's refusals into messages that say what to fix.
fn explain(e: ApiError, token: &TokenRef) -> Error {
    match e.status() {
        Some(401) => Error::Backend(format!(
            "{e}: the access token in {token} is missing, expired or revoked"
        )),
        Some(403) => Error::Backend(format!(
            "{e}: the access token in {token} may not use this API (project variables need Maintainer, group variables Owner, and the token the api or read_api scope)"
        )),
        Some(409) => Error::Backend(format!(
            "{e}: the variable exists in several environment scopes; set spec.environment to choose one"
        )),
        _ => e.into(),
    }
}

#[async_trait]
impl ops::Backend for Http<'_> {
    async fn get(&self, place: &Place, key: &str, scope: Option<&str>) -> Result<Option<Variable>> {
        self.api
            .get_variable(place, key, scope)
            .await
            .map_err(|e| explain(e, self.token))
    }

    async fn list(&self, place: &Place) -> Result<Vec<Variable>> {
        self.api
            .list_variables(place, false)
            .await
            .map_err(|e| explain(e, self.token))
    }

    async fn ancestors(&self, project: &str) -> Result<Vec<String>> {
        let groups = self
            .api
            .list_project_groups(project)
            .await
            .map_err(|e| explain(e, self.token))?;
        Ok(variables::ancestor_ids(groups))
    }

    async fn create(&self, place: &Place, body: &VariableWrite) -> Result<()> {
        self.api
            .create_variable(place, body)
            .await
            .map_err(|e| explain(e, self.token))
    }

    async fn update(&self, place: &Place, body: &VariableWrite) -> Result<()> {
        self.api
            .update_variable(place, body)
            .await
            .map_err(|e| explain(e, self.token))
    }

    async fn delete(&self, place: &Place, key: &str, scope: &str) -> Result<()> {
        self.api
            .delete_variable(place, key, scope)
            .await
            .map_err(|e| explain(e, self.token))
    }
}

fn no_property(remote: &PushRemoteRef) -> Result<()> {
    match remote.property.as_deref().filter(|p| !p.is_empty()) {
        Some(_) => Err(Error::Unsupported {
            provider: DESCRIPTOR.kind.to_owned(),
            operation: "remoteRef.property (a GitLab variable holds one value)".to_owned(),
        }),
        None => Ok(()),
    }
}

#[async_trait]
impl SecretsClient for GitlabSecrets {
    async fn get_secret(&self, remote: &RemoteRef) -> Result<Vec<u8>> {
        if remote.fetch_metadata {
            return Err(Error::Unsupported {
                provider: DESCRIPTOR.kind.to_owned(),
                operation: "metadataPolicy Fetch".to_owned(),
            });
        }
        let variable = ops::lookup(&self.backend()?, &self.config.scope, &remote.key).await?;
        variables::extract(&variable, remote.property.as_deref())
    }

    async fn get_secret_map(&self, remote: &RemoteRef) -> Result<BTreeMap<String, Vec<u8>>> {
        let value = self.get_secret(remote).await?;
        variables::as_map(&variables::variable_key(&remote.key), &value)
    }

    async fn get_all_secrets(&self, find: &FindRequest) -> Result<BTreeMap<String, Vec<u8>>> {
        let query = variables::find_query(find, Some(&self.config.scope.environment))?;
        ops::find_all(&self.backend()?, &self.config.scope, &query).await
    }

    async fn push_secret(&self, push: &PushRequest) -> Result<()> {
        no_property(&push.remote)?;
        let metadata = push::parse_metadata(push.metadata.as_ref())?;
        ops::push(
            &self.backend()?,
            &self.config.scope,
            &push.remote.remote_key,
            &push.value,
            &metadata,
        )
        .await
        .map(drop)
    }

    async fn delete_secret(&self, remote: &PushRemoteRef) -> Result<()> {
        no_property(remote)?;
        ops::delete(&self.backend()?, &self.config.scope, &remote.remote_key)
            .await
            .map(drop)
    }

    async fn secret_exists(&self, remote: &PushRemoteRef) -> Result<bool> {
        no_property(remote)?;
        ops::exists(&self.backend()?, &self.config.scope, &remote.remote_key).await
    }

    /// ESO's check: the token may read the project's variables and each group's (one page).
    async fn validate(&self) -> Result<Validation> {
        if self.api.is_none() {
            return Ok(Validation::Unknown);
        }
        ops::validate(&FirstPage(self.backend()?), &self.config.scope).await?;
        Ok(Validation::Ready)
    }

    async fn close(&self) -> Result<()> {
        Ok(())
    }
}

/// Lists one page only: enough to prove access.
struct FirstPage<'a>(Http<'a>);

#[async_trait]
impl ops::Backend for FirstPage<'_> {
    async fn get(&self, place: &Place, key: &str, scope: Option<&str>) -> Result<Option<Variable>> {
        self.0.get(place, key, scope).await
    }

    async fn list(&self, place: &Place) -> Result<Vec<Variable>> {
        self.0
            .api
            .list_variables(place, true)
            .await
            .map_err(|e| explain(e, self.0.token))
    }

    async fn ancestors(&self, project: &str) -> Result<Vec<String>> {
        self.0.ancestors(project).await
    }

    async fn create(&self, place: &Place, body: &VariableWrite) -> Result<()> {
        self.0.create(place, body).await
    }

    async fn update(&self, place: &Place, body: &VariableWrite) -> Result<()> {
        self.0.update(place, body).await
    }

    async fn delete(&self, place: &Place, key: &str, scope: &str) -> Result<()> {
        self.0.delete(place, key, scope).await
    }
}

#[cfg(test)]
mod tests;
