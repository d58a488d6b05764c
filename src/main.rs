//! The `external-secrets` binary: the composition root. `cli` says what the command line means;
//! the workspace's crates do the work.

mod cli;

use anyhow::Context as _;
use clap::Parser;
use cli::{Cli, Command, ControllerArgs, LogFormat, MigrateCommand, ProviderCommand};
use controllers::leadership::{self, Election};
use controllers::provider_class;
use conversion_webhook::lifecycle::{Background, serve_logged};
use conversion_webhook::provider_tls;
use migrate::storage;

fn main() -> anyhow::Result<()> {
    #[cfg(feature = "dhat-heap")]
    profile::start();
    // Several crates build rustls clients; one provider for the whole process avoids rustls'
    // "no process-level CryptoProvider" panic.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    tokio::runtime::Runtime::new()?.block_on(async {
        match Cli::parse().command {
            Command::Crds { out, chart } => Ok(api::chart::write(&out, &chart)?),
            Command::Controller(args) => controller(*args).await,
            Command::Webhook(args) => {
                LogFormat::Text.init();
                let client = cli::client(args.kubeconfig.as_deref()).await?;
                // Alone, it serves no metrics: its conversions are counted for nobody.
                let (settings, metrics) = (args.webhook.settings(), Default::default());
                serve_logged(client, settings, metrics, stop_signal()).await;
                Ok(())
            }
            Command::Migrate { what } => match what {
                MigrateCommand::Stores(args) => {
                    let client = cli::client(args.kubeconfig.as_deref()).await?;
                    let (options, mut out) = (args.options()?, String::new());
                    let registry = providers::registry();
                    let result = migrate::migrate(&client, &registry, &options, &mut out).await;
                    let refused = printed(result, out)?.refused;
                    anyhow::ensure!(refused == 0, "{refused} store(s) refused; see above");
                    Ok(())
                }
                MigrateCommand::Storage(args) => {
                    let client = cli::client(args.kubeconfig.as_deref()).await?;
                    // One CRD at a time, each finished (objects rewritten, then trimmed) before
                    // the next; a failure stops the run, and running it again resumes.
                    for crd in args.crds()? {
                        let mut out = String::new();
                        let result =
                            storage::migrate_storage(&client, &crd, args.dry_run, &mut out);
                        printed(result.await, out)?;
                    }
                    Ok(())
                }
            },
            Command::Provider { what } => match what {
                ProviderCommand::Serve(args) => provider_serve(*args).await,
                ProviderCommand::Conformance(args) => {
                    let report = provider_conformance::run(args.options()?).await;
                    println!("{report}");
                    let (failed, all) = (report.failed().len(), report.checks.len());
                    anyhow::ensure!(report.passed(), "{failed} of {all} checks failed");
                    Ok(())
                }
            },
        }
    })
}

/// What a migration wrote, printed whether or not it then failed.
fn printed<T, E>(result: Result<T, E>, out: String) -> Result<T, E> {
    print!("{out}");
    result
}

/// `provider serve`: the kinds are checked against the build before anything else, and again
/// for the cluster's URL (the Kubernetes provider's default `server.url`).
async fn provider_serve(args: cli::ProviderServeArgs) -> anyhow::Result<()> {
    args.served(&providers::registry())?;
    args.log_format.init();
    let config = cli::client_config(args.kubeconfig.as_deref()).await?;
    let served = args.served(&providers::registry_for_cluster(Some(
        config.cluster_url.to_string(),
    )))?;
    let mut metrics = Default::default();
    let resolver = provider_server::KubeResolver::start(config.try_into()?, served, &mut metrics);
    let resolver = std::sync::Arc::new(resolver.await);
    provider_server::serve(args.options(), resolver, metrics, stop_signal()).await?;
    Ok(())
}

/// Ctrl-C or SIGTERM.
async fn stop_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    #[cfg(feature = "dhat-heap")]
    profile::write();
}

/// The heap profile of feature `dhat-heap`: every allocation recorded from the start, written
/// to `dhat-heap-<pid>.json` when the stop signal comes, so that its "at the end" figures are
/// the heap of the running operator rather than of one torn down.
#[cfg(feature = "dhat-heap")]
mod profile {
    use std::sync::Mutex;

    #[global_allocator]
    static ALLOC: dhat::Alloc = dhat::Alloc;

    static PROFILER: Mutex<Option<dhat::Profiler>> = Mutex::new(None);

    pub fn start() {
        // Whole backtraces: an allocation's first frames are all serde's or the collections'.
        let profiler = dhat::Profiler::builder()
            .file_name(format!("dhat-heap-{}.json", std::process::id()))
            .trim_backtraces(None)
            .build();
        *PROFILER.lock().expect("profiler poisoned") = Some(profiler);
    }

    pub fn write() {
        drop(PROFILER.lock().expect("profiler poisoned").take());
    }
}

async fn controller(args: ControllerArgs) -> anyhow::Result<()> {
    args.log_format.init();
    let config = cli::client_config(args.kubeconfig.as_deref()).await?;
    // The Kubernetes provider's stores without `server.url` reach this cluster.
    let registry = providers::registry_for_cluster(Some(config.cluster_url.to_string()));
    let controllers::ratelimit::Clients {
        work: client,
        control,
        requests,
    } = controllers::ratelimit::Clients::new(config, args.client_qps, args.client_burst)
        .context("building the Kubernetes client")?;
    let election = match args.lease() {
        Some(lease) => Some(Election::start(&control, &lease).await?),
        None => None,
    };
    // Every replica serves conversions, leader or not: the API server calls any of them, and
    // a kind that needs conversion is unreadable at its other versions while none answers.
    let conversions = conversion_webhook::Metrics::default();
    let webhook = (!args.disable_webhook).then(|| {
        let settings = args.webhook.settings();
        Background::spawn(control.clone(), settings, conversions.clone())
    });
    // Every replica keeps them, as every replica keeps the webhook's certificate: a TLS write
    // names the resourceVersion read, so only one replica's rotation lands, and applying the
    // same class twice changes nothing. On the control client, as the webhook's certificate:
    // a rotation that waits behind the reconciles can let a certificate expire.
    let mut keepers = Vec::new();
    for settings in args.provider_tls_secrets.iter().cloned() {
        let keep = provider_tls::keep(control.clone(), settings, std::future::pending());
        keepers.push(tokio::spawn(keep));
    }
    for declared in args.provider_classes.iter().cloned() {
        let interval = cli::DECLARED_CLASS_INTERVAL;
        let keep = provider_class::keep_declared(client.clone(), declared, interval);
        keepers.push(tokio::spawn(keep));
    }
    let mut operator = controllers::Operator::new(client, args.settings(), registry);
    operator.register_metrics(|registry| requests.register(registry));
    if webhook.is_some() {
        operator.register_metrics(|registry| conversions.register(registry));
    }
    let addresses = args.addresses();
    let work = |leadership, shutdown| operator.run(addresses, leadership, shutdown);
    let ended = leadership::run(election, stop_signal(), work).await;
    if let Some(webhook) = webhook {
        webhook.stop().await;
    }
    keepers.iter().for_each(tokio::task::JoinHandle::abort);
    Ok(ended?)
}
