//! Stores and provider objects: design 007's conversion, providerRef, referents, conditions,
//! provider kinds installed while the operator runs.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow, ensure};
use api::external_secret::ExternalSecret;
use api::provider_kinds::Scope;
use api::store::{ClusterSecretStore, SecretStore};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use libtest_mimic::Trial;
use serde_json::{Value, json};

use crate::operator::{TIMEOUT, ready_message, wait_event, wait_ready};
use crate::sync::{STORE, synced_namespace};
use crate::{Env, trial};

/// Not installed by the set-up: `provider_installed_later` installs it.
pub const LATE_CRD: &str = "fakes.cluster.providers.external-secrets.io";
pub const LATE_TRIAL: &str = "stores::provider_installed_later";

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        // First, so that it runs while the cluster Fake kind is still missing.
        trial(LATE_TRIAL, env, provider_installed_later),
        trial(
            "stores::inline_provider_becomes_an_owned_object",
            env,
            inline_provider_object,
        ),
        trial(
            "stores::switch_to_provider_ref_keeps_the_secret",
            env,
            switch_to_provider_ref,
        ),
        trial(
            "stores::cluster_store_from_two_namespaces_and_conditions",
            env,
            cluster_store,
        ),
        trial(
            "stores::validation_result_and_invalid_provider",
            env,
            validation,
        ),
        trial(
            "stores::ready_late_wakes_its_users_at_once",
            env,
            ready_late_wakes_users,
        ),
        trial(
            "stores::a_deleted_stores_client_is_closed_at_once",
            env,
            deleted_store_client_closed,
        ),
        trial(
            "stores::other_controller_class_is_left_alone",
            env,
            other_class,
        ),
        trial(
            "stores::single_namespace_operator_with_its_own_class",
            env,
            single_namespace_operator,
        ),
        trial(
            "stores::a_provider_uninstalled_and_installed_again",
            env,
            provider_uninstalled,
        ),
    ]
}

fn fake_resource(cluster: bool) -> ApiResource {
    let scope = if cluster {
        Scope::Cluster
    } else {
        Scope::Namespaced
    };
    api::providers::fake::DESCRIPTOR.storage_resource(scope)
}

fn fakes(client: &Client, ns: Option<&str>) -> Api<DynamicObject> {
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &fake_resource(false)),
        None => Api::all_with(client.clone(), &fake_resource(true)),
    }
}

async fn store_value(client: &Client, ns: &str, name: &str) -> Result<Value> {
    let api: Api<SecretStore> = Api::namespaced(client.clone(), ns);
    Ok(serde_json::to_value(api.get(name).await?)?)
}

async fn cluster_store_value(client: &Client, name: &str) -> Result<Value> {
    let api: Api<ClusterSecretStore> = Api::all(client.clone());
    Ok(serde_json::to_value(api.get(name).await?)?)
}

async fn wait_fake_data(
    api: &Api<DynamicObject>,
    name: &str,
    want: &Value,
) -> Result<DynamicObject> {
    testenv::wait_for(TIMEOUT, &format!("Fake {name} to hold {want}"), || async {
        let obj = api.get(name).await?;
        if &obj.data["spec"]["data"] == want {
            Ok(obj)
        } else {
            Err(anyhow!("spec.data is {}", obj.data["spec"]["data"]))
        }
    })
    .await
}

async fn inline_provider_object(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "store-inline").await?;
    let store = r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: inline}
spec:
  provider:
    fake:
      data: [{key: a, value: "1"}]
