//! The Helm chart (`charts/external-secrets`): lint and golden renders of several value sets,
//! and an install and upgrades on a real control plane of its own, with the operator (and, with
//! Vault out of process, the provider server) run as processes under tokens of the chart's
//! ServiceAccounts and their RBAC checked against the API server's audit log.

mod audit;
mod install;
mod render;

use std::path::{Path, PathBuf};

use libtest_mimic::{Arguments, Trial};

/// `rel` inside the repository.
fn repo(rel: impl AsRef<Path>) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

const CHART: &str = "charts/external-secrets";

/// The error and its causes, one a line.
fn chain(e: &anyhow::Error) -> String {
    e.chain()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n  caused by: ")
}

fn main() -> std::process::ExitCode {
    let args = Arguments::from_args();
    let mut trials: Vec<Trial> = render::trials();
    trials.extend(audit::trials());
    trials.push(Trial::test(
        "install::fake_and_vault_then_gitlab_then_every_provider_out_of_process_under_their_service_accounts",
        || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(install::install_and_upgrade())
                .map_err(|e| chain(&e).into())
        },
    ));
    libtest_mimic::run(&args, trials).exit_code()
}
