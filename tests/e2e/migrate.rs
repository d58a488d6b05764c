//! `external-secrets migrate stores`, run as a user runs it (the binary, a kubeconfig) while the
//! operator works: Fake and Vault stores of both kinds move to providerRef and back with every
//! ExternalSecret Ready throughout and not one Secret rewritten. And `migrate storage`, through
//! the binary: a CRD of the test's own flipped from v1 to v2 storage, its objects moved in etcd.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use api::external_secret::ExternalSecret;
use api::store::{ClusterSecretStore, SecretStore};
use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client, ResourceExt};
use libtest_mimic::Trial;
use serde_json::Value;

use crate::operator::{TIMEOUT, ready};
use crate::sync::wait_secret;
use crate::{Env, trial};

const NAMESPACED: usize = 8;
const CLUSTER: usize = 2;
/// One store of another provider, on the shared Vault server.
const VAULT_STORE: &str = "vault-store";

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial(
            "migrate::stores_to_provider_ref_and_back_without_rewrites",
            env,
            there_and_back,
        ),
        trial(
            "migrate::storage_through_the_binary",
            env,
            storage_through_the_binary,
        ),
    ]
}

/// Runs the operator binary's `migrate stores` with `args`; its stdout, or an error with both
/// streams.
fn migrate(env: &Env, args: &[&str]) -> Result<String> {
    run_migrate(env, "stores", args)
}