"#;
    testenv::apply_yaml_in(&client, &ns, store, true).await?;
    let api = fakes(&client, Some(&ns));
    let obj = wait_fake_data(&api, "inline", &json!([{"key": "a", "value": "1"}])).await?;
    let stored = store_value(&client, &ns, "inline").await?;
    let owners = obj.owner_references();
    ensure!(
        owners.len() == 1
            && owners[0].kind == "SecretStore"
            && owners[0].name == "inline"
            && owners[0].controller == Some(true)
            && Some(owners[0].uid.as_str()) == stored["metadata"]["uid"].as_str(),
        "owner references: {owners:?}"
    );
    let stored = wait_ready("SecretStore inline", "True", "Valid", || {
        store_value(&client, &ns, "inline")
    })
    .await?;
    ensure!(
        stored["status"]["capabilities"] == "ReadWrite",
        "capabilities: {stored}"
    );
    wait_ready("Fake inline", "True", "Valid", || async {
        Ok(serde_json::to_value(api.get("inline").await?)?)
    })
    .await?;

    // A change to spec.provider propagates.
    testenv::apply_yaml_in(
        &client,
        &ns,
        &store.replace(r#"value: "1""#, r#"value: "2""#),
        true,
    )
    .await?;
    wait_fake_data(&api, "inline", &json!([{"key": "a", "value": "2"}])).await?;

    // A hand edit of the generated object is put back.
    let edit = json!({"spec": {"data": [{"key": "a", "value": "edited"}]}});
    api.patch("inline", &PatchParams::default(), &Patch::Merge(&edit))
        .await?;
    if let Err(e) = wait_fake_data(&api, "inline", &json!([{"key": "a", "value": "2"}])).await {
        // Failed once in ten full suites: what the store and the object said then.
        let store = store_value(&client, &ns, "inline").await?;
        let fake = api.get("inline").await?;
        let managers: Vec<_> = fake
            .managed_fields()
            .iter()
            .map(|f| (f.manager.clone(), f.operation.clone(), f.time.clone()))
            .collect();
        return Err(e.context(format!(
            "store status {}; Fake generation {:?}, status {}, managed by {managers:?}",
            store["status"], fake.metadata.generation, fake.data["status"]
        )));
    }

    // So is a field added by hand that the store does not set: the object holds the store's
    // spec and nothing else, and the store stays Ready.
    let added = json!({"spec": {"validationResult": 2}});
    api.patch("inline", &PatchParams::default(), &Patch::Merge(&added))
        .await?;
    let want = json!({"data": [{"key": "a", "value": "2"}]});
    testenv::wait_for(TIMEOUT, "the field added by hand to be removed", || async {
        let spec = api.get("inline").await?.data["spec"].clone();
        ensure!(spec == want, "spec is {spec}");
        anyhow::Ok(())
    })
    .await?;
    wait_ready("SecretStore inline", "True", "Valid", || {
        store_value(&client, &ns, "inline")
    })
    .await?;

    // Deleting the store removes it.
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), &ns);
    stores.delete("inline", &DeleteParams::default()).await?;
    testenv::wait_for(
        TIMEOUT,
        "the generated Fake to be deleted with its store",
        || async {
            match api.get_opt("inline").await? {
                None => Ok(()),
                Some(_) => Err(anyhow!("Fake inline still exists")),
            }
        },
    )
    .await
}

async fn switch_to_provider_ref(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let (ns, before) = synced_namespace(&client, "store-switch").await?;
    let es_api: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let refreshed_before = es_api
        .get("app")
        .await?
        .status
        .and_then(|s| s.refresh_time)
        .map(|t| t.0);
    // refreshTime has a resolution of one second.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    // The same data, now in a provider object of its own, and the store pointing at it.
    let spec = &testenv::parse_yaml(STORE)?[0]["spec"]["provider"]["fake"];
    let standalone = json!({
        "apiVersion": "providers.external-secrets.io/v1alpha1",
        "kind": "Fake",
        "metadata": {"name": "standalone"},
        "spec": spec,
    });
    testenv::apply_yaml_in(&client, &ns, &serde_yaml::to_string(&standalone)?, true).await?;
    let switched = json!({
        "apiVersion": "external-secrets.io/v1",
        "kind": "SecretStore",
        "metadata": {"name": "fake"},
        "spec": {"providerRef": {"apiVersion": "providers.external-secrets.io/v1alpha1", "kind": "Fake", "name": "standalone"}},
    });
    testenv::apply_yaml_in(&client, &ns, &serde_yaml::to_string(&switched)?, true).await?;

    let generated = fakes(&client, Some(&ns));
    testenv::wait_for(
        TIMEOUT,
        "the Fake converted from spec.provider to be removed",
        || async {
            match generated.get_opt("fake").await? {
                None => Ok(()),
                Some(_) => Err(anyhow!("Fake fake still exists")),
            }
        },
    )
    .await?;
    wait_ready("SecretStore fake", "True", "Valid", || {
        store_value(&client, &ns, "fake")
    })
    .await?;
    // The store change makes the ExternalSecret sync again, through the new provider object.
    testenv::wait_for(
        TIMEOUT,
        "the ExternalSecret to sync after the switch",
        || async {
            let es = es_api.get("app").await?;
            let refreshed = es
                .status
                .as_ref()
                .and_then(|s| s.refresh_time.as_ref())
                .map(|t| t.0);
            let ready = es
                .status
                .as_ref()
                .and_then(|s| api::conditions::find(&s.conditions, "Ready"))
                .map(|c| c.status.as_str());
            if refreshed > refreshed_before && ready == Some("True") {
                Ok(())
            } else {
                Err(anyhow!("refreshTime {refreshed:?}, Ready {ready:?}"))
            }
        },
    )
    .await?;
    let after = Api::<Secret>::namespaced(client.clone(), &ns)
        .get("app-secret")
        .await?;
    ensure!(
        after.metadata.resource_version == before.metadata.resource_version,
        "the switch rewrote the Secret"
    );
    Ok(())
}

