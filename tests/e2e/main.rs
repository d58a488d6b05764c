//! End-to-end tests against a real control plane (see `hack/README.md`).
//!
//! One control plane serves the whole run; each module contributes trials through
//! `fn trials(env: &Arc<Env>) -> Vec<Trial>` and isolates itself with its own namespaces.
//! Each trial runs on its own tokio runtime, hence makes its own client.

mod aws;
mod cluster;
mod control_plane;
mod crds;
mod dashboard;
mod eso_docs;
mod eso_swap;
mod examples;
mod first_sync;
mod generators;
mod generic;
mod gitlab;
mod images;
mod invalid_manifests;
mod kubectl;
mod kubernetes;
mod leader;
mod migrate;
mod operator;
mod out_of_process;
mod push;
mod restart;
mod robustness;
mod stores;
mod sync;
mod templates;
mod vault;
mod versions;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};

use anyhow::Result;
use libtest_mimic::{Arguments, Trial};
use testenv::{ControlPlane, VaultServer};

pub struct Env {
    // Set only when some trial will run, so `--list` works without the binaries.
    control_plane: OnceLock<ControlPlane>,
    /// The operator's metrics endpoint, once set-up started it.
    addresses: OnceLock<controllers::Addresses>,
    /// The second control plane the Kubernetes provider's trials read from and push to,
    /// started by the first of them, or why it did not start.
    remote: OnceLock<Result<ControlPlane, String>>,
    /// The shared Vault server, or why it did not start (its trials fail with that).
    vault: OnceLock<Result<VaultServer, String>>,
    /// The provider server of `out_of_process::MODE`, kept for the whole run.
    provider_server: OnceLock<testenv::ProviderServer>,
    /// The images the `images::` trials build, removed when the run ends.
    images: OnceLock<Result<images::Builds, String>>,
    /// The AWS stand-in this run's operator finds through `AWS_ENDPOINT_URL`, or why it did not
    /// start (the AWS trials fail with that); `None` when only listing.
    moto: Option<Result<testenv::Moto, String>>,
    /// The test webhook's conversions, on the shared operator's `/metrics` as in the binary.
    conversions: conversion_webhook::Metrics,
}

impl Env {
    pub fn control_plane(&self) -> &ControlPlane {
        self.control_plane
            .get()
            .expect("the control plane starts before any trial runs")
    }

    pub fn addresses(&self) -> controllers::Addresses {
        *self
            .addresses
            .get()
            .expect("set-up starts the operator before any trial runs")
    }

    pub fn metrics_addr(&self) -> SocketAddr {
        self.addresses()
            .metrics
            .expect("the test operator serves metrics")
    }

    /// The "remote" cluster: a second kube-apiserver and etcd, started on first use.
    pub fn remote(&self) -> Result<&ControlPlane> {
        self.remote
            .get_or_init(|| ControlPlane::start().map_err(|e| chain(&e)))
            .as_ref()
            .map_err(|e| anyhow::anyhow!("the remote control plane did not start: {e}"))
    }

    pub fn vault(&self) -> Result<&VaultServer> {
        match self.vault.get() {
            Some(Ok(vault)) => Ok(vault),
            Some(Err(e)) => Err(anyhow::anyhow!("the Vault server did not start: {e}")),
            None => Err(anyhow::anyhow!("the Vault server was not started")),
        }
    }

    pub fn moto(&self) -> Result<&testenv::Moto> {
        match &self.moto {
            Some(Ok(moto)) => Ok(moto),
            Some(Err(e)) => Err(anyhow::anyhow!("moto did not start: {e}")),
            None => Err(anyhow::anyhow!("moto was not started")),
        }
    }

    pub async fn client(&self) -> kube::Client {
        self.control_plane().client().await
    }

    /// `rel` inside the repository.
    pub fn path(rel: impl AsRef<Path>) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
    }
}

/// A trial whose body runs on a fresh tokio runtime; an `Err` fails it with the whole chain.
pub fn trial<F, Fut>(name: impl Into<String>, env: &Arc<Env>, body: F) -> Trial
where
    F: FnOnce(Arc<Env>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<()>>,
{
    let env = env.clone();
    Trial::test(name, move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(body(env)).map_err(|e| chain(&e).into())
    })
}

