//! The `external-secrets` binary: a thin front over the workspace's crates.

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
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
    Webhook {
        #[command(flatten)]
        webhook: WebhookArgs,
        /// Kubeconfig to use instead of $KUBECONFIG, ~/.kube/config or the in-cluster account.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
    },
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

#[derive(Subcommand)]
enum ProviderCommand {
    /// Serve provider kinds to the operator (or ESO's core) over mTLS gRPC, reading provider
    /// objects and their credentials with this process's own ServiceAccount.
    Serve(Box<ProviderServeArgs>),
    /// Check a provider server (ours, ESO's or any other) against the out-of-process contract
    /// before using it: one line per check, and a failure exit status when any check fails.
    Conformance(Box<ProviderConformanceArgs>),
}

#[derive(clap::Args)]
struct ProviderConformanceArgs {
    /// The server, host:port; the host is also the name its certificate must carry.
    #[arg(long)]
    address: String,
    /// Directory of ca.crt, client.crt and client.key (the keys of the operator's TLS Secret).
    #[arg(long, required_unless_present = "plaintext")]
    tls_dir: Option<PathBuf>,
    /// Plaintext, for a server run with --enable-tls=false.
    #[arg(long, conflicts_with = "tls_dir")]
    plaintext: bool,
    /// The provider object the calls name: apiVersion/kind/namespace/name, e.g.
    /// providers.external-secrets.io/v1alpha1/Fake/team-a/fake.
    #[arg(long)]
    provider_ref: String,
    /// The namespace the calls are made for (an ExternalSecret's); the reference's by default.
    #[arg(long)]
    source_namespace: Option<String>,
    #[arg(long, default_value = "SecretStore", value_parser = ["SecretStore", "ClusterSecretStore"])]
    store_ref_kind: String,
    /// A key the provider object can read; give its exact value with --read-value. Repeatable.
    #[arg(long = "read-key", value_name = "KEY")]
    read_keys: Vec<String>,
    /// The value of the --read-key at the same position.
    #[arg(long = "read-value", value_name = "VALUE")]
    read_values: Vec<String>,
    /// Every call's deadline (Go duration).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    deadline: Duration,
    /// How the remote keys the run writes (and deletes) begin; GitLab needs conformance_.
    #[arg(long, default_value = "conformance-")]
    remote_key_prefix: String,
}

