//! ExternalSecret sync with the Fake provider, end to end.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow, ensure};
use api::external_secret::ExternalSecret;
use api::store::SecretStore;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use libtest_mimic::Trial;
use serde_json::{Value, json};

use crate::operator::{TIMEOUT, sample, scrape, wait_event, wait_ready};
use crate::{Env, trial};

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial("sync::data_and_data_from", env, |env| {
            data_and_data_from(env)
        }),
        trial("sync::hand_edit_is_reverted", env, |env| {
            hand_edit_is_reverted(env)
        }),
        trial("sync::provider_error_keeps_the_secret", env, |env| {
            provider_error_keeps_the_secret(env)
        }),
        trial("sync::store_change_resyncs", env, |env| {
            store_change_resyncs(env)
        }),
        trial(
            "sync::provider_object_change_and_periodic_refresh",
            env,
            periodic_refresh,
        ),
        trial("sync::five_hundred_converge", env, many_converge),
        trial(
            "sync::found_keys_are_converted",
            env,
            found_keys_are_converted,
        ),
        trial(
            "sync::bad_references_are_named",
            env,
            bad_references_are_named,
        ),
    ]
}

pub const STORE: &str = r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: fake}
spec:
  provider:
    fake:
      data:
      - {key: user, value: alice}
      - {key: user, value: bob, version: "2"}
      - {key: config, value: '{"host":"db.example.com","port":"5432"}'}
      - {key: app/one, value: "1"}
      - {key: app/two, value: "2"}
      - {key: encoded, value: aGVsbG8=}
"#;

pub const ES: &str = r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: app}
spec:
  refreshInterval: 1h
  secretStoreRef: {name: fake, kind: SecretStore}
  target: {name: app-secret}
  data:
  - {secretKey: user, remoteRef: {key: user}}
  - {secretKey: user-v2, remoteRef: {key: user, version: "2"}}
  - {secretKey: host, remoteRef: {key: config, property: host}}
  - {secretKey: decoded, remoteRef: {key: encoded, decodingStrategy: Base64}}
  dataFrom:
  - extract: {key: config}
  - find: {name: {regexp: "^app/"}}
    rewrite:
    - regexp: {source: "^app/(.*)", target: "app-${1}"}
"#;

pub fn expected() -> BTreeMap<String, Vec<u8>> {
    [
        ("user", "alice"),
        ("user-v2", "bob"),
        ("host", "db.example.com"),
        ("decoded", "hello"),
        ("port", "5432"),
        ("app-one", "1"),
        ("app-two", "2"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.as_bytes().to_vec()))
    .collect()
}

/// Secret data written as text pairs, as [`wait_secret`] takes it.
pub fn bytes(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect()
}

/// Any object as JSON, for [`crate::operator::wait_ready`].
pub async fn value<K>(api: &Api<K>, name: &str) -> Result<Value>
where
    K: kube::Resource + Clone + std::fmt::Debug,
    K: for<'de> k8s_openapi::serde::Deserialize<'de> + k8s_openapi::serde::Serialize,
{
    Ok(serde_json::to_value(api.get(name).await?)?)
}

pub fn data_of(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    secret
        .data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect()
}

/// A namespace with the Fake store and the ExternalSecret synced.
pub async fn synced_namespace(client: &Client, prefix: &str) -> Result<(String, Secret)> {
    let ns = testenv::create_namespace(client, prefix).await?;
    testenv::apply_yaml_in(client, &ns, STORE, true).await?;
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), &ns);
    wait_ready("SecretStore fake", "True", "Valid", || async {
        Ok(serde_json::to_value(stores.get("fake").await?)?)
    })
    .await?;
    testenv::apply_yaml_in(client, &ns, ES, true).await?;
    let secret = wait_secret(client, &ns, "app-secret", &expected()).await?;
    Ok((ns, secret))
}

pub async fn wait_secret(
    client: &Client,
    ns: &str,
    name: &str,
    want: &BTreeMap<String, Vec<u8>>,
) -> Result<Secret> {
    wait_secret_within(TIMEOUT, client, ns, name, want).await
}

/// [`wait_secret`] for up to `timeout`.
pub async fn wait_secret_within(
    timeout: std::time::Duration,
    client: &Client,
    ns: &str,
    name: &str,
    want: &BTreeMap<String, Vec<u8>>,
) -> Result<Secret> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    testenv::wait_for(
        timeout,
        &format!("Secret {ns}/{name} to hold the expected data"),
        || async {
            let s = secrets.get(name).await?;
            let have = data_of(&s);
            if &have == want {
                Ok(s)
            } else {
                Err(anyhow!(
                    "Secret holds keys {:?}",
                    have.keys().collect::<Vec<_>>()
                ))
            }
        },
    )
    .await
}

