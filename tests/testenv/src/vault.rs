//! A real HashiCorp Vault server for tests, built by `hack/build-vault.sh` (see `hack/README.md`),
//! and typed helpers that configure it through its HTTP API with the root token.
//!
//! The server keeps its data in a file storage backend inside its temporary folder, so
//! [`VaultServer::stop`] followed by [`VaultServer::restart`] brings back the same server (same
//! address, root token, mounts, auth methods, secrets, issued tokens and audit device), as a
//! production Vault restarting would.
//!
//! Configuration helpers are `async` and make a fresh HTTP client per call, so they work from
//! any tokio runtime; [`VaultServer::start`], [`VaultServer::stop`] and
//! [`VaultServer::restart`] block and work inside or outside a runtime.

use std::collections::BTreeMap;
use std::net::{IpAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use http::{Method, StatusCode};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Map, Value, json};

use crate::pki::{CertificateAuthority, IssuedCertificate};
use crate::process::Supervisor;
use crate::{ControlPlane, block_on_own_thread, port, reserve_port};

/// The Vault version `hack/build-vault.sh` builds by default.
pub const VAULT_VERSION: &str = "1.21.0";

/// How long one HTTP call to Vault may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

const REVIEWER_NAMESPACE: &str = "kube-system";
const REVIEWER: &str = "vault-token-reviewer";
const FIELD_MANAGER: &str = "external-secrets-testenv";

/// Where `hack/build-vault.sh` puts the `vault` binary (the rule of `testbin_dir`).
pub fn vault_binary() -> PathBuf {
    crate::testbin_root()
        .join(format!("vault-{VAULT_VERSION}"))
        .join("vault")
}

/// A running Vault server; dropping it stops the process and deletes its folder.
pub struct VaultServer {
    // Field order matters: the process must be gone before its folder is removed.
    supervisor: Mutex<Option<Supervisor>>,
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    binary: PathBuf,
    address: String,
    tls_address: String,
    mtls_address: String,
    /// The plain HTTP listener on another address, where one was asked for.
    http_also_on: Option<(IpAddr, String)>,
    ca_pem: String,
    /// Accepted by the mutual-TLS listener.
    client_certificate: IssuedCertificate,
    root_token: String,
    unseal_key: String,
}

/// The KV secrets engine version of a mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvVersion {
    V1,
    V2,
}

/// A KV v2 secret version as Vault returns it.
#[derive(Clone, Debug, PartialEq)]
pub struct KvV2Secret {
    pub data: Map<String, Value>,
    pub version: u64,
    /// The secret's custom metadata (`metadata.custom_metadata`), empty when it has none.
    pub custom_metadata: BTreeMap<String, String>,
}

/// What [`VaultServer::count_audit_responses`] shows its predicate of one audit entry.
#[derive(Clone, Copy, Debug)]
pub struct AuditedRequest<'a> {
    /// `request.path`: no leading slash, mount included (`secret/data/app`,
    /// `auth/approle/login`).
    pub path: &'a str,
    /// `request.operation`: `read`, `create` (a write to a path that had nothing), `update`
    /// (other writes and logins), `list`, `delete`, …
    pub operation: &'a str,
    /// Whether Vault answered with an error (the entry has `error`).
    pub failed: bool,
    /// `request.headers`: the headers Vault was told to audit
    /// (`sys/config/auditing/request-headers`), lower-case names, each a list of values.
    pub headers: &'a Value,
}

/// The token an auth role issues: its policies and lifetime (`token_policies`, `token_ttl`,
/// `token_max_ttl`). `None` leaves Vault's default (the mount's, 768h by default).
#[derive(Clone, Debug, Default)]
pub struct TokenOptions {
    pub policies: Vec<String>,
    pub ttl: Option<Duration>,
    pub max_ttl: Option<Duration>,
}

impl TokenOptions {
    pub fn policies(policies: &[&str]) -> Self {
        Self {
            policies: policies.iter().map(|p| (*p).to_owned()).collect(),
            ..Self::default()
        }
    }

    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    pub fn max_ttl(mut self, max_ttl: Duration) -> Self {
        self.max_ttl = Some(max_ttl);
        self
    }

    fn add_to(&self, body: &mut Value) {
        body["token_policies"] = json!(self.policies);
        if let Some(ttl) = self.ttl {
            body["token_ttl"] = json!(ttl.as_secs());
        }
        if let Some(max_ttl) = self.max_ttl {
            body["token_max_ttl"] = json!(max_ttl.as_secs());
        }
    }
}

