//! ESO's HashiCorp Vault provider: the KV engine (v1 and v2) with every login method ESO
//! supports but the cloud ones, logging in once per client rather than once per reconcile.

mod connection;
mod kv;
mod referent;
mod rest;
mod session;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use api::meta::SecretKeySelector;
use api::provider_kinds::Descriptor;
use api::providers::vault::{DESCRIPTOR, VaultAuth, VaultKvVersion, VaultProvider};
use async_trait::async_trait;
use provider::{
    Caller, Capabilities, ClientRequest, CredentialKind, CredentialRef, CredentialsReader, Error,
    FindRequest, ProviderRuntime, ProviderSchema, PushRemoteRef, PushRequest, RemoteRef, Result,
    SecretsClient, SpecReport, Validation, parse_spec,
};
use serde_json::{Map, Value, json};

use crate::connection::Connection;
use crate::kv::{Kv, Location, MANAGED_BY, MANAGED_BY_US, V1_METADATA_KEY};
use crate::rest::{Authed, CallError};
use crate::session::{Jwt, Login, Logins, SecretKey, Session};

#[derive(Default)]
pub struct Vault {
    logins: Logins,
}

impl ProviderSchema for Vault {
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
        let spec: VaultProvider = parse_spec(spec)?;
        if !(spec.server.starts_with("http://") || spec.server.starts_with("https://")) {
            return Err(Error::InvalidSpec(format!(
                "server: {:?} is not an http:// or https:// URL",
                spec.server
            )));
        }
        if let Some(auth) = &spec.auth {
            login(auth, true)?;
        }
        let mut warnings = Vec::new();
        // Accepted as ESO does, for a dev server, but said.
        if spec.server.starts_with("http://") {
            warnings.push("server uses http://: the Vault token is sent in clear".to_owned());
        }
        if spec.auth.is_none() {
            warnings.push(
                "auth is not set: requests go to Vault without a token, which Vault refuses unless its policies allow anonymous access".to_owned(),
            );
        }
        if spec.version == Some(VaultKvVersion::V1)
            && spec.check_and_set.as_ref().and_then(|c| c.required) == Some(true)
        {
            warnings.push("checkAndSet applies to KV v2 only and is ignored for v1".to_owned());
        }
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
impl ProviderRuntime for Vault {
    async fn new_client(
        &self,
        request: ClientRequest,
        credentials: Arc<dyn CredentialsReader>,
    ) -> Result<Box<dyn SecretsClient>> {
        let spec: VaultProvider = parse_spec(&request.spec)?;
        let kv = Kv {
            mount: spec.path.clone().filter(|p| !p.is_empty()),
            version: spec.version.unwrap_or_default(),
        };
        let cas = spec.check_and_set.as_ref().and_then(|c| c.required) == Some(true);
        // A referent cluster store checked on its own has no namespace to read credentials in.
        let referent = !referent::REFERENCES.unresolved(&request.spec).is_empty();
        let login = match &spec.auth {
            Some(auth) if !referent => login(auth, false)?,
            _ => Login::Anonymous,
        };
        let connection = if referent {
            None
        } else {
            Some(Connection::build(&spec, credentials.as_ref()).await?)
        };
        Ok(Box::new(VaultSecrets {
            session: connection.map(|c| Session::new(c, login, credentials, self.logins.clone())),
            kv,
            cas,
        }))
    }

    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "vault_logins",
            "Logins to Vault by auth method (one per client and token lifetime)",
            self.logins.clone(),
        );
    }
}