async fn es_value(client: &Client, ns: &str, name: &str) -> Result<Value> {
    let api: Api<ExternalSecret> = Api::namespaced(client.clone(), ns);
    Ok(serde_json::to_value(api.get(name).await?)?)
}

async fn data_and_data_from(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let (ns, secret) = synced_namespace(&client, "sync-data").await?;
    let labels = secret.metadata.labels.clone().unwrap_or_default();
    ensure!(
        labels
            .get("reconcile.external-secrets.io/managed")
            .map(String::as_str)
            == Some("true"),
        "managed label: {labels:?}"
    );
    ensure!(
        labels.contains_key("reconcile.external-secrets.io/created-by"),
        "created-by label: {labels:?}"
    );
    let annotations = secret.metadata.annotations.clone().unwrap_or_default();
    ensure!(
        annotations.contains_key("reconcile.external-secrets.io/data-hash"),
        "data-hash: {annotations:?}"
    );
    let owners = secret.metadata.owner_references.clone().unwrap_or_default();
    ensure!(
        owners.len() == 1
            && owners[0].kind == "ExternalSecret"
            && owners[0].controller == Some(true),
        "owner: {owners:?}"
    );
    let managers: Vec<_> = secret
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    ensure!(
        managers.contains(&"externalsecrets.external-secrets.io/app".to_owned()),
        "field managers: {managers:?}"
    );

    let es = wait_ready("ExternalSecret app", "True", "SecretSynced", || {
        es_value(&client, &ns, "app")
    })
    .await?;
    ensure!(es["status"]["refreshTime"].is_string(), "refreshTime: {es}");
    ensure!(
        es["status"]["syncedResourceVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("1-")),
        "syncedResourceVersion: {es}"
    );
    ensure!(
        es["status"]["observedGeneration"] == 1,
        "observedGeneration: {es}"
    );
    ensure!(
        es["status"]["binding"]["name"] == "app-secret",
        "binding: {es}"
    );
    wait_event(&client, &ns, "app", "Created").await?;

    let metrics = scrape(env.metrics_addr()).await?;
    let labels = format!("name=\"app\",namespace=\"{ns}\"");
    ensure!(
        sample(
            &metrics,
            &format!("externalsecret_sync_calls_total{{{labels}}}")
        )
        .is_some_and(|v| v >= 1.0),
        "sync calls in\n{metrics}"
    );
    ensure!(
        sample(
            &metrics,
            &format!(
                "externalsecret_status_condition{{{labels},condition=\"Ready\",status=\"True\"}}"
            )
        ) == Some(1.0),
        "status condition"
    );
    ensure!(
        sample(
            &metrics,
            &format!(
                "secretstore_status_condition{{name=\"fake\",namespace=\"{ns}\",condition=\"Ready\",status=\"True\"}}"
            )
        ) == Some(1.0),
        "store condition"
    );
    ensure!(metrics.contains("externalsecret_provider_api_calls_count{provider=\"Fake\",call=\"GetSecret\",status=\"success\"}"), "provider calls");
    ensure!(
        metrics.contains("clientmanager_cache_hits_total{provider=\"Fake\"}"),
        "cache hits"
    );
    Ok(())
}

async fn hand_edit_is_reverted(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let (ns, _) = synced_namespace(&client, "sync-edit").await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let edit = json!({"data": {"user": "bWFsbG9yeQ==", "extra": "eA=="}});
    secrets
        .patch("app-secret", &PatchParams::default(), &Patch::Merge(&edit))
        .await?;
    wait_secret(&client, &ns, "app-secret", &expected()).await?;
    wait_event(&client, &ns, "app", "Updated").await?;
    Ok(())
}

async fn provider_error_keeps_the_secret(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let (ns, before) = synced_namespace(&client, "sync-error").await?;
    // `config` stops being a JSON object: the extract in dataFrom[0] fails at the provider.
    let store = STORE.replace(r#"'{"host":"db.example.com","port":"5432"}'"#, "not-json");
    testenv::apply_yaml_in(&client, &ns, &store, true).await?;
    let es = wait_ready("ExternalSecret app", "False", "SecretSyncedError", || {
        es_value(&client, &ns, "app")
    })
    .await?;
    let message = es["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ensure!(
        message.contains("spec.dataFrom[0]"),
        "message names the entry: {message}"
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let after = secrets.get("app-secret").await?;
    ensure!(data_of(&after) == data_of(&before), "Secret data changed");
    ensure!(
        after.metadata.resource_version == before.metadata.resource_version,
        "Secret was rewritten: {:?} -> {:?}",
        before.metadata.resource_version,
        after.metadata.resource_version
    );
    // Retries repeat the same failure: the metric counts each, but only the first is an event
    // (ESO records one per retry; with a provider down for long, each is a request to the API
    // server).
    let errors = format!("externalsecret_sync_calls_error{{name=\"app\",namespace=\"{ns}\"}}");
    testenv::wait_for(TIMEOUT, "the failure to be retried", || async {
        let metrics = scrape(env.metrics_addr()).await?;
        match sample(&metrics, &errors) {
            Some(v) if v >= 3.0 => Ok(()),
            other => Err(anyhow!("{errors} = {other:?}")),
        }
    })
    .await?;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    let failed: Vec<_> = events
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("UpdateFailed"))
        .collect();
    ensure!(
        failed.len() == 1 && failed[0].series.is_none(),
        "{} UpdateFailed events, series {:?}",
        failed.len(),
        failed
            .iter()
            .map(|e| e.series.as_ref().map(|s| s.count))
            .collect::<Vec<_>>()
    );
    Ok(())
}

async fn store_change_resyncs(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let (ns, _) = synced_namespace(&client, "sync-store").await?;
    testenv::apply_yaml_in(
        &client,
        &ns,
        &STORE.replace("value: alice", "value: carol"),
        true,
    )
    .await?;
    let mut want = expected();
    want.insert("user".into(), b"carol".to_vec());
    // The ExternalSecret refreshes hourly: only the store change can bring this in time.
    wait_secret(&client, &ns, "app-secret", &want).await?;
    Ok(())
}

async fn periodic_refresh(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "sync-periodic").await?;
    let objects = r#"
apiVersion: providers.external-secrets.io/v1alpha1
kind: Fake
metadata: {name: backend}
spec:
  data: [{key: token, value: one}]
---
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: by-ref}
spec:
  providerRef: {apiVersion: providers.external-secrets.io/v1alpha1, kind: Fake, name: backend}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: periodic}
