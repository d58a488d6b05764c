//! The `external-secrets` binary: the composition root. `cli` says what the command line means;
//! the workspace's crates do the work.

mod cli;
mod commands;
#[cfg(feature = "dhat-heap")]
mod profile;

use anyhow::Context as _;
use clap::Parser;
use cli::{Cli, Command, ControllerArgs};
use controllers::leadership::{self, Election};
use controllers::provider_class;
use conversion_webhook::lifecycle::Background;
use conversion_webhook::provider_tls;

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
            Command::Webhook(args) => commands::webhook(args, stop_signal()).await,
            Command::Migrate { what } => commands::migrate(what).await,
            Command::Provider { what } => commands::provider(what, stop_signal()).await,
        }
    })
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
    // One watch of CRDs for the webhook and the provider discovery; on the control client, as
    // the CA bundles it carries are.
    let mut crds = crd_watch::CrdWatch::new(control.clone());
    // Every replica serves conversions, leader or not: the API server calls any of them, and
    // a kind that needs conversion is unreadable at its other versions while none answers.
    let conversions = conversion_webhook::Metrics::default();
    let webhook = (!args.disable_webhook).then(|| {
        let settings = args.webhook.settings();
        Background::spawn(control.clone(), settings, conversions.clone(), &mut crds)
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
    let mut operator = controllers::Operator::new(client, args.settings(), registry, &mut crds);
    keepers.push(tokio::spawn(crds.run()));
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