#[derive(clap::Args)]
struct ProviderServeArgs {
    /// A provider kind to serve, e.g. Vault; repeat for several. It must be compiled into this
    /// build. Fake and Kubernetes also serve ESO's provider.external-secrets.io/v2alpha1 kinds.
    #[arg(long = "kind", required = true, value_name = "KIND")]
    kinds: Vec<String>,
    /// The gRPC port.
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// The port of /metrics (and /healthz, /readyz for the kubelet).
    #[arg(long, default_value_t = 8081)]
    metrics_port: u16,
    /// The address both ports listen on.
    #[arg(long, default_value = "0.0.0.0")]
    bind_address: std::net::IpAddr,
    /// Directory of ca.crt (client certificates must chain to it), tls.crt and tls.key, read
    /// again when they change; $TLS_CA_CERT_FILE, $TLS_CERT_FILE, $TLS_KEY_FILE rename them.
    #[arg(long, env = "TLS_CERT_DIR", default_value = provider_server::tls::DEFAULT_CERT_DIR)]
    tls_dir: PathBuf,
    /// mTLS; `--enable-tls=false` serves plaintext to anyone, for local experiments only.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", require_equals = true, action = clap::ArgAction::Set)]
    enable_tls: bool,
    /// How long calls in flight may take to finish once SIGTERM or SIGINT arrives (Go
    /// duration).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    shutdown_grace_period: Duration,
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Kubeconfig to use instead of $KUBECONFIG, ~/.kube/config or the in-cluster account.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

#[derive(Subcommand)]
enum MigrateCommand {
    /// Move stores from inline spec.provider to spec.providerRef (or back), keeping the
    /// provider object the operator converted, so no Secret is rewritten.
    Stores(MigrateArgs),
    /// Rewrite every provider object at its CRD's storage version, then trim the CRD's
    /// status.storedVersions to that version: run after a CRD changed its storage version,
    /// before a later CRD stops serving the old one.
    Storage(StorageArgs),
}

#[derive(clap::Args)]
struct StorageArgs {
    /// Only this provider kind (its namespaced and cluster-scoped CRDs), e.g. Vault; every
    /// provider kind otherwise.
    #[arg(long, conflicts_with = "crd")]
    kind: Option<String>,
    /// One CRD by name instead, e.g. vaults.providers.external-secrets.io.
    #[arg(long)]
    crd: Option<String>,
    /// List the objects that would be rewritten and the storedVersions change; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Kubeconfig to use instead of $KUBECONFIG or ~/.kube/config.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

#[derive(clap::Args)]
struct MigrateArgs {
    /// Direction.
    #[arg(long, value_enum, default_value_t = To::ProviderRef)]
    to: To,
    /// SecretStores of this namespace.
    #[arg(long, short = 'n', conflicts_with = "all_namespaces")]
    namespace: Option<String>,
    /// SecretStores of every namespace, and every ClusterSecretStore.
    #[arg(long, short = 'A')]
    all_namespaces: bool,
    /// Only stores with these labels, e.g. team=a.
    #[arg(long, short = 'l')]
    selector: Option<String>,
    /// Print what would change; change nothing.
    #[arg(long, conflicts_with = "output")]
    dry_run: bool,
    /// Print the new manifests instead of changing the cluster (for GitOps repositories).
    #[arg(long, short = 'o', value_enum)]
    output: Option<Output>,
    /// Kubeconfig to use instead of $KUBECONFIG or ~/.kube/config.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum To {
    #[value(name = "providerref")]
    ProviderRef,
    Inline,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Yaml,
}

/// Where and as what the conversion webhook of multi-version provider kinds is served.
#[derive(clap::Args)]
struct WebhookArgs {
    /// Address of `POST /convert` (the webhook Service's target port).
    #[arg(long, default_value = "0.0.0.0:10250")]
    webhook_addr: SocketAddr,
    /// Namespace of the webhook's Service and certificate Secret; defaults to $POD_NAMESPACE,
    /// then `external-secrets`.
    #[arg(long)]
    webhook_namespace: Option<String>,
    /// The URL the API server calls instead of the Service, for a control plane on this
    /// machine (https://127.0.0.1:<port>/convert); the certificate then names 127.0.0.1 too.
    #[arg(long)]
    webhook_url: Option<String>,
    /// Name of the webhook's Service, which its certificate names (the Helm chart's is
    /// `<release>-webhook`).
    #[arg(long, default_value = conversion_webhook::SERVICE_NAME)]
    webhook_service_name: String,
    /// Name of the Secret that holds the webhook's certificates, shared by every replica.
    #[arg(long, default_value = conversion_webhook::SECRET_NAME)]
    webhook_secret_name: String,
    /// The Secret is written and rotated by another issuer (cert-manager: `tls.crt`,
    /// `tls.key`), which also fills the CRDs' CA bundle: serve it and write nothing.
    #[arg(long)]
    webhook_certificate_from_secret: bool,
}

impl WebhookArgs {
    fn settings(&self) -> conversion_webhook::Settings {
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

/// The webhook until `shutdown`; a failure is logged, not fatal: the single-version kinds and
/// every core kind work without it.
async fn webhook(
    client: kube::Client,
    args: &WebhookArgs,
    metrics: conversion_webhook::Metrics,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    let converters = std::sync::Arc::new(conversion_webhook::Counted::new(
        conversion_webhook::ProviderConverters,
        metrics,
    ));
    if let Err(e) = conversion_webhook::run(client, args.settings(), converters, shutdown).await {
        tracing::error!(error = %e, "the conversion webhook stopped");
    }
}

#[derive(clap::Args)]
struct ControllerArgs {
    #[command(flatten)]
    webhook: WebhookArgs,
    /// Serve no conversion webhook here (another process serves it, e.g. `external-secrets
    /// webhook`).
    #[arg(long)]
    disable_webhook: bool,
    /// Reconciles run in parallel per controller.
    #[arg(long, default_value_t = 4, env = "ES_CONCURRENT")]
    concurrent: u16,
    /// Handle only stores whose spec.controller is empty or equal to this.
    #[arg(long, default_value = "default")]
    controller_class: String,
    /// Watch only this namespace; cluster-scoped kinds are then ignored.
    #[arg(long)]
    namespace: Option<String>,
    /// Revalidation period of stores without spec.refreshInterval (Go duration).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    store_requeue_interval: Duration,
    /// Address of /metrics.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Address of /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8082")]
    live_addr: SocketAddr,
    /// Average requests per second to the API server (0 turns limiting off).
    #[arg(long, default_value_t = 50.0)]
    client_qps: f32,
    /// Requests to the API server allowed at once above the average.
    #[arg(long, default_value_t = 100)]
    client_burst: u32,
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Kubeconfig to use instead of $KUBECONFIG, ~/.kube/config or the in-cluster account.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Let ExternalSecrets write ConfigMaps and custom resources (`spec.target.manifest`), which
    /// are not encrypted at rest; the operator then needs RBAC for those kinds.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    unsafe_allow_generic_targets: bool,
    /// `KIND=CLASS`: serve every store of the provider kind KIND through the
    /// ClusterProviderClass CLASS (its gRPC server), unless the store names a class itself in
    /// spec.runtimeRef. Repeat for several kinds.
    #[arg(long = "out-of-process", value_parser = parse_route)]
    out_of_process: Vec<(String, String)>,
    /// `NAMESPACE/SECRET=SERVICE[,HOST...]`: keep the Secret filled with a provider server's
    /// mutual TLS in ESO's layout (`ca.crt`, `tls.crt` and `tls.key` for the server, valid for
    /// the Service's DNS names and any HOST; `client.crt` and `client.key` for this operator,
    /// CN external-secrets-controller), issued and rotated as the webhook's certificate is.
    /// Repeat for several servers.
    #[arg(long = "provider-tls-secret", value_parser = conversion_webhook::provider_tls::Settings::parse)]
    provider_tls_secrets: Vec<conversion_webhook::provider_tls::Settings>,
    /// `NAME=ADDRESS[,NAMESPACE/SECRET]`: create and keep the ClusterProviderClass NAME with
    /// spec.address ADDRESS and spec.tlsSecretRef SECRET, for an install (the chart's) that
    /// creates the class's CRD in the same step and so cannot create the class. Repeat for
    /// several classes.
    #[arg(long = "provider-class", value_parser = controllers::provider_class::DeclaredClass::parse)]
    provider_classes: Vec<controllers::provider_class::DeclaredClass>,
    /// Run the controllers only while holding a Lease, so that one of several replicas works.
    #[arg(long)]
    enable_leader_election: bool,
    /// Name of the Lease.
    #[arg(long, default_value = "external-secrets-controller")]
    leader_election_id: String,
    /// Namespace of the Lease; defaults to $POD_NAMESPACE, then `default`.
    #[arg(long)]
    leader_election_namespace: Option<String>,
    /// How long a leader that stopped renewing keeps the Lease (Go duration).
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    lease_duration: Duration,
    /// How long before the Lease expires the leader renews it (Go duration).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    renew_deadline: Duration,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// How often a `--provider-class` is applied again.
const DECLARED_CLASS_INTERVAL: Duration = Duration::from_secs(600);

fn parse_route(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((kind, class)) if !kind.is_empty() && !class.is_empty() => {
            Ok((kind.to_owned(), class.to_owned()))
        }
        _ => Err(format!(
            "{s:?}: expected KIND=CLUSTERPROVIDERCLASS, e.g. Vault=vault"
        )),
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    controllers::duration::parse(s)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds { out, chart } => write_crds(&out, &chart),
        Command::Controller(args) => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(controller(*args))
        }
        Command::Webhook {
            webhook: args,
            kubeconfig,
        } => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(async {
                init_logging(LogFormat::Text);
                let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
                let client = kube::Client::try_from(kube_config(kubeconfig.as_deref()).await?)?;
                // Alone, it serves no metrics: its conversions are counted for nobody.
                webhook(client, &args, Default::default(), stop_signal()).await;
                anyhow::Ok(())
            })
        }
        Command::Migrate {
            what: MigrateCommand::Stores(args),
        } => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(migrate_stores(args))
        }
        Command::Migrate {
            what: MigrateCommand::Storage(args),
        } => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(migrate_storage(args))
        }
        Command::Provider {
            what: ProviderCommand::Serve(args),
        } => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(provider_serve(*args))
        }
        Command::Provider {
            what: ProviderCommand::Conformance(args),
        } => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(provider_conformance(*args))
        }
    }
}

