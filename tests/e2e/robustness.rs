//! ExternalSecrets this operator cannot read (stored under another CRD, ESO's say) get a status
//! condition, and do not stall the others; those deleted while they sync leave nothing behind.

use std::sync::Arc;

use anyhow::{Result, anyhow, ensure};
use api::external_secret::ExternalSecret;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use libtest_mimic::Trial;
use serde_json::json;

use crate::operator::{TIMEOUT, ready, scrape};
use crate::sync::{ES, STORE, wait_secret};
use crate::{Env, trial};

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial(
            "robustness::unreadable_externalsecret_does_not_stall_others",
            env,
            unreadable,
        ),
        trial(
            "robustness::a_namespace_deleted_mid_sync_leaves_no_series",
            env,
            deleted_mid_sync,
        ),
    ]
}

async fn unreadable(_env: Arc<Env>) -> Result<()> {
    // A cluster of its own: the trial loosens the ExternalSecret CRD, which others rely on.
    let cp = tokio::task::spawn_blocking(testenv::ControlPlane::start).await??;
    let client = cp.client().await;
    testenv::install_crds(&client, Env::path("crds")).await?;
    // As an older or foreign CRD would: any refreshPolicy is stored.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let loosen: json_patch::Patch = serde_json::from_value(json!([{
        "op": "remove",
        "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/refreshPolicy/enum",
    }]))?;
    crds.patch(
        "externalsecrets.external-secrets.io",
        &PatchParams::default(),
        &Patch::<()>::Json(loosen),
    )
    .await?;

    let ns = testenv::create_namespace(&client, "unreadable").await?;
    let broken = ES.replace("name: app}", "name: broken}").replace(
        "refreshInterval: 1h",
        "refreshInterval: 1h\n  refreshPolicy: Sometimes",
    );
    testenv::wait_for(
        TIMEOUT,
        "the loosened CRD to store refreshPolicy Sometimes",
        || testenv::apply_yaml_in(&client, &ns, &broken, false),
    )
    .await?;

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    crate::operator::start_for(cp.client_config(), Default::default(), async move {
        let _ = stopped.await;
    })?;
    testenv::apply_yaml_in(&client, &ns, STORE, true).await?;
    testenv::apply_yaml_in(&client, &ns, ES, true).await?;
    wait_secret(&client, &ns, "app-secret", &crate::sync::expected()).await?;

    let resource = kube::api::ApiResource::erase::<ExternalSecret>(&());
    let raw: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let condition = testenv::wait_for(
        TIMEOUT,
        "a Ready=False condition on the unreadable ExternalSecret",
        || async {
            let obj = raw.get("broken").await?;
            ready(&serde_json::to_value(&obj)?)
                .filter(|c| c.status.as_str() == "False")
                .ok_or_else(|| anyhow!("no Ready=False yet"))
        },
    )
    .await?;
    let message = condition.message.unwrap_or_default();
    ensure!(
        message.contains("Sometimes"),
        "message names the bad value: {message}"
    );

    // The same for a PushSecret: an updatePolicy this operator does not know.
    let loosen: json_patch::Patch = serde_json::from_value(json!([{
        "op": "remove",
        "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/updatePolicy/enum",
    }]))?;
    crds.patch(
        "pushsecrets.external-secrets.io",
        &PatchParams::default(),
        &Patch::<()>::Json(loosen),
    )
    .await?;
    let push = r#"
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {name: broken-push}
spec:
  updatePolicy: Sometimes
  secretStoreRefs: [{name: fake}]
  selector: {secret: {name: app-secret}}
  data: [{match: {secretKey: user, remoteRef: {remoteKey: pushed}}}]
