//! Every manifest under `examples/` is accepted by the apiserver with strict field validation.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use libtest_mimic::Trial;

use crate::{Env, trial};

const NAMESPACE: &str = "examples";

pub async fn setup(env: &Env) -> Result<()> {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(NAMESPACE.into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(env.client().await)
        .create(&PostParams::default(), &ns)
        .await
        .context("creating namespace examples")?;
    Ok(())
}

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    let root = Env::path("examples");
    let mut files = Vec::new();
    collect(&root, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let rel = file
                .strip_prefix(&root)
                .unwrap_or(&file)
                .display()
                .to_string();
            trial(format!("examples::{rel}"), env, move |env| async move {
                let yaml = std::fs::read_to_string(&file)?;
                let client = env.client().await;
                // Installed while the operator runs, by the first stores trial.
                testenv::wait_for_crd_established(
                    &client,
                    crate::stores::LATE_CRD,
                    std::time::Duration::from_secs(120),
                )
                .await?;
                testenv::apply_yaml_in(&client, NAMESPACE, &yaml, true).await?;
                Ok(())
            })
        })
        .collect()
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for path in std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
    {
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}
