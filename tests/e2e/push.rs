//! PushSecret with the Fake provider: values pushed are read back by ExternalSecrets through the
//! same store, and deletionPolicy Delete removes what is no longer pushed. Where what is deleted
//! or kept at the provider matters, the GitLab stand-in shows it.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Result, anyhow, ensure};
use api::external_secret::ExternalSecret;
use api::push_secret::PushSecret;
use api::store::SecretStore;
use gitlab_standin::{GitlabStandin, Variable};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use libtest_mimic::Trial;
use serde_json::Value;

use crate::gitlab::{PROJECT, TOKEN, namespace_with_store, standin, store, token_secret};
use crate::operator::{TIMEOUT, wait_ready};
use crate::sync::{STORE, bytes, value, wait_secret};
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
        trial(
            "push::data_to_pushes_label_selected_sources_by_key_and_in_bundles",
            env,
            data_to,
        ),
        trial(
            "push::reverse_unicode_pushes_the_decoded_key_names",
            env,
            reverse_unicode,
        ),
        trial(
            "push::a_deleted_source_deletes_what_was_pushed",
            env,
            source_deleted,
        ),
        trial(
            "push::a_store_that_is_not_ready_is_pushed_to",
            env,
            no_flood_gate,
        ),
        trial(
            "push::a_failed_push_keeps_what_succeeded_on_record_for_deletion",
            env,
            partial_push,
        ),
        trial(
            "push::a_deleted_store_has_its_pushed_secrets_removed_before_it_goes",
            env,
            store_finalizer,
        ),
        trial(
            "push::restart_after_a_failed_status_write_still_deletes_what_was_pushed",
            env,
            restart_after_failed_status_write,
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

/// An ExternalSecret that reads `(secretKey, remote key)` pairs through the Fake store every
/// second, to see pushes and deletions as they happen.
fn follower(name: &str, keys: &[(&str, &str)]) -> String {
    let data: Vec<String> = keys
        .iter()
        .map(|(k, key)| format!("  - {{secretKey: {k}, remoteRef: {{key: {key}}}}}"))
        .collect();
    format!(
        "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: {name}}}\nspec:\n  refreshInterval: 1s\n  secretStoreRef: {{name: fake}}\n  data:\n{}\n",
        data.join("\n")
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
    let ns = namespace_with(&client, "push", &[STORE, SOURCE, &push_secret("first")]).await?;
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
    let follow = follower("follow-second", &[("token", "second")]);
    testenv::apply_yaml_in(&client, &ns, &follow, true).await?;
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
    let yaml = push_secret("k").replace("secretKey: token", "secretKey: nope");
    let ns = namespace_with(&client, "push-missing", &[STORE, SOURCE, &yaml]).await?;
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
    let store = STORE.replace("spec:\n", "spec:\n  controller: someone-else\n");
    let ns = namespace_with(
        &client,
        "push-other",
        &[&store, SOURCE, &push_secret("theirs")],
    )
    .await?;
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

/// What `status.syncedPushSecrets` records for `store`, as its keys.
fn recorded(ps: &Value, store: &str) -> Vec<String> {
    ps["status"]["syncedPushSecrets"][store]
        .as_object()
        .map(|entries| entries.keys().cloned().collect())
        .unwrap_or_default()
}

/// Waits until the PushSecret `name` is Ready=`status` with `reason`.
async fn wait_push(
    pushes: &Api<PushSecret>,
    name: &str,
    status: &str,
    reason: &str,
) -> Result<Value> {
    wait_ready(&format!("PushSecret {name}"), status, reason, || {
        value(pushes, name)
    })
    .await
}

/// A new namespace with `manifests` applied, in order.
async fn namespace_with(client: &kube::Client, prefix: &str, manifests: &[&str]) -> Result<String> {
    let ns = testenv::create_namespace(client, prefix).await?;
    for manifest in manifests {
        testenv::apply_yaml_in(client, &ns, manifest, true).await?;
    }
    Ok(ns)
}

/// A namespace with the Fake store Ready and `manifests` applied.
async fn fake_namespace(client: &kube::Client, prefix: &str, manifests: &[&str]) -> Result<String> {
    let ns = namespace_with(client, prefix, &[STORE]).await?;
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), &ns);
    wait_ready("SecretStore fake", "True", "Valid", || {
        value(&stores, "fake")
    })
    .await?;
    for manifest in manifests {
        testenv::apply_yaml_in(client, &ns, manifest, true).await?;
    }
    Ok(ns)
}

/// ESO's bulk push: every `DB_` key of every Secret labelled `push: bulk`, renamed, plus a bundle
/// of the matching keys as one JSON object; a Secret that takes the label later is pushed at once.
async fn data_to(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let manifests = r#"
apiVersion: v1
kind: Secret
metadata: {name: a, labels: {push: bulk}}
stringData: {DB_HOST: db.internal, DB_USER: app, OTHER: extra}
---
apiVersion: v1
kind: Secret
metadata: {name: b, labels: {push: bulk}}
stringData: {DB_PORT: "5432"}
---
apiVersion: v1
kind: Secret
metadata: {name: unlabelled}
stringData: {DB_NAME: never}
---
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {name: bulk}
spec:
  refreshInterval: 1h
  secretStoreRefs: [{name: fake, kind: SecretStore}]
  selector: {secret: {selector: {matchLabels: {push: bulk}}}}
  dataTo:
  - storeRef: {name: fake}
    match: {regexp: "^DB_"}
    rewrite:
    - regexp: {source: "^DB_", target: "app/db/"}
    - transform: {template: "{{ .value | lower }}"}
  - storeRef: {name: fake}
    remoteKey: app/extras
    match: {regexp: "^OTHER$"}
"#;
    let reader = follower(
        "reader",
        &[
            ("host", "app/db/host"),
            ("user", "app/db/user"),
            ("port", "app/db/port"),
            ("extras", "app/extras"),
        ],
    );
    let ns = fake_namespace(&client, "push-datato", &[manifests, &reader]).await?;
    let pushes: Api<PushSecret> = Api::namespaced(client.clone(), &ns);
    let ps = wait_push(&pushes, "bulk", "True", "Synced").await?;
    let keys = recorded(&ps, "SecretStore/fake");
    ensure!(
        keys == ["app/db/host", "app/db/port", "app/db/user", "app/extras"],
        "syncedPushSecrets: {}",
        ps["status"]["syncedPushSecrets"]
    );
    let entry = &ps["status"]["syncedPushSecrets"]["SecretStore/fake"]["app/db/host"];
    ensure!(
        entry["match"]["secretKey"] == "DB_HOST",
        "the entry names the source key: {entry}"
    );
    wait_secret(
        &client,
        &ns,
        "reader",
        &bytes(&[
            ("host", "db.internal"),
            ("user", "app"),
            ("port", "5432"),
            ("extras", r#"{"OTHER":"extra"}"#),
        ]),
    )
    .await?;

    // A Secret that takes the label is pushed without waiting for the refresh.
    let labelled = r#"
apiVersion: v1
kind: Secret
metadata: {name: late, labels: {push: bulk}}
stringData: {DB_NAME: orders}
"#;
    testenv::apply_yaml_in(&client, &ns, labelled, true).await?;
    let name_reader = follower("name-reader", &[("name", "app/db/name")]);
    testenv::apply_yaml_in(&client, &ns, &name_reader, true).await?;
    wait_secret(&client, &ns, "name-reader", &bytes(&[("name", "orders")])).await?;
    Ok(())
}

/// `conversionStrategy: ReverseUnicode` turns `_U00e9_` back into `é`, in `data` (whose
/// `secretKey` names the decoded key) and in `dataTo` bundles.
async fn reverse_unicode(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let manifests = r#"
apiVersion: v1
kind: Secret
metadata: {name: drinks}
stringData: {caf_U00e9_: latte, tea: green}
---
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {name: drinks}
spec:
  refreshInterval: 1h
  secretStoreRefs: [{name: fake, kind: SecretStore}]
  selector: {secret: {name: drinks}}
  data:
  - match: {secretKey: café, remoteRef: {remoteKey: drinks/coffee}}
    conversionStrategy: ReverseUnicode
  dataTo:
  - storeRef: {name: fake}
    remoteKey: drinks/all
    conversionStrategy: ReverseUnicode
"#;
    let reader = follower(
        "reader",
        &[("coffee", "drinks/coffee"), ("all", "drinks/all")],
    );
    let ns = fake_namespace(&client, "push-unicode", &[manifests, &reader]).await?;
    let pushes: Api<PushSecret> = Api::namespaced(client.clone(), &ns);
    wait_push(&pushes, "drinks", "True", "Synced").await?;
    wait_secret(
        &client,
        &ns,
        "reader",
        &bytes(&[
            ("coffee", "latte"),
            ("all", r#"{"café":"latte","tea":"green"}"#),
        ]),
    )
    .await?;
    Ok(())
}

/// As ESO: with deletionPolicy Delete, the source Secret going deletes what was pushed and the
/// PushSecret says SourceDeleted; without, it is an error naming the field and nothing goes.
/// The Secret coming back is pushed again at once.
async fn source_deleted(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let keep = push_secret("kept").replace("deletionPolicy: Delete", "deletionPolicy: None");
    let keep = keep.replace("name: push}", "name: keep}");
    let follow = follower("read", &[("token", "first")]);
    let manifests = [SOURCE, &push_secret("first"), &keep, &follow];
    let ns = fake_namespace(&client, "push-source-gone", &manifests).await?;
    let pushes: Api<PushSecret> = Api::namespaced(client.clone(), &ns);
    wait_push(&pushes, "push", "True", "Synced").await?;
    wait_push(&pushes, "keep", "True", "Synced").await?;
    let token = bytes(&[("token", "t0k")]);
    wait_secret(&client, &ns, "read", &token).await?;

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets.delete("src", &DeleteParams::default()).await?;
    let ps = wait_push(&pushes, "push", "False", "SourceDeleted").await?;
    ensure!(
        ps["status"]["syncedPushSecrets"]
            .as_object()
            .is_none_or(|s| s.is_empty()),
        "nothing is on record: {}",
        ps["status"]
    );
    crate::operator::wait_event(&client, &ns, "push", "SourceDeleted").await?;
    let externals: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let failed = wait_ready("ExternalSecret read", "False", "SecretSyncedError", || {
        value(&externals, "read")
    })
    .await?;
    ensure!(
        failed.to_string().contains("Secret does not exist"),
        "the pushed key is gone: {}",
        failed["status"]
    );
    let missing = wait_push(&pushes, "keep", "False", "Errored").await?;
    let message = crate::operator::ready(&missing)
        .and_then(|c| c.message)
        .unwrap_or_default();
    ensure!(
        message.contains("spec.selector.secret.name"),
        "names the field: {message}"
    );
    testenv::apply_yaml_in(&client, &ns, &reader("read-kept", "kept"), true).await?;
    wait_secret(&client, &ns, "read-kept", &token).await?;

    // Back again: pushed at once.
    testenv::apply_yaml_in(&client, &ns, SOURCE, true).await?;
    wait_push(&pushes, "push", "True", "Synced").await?;
    wait_secret(&client, &ns, "read", &token).await?;
    Ok(())
}

/// ESO gives PushSecrets no flood gate: a store whose validation fails is written to all the same.
async fn no_flood_gate(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let failing = STORE.replace("    fake:\n", "    fake:\n      validationResult: 2\n");
    let ns = namespace_with(&client, "push-not-ready", &[&failing]).await?;
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), &ns);
    testenv::wait_for(TIMEOUT, "the store to be Ready=False", || async {
        let store = value(&stores, "fake").await?;
        match crate::operator::ready(&store) {
            Some(c) if c.status.as_str() == "False" => Ok(()),
            other => Err(anyhow!("Ready condition is {other:?}")),
        }
    })
    .await?;
    for manifest in [SOURCE, &push_secret("pushed")] {
        testenv::apply_yaml_in(&client, &ns, manifest, true).await?;
    }
    let pushes: Api<PushSecret> = Api::namespaced(client.clone(), &ns);
    let ps = wait_push(&pushes, "push", "True", "Synced").await?;
    ensure!(
        recorded(&ps, "SecretStore/fake") == ["pushed"],
        "syncedPushSecrets: {}",
        ps["status"]
    );
    Ok(())
}

fn variable(gitlab: &GitlabStandin, key: &str) -> Result<Option<Variable>> {
    Ok(gitlab
        .project_variables(PROJECT)?
        .into_iter()
        .find(|v| v.key == key))
}

async fn wait_variable_gone(gitlab: &GitlabStandin, key: &str) -> Result<()> {
    testenv::wait_for(TIMEOUT, &format!("{key} to be deleted"), || async {
        match variable(gitlab, key)? {
            None => Ok(()),
            Some(_) => Err(anyhow!("{key} is still there")),
        }
    })
    .await
}

async fn wait_gone<K>(api: &Api<K>, name: &str) -> Result<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + k8s_openapi::serde::de::DeserializeOwned,
{
    testenv::wait_for(TIMEOUT, &format!("{name} to be deleted"), || async {
        match api.get_opt(name).await? {
            None => Ok(()),
            Some(_) => Err(anyhow!("{name} still exists")),
        }
    })
    .await
}

/// A PushSecret to the GitLab stand-in, deletionPolicy Delete, pushing the `src` Secret's token
/// to each of `remote_keys`.
fn gitlab_push(name: &str, remote_keys: &[&str]) -> String {
    let data: Vec<String> = remote_keys
        .iter()
        .map(|k| format!("  - match: {{secretKey: token, remoteRef: {{remoteKey: {k}}}}}"))
        .collect();
    format!(
        r#"
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {{name: {name}}}
spec:
  refreshInterval: 1h
  deletionPolicy: Delete
  secretStoreRefs: [{{name: gitlab, kind: SecretStore}}]
  selector: {{secret: {{name: src}}}}
  data:
{}
"#,
        data.join("\n")
    )
}

/// One push of two fails (a variable made by hand is never overwritten): the one that succeeded
/// is on record, so deleting the PushSecret deletes it, and the hand-made one stays.
async fn partial_push(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let gitlab = standin(TOKEN)?;
    gitlab.add_project_variable(PROJECT, Variable::new("HANDMADE", "keep-me"))?;
    let ns = namespace_with_store(&client, "push-partial", &gitlab, "").await?;
    testenv::apply_yaml_in(&client, &ns, SOURCE, true).await?;
    let manifest = gitlab_push("push", &["API_TOKEN", "HANDMADE"]);
    testenv::apply_yaml_in(&client, &ns, &manifest, true).await?;
    let pushes: Api<PushSecret> = Api::namespaced(client.clone(), &ns);
    wait_push(&pushes, "push", "False", "Errored").await?;
    // Each retry records the keys it is about to push before pushing them (so that a crash
    // cannot lose one that landed), then takes the refused one off again: read between the two
    // writes of a retry, HANDMADE is briefly on record. Between retries only what succeeded is.
    testenv::wait_for(TIMEOUT, "only what succeeded on record", || async {
        let ps = value(&pushes, "push").await?;
        if recorded(&ps, "SecretStore/gitlab") == ["API_TOKEN"] {
            Ok(())
        } else {
            Err(anyhow!("on record: {}", ps["status"]))
        }
    })
    .await?;
    ensure!(
        variable(&gitlab, "API_TOKEN")?.is_some_and(|v| v.value == "t0k"),
        "API_TOKEN was pushed"
    );

    pushes.delete("push", &DeleteParams::default()).await?;
    wait_gone(&pushes, "push").await?;
    ensure!(
        variable(&gitlab, "API_TOKEN")?.is_none(),
        "API_TOKEN was deleted with the PushSecret"
    );
    ensure!(
        variable(&gitlab, "HANDMADE")?.is_some_and(|v| v.value == "keep-me"),
        "HANDMADE is untouched"
    );
    gitlab.assert_no_violations();
    Ok(())
}

fn store_finalizers(store: &Value) -> String {
    store["metadata"]["finalizers"].to_string()
}

const STORE_FINALIZER: &str = "secretstore.externalsecrets.io/finalizer";

/// ESO's store finalizer: present only while a PushSecret with deletionPolicy Delete uses the
/// store. Deleting the store wakes that PushSecret, which deletes what it pushed there while the
/// store still exists; the store goes once no such PushSecret refers to it.
async fn store_finalizer(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let gitlab = standin(TOKEN)?;
    let ns = namespace_with_store(&client, "push-store-gone", &gitlab, "").await?;
    testenv::apply_yaml_in(&client, &ns, SOURCE, true).await?;
    let kept =
        gitlab_push("keep", &["KEPT"]).replace("deletionPolicy: Delete", "deletionPolicy: None");
    testenv::apply_yaml_in(&client, &ns, &kept, true).await?;
    let pushes: Api<PushSecret> = Api::namespaced(client.clone(), &ns);
    wait_push(&pushes, "keep", "True", "Synced").await?;
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), &ns);
    let store = value(&stores, "gitlab").await?;
    ensure!(
        !store_finalizers(&store).contains(STORE_FINALIZER),
        "no finalizer for deletionPolicy None: {}",
        store["metadata"]
    );

    testenv::apply_yaml_in(&client, &ns, &gitlab_push("push", &["API_TOKEN"]), true).await?;
    wait_push(&pushes, "push", "True", "Synced").await?;
    testenv::wait_for(TIMEOUT, "the store finalizer", || async {
        let store = value(&stores, "gitlab").await?;
        if store_finalizers(&store).contains(STORE_FINALIZER) {
            Ok(())
        } else {
            Err(anyhow!("finalizers: {}", store_finalizers(&store)))
        }
    })
    .await?;
    ensure!(
        variable(&gitlab, "API_TOKEN")?.is_some(),
        "API_TOKEN pushed"
    );

    // Switching to deletionPolicy None releases the store; back to Delete holds it again.
    let policy = |p: &str| serde_json::json!({"spec": {"deletionPolicy": p}});
    for (p, held) in [("None", false), ("Delete", true)] {
        pushes
            .patch("push", &PatchParams::default(), &Patch::Merge(&policy(p)))
            .await?;
        testenv::wait_for(
            TIMEOUT,
            &format!("the store finalizer with {p}"),
            || async {
                let store = value(&stores, "gitlab").await?;
                if store_finalizers(&store).contains(STORE_FINALIZER) == held {
                    Ok(())
                } else {
                    Err(anyhow!("finalizers: {}", store_finalizers(&store)))
                }
            },
        )
        .await?;
    }

    stores.delete("gitlab", &DeleteParams::default()).await?;
    wait_variable_gone(&gitlab, "API_TOKEN").await?;
    let ps = testenv::wait_for(TIMEOUT, "the entries to be off the record", || async {
        let ps = value(&pushes, "push").await?;
        if recorded(&ps, "SecretStore/gitlab").is_empty() {
            Ok(ps)
        } else {
            Err(anyhow!(
                "syncedPushSecrets: {}",
                ps["status"]["syncedPushSecrets"]
            ))
        }
    })
    .await?;
    ensure!(
        stores.get_opt("gitlab").await?.is_some(),
        "the store waits for the PushSecret that refers to it: {}",
        ps["status"]
    );

    pushes.delete("push", &DeleteParams::default()).await?;
    wait_gone(&pushes, "push").await?;
    wait_gone(&stores, "gitlab").await?;
    ensure!(
        variable(&gitlab, "KEPT")?.is_some(),
        "deletionPolicy None keeps what it pushed"
    );
    gitlab.assert_no_violations();
    Ok(())
}

