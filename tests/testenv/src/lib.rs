//! A real kube-apiserver + etcd + kube-controller-manager for tests, started from the binaries
//! that `hack/build-control-plane.sh` builds (see `hack/README.md`).
//!
//! One [`ControlPlane`] is meant to be shared by a whole test binary; tests isolate themselves
//! with [`create_namespace`]. Each test makes its own [`kube::Client`] with
//! [`ControlPlane::client`], because a client is bound to the tokio runtime it was made in.

mod apply;
mod grpc_go_peer;
pub use grpc_go_peer::grpc_go_peer;
mod helm;
pub use helm::{HELM_VERSION, helm, helm_binary};
pub mod moto;
pub use moto::{CreatedSecret, Moto, MotoRun, moto};
mod node;
pub use node::{COREDNS_VERSION, KUBE_ROUTER_VERSION, Node};
mod pki;
mod process;
mod provider_server;
pub mod python_example;
pub use process::{terminate, with_own_hosts};
pub use provider_server::{ProviderPki, ProviderServer};
pub use python_example::{PythonExample, PythonServer, PythonServerFiles};
mod quickstart;
mod selection;
mod standby;
mod vault;

use std::future::Future;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use base64::Engine;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::Api;
use kube::config::AuthInfo;

pub use apply::{
    apply_yaml, apply_yaml_in, create_namespace, install_crds, parse_yaml, wait_for,
    wait_for_crd_established,
};
pub use pki::{CertificateAuthority, IssuedCertificate};
pub use quickstart::{
    VAULT_QUICKSTART, approle_reader, print_secret, vault_quickstart, wait_for_quickstart,
};
pub use selection::Selection;
pub use standby::{SeenRequest, VaultStandby, replication_state};
pub use vault::{
    AuditedRequest, JwtRole, KubernetesRole, KvV2Secret, KvVersion, TokenOptions, VAULT_VERSION,
    VaultServer, service_account_token, vault_binary,
};

use pki::Pki;
use process::Supervisor;

/// The Kubernetes version `hack/build-control-plane.sh` builds by default.
pub const KUBERNETES_VERSION: &str = "1.36.3";

const BINARIES: [&str; 3] = ["etcd", "kube-apiserver", "kube-controller-manager"];

/// The controllers a test needs from kube-controller-manager: ownerReference cascades,
/// namespace deletion, each namespace's `default` ServiceAccount, tokens for manually created
/// `kubernetes.io/service-account-token` Secrets, and each namespace's `kube-root-ca.crt`
/// ConfigMap (what ESO's docs point a Kubernetes store at to reach its own cluster).
const CONTROLLERS: &str = "garbage-collector-controller,namespace-controller,\
serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller";

