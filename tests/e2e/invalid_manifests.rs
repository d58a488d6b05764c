//! Every file in `tests/invalid-manifests/` is rejected with the message its first line
//! (`# expect: <substring>`) names.

use std::sync::Arc;

use anyhow::bail;
use libtest_mimic::Trial;

use crate::crds::yaml_files;
use crate::{Env, trial};

const HEADER: &str = "# expect:";

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    let mut files = yaml_files(&Env::path("tests/invalid-manifests"));
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let name = file.file_name().unwrap_or_default().to_string_lossy().into_owned();
            trial(format!("invalid_manifests::{name}"), env, move |env| async move {
                let yaml = std::fs::read_to_string(&file)?;
                let Some(expected) = yaml.lines().next().and_then(|l| l.strip_prefix(HEADER)) else {
                    bail!("{} must begin with `{HEADER} <substring of the error>`", file.display());
                };
                let expected = expected.trim();
                let client = env.client().await;
                let namespace = testenv::create_namespace(&client, "invalid").await?;
                match testenv::apply_yaml_in(&client, &namespace, &yaml, true).await {
                    Ok(_) => bail!("accepted, but expected a rejection containing {expected:?}"),
                    Err(e) => {
                        let message = format!("{e:#}");
                        if !message.contains(expected) {
                            bail!("rejected, but the error does not contain {expected:?}:\n{message}");
                        }
                        Ok(())
                    }
                }
            })
        })
        .collect()
}
