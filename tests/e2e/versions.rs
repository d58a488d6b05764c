//! A provider kind with two versions (Vault v1alpha1 and v1beta1) served through the conversion
//! webhook: the real API server converts between them, and a store naming either version works.
//! `Gitlab`'s two versions are tried in `gitlab.rs`, against the GitLab stand-in.

use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, PostParams};
use libtest_mimic::Trial;
use serde_json::json;

use crate::operator::wait_ready;
use crate::sync::wait_secret;
use crate::{Env, trial};

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial(
            "versions::vault_objects_read_at_either_version",
            env,
            either_version,
        ),
        trial("versions::a_store_naming_v1beta1_syncs", env, v1beta1_store),
        trial(
            "versions::storage_moves_to_v1beta1_without_a_sync_failing",
            env,
            storage_flip,
        ),
        trial(
            "versions::a_version_no_longer_served_is_watched_anew",
            env,
            version_dropped,
        ),
    ]
}

fn resource(version: &str) -> ApiResource {
    api::providers::vault::DESCRIPTOR.resource(api::provider_kinds::Scope::Namespaced, version)
}

async fn either_version(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "versions").await?;
    let beta: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource("v1beta1"));
    let alpha: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &resource("v1alpha1"));

    // Written at v1beta1, read at v1alpha1 (the storage version) in ESO's shape.
    let written: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "providers.external-secrets.io/v1beta1",
        "kind": "Vault",
        "metadata": {"name": "beta"},
        "spec": {
            "server": "https://vault.example:8200",
            "kv": {"mountPath": "secret", "version": 1},
            "auth": {"tokenSecretRef": {"name": "vault-token", "key": "token"}},
        },
    }))?;
    beta.create(&PostParams::default(), &written).await?;
    let read = alpha.get("beta").await?;
    ensure!(
        read.data["spec"]["path"] == "secret" && read.data["spec"]["version"] == "v1",
        "v1alpha1 view: {}",
        read.data["spec"]
    );

    // Written at v1alpha1 with two login methods (ESO uses the first); v1beta1 holds one and
    // keeps the other aside, so reading back at v1alpha1 loses nothing.
    let spec = json!({
        "server": "https://vault.example:8200",
        "path": "kv",
        "version": "v2",
        "auth": {
            "tokenSecretRef": {"name": "vault-token", "key": "token"},
            "appRole": {"path": "approle", "roleId": "r", "secretRef": {"name": "a", "key": "id"}},
        },
    });
    let written: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "providers.external-secrets.io/v1alpha1",
        "kind": "Vault",
        "metadata": {"name": "alpha"},
        "spec": spec,
    }))?;
    alpha.create(&PostParams::default(), &written).await?;
    let as_beta = beta.get("alpha").await?;
    ensure!(
        as_beta.data["spec"]["kv"]["mountPath"] == "kv",
        "v1beta1 view: {}",
        as_beta.data["spec"]
    );
    let back = alpha.get("alpha").await?;
    ensure!(
        back.data["spec"] == spec,
        "round trip: {}",
        back.data["spec"]
    );

    // A list at the newer version converts every object, also as kubectl asks for it.
    let listed = beta.list(&Default::default()).await?;
    ensure!(listed.items.len() == 2, "listed {}", listed.items.len());
    let printed = crate::kubectl::kubectl(
        &env,
        &[
            "get",
            "vaults.v1beta1.providers.external-secrets.io",
            "-n",
            &ns,
            "-o",
            "jsonpath={.items[*].spec.kv.mountPath}",
        ],
    )?;
    ensure!(printed == "kv secret", "kubectl printed {printed:?}");
    Ok(())
}

async fn v1beta1_store(env: Arc<Env>) -> Result<()> {
    let vault = env.vault()?;
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "versions-store").await?;
    vault
        .write_kv_v2(
            crate::vault::KV2,
            &format!("{ns}/app"),
            &json!({"password": "pw-beta"}),
        )
        .await?;
    let yaml = format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: vault-token}}
stringData: {{token: {token}}}
---
apiVersion: providers.external-secrets.io/v1beta1
kind: Vault
metadata: {{name: vault-beta}}
spec:
  server: {server}
  kv: {{mountPath: {kv}, version: 2}}
  auth: {{tokenSecretRef: {{name: vault-token, key: token}}}}
---
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {{name: beta}}
spec:
  providerRef: {{apiVersion: providers.external-secrets.io/v1beta1, kind: Vault, name: vault-beta}}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: app}}