/// The login method, in ESO's order when several are set. `check_only` validates without
/// needing namespaces (the spec before `apply_referent`).
fn login(auth: &VaultAuth, check_only: bool) -> Result<Login> {
    let key = |s: &SecretKeySelector, field: &str, default: &str| -> Result<SecretKey> {
        let name = s
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| Error::InvalidSpec(format!("{field}.name is required")))?;
        let namespace = s.namespace.clone().unwrap_or_default();
        if namespace.is_empty() && !check_only {
            return Err(Error::InvalidSpec(format!("{field}.namespace is required")));
        }
        Ok(SecretKey {
            namespace,
            name,
            key: s
                .key
                .clone()
                .filter(|k| !k.is_empty())
                .unwrap_or_else(|| default.to_owned()),
        })
    };
    let mount = |path: &Option<String>, default: &str| {
        path.clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| default.to_owned())
    };
    let required = |field: &str| Error::InvalidSpec(format!("{field} is required"));
    if let Some(token) = &auth.token_secret_ref {
        return Ok(Login::Static {
            secret: key(token, "auth.tokenSecretRef", "token")?,
        });
    }
    if let Some(role) = &auth.app_role {
        let role_id = match (&role.role_id, &role.role_ref) {
            (Some(id), _) if !id.is_empty() => session::Value::Inline(id.clone()),
            (_, Some(r)) => session::Value::Secret(key(r, "auth.appRole.roleRef", "role-id")?),
            _ => {
                return Err(Error::InvalidSpec(
                    "auth.appRole: set roleId or roleRef".into(),
                ));
            }
        };
        return Ok(Login::AppRole {
            mount: mount(&role.path, "approle"),
            role_id,
            secret_id: key(&role.secret_ref, "auth.appRole.secretRef", "secret-id")?,
        });
    }
    if let Some(k8s) = &auth.kubernetes {
        if k8s.role.is_empty() {
            return Err(required("auth.kubernetes.role"));
        }
        let jwt = match (&k8s.service_account_ref, &k8s.secret_ref) {
            (Some(sa), _) => {
                service_account(sa, "auth.kubernetes.serviceAccountRef", None, check_only)?
            }
            (None, Some(s)) => Jwt::Secret(key(s, "auth.kubernetes.secretRef", "token")?),
            (None, None) => {
                return Err(Error::InvalidSpec(
                    "auth.kubernetes: set serviceAccountRef or secretRef (the operator's own token is not used)".into(),
                ));
            }
        };
        return Ok(Login::Kubernetes {
            mount: mount(&k8s.mount_path, "kubernetes"),
            role: k8s.role.clone(),
            jwt,
        });
    }
    // ldap and userPass share one shape; ldap comes first.
    let password_login = [
        auth.ldap.as_ref().map(|l| {
            (
                "ldap",
                "auth.ldap",
                &l.path,
                &l.username,
                &l.secret_ref,
                "ldap",
            )
        }),
        auth.user_pass.as_ref().map(|u| {
            (
                "userpass",
                "auth.userPass",
                &u.path,
                &u.username,
                &u.secret_ref,
                "userpass",
            )
        }),
    ]
    .into_iter()
    .flatten()
    .next();
    if let Some((method, field, path, username, secret, default)) = password_login {
        let password = secret
            .as_ref()
            .ok_or_else(|| required(&format!("{field}.secretRef")))?;
        if username.is_empty() {
            return Err(required(&format!("{field}.username")));
        }
        return Ok(Login::Password {
            method,
            mount: mount(path, default),
            username: username.clone(),
            password: key(password, &format!("{field}.secretRef"), "password")?,
        });
    }
    if let Some(jwt) = &auth.jwt {
        let token = match (&jwt.secret_ref, &jwt.kubernetes_service_account_token) {
            (Some(s), _) => Jwt::Secret(key(s, "auth.jwt.secretRef", "token")?),
            (None, Some(sat)) => service_account(
                &sat.service_account_ref,
                "auth.jwt.kubernetesServiceAccountToken.serviceAccountRef",
                sat.audiences.as_deref(),
                check_only,
            )?,
            (None, None) => {
                return Err(Error::InvalidSpec(
                    "auth.jwt: set secretRef or kubernetesServiceAccountToken".into(),
                ));
            }
        };
        return Ok(Login::Jwt {
            mount: mount(&jwt.path, "jwt"),
            role: jwt.role.clone().filter(|r| !r.is_empty()),
            jwt: token,
        });
    }
    if let Some(cert) = &auth.cert {
        if cert.client_cert.is_none() || cert.secret_ref.is_none() {
            return Err(Error::InvalidSpec(
                "auth.cert: set clientCert and secretRef (the private key)".into(),
            ));
        }
        return Ok(Login::Cert {
            mount: mount(&cert.path, "cert"),
            role: cert.vault_role.clone().unwrap_or_default(),
        });
    }
    if auth.iam.is_some() {
        return Err(Error::InvalidSpec(
            "auth.iam: AWS IAM login is not supported by this operator".into(),
        ));
    }
    if auth.gcp.is_some() {
        return Err(Error::InvalidSpec(
            "auth.gcp: Google Cloud login is not supported by this operator".into(),
        ));
    }
    Ok(Login::Anonymous)
}