async fn late_crd(client: &Client) -> Result<()> {
    testenv::wait_for_crd_established(client, LATE_CRD, Duration::from_secs(120)).await
}

async fn provider_installed_later(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let name = format!("late-{}", testenv::create_namespace(&client, "late").await?);
    let store = json!({
        "apiVersion": "external-secrets.io/v1",
        "kind": "ClusterSecretStore",
        "metadata": {"name": name},
        "spec": {"provider": {"fake": {"data": [{"key": "k", "value": "v"}]}}},
    });
    testenv::apply_yaml(&client, &serde_yaml::to_string(&store)?, true).await?;
    let css = wait_ready(
        "ClusterSecretStore",
        "False",
        "ProviderNotInstalled",
        || cluster_store_value(&client, &name),
    )
    .await?;
    let message = css["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ensure!(
        message.contains(LATE_CRD),
        "message names the CRD: {message}"
    );

    let crd = std::fs::read_to_string(Env::path(format!("crds/{LATE_CRD}.yaml")))?;
    testenv::apply_yaml(&client, &crd, true).await?;
    late_crd(&client).await?;
    wait_ready("ClusterSecretStore", "True", "Valid", || {
        cluster_store_value(&client, &name)
    })
    .await?;
    let obj = fakes(&client, None).get(&name).await?;
    ensure!(
        obj.owner_references()
            .first()
            .is_some_and(|o| o.kind == "ClusterSecretStore"),
        "owner of the cluster Fake"
    );
    // The cluster-scoped kind's own reconciler, started when its CRD appeared, validates it.
    let cluster_fakes = fakes(&client, None);
    wait_ready("cluster Fake", "True", "Valid", || async {
        Ok(serde_json::to_value(cluster_fakes.get(&name).await?)?)
    })
    .await?;
    Ok(())
}

async fn cluster_store(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    late_crd(&client).await?;
    let ns_a = testenv::create_namespace(&client, "css-a").await?;
    let ns_b = testenv::create_namespace(&client, "css-b").await?;
    let ns_denied = testenv::create_namespace(&client, "css-denied").await?;
    let name = format!("shared-{ns_a}");
    let store = json!({
        "apiVersion": "external-secrets.io/v1",
        "kind": "ClusterSecretStore",
        "metadata": {"name": name},
        "spec": {
            "provider": {"fake": {"data": [{"key": "k", "value": "v"}]}},
            "conditions": [{"namespaces": [ns_a]}, {"namespaceRegexes": [format!("^{ns_b}$")]}],
        },
    });
    testenv::apply_yaml(&client, &serde_yaml::to_string(&store)?, true).await?;
    wait_ready("ClusterSecretStore", "True", "Valid", || {
        cluster_store_value(&client, &name)
    })
    .await?;
    let series = format!(
        "clustersecretstore_status_condition{{name=\"{name}\",namespace=\"\",condition=\"Ready\",status=\"True\"}}"
    );
    testenv::wait_for(
        TIMEOUT,
        "the ClusterSecretStore condition metric",
        || async {
            let metrics = crate::operator::scrape(env.metrics_addr()).await?;
            crate::operator::sample(&metrics, &series)
                .filter(|v| *v == 1.0)
                .ok_or_else(|| anyhow!("no {series} = 1"))
        },
    )
    .await?;
    let es = |ns: &str| {
        json!({
            "apiVersion": "external-secrets.io/v1",
            "kind": "ExternalSecret",
            "metadata": {"name": "from-cluster", "namespace": ns},
            "spec": {
                "secretStoreRef": {"name": name, "kind": "ClusterSecretStore"},
                "data": [{"secretKey": "k", "remoteRef": {"key": "k"}}],
            },
        })
    };
    let want = std::collections::BTreeMap::from([("k".to_owned(), b"v".to_vec())]);
    for ns in [&ns_a, &ns_b] {
        testenv::apply_yaml_in(&client, ns, &serde_yaml::to_string(&es(ns))?, true).await?;
        crate::sync::wait_secret(&client, ns, "from-cluster", &want).await?;
    }
    testenv::apply_yaml_in(
        &client,
        &ns_denied,
        &serde_yaml::to_string(&es(&ns_denied))?,
        true,
    )
    .await?;
    let es_api: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns_denied);
    let denied = wait_ready(
        "ExternalSecret in the denied namespace",
        "False",
        "SecretSyncedError",
        || async { Ok(serde_json::to_value(es_api.get("from-cluster").await?)?) },
    )
    .await?;
    let message = denied["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let eso = format!(
        "using cluster store \"{name}\" is not allowed from namespace \"{ns_denied}\": denied by spec.condition"
    );
    ensure!(
        message.contains(&eso),
        "message {message:?} lacks ESO's text {eso:?}"
    );
    ensure!(
        Api::<Secret>::namespaced(client.clone(), &ns_denied)
            .get_opt("from-cluster")
            .await?
            .is_none(),
        "a Secret was written in the denied namespace"
    );
    Ok(())
}