/// Logs what ServiceAccounts do (the operator run under a chart's account, to prove its RBAC
/// minimal), at Metadata level, and writes of ExternalSecrets, PushSecrets and the cluster kinds
/// whoever makes them (the e2e operator runs as the admin; its cluster kinds must write nothing
/// in a steady state), and nothing else: the admin's other requests would only cost time.
pub const AUDIT_POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    userGroups: [\"system:serviceaccounts\"]
  - level: Metadata
    verbs: [create, update, patch, delete]
    resources:
      - group: external-secrets.io
        resources: [externalsecrets, pushsecrets, clusterexternalsecrets, clusterpushsecrets,
          clusterexternalsecrets/status, clusterpushsecrets/status]
  - level: None
";

const STEP_TIMEOUT: Duration = Duration::from_secs(90);

/// Where the control-plane binaries for `version` live: the rule of `hack/testbin-dir.sh`.
pub fn testbin_dir(version: &str) -> PathBuf {
    testbin_root().join(format!("k8s-{version}"))
}

/// The cache folder the `hack/build-*.sh` scripts build into, one subfolder per tool and version.
fn testbin_root() -> PathBuf {
    let env = |name| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env("EXTERNAL_SECRETS_TESTBIN").unwrap_or_else(|| {
        env("XDG_CACHE_HOME")
            .or_else(|| env("HOME").map(|h| h.join(".cache")))
            .unwrap_or_else(|| PathBuf::from(".cache"))
            .join("external-secrets-rs/testbin")
    })
}

/// A JWT issuer an API server trusts besides its own ServiceAccount tokens: what lets one
/// cluster accept another's ServiceAccount tokens (workload identity federation).
#[derive(Clone, Debug)]
pub struct TrustedIssuer {
    /// The tokens' `iss`, whose `/.well-known/openid-configuration` the API server reads.
    pub url: String,
    /// The CA of the issuer's serving certificate (PEM).
    pub ca_pem: String,
    /// The audience tokens must carry.
    pub audience: String,
    /// Put before the token's `sub` to make the user name (`system:` may not start one).
    pub username_prefix: String,
}

impl TrustedIssuer {
    fn configuration(&self) -> Result<String> {
        Ok(serde_yaml::to_string(&serde_json::json!({
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AuthenticationConfiguration",
            "jwt": [{
                "issuer": {
                    "url": self.url,
                    "audiences": [self.audience],
                    "certificateAuthority": self.ca_pem,
                },
                "claimMappings": {
                    "username": {"claim": "sub", "prefix": self.username_prefix},
                },
            }],
        }))?)
    }
}

/// A running control plane; dropping it stops every process and deletes its files.
pub struct ControlPlane {
    // Field order matters: the processes must be gone before their directory is removed.
    supervisor: Supervisor,
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    server_url: String,
    etcd_url: String,
    serving_ca_pem: String,
    serving_ca_der: Vec<u8>,
    sa_public_key_pem: String,
    /// Signs client certificates the API server accepts.
    client_ca: Option<CertificateAuthority>,
    /// How each process was started, to start them again after [`ControlPlane::stop`].
    commands: Option<Commands>,
}

struct Commands {
    bin: PathBuf,
    etcd: Vec<String>,
    apiserver: Vec<String>,
    controller_manager: Vec<String>,
}

impl ControlPlane {
    /// Starts etcd, kube-apiserver and kube-controller-manager on free 127.0.0.1 ports and
    /// waits until the apiserver is ready and `default/default` ServiceAccount exists.
    ///
    /// Blocks the calling thread; safe to call from inside or outside a tokio runtime.
    pub fn start() -> Result<Self> {
        Self::start_trusting(None)
    }

    /// [`ControlPlane::start`], its API server also accepting the JWTs `issuer` signs (another
    /// cluster's ServiceAccount tokens, say) through a structured authentication configuration.
    pub fn start_trusting(issuer: Option<TrustedIssuer>) -> Result<Self> {
        let started = Instant::now();
        let bin = testbin_dir(KUBERNETES_VERSION);
        require_files(&bin, &BINARIES, "bash hack/build-control-plane.sh")?;
        let cp = retry_on_port_clash(|| Self::start_once(&bin, issuer.as_ref(), None))?;
        eprintln!(
            "testenv: Kubernetes {KUBERNETES_VERSION} control plane ready at {} in {:.1}s (kubeconfig {}){}",
            cp.server_url,
            started.elapsed().as_secs_f64(),
            cp.kubeconfig_path().display(),
            pdeathsig_note()
        );
        Ok(cp)
    }

    /// The control plane of a [`Node`]: its API server serves on the node's address.
    fn start_for_node(network: &node::Network) -> Result<Self> {
        let bin = testbin_dir(KUBERNETES_VERSION);
        require_files(&bin, &BINARIES, "bash hack/build-control-plane.sh")?;
        retry_on_port_clash(|| Self::start_once(&bin, None, Some(network)))
    }

    /// On failure the processes are already stopped; the folder with their logs is returned
    /// so that the caller decides whether to keep it.
    fn start_once(
        bin: &Path,
        issuer: Option<&TrustedIssuer>,
        node: Option<&node::Network>,
    ) -> Result<Self, (anyhow::Error, Option<tempfile::TempDir>)> {
        let dir = tempfile::Builder::new()
            .prefix("external-secrets-testenv-")
            .tempdir()
            .context("creating the control plane's temporary folder")
            .map_err(|e| (e, None))?;
        let path = dir.path().to_owned();
        let mut cp = Self {
            supervisor: Supervisor::new().map_err(|e| (e, None))?,
            dir: Some(dir),
            path,
            server_url: String::new(),
            etcd_url: String::new(),
            serving_ca_pem: String::new(),
            serving_ca_der: Vec::new(),
            sa_public_key_pem: String::new(),
            client_ca: None,
            commands: None,
        };
        match cp.boot(bin, issuer, node) {
            Ok(()) => Ok(cp),
            Err(err) => {
                let logs: Vec<String> = cp
                    .log_paths()
                    .into_iter()
                    .filter(|p| p.exists())
                    .map(|p| p.display().to_string())
                    .collect();
                let dir = cp.dir.take();
                drop(cp);
                let err = err.context(format!(
                    "starting the control plane failed; logs: {}",
                    logs.join(" ")
                ));
                Err((err, dir))
            }
        }
    }

    fn boot(
        &mut self,
        bin: &Path,
        issuer: Option<&TrustedIssuer>,
        node: Option<&node::Network>,
    ) -> Result<()> {
        // A node's Pods reach the API server through the `kubernetes` Service, whose endpoint
        // is the advertised address: 127.0.0.1 would be each Pod's own loopback, so a node's
        // API server serves on the node's address (a bridge of the run's own) instead.
        let host = node.map_or(Ipv4Addr::LOCALHOST, |n| n.ip);
        let pki = match node {
            Some(n) => Pki::generate(
                &node::KUBERNETES_SERVICE_NAMES,
                &[IpAddr::V4(n.ip), IpAddr::V4(n.kubernetes_service_ip)],
            )?,
            None => Pki::generate(&[], &[])?,
        };
        self.serving_ca_pem = pki.serving_ca_pem.clone();
        self.serving_ca_der = pki.serving_ca_der.clone();
        self.sa_public_key_pem = pki.sa_public_key_pem.clone();
        // Holding each listener until just before its process starts narrows the window in
        // which something else could take the port.
        let etcd_client = reserve_port()?;
        let etcd_peer = reserve_port()?;
        let apiserver = reserve_port()?;
        self.server_url = format!("https://{host}:{}", port(&apiserver)?);

        let dir = self.path.clone();
        let f = |name: &str| dir.join(name).to_string_lossy().into_owned();
        for (name, contents) in [
            ("serving-ca.crt", &pki.serving_ca_pem),
            ("apiserver.crt", &pki.serving_cert_pem),
            ("apiserver.key", &pki.serving_key_pem),
            ("client-ca.crt", &pki.client_ca_pem),
            ("admin.crt", &pki.admin_cert_pem),
            ("admin.key", &pki.admin_key_pem),
            ("sa.key", &pki.sa_key_pem),
            ("sa.pub", &pki.sa_public_key_pem),
            ("audit-policy.yaml", &AUDIT_POLICY.to_owned()),
        ] {
            std::fs::write(dir.join(name), contents).with_context(|| format!("writing {name}"))?;
        }
        std::fs::write(self.kubeconfig_path(), self.kubeconfig(&pki)?)
            .context("writing the kubeconfig")?;

        let etcd_url = format!("http://127.0.0.1:{}", port(&etcd_client)?);
        self.etcd_url = etcd_url.clone();
        let peer_url = format!("http://127.0.0.1:{}", port(&etcd_peer)?);
        let etcd_args = vec![
            "--name=testenv".into(),
            format!("--data-dir={}", f("etcd-data")),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=testenv={peer_url}"),
            // Test data is thrown away, so durability only costs time.
            "--unsafe-no-fsync=true".into(),
            "--log-level=warn".into(),
        ];
        drop((etcd_client, etcd_peer));
        let mut apiserver_args = vec![
            format!("--etcd-servers={etcd_url}"),
            format!("--secure-port={}", port(&apiserver)?),
            format!("--bind-address={host}"),
            // Without it the apiserver looks for a default route and fails on hosts without one.
            format!("--advertise-address={host}"),
            // Anything the apiserver writes on its own goes here, not to /var/run/kubernetes.
            format!("--cert-dir={}", f("apiserver-certs")),
            format!("--tls-cert-file={}", f("apiserver.crt")),
            format!("--tls-private-key-file={}", f("apiserver.key")),
            format!("--client-ca-file={}", f("client-ca.crt")),
            format!(
                "--authorization-mode={}",
                if node.is_some() { "Node,RBAC" } else { "RBAC" }
            ),
            format!(
                "--service-cluster-ip-range={}",
                node.map_or("10.0.0.0/24", |n| &n.service_cidr)
            ),
            "--allow-privileged=true".into(),
            // Issuer + signing key enable TokenRequest, TokenReview and OIDC discovery.
            format!("--service-account-issuer={}/", self.server_url),
            format!("--service-account-key-file={}", f("sa.pub")),
            format!("--service-account-signing-key-file={}", f("sa.key")),
            "--profiling=false".into(),
            format!("--audit-policy-file={}", f("audit-policy.yaml")),
            format!("--audit-log-path={}", self.audit_log_path().display()),
            "--audit-log-format=json".into(),
        ];
        drop(apiserver);
        if node.is_some() {
            // Logs, exec and port-forward go through the kubelet, which authenticates the API
            // server by this certificate; the node's name does not resolve, its address does.
            let kubelet_client = pki
                .client_ca
                .issue_client("kube-apiserver-kubelet-client", Some("system:masters"))?;
            std::fs::write(dir.join("kubelet-client.crt"), &kubelet_client.cert_pem)?;
            std::fs::write(dir.join("kubelet-client.key"), &kubelet_client.key_pem)?;
            apiserver_args.extend([
                format!("--kubelet-client-certificate={}", f("kubelet-client.crt")),
                format!("--kubelet-client-key={}", f("kubelet-client.key")),
                "--kubelet-preferred-address-types=InternalIP".into(),
            ]);
        }
        if let Some(issuer) = issuer {
            std::fs::write(dir.join("authentication.yaml"), issuer.configuration()?)
                .context("writing authentication.yaml")?;
            apiserver_args.push(format!(
                "--authentication-config={}",
                f("authentication.yaml")
            ));
        }
        let controller_manager_args = vec![
            format!("--kubeconfig={}", self.kubeconfig_path().display()),
            // A node needs them all: Deployments, ReplicaSets, EndpointSlices, the node's
            // lifecycle (its not-ready taint), leader-election Leases' garbage.
            format!(
                "--controllers={}",
                if node.is_some() { "*" } else { CONTROLLERS }
            ),
            "--leader-elect=false".into(),
            "--use-service-account-credentials=false".into(),
            format!("--service-account-private-key-file={}", f("sa.key")),
            format!("--root-ca-file={}", f("serving-ca.crt")),
            // Nothing scrapes its metrics or health endpoints.
            "--secure-port=0".into(),
            "--bind-address=127.0.0.1".into(),
        ];
        self.client_ca = Some(pki.client_ca);
        self.commands = Some(Commands {
            bin: bin.to_owned(),
            etcd: etcd_args,
            apiserver: apiserver_args,
            controller_manager: controller_manager_args,
        });
        self.launch()
    }

    /// Starts etcd, then the apiserver once etcd is healthy, then the controller-manager once
    /// the apiserver is ready; waits until `default/default` ServiceAccount exists.
    fn launch(&self) -> Result<()> {
        let commands = self
            .commands
            .as_ref()
            .context("the control plane was never configured")?;
        let bin = &commands.bin;
        self.supervisor.spawn(
            "etcd",
            &bin.join("etcd"),
            commands.etcd.clone(),
            &self.path.join("etcd.log"),
        )?;
        self.wait_blocking("etcd /health", || etcd_healthy(&self.etcd_url))?;
        self.supervisor.spawn(
            "kube-apiserver",
            &bin.join("kube-apiserver"),
            commands.apiserver.clone(),
            &self.path.join("kube-apiserver.log"),
        )?;

        let config = self.client_config();
        let this = self;
        block_on_own_thread(async move {
            let client = kube::Client::try_from(config).context("building a client")?;
            this.wait("kube-apiserver /readyz", || async {
                let request = http::Request::get("/readyz").body(Vec::new())?;
                let body = client.request_text(request).await?;
                anyhow::ensure!(body.trim() == "ok", "/readyz says {body}");
                Ok(())
            })
            .await?;
            // The controller-manager needs a serving apiserver; started earlier it only retries.
            this.supervisor.spawn(
                "kube-controller-manager",
                &bin.join("kube-controller-manager"),
                commands.controller_manager.clone(),
                &this.path.join("kube-controller-manager.log"),
            )?;
            this.wait(
                "namespace default and ServiceAccount default/default",
                || async {
                    Api::<Namespace>::all(client.clone()).get("default").await?;
                    Api::<ServiceAccount>::namespaced(client.clone(), "default")
                        .get("default")
                        .await?;
                    Ok(())
                },
            )
            .await
        })?
    }

    /// Stops etcd, the apiserver and the controller-manager, keeping their data: the cluster
    /// is down, as one whose machines went away, until [`ControlPlane::start_again`].
    pub fn stop(&self) -> Result<()> {
        self.supervisor.stop_all()
    }

    /// Starts the stopped processes again, on the same ports, with the same data and
    /// certificates; blocks until the apiserver is ready.
    pub fn start_again(&self) -> Result<()> {
        self.launch().context("starting the control plane again")
    }

    /// A client certificate and key the apiserver accepts for `user` in `group` (none: no
    /// group but `system:authenticated`).
    pub fn issue_client_certificate(
        &self,
        user: &str,
        group: Option<&str>,
    ) -> Result<IssuedCertificate> {
        self.client_ca
            .as_ref()
            .context("the control plane has no client CA yet")?
            .issue_client(user, group)
    }

    /// Polls `check` until it succeeds, failing early when a control-plane process died.
    async fn wait<F, Fut>(&self, what: &str, check: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<()>>,
    {
        wait_while_running(what, || self.fail_if_exited(), check).await
    }

    fn wait_blocking(&self, what: &str, mut check: impl FnMut() -> Result<()>) -> Result<()> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            let last = match check() {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            self.fail_if_exited()?;
            if Instant::now() > deadline {
                return Err(last.context(format!(
                    "timed out after {STEP_TIMEOUT:?} waiting for {what}"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn fail_if_exited(&self) -> Result<()> {
        fail_if_exited(&self.supervisor, &self.path)
    }

    fn kubeconfig(&self, pki: &Pki) -> Result<String> {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let doc = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "testenv", "cluster": {
                "server": self.server_url,
                "certificate-authority-data": b64(&pki.serving_ca_pem),
            }}],
            "users": [{"name": "admin", "user": {
                "client-certificate-data": b64(&pki.admin_cert_pem),
                "client-key-data": b64(&pki.admin_key_pem),
            }}],
            "contexts": [{"name": "testenv", "context": {
                "cluster": "testenv", "user": "admin", "namespace": "default",
            }}],
            "current-context": "testenv",
        });
        Ok(serde_yaml::to_string(&doc)?)
    }

    /// The API server's audit log: one JSON event per request made with a ServiceAccount's
    /// token (nobody else's, see [`AUDIT_POLICY`]): a watch when it starts, any request when answered.
    pub fn audit_log_path(&self) -> PathBuf {
        self.path.join("audit.log")
    }

    /// An admin (`system:masters`) kubeconfig with embedded credentials.
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.path.join("kubeconfig")
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// etcd's client URL, `http://127.0.0.1:<port>` (no TLS, no auth).
    pub fn etcd_url(&self) -> &str {
        &self.etcd_url
    }

    /// The value etcd holds at `key` (for example `/registry/<group>/<plural>/<ns>/<name>`), as
    /// the apiserver wrote it: what a test reads to see the version an object is stored at,
    /// which the API never shows.
    pub fn etcd_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        etcd_get(&self.etcd_url, key)
    }

    /// The CA that signed the apiserver's serving certificate.
    pub fn ca_cert_pem(&self) -> &str {
        &self.serving_ca_pem
    }

    /// The `iss` of ServiceAccount tokens: the server URL with a trailing slash.
    pub fn service_account_issuer(&self) -> String {
        format!("{}/", self.server_url)
    }

    /// The public key that verifies ServiceAccount tokens (PEM, SPKI).
    pub fn service_account_public_key_pem(&self) -> &str {
        &self.sa_public_key_pem
    }

    /// The control plane's working folder (certificates, kubeconfig, etcd data, logs).
    pub fn dir(&self) -> &Path {
        &self.path
    }

    /// The log files of etcd, kube-apiserver and kube-controller-manager.
    pub fn log_paths(&self) -> Vec<PathBuf> {
        BINARIES
            .iter()
            .map(|b| self.path.join(format!("{b}.log")))
            .collect()
    }

    /// Starts another process beside the control plane (the operator, for example), stopped
    /// with it; its output goes to `<dir>/<name>.log`. Returns its pid.
    pub fn spawn(&self, name: &str, program: &Path, args: Vec<String>) -> Result<u32> {
        self.supervisor
            .spawn(name, program, args, &self.path.join(format!("{name}.log")))
    }

    /// Admin client configuration (client certificate of `admin` in `system:masters`).
    pub fn client_config(&self) -> kube::Config {
        let mut config =
            kube::Config::new(self.server_url.parse().expect("server URL is a valid URI"));
        config.root_cert = Some(vec![self.serving_ca_der.clone()]);
        config.auth_info = AuthInfo {
            client_certificate: Some(self.path.join("admin.crt").to_string_lossy().into_owned()),
            client_key: Some(self.path.join("admin.key").to_string_lossy().into_owned()),
            ..AuthInfo::default()
        };
        config
    }

    /// A new admin client bound to the current tokio runtime.
    pub async fn client(&self) -> kube::Client {
        install_crypto_provider();
        kube::Client::try_from(self.client_config())
            .expect("building a client for the test control plane")
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // `supervisor` is dropped first (declaration order): it kills and reaps the children.
        keep_if_asked(&mut self.dir);
    }
}

/// Fails, naming the command that builds them, unless every one of `files` is in `dir`.
fn require_files(dir: &Path, files: &[&str], build: &str) -> Result<()> {
    let missing: Vec<_> = files
        .iter()
        .filter(|b| !dir.join(b).is_file())
        .copied()
        .collect();
    if !missing.is_empty() {
        bail!(
            "{} missing from {}; run: {build}",
            missing.join(", "),
            dir.display()
        );
    }
    Ok(())
}

/// Fails, quoting the tail of its log (`<dir>/<name>.log`), when a child of `supervisor` exited.
fn fail_if_exited(supervisor: &Supervisor, dir: &Path) -> Result<()> {
    if let Some((name, status)) = supervisor.exited()? {
        let log = dir.join(format!("{name}.log"));
        bail!(
            "{name} exited ({status}); last lines of {}:\n{}",
            log.display(),
            tail(&log, 30)
        );
    }
    Ok(())
}

/// Polls `check` until it succeeds; `running` is asked between attempts and ends the wait
/// with its error (a process that died will not become ready).
async fn wait_while_running<F, Fut>(
    what: &str,
    running: impl Fn() -> Result<()>,
    mut check: F,
) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let last = match check().await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        running()?;
        if Instant::now() > deadline {
            return Err(last.context(format!(
                "timed out after {STEP_TIMEOUT:?} waiting for {what}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `start` up to three times while it fails because a port was taken.
///
/// A reserved port is free again from the moment we release it until the process binds it; an
/// outgoing connection can take it in between, which is worth another attempt. `start` hands
/// back the folder with the logs of a failed attempt; the last one is kept for the error to
/// point at.
fn retry_on_port_clash<T>(
    mut start: impl FnMut() -> Result<T, (anyhow::Error, Option<tempfile::TempDir>)>,
) -> Result<T> {
    let mut attempt = 1;
    loop {
        let (err, dir) = match start() {
            Ok(started) => return Ok(started),
            Err(failure) => failure,
        };
        if attempt < 3 && format!("{err:#}").contains("address already in use") {
            eprintln!("testenv: a port was taken while starting; retrying");
            attempt += 1;
            continue;
        }
        if let Some(dir) = dir {
            let _ = dir.keep();
        }
        return Err(err);
    }
}

/// What the start-up line adds when killed test runs leave processes behind.
fn pdeathsig_note() -> &'static str {
    if process::pdeathsig_available() {
        ""
    } else {
        "; setpriv is missing, so the processes outlive a killed test run"
    }
}

/// Keeps `dir` instead of deleting it when `EXTERNAL_SECRETS_TESTENV_KEEP` is set.
fn keep_if_asked(dir: &mut Option<tempfile::TempDir>) {
    if std::env::var_os("EXTERNAL_SECRETS_TESTENV_KEEP").is_some()
        && let Some(dir) = dir.take()
    {
        eprintln!("testenv: keeping {}", dir.keep().display());
    }
}

fn install_crypto_provider() {
    // Another crate in the test binary may pull in a second rustls provider, in which case
    // rustls refuses to pick one implicitly.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

fn reserve_port() -> Result<TcpListener> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("reserving a free 127.0.0.1 port")
}

fn port(listener: &TcpListener) -> Result<u16> {
    Ok(listener.local_addr()?.port())
}

fn etcd_healthy(url: &str) -> Result<()> {
    let addr: SocketAddr = url.trim_start_matches("http://").parse()?;
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    anyhow::ensure!(
        response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200"),
        "etcd /health: {response}"
    );
    anyhow::ensure!(
        response.contains(r#""health":"true""#),
        "etcd /health: {response}"
    );
    Ok(())
}

/// etcd's JSON gateway (`/v3/kv/range`) over plain HTTP/1.0: one request, no client crate.
fn etcd_get(url: &str, key: &str) -> Result<Option<Vec<u8>>> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let addr: SocketAddr = url.trim_start_matches("http://").parse()?;
    let body = serde_json::json!({ "key": b64.encode(key) }).to_string();
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "POST /v3/kv/range HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, payload) = response
        .split_once("\r\n\r\n")
        .with_context(|| format!("etcd range {key}: no HTTP body in {response:?}"))?;
    anyhow::ensure!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "etcd range {key}: {response}"
    );
    let parsed: serde_json::Value =
        serde_json::from_str(payload).with_context(|| format!("etcd range {key}: {payload}"))?;
    let Some(value) = parsed["kvs"][0]["value"].as_str() else {
        return Ok(None);
    };
    Ok(Some(b64.decode(value).with_context(|| {
        format!("etcd range {key}: value is not base64")
    })?))
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs `future` to completion on a fresh runtime in a scoped thread, so that `start` works
/// whether or not the caller is already inside a runtime (nesting `block_on` panics).
fn block_on_own_thread<F>(future: F) -> Result<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    install_crypto_provider();
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("building a tokio runtime")?;
            Ok(rt.block_on(future))
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}