fn service_account(
    sa: &api::meta::ServiceAccountSelector,
    field: &str,
    fallback_audiences: Option<&[String]>,
    check_only: bool,
) -> Result<Jwt> {
    let namespace = sa.namespace.clone().unwrap_or_default();
    if sa.name.is_empty() {
        return Err(Error::InvalidSpec(format!("{field}.name is required")));
    }
    if namespace.is_empty() && !check_only {
        return Err(Error::InvalidSpec(format!("{field}.namespace is required")));
    }
    let audiences = sa
        .audiences
        .clone()
        .filter(|a| !a.is_empty())
        .or_else(|| fallback_audiences.map(<[String]>::to_vec))
        .unwrap_or_else(|| vec!["vault".to_owned()]);
    Ok(Jwt::ServiceAccount {
        namespace,
        name: sa.name.clone(),
        audiences,
    })
}

struct VaultSecrets {
    /// `None` for a referent cluster store checked on its own: usable, but not here.
    session: Option<Session>,
    kv: Kv,
    cas: bool,
}

/// A secret as read: its data and, in v2, its custom metadata and version.
struct Stored {
    data: Map<String, Value>,
    managed: bool,
    version: Option<u64>,
}

impl VaultSecrets {
    fn session(&self) -> Result<&Session> {
        self.session.as_ref().ok_or_else(|| {
            Error::Backend("a referent ClusterSecretStore reads credentials in the namespace of the ExternalSecret or PushSecret that uses it".into())
        })
    }

    /// Runs `call` with a valid token; once more after a fresh login if Vault refused the token
    /// itself. Vault answers 403 both for a token it no longer knows and for a path the token's
    /// policy does not allow; only the first needs a login, and telling them apart costs a
    /// token lookup, where logging in for the second would cost a login per reconcile.
    async fn call<T, F, Fut>(&self, call: F) -> Result<T>
    where
        F: Fn(Authed) -> Fut,
        Fut: Future<Output = Result<T, CallError>>,
    {
        let session = self.session()?;
        let api = session.api().await?;
        let vault = session.rest().with_token(&api.settings.token);
        match call(vault.clone()).await {
            Err(refused @ CallError::Status { code: 403, .. })
                if vault.read("auth/token/lookup-self", &[]).await.is_ok() =>
            {
                Err(backend(refused))
            }
            Err(CallError::Status { code: 403, .. }) => {
                session.refused(&api).await;
                let api = session.api().await?;
                call(session.rest().with_token(&api.settings.token))
                    .await
                    .map_err(backend)
            }
            other => other.map_err(backend),
        }
    }