async fn kube_config(path: Option<&Path>) -> anyhow::Result<kube::Config> {
    match path {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Ok(kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?)
        }
        None => kube::Config::infer().await.context("loading kubeconfig"),
    }
}

async fn migrate_stores(args: MigrateArgs) -> anyhow::Result<()> {
    let namespaces = match (args.namespace, args.all_namespaces) {
        (Some(ns), _) => migrate::Namespaces::One(ns),
        (None, true) => migrate::Namespaces::All,
        (None, false) => anyhow::bail!("give --namespace NAME or --all-namespaces"),
    };
    let options = migrate::Options {
        direction: match args.to {
            To::ProviderRef => migrate::Direction::ProviderRef,
            To::Inline => migrate::Direction::Inline,
        },
        namespaces,
        selector: args.selector,
        mode: match (args.dry_run, args.output) {
            (true, _) => migrate::Mode::DryRun,
            (false, Some(Output::Yaml)) => migrate::Mode::Yaml,
            (false, None) => migrate::Mode::Apply,
        },
    };
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let client = kube::Client::try_from(kube_config(args.kubeconfig.as_deref()).await?)?;
    let mut out = String::new();
    let result = migrate::migrate(&client, &providers::registry(), &options, &mut out).await;
    print!("{out}");
    let summary = result?;
    if summary.refused > 0 {
        anyhow::bail!("{} store(s) refused; see above", summary.refused);
    }
    Ok(())
}

