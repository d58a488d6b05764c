//! Every CRD in `crds/` installs and becomes Established.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use libtest_mimic::Trial;

use crate::{Env, trial};

/// Installs every CRD but, when `stores::provider_installed_later` runs, the one it installs
/// while the operator runs.
pub async fn setup(env: &Env, install_late_crd: bool) -> Result<()> {
    let client = env.client().await;
    for file in yaml_files(&Env::path("crds")) {
        let late = file
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(crate::stores::LATE_CRD));
        if late && !install_late_crd {
            continue;
        }
        let yaml = std::fs::read_to_string(&file)?;
        for crd in testenv::apply_yaml(&client, &yaml, true).await? {
            let name = crd.metadata.name.unwrap_or_default();
            testenv::wait_for_crd_established(&client, &name, Duration::from_secs(60)).await?;
        }
    }
    Ok(())
}

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    let mut files = yaml_files(&Env::path("crds"));
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let name = file
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            trial(format!("crds::{name}"), env, move |env| async move {
                let yaml = std::fs::read_to_string(&file)?;
                let crds: Vec<String> = testenv::parse_yaml(&yaml)?
                    .iter()
                    .filter(|o| o["kind"] == "CustomResourceDefinition")
                    .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_owned))
                    .collect();
                anyhow::ensure!(
                    !crds.is_empty(),
                    "{} holds no CustomResourceDefinition",
                    file.display()
                );
                let client = env.client().await;
                for crd in crds {
                    // Set-up already waited for all but the CRD a stores trial installs late.
                    testenv::wait_for_crd_established(&client, &crd, Duration::from_secs(120))
                        .await
                        .with_context(|| format!("CRD {crd} from {}", file.display()))?;
                }
                Ok(())
            })
        })
        .collect()
}

/// `*.yaml`/`*.yml` files directly in `dir`; none when it does not exist.
pub fn yaml_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect()
}
