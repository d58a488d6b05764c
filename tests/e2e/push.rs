//! PushSecret with the Fake provider: values pushed are read back by ExternalSecrets through the
//! same store, and deletionPolicy Delete removes what is no longer pushed.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Result, anyhow, ensure};
use api::external_secret::ExternalSecret;
use api::push_secret::PushSecret;
use kube::Api;
use kube::api::DeleteParams;
use libtest_mimic::Trial;

use crate::operator::{TIMEOUT, wait_ready};
use crate::sync::{STORE, wait_secret};
use crate::{Env, trial};

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial(
            "push::pushed_values_read_back_and_deleted",
            env,
            pushed_and_deleted,
        ),
        trial("push::missing_source_key_names_the_entry", env, missing_key),
        trial(
            "push::another_controllers_push_secret_is_left_alone",
            env,
            other_class,
        ),
    ]
}

const SOURCE: &str = r#"
apiVersion: v1
kind: Secret
metadata: {name: src}
stringData: {token: t0k}
"#;

fn push_secret(remote_key: &str) -> String {
    format!(
        r#"
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {{name: push}}
spec:
  refreshInterval: 1h
  deletionPolicy: Delete
  secretStoreRefs: [{{name: fake, kind: SecretStore}}]
  selector: {{secret: {{name: src}}}}
  data: [{{match: {{secretKey: token, remoteRef: {{remoteKey: {remote_key}}}}}}}]
"#
    )
}

fn reader(name: &str, key: &str) -> String {
    format!(
        r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: {name}}}
spec:
  secretStoreRef: {{name: fake}}
  data: [{{secretKey: token, remoteRef: {{key: {key}}}}}]
"#
    )
}

async fn ps_value(api: &Api<PushSecret>) -> Result<serde_json::Value> {
    Ok(serde_json::to_value(api.get("push").await?)?)
}

async fn pushed_and_deleted(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "push").await?;
    testenv::apply_yaml_in(&client, &ns, STORE, true).await?;
    testenv::apply_yaml_in(&client, &ns, SOURCE, true).await?;
    testenv::apply_yaml_in(&client, &ns, &push_secret("first"), true).await?;
    let pushes: Api<PushSecret> = Api::namespaced(client.clone(), &ns);
    let ps = wait_ready("PushSecret push", "True", "Synced", || ps_value(&pushes)).await?;
    ensure!(
        ps["status"]["syncedPushSecrets"]["SecretStore/fake"]["first"].is_object(),
        "syncedPushSecrets: {}",
        ps["status"]
    );
    ensure!(
        ps["metadata"]["finalizers"]
            .to_string()
            .contains("pushsecret.externalsecrets.io/finalizer"),
        "finalizer: {}",
        ps["metadata"]
    );
    let series = format!(
        "pushsecret_status_condition{{name=\"push\",namespace=\"{ns}\",condition=\"Ready\",status=\"True\"}}"
    );
    let metrics = crate::operator::scrape(env.metrics_addr()).await?;
    ensure!(
        crate::operator::sample(&metrics, &series) == Some(1.0),
        "no {series} = 1"
    );
    let token = BTreeMap::from([("token".to_owned(), b"t0k".to_vec())]);
    testenv::apply_yaml_in(&client, &ns, &reader("read-first", "first"), true).await?;
    wait_secret(&client, &ns, "read-first", &token).await?;

    // The entry moves to another remote key: the old one is deleted at the provider.
    testenv::apply_yaml_in(&client, &ns, &push_secret("second"), true).await?;
    testenv::wait_for(
        TIMEOUT,
        "the PushSecret to record the new key only",
        || async {
            let ps = ps_value(&pushes).await?;
            let synced = &ps["status"]["syncedPushSecrets"]["SecretStore/fake"];
            if synced["second"].is_object() && synced["first"].is_null() {
                Ok(())
            } else {
                Err(anyhow!("syncedPushSecrets: {synced}"))
            }
        },
    )
    .await?;
    testenv::apply_yaml_in(&client, &ns, &reader("read-second", "second"), true).await?;
    wait_secret(&client, &ns, "read-second", &token).await?;
    let externals: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let gone = |name: &'static str| {
        let externals = externals.clone();
        async move {
            wait_ready(name, "False", "SecretSyncedError", || async {
                Ok(serde_json::to_value(externals.get(name).await?)?)
            })
            .await
        }
    };
    testenv::apply_yaml_in(&client, &ns, &reader("read-first-again", "first"), true).await?;
    let failed = gone("read-first-again").await?;
    ensure!(
        failed.to_string().contains("Secret does not exist"),
        "the old key still exists: {}",
        failed["status"]
    );

    // A change to the source Secret is pushed without waiting for the hourly refresh.
    testenv::apply_yaml_in(&client, &ns, &SOURCE.replace("t0k", "n3w"), true).await?;
    let follower = reader("follow-second", "second").replace(
        "  secretStoreRef",
        "  refreshInterval: 1s\n  secretStoreRef",
    );
    testenv::apply_yaml_in(&client, &ns, &follower, true).await?;
    let updated = BTreeMap::from([("token".to_owned(), b"n3w".to_vec())]);
    wait_secret(&client, &ns, "follow-second", &updated).await?;

    // Deleting the PushSecret deletes what it pushed, then lets it go.
    pushes.delete("push", &DeleteParams::default()).await?;
    testenv::wait_for(TIMEOUT, "the PushSecret to be deleted", || async {
        match pushes.get_opt("push").await? {
            None => Ok(()),
            Some(_) => Err(anyhow!("PushSecret push still exists")),
        }
    })
    .await?;
    testenv::apply_yaml_in(&client, &ns, &reader("read-second-again", "second"), true).await?;
    gone("read-second-again").await?;
    Ok(())
}