async fn migrate_storage(args: StorageArgs) -> anyhow::Result<()> {
    let crds = match args.crd {
        Some(crd) => vec![crd],
        None => migrate::storage::provider_crds(args.kind.as_deref())?,
    };
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let client = kube::Client::try_from(kube_config(args.kubeconfig.as_deref()).await?)?;
    // One CRD at a time, each finished (objects rewritten, then trimmed) before the next; a
    // failure stops the run, and running it again resumes.
    for crd in crds {
        let mut out = String::new();
        let result = migrate::storage::migrate_storage(&client, &crd, args.dry_run, &mut out).await;
        print!("{out}");
        result?;
    }
    Ok(())
}

/// `provider serve`: the kinds are checked against the build before anything else (again once
/// the cluster's URL is known, which the Kubernetes provider's stores without `server.url` use).
async fn provider_serve(args: ProviderServeArgs) -> anyhow::Result<()> {
    provider_server::served_registry(&providers::registry(), &args.kinds)
        .map_err(anyhow::Error::msg)?;
    init_logging(args.log_format);
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let config = kube_config(args.kubeconfig.as_deref()).await?;
    let registry = providers::registry_for_cluster(Some(config.cluster_url.to_string()));
    let served =
        provider_server::served_registry(&registry, &args.kinds).map_err(anyhow::Error::msg)?;
    let client = kube::Client::try_from(config)?;
    let mut metrics = Default::default();
    let resolver = provider_server::KubeResolver::start(client, served, &mut metrics).await;
    let tls = args
        .enable_tls
        .then(|| provider_server::TlsFiles::from_env(Some(&args.tls_dir)));
    let mut options = provider_server::ServeOptions::new(
        SocketAddr::new(args.bind_address, args.port),
        Some(SocketAddr::new(args.bind_address, args.metrics_port)),
        tls,
    );
    options.grace_period = args.shutdown_grace_period;
    provider_server::serve(
        options,
        std::sync::Arc::new(resolver),
        metrics,
        stop_signal(),
    )
    .await?;
    Ok(())
}

