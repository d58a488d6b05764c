//! Journeys on a one-node cluster with a kubelet (`testenv::Node`): the chart installed with
//! Helm from the project's own images, built from this test run's binary, so that the operator
//! runs as its users run it: a Pod under its own ServiceAccount with in-cluster config, its
//! probes, its metrics on the Pod's address. hack/README.md, "The node".
//!
//! One node serves the whole run; it starts only when a trial runs (`-- --list` needs nothing).
//! The trials share the one release, each making it as it needs it (`helm upgrade --install`),
//! so they run one at a time, and any one of them runs alone.

mod journeys;
mod network_policy;
mod rollouts;

use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};

use anyhow::{Result, anyhow};
use libtest_mimic::{Arguments, Trial};
use testenv::{Node, VaultServer};

pub struct Env {
    /// The node with the images imported, or why it did not start.
    node: OnceLock<Result<Node, String>>,
    /// The suite's Vault on the host, listening also on the node's address, or why it did not
    /// start.
    vault: OnceLock<Result<VaultServer, String>>,
    /// The images' files, removed when the run ends (after the node).
    images: OnceLock<Result<tempfile::TempDir, String>>,
}

impl Env {
    pub fn node(&self) -> Result<&Node> {
        self.node
            .get_or_init(|| {
                let images = self.images()?;
                Node::start(&images).map_err(|e| chain(&e))
            })
            .as_ref()
            .map_err(|e| anyhow!("the node did not start: {e}"))
    }

    /// The suite's Vault server, a process on the host like the control plane. Pods reach it
    /// through the node's address: the gateway of their bridge, an address of the host's own,
    /// where Vault has a plain HTTP listener besides its usual ones on 127.0.0.1 (a Pod's
    /// 127.0.0.1 is its own, and the kubelet's KUBE-FIREWALL drops traffic from elsewhere to
    /// the host's loopback anyway).
    pub fn vault(&self) -> Result<&VaultServer> {
        let node = self.node()?;
        self.vault
            .get_or_init(|| VaultServer::start_also_on(node.ip().into()).map_err(|e| chain(&e)))
            .as_ref()
            .map_err(|e| anyhow!("Vault did not start: {e}"))
    }

    /// The operator's image and the Fake provider server's, of this run's binary (the published
    /// images carry the release build of the same source), as `hack/build-images.sh --binary`
    /// writes them.
    fn images(&self) -> Result<Vec<PathBuf>, String> {
        let dir = self
            .images
            .get_or_init(|| {
                let build = || -> Result<tempfile::TempDir> {
                    let dir = tempfile::Builder::new()
                        .prefix("external-secrets-node-images-")
                        .tempdir()?;
                    let inputs = image::Inputs {
                        binary: env!("CARGO_BIN_EXE_external-secrets").into(),
                        ca_certificates: "/etc/ssl/certs/ca-certificates.crt".into(),
                        registry: "ghcr.io/external-secrets-rs".into(),
                        source: image::Source::from_repository(&repo(""))?,
                        provider_servers: vec!["Fake".into()],
                    };
                    image::build(&inputs, dir.path())?;
                    Ok(dir)
                };
                build().map_err(|e| chain(&e))
            })
            .as_ref()
            .map_err(|e| format!("building the images: {e}"))?;
        let archives = std::fs::read_dir(dir.path())
            .map_err(|e| e.to_string())?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "tar"))
            .collect();
        Ok(archives)
    }
}

/// `rel` inside the repository.
pub fn repo(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The error and its causes, one a line.
fn chain(e: &anyhow::Error) -> String {
    e.chain()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n  caused by: ")
}

/// A trial whose body runs on a fresh tokio runtime; an `Err` fails it with the whole chain.
fn trial<F, Fut>(name: &str, env: &Arc<Env>, body: F) -> Trial
where
    F: FnOnce(Arc<Env>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<()>>,
{
    let env = env.clone();
    Trial::test(name, move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        rt.block_on(body(env)).map_err(|e| chain(&e).into())
    })
}

fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    // One release on one node: the trials take turns.
    args.test_threads = Some(1);
    let env = Arc::new(Env {
        node: OnceLock::new(),
        vault: OnceLock::new(),
        images: OnceLock::new(),
    });
    let trials = journeys::trials(&env);
    let conclusion = libtest_mimic::run(&args, trials);
    // The node goes before the process ends (it undoes its changes to the host then).
    drop(env);
    conclusion.exit_code()
}
