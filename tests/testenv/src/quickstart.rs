//! The Vault half of the quickstart (`hack/dev.sh`): a fresh Vault server configured for
//! `hack/dev/vault-quickstart.yaml`, and that manifest applied with the server's address.

use std::path::Path;

use anyhow::{Context, Result};
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
