//! What a new ExternalSecret costs the API server on its first sync, read off the operator's own
//! `external_secrets_api_requests_total`: the Secret written, the Ready status written, and the
//! `Created` event ESO publishes too; no read of a Secret that is not there yet, no second write.
//! Its own operator process, class and namespace, so that only its requests are counted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow, ensure};
use api::external_secret::ExternalSecret;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use libtest_mimic::Trial;
use serde_json::json;

use crate::operator::{TIMEOUT, ready, wait_event, wait_ready};
use crate::restart::Operator;
use crate::sync::{bytes, data_of, value, wait_secret};
use crate::{Env, trial};

/// Enough that a request made for some of them only (a conflict, a retry) shows, few enough for
/// the suite's time.
const COUNT: usize = 100;

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial(
            "first_sync::requests_per_new_externalsecret",
            env,
            requests_per_new_externalsecret,
        ),
        trial(
            "first_sync::a_target_already_there_is_adopted_or_refused",
            env,
            target_already_there,
        ),
    ]
}

/// The requests made between two readings, by `verb resource`, without those that did not move.
fn since(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or_default()))
        .filter(|(_, v)| *v != 0.0)
        .collect()
}

/// Readings until two in a row, a second apart, agree: the last event of a sync is published
/// after its Ready status is seen.
async fn settled(operator: &Operator) -> Result<BTreeMap<String, f64>> {
    let mut last = operator.requests().await?;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = operator.requests().await?;
        if now == last {
            return Ok(now);
        }
        last = now;
    }
    Err(anyhow!("the operator's requests never settled: {last:?}"))
}

async fn requests_per_new_externalsecret(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "firstsync").await?;
    let class = format!("firstsync-{ns}");
    testenv::apply_yaml_in(&client, &ns, &crate::leader::class_store(&class), true).await?;
    let operator =
        Operator::start_with(&env, &ns, &class, &["--client-qps=0", "--disable-webhook"])?;
    // Started: its store checked and Ready, its watches listed.
    let stores: Api<api::store::SecretStore> = Api::namespaced(client.clone(), &ns);
    testenv::wait_for(TIMEOUT, "the store Ready", || async {
        let store = serde_json::to_value(stores.get("fake").await?)?;
        ensure!(
            ready(&store).is_some_and(|c| c.status.as_str() == "True"),
            "not Ready yet"
        );
        anyhow::Ok(())
    })
    .await?;
    let before = settled(&operator).await?;

    for i in 0..COUNT {
        let es = format!(
            "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: es-{i}}}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {{name: fake}}\n  data: [{{secretKey: user, remoteRef: {{key: user}}}}]\n"
        );
        testenv::apply_yaml_in(&client, &ns, &es, true).await?;
    }
    let externalsecrets: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    crate::restart::every_one_ready(&externalsecrets).await?;
    let made = since(&before, &settled(&operator).await?);

    // One of each per ExternalSecret: the Secret applied, its Ready status applied, and ESO's
    // `Created` event. Nothing else, per ExternalSecret or not.
    let expected: BTreeMap<String, f64> = [
        "patch secrets",
        "patch externalsecrets/status",
        "create events",
    ]
    .into_iter()
    .map(|k| (k.to_owned(), COUNT as f64))
    .collect();
    let per_es: BTreeMap<&String, f64> = made.iter().map(|(k, v)| (k, v / COUNT as f64)).collect();
    ensure!(
        made == expected,
        "{COUNT} new ExternalSecrets cost the API server {made:?} (per ExternalSecret: \
         {per_es:?}); expected one Secret apply, one status apply and one Created event each"
    );
    operator.stop();
    Ok(())
}

/// A new ExternalSecret whose target someone else made: the first sync finds it (it is not
/// created over), adopts it as before (creationPolicy Owner: only the fetched keys, controlled by
/// the ExternalSecret, an `Updated` event) or, when another object controls it, refuses it and
/// leaves it as it was.
async fn target_already_there(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "firstsync-there").await?;
    testenv::apply_yaml_in(&client, &ns, crate::sync::STORE, true).await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let made = |name: &str, owners: serde_json::Value| -> Result<Secret> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": name, "ownerReferences": owners},
            "stringData": {"stray": "someone else's"},
        }))?)
    };
    secrets
        .create(&PostParams::default(), &made("taken", json!([]))?)
        .await?;
    let holder = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "holder"}}))?,
        )
        .await?;
    let held = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "holder",
        "uid": holder.uid(), "controller": true}]);
    secrets
        .create(&PostParams::default(), &made("held", held)?)
        .await?;
    for (es, target) in [("adopts", "taken"), ("refused", "held")] {
        let es = format!(
            "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: {es}}}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {{name: fake}}\n  target: {{name: {target}}}\n  data: [{{secretKey: user, remoteRef: {{key: user}}}}]\n"
        );
        testenv::apply_yaml_in(&client, &ns, &es, true).await?;
    }
    let externalsecrets: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);

    wait_ready("ExternalSecret adopts", "True", "SecretSynced", || {
        value(&externalsecrets, "adopts")
    })
    .await?;
    let taken = wait_secret(&client, &ns, "taken", &bytes(&[("user", "alice")])).await?;
    let adopter = externalsecrets.get("adopts").await?;
    ensure!(
        taken
            .owner_references()
            .iter()
            .any(|o| o.uid == adopter.uid().unwrap_or_default() && o.controller == Some(true)),
        "the adopted Secret is not controlled by its ExternalSecret: {:?}",
        taken.owner_references()
    );
    let reasons = wait_event(&client, &ns, "adopts", "Updated").await?;
    ensure!(
        !reasons.contains(&"Created".to_owned()),
        "an existing target is updated, not created: events {reasons:?}"
    );

    let refused = wait_ready(
        "ExternalSecret refused",
        "False",
        "SecretSyncedError",
        || value(&externalsecrets, "refused"),
    )
    .await?;
    let message = ready(&refused).and_then(|c| c.message).unwrap_or_default();
    ensure!(
        message.contains("spec.target.name")
            && message.contains("is controlled by ConfigMap \"holder\""),
        "the refusal names the field and the owner: {message:?}"
    );
    let held = secrets.get("held").await?;
    ensure!(
        data_of(&held) == bytes(&[("stray", "someone else's")]) && held.labels().is_empty(),
        "a Secret another object controls was changed: {:?}, labels {:?}",
        data_of(&held).keys().collect::<Vec<_>>(),
        held.labels()
    );
    Ok(())
}