spec:
  refreshInterval: 2s
  secretStoreRef: {name: by-ref}
  data: [{secretKey: token, remoteRef: {key: token}}]
"#;
    testenv::apply_yaml_in(&client, &ns, objects, true).await?;
    let one = BTreeMap::from([("token".to_owned(), b"one".to_vec())]);
    wait_secret(&client, &ns, "periodic", &one).await?;
    testenv::apply_yaml_in(
        &client,
        &ns,
        &objects.replace("value: one", "value: two"),
        true,
    )
    .await?;
    let two = BTreeMap::from([("token".to_owned(), b"two".to_vec())]);
    wait_secret(&client, &ns, "periodic", &two).await?;
    // The client built from the old spec was closed and replaced.
    let metrics = scrape(env.metrics_addr()).await?;
    ensure!(
        sample(
            &metrics,
            "clientmanager_cache_evictions_total{provider=\"Fake\",reason=\"changed\"}"
        )
        .is_some_and(|v| v >= 1.0),
        "no eviction counted"
    );

    // Nothing changes any more; only the 2s interval makes it sync again.
    let api: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let refreshed = |es: ExternalSecret| es.status.and_then(|s| s.refresh_time).map(|t| t.0);
    let transition = |es: &ExternalSecret| {
        es.status
            .as_ref()
            .and_then(|s| api::conditions::find(&s.conditions, "Ready"))
            .and_then(|c| c.last_transition_time.clone())
    };
    let before = api.get("periodic").await?;
    let first_transition = transition(&before);
    let first = refreshed(before).ok_or_else(|| anyhow!("no refreshTime"))?;
    testenv::wait_for(TIMEOUT, "a periodic refresh", || async {
        let now = refreshed(api.get("periodic").await?).ok_or_else(|| anyhow!("no refreshTime"))?;
        if now.duration_since(first).as_secs() >= 2 {
            Ok(())
        } else {
            Err(anyhow!("refreshTime still {now}"))
        }
    })
    .await?;
    // A resync that does not flip Ready keeps its transition time.
    let after = api.get("periodic").await?;
    ensure!(
        transition(&after) == first_transition,
        "lastTransitionTime moved: {first_transition:?} -> {:?}",
        transition(&after)
    );
    Ok(())
}

/// How many ExternalSecrets `many_converge` creates; `hack/bench.sh` measures larger numbers.
const MANY: usize = 500;

