//! `hack/dev-node.sh`: the one-node cluster with the chart installed from the project's images
//! (the folder `hack/build-images.sh` wrote) and the Fake quickstart applied; prints the Secret
//! the operator's Pod synced, and runs until Ctrl-C. Needs root.

use std::path::PathBuf;

use anyhow::{Context, Result};
use external_secrets_testenv as testenv;
use kube::Api;
use kube::api::PostParams;

const QUICKSTART: &str = "examples/fake-quickstart.yaml";

fn main() -> Result<()> {
    let images = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .context("usage: node-cluster <folder of the image archives hack/build-images.sh wrote>")?;
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let archives: Vec<PathBuf> = std::fs::read_dir(&images)
        .with_context(|| format!("reading {}", images.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "tar"))
        .collect();
    let node = testenv::Node::start(&archives)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(run(&node))?;
    eprintln!("\nstopping: the node is stopped and the host put back when this process ends");
    Ok(())
}

async fn run(node: &testenv::Node) -> Result<()> {
    let client = node.client().await;
    let kubeconfig = node.kubeconfig_path();
    testenv::helm(
        Some(&kubeconfig),
        &[
            "install",
            "es",
            "charts/external-secrets",
            "--namespace",
            "external-secrets",
            "--create-namespace",
            "--set",
            "image.pullPolicy=Never",
            "--wait",
            "--timeout",
            "5m",
        ],
    )?;
    println!("chart installed: release es in namespace external-secrets, the operator Ready");

    let ns = k8s_openapi::api::core::v1::Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some("examples".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    testenv::apply_yaml_in(
        &client,
        "examples",
        &std::fs::read_to_string(QUICKSTART)?,
        true,
    )
    .await?;
    let secret = testenv::wait_for_quickstart(&client, "demo-credentials").await?;
    // Registered before the lines that tell a person we are ready: a SIGTERM must stop the
    // node, not kill us before the handler.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    testenv::print_secret(
        &secret,
        &format!("ExternalSecret examples/demo ({QUICKSTART})"),
    );
    println!("\nexport KUBECONFIG={}", kubeconfig.display());
    println!(
        "export PATH={}:$PATH",
        testenv::testbin_dir(testenv::KUBERNETES_VERSION).display()
    );
    println!(
        "kubectl -n external-secrets get pods -o wide; kubectl -n external-secrets logs deploy/es-external-secrets"
    );
    println!("Ctrl-C stops everything.");
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}
