//! `hack/dev.sh`: a local control plane with the CRDs, the examples and the operator, kept
//! running until Ctrl-C so a person can use kubectl against it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use external_secrets_testenv as testenv;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, ResourceExt};

const QUICKSTART: &str = "examples/fake-quickstart.yaml";

fn main() -> Result<()> {
    let operator = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .context("usage: local-cluster <path of the external-secrets binary>")?;
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let cp = testenv::ControlPlane::start()?;
    let vault = testenv::VaultServer::start()?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(run(&cp, &vault, &operator))?;
    eprintln!("\nstopping: the control plane and the operator are stopped when this process ends");
    Ok(())
}

async fn run(
    cp: &testenv::ControlPlane,
    vault: &testenv::VaultServer,
    operator: &Path,
) -> Result<()> {
    let client = cp.client().await;
    let crds = testenv::install_crds(&client, "crds").await?;
    println!("installed {} CRDs", crds.len());

    let metrics = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let probes = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let webhook = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    cp.spawn(
        "operator",
        operator,
        vec![
            "controller".into(),
            "--kubeconfig".into(),
            cp.kubeconfig_path().display().to_string(),
            "--metrics-addr".into(),
            metrics.to_string(),
            "--live-addr".into(),
            probes.to_string(),
            // The API server calls the conversion webhook of multi-version provider kinds here,
            // not at an in-cluster Service.
            "--webhook-addr".into(),
            webhook.to_string(),
            "--webhook-url".into(),
            format!("https://{webhook}/convert"),
            "--webhook-namespace".into(),
            "default".into(),
        ],
    )?;
    println!(
        "operator started (log {}, metrics http://{metrics}/metrics, probes http://{probes}/healthz)",
        cp.dir().join("operator.log").display()
    );

    wait_for_conversion_webhook(&client, &format!("https://{webhook}/convert")).await?;

    let ns = k8s_openapi::api::core::v1::Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some("examples".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&Default::default(), &ns)
        .await?;
    let mut files: Vec<_> = std::fs::read_dir("examples")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for file in &files {
        let yaml = std::fs::read_to_string(file)?;
        testenv::apply_yaml_in(&client, "examples", &yaml, true)
            .await
            .with_context(|| format!("applying {}", file.display()))?;
    }
    println!(
        "applied {} example manifests into namespace examples",
        files.len()
    );

    testenv::vault_quickstart(vault, &client, Path::new("."), "examples").await?;
    println!(
        "Vault {} at {} (root token {}), {} applied",
        testenv::VAULT_VERSION,
        vault.address(),
        vault.root_token(),
        testenv::VAULT_QUICKSTART
    );

    let synced = async {
        let fake = testenv::wait_for_quickstart(&client, "demo-credentials").await?;
        let vault = testenv::wait_for_quickstart(&client, "vault-credentials").await?;
        anyhow::Ok((fake, vault))
    };
    let (fake, from_vault) = match synced.await {
        Ok(secrets) => secrets,
        Err(e) => {
            let log = cp.dir().join("operator.log");
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(40)..].join("\n");
            bail!("{e:#}\nthe last lines of {}:\n{tail}", log.display());
        }
    };
    // Registered before the line that tells a waiting caller (the quickstart test) that we are
    // ready: a SIGTERM sent on that line must stop the children, not kill us before the handler.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    testenv::print_secret(
        &fake,
        &format!("ExternalSecret examples/demo ({QUICKSTART})"),
    );
    testenv::print_secret(
        &from_vault,
        &format!(
            "ExternalSecret examples/vault-demo ({})",
            testenv::VAULT_QUICKSTART
        ),
    );
    println!("\nexport KUBECONFIG={}", cp.kubeconfig_path().display());
    // kubectl is built with the control plane, at the same version.
    println!(
        "export PATH={}:$PATH",
        testenv::testbin_dir(testenv::KUBERNETES_VERSION).display()
    );
    println!(
        "kubectl get externalsecrets,secretstores,clustersecretstores -A; kubectl get external-secrets-providers -A"
    );
    println!("Ctrl-C stops everything.");
    // Ctrl-C, or a plain kill: either way the control plane is dropped and cleaned up.
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}

/// The examples include `v1beta1` provider objects, which the API server stores only through the
/// operator's conversion webhook: it can take them once the operator has put its URL and CA into
/// the multi-version CRDs.
async fn wait_for_conversion_webhook(client: &kube::Client, url: &str) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    testenv::wait_for(
        Duration::from_secs(60),
        "the operator's conversion webhook in the CRDs",
        || async {
            for crd in crds.list(&Default::default()).await? {
                let Some(webhook) = crd
                    .spec
                    .conversion
                    .as_ref()
                    .and_then(|c| c.webhook.as_ref())
                else {
                    continue;
                };
                let config = webhook.client_config.as_ref();
                ensure!(
                    config.is_some_and(|c| c.url.as_deref() == Some(url) && c.ca_bundle.is_some()),
                    "CRD {} does not call {url} yet",
                    crd.name_any()
                );
            }
            anyhow::Ok(())
        },
    )
    .await
}
