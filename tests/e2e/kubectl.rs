//! What a person sees with kubectl: short names, categories and printer columns.

use std::process::Command;
use std::sync::Arc;

use anyhow::{Result, ensure};
use libtest_mimic::Trial;

use crate::sync::synced_namespace;
use crate::{Env, trial};

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![trial("kubectl::names_categories_and_columns", env, columns)]
}

pub fn kubectl(env: &Env, args: &[&str]) -> Result<String> {
    let bin = testenv::testbin_dir(testenv::KUBERNETES_VERSION).join("kubectl");
    let out = Command::new(&bin)
        .arg("--kubeconfig")
        .arg(env.control_plane().kubeconfig_path())
        .args(args)
        .output()
        .map_err(|e| {
            anyhow::anyhow!(
                "running {} (built by hack/build-control-plane.sh): {e}",
                bin.display()
            )
        })?;
    ensure!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

async fn columns(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let (ns, _) = synced_namespace(&client, "kubectl").await?;
    let es = kubectl(&env, &["get", "es", "-n", &ns])?;
    let header: Vec<_> = es
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    ensure!(
        header.starts_with(&["NAME", "STORETYPE", "STORE", "REFRESH", "INTERVAL"]),
        "es columns: {es}"
    );
    ensure!(
        es.contains("SecretSynced") && es.contains("True"),
        "es row: {es}"
    );

    let ss = kubectl(&env, &["get", "ss", "-n", &ns])?;
    ensure!(ss.contains("Valid") && ss.contains("ReadWrite"), "ss: {ss}");

    let core = kubectl(&env, &["get", "external-secrets", "-n", &ns])?;
    ensure!(
        core.contains("externalsecret.external-secrets.io/app"),
        "category external-secrets: {core}"
    );
    ensure!(
        core.contains("secretstore.external-secrets.io/fake"),
        "category external-secrets: {core}"
    );

    let providers = kubectl(&env, &["get", "external-secrets-providers", "-n", &ns])?;
    ensure!(
        providers.contains("fake.providers.external-secrets.io/fake"),
        "category external-secrets-providers: {providers}"
    );
    ensure!(providers.contains("Valid"), "provider columns: {providers}");
    Ok(())
}
