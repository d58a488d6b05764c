//! The command line: every subcommand and flag, and how each turns into the settings of the
//! crate that does the work. Nothing here runs anything; `main.rs` composes.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "external-secrets",
    about = "Keeps Kubernetes Secrets in sync with external secret managers"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Write every CRD as one YAML file per CRD, and the chart's CRD templates.
    Crds {
        /// Folder to write into.
        #[arg(long, default_value = "crds")]
        out: PathBuf,
        /// The Helm chart whose generated templates (CRDs, provider table) are rewritten.
        #[arg(long, default_value = "charts/external-secrets")]
        chart: PathBuf,
    },
    /// Run the operator (with the provider conversion webhook, unless --disable-webhook).
    Controller(Box<ControllerArgs>),
    /// Serve only the provider conversion webhook.
    Webhook(WebhookCommand),
    /// Move existing objects to design 007's forms.
    Migrate {
        #[command(subcommand)]
        what: MigrateCommand,
    },
    /// Serve this build's providers out of process (ESO's provider.v1 gRPC protocol).
    Provider {
        #[command(subcommand)]
        what: ProviderCommand,
    },
}

#[derive(clap::Args)]
pub(crate) struct WebhookCommand {
    #[command(flatten)]
    pub(crate) webhook: WebhookArgs,
    /// Kubeconfig to use instead of $KUBECONFIG, ~/.kube/config or the in-cluster account.
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
}

#[derive(Subcommand)]
pub(crate) enum ProviderCommand {
    /// Serve provider kinds to the operator (or ESO's core) over mTLS gRPC, reading provider
    /// objects and their credentials with this process's own ServiceAccount.
    Serve(Box<ProviderServeArgs>),
    /// Check a provider server (ours, ESO's or any other) against the out-of-process contract
    /// before using it: one line per check, and a failure exit status when any check fails.
    Conformance(Box<ProviderConformanceArgs>),
}

#[derive(clap::Args)]
pub(crate) struct ProviderConformanceArgs {
    /// The server, host:port; the host is also the name its certificate must carry.
    #[arg(long)]
    pub(crate) address: String,
    /// Directory of ca.crt, client.crt and client.key (the keys of the operator's TLS Secret).
    #[arg(long, required_unless_present = "plaintext")]
    pub(crate) tls_dir: Option<PathBuf>,
    /// Plaintext, for a server run with --enable-tls=false.
    #[arg(long, conflicts_with = "tls_dir")]
    pub(crate) plaintext: bool,
    /// The provider object the calls name: apiVersion/kind/namespace/name, e.g.
    /// providers.external-secrets.io/v1alpha1/Fake/team-a/fake.
    #[arg(long)]
    pub(crate) provider_ref: String,
    /// The namespace the calls are made for (an ExternalSecret's); the reference's by default.
    #[arg(long)]
    pub(crate) source_namespace: Option<String>,
    #[arg(long, default_value = "SecretStore", value_parser = ["SecretStore", "ClusterSecretStore"])]
    pub(crate) store_ref_kind: String,
    /// A key the provider object can read; give its exact value with --read-value. Repeatable.
    #[arg(long = "read-key", value_name = "KEY")]
    pub(crate) read_keys: Vec<String>,
    /// The value of the --read-key at the same position.
    #[arg(long = "read-value", value_name = "VALUE")]
    pub(crate) read_values: Vec<String>,
    /// Every call's deadline (Go duration).
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub(crate) deadline: Duration,
    /// How the remote keys the run writes (and deletes) begin; GitLab needs conformance_.
    #[arg(long, default_value = "conformance-")]
    pub(crate) remote_key_prefix: String,
    /// The server's maximum connection age, if it has one (Go duration): the run then checks
    /// that the server ends a connection of that age with GOAWAY and fails no call.
    #[arg(long, value_parser = parse_positive_duration)]
    pub(crate) max_connection_age: Option<Duration>,
}