/// A role of the JWT auth method for Kubernetes ServiceAccount tokens (`role_type = "jwt"`,
/// `user_claim = "sub"`).
#[derive(Clone, Debug, Default)]
pub struct JwtRole {
    /// `bound_audiences`: the token's `aud` must contain one of them (Vault requires at least
    /// one, or a `bound_subject`).
    pub audiences: Vec<String>,
    /// `bound_subject`, e.g. `system:serviceaccount:<namespace>:<name>`.
    pub subject: Option<String>,
    /// `bound_claims`; keys may be JSON pointers, e.g. `{"/kubernetes.io/namespace": "ns"}`.
    pub claims: Option<Value>,
}

/// A role of the kubernetes auth method.
#[derive(Clone, Debug, Default)]
pub struct KubernetesRole {
    pub service_account_names: Vec<String>,
    pub namespaces: Vec<String>,
    /// The audience the login token must carry; `None` accepts the API server's default.
    pub audience: Option<String>,
}

impl VaultServer {
    /// Starts `vault server` on two free 127.0.0.1 ports (plain HTTP and TLS with a CA of its
    /// own), initialises it with one unseal key, unseals it and waits until it is active.
    ///
    /// No secrets engine is mounted beyond Vault's built-in ones (`cubbyhole`, `identity`,
    /// `sys`); use [`mount_kv`](Self::mount_kv). Blocks the calling thread; safe to call from
    /// inside or outside a tokio runtime.
    pub fn start() -> Result<Self> {
        Self::start_listening(None)
    }

    /// [`start`](Self::start), with one more plain HTTP listener on `ip` (a free port): for
    /// clients that cannot reach the host's 127.0.0.1, such as Pods on a node's bridge whose
    /// gateway address `ip` is. See [`address_on`](Self::address_on).
    pub fn start_also_on(ip: IpAddr) -> Result<Self> {
        Self::start_listening(Some(ip))
    }

    fn start_listening(also_on: Option<IpAddr>) -> Result<Self> {
        let started = Instant::now();
        let binary = vault_binary();
        require_binary(&binary)?;
        let vault = crate::retry_on_port_clash(|| Self::start_once(&binary, also_on))?;
        eprintln!(
            "testenv: Vault {VAULT_VERSION} ready at {} and {} in {:.1}s (log {}){}",
            vault.address,
            vault.tls_address,
            started.elapsed().as_secs_f64(),
            vault.log_path().display(),
            crate::pdeathsig_note()
        );
        Ok(vault)
    }

    fn start_once(
        binary: &Path,
        also_on: Option<IpAddr>,
    ) -> Result<Self, (anyhow::Error, Option<tempfile::TempDir>)> {
        let dir = tempfile::Builder::new()
            .prefix("external-secrets-vault-")
            .tempdir()
            .context("creating Vault's temporary folder")
            .map_err(|e| (e, None))?;
        let ca = CertificateAuthority::new("testenv-vault-ca").map_err(|e| (e, None))?;
        let mut vault = Self {
            supervisor: Mutex::new(None),
            path: dir.path().to_owned(),
            dir: Some(dir),
            binary: binary.to_owned(),
            address: String::new(),
            tls_address: String::new(),
            mtls_address: String::new(),
            http_also_on: also_on.map(|ip| (ip, String::new())),
            ca_pem: ca.cert_pem(),
            client_certificate: ca
                .issue_client("external-secrets", None)
                .map_err(|e| (e, None))?,
            root_token: String::new(),
            unseal_key: String::new(),
        };
        match vault.boot(&ca) {
            Ok(()) => Ok(vault),
            Err(err) => {
                let log = vault.log_path();
                let dir = vault.dir.take();
                drop(vault);
                let err = err.context(format!("starting Vault failed; log: {}", log.display()));
                Err((err, dir))
            }
        }
    }