async fn validation(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "store-validation").await?;
    let objects = r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: failing}
spec:
  provider: {fake: {data: [], validationResult: 2}}
---
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: unknown}
spec:
  provider: {fake: {data: [], validationResult: 1}}
---
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: retrying}
spec:
  retrySettings: {maxRetries: 3, retryInterval: 10s}
  provider: {fake: {data: []}}
---
apiVersion: providers.external-secrets.io/v1alpha1
kind: Fake
metadata: {name: no-value}
spec:
  data: [{key: a}]
"#;
    testenv::apply_yaml_in(&client, &ns, objects, true).await?;
    // ESO's retrySettings is accepted and has no effect here, and the store says so.
    let retrying = wait_ready("SecretStore retrying", "True", "Valid", || {
        store_value(&client, &ns, "retrying")
    })
    .await?;
    let message = ready_message(&retrying);
    ensure!(
        message.starts_with("store validated; warnings: spec.retrySettings is not used: "),
        "{message}"
    );
    wait_event(&client, &ns, "retrying", "ProviderWarning").await?;
    wait_ready("SecretStore failing", "False", "ValidationFailed", || {
        store_value(&client, &ns, "failing")
    })
    .await?;
    wait_ready("SecretStore unknown", "True", "ValidationUnknown", || {
        store_value(&client, &ns, "unknown")
    })
    .await?;
    let api = fakes(&client, Some(&ns));
    let obj = wait_ready(
        "Fake no-value",
        "False",
        "InvalidProviderConfig",
        || async { Ok(serde_json::to_value(api.get("no-value").await?)?) },
    )
    .await?;
    let message = obj["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ensure!(
        message.contains("data[0].value"),
        "message names the field: {message}"
    );
    wait_event(&client, &ns, "failing", "ValidationFailed").await?;
    Ok(())
}

async fn other_class(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "store-class").await?;
    let objects = r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: theirs}
spec:
  controller: someone-else
  provider: {fake: {data: []}}
---
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: ours}
spec:
  controller: default
  provider: {fake: {data: []}}
"#;
    testenv::apply_yaml_in(&client, &ns, objects, true).await?;
    // Once ours is validated, theirs has long been seen by the same controller.
    wait_ready("SecretStore ours", "True", "Valid", || {
        store_value(&client, &ns, "ours")
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let theirs = store_value(&client, &ns, "theirs").await?;
    ensure!(
        theirs.get("status").is_none_or(Value::is_null),
        "a store of another class got status: {theirs}"
    );
    ensure!(
        fakes(&client, Some(&ns)).get_opt("theirs").await?.is_none(),
        "a store of another class was converted"
    );
    Ok(())
}

/// A second operator in single-namespace mode with its own controller class: it handles its
/// class in its namespace only, and the main operator leaves that class alone.
async fn single_namespace_operator(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "scoped").await?;
    let elsewhere = testenv::create_namespace(&client, "scoped-other").await?;
    let class = crate::operator::start_scoped(&env, &ns)?;
    let objects = format!(
        r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {{name: classy}}
spec:
  controller: {class}
  provider: {{fake: {{data: [{{key: k, value: v}}]}}}}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: classy}}
