//! The Vault half of the quickstart (`hack/dev.sh`): a fresh Vault server configured for
//! `hack/dev/vault-quickstart.yaml`, and that manifest applied with the server's address.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde_json::json;

use crate::{KvVersion, TokenOptions, VaultServer};

/// The manifest, relative to the repository.
pub const VAULT_QUICKSTART: &str = "hack/dev/vault-quickstart.yaml";

/// An AppRole role `role` (at mount `approle`) that may read `path` only, with its secret id in
/// the Secret `secret` of `namespace` under key `secret-id`; returns the role id.
pub async fn approle_reader(
    vault: &VaultServer,
    client: &kube::Client,
    namespace: &str,
    role: &str,
    path: &str,
    secret: &str,
) -> Result<String> {
    vault
        .write_policy(
            role,
            &format!(r#"path "{path}" {{ capabilities = ["read"] }}"#),
        )
        .await?;
    vault
        .create_approle_role("approle", role, &TokenOptions::policies(&[role]))
        .await?;
    let role_id = vault.approle_role_id("approle", role).await?;
    let secret_id = vault.approle_secret_id("approle", role).await?;
    let manifest = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {secret}, namespace: {namespace}}}\nstringData: {{secret-id: {secret_id}}}\n"
    );
    crate::apply_yaml_in(client, namespace, &manifest, true).await?;
    Ok(role_id)
}

/// Configures `vault` (a KV v2 mount `secret` holding `quickstart`, an AppRole role allowed to
/// read it) and applies the quickstart manifest from `repository` into `namespace`.
pub async fn vault_quickstart(
    vault: &VaultServer,
    client: &kube::Client,
    repository: &Path,
    namespace: &str,
) -> Result<()> {
    vault.mount_kv("secret", KvVersion::V2).await?;
    vault
        .write_kv_v2(
            "secret",
            "quickstart",
            &json!({"username": "vault-user", "password": "from-vault"}),
        )
        .await?;
    vault
        .write_policy(
            "quickstart",
            r#"path "secret/data/quickstart" { capabilities = ["read"] }"#,
        )
        .await?;
    vault.enable_auth("approle", "approle").await?;
    vault
        .create_approle_role(
            "approle",
            "quickstart",
            &TokenOptions::policies(&["quickstart"]),
        )
        .await?;
    let role_id = vault.approle_role_id("approle", "quickstart").await?;
    let secret_id = vault.approle_secret_id("approle", "quickstart").await?;
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: vault-approle, namespace: {namespace}}}\nstringData: {{secret-id: {secret_id}}}\n"
    );
    crate::apply_yaml_in(client, namespace, &secret, true).await?;
    let path = repository.join(VAULT_QUICKSTART);
    let manifest = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {}", path.display()))?
        .replace("VAULT_ADDRESS", vault.address())
        .replace("VAULT_ROLE_ID", &role_id)
        .replace("namespace: examples", &format!("namespace: {namespace}"));
    crate::apply_yaml_in(client, namespace, &manifest, true).await?;
    Ok(())
}

/// Prints the keys and values of a Secret the quickstart synced (its values are the examples'
/// made-up ones, printed so that a person sees the sync worked).
pub fn print_secret(secret: &Secret, by: &str) {
    println!(
        "\nSecret examples/{} written by {by}:",
        secret.metadata.name.clone().unwrap_or_default()
    );
    for (key, value) in secret.data.clone().unwrap_or_default() {
        println!("  {key}: {}", String::from_utf8_lossy(&value.0));
    }
}

/// The Secret `name` in namespace `examples`, once the operator wrote it (up to 60 s).
pub async fn wait_for_quickstart(client: &kube::Client, name: &str) -> Result<Secret> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "examples");
    let found = crate::wait_for(
        Duration::from_secs(60),
        &format!("Secret examples/{name}"),
        || async {
            match secrets.get_opt(name).await? {
                Some(s) => Ok(s),
                None => bail!("not there yet"),
            }
        },
    )
    .await;
    found.context("the operator did not write the quickstart Secret")
}