#[derive(clap::Args)]
pub(crate) struct ProviderServeArgs {
    /// A provider kind to serve, e.g. Vault; repeat for several. It must be compiled into this
    /// build. Fake and Kubernetes also serve ESO's provider.external-secrets.io/v2alpha1 kinds.
    #[arg(long = "kind", required = true, value_name = "KIND")]
    pub(crate) kinds: Vec<String>,
    /// The gRPC port.
    #[arg(long, default_value_t = 8080)]
    pub(crate) port: u16,
    /// The port of /metrics (and /healthz, /readyz for the kubelet).
    #[arg(long, default_value_t = 8081)]
    pub(crate) metrics_port: u16,
    /// The address both ports listen on.
    #[arg(long, default_value = "0.0.0.0")]
    pub(crate) bind_address: std::net::IpAddr,
    /// Directory of ca.crt (client certificates must chain to it), tls.crt and tls.key, read
    /// again when they change; $TLS_CA_CERT_FILE, $TLS_CERT_FILE, $TLS_KEY_FILE rename them.
    #[arg(long, env = "TLS_CERT_DIR", default_value = provider_server::tls::DEFAULT_CERT_DIR)]
    pub(crate) tls_dir: PathBuf,
    /// mTLS; `--enable-tls=false` serves plaintext to anyone, for local experiments only.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", require_equals = true, action = clap::ArgAction::Set)]
    pub(crate) enable_tls: bool,
    /// How long calls in flight may take to finish once SIGTERM or SIGINT arrives (Go
    /// duration).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub(crate) shutdown_grace_period: Duration,
    /// How long the server serves on once SIGTERM or SIGINT arrives, its health NOT_SERVING,
    /// before it stops accepting: the time endpoints and clients take to drop it (Go duration).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub(crate) shutdown_delay: Duration,
    /// A connection is closed gracefully (GOAWAY) at this age, so clients spread their calls
    /// again over the replicas there are now (Go duration).
    #[arg(long, default_value = "30m", value_parser = parse_positive_duration)]
    pub(crate) max_connection_age: Duration,
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    /// Kubeconfig to use instead of $KUBECONFIG, ~/.kube/config or the in-cluster account.
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
}

#[derive(Subcommand)]
pub(crate) enum MigrateCommand {
    /// Move stores from inline spec.provider to spec.providerRef (or back), keeping the
    /// provider object the operator converted, so no Secret is rewritten.
    Stores(MigrateArgs),
    /// Rewrite every provider object at its CRD's storage version, then trim the CRD's
    /// status.storedVersions to that version: run after a CRD changed its storage version,
    /// before a later CRD stops serving the old one.
    Storage(StorageArgs),
}

#[derive(clap::Args)]
pub(crate) struct StorageArgs {
    /// Only this provider kind (its namespaced and cluster-scoped CRDs), e.g. Vault; every
    /// provider kind otherwise.
    #[arg(long, conflicts_with = "crd")]
    pub(crate) kind: Option<String>,
    /// One CRD by name instead, e.g. vaults.providers.external-secrets.io.
    #[arg(long)]
    pub(crate) crd: Option<String>,
    /// List the objects that would be rewritten and the storedVersions change; change nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Kubeconfig to use instead of $KUBECONFIG or ~/.kube/config.
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
}