spec:
  secretStoreRef: {{name: classy}}
  data: [{{secretKey: k, remoteRef: {{key: k}}}}]
"#
    );
    testenv::apply_yaml_in(&client, &ns, &objects, true).await?;
    testenv::apply_yaml_in(&client, &elsewhere, &objects, true).await?;
    wait_ready("SecretStore classy", "True", "Valid", || {
        store_value(&client, &ns, "classy")
    })
    .await?;
    let want = std::collections::BTreeMap::from([("k".to_owned(), b"v".to_vec())]);
    crate::sync::wait_secret(&client, &ns, "classy", &want).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let other = store_value(&client, &elsewhere, "classy").await?;
    ensure!(
        other.get("status").is_none_or(Value::is_null),
        "a store outside the namespace got status: {other}"
    );
    ensure!(
        Api::<Secret>::namespaced(client.clone(), &elsewhere)
            .get_opt("classy")
            .await?
            .is_none(),
        "a Secret was written outside the operator's namespace"
    );
    Ok(())
}

/// A store whose provider object appears only after its ExternalSecret and PushSecret have
/// failed for a while: by then their backoff is long, yet they sync as soon as the object is
/// there (provider object → store revalidated → store Ready → its users woken).
async fn ready_late_wakes_users(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "late").await?;
    let manifests = r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: late}
spec:
  providerRef: {apiVersion: providers.external-secrets.io/v1alpha1, kind: Fake, name: late}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: waiting}
spec:
  refreshInterval: 1h
  secretStoreRef: {name: late}
  data: [{secretKey: user, remoteRef: {key: user}}]
---
apiVersion: v1
kind: Secret
metadata: {name: src}
stringData: {token: t0k}
---
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {name: waiting}
spec:
  refreshInterval: 1h
  secretStoreRefs: [{name: late, kind: SecretStore}]
  selector: {secret: {name: src}}
  data: [{match: {secretKey: token, remoteRef: {remoteKey: pushed}}}]
"#;
    testenv::apply_yaml_in(&client, &ns, manifests, true).await?;
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), &ns);
    wait_ready(
        "SecretStore late",
        "False",
        "InvalidProviderConfig",
        || async { Ok(serde_json::to_value(stores.get("late").await?)?) },
    )
    .await?;
    // Failures back off 1, 2, 4, 9, 14, 24 s...: after this long the next retry is far off.
    tokio::time::sleep(Duration::from_secs(25)).await;
    let provider = r#"
apiVersion: providers.external-secrets.io/v1alpha1
kind: Fake
metadata: {name: late}
spec:
  data: [{key: user, value: alice}]
"#;
    testenv::apply_yaml_in(&client, &ns, provider, true).await?;
    let appeared = std::time::Instant::now();
    let soon = Duration::from_secs(8);
    let externalsecrets: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let pushsecrets: Api<api::push_secret::PushSecret> = Api::namespaced(client.clone(), &ns);
    testenv::wait_for(
        soon,
        "the ExternalSecret and the PushSecret to sync",
        || async {
            let es = serde_json::to_value(externalsecrets.get("waiting").await?)?;
            let ps = serde_json::to_value(pushsecrets.get("waiting").await?)?;
            let status = |o: &Value| crate::operator::ready(o).map(|c| c.status);
            match (status(&es), status(&ps)) {
                (Some(a), Some(b)) if a.as_str() == "True" && b.as_str() == "True" => Ok(()),
                other => Err(anyhow!("Ready of ExternalSecret, PushSecret: {other:?}")),
            }
        },
    )
    .await?;
    let secrets: Api<Secret> = Api::namespaced(client, &ns);
    let secret = secrets.get("waiting").await?;
    ensure!(
        secret
            .data
            .unwrap_or_default()
            .get("user")
            .map(|v| v.0.as_slice())
            == Some(b"alice"),
        "the Secret holds the provider object's value"
    );
    eprintln!(
        "synced {:?} after the provider object appeared",
        appeared.elapsed()
    );
    Ok(())
}