spec:
  refreshInterval: 1h
  secretStoreRef: {{name: beta}}
  data: [{{secretKey: password, remoteRef: {{key: {ns}/app, property: password}}}}]
"#,
        token = vault.root_token(),
        server = vault.address(),
        kv = crate::vault::KV2,
    );
    testenv::apply_yaml_in(&client, &ns, &yaml, true).await?;
    let stores: Api<api::store::SecretStore> = Api::namespaced(client.clone(), &ns);
    wait_ready("SecretStore beta", "True", "Valid", || async {
        Ok(serde_json::to_value(stores.get("beta").await?)?)
    })
    .await
    .context("a store whose providerRef names v1beta1")?;
    let want = [("password".to_owned(), b"pw-beta".to_vec())].into();
    wait_secret(&client, &ns, "app", &want).await?;
    Ok(())
}

/// An upgrade that stores Vault at v1beta1: the CRD's storage flag moves, `migrate storage`
/// rewrites the objects and trims `storedVersions`, and an ExternalSecret refreshing every second
/// from a store on such an object never stops being Ready. The cluster-scoped CRD is used, and
/// put back afterwards, so that the namespaced Vault trials running meanwhile are not involved.
async fn storage_flip(env: Arc<Env>) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

    let vault = env.vault()?;
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "versions-flip").await?;
    vault
        .write_kv_v2(
            crate::vault::KV2,
            &format!("{ns}/app"),
            &json!({"password": "pw-flip"}),
        )
        .await?;
    let name = format!("flip-{ns}");
    let yaml = format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: vault-token, namespace: {ns}}}
stringData: {{token: {token}}}
---
apiVersion: cluster.providers.external-secrets.io/v1alpha1
kind: Vault
metadata: {{name: {name}}}
spec:
  server: {server}
  path: {kv}
  version: v2
  auth: {{tokenSecretRef: {{name: vault-token, namespace: {ns}, key: token}}}}
---
apiVersion: external-secrets.io/v1
kind: ClusterSecretStore
metadata: {{name: {name}}}
spec:
  providerRef: {{apiVersion: cluster.providers.external-secrets.io/v1alpha1, kind: Vault, name: {name}}}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: app, namespace: {ns}}}
spec:
  refreshInterval: 1s
  secretStoreRef: {{name: {name}, kind: ClusterSecretStore}}
  data: [{{secretKey: password, remoteRef: {{key: {ns}/app, property: password}}}}]
"#,
        token = vault.root_token(),
        server = vault.address(),
        kv = crate::vault::KV2,
    );
    testenv::apply_yaml(&client, &yaml, true).await?;
    let want = [("password".to_owned(), b"pw-flip".to_vec())].into();
    wait_secret(&client, &ns, "app", &want).await?;
    let ess: Api<api::external_secret::ExternalSecret> = Api::namespaced(client.clone(), &ns);
    wait_ready("ExternalSecret app", "True", "SecretSynced", || async {
        Ok(serde_json::to_value(ess.get("app").await?)?)
    })
    .await?;

    // Watch Ready while the storage version moves.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (ess, stop) = (ess.clone(), stop.clone());
        tokio::spawn(async move {
            let mut unready = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(es) = ess.get("app").await {
                    let value = serde_json::to_value(&es).unwrap_or_default();
                    if let Some(c) = crate::operator::ready(&value)
                        && c.status != api::conditions::ConditionStatus::True
                    {
                        unready.push(c.message.unwrap_or_default());
                    }
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            unready
        })
    };

    let crd_name = api::providers::vault::DESCRIPTOR.crd_name(api::provider_kinds::Scope::Cluster);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let store_at = |storage: &'static str| {
        let client = client.clone();
        let crds = crds.clone();
        let crd_name = crd_name.clone();
        async move {
            let mut crd = crds.get(&crd_name).await?;
            for v in &mut crd.spec.versions {
                v.storage = v.name == storage;
            }
            crds.replace(&crd_name, &PostParams::default(), &crd)
                .await?;
            let mut out = String::new();
            let outcome = migrate::storage::migrate_storage(&client, &crd_name, false, &mut out)
                .await
                .with_context(|| format!("migrate storage: {out}"))?;
            let stored = crds
                .get(&crd_name)
                .await?
                .status
                .and_then(|s| s.stored_versions)
                .unwrap_or_default();
            ensure!(
                stored == [storage],
                "storedVersions {stored:?} after {outcome:?}"
            );
            anyhow::Ok(())
        }
    };
    let flipped = store_at("v1beta1").await;
    // Put back whatever happened: other trials share this CRD.
    let restored = store_at("v1alpha1").await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let unready = watcher.await?;
    flipped.context("storing at v1beta1")?;
    restored.context("storing at v1alpha1 again")?;
    ensure!(
        unready.is_empty(),
        "the ExternalSecret went unready: {unready:?}"
    );
    let object: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &api::providers::vault::DESCRIPTOR
            .resource(api::provider_kinds::Scope::Cluster, "v1alpha1"),
    );
    let spec = object.get(&name).await?.data["spec"].clone();
    ensure!(
        spec["path"] == crate::vault::KV2 && spec["version"] == "v2",
        "spec after the moves: {spec}"
    );
    wait_secret(&client, &ns, "app", &want).await?;
    let css: Api<api::store::ClusterSecretStore> = Api::all(client.clone());
    css.delete(&name, &Default::default()).await?;
    object.delete(&name, &Default::default()).await?;
    Ok(())
}