#[derive(clap::Args)]
pub(crate) struct MigrateArgs {
    /// Direction.
    #[arg(long, value_enum, default_value_t = To::ProviderRef)]
    pub(crate) to: To,
    /// SecretStores of this namespace.
    #[arg(long, short = 'n', conflicts_with = "all_namespaces")]
    pub(crate) namespace: Option<String>,
    /// SecretStores of every namespace, and every ClusterSecretStore.
    #[arg(long, short = 'A')]
    pub(crate) all_namespaces: bool,
    /// Only stores with these labels, e.g. team=a.
    #[arg(long, short = 'l')]
    pub(crate) selector: Option<String>,
    /// Print what would change; change nothing.
    #[arg(long, conflicts_with = "output")]
    pub(crate) dry_run: bool,
    /// Print the new manifests instead of changing the cluster (for GitOps repositories).
    #[arg(long, short = 'o', value_enum)]
    pub(crate) output: Option<Output>,
    /// Kubeconfig to use instead of $KUBECONFIG or ~/.kube/config.
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum To {
    #[value(name = "providerref")]
    ProviderRef,
    Inline,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Output {
    Yaml,
}

/// Where and as what the conversion webhook of multi-version provider kinds is served.
#[derive(clap::Args)]
pub(crate) struct WebhookArgs {
    /// Address of `POST /convert` (the webhook Service's target port).
    #[arg(long, default_value = "0.0.0.0:10250")]
    pub(crate) webhook_addr: SocketAddr,
    /// Namespace of the webhook's Service and certificate Secret; defaults to $POD_NAMESPACE,
    /// then `external-secrets`.
    #[arg(long)]
    pub(crate) webhook_namespace: Option<String>,
    /// The URL the API server calls instead of the Service, for a control plane on this
    /// machine (https://127.0.0.1:<port>/convert); the certificate then names 127.0.0.1 too.
    #[arg(long)]
    pub(crate) webhook_url: Option<String>,
    /// Name of the webhook's Service, which its certificate names (the Helm chart's is
    /// `<release>-webhook`).
    #[arg(long, default_value = conversion_webhook::SERVICE_NAME)]
    pub(crate) webhook_service_name: String,
    /// Name of the Secret that holds the webhook's certificates, shared by every replica.
    #[arg(long, default_value = conversion_webhook::SECRET_NAME)]
    pub(crate) webhook_secret_name: String,
    /// The Secret is written and rotated by another issuer (cert-manager: `tls.crt`,
    /// `tls.key`), which also fills the CRDs' CA bundle: serve it and write nothing.
    #[arg(long)]
    pub(crate) webhook_certificate_from_secret: bool,
}

impl WebhookArgs {
    pub(crate) fn settings(&self) -> conversion_webhook::Settings {
        let namespace = self
            .webhook_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "external-secrets".to_owned());
        let mut settings = conversion_webhook::Settings::new(namespace);
        settings.listen = self.webhook_addr;
        settings.service_name.clone_from(&self.webhook_service_name);
        settings.secret_name.clone_from(&self.webhook_secret_name);
        settings.external_certificate = self.webhook_certificate_from_secret;
        settings.loopback = self.webhook_url.is_some();
        settings.url = self.webhook_url.clone();
        settings
    }
}

#[derive(clap::Args)]
pub(crate) struct ControllerArgs {
    #[command(flatten)]
    pub(crate) webhook: WebhookArgs,
    /// Serve no conversion webhook here (another process serves it, e.g. `external-secrets
    /// webhook`).
    #[arg(long)]
    pub(crate) disable_webhook: bool,
    /// Reconciles run in parallel per controller.
    #[arg(long, default_value_t = 4, env = "ES_CONCURRENT")]
    pub(crate) concurrent: u16,
    /// Handle only stores whose spec.controller is empty or equal to this.
    #[arg(long, default_value = "default")]
    pub(crate) controller_class: String,
    /// Watch only this namespace; cluster-scoped kinds are then ignored.
    #[arg(long)]
    pub(crate) namespace: Option<String>,
    /// Revalidation period of stores without spec.refreshInterval (Go duration).
    #[arg(long, default_value = "5m", value_parser = parse_positive_duration)]
    pub(crate) store_requeue_interval: Duration,
    /// Address of /metrics.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub(crate) metrics_addr: SocketAddr,
    /// Address of /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8082")]
    pub(crate) live_addr: SocketAddr,
    /// Average requests per second to the API server (0 turns limiting off).
    #[arg(long, default_value_t = 50.0)]
    pub(crate) client_qps: f32,
    /// Requests to the API server allowed at once above the average.
    #[arg(long, default_value_t = 100)]
    pub(crate) client_burst: u32,
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    /// Kubeconfig to use instead of $KUBECONFIG, ~/.kube/config or the in-cluster account.
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Let ExternalSecrets write ConfigMaps and custom resources (`spec.target.manifest`), which
    /// are not encrypted at rest; the operator then needs RBAC for those kinds.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    pub(crate) unsafe_allow_generic_targets: bool,
    /// `KIND=CLASS`: serve every store of the provider kind KIND through the
    /// ClusterProviderClass CLASS (its gRPC server), unless the store names a class itself in
    /// spec.runtimeRef. Repeat for several kinds.
    #[arg(long = "out-of-process", value_parser = parse_route)]
    pub(crate) out_of_process: Vec<(String, String)>,
    /// `NAMESPACE/SECRET=SERVICE[,HOST...]`: keep the Secret filled with a provider server's
    /// mutual TLS in ESO's layout (`ca.crt`, `tls.crt` and `tls.key` for the server, valid for
    /// the Service's DNS names and any HOST; `client.crt` and `client.key` for this operator,
    /// CN external-secrets-controller), issued and rotated as the webhook's certificate is.
    /// Repeat for several servers.
    #[arg(long = "provider-tls-secret", value_parser = conversion_webhook::provider_tls::Settings::parse)]
    pub(crate) provider_tls_secrets: Vec<conversion_webhook::provider_tls::Settings>,
    /// `NAME=ADDRESS[,NAMESPACE/SECRET]`: create and keep the ClusterProviderClass NAME with
    /// spec.address ADDRESS and spec.tlsSecretRef SECRET, for an install (the chart's) that
    /// creates the class's CRD in the same step and so cannot create the class. Repeat for
    /// several classes.
    #[arg(long = "provider-class", value_parser = controllers::provider_class::DeclaredClass::parse)]
    pub(crate) provider_classes: Vec<controllers::provider_class::DeclaredClass>,
    /// Run the controllers only while holding a Lease, so that one of several replicas works.
    #[arg(long)]
    pub(crate) enable_leader_election: bool,
    /// Name of the Lease.
    #[arg(long, default_value = "external-secrets-controller")]
    pub(crate) leader_election_id: String,
    /// Namespace of the Lease; defaults to $POD_NAMESPACE, then `default`.
    #[arg(long)]
    pub(crate) leader_election_namespace: Option<String>,
    /// How long a leader that stopped renewing keeps the Lease (Go duration).
    #[arg(long, default_value = "15s", value_parser = parse_positive_duration)]
    pub(crate) lease_duration: Duration,
    /// How long before the Lease expires the leader renews it (Go duration).
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub(crate) renew_deadline: Duration,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

/// How often a `--provider-class` is applied again.
pub(crate) const DECLARED_CLASS_INTERVAL: Duration = Duration::from_secs(600);

pub(crate) fn parse_route(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((kind, class)) if !kind.is_empty() && !class.is_empty() => {
            Ok((kind.to_owned(), class.to_owned()))
        }
        _ => Err(format!(
            "{s:?}: expected KIND=CLUSTERPROVIDERCLASS, e.g. Vault=vault"
        )),
    }
}

pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    controllers::duration::parse(s)
}