    /// A secret's data, one request: what reads need.
    async fn data(
        &self,
        at: &Location,
        version: Option<&str>,
    ) -> Result<Option<Map<String, Value>>> {
        let version = version
            .filter(|v| !v.is_empty())
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| Error::Backend(format!("version {v:?} is not a number")))
            })
            .transpose()?;
        let (mount, path) = (at.mount.as_str(), at.path.as_str());
        let v2 = self.kv.version == VaultKvVersion::V2;
        let url = if v2 {
            rest::path(&[mount, "data", path])
        } else {
            rest::path(&[mount, path])
        };
        let query: Vec<(&str, String)> = version
            .map(|v| ("version", v.to_string()))
            .into_iter()
            .collect();
        let body = absent_as_none(
            self.call(|vault| {
                let (url, query) = (url.clone(), query.clone());
                async move { vault.read(&url, &query).await }
            })
            .await,
        )?;
        // v2 wraps the secret in `data.data`; a deleted or destroyed version has none.
        let data = body.and_then(|mut b| {
            let data = b["data"].take();
            let data = if v2 {
                data.get("data").cloned().unwrap_or_default()
            } else {
                data
            };
            match data {
                Value::Object(map) => Some(map),
                _ => None,
            }
        });
        Ok(data)
    }

    /// A secret's data with whether it is ours and its version: what writes need (v2 adds a
    /// metadata request).
    async fn stored(&self, at: &Location) -> Result<Option<Stored>> {
        let Some(data) = self.data(at, None).await? else {
            return Ok(None);
        };
        let (managed, version) = match self.kv.version {
            VaultKvVersion::V2 => match self.metadata(at).await? {
                Some(m) => (
                    m.custom_metadata
                        .as_ref()
                        .and_then(|c| c.get(MANAGED_BY))
                        .is_some_and(|v| v == MANAGED_BY_US),
                    Some(m.current_version),
                ),
                None => (false, None),
            },
            VaultKvVersion::V1 => (
                data.get(V1_METADATA_KEY)
                    .and_then(|m| m.get(MANAGED_BY))
                    .is_some_and(|v| v == MANAGED_BY_US),
                None,
            ),
        };
        Ok(Some(Stored {
            data,
            managed,
            version,
        }))
    }

    async fn metadata(
        &self,
        at: &Location,
    ) -> Result<Option<vaultrs::api::kv2::responses::ReadSecretMetadataResponse>> {
        let url = rest::path(&[&at.mount, "metadata", &at.path]);
        let body = absent_as_none(
            self.call(|vault| {
                let url = url.clone();
                async move { vault.read(&url, &[]).await }
            })
            .await,
        )?;
        body.map(|mut b| {
            serde_json::from_value(b["data"].take())
                .map_err(|e| Error::Backend(format!("Vault's secret metadata: {e}")))
        })
        .transpose()
    }

    async fn write(
        &self,
        at: &Location,
        data: Map<String, Value>,
        current: Option<u64>,
    ) -> Result<()> {
        let (mount, path) = (at.mount.as_str(), at.path.as_str());
        let (url, body) = match self.kv.version {
            VaultKvVersion::V2 => {
                let metadata = rest::path(&[mount, "metadata", path]);
                let custom = json!({"custom_metadata": {MANAGED_BY: MANAGED_BY_US}});
                self.call(|vault| {
                    let (metadata, custom) = (metadata.clone(), custom.clone());
                    async move { vault.write(&metadata, &custom).await }
                })
                .await?;
                let mut body = json!({"data": data});
                if self.cas {
                    body["options"] = json!({"cas": current.unwrap_or(0)});
                }
                (rest::path(&[mount, "data", path]), body)
            }
            VaultKvVersion::V1 => {
                let mut data = data;
                data.insert(V1_METADATA_KEY.into(), json!({MANAGED_BY: MANAGED_BY_US}));
                (rest::path(&[mount, path]), Value::Object(data))
            }
        };
        self.call(|vault| {
            let (url, body) = (url.clone(), body.clone());
            async move { vault.write(&url, &body).await }
        })
        .await
    }

    async fn remove(&self, at: &Location) -> Result<()> {
        let url = match self.kv.version {
            VaultKvVersion::V2 => rest::path(&[&at.mount, "metadata", &at.path]),
            VaultKvVersion::V1 => rest::path(&[&at.mount, &at.path]),
        };
        let result = self
            .call(|vault| {
                let url = url.clone();
                async move { vault.delete(&url).await }
            })
            .await;
        match result {
            Err(Error::NoSecret) => Ok(()),
            other => other,
        }
    }

    /// The mount exists and is a KV engine of the configured version. Asks the endpoint the
    /// Vault CLI uses for this, which any token with a capability under the mount may read.
    async fn check_mount(&self, mount: &str) -> Result<()> {
        let url = rest::path(&["sys/internal/ui/mounts", mount]);
        let body = self
            .call(|vault| {
                let url = url.clone();
                async move { vault.read(&url, &[]).await }
            })
            .await
            .map_err(|e| match e {
                Error::NoSecret => Error::Backend(format!(
                    "path: mount {mount:?} is not there or this token may not use it (Vault answered 404)"
                )),
                Error::Backend(m) if m.starts_with("Vault answered 403") => Error::Backend(format!(
                    "path: mount {mount:?} is not there or this token may not use it ({m})"
                )),
                other => other,
            })?;
        let data = &body["data"];
        let kind = data["type"].as_str().unwrap_or_default();
        let version = data["options"]["version"].as_str().unwrap_or("1");
        let wanted = match self.kv.version {
            VaultKvVersion::V1 => "1",
            VaultKvVersion::V2 => "2",
        };
        if kind != "kv" && kind != "generic" {
            return Err(Error::Backend(format!(
                "path: mount {mount:?} is a {kind:?} engine, not KV"
            )));
        }
        if version != wanted {
            return Err(Error::Backend(format!(
                "version: mount {mount:?} is KV v{version}, the store says v{wanted}"
            )));
        }
        Ok(())
    }

    /// ESO's `metadataPolicy: Fetch` (KV v2): the custom metadata, with `created_time`,
    /// `current_version` and `delete_version_after` beside it.
    async fn fetched_metadata(&self, at: &Location) -> Result<Map<String, Value>> {
        if self.kv.version == VaultKvVersion::V1 {
            return Err(Error::Unsupported {
                provider: DESCRIPTOR.kind.to_owned(),
                operation: "metadataPolicy Fetch on KV v1".to_owned(),
            });
        }
        let metadata = self.metadata(at).await?.ok_or(Error::NoSecret)?;
        let mut map: Map<String, Value> = metadata
            .custom_metadata
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        map.insert("created_time".into(), metadata.created_time.into());
        map.insert(
            "current_version".into(),
            metadata.current_version.to_string().into(),
        );
        map.insert(
            "delete_version_after".into(),
            metadata.delete_version_after.into(),
        );
        Ok(map)
    }

    /// Every secret path below `prefix` of the mount (v2 metadata or v1 listing), recursively.
    async fn list(&self, mount: &str, prefix: &str) -> Result<Vec<String>> {
        let mut found = Vec::new();
        let mut folders = vec![prefix.trim_matches('/').to_owned()];
        while let Some(folder) = folders.pop() {
            let url = match self.kv.version {
                VaultKvVersion::V2 => rest::path(&[mount, "metadata", &folder, ""]),
                VaultKvVersion::V1 => rest::path(&[mount, &folder, ""]),
            };
            let listed = absent_as_none(
                self.call(|vault| {
                    let url = url.clone();
                    async move { vault.list(&url).await }
                })
                .await,
            )?;
            let Some(mut listed) = listed else {
                continue;
            };
            let keys: Vec<String> = serde_json::from_value(listed["data"]["keys"].take())
                .map_err(|e| Error::Backend(format!("Vault's listing: {e}")))?;
            for key in keys {
                let full = if folder.is_empty() {
                    key.clone()
                } else {
                    format!("{folder}/{key}")
                };
                match full.strip_suffix('/') {
                    Some(sub) => folders.push(sub.to_owned()),
                    None => found.push(full),
                }
            }
        }
        found.sort();
        Ok(found)
    }
}

