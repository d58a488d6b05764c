//! What a new ExternalSecret costs the API server on its first sync, read off the operator's own
//! `external_secrets_api_requests_total`: the Secret written, the Ready status written, and the
//! `Created` event ESO publishes too; no read of a Secret that is not there yet, no second write.
//! Its own operator process, class and namespace, so that only its requests are counted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow, ensure};
use api::external_secret::ExternalSecret;
use kube::Api;
use kube::api::ListParams;
use libtest_mimic::Trial;

use crate::operator::{TIMEOUT, ready};
use crate::restart::Operator;
use crate::{Env, trial};

/// Enough that a request made for some of them only (a conflict, a retry) shows, few enough for
/// the suite's time.
const COUNT: usize = 100;

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![trial(
        "first_sync::requests_per_new_externalsecret",
        env,
        requests_per_new_externalsecret,
    )]
}

/// `external_secrets_api_requests_total` by `verb resource`.
async fn requests(operator: &Operator) -> Result<BTreeMap<String, f64>> {
    let text = crate::operator::scrape(operator.metrics()).await?;
    let label = |line: &str, name: &str| -> String {
        let start = format!("{name}=\"");
        line.split_once(&start)
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(value, _)| value.to_owned())
            .unwrap_or_default()
    };
    Ok(text
        .lines()
        .filter(|l| l.starts_with("external_secrets_api_requests_total{"))
        .filter_map(|l| {
            let value = l.rsplit(' ').next()?.parse::<f64>().ok()?;
            Some((
                format!("{} {}", label(l, "verb"), label(l, "resource")),
                value,
            ))
        })
        .collect())
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
    let mut last = requests(operator).await?;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = requests(operator).await?;
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
            ready(&store).is_some_and(|c| c.status == "True"),
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
    testenv::wait_for(TIMEOUT, "every ExternalSecret Ready", || async {
        let not_ready = externalsecrets
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|es| {
                let value = serde_json::to_value(es).unwrap_or_default();
                ready(&value).is_none_or(|c| c.status.as_str() != "True")
            })
            .count();
        ensure!(not_ready == 0, "{not_ready} not Ready");
        anyhow::Ok(())
    })
    .await?;
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
