//! The Helm client `hack/build-helm.sh` builds, for the chart tests.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The Helm version `hack/build-helm.sh` builds by default.
pub const HELM_VERSION: &str = "3.22.0";

/// The `helm` binary, or an error with the command that builds it.
pub fn helm_binary() -> Result<PathBuf> {
    let path = crate::testbin_root()
        .join(format!("helm-{HELM_VERSION}"))
        .join("helm");
    if !path.is_file() {
        bail!(
            "Helm {HELM_VERSION} is missing at {}; run: bash hack/build-helm.sh",
            path.display()
        );
    }
    Ok(path)
}

/// Runs `helm args...` against the cluster of `kubeconfig` (none for lint and template); its
/// standard output, or an error with its standard error.
pub fn helm(kubeconfig: Option<&Path>, args: &[&str]) -> Result<String> {
    let mut command = Command::new(helm_binary()?);
    // Helm keeps caches and repository settings in the user's home otherwise.
    let home = std::env::temp_dir().join("external-secrets-helm-home");
    command
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    if let Some(kubeconfig) = kubeconfig {
        command.arg("--kubeconfig").arg(kubeconfig);
    }
    let output = command
        .output()
        .with_context(|| format!("running helm {}", args.join(" ")))?;
    if !output.status.success() {
        bail!(
            "helm {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8(output.stdout)?)
}