async fn many_converge(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "sync-many").await?;
    testenv::apply_yaml_in(&client, &ns, STORE, true).await?;
    let api: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let creates = (0..MANY).map(|i| {
        let api = api.clone();
        let ns = ns.clone();
        async move {
            let mut es: ExternalSecret = serde_yaml::from_str(&format!(
                "{{apiVersion: external-secrets.io/v1, kind: ExternalSecret, metadata: {{name: es-{i}}}, spec: {{secretStoreRef: {{name: fake}}, data: [{{secretKey: user, remoteRef: {{key: user}}}}]}}}}"
            ))?;
            es.metadata.namespace = Some(ns);
            api.create(&PostParams::default(), &es).await?;
            anyhow::Ok(())
        }
    });
    futures::stream::iter(creates)
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    testenv::wait_for(
        Duration::from_secs(180),
        &format!("{MANY} ExternalSecrets to be Ready"),
        || async {
            let list = api.list(&Default::default()).await?;
            let ready = list
                .items
                .iter()
                .filter(|es| {
                    crate::operator::ready(&serde_json::to_value(es).unwrap_or_default())
                        .is_some_and(|c| c.status.as_str() == "True")
                })
                .count();
            if ready == MANY {
                Ok(())
            } else {
                Err(anyhow!("{ready} of {MANY} Ready"))
            }
        },
    )
    .await?;
    let written = secrets
        .list_metadata(&Default::default())
        .await?
        .items
        .len();
    ensure!(
        written == MANY,
        "{written} Secrets for {MANY} ExternalSecrets"
    );
    Ok(())
}

async fn found_keys_are_converted(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "sync-convert").await?;
    testenv::apply_yaml_in(&client, &ns, STORE, true).await?;
    let objects = r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: default-conversion}
spec:
  secretStoreRef: {name: fake}
  dataFrom: [{find: {name: {regexp: "^app/"}}}]
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: unicode-conversion}
spec:
  secretStoreRef: {name: fake}
  dataFrom: [{find: {name: {regexp: "^app/"}, conversionStrategy: Unicode}}]
"#;
    testenv::apply_yaml_in(&client, &ns, objects, true).await?;
    let want = |a: &str, b: &str| {
        BTreeMap::from([(a.to_owned(), b"1".to_vec()), (b.to_owned(), b"2".to_vec())])
    };
    wait_secret(
        &client,
        &ns,
        "default-conversion",
        &want("app_one", "app_two"),
    )
    .await?;
    wait_secret(
        &client,
        &ns,
        "unicode-conversion",
        &want("app_U002f_one", "app_U002f_two"),
    )
    .await?;
    Ok(())
}

async fn bad_references_are_named(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let (ns, before) = synced_namespace(&client, "sync-bad-refs").await?;
    let objects = r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: typo}
spec:
  secretStoreRef: {name: fakee}
  data: [{secretKey: user, remoteRef: {key: user}}]
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: rival}
spec:
  secretStoreRef: {name: fake}
  target: {name: app-secret}
  data: [{secretKey: user, remoteRef: {key: user}}]
"#;
    testenv::apply_yaml_in(&client, &ns, objects, true).await?;
    // As ESO: another ExternalSecret's Secret is refused whatever the creationPolicy, since
    // two of them writing one Secret would overwrite each other on every refresh.
    let rivals = ["Orphan", "Merge", "CreateOrMerge"];
    for policy in rivals {
        let rival = format!(
            "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: rival-{}}}\nspec:\n  secretStoreRef: {{name: fake}}\n  target: {{name: app-secret, creationPolicy: {policy}}}\n  data: [{{secretKey: other, remoteRef: {{key: user}}}}]\n",
            policy.to_lowercase()
        );
        testenv::apply_yaml_in(&client, &ns, &rival, true).await?;
    }
    let api: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let message = |name: &'static str| {
        let api = api.clone();
        async move {
            let es = wait_ready(name, "False", "SecretSyncedError", || async {
                Ok(serde_json::to_value(api.get(name).await?)?)
            })
            .await?;
            anyhow::Ok(
                es["status"]["conditions"][0]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        }
    };
    let typo = message("typo").await?;
    ensure!(
        typo == "SecretStore \"fakee\" does not exist",
        "message: {typo}"
    );
    for name in [
        "rival",
        "rival-orphan",
        "rival-merge",
        "rival-createormerge",
    ] {
        let rival = message(name).await?;
        ensure!(
            rival.contains("spec.target.name")
                && rival.contains("controlled by ExternalSecret \"app\""),
            "{name}: {rival}"
        );
    }
    let after = Api::<Secret>::namespaced(client.clone(), &ns)
        .get("app-secret")
        .await?;
    ensure!(
        after.metadata.resource_version == before.metadata.resource_version,
        "the rival rewrote the Secret"
    );
    Ok(())
}