/// A duration that must be above zero: a connection age of 0 would end every connection as it
/// opens, a requeue interval or lease of 0 would spin.
pub(crate) fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!("{s:?}: must be above zero")),
        d => Ok(d),
    }
}

impl MigrateArgs {
    pub(crate) fn options(self) -> anyhow::Result<migrate::Options> {
        let namespaces = match (self.namespace, self.all_namespaces) {
            (Some(ns), _) => migrate::Namespaces::One(ns),
            (None, true) => migrate::Namespaces::All,
            (None, false) => anyhow::bail!("give --namespace NAME or --all-namespaces"),
        };
        Ok(migrate::Options {
            direction: match self.to {
                To::ProviderRef => migrate::Direction::ProviderRef,
                To::Inline => migrate::Direction::Inline,
            },
            namespaces,
            selector: self.selector,
            mode: match (self.dry_run, self.output) {
                (true, _) => migrate::Mode::DryRun,
                (false, Some(Output::Yaml)) => migrate::Mode::Yaml,
                (false, None) => migrate::Mode::Apply,
            },
        })
    }
}

impl StorageArgs {
    /// The CRDs to migrate, one at a time.
    pub(crate) fn crds(&self) -> anyhow::Result<Vec<String>> {
        Ok(match &self.crd {
            Some(crd) => vec![crd.clone()],
            None => migrate::storage::provider_crds(self.kind.as_deref())?,
        })
    }
}

impl ProviderServeArgs {
    /// `registry` narrowed to the `--kind`s, each of which it must hold.
    pub(crate) fn served(
        &self,
        registry: &provider::ProviderRegistry,
    ) -> anyhow::Result<provider::ProviderRegistry> {
        provider_server::served_registry(registry, &self.kinds).map_err(anyhow::Error::msg)
    }

    pub(crate) fn options(&self) -> provider_server::ServeOptions {
        let tls = self
            .enable_tls
            .then(|| provider_server::TlsFiles::from_env(Some(&self.tls_dir)));
        let mut options = provider_server::ServeOptions::new(
            SocketAddr::new(self.bind_address, self.port),
            Some(SocketAddr::new(self.bind_address, self.metrics_port)),
            tls,
        );
        options.grace_period = self.shutdown_grace_period;
        options.shutdown_delay = self.shutdown_delay;
        options.max_connection_age = self.max_connection_age;
        options
    }
}