/// The last step of an upgrade that moved Vault to v1beta1: the CRD stops serving v1alpha1, the
/// version the running operator has watched since it started. The operator watches v1beta1
/// from then on: a Vault object made afterwards is validated and gets its status.
async fn version_dropped(_env: Arc<Env>) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceConversion, CustomResourceDefinition,
    };

    // A cluster of its own: the trial stops serving a version the others use.
    let cp = tokio::task::spawn_blocking(testenv::ControlPlane::start).await??;
    let client = cp.client().await;
    testenv::install_crds(&client, Env::path("crds")).await?;
    let crd_name =
        api::providers::vault::DESCRIPTOR.crd_name(api::provider_kinds::Scope::Namespaced);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    // No object is ever converted here (none exists while the storage version moves), so the
    // API server needs no webhook.
    let mut crd = crds.get(&crd_name).await?;
    crd.spec.conversion = Some(CustomResourceConversion {
        strategy: "None".into(),
        webhook: None,
    });
    crds.replace(&crd_name, &PostParams::default(), &crd)
        .await?;
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    crate::operator::start_for(cp.client_config(), Default::default(), async move {
        let _ = stopped.await;
    })?;
    let ns = testenv::create_namespace(&client, "version-dropped").await?;
    let has_status = |version: &'static str, name: &'static str| {
        let objects: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &ns, &resource(version));
        async move {
            testenv::wait_for(
                crate::operator::TIMEOUT,
                &format!("a Ready condition on Vault {name}"),
                || async {
                    let object = serde_json::to_value(objects.get(name).await?)?;
                    crate::operator::ready(&object)
                        .map(|_| ())
                        .ok_or_else(|| anyhow::anyhow!("no Ready condition yet"))
                },
            )
            .await
        }
    };
    let vault = |version: &str, name: &str| {
        format!(
            "apiVersion: providers.external-secrets.io/{version}\nkind: Vault\nmetadata: {{name: {name}}}\nspec: {{server: 'http://127.0.0.1:1'}}\n"
        )
    };
    // Watched at v1alpha1, the version stored when the operator started.
    testenv::apply_yaml_in(&client, &ns, &vault("v1alpha1", "before"), true).await?;
    has_status("v1alpha1", "before").await?;
    Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &resource("v1alpha1"))
        .delete("before", &Default::default())
        .await?;

    let set_versions = |storage: &'static str, served: &'static [&'static str]| {
        let (crds, crd_name) = (crds.clone(), crd_name.clone());
        async move {
            let mut crd = crds.get(&crd_name).await?;
            for v in &mut crd.spec.versions {
                v.storage = v.name == storage;
                v.served = served.contains(&v.name.as_str());
            }
            crds.replace(&crd_name, &PostParams::default(), &crd)
                .await?;
            anyhow::Ok(())
        }
    };
    set_versions("v1beta1", &["v1alpha1", "v1beta1"]).await?;
    let mut out = String::new();
    migrate::storage::migrate_storage(&client, &crd_name, false, &mut out)
        .await
        .with_context(|| format!("migrate storage: {out}"))?;
    set_versions("v1beta1", &["v1beta1"]).await?;

    testenv::apply_yaml_in(&client, &ns, &vault("v1beta1", "after"), true).await?;
    has_status("v1beta1", "after")
        .await
        .context("the Vault kind watched at v1beta1 once v1alpha1 is no longer served")?;
    Ok(())
}