/// Runs the operator binary's `migrate <what>` with `args`; its stdout, or an error with both
/// streams.
fn run_migrate(env: &Env, what: &str, args: &[&str]) -> Result<String> {
    let output = Command::new(env!("CARGO_BIN_EXE_external-secrets"))
        .args(["migrate", what, "--kubeconfig"])
        .arg(env.control_plane().kubeconfig_path())
        .args(args)
        .output()
        .with_context(|| format!("running external-secrets migrate {what}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    ensure!(
        output.status.success(),
        "migrate {what} {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(stdout)
}

fn store_yaml(kind: &str, name: &str, label: &str, value: &str) -> String {
    format!(
        "apiVersion: external-secrets.io/v1\nkind: {kind}\nmetadata: {{name: {name}, labels: {{migrate-test: {label}}}}}\nspec:\n  provider:\n    fake:\n      data: [{{key: k, value: {value}}}]\n"
    )
}

fn es_yaml(name: &str, kind: &str, store: &str) -> String {
    format!(
        "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: {name}}}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {{kind: {kind}, name: {store}}}\n  data: [{{secretKey: k, remoteRef: {{key: k}}}}]\n"
    )
}

/// The `spec.provider` of every store migrated, by name.
async fn inline_specs(client: &Client, ns: &str, label: &str) -> Result<BTreeMap<String, Value>> {
    let selector = ListParams::default().labels(&format!("migrate-test={label}"));
    let mut specs = BTreeMap::new();
    for s in Api::<SecretStore>::namespaced(client.clone(), ns)
        .list(&selector)
        .await?
    {
        specs.insert(s.name_any(), serde_json::to_value(&s.spec.provider)?);
    }
    for s in Api::<ClusterSecretStore>::all(client.clone())
        .list(&selector)
        .await?
    {
        specs.insert(s.name_any(), serde_json::to_value(&s.spec.store.provider)?);
    }
    Ok(specs)
}

async fn secret_versions(client: &Client, ns: &str) -> Result<BTreeMap<String, String>> {
    crate::restart::secret_versions(&Api::namespaced(client.clone(), ns)).await
}

/// The converted objects (Fake, and the Vault one): name → whether the store still owns them.
async fn fakes(client: &Client, ns: &str, label: &str) -> Result<BTreeMap<String, bool>> {
    use api::provider_kinds::Scope;
    let mut found = BTreeMap::new();
    for (descriptor, scope, names) in [
        (
            &api::providers::fake::DESCRIPTOR,
            Scope::Namespaced,
            (0..NAMESPACED).map(|i| format!("s{i}")).collect::<Vec<_>>(),
        ),
        (
            &api::providers::fake::DESCRIPTOR,
            Scope::Cluster,
            (0..CLUSTER).map(|i| format!("{label}-c{i}")).collect(),
        ),
        (
            &api::providers::vault::DESCRIPTOR,
            Scope::Namespaced,
            vec![VAULT_STORE.to_owned()],
        ),
    ] {
        let resource = descriptor.storage_resource(scope);
        let api: Api<DynamicObject> = match scope {
            api::provider_kinds::Scope::Namespaced => {
                Api::namespaced_with(client.clone(), ns, &resource)
            }
            api::provider_kinds::Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        for name in names {
            if let Some(o) = api.get_opt(&name).await? {
                let owned = !o.owner_references().is_empty()
                    && o.labels().contains_key(api::store::LABEL_CONVERTED_FROM);
                found.insert(name, owned);
            }
        }
    }
    Ok(found)
}

async fn there_and_back(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "migrate").await?;
    let label = ns.clone();
    for i in 0..NAMESPACED {
        let store = format!("s{i}");
        let yaml = store_yaml("SecretStore", &store, &label, &format!("v{i}"));
        testenv::apply_yaml_in(&client, &ns, &yaml, true).await?;
        let es = es_yaml(&format!("e{i}"), "SecretStore", &store);
        testenv::apply_yaml_in(&client, &ns, &es, true).await?;
    }
    for i in 0..CLUSTER {
        let store = format!("{label}-c{i}");
        let yaml = store_yaml("ClusterSecretStore", &store, &label, &format!("c{i}"));
        testenv::apply_yaml_in(&client, &ns, &yaml, true).await?;
        let es = es_yaml(&format!("c{i}"), "ClusterSecretStore", &store);
        testenv::apply_yaml_in(&client, &ns, &es, true).await?;
    }
    let vault = env.vault()?;
    let role_id = crate::vault::approle_for(
        vault,
        &client,
        &ns,
        testenv::TokenOptions::policies(&[ns.as_str()]),
    )
    .await?;
    vault
        .write_kv_v2(
            crate::vault::KV2,
            &format!("{ns}/k"),
            &serde_json::json!({"k": "from-vault"}),
        )
        .await?;
    let vault_store = crate::vault::approle_store(vault, VAULT_STORE, &role_id, "v2").replace(
        &format!("name: {VAULT_STORE}}}"),
        &format!("name: {VAULT_STORE}, labels: {{migrate-test: {label}}}}}"),
    );
    testenv::apply_yaml_in(&client, &ns, &vault_store, true).await?;
    let from_vault = es_yaml("ev", "SecretStore", VAULT_STORE)
        .replace("key: k}", &format!("key: {ns}/k, property: k}}"));
    testenv::apply_yaml_in(&client, &ns, &from_vault, true).await?;
    let want = BTreeMap::from([("k".to_owned(), b"from-vault".to_vec())]);
    wait_secret(&client, &ns, "ev", &want).await?;
    for i in 0..NAMESPACED {
        let want = BTreeMap::from([("k".to_owned(), format!("v{i}").into_bytes())]);
        wait_secret(&client, &ns, &format!("e{i}"), &want).await?;
    }
    for i in 0..CLUSTER {
        let want = BTreeMap::from([("k".to_owned(), format!("c{i}").into_bytes())]);
        wait_secret(&client, &ns, &format!("c{i}"), &want).await?;
    }
    let total = NAMESPACED + CLUSTER + 1;
    // The operator converts asynchronously; migrate refuses until it has.
    testenv::wait_for(TIMEOUT, "every store's converted object", || async {
        let found = fakes(&client, &ns, &label).await?;
        if found.len() == total && found.values().all(|owned| *owned) {
            Ok(())
        } else {
            Err(anyhow!("{found:?}"))
        }
    })
    .await?;
    let original = inline_specs(&client, &ns, &label).await?;
    let versions = secret_versions(&client, &ns).await?;
    ensure!(versions.len() == total, "{versions:?}");
    let selector = format!("migrate-test={label}");
    let all = ["--all-namespaces", "--selector", selector.as_str()];

    // A dry run and the GitOps output change nothing.
    let dry = migrate(&env, &[&all[..], &["--dry-run"]].concat())?;
    ensure!(
        dry.matches(": would spec.provider moved to providerRef")
            .count()
            == total,
        "{dry}"
    );
    let yaml = migrate(&env, &[&all[..], &["-o", "yaml"]].concat())?;
    let docs = testenv::parse_yaml(&yaml)?;
    ensure!(docs.len() == 2 * total, "{} documents:\n{yaml}", docs.len());
    ensure!(
        docs.iter()
            .filter(|d| d["kind"] == "SecretStore" || d["kind"] == "ClusterSecretStore")
            .all(|d| d["spec"]["providerRef"]["name"].is_string()
                && d["spec"].get("provider").is_none()),
        "{yaml}"
    );
    ensure!(inline_specs(&client, &ns, &label).await? == original);

    // Watch the ExternalSecrets while it runs.
    let stop = Arc::new(AtomicBool::new(false));
    let seen_not_ready = Arc::new(Mutex::new(Vec::new()));
    let watcher = {
        let (client, ns, stop, seen) = (
            client.clone(),
            ns.clone(),
            stop.clone(),
            seen_not_ready.clone(),
        );
        tokio::spawn(async move {
            let api: Api<ExternalSecret> = Api::namespaced(client, &ns);
            while !stop.load(Ordering::Relaxed) {
                if let Ok(list) = api.list(&ListParams::default()).await {
                    for es in list {
                        let value = serde_json::to_value(&es).unwrap_or_default();
                        if ready(&value).is_none_or(|c| c.status.as_str() != "True") {
                            seen.lock().unwrap().push(es.name_any());
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let report = migrate(&env, &all)?;
    ensure!(
        report.contains(&format!("{total} changed, 0 unchanged, 0 refused")),
        "{report}"
    );
    let specs = inline_specs(&client, &ns, &label).await?;
    ensure!(
        specs.values().all(Value::is_null),
        "no store is inline: {specs:?}"
    );
    // Time for the stores to revalidate and the ExternalSecrets to resync on the store change.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let found = fakes(&client, &ns, &label).await?;
    ensure!(
        found.len() == total && found.values().all(|owned| !owned),
        "every converted object is kept and released: {found:?}"
    );
    ensure!(
        secret_versions(&client, &ns).await? == versions,
        "no Secret was rewritten"
    );
    let again = migrate(&env, &all)?;
    ensure!(
        again.contains(&format!("0 changed, {total} unchanged, 0 refused")),
        "{again}"
    );

    let back = migrate(&env, &[&all[..], &["--to", "inline"]].concat())?;
    ensure!(
        back.contains(&format!("{total} changed, 0 unchanged, 0 refused")),
        "{back}"
    );
    ensure!(
        inline_specs(&client, &ns, &label).await? == original,
        "the inline providers are back as they were"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let found = fakes(&client, &ns, &label).await?;
    ensure!(
        found.len() == total && found.values().all(|owned| *owned),
        "every object is owned by its store again: {found:?}"
    );
    ensure!(
        secret_versions(&client, &ns).await? == versions,
        "no Secret was rewritten on the way back"
    );
    stop.store(true, Ordering::Relaxed);
    watcher.await?;
    let seen = seen_not_ready.lock().unwrap().clone();
    ensure!(
        seen.is_empty(),
        "ExternalSecrets not Ready at some point: {seen:?}"
    );
    Ok(())
}

const STORAGE_GROUP: &str = "cli-storage-test.example.com";
const STORAGE_CRD: &str = "gadgets.cli-storage-test.example.com";

/// The test's CRD: `v1` storage, or `v1` still served and `v2` storage; same schema, no
/// conversion.
fn gadget_crd(flipped: bool) -> String {
    let version = |name: &str, storage: bool| {
        format!(
            "  - name: {name}\n    served: true\n    storage: {storage}\n    schema: {{openAPIV3Schema: {{type: object, properties: {{spec: {{type: object, properties: {{x: {{type: string}}}}}}}}}}}}\n"
        )
    };
    let mut versions = version("v1", !flipped);
    if flipped {
        versions += &version("v2", true);
    }
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: {STORAGE_CRD}}}\nspec:\n  group: {STORAGE_GROUP}\n  scope: Namespaced\n  names: {{kind: Gadget, plural: gadgets, singular: gadget}}\n  conversion: {{strategy: None}}\n  versions:\n{versions}"
    )
}

async fn gadget_stored_versions(client: &Client) -> Result<Vec<String>> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get(STORAGE_CRD)
        .await?;
    Ok(crd
        .status
        .and_then(|s| s.stored_versions)
        .unwrap_or_default())
}

/// `name → (resourceVersion, spec)` of the gadgets in `ns`, read at `version`.
async fn gadgets(
    client: &Client,
    ns: &str,
    version: &str,
) -> Result<BTreeMap<String, (Option<String>, Value)>> {
    let resource = kube::api::ApiResource {
        group: STORAGE_GROUP.into(),
        version: version.into(),
        api_version: format!("{STORAGE_GROUP}/{version}"),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|o| (o.name_any(), (o.resource_version(), o.data["spec"].clone())))
        .collect())
}

/// The apiVersion etcd holds each gadget of `ns` at.
fn gadgets_in_etcd(
    env: &Env,
    ns: &str,
    names: impl Iterator<Item = String>,
) -> Result<Vec<String>> {
    names
        .map(|name| {
            let key = format!("/registry/{STORAGE_GROUP}/gadgets/{ns}/{name}");
            let raw = env
                .control_plane()
                .etcd_get(&key)?
                .ok_or_else(|| anyhow!("etcd has no {key}"))?;
            let stored: Value = serde_json::from_slice(&raw)?;
            Ok(stored["apiVersion"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

async fn storage_through_the_binary(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    // The provider CRDs as installed are at their storage version only.
    let fake = run_migrate(&env, "storage", &["--kind", "fake"])?;
    ensure!(
        fake.matches("], nothing to do").count() == 2,
        "both Fake CRDs are up to date:\n{fake}"
    );
    let unknown = Command::new(env!("CARGO_BIN_EXE_external-secrets"))
        .args(["migrate", "storage", "--kind", "Nope", "--kubeconfig"])
        .arg(env.control_plane().kubeconfig_path())
        .output()?;
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    ensure!(
        !unknown.status.success() && stderr.contains("unknown provider kind \"Nope\" (known: Fake"),
        "{stderr}"
    );

    testenv::apply_yaml(&client, &gadget_crd(false), true).await?;
    testenv::wait_for_crd_established(&client, STORAGE_CRD, TIMEOUT).await?;
    let ns = testenv::create_namespace(&client, "storage-cli").await?;
    let objects: String = (0..4)
        .map(|i| {
            format!(
                "---\napiVersion: {STORAGE_GROUP}/v1\nkind: Gadget\nmetadata: {{name: g{i}}}\nspec: {{x: \"value {i}\"}}\n"
            )
        })
        .collect();
    // The kind's discovery may lag a moment behind Established.
    testenv::wait_for(TIMEOUT, "gadgets written", || {
        testenv::apply_yaml_in(&client, &ns, &objects, true)
    })
    .await?;
    let before = gadgets(&client, &ns, "v1").await?;
    ensure!(before.len() == 4, "{before:?}");

    testenv::apply_yaml(&client, &gadget_crd(true), true).await?;
    ensure!(gadget_stored_versions(&client).await? == ["v1", "v2"]);
    let dry = run_migrate(&env, "storage", &["--crd", STORAGE_CRD, "--dry-run"])?;
    ensure!(
        dry.matches(": would rewrite at v2").count() == 4
            && dry.contains("storedVersions [v1, v2] → [v2]"),
        "{dry}"
    );
    ensure!(gadget_stored_versions(&client).await? == ["v1", "v2"]);
    ensure!(
        gadgets(&client, &ns, "v1").await? == before,
        "the dry run wrote"
    );

    let run = run_migrate(&env, "storage", &["--crd", STORAGE_CRD])?;
    ensure!(
        run.contains("storedVersions [v1, v2] → [v2] (4 rewritten, 0 already at v2"),
        "{run}"
    );
    ensure!(gadget_stored_versions(&client).await? == ["v2"]);
    let after = gadgets(&client, &ns, "v2").await?;
    for (name, (version, spec)) in &before {
        let (new_version, new_spec) = &after[name];
        ensure!(new_spec == spec, "{name}: spec changed");
        ensure!(new_version != version, "{name}: not written");
    }
    let stored = gadgets_in_etcd(&env, &ns, before.keys().cloned())?;
    ensure!(
        stored.iter().all(|v| *v == format!("{STORAGE_GROUP}/v2")),
        "etcd holds {stored:?}"
    );
    let again = run_migrate(&env, "storage", &["--crd", STORAGE_CRD])?;
    ensure!(
        again.contains("storedVersions [v2], nothing to do"),
        "{again}"
    );
    ensure!(gadgets(&client, &ns, "v2").await? == after);
    Ok(())
}