/// `provider conformance`: prints the report; fails when a check failed.
async fn provider_conformance(args: ProviderConformanceArgs) -> anyhow::Result<()> {
    use provider_conformance::{Options, Read};
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let reference =
        provider_conformance::parse_provider_ref(&args.provider_ref, &args.store_ref_kind)
            .map_err(anyhow::Error::msg)?;
    if args.read_keys.len() != args.read_values.len() {
        anyhow::bail!(
            "give each --read-key its --read-value ({} keys, {} values)",
            args.read_keys.len(),
            args.read_values.len()
        );
    }
    let tls = match (&args.tls_dir, args.plaintext) {
        (Some(dir), false) => {
            Some(provider_conformance::tls_from_dir(dir).map_err(anyhow::Error::msg)?)
        }
        _ => None,
    };
    let mut options = Options::new(args.address, tls, reference);
    if let Some(namespace) = args.source_namespace {
        options.source_namespace = namespace;
    }
    if options.source_namespace.is_empty() {
        anyhow::bail!("the provider reference names no namespace: give --source-namespace");
    }
    options.reads = args
        .read_keys
        .into_iter()
        .zip(args.read_values)
        .map(|(key, value)| Read {
            key,
            value: value.into_bytes(),
        })
        .collect();
    options.deadline = args.deadline;
    options.remote_key_prefix = args.remote_key_prefix;
    let report = provider_conformance::run(options).await;
    println!("{report}");
    if !report.passed() {
        anyhow::bail!(
            "{} of {} checks failed",
            report.failed().len(),
            report.checks.len()
        );
    }
    Ok(())
}

fn write_crds(out: &Path, chart: &Path) -> anyhow::Result<()> {
    let files = api::crds::files()?
        .into_iter()
        .map(|(name, yaml)| (out.join(name), yaml))
        .chain(
            api::chart::files()?
                .into_iter()
                .map(|(name, yaml)| (chart.join(name), yaml)),
        );
    for (path, yaml) in files {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn init_logging(format: LogFormat) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let subscriber = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Json => subscriber.json().init(),
        LogFormat::Text => subscriber.init(),
    }
}

/// Ctrl-C or SIGTERM.
async fn stop_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