/// Refuses, in one namespace, every write of a PushSecret status that says Ready=True: the
/// status write after a successful push fails, as it does when the API server is unavailable
/// for a moment or the operator is stopped right after the push.
fn refuse_synced_status(ns: &str) -> String {
    format!(
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: refuse-synced-{ns}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [external-secrets.io]
      apiVersions: ["*"]
      operations: [UPDATE]
      resources: [pushsecrets/status]
  validations:
  - expression: "!has(object.status) || !has(object.status.conditions) || !object.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')"
    message: refused by the e2e trial
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: refuse-synced-{ns}}}
spec:
  policyName: refuse-synced-{ns}
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {{kubernetes.io/metadata.name: {ns}}}
"#
    )
}

/// A push whose status write fails, then a restart of the operator, then the PushSecret is
/// deleted while it is down: what was pushed is still deleted at the provider (deletionPolicy
/// Delete), though no status write ever recorded it as synced and the operator that pushed it
/// kept it only in memory.
async fn restart_after_failed_status_write(env: Arc<Env>) -> Result<()> {
    use crate::restart::Operator;
    let client = env.client().await;
    let gitlab = standin(TOKEN)?;
    let ns = testenv::create_namespace(&client, "push-restart").await?;
    let class = format!("push-restart-{ns}");
    testenv::apply_yaml_in(&client, &ns, &refuse_synced_status(&ns), true).await?;
    let pushes: Api<PushSecret> = Api::namespaced(client.clone(), &ns);
    // The policy is in force once a Ready=True status of a PushSecret nobody handles (its store
    // does not exist) is refused.
    testenv::apply_yaml_in(&client, &ns, &gitlab_push("probe", &["PROBE"]), true).await?;
    let synced = serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True",
        "reason": "Synced", "message": "probe", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}});
    testenv::wait_for(TIMEOUT, "the admission policy to refuse", || async {
        match pushes
            .patch_status("probe", &PatchParams::default(), &Patch::Merge(&synced))
            .await
        {
            Err(kube::Error::Api(e)) if e.message.contains("refused by the e2e trial") => Ok(()),
            other => Err(anyhow!("a Ready=True status write: {other:?}")),
        }
    })
    .await?;
    pushes.delete("probe", &DeleteParams::default()).await?;
    testenv::apply_yaml_in(&client, &ns, &token_secret(TOKEN), true).await?;
    let extra = format!("  controller: {class}\n");
    testenv::apply_yaml_in(
        &client,
        &ns,
        &store("SecretStore", &gitlab.url(), &extra),
        true,
    )
    .await?;
    testenv::apply_yaml_in(&client, &ns, SOURCE, true).await?;
    testenv::apply_yaml_in(&client, &ns, &gitlab_push("push", &["API_TOKEN"]), true).await?;

    let first = Operator::start_with(&env, &ns, &class, &["--disable-webhook"])?;
    testenv::wait_for(TIMEOUT, "API_TOKEN pushed", || async {
        variable(&gitlab, "API_TOKEN")?.ok_or_else(|| anyhow!("not pushed"))
    })
    .await?;
    testenv::wait_for(
        TIMEOUT,
        "the status write after the push to fail",
        || async {
            let failed = first
                .sum("external_secrets_reconcile_errors", |l| {
                    l.contains("controller=\"pushsecret\"") && l.contains("error=\"Write\"")
                })
                .await?;
            ensure!(failed >= 1.0, "{failed} failed status writes");
            anyhow::Ok(())
        },
    )
    .await?;
    let ps = value(&pushes, "push").await?;
    ensure!(
        crate::operator::ready(&ps).is_none_or(|c| c.status.as_str() != "True"),
        "the synced status was refused: {}",
        ps["status"]
    );
    first.stop();

    pushes.delete("push", &DeleteParams::default()).await?;
    let _second = Operator::start_with(&env, &ns, &class, &["--disable-webhook"])?;
    wait_gone(&pushes, "push").await?;
    ensure!(
        variable(&gitlab, "API_TOKEN")?.is_none(),
        "API_TOKEN was left at the provider after the PushSecret that pushed it was deleted"
    );
    for (kind, plural) in [
        (
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
        ),
        ("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
    ] {
        let gvk = kube::api::GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
        let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
        Api::<kube::api::DynamicObject>::all_with(client.clone(), &resource)
            .delete(&format!("refuse-synced-{ns}"), &DeleteParams::default())
            .await?;
    }
    gitlab.assert_no_violations();
    Ok(())
}