/// The error and its causes, one a line; `{:?}` would add a backtrace when RUST_BACKTRACE is set.
pub fn chain(e: &anyhow::Error) -> String {
    e.chain()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n  caused by: ")
}

/// Cluster state every module relies on, prepared once before the trials.
async fn setup(env: &Env, install_late_crd: bool) -> Result<()> {
    crds::setup(env, install_late_crd).await?;
    // Before anything writes a Vault or Gitlab object: kinds with several versions need it.
    operator::start_webhook(env).await?;
    examples::setup(env).await?;
    let routes = match out_of_process::setup_mode(env).await? {
        Some((server, routes)) => {
            let _ = env.provider_server.set(server);
            routes
        }
        None => Default::default(),
    };
    let _ = env.addresses.set(operator::start(env, routes)?);
    // Last: without Vault, only the Vault trials fail.
    if env.vault().is_ok() {
        vault::setup(env).await?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Arguments::from_args();
    // The operator of this run reads AWS's endpoint from its environment, as a deployment
    // would: a run that will test starts moto and runs again with the endpoint set.
    let moto = if args.list {
        None
    } else {
        match testenv::Moto::in_environment(aws::environment) {
            Ok(testenv::MotoRun::Parent(code)) => return code,
            Ok(testenv::MotoRun::Child(moto)) => Some(Ok(moto)),
            Err(e) => Some(Err(chain(&e))),
        }
    };
    let env = Arc::new(Env {
        moto,
        control_plane: OnceLock::new(),
        addresses: OnceLock::new(),
        remote: OnceLock::new(),
        vault: OnceLock::new(),
        provider_server: OnceLock::new(),
        images: OnceLock::new(),
        conversions: Default::default(),
    });
    let trials: Vec<Trial> = [
        // First: its opening trial must run before the others need the CRD it installs.
        stores::trials,
        aws::trials,
        sync::trials,
        cluster::trials,
        control_plane::trials,
        crds::trials,
        dashboard::trials,
        eso_docs::trials,
        eso_swap::trials,
        examples::trials,
        first_sync::trials,
        generators::trials,
        generic::trials,
        gitlab::trials,
        images::trials,
        invalid_manifests::trials,
        kubectl::trials,
        kubernetes::trials,
        leader::trials,
        migrate::trials,
        operator::trials,
        out_of_process::trials,
        push::trials,
        restart::trials,
        robustness::trials,
        templates::trials,
        vault::trials,
        versions::trials,
    ]
    .iter()
    .flat_map(|module| module(&env))
    // Out of process, the suites of the providers that moved run again; the rest ran already.
    .filter(|t| {
        std::env::var_os(out_of_process::MODE).is_none()
            || out_of_process::SUITES
                .iter()
                .any(|s| t.name().starts_with(s))
    })
    .collect();

    // Without the trial that installs it, set-up installs the late CRD like the others.
    let install_late_crd = trials
        .iter()
        .find(|t| t.name() == stores::LATE_TRIAL)
        .is_none_or(|t| args.is_filtered_out(t));
    if !args.list && trials.iter().any(|t| !args.is_filtered_out(t)) {
        match ControlPlane::start() {
            Ok(cp) => {
                let _ = env.control_plane.set(cp);
            }
            Err(e) => {
                eprintln!("error: {}", chain(&e));
                return ExitCode::FAILURE;
            }
        }
        let _ = env.vault.set(VaultServer::start().map_err(|e| chain(&e)));
        let setup_result = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(setup(&env, install_late_crd)));
        if let Err(e) = setup_result {
            // The trials still run: each reports which part of the set-up it misses.
            eprintln!("error: e2e set-up failed: {}", chain(&e));
        }
    }

    let conclusion = libtest_mimic::run(&args, trials);
    // `run` consumed the trials and their clones of `env`; dropping the last one stops the
    // control plane before the process exits (`process::exit` would skip destructors).
    match Arc::try_unwrap(env) {
        Ok(env) => drop(env),
        Err(_) => eprintln!(
            "warning: a trial kept the control plane alive; relying on setpriv --pdeathsig"
        ),
    }
    conclusion.exit_code()
}
