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
    /// Write every CRD as one YAML file per CRD.
    Crds {
        /// Folder to write into.
        #[arg(long, default_value = "crds")]
        out: PathBuf,
    },
    /// Run the operator.
    Controller(ControllerArgs),
}

#[derive(clap::Args)]
struct ControllerArgs {
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
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    controllers::duration::parse(s)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds { out } => write_crds(&out),
        Command::Controller(args) => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(controller(args))
        }
    }
}

fn write_crds(out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    for (name, yaml) in api::crds::files()? {
        let path = out.join(name);
        std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

async fn controller(args: ControllerArgs) -> anyhow::Result<()> {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let subscriber = tracing_subscriber::fmt().with_env_filter(filter);
    match args.log_format {
        LogFormat::Json => subscriber.json().init(),
        LogFormat::Text => subscriber.init(),
    }
    // The gitlab crate forces aws-lc-rs; one provider for the whole process avoids rustls'
    // "no process-level CryptoProvider" panic.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
        }
        None => kube::Config::infer().await.context("loading kubeconfig")?,
    };
    let client = controllers::ratelimit::client(config, args.client_qps, args.client_burst)
        .context("building the Kubernetes client")?;
    let settings = controllers::Settings {
        controller_class: args.controller_class,
        namespace: args.namespace,
        concurrency: args.concurrent,
        store_requeue_interval: args.store_requeue_interval,
    };
    let operator = controllers::Operator::new(client, settings, providers::registry());
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let addresses = controllers::Addresses {
        metrics: Some(args.metrics_addr),
        probes: Some(args.live_addr),
    };
    operator.run(addresses, shutdown).await;
    Ok(())
}