/// A store deleted with its ExternalSecrets leaves no client behind: its converted provider
/// object goes with it, and the client built from that object is closed when the watch sees it
/// go, not at the idle eviction a quarter of an hour later. An operator of its own, for one
/// namespace, so that its evictions are this trial's alone.
async fn deleted_store_client_closed(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "closed").await?;
    let class = format!("closed-{ns}");
    testenv::apply_yaml_in(&client, &ns, &crate::leader::class_store(&class), true).await?;
    let operator = crate::restart::Operator::start_with(&env, &ns, &class, &["--disable-webhook"])?;
    let es = "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {name: reader}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {name: fake}\n  data: [{secretKey: user, remoteRef: {key: user}}]\n";
    testenv::apply_yaml_in(&client, &ns, es, true).await?;
    let externalsecrets: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    crate::restart::every_one_ready(&externalsecrets).await?;
    let closed = || {
        operator.sum("clientmanager_cache_evictions_total", |l| {
            l.contains("reason=\"deleted\"")
        })
    };
    ensure!(
        closed().await? == 0.0,
        "a client was closed before any delete"
    );
    externalsecrets
        .delete("reader", &DeleteParams::default())
        .await?;
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), &ns);
    stores.delete("fake", &DeleteParams::default()).await?;
    testenv::wait_for(
        Duration::from_secs(30),
        "the deleted store's client to be closed",
        || async {
            if closed().await? > 0.0 {
                Ok(())
            } else {
                Err(anyhow!("no client closed for a deleted provider object"))
            }
        },
    )
    .await?;
    operator.stop();
    Ok(())
}

/// A provider uninstalled with its CRD while the operator runs: its store says the provider is
/// not installed and its Secret stays as it was; installed again, the store is Ready and the
/// ExternalSecret syncs within seconds, without a restart of the operator.
async fn provider_uninstalled(_env: Arc<Env>) -> Result<()> {
    const CRD: &str = "fakes.providers.external-secrets.io";
    // A cluster of its own: the trial deletes a CRD the others use.
    let cp = tokio::task::spawn_blocking(testenv::ControlPlane::start).await??;
    let client = cp.client().await;
    testenv::install_crds(&client, Env::path("crds")).await?;
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    crate::operator::start_for(cp.client_config(), Default::default(), async move {
        let _ = stopped.await;
    })?;
    let ns = testenv::create_namespace(&client, "uninstalled").await?;
    testenv::apply_yaml_in(&client, &ns, STORE, true).await?;
    testenv::apply_yaml_in(&client, &ns, crate::sync::ES, true).await?;
    let before =
        crate::sync::wait_secret(&client, &ns, "app-secret", &crate::sync::expected()).await?;

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete(CRD, &DeleteParams::default()).await?;
    testenv::wait_for(TIMEOUT, "the Fake CRD to be gone", || async {
        match crds.get_opt(CRD).await? {
            None => Ok(()),
            Some(_) => Err(anyhow!("still there")),
        }
    })
    .await?;
    let store = wait_ready("SecretStore fake", "False", "ProviderNotInstalled", || {
        store_value(&client, &ns, "fake")
    })
    .await?;
    let message = ready_message(&store);
    ensure!(message.contains(CRD), "the store names the CRD: {message}");

    let crd = std::fs::read_to_string(Env::path(format!("crds/{CRD}.yaml")))?;
    testenv::apply_yaml(&client, &crd, true).await?;
    testenv::wait_for_crd_established(&client, CRD, TIMEOUT).await?;
    let installed = std::time::Instant::now();
    wait_ready("SecretStore fake", "True", "Valid", || {
        store_value(&client, &ns, "fake")
    })
    .await?;
    let back = installed.elapsed();
    ensure!(
        back < Duration::from_secs(15),
        "the store was Ready {back:?} after its provider was installed again"
    );
    // Its converted object is back, and the ExternalSecret reads through it.
    fakes(&client, Some(&ns)).get("fake").await?;
    let externals: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    externals
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"force-sync": "1"}}})),
        )
        .await?;
    wait_ready("ExternalSecret app", "True", "SecretSynced", || async {
        Ok(serde_json::to_value(externals.get("app").await?)?)
    })
    .await?;
    let after = Api::<Secret>::namespaced(client.clone(), &ns)
        .get("app-secret")
        .await?;
    ensure!(
        crate::sync::data_of(&after) == crate::sync::data_of(&before),
        "the Secret kept its bytes through the provider's absence"
    );
    Ok(())
}