async fn missing_key(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "push-missing").await?;
    testenv::apply_yaml_in(&client, &ns, STORE, true).await?;
    testenv::apply_yaml_in(&client, &ns, SOURCE, true).await?;
    let yaml = push_secret("k").replace("secretKey: token", "secretKey: nope");
    testenv::apply_yaml_in(&client, &ns, &yaml, true).await?;
    let pushes: Api<PushSecret> = Api::namespaced(client.clone(), &ns);
    let ps = wait_ready("PushSecret push", "False", "Errored", || ps_value(&pushes)).await?;
    let message = ps["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ensure!(
        message.contains("spec.data[0].match.secretKey"),
        "message: {message}"
    );
    ensure!(
        !message.contains("t0k"),
        "the message quotes a secret value: {message}"
    );
    Ok(())
}

/// A PushSecret whose only store belongs to another controller class: its status (as that
/// operator wrote it) and finalizers stay as they are.
async fn other_class(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "push-other").await?;
    let store = STORE.replace("spec:\n", "spec:\n  controller: someone-else\n");
    testenv::apply_yaml_in(&client, &ns, &store, true).await?;
    testenv::apply_yaml_in(&client, &ns, SOURCE, true).await?;
    testenv::apply_yaml_in(&client, &ns, &push_secret("theirs"), true).await?;
    let pushes: Api<PushSecret> = Api::namespaced(client.clone(), &ns);
    // What the other operator recorded.
    let status = serde_json::json!({
        "apiVersion": "external-secrets.io/v1alpha1", "kind": "PushSecret",
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "Synced",
                            "message": "by the other operator", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "syncedPushSecrets": {"SecretStore/fake": {"theirs": {"match": {"secretKey": "token", "remoteRef": {"remoteKey": "theirs"}}}}},
        },
    });
    pushes
        .patch_status(
            "push",
            &kube::api::PatchParams::apply("other-operator").force(),
            &kube::api::Patch::Apply(&status),
        )
        .await?;
    let before = pushes.get("push").await?;
    // A change of the PushSecret makes us look at it again.
    let touch = serde_json::json!({"metadata": {"annotations": {"touched": "1"}}});
    pushes
        .patch(
            "push",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&touch),
        )
        .await?;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let after = pushes.get("push").await?;
    ensure!(
        serde_json::to_value(&after.status)? == serde_json::to_value(&before.status)?,
        "the status is the other operator's: {:?}",
        after.status
    );
    ensure!(
        after.metadata.finalizers.unwrap_or_default().is_empty(),
        "no finalizer of ours"
    );
    Ok(())
}