async fn controller(args: ControllerArgs) -> anyhow::Result<()> {
    init_logging(args.log_format);
    // Several crates build rustls clients; one provider for the whole process avoids rustls'
    // "no process-level CryptoProvider" panic.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let config = kube_config(args.kubeconfig.as_deref()).await?;
    // The Kubernetes provider's stores without `server.url` reach this cluster.
    let registry = providers::registry_for_cluster(Some(config.cluster_url.to_string()));
    let controllers::ratelimit::Clients {
        work: client,
        control,
        requests,
    } = controllers::ratelimit::Clients::new(config, args.client_qps, args.client_burst)
        .context("building the Kubernetes client")?;
    let election = if args.enable_leader_election {
        Some(leader_election(&control, &args).await?)
    } else {
        None
    };
    let lease = args.leader_election_id.clone();
    let settings = controllers::Settings {
        controller_class: args.controller_class,
        namespace: args.namespace,
        concurrency: args.concurrent,
        store_requeue_interval: args.store_requeue_interval,
        allow_generic_targets: args.unsafe_allow_generic_targets,
        out_of_process: args.out_of_process.into_iter().collect(),
    };
    let addresses = controllers::Addresses {
        metrics: Some(args.metrics_addr),
        probes: Some(args.live_addr),
    };
    // Every replica serves conversions, leader or not: the API server calls any of them, and
    // a kind that needs conversion is unreadable at its other versions while none answers.
    let (webhook_stop, webhook_stopped) = tokio::sync::oneshot::channel::<()>();
    let conversions = conversion_webhook::Metrics::default();
    let webhook_task = (!args.disable_webhook).then(|| {
        let client = control.clone();
        let webhook_args = args.webhook;
        let conversions = conversions.clone();
        tokio::spawn(async move {
            webhook(client, &webhook_args, conversions, async {
                let _ = webhook_stopped.await;
            })
            .await;
        })
    });
    // Every replica keeps them, as every replica keeps the webhook's certificate: a TLS write
    // names the resourceVersion read, so only one replica's rotation lands, and applying the
    // same class twice changes nothing.
    let keepers: Vec<_> = args
        .provider_tls_secrets
        .into_iter()
        .map(|settings| {
            let client = client.clone();
            tokio::spawn(conversion_webhook::provider_tls::keep(
                client,
                settings,
                std::future::pending(),
            ))
        })
        .chain(args.provider_classes.into_iter().map(|declared| {
            tokio::spawn(controllers::provider_class::keep_declared(
                client.clone(),
                declared,
                DECLARED_CLASS_INTERVAL,
            ))
        }))
        .collect();
    let mut operator = controllers::Operator::new(client, settings, registry);
    operator.register_metrics(|registry| requests.register(registry));
    if !args.disable_webhook {
        operator.register_metrics(|registry| conversions.register(registry));
    }
    let stop = stop_signal();
    let Some((mut leading, lease_task)) = election else {
        operator.run(addresses, std::future::ready(()), stop).await;
        stop_webhook(webhook_stop, webhook_task).await;
        keepers.iter().for_each(tokio::task::JoinHandle::abort);
        return Ok(());
    };
    let mut watching = leading.clone();
    let lost = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let lost_flag = lost.clone();
    let leadership = async move {
        let _ = leading.wait_for(|leader| *leader).await;
    };
    // Losing the Lease stops everything: another replica now reconciles, and a restart starts
    // this one over as a candidate.
    let shutdown = async move {
        tokio::select! {
            _ = stop => {}
            _ = async {
                let _ = watching.wait_for(|leader| *leader).await;
                let _ = watching.wait_for(|leader| !*leader).await;
            } => lost_flag.store(true, std::sync::atomic::Ordering::Relaxed),
        }
    };
    operator.run(addresses, leadership, shutdown).await;
    stop_webhook(webhook_stop, webhook_task).await;
    keepers.iter().for_each(tokio::task::JoinHandle::abort);
    // The watch channels went with the futures, which ends the lease task: hand the Lease over
    // now rather than make the standby wait out its duration.
    if let Ok(Ok(manager)) = lease_task.await
        && let Err(e) = manager.release().await
    {
        tracing::warn!(error = %e, "could not release the leader Lease");
    }
    if lost.load(std::sync::atomic::Ordering::Relaxed) {
        anyhow::bail!("lost the leader election Lease {lease}");
    }
    Ok(())
}

async fn stop_webhook(
    stop: tokio::sync::oneshot::Sender<()>,
    task: Option<tokio::task::JoinHandle<()>>,
) {
    let _ = stop.send(());
    if let Some(task) = task {
        let _ = task.await;
    }
}

/// The receiver says whether this process holds the Lease; the task gives the manager back
/// once every receiver is gone.
type Election = (
    tokio::sync::watch::Receiver<bool>,
    tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
);

/// Starts competing for the Lease.
async fn leader_election(client: &kube::Client, args: &ControllerArgs) -> anyhow::Result<Election> {
    let namespace = args
        .leader_election_namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .unwrap_or_else(|| "default".to_owned());
    let identity = std::env::var("POD_NAME").unwrap_or_else(|_| {
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
        format!("{}-{}", host.trim(), std::process::id())
    });
    let grace = args.lease_duration.saturating_sub(args.renew_deadline);
    let manager =
        kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &args.leader_election_id)
            .with_namespace(&namespace)
            .with_identity(&identity)
            .with_duration(args.lease_duration.as_secs().max(1))
            .with_grace(grace.as_secs().max(1))
            .with_field_manager("external-secrets-leader-election")
            .build()
            .await
            .context("setting up leader election")?;
    tracing::info!(lease = %args.leader_election_id, %namespace, %identity, "competing for the leader Lease");
    Ok(manager.watch().await)
}