    fn boot(&mut self, ca: &CertificateAuthority) -> Result<()> {
        let serving = ca.issue_server()?;
        for (name, contents) in [
            ("ca.crt", &self.ca_pem),
            ("vault.crt", &serving.cert_pem),
            ("vault.key", &serving.key_pem),
        ] {
            std::fs::write(self.path.join(name), contents)
                .with_context(|| format!("writing {name}"))?;
        }
        let http = reserve_port()?;
        let tls = reserve_port()?;
        let mtls = reserve_port()?;
        let http_listen = format!("127.0.0.1:{}", port(&http)?);
        let tls_listen = format!("127.0.0.1:{}", port(&tls)?);
        let mtls_listen = format!("127.0.0.1:{}", port(&mtls)?);
        self.address = format!("http://{http_listen}");
        self.tls_address = format!("https://{tls_listen}");
        self.mtls_address = format!("https://{mtls_listen}");
        let also = match &self.http_also_on {
            Some((ip, _)) => Some(
                TcpListener::bind((*ip, 0))
                    .with_context(|| format!("reserving a free port on {ip}"))?,
            ),
            None => None,
        };
        let mut listeners = vec![];
        if let (Some((_, address)), Some(also)) = (&mut self.http_also_on, &also) {
            let listen = also.local_addr()?.to_string();
            *address = format!("http://{listen}");
            listeners.push(json!({"tcp": {"address": listen, "tls_disable": true}}));
        }
        let file = |name: &str| self.path.join(name).to_string_lossy().into_owned();
        // Vault reads JSON as well as HCL; JSON needs no quoting rules of our own.
        let mut config = json!({
            "storage": {"file": {"path": file("data")}},
            "listener": [
                {"tcp": {"address": http_listen, "tls_disable": true}},
                {"tcp": {
                    "address": tls_listen,
                    "tls_cert_file": file("vault.crt"),
                    "tls_key_file": file("vault.key"),
                }},
                {"tcp": {
                    "address": mtls_listen,
                    "tls_cert_file": file("vault.crt"),
                    "tls_key_file": file("vault.key"),
                    "tls_client_ca_file": file("ca.crt"),
                    "tls_require_and_verify_client_cert": true,
                }},
            ],
            "api_addr": self.address,
            // No other node joins; without it each listener also binds its port + 1.
            "disable_clustering": true,
            "disable_mlock": true,
            "ui": false,
            "log_level": "info",
        });
        if let Some(all) = config["listener"].as_array_mut() {
            all.extend(listeners);
        }
        std::fs::write(self.config_path(), serde_json::to_vec_pretty(&config)?)
            .context("writing Vault's configuration")?;
        drop((http, tls, mtls, also));
        self.spawn()?;

        let this = &*self;
        let (root_token, unseal_key) = block_on_own_thread(async move {
            this.wait_until_listening().await?;
            let init = this
                .send(
                    Method::PUT,
                    "sys/init",
                    Some(&json!({"secret_shares": 1, "secret_threshold": 1})),
                    None,
                )
                .await
                .context("initialising Vault")?
                .context("sys/init answered without a body")?;
            let field = |name: &str, value: &Value| {
                value
                    .as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| anyhow!("sys/init answered without {name}"))
            };
            Ok::<_, anyhow::Error>((
                field("root_token", &init["root_token"])?,
                field("keys", &init["keys"][0])?,
            ))
        })??;
        self.root_token = root_token;
        self.unseal_key = unseal_key;
        block_on_own_thread(self.unseal())?
    }

    /// Starts the process under a new supervisor (so that [`stop`](Self::stop) can end it alone).
    fn spawn(&self) -> Result<()> {
        let supervisor = Supervisor::new()?;
        supervisor.spawn(
            "vault",
            &self.binary,
            vec![
                "server".into(),
                format!("-config={}", self.config_path().display()),
            ],
            &self.log_path(),
        )?;
        *self.lock() = Some(supervisor);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Supervisor>> {
        self.supervisor
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn fail_if_exited(&self) -> Result<()> {
        match &*self.lock() {
            Some(supervisor) => crate::fail_if_exited(supervisor, &self.path),
            None => bail!("Vault is stopped"),
        }
    }

    /// Waits until `sys/health` answers at all (sealed or not, initialised or not).
    async fn wait_until_listening(&self) -> Result<()> {
        crate::wait_while_running(
            "Vault to answer sys/health",
            || self.fail_if_exited(),
            || async {
                self.health().await?;
                Ok(())
            },
        )
        .await
    }

    async fn health(&self) -> Result<Value> {
        self.send(
            Method::GET,
            "sys/health?uninitcode=200&sealedcode=200&standbyok=true",
            None,
            None,
        )
        .await?
        .context("sys/health answered without a body")
    }

    async fn unseal(&self) -> Result<()> {
        self.send(
            Method::PUT,
            "sys/unseal",
            Some(&json!({"key": self.unseal_key})),
            None,
        )
        .await
        .context("unsealing Vault")?;
        crate::wait_while_running(
            "Vault to be unsealed and active",
            || self.fail_if_exited(),
            || async {
                let health = self.health().await?;
                ensure!(
                    health["initialized"] == true
                        && health["sealed"] == false
                        && health["standby"] == false,
                    "sys/health says {health}"
                );
                Ok(())
            },
        )
        .await
    }

    /// Stops the server (kills and reaps the process); the data stays for
    /// [`restart`](Self::restart). Does nothing when it is already stopped.
    pub fn stop(&self) {
        // Dropping the supervisor kills and reaps the process.
        let supervisor = self.lock().take();
        drop(supervisor);
    }

    /// Stops the server if it runs, starts it again on the same ports with the same data and
    /// unseals it: the root token, mounts, auth configuration, secrets and tokens issued
    /// before are all still valid. Blocks until Vault is active.
    pub fn restart(&self) -> Result<()> {
        self.stop();
        let started = Instant::now();
        self.spawn()?;
        block_on_own_thread(async {
            self.wait_until_listening().await?;
            self.unseal().await
        })?
        .with_context(|| format!("restarting Vault; log: {}", self.log_path().display()))?;
        eprintln!(
            "testenv: Vault restarted at {} in {:.1}s",
            self.address,
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// `http://127.0.0.1:<port>`: the plain HTTP listener.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// `https://127.0.0.1:<port>`: the TLS listener; its certificate (for `localhost` and
    /// `127.0.0.1`) is signed by [`ca_pem`](Self::ca_pem). It asks for, but does not require, a
    /// client certificate (the cert auth method needs one).
    pub fn tls_address(&self) -> &str {
        &self.tls_address
    }

    /// `https://127.0.0.1:<port>`: a TLS listener that requires a client certificate signed by
    /// [`ca_pem`](Self::ca_pem), such as [`client_certificate`](Self::client_certificate).
    pub fn mtls_address(&self) -> &str {
        &self.mtls_address
    }

    /// `http://<ip>:<port>`: the plain HTTP listener on the `ip` given to
    /// [`start_also_on`](Self::start_also_on); `None` for a server started otherwise.
    pub fn address_on(&self) -> Option<&str> {
        self.http_also_on
            .as_ref()
            .map(|(_, address)| address.as_str())
    }

    /// A client certificate the mutual-TLS listener accepts.
    pub fn client_certificate(&self) -> &IssuedCertificate {
        &self.client_certificate
    }

    /// The CA that signed the TLS listener's certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The root token (random, made by Vault when it was initialised).
    pub fn root_token(&self) -> &str {
        &self.root_token
    }

    /// Where [`enable_file_audit`](Self::enable_file_audit) makes Vault write its audit log.
    pub fn audit_log_path(&self) -> PathBuf {
        self.path.join("audit.log")
    }

    /// Vault's own log (both runs, when restarted).
    pub fn log_path(&self) -> PathBuf {
        self.path.join("vault.log")
    }

    /// The server's folder (configuration, certificates, data, logs).
    pub fn dir(&self) -> &Path {
        &self.path
    }

    fn config_path(&self) -> PathBuf {
        self.path.join("config.json")
    }

    /// Sends one request to `/v1/<path>` over the plain HTTP listener. A 2xx answer gives its
    /// JSON body (`None` when empty); anything else is an error naming the method, the path,
    /// the status and Vault's `errors`, never the request body.
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        token: Option<&str>,
    ) -> Result<Option<Value>> {
        match self
            .send_allowing_404(method.clone(), path, body, token)
            .await?
        {
            Some(answer) => Ok(answer),
            None => bail!("Vault {method} /v1/{path}: 404 Not Found"),
        }
    }

    /// As [`send`](Self::send), with 404 answered as `Ok(None)`.
    async fn send_allowing_404(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        token: Option<&str>,
    ) -> Result<Option<Option<Value>>> {
        crate::install_crypto_provider();
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .context("building an HTTP client")?;
        let mut request = client.request(method.clone(), format!("{}/v1/{path}", self.address));
        if let Some(token) = token {
            request = request.header("X-Vault-Token", token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let what = format!("Vault {method} /v1/{path}");
        let response = request.send().await.with_context(|| what.clone())?;
        let status = response.status();
        let text = response.text().await.with_context(|| what.clone())?;
        let json: Option<Value> = if text.trim().is_empty() {
            None
        } else {
            Some(
                serde_json::from_str(&text)
                    .with_context(|| format!("{what}: {status}, not JSON"))?,
            )
        };
        if status.is_success() {
            return Ok(Some(json));
        }
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let errors = json
            .as_ref()
            .and_then(|j| j.get("errors"))
            .and_then(Value::as_array)
            .map(|errors| {
                errors
                    .iter()
                    .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned))
                    .collect::<Vec<_>>()
                    .join("; ")
            })
            .unwrap_or_default();
        bail!("{what}: {status}: {errors}")
    }

    /// Any API call with the root token: `method /v1/<path>` with an optional JSON body; the
    /// JSON answer, `None` when Vault answers without a body. Non-2xx answers are errors.
    pub async fn api(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Option<Value>> {
        self.send(method, path, body, Some(&self.root_token)).await
    }

    /// [`api`](Self::api) with the error saying `what` was being done, the answer dropped.
    async fn change(&self, what: String, method: Method, path: &str, body: Value) -> Result<()> {
        self.api(method, path, Some(&body))
            .await
            .context(what)
            .map(drop)
    }

    /// `GET <path>` with the root token: `data.<field>` of the answer, a string.
    async fn read_string(
        &self,
        what: String,
        method: Method,
        path: &str,
        field: &str,
    ) -> Result<String> {
        let answer = self
            .api(method, path, None)
            .await
            .with_context(|| what.clone())?;
        answer
            .as_ref()
            .and_then(|a| a["data"][field].as_str())
            .map(str::to_owned)
            .with_context(|| format!("{what}: the answer has no data.{field}"))
    }

    /// As [`api`](Self::api) for a GET that may find nothing: 404 gives `None`.
    async fn get_optional(&self, what: String, path: &str) -> Result<Option<Value>> {
        Ok(self
            .send_allowing_404(Method::GET, path, None, Some(&self.root_token))
            .await
            .context(what)?
            .flatten())
    }

    /// Mounts a KV secrets engine of `version` at `path`; a KV v2 mount is usable when this
    /// returns.
    pub async fn mount_kv(&self, path: &str, version: KvVersion) -> Result<()> {
        let number = match version {
            KvVersion::V1 => "1",
            KvVersion::V2 => "2",
        };
        self.change(
            format!("mounting KV v{number} at {path}"),
            Method::POST,
            &format!("sys/mounts/{path}"),
            json!({"type": "kv", "options": {"version": number}}),
        )
        .await?;
        if version == KvVersion::V2 {
            // A new KV v2 mount refuses requests ("upgrading") until its set-up has run.
            crate::wait_while_running(
                &format!("KV v2 mount {path} to be usable"),
                || self.fail_if_exited(),
                || async {
                    self.api(Method::GET, &format!("{path}/config"), None)
                        .await
                        .map(drop)
                },
            )
            .await?;
        }
        Ok(())
    }

    /// Writes `data` (a JSON object) at `<mount>/<path>` of a KV v1 mount.
    pub async fn write_kv_v1(&self, mount: &str, path: &str, data: &Value) -> Result<()> {
        self.change(
            format!("writing KV v1 secret {mount}/{path}"),
            Method::POST,
            &format!("{mount}/{path}"),
            data.clone(),
        )
        .await
    }

    /// The data at `<mount>/<path>` of a KV v1 mount, `None` when there is none.
    pub async fn read_kv_v1(&self, mount: &str, path: &str) -> Result<Option<Map<String, Value>>> {
        let what = format!("KV v1 secret {mount}/{path}");
        self.get_optional(format!("reading {what}"), &format!("{mount}/{path}"))
            .await?
            .map(|a| object(&a["data"], &what))
            .transpose()
    }

    /// Writes a new version of the KV v2 secret `<mount>/<path>` (`data` a JSON object);
    /// returns the version number.
    pub async fn write_kv_v2(&self, mount: &str, path: &str, data: &Value) -> Result<u64> {
        let what = format!("writing KV v2 secret {mount}/{path}");
        let answer = self
            .api(
                Method::POST,
                &format!("{mount}/data/{path}"),
                Some(&json!({ "data": data })),
            )
            .await
            .with_context(|| what.clone())?;
        answer
            .and_then(|a| a["data"]["version"].as_u64())
            .with_context(|| format!("{what}: the answer has no data.version"))
    }

    /// Version `version` (the latest when `None`) of the KV v2 secret `<mount>/<path>`;
    /// `None` when it does not exist or that version is deleted or destroyed.
    pub async fn read_kv_v2(
        &self,
        mount: &str,
        path: &str,
        version: Option<u64>,
    ) -> Result<Option<KvV2Secret>> {
        let what = format!("KV v2 secret {mount}/{path}");
        let query = version.map(|v| format!("?version={v}")).unwrap_or_default();
        let path = format!("{mount}/data/{path}{query}");
        let Some(answer) = self.get_optional(format!("reading {what}"), &path).await? else {
            return Ok(None);
        };
        let metadata = &answer["data"]["metadata"];
        let custom_metadata = match &metadata["custom_metadata"] {
            Value::Null => BTreeMap::new(),
            other => serde_json::from_value(other.clone())
                .with_context(|| format!("custom_metadata of {what}"))?,
        };
        Ok(Some(KvV2Secret {
            data: object(&answer["data"]["data"], &what)?,
            version: metadata["version"]
                .as_u64()
                .with_context(|| format!("{what} has no metadata.version"))?,
            custom_metadata,
        }))
    }

    /// Sets the custom metadata of the KV v2 secret `<mount>/<path>` (replacing what it had).
    pub async fn write_kv_v2_metadata(
        &self,
        mount: &str,
        path: &str,
        custom_metadata: &BTreeMap<String, String>,
    ) -> Result<()> {
        self.change(
            format!("writing the metadata of KV v2 secret {mount}/{path}"),
            Method::POST,
            &format!("{mount}/metadata/{path}"),
            json!({ "custom_metadata": custom_metadata }),
        )
        .await
    }

    /// Writes the ACL policy `name` (HCL).
    pub async fn write_policy(&self, name: &str, hcl: &str) -> Result<()> {
        self.change(
            format!("writing policy {name}"),
            Method::PUT,
            &format!("sys/policies/acl/{name}"),
            json!({ "policy": hcl }),
        )
        .await
    }

    /// Enables the auth method `method` (`approle`, `userpass`, `cert`, `jwt`, `kubernetes`, …)
    /// at `auth/<path>`.
    pub async fn enable_auth(&self, path: &str, method: &str) -> Result<()> {
        self.change(
            format!("enabling auth method {method} at auth/{path}"),
            Method::POST,
            &format!("sys/auth/{path}"),
            json!({ "type": method }),
        )
        .await
    }

    /// Writes `path` with `body` plus the token options.
    async fn write_auth_role(
        &self,
        what: String,
        path: &str,
        mut body: Value,
        token: &TokenOptions,
    ) -> Result<()> {
        token.add_to(&mut body);
        self.change(format!("writing {what}"), Method::POST, path, body)
            .await
    }

    /// Writes the AppRole role `role` at `auth/<mount>`.
    pub async fn create_approle_role(
        &self,
        mount: &str,
        role: &str,
        token: &TokenOptions,
    ) -> Result<()> {
        self.write_auth_role(
            format!("AppRole role {role} at auth/{mount}"),
            &format!("auth/{mount}/role/{role}"),
            json!({}),
            token,
        )
        .await
    }

    /// The role id of AppRole role `role` at `auth/<mount>`.
    pub async fn approle_role_id(&self, mount: &str, role: &str) -> Result<String> {
        self.read_string(
            format!("reading the role id of AppRole role {role} at auth/{mount}"),
            Method::GET,
            &format!("auth/{mount}/role/{role}/role-id"),
            "role_id",
        )
        .await
    }

    /// A new secret id for AppRole role `role` at `auth/<mount>`.
    pub async fn approle_secret_id(&self, mount: &str, role: &str) -> Result<String> {
        self.read_string(
            format!("generating a secret id of AppRole role {role} at auth/{mount}"),
            Method::POST,
            &format!("auth/{mount}/role/{role}/secret-id"),
            "secret_id",
        )
        .await
    }

    /// Writes the userpass user `username` with `password` at `auth/<mount>`.
    pub async fn create_userpass_user(
        &self,
        mount: &str,
        username: &str,
        password: &str,
        token: &TokenOptions,
    ) -> Result<()> {
        self.write_auth_role(
            format!("userpass user {username} at auth/{mount}"),
            &format!("auth/{mount}/users/{username}"),
            json!({ "password": password }),
            token,
        )
        .await
    }

    /// Writes the cert auth role `name` at `auth/<mount>`: client certificates signed by
    /// `client_ca_pem` log in (over [`tls_address`](Self::tls_address)).
    pub async fn create_cert_role(
        &self,
        mount: &str,
        name: &str,
        client_ca_pem: &str,
        token: &TokenOptions,
    ) -> Result<()> {
        self.write_auth_role(
            format!("cert role {name} at auth/{mount}"),
            &format!("auth/{mount}/certs/{name}"),
            json!({ "certificate": client_ca_pem }),
            token,
        )
        .await
    }

    /// Configures the JWT auth method at `auth/<mount>` to accept ServiceAccount tokens of
    /// `control_plane`: its signing public key and issuer.
    pub async fn configure_jwt_for_kubernetes(
        &self,
        mount: &str,
        control_plane: &ControlPlane,
    ) -> Result<()> {
        self.change(
            format!("configuring the JWT auth method at auth/{mount}"),
            Method::POST,
            &format!("auth/{mount}/config"),
            json!({
                "jwt_validation_pubkeys": [control_plane.service_account_public_key_pem()],
                "bound_issuer": control_plane.service_account_issuer(),
            }),
        )
        .await
    }

    /// Writes the JWT role `role` at `auth/<mount>`.
    pub async fn create_jwt_role(
        &self,
        mount: &str,
        role: &str,
        jwt: &JwtRole,
        token: &TokenOptions,
    ) -> Result<()> {
        let mut body = json!({
            "role_type": "jwt",
            "user_claim": "sub",
            "bound_audiences": jwt.audiences,
        });
        if let Some(subject) = &jwt.subject {
            body["bound_subject"] = json!(subject);
        }
        if let Some(claims) = &jwt.claims {
            body["bound_claims"] = claims.clone();
        }
        self.write_auth_role(
            format!("JWT role {role} at auth/{mount}"),
            &format!("auth/{mount}/role/{role}"),
            body,
            token,
        )
        .await
    }

    /// Configures the kubernetes auth method at `auth/<mount>` to review tokens with
    /// `control_plane`'s TokenReview API. The reviewer is ServiceAccount
    /// `kube-system/vault-token-reviewer`, bound to `system:auth-delegator` (both applied, so
    /// calling this again is fine), with a token from TokenRequest valid for a year.
    pub async fn configure_kubernetes_auth(
        &self,
        mount: &str,
        control_plane: &ControlPlane,
    ) -> Result<()> {
        let client = control_plane.client().await;
        let reviewer_jwt = token_reviewer(&client)
            .await
            .context("setting up the token reviewer for Vault's kubernetes auth method")?;
        self.change(
            format!("configuring the kubernetes auth method at auth/{mount}"),
            Method::POST,
            &format!("auth/{mount}/config"),
            json!({
                "kubernetes_host": control_plane.server_url(),
                "kubernetes_ca_cert": control_plane.ca_cert_pem(),
                "token_reviewer_jwt": reviewer_jwt,
                // Vault does not run in a pod: there is no local ServiceAccount to fall back to.
                "disable_local_ca_jwt": true,
            }),
        )
        .await
    }

    /// Writes the kubernetes auth role `role` at `auth/<mount>`.
    pub async fn create_kubernetes_role(
        &self,
        mount: &str,
        role: &str,
        kubernetes: &KubernetesRole,
        token: &TokenOptions,
    ) -> Result<()> {
        let mut body = json!({
            "bound_service_account_names": kubernetes.service_account_names,
            "bound_service_account_namespaces": kubernetes.namespaces,
        });
        if let Some(audience) = &kubernetes.audience {
            body["audience"] = json!(audience);
        }
        self.write_auth_role(
            format!("kubernetes role {role} at auth/{mount}"),
            &format!("auth/{mount}/role/{role}"),
            body,
            token,
        )
        .await
    }

    /// Enables a file audit device (at `sys/audit/file`) writing JSON lines to
    /// [`audit_log_path`](Self::audit_log_path). It survives [`restart`](Self::restart).
    pub async fn enable_file_audit(&self) -> Result<()> {
        self.change(
            "enabling the file audit device".into(),
            Method::PUT,
            "sys/audit/file",
            json!({
                "type": "file",
                "options": {"file_path": self.audit_log_path().to_string_lossy()},
            }),
        )
        .await
    }

    /// How many audit log entries of type `response` satisfy `matches`, e.g.
    /// `|r| r.path == "auth/approle/login" && !r.failed` counts successful AppRole logins and
    /// `|r| r.path.starts_with("secret/data/") && r.operation == "read"` KV v2 reads. The
    /// requests this type makes with the root token are in the log too. Vault writes the entry
    /// before it answers, so a request that has returned is counted.
    pub fn count_audit_responses(
        &self,
        matches: impl Fn(&AuditedRequest<'_>) -> bool,
    ) -> Result<usize> {
        let log = self.audit_log_path();
        let text = std::fs::read_to_string(&log)
            .with_context(|| format!("reading the audit log {}", log.display()))?;
        let mut count = 0;
        // Only whole lines: an entry being written as we read has no newline yet.
        for (i, line) in text.split_inclusive('\n').enumerate() {
            if !line.ends_with('\n') || line.trim().is_empty() {
                continue;
            }
            let entry: Value = serde_json::from_str(line)
                .with_context(|| format!("line {} of {} is not JSON", i + 1, log.display()))?;
            if entry["type"] != "response" {
                continue;
            }
            let request = AuditedRequest {
                path: entry["request"]["path"].as_str().unwrap_or_default(),
                operation: entry["request"]["operation"].as_str().unwrap_or_default(),
                failed: entry.get("error").is_some_and(|e| !e.is_null() && e != ""),
                headers: &entry["request"]["headers"],
            };
            if matches(&request) {
                count += 1;
            }
        }
        Ok(count)
    }
}

impl Drop for VaultServer {
    fn drop(&mut self) {
        self.stop();
        crate::keep_if_asked(&mut self.dir);
    }
}

/// A token for ServiceAccount `namespace/name` from the TokenRequest API, for `audiences` (the
/// API server's own when empty), valid for `expiration` (at least 10 minutes).
pub async fn service_account_token(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    audiences: &[&str],
    expiration: Duration,
) -> Result<String> {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: audiences.iter().map(|a| (*a).to_owned()).collect(),
            expiration_seconds: Some(i64::try_from(expiration.as_secs())?),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    Ok(Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .with_context(|| format!("requesting a token for ServiceAccount {namespace}/{name}"))?
        .status
        .with_context(|| format!("the TokenRequest for {namespace}/{name} has no status"))?
        .token)
}

/// Applies the token reviewer ServiceAccount and its `system:auth-delegator` binding; returns
/// a token of it.
async fn token_reviewer(client: &kube::Client) -> Result<String> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(REVIEWER.into()),
            namespace: Some(REVIEWER_NAMESPACE.into()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    Api::<ServiceAccount>::namespaced(client.clone(), REVIEWER_NAMESPACE)
        .patch(REVIEWER, &params, &Patch::Apply(&account))
        .await
        .with_context(|| format!("applying ServiceAccount {REVIEWER_NAMESPACE}/{REVIEWER}"))?;
    let binding_name = format!("{REVIEWER}-auth-delegator");
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(binding_name.clone()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: "system:auth-delegator".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: REVIEWER.into(),
            namespace: Some(REVIEWER_NAMESPACE.into()),
            ..Subject::default()
        }]),
    };
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(&binding_name, &params, &Patch::Apply(&binding))
        .await
        .with_context(|| format!("applying ClusterRoleBinding {binding_name}"))?;
    service_account_token(
        client,
        REVIEWER_NAMESPACE,
        REVIEWER,
        &[],
        Duration::from_secs(365 * 24 * 3600),
    )
    .await
}

fn require_binary(binary: &Path) -> Result<()> {
    if !binary.is_file() {
        bail!(
            "the Vault {VAULT_VERSION} server {} is missing; run: bash hack/build-vault.sh",
            binary.display()
        );
    }
    Ok(())
}

fn object(value: &Value, what: &str) -> Result<Map<String, Value>> {
    value
        .as_object()
        .cloned()
        .with_context(|| format!("{what}: data is not a JSON object"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_names_the_command_that_builds_it() {
        let dir = tempfile::tempdir().unwrap();
        let err = require_binary(&dir.path().join("vault")).unwrap_err();
        assert!(
            err.to_string().contains("; run: bash hack/build-vault.sh"),
            "{err}"
        );
    }
}