impl ProviderConformanceArgs {
    pub(crate) fn options(self) -> anyhow::Result<provider_conformance::Options> {
        use provider_conformance::{Options, Read};
        let reference =
            provider_conformance::parse_provider_ref(&self.provider_ref, &self.store_ref_kind)
                .map_err(anyhow::Error::msg)?;
        if self.read_keys.len() != self.read_values.len() {
            anyhow::bail!(
                "give each --read-key its --read-value ({} keys, {} values)",
                self.read_keys.len(),
                self.read_values.len()
            );
        }
        let tls = match (&self.tls_dir, self.plaintext) {
            (Some(dir), false) => {
                Some(provider_conformance::tls_from_dir(dir).map_err(anyhow::Error::msg)?)
            }
            _ => None,
        };
        let mut options = Options::new(self.address, tls, reference);
        if let Some(namespace) = self.source_namespace {
            options.source_namespace = namespace;
        }
        if options.source_namespace.is_empty() {
            anyhow::bail!("the provider reference names no namespace: give --source-namespace");
        }
        options.reads = self
            .read_keys
            .into_iter()
            .zip(self.read_values)
            .map(|(key, value)| Read {
                key,
                value: value.into_bytes(),
            })
            .collect();
        options.deadline = self.deadline;
        options.remote_key_prefix = self.remote_key_prefix;
        options.max_connection_age = self.max_connection_age;
        Ok(options)
    }
}

impl ControllerArgs {
    pub(crate) fn settings(&self) -> controllers::Settings {
        controllers::Settings {
            controller_class: self.controller_class.clone(),
            namespace: self.namespace.clone(),
            concurrency: self.concurrent,
            store_requeue_interval: self.store_requeue_interval,
            allow_generic_targets: self.unsafe_allow_generic_targets,
            out_of_process: self.out_of_process.iter().cloned().collect(),
        }
    }

    pub(crate) fn addresses(&self) -> controllers::Addresses {
        controllers::Addresses {
            metrics: Some(self.metrics_addr),
            probes: Some(self.live_addr),
        }
    }

    /// The Lease to compete for, with `--enable-leader-election`.
    pub(crate) fn lease(&self) -> Option<controllers::leadership::LeaseSettings> {
        self.enable_leader_election.then(|| {
            controllers::leadership::LeaseSettings::new(
                self.leader_election_id.clone(),
                self.leader_election_namespace.clone(),
                self.lease_duration,
                self.renew_deadline,
            )
        })
    }
}

impl LogFormat {
    pub(crate) fn init(self) {
        // kube-runtime opens an info span per object handed to a worker, which lives while the
        // object waits for its turn (10k spans in a 10k backlog, about 0.6 KiB and 0.8 ms of
        // formatting each); our reconcilers open their own with the namespace and name.
        // Vault's client libraries log every answer that is not a 2xx (a key not there, a
        // token refused) at ERROR, with no more than "Server returned error"; the provider
        // turns those into the store's or the ExternalSecret's condition, which says more.
        let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
            "info,kube_runtime::controller=warn,rustify=off,vaultrs=off".into()
        });
        let subscriber = tracing_subscriber::fmt().with_env_filter(filter);
        match self {
            LogFormat::Json => subscriber.json().init(),
            LogFormat::Text => subscriber.init(),
        }
    }
}

/// What `--kubeconfig` names, or $KUBECONFIG, ~/.kube/config or the in-cluster account.
pub(crate) async fn client_config(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Config> {
    match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Ok(kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?)
        }
        None => kube::Config::infer().await.context("loading kubeconfig"),
    }
}

/// A client of [`client_config`].
pub(crate) async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    Ok(kube::Client::try_from(client_config(kubeconfig).await?)?)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Cli;

    #[test]
    fn a_zero_duration_is_refused_where_it_would_spin() {
        let serve = |age: &str| {
            Cli::try_parse_from([
                "external-secrets",
                "provider",
                "serve",
                "--kind",
                "Fake",
                "--max-connection-age",
                age,
            ])
        };
        let refused = serve("0s")
            .err()
            .expect("a zero age is refused")
            .to_string();
        assert!(
            refused.contains("--max-connection-age") && refused.contains("above zero"),
            "{refused}"
        );
        assert!(serve("90s").is_ok());
        let controller =
            Cli::try_parse_from(["external-secrets", "controller", "--lease-duration", "0"]);
        assert!(controller.is_err());
    }
}
