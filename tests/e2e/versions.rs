//! A provider kind with two versions (Vault v1alpha1 and v1beta1) served through the conversion
//! webhook: the real API server converts between them, and a store naming either version works.

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

    // A list at the newer version converts every object.
    let listed = beta.list(&Default::default()).await?;
    ensure!(listed.items.len() == 2, "listed {}", listed.items.len());
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