"#;
    testenv::wait_for(
        TIMEOUT,
        "the loosened CRD to store updatePolicy Sometimes",
        || testenv::apply_yaml_in(&client, &ns, push, false),
    )
    .await?;
    let resource = kube::api::ApiResource::erase::<api::push_secret::PushSecret>(&());
    let raw: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let condition = testenv::wait_for(
        TIMEOUT,
        "a Ready=False condition on the unreadable PushSecret",
        || async {
            let obj = raw.get("broken-push").await?;
            ready(&serde_json::to_value(&obj)?)
                .filter(|c| c.status.as_str() == "False")
                .ok_or_else(|| anyhow!("no Ready=False yet"))
        },
    )
    .await?;
    let message = condition.message.unwrap_or_default();
    ensure!(
        message.contains("Sometimes"),
        "message names the bad value: {message}"
    );

    // The same for a ClusterExternalSecret; another one is served all the same.
    let loosen: json_patch::Patch = serde_json::from_value(json!([{
        "op": "remove",
        "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/externalSecretSpec/properties/refreshPolicy/enum",
    }]))?;
    crds.patch(
        "clusterexternalsecrets.external-secrets.io",
        &PatchParams::default(),
        &Patch::<()>::Json(loosen),
    )
    .await?;
    let cluster = |name: &str, policy: &str| {
        format!(
            "apiVersion: external-secrets.io/v1\nkind: ClusterExternalSecret\nmetadata: {{name: {name}}}\nspec:\n  namespaces: [{ns}]\n  externalSecretName: {name}\n  externalSecretSpec:\n    refreshPolicy: {policy}\n    secretStoreRef: {{name: fake}}\n    data: [{{secretKey: user, remoteRef: {{key: user}}}}]\n"
        )
    };
    let broken = cluster("broken-cluster", "Sometimes");
    testenv::wait_for(
        TIMEOUT,
        "the loosened CRD to store refreshPolicy Sometimes",
        || testenv::apply_yaml(&client, &broken, false),
    )
    .await?;
    testenv::apply_yaml(&client, &cluster("fine-cluster", "Periodic"), true).await?;
    let alice = [("user".to_owned(), b"alice".to_vec())]
        .into_iter()
        .collect();
    wait_secret(&client, &ns, "fine-cluster", &alice).await?;
    let resource =
        kube::api::ApiResource::erase::<api::cluster_secrets::ClusterExternalSecret>(&());
    let raw: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let condition = testenv::wait_for(
        TIMEOUT,
        "a Ready=False condition on the unreadable ClusterExternalSecret",
        || async {
            let obj = raw.get("broken-cluster").await?;
            ready(&serde_json::to_value(&obj)?)
                .filter(|c| c.status.as_str() == "False")
                .ok_or_else(|| anyhow!("no Ready=False yet"))
        },
    )
    .await?;
    let message = condition.message.unwrap_or_default();
    ensure!(
        message.contains("Sometimes"),
        "message names the bad value: {message}"
    );
    let _ = stop.send(());
    Ok(())
}

/// Namespaces deleted while their ExternalSecrets sync: reconciles still in flight when their
/// object left the watch used to record its series again after they were forgotten, so every
/// such wave left series behind (the soak benchmark found 25 of 50 in each wave). Whether a
/// reconcile is in flight at that moment is timing: without the fix one round of this failed
/// about every other run, so it runs two.
async fn deleted_mid_sync(env: Arc<Env>) -> Result<()> {
    for _ in 0..2 {
        delete_while_syncing(&env).await?;
    }
    Ok(())
}

async fn delete_while_syncing(env: &Env) -> Result<()> {
    const COUNT: usize = 200;
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "deleted-mid-sync").await?;
    testenv::apply_yaml_in(&client, &ns, STORE, true).await?;
    for i in 0..COUNT {
        let es = ES
            .replace("name: app}", &format!("name: app-{i}}}"))
            .replace("name: app-secret}", &format!("name: app-secret-{i}}}"));
        testenv::apply_yaml_in(&client, &ns, &es, true).await?;
    }
    let label = format!("namespace=\"{ns}\"");
    let series = || async {
        let metrics = scrape(env.metrics_addr()).await?;
        anyhow::Ok(
            metrics
                .lines()
                .filter(|l| !l.starts_with('#') && l.contains(&label))
                .map(str::to_owned)
                .collect::<Vec<_>>(),
        )
    };
    // Some synced, the others on their way.
    testenv::wait_for(TIMEOUT, "the first ExternalSecrets to sync", || async {
        ensure!(!series().await?.is_empty(), "no series of {ns} yet");
        anyhow::Ok(())
    })
    .await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    // The namespace controller's pace, not ours: under the whole suite it took over a minute to
    // empty a namespace of 200 ExternalSecrets and their Secrets.
    testenv::wait_for(TIMEOUT * 3, &format!("namespace {ns} gone"), || async {
        match namespaces.get_opt(&ns).await? {
            None => Ok(()),
            Some(_) => Err(anyhow!("namespace {ns} still exists")),
        }
    })
    .await?;
    testenv::wait_for(
        std::time::Duration::from_secs(10),
        "the series of the deleted ExternalSecrets forgotten",
        || async {
            let left = series().await?;
            ensure!(
                left.is_empty(),
                "{} series left: {:?}",
                left.len(),
                &left[..left.len().min(3)]
            );
            anyhow::Ok(())
        },
    )
    .await
}