/// Vault's answers as the contract's errors; a missing secret stays distinct.
fn backend(e: CallError) -> Error {
    match e {
        CallError::Status { code: 404, .. } => Error::NoSecret,
        CallError::Status {
            code: 500..=599, ..
        }
        | CallError::Transport(_) => Error::Unavailable(e.to_string()),
        other => Error::Backend(other.to_string()),
    }
}

fn absent_as_none<T>(result: Result<T>) -> Result<Option<T>> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(Error::NoSecret) => Ok(None),
        Err(e) => Err(e),
    }
}

#[async_trait]
impl SecretsClient for VaultSecrets {
    async fn get_secret(&self, remote: &RemoteRef) -> Result<Vec<u8>> {
        let at = self.kv.locate(&remote.key)?;
        if remote.fetch_metadata {
            let metadata = self.fetched_metadata(&at).await?;
            return kv::extract(&metadata, remote.property.as_deref());
        }
        let data = self
            .data(&at, remote.version.as_deref())
            .await?
            .ok_or(Error::NoSecret)?;
        kv::extract(&data, remote.property.as_deref())
    }

    async fn get_secret_map(&self, remote: &RemoteRef) -> Result<BTreeMap<String, Vec<u8>>> {
        let at = self.kv.locate(&remote.key)?;
        if remote.fetch_metadata {
            let metadata = self.fetched_metadata(&at).await?;
            return kv::as_map(&metadata, remote.property.as_deref());
        }
        let data = self
            .data(&at, remote.version.as_deref())
            .await?
            .ok_or(Error::NoSecret)?;
        kv::as_map(&data, remote.property.as_deref())
    }

