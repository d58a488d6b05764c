//! The control plane does what later tests take for granted: garbage collection, namespace
//! deletion, default ServiceAccounts and TokenRequest.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use libtest_mimic::Trial;

use crate::{Env, trial};

const TIMEOUT: Duration = Duration::from_secs(60);

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial(
            "control_plane::kubeconfig_works_for_kube_rs",
            env,
            |env| async move {
                let path = env.control_plane().kubeconfig_path();
                let kubeconfig = kube::config::Kubeconfig::read_from(&path)?;
                let options = kube::config::KubeConfigOptions::default();
                let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?;
                let client = kube::Client::try_from(config)?;
                Api::<Namespace>::all(client).get("default").await?;
                Ok(())
            },
        ),
        trial(
            "control_plane::garbage_collection_and_namespace_deletion",
            env,
            |env| async move {
                let client = env.client().await;
                let ns = testenv::create_namespace(&client, "gc").await?;
                let config_maps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
                let owner = config_maps
                    .create(&PostParams::default(), &config_map("owner", vec![]))
                    .await?;
                let reference = OwnerReference {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    name: "owner".into(),
                    uid: owner.metadata.uid.context("owner has no uid")?,
                    ..OwnerReference::default()
                };
                config_maps
                    .create(
                        &PostParams::default(),
                        &config_map("dependent", vec![reference]),
                    )
                    .await?;
                config_maps
                    .delete("owner", &DeleteParams::default())
                    .await?;
                testenv::wait_for(
                    TIMEOUT,
                    "the garbage collector to delete the dependent",
                    || async {
                        match config_maps.get_opt("dependent").await? {
                            Some(_) => bail!("dependent still exists"),
                            None => Ok(()),
                        }
                    },
                )
                .await?;

                let namespaces = Api::<Namespace>::all(client.clone());
                namespaces.delete(&ns, &DeleteParams::default()).await?;
                testenv::wait_for(
                    TIMEOUT,
                    "the namespace controller to delete the namespace",
                    || async {
                        match namespaces.get_opt(&ns).await? {
                            Some(n) => bail!("namespace is {:?}", n.status.and_then(|s| s.phase)),
                            None => Ok(()),
                        }
                    },
                )
                .await
            },
        ),
        trial(
            "control_plane::default_service_account_and_token_request",
            env,
            |env| async move {
                let client = env.client().await;
                let ns = testenv::create_namespace(&client, "token").await?;
                let accounts = Api::<ServiceAccount>::namespaced(client, &ns);
                testenv::wait_for(TIMEOUT, "ServiceAccount default", || {
                    accounts.get("default")
                })
                .await?;
                let request = TokenRequest {
                    spec: TokenRequestSpec {
                        audiences: vec!["vault".into()],
                        ..TokenRequestSpec::default()
                    },
                    ..TokenRequest::default()
                };
                let token = accounts
                    .create_token_request("default", &PostParams::default(), &request)
                    .await?
                    .status
                    .context("TokenRequest has no status")?
                    .token;
                anyhow::ensure!(token.split('.').count() == 3, "not a JWT: {token}");
                Ok(())
            },
        ),
    ]
}

fn config_map(name: &str, owner_references: Vec<OwnerReference>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            owner_references: Some(owner_references),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}