    async fn get_all_secrets(&self, find: &FindRequest) -> Result<BTreeMap<String, Vec<u8>>> {
        let mount = self.kv.mount.clone().ok_or_else(|| {
            Error::InvalidSpec("find needs spec.provider.vault.path (the KV mount)".into())
        })?;
        if !find.tags.is_empty() && self.kv.version == VaultKvVersion::V1 {
            return Err(Error::Unsupported {
                provider: DESCRIPTOR.kind.to_owned(),
                operation: "find.tags on KV v1".to_owned(),
            });
        }
        let pattern = find
            .name_regexp
            .as_deref()
            .map(regex::Regex::new)
            .transpose()
            .map_err(|e| Error::Backend(format!("find.name.regexp: {e}")))?;
        let mut out = BTreeMap::new();
        for path in self
            .list(&mount, find.path.as_deref().unwrap_or_default())
            .await?
        {
            if pattern.as_ref().is_some_and(|re| !re.is_match(&path)) {
                continue;
            }
            let at = Location {
                mount: mount.clone(),
                path: path.clone(),
            };
            if !find.tags.is_empty() {
                let custom = self
                    .metadata(&at)
                    .await?
                    .and_then(|m| m.custom_metadata)
                    .unwrap_or_default();
                if !find.tags.iter().all(|(k, v)| custom.get(k) == Some(v)) {
                    continue;
                }
            }
            if let Some(data) = self.data(&at, None).await? {
                out.insert(path, kv::extract(&data, None)?);
            }
        }
        Ok(out)
    }

    async fn push_secret(&self, push: &PushRequest) -> Result<()> {
        let at = self.kv.locate(&push.remote.remote_key)?;
        let existing = self.stored(&at).await?;
        if let Some(stored) = &existing
            && !stored.managed
        {
            return Err(Error::Conflict(format!(
                "secret {:?} exists and is not managed by external-secrets; refusing to overwrite it",
                push.remote.remote_key
            )));
        }
        let current = existing.as_ref().map(|s| {
            let mut data = s.data.clone();
            data.remove(V1_METADATA_KEY);
            data
        });
        let data = kv::pushed(
            current.as_ref(),
            push.remote.property.as_deref(),
            &push.value,
        )?;
        if current.as_ref() == Some(&data) {
            return Ok(());
        }
        self.write(&at, data, existing.and_then(|s| s.version))
            .await
    }

    async fn delete_secret(&self, remote: &PushRemoteRef) -> Result<()> {
        let at = self.kv.locate(&remote.remote_key)?;
        let Some(stored) = self.stored(&at).await?.filter(|s| s.managed) else {
            // Absent, or not ours: nothing of ours to delete.
            return Ok(());
        };
        match remote.property.as_deref().filter(|p| !p.is_empty()) {
            Some(property) => {
                let mut data = stored.data;
                data.remove(V1_METADATA_KEY);
                if data.remove(property).is_none() {
                    return Ok(());
                }
                if data.is_empty() {
                    self.remove(&at).await
                } else {
                    self.write(&at, data, stored.version).await
                }
            }
            None => self.remove(&at).await,
        }
    }

    async fn secret_exists(&self, remote: &PushRemoteRef) -> Result<bool> {
        let at = self.kv.locate(&remote.remote_key)?;
        Ok(match self.data(&at, None).await? {
            None => false,
            Some(data) => remote
                .property
                .as_deref()
                .filter(|p| !p.is_empty())
                .is_none_or(|p| data.contains_key(p)),
        })
    }

    async fn validate(&self) -> Result<Validation> {
        if self.session.is_none() {
            return Ok(Validation::Unknown);
        }
        self.call(|vault| async move { vault.read("auth/token/lookup-self", &[]).await.map(drop) })
            .await?;
        if let Some(mount) = &self.kv.mount {
            self.check_mount(mount).await?;
        }
        Ok(Validation::Ready)
    }

    async fn close(&self) -> Result<()> {
        if let Some(session) = &self.session {
            session.close().await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
