//! The Vault provider against a real Vault server (built by `hack/build-vault.sh`): each login
//! method logs in and reads, KV v1 and v2, properties and JSON paths, push and delete, referent
//! cluster stores, credential scope, one login per identity, and an outage that leaves every
//! Secret as it was.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, ensure};
use api::external_secret::ExternalSecret;
use api::push_secret::PushSecret;
use api::store::{ClusterSecretStore, SecretStore};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use libtest_mimic::Trial;
use serde_json::{Value, json};
use testenv::{JwtRole, KubernetesRole, KvVersion, TokenOptions, VaultServer};

use crate::operator::{TIMEOUT, ready, wait_ready};
use crate::sync::{bytes, wait_secret};
use crate::{Env, trial};

pub const KV2: &str = "secret";
const KV1: &str = "kv1";

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial("vault::approle_reads_kv2", env, approle_reads_kv2),
        trial(
            "vault::provider_objects_through_provider_ref",
            env,
            provider_objects,
        ),
        trial("vault::kv1_and_static_token", env, kv1_and_static_token),
        trial(
            "vault::kubernetes_jwt_and_userpass_logins",
            env,
            other_logins,
        ),
        trial("vault::push_read_back_and_delete", env, push_and_delete),
        trial(
            "vault::find_by_name_and_tags_and_metadata",
            env,
            find_by_name_and_tags,
        ),
        trial("vault::tls_with_ca_bundle_and_ca_provider", env, tls),
        trial("vault::cert_login_over_tls", env, cert_login),
        trial("vault::mutual_tls_client_certificate", env, mutual_tls),
        trial("vault::a_wrong_kv_version_is_named", env, wrong_version),
        trial("vault::headers_and_check_and_set", env, headers_and_cas),
        trial(
            "vault::read_your_writes_and_namespaces_on_a_standby",
            env,
            read_your_writes,
        ),
        trial("vault::esos_documented_manifests", env, documented),
        trial("vault::a_sealed_vault_is_asked_once_per_wait", env, sealed),
        trial(
            "vault::a_forbidden_path_costs_no_login_per_retry",
            env,
            forbidden,
        ),
        trial("vault::referent_cluster_store", env, referent_cluster_store),
        trial(
            "vault::credentials_outside_the_namespace_are_refused",
            env,
            outside_namespace,
        ),
        trial("vault::one_login_per_identity", env, one_login_per_identity),
        trial(
            "vault::an_inline_store_logs_in_once",
            env,
            inline_store_logs_in_once,
        ),
        trial(
            "vault::a_provider_objects_status_write_validates_nothing_again",
            env,
            status_write_validates_nothing,
        ),
        trial(
            "vault::a_deleted_provider_objects_token_is_revoked",
            env,
            deleted_object_revokes,
        ),
        trial("vault::outage_keeps_every_secret", env, outage),
    ]
}

/// Mounts and auth methods every trial uses; each trial adds policies and roles of its own.
pub async fn setup(env: &Env) -> Result<()> {
    let vault = env.vault()?;
    configure(vault, env).await
}

async fn configure(vault: &VaultServer, env: &Env) -> Result<()> {
    vault.mount_kv(KV2, KvVersion::V2).await?;
    vault.mount_kv(KV1, KvVersion::V1).await?;
    for method in ["approle", "userpass", "jwt", "kubernetes", "cert"] {
        vault.enable_auth(method, method).await?;
    }
    // No LDAP server here: the ldap login shape (POST auth/<path>/login/<user>) is the userpass
    // method's, so a userpass mount at `ldap` stands in for it.
    vault.enable_auth("ldap", "userpass").await?;
    vault
        .configure_jwt_for_kubernetes("jwt", env.control_plane())
        .await?;
    vault
        .configure_kubernetes_auth("kubernetes", env.control_plane())
        .await?;
    // Trials tell their own requests apart in the audit log by an `X-Team` header they set.
    vault
        .api(
            http::Method::POST,
            "sys/config/auditing/request-headers/x-team",
            Some(&json!({"hmac": false})),
        )
        .await?;
    vault.enable_file_audit().await
}

/// A policy named after `ns` that may do anything below `<mount>/<ns>/` of both KV mounts.
pub(crate) async fn policy_for(vault: &VaultServer, ns: &str) -> Result<()> {
    let hcl = format!(
        r#"
path "{KV2}/data/{ns}/*" {{ capabilities = ["create", "read", "update", "delete", "list"] }}
path "{KV2}/metadata/{ns}/*" {{ capabilities = ["create", "read", "update", "delete", "list"] }}
path "{KV2}/metadata/{ns}" {{ capabilities = ["list"] }}
path "{KV1}/{ns}/*" {{ capabilities = ["create", "read", "update", "delete", "list"] }}
"#
    );
    vault.write_policy(ns, &hcl).await
}

/// An AppRole role for `ns` with its policy; the secret id is stored in Secret `approle`.
pub async fn approle_for(
    vault: &VaultServer,
    client: &Client,
    ns: &str,
    token: TokenOptions,
) -> Result<String> {
    approle_on(vault, client, "approle", ns, token).await
}

/// Like [`approle_for`], on an AppRole mount that `ns` has to itself, so that a trial counting
/// logins counts none of the trials running beside it; the mount and the role id.
async fn approle_of_its_own(
    vault: &VaultServer,
    client: &Client,
    ns: &str,
    token: TokenOptions,
) -> Result<(String, String)> {
    let mount = format!("approle-{ns}");
    vault.enable_auth(&mount, "approle").await?;
    let role_id = approle_on(vault, client, &mount, ns, token).await?;
    Ok((mount, role_id))
}

async fn approle_on(
    vault: &VaultServer,
    client: &Client,
    mount: &str,
    ns: &str,
    token: TokenOptions,
) -> Result<String> {
    policy_for(vault, ns).await?;
    vault.create_approle_role(mount, ns, &token).await?;
    let role_id = vault.approle_role_id(mount, ns).await?;
    store_secret_id(vault, client, mount, ns).await?;
    Ok(role_id)
}

/// A new namespace with an AppRole role of its own that may use only that namespace's paths,
/// its secret id in Secret `approle`: what most trials start from.
async fn approle_namespace<'a>(
    env: &'a Env,
    prefix: &str,
) -> Result<(&'a VaultServer, Client, String, String)> {
    let vault = env.vault()?;
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, prefix).await?;
    let role_id = approle_for(vault, &client, &ns, TokenOptions::policies(&[ns.as_str()])).await?;
    Ok((vault, client, ns, role_id))
}

/// A fresh secret id of `ns`'s role on AppRole `mount` in Secret `approle` of `ns`.
async fn store_secret_id(
    vault: &VaultServer,
    client: &Client,
    mount: &str,
    ns: &str,
) -> Result<()> {
    let secret_id = vault.approle_secret_id(mount, ns).await?;
    let yaml = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: approle}}\nstringData: {{secret-id: {secret_id}}}\n"
    );
    testenv::apply_yaml_in(client, ns, &yaml, true).await?;
    Ok(())
}

pub fn approle_store(vault: &VaultServer, name: &str, role_id: &str, version: &str) -> String {
    let mount = if version == "v1" { KV1 } else { KV2 };
    format!(
        r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {{name: {name}}}
spec:
  provider:
    vault:
      server: {server}
      path: {mount}
      version: {version}
      auth:
        appRole:
          path: approle
          roleId: {role_id}
          secretRef: {{name: approle, key: secret-id}}
"#,
        server = vault.address()
    )
}

/// [`approle_store`] on KV v2 logging in at AppRole `mount`.
fn approle_store_on(vault: &VaultServer, name: &str, role_id: &str, mount: &str) -> String {
    approle_store(vault, name, role_id, "v2")
        .replace("path: approle\n", &format!("path: {mount}\n"))
}

async fn store_ready(client: &Client, ns: &str, name: &str) -> Result<Value> {
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), ns);
    wait_ready(&format!("SecretStore {name}"), "True", "Valid", || async {
        Ok(serde_json::to_value(stores.get(name).await?)?)
    })
    .await
}

async fn approle_reads_kv2(env: Arc<Env>) -> Result<()> {
    let vault = env.vault()?;
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "vault-read").await?;
    let path = format!("{ns}/db");
    vault
        .write_kv_v2(KV2, &path, &json!({"user": "alice"}))
        .await?;
    vault
        .write_kv_v2(
            KV2,
            &path,
            &json!({"user": "bob", "config": {"host": "db.example.com", "port": 5432}, "a.b": "exact"}),
        )
        .await?;
    let role_id = approle_for(vault, &client, &ns, TokenOptions::policies(&[ns.as_str()])).await?;
    testenv::apply_yaml_in(
        &client,
        &ns,
        &approle_store(vault, "vault", &role_id, "v2"),
        true,
    )
    .await?;
    // The test Vault listens on http://: accepted, as ESO does, but said in the condition and
    // in a Warning event.
    let clear = "server uses http://: the Vault token is sent in clear";
    let store = store_ready(&client, &ns, "vault").await?;
    let message = ready(&store).and_then(|c| c.message).unwrap_or_default();
    ensure!(
        message == format!("store validated; warnings: {clear}"),
        "Ready message: {message}"
    );
    testenv::wait_for(TIMEOUT, "the ProviderWarning event", || async {
        let events = crate::operator::events(&client, &ns, "vault").await?;
        events
            .iter()
            .find(|e| {
                e.reason.as_deref() == Some("ProviderWarning")
                    && e.type_.as_deref() == Some("Warning")
                    && e.message.as_deref() == Some(clear)
            })
            .map(|_| ())
            .ok_or_else(|| anyhow!("events: {events:?}"))
    })
    .await?;
    let es = format!(
        r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: db}}
spec:
  refreshInterval: 1h
  secretStoreRef: {{name: vault}}
  data:
  - {{secretKey: user, remoteRef: {{key: {path}, property: user}}}}
  - {{secretKey: user-v1, remoteRef: {{key: {path}, property: user, version: "1"}}}}
  - {{secretKey: host, remoteRef: {{key: {path}, property: config.host}}}}
  - {{secretKey: exact, remoteRef: {{key: "{KV2}/data/{path}", property: a.b}}}}
  dataFrom:
  - extract: {{key: {path}, property: config}}
"#
    );
    testenv::apply_yaml_in(&client, &ns, &es, true).await?;
    wait_secret(
        &client,
        &ns,
        "db",
        &bytes(&[
            ("user", "bob"),
            ("user-v1", "alice"),
            ("host", "db.example.com"),
            ("exact", "exact"),
            ("port", "5432"),
        ]),
    )
    .await?;
    Ok(())
}

/// Design 007 with a real provider: a namespaced `Vault` object used by a SecretStore, and a
/// cluster-scoped one used by a ClusterSecretStore, both through `providerRef`; the provider
/// reconciler validates each object on its own.
async fn provider_objects(env: Arc<Env>) -> Result<()> {
    let (vault, client, ns, role_id) = approle_namespace(&env, "vault-ref").await?;
    vault
        .write_kv_v2(KV2, &format!("{ns}/s"), &json!({"v": "via-ref"}))
        .await?;
    let spec = format!(
        "  server: {server}\n  path: {KV2}\n  auth:\n    appRole:\n      roleId: {role_id}\n      secretRef: {{name: approle, key: secret-id}}\n",
        server = vault.address(),
    );
    // A cluster-scoped object names the namespace of its credentials.
    let cluster_spec = spec.replace(
        "key: secret-id",
        &format!("key: secret-id, namespace: {ns}"),
    );
    let yaml = format!(
        r#"apiVersion: providers.external-secrets.io/v1alpha1
kind: Vault
metadata: {{name: shared}}
spec:
{spec}---
apiVersion: cluster.providers.external-secrets.io/v1alpha1
kind: Vault
metadata: {{name: {ns}}}
spec:
{cluster_spec}---
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {{name: by-ref}}
spec:
  providerRef: {{apiVersion: providers.external-secrets.io/v1alpha1, kind: Vault, name: shared}}
---
apiVersion: external-secrets.io/v1
kind: ClusterSecretStore
metadata: {{name: {ns}}}
spec:
  providerRef: {{apiVersion: cluster.providers.external-secrets.io/v1alpha1, kind: Vault, name: {ns}}}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: namespaced}}
spec:
  refreshInterval: 1h
  secretStoreRef: {{name: by-ref}}
  data: [{{secretKey: v, remoteRef: {{key: {ns}/s, property: v}}}}]
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: clustered}}
spec:
  refreshInterval: 1h
  secretStoreRef: {{kind: ClusterSecretStore, name: {ns}}}
  data: [{{secretKey: v, remoteRef: {{key: {ns}/s, property: v}}}}]
"#
    );
    testenv::apply_yaml_in(&client, &ns, &yaml, true).await?;
    let want = bytes(&[("v", "via-ref")]);
    wait_secret(&client, &ns, "namespaced", &want).await?;
    wait_secret(&client, &ns, "clustered", &want).await?;
    // The provider reconciler validated both objects against Vault.
    let resource =
        api::providers::vault::DESCRIPTOR.storage_resource(api::provider_kinds::Scope::Namespaced);
    let objects: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &resource);
    wait_ready("Vault shared", "True", "Valid", || async {
        Ok(serde_json::to_value(objects.get("shared").await?)?)
    })
    .await?;
    let cluster =
        api::providers::vault::DESCRIPTOR.storage_resource(api::provider_kinds::Scope::Cluster);
    let cluster_objects: Api<kube::api::DynamicObject> = Api::all_with(client, &cluster);
    wait_ready("cluster Vault", "True", "Valid", || async {
        Ok(serde_json::to_value(cluster_objects.get(&ns).await?)?)
    })
    .await?;
    Ok(())
}

async fn kv1_and_static_token(env: Arc<Env>) -> Result<()> {
    let vault = env.vault()?;
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "vault-kv1").await?;
    policy_for(vault, &ns).await?;
    vault
        .write_kv_v1(KV1, &format!("{ns}/app"), &json!({"token": "t0k", "n": 7}))
        .await?;
    let token = vault
        .api(
            http::Method::POST,
            "auth/token/create",
            Some(&json!({"policies": [ns], "ttl": "1h"})),
        )
        .await?
        .and_then(|a| a["auth"]["client_token"].as_str().map(str::to_owned))
        .context("creating a token")?;
    let yaml = format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: vault-token}}
stringData: {{token: {token}}}
---
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {{name: kv1}}
spec:
  provider:
    vault:
      server: {server}
      path: {KV1}
      version: v1
      auth: {{tokenSecretRef: {{name: vault-token, key: token}}}}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: app}}
spec:
  refreshInterval: 1h
  secretStoreRef: {{name: kv1}}
  data:
  - {{secretKey: token, remoteRef: {{key: {ns}/app, property: token}}}}
  - {{secretKey: n, remoteRef: {{key: {ns}/app, property: n}}}}
"#,
        server = vault.address()
    );
    testenv::apply_yaml_in(&client, &ns, &yaml, true).await?;
    store_ready(&client, &ns, "kv1").await?;
    wait_secret(&client, &ns, "app", &bytes(&[("token", "t0k"), ("n", "7")])).await?;
    Ok(())
}

/// Kubernetes login with a requested ServiceAccount token, JWT login with a ServiceAccount token
/// for audience `vault`, userpass, and ldap (against a userpass mount, see `configure`).
async fn other_logins(env: Arc<Env>) -> Result<()> {
    let vault = env.vault()?;
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "vault-logins").await?;
    policy_for(vault, &ns).await?;
    vault
        .write_kv_v2(KV2, &format!("{ns}/s"), &json!({"v": "ok"}))
        .await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "reader"}}))?;
    accounts.create(&PostParams::default(), &sa).await?;
    let token = TokenOptions::policies(&[ns.as_str()]);
    vault
        .create_kubernetes_role(
            "kubernetes",
            &ns,
            &KubernetesRole {
                service_account_names: vec!["reader".into()],
                namespaces: vec![ns.clone()],
                audience: None,
            },
            &token,
        )
        .await?;
    vault
        .create_jwt_role(
            "jwt",
            &ns,
            &JwtRole {
                audiences: vec!["vault".into()],
                subject: Some(format!("system:serviceaccount:{ns}:reader")),
                claims: None,
            },
            &token,
        )
        .await?;
    for mount in ["userpass", "ldap"] {
        vault
            .create_userpass_user(mount, &ns, "pa55word", &token)
            .await?;
    }
    let server = vault.address();
    let store = |name: &str, auth: &str| {
        format!(
            "apiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {{name: {name}}}\nspec:\n  provider:\n    vault:\n      server: {server}\n      path: {KV2}\n      auth: {auth}\n"
        )
    };
    let stores = [
        (
            "k8s",
            format!(
                "{{kubernetes: {{mountPath: kubernetes, role: {ns}, serviceAccountRef: {{name: reader}}}}}}"
            ),
        ),
        (
            "jwt",
            format!(
                "{{jwt: {{path: jwt, role: {ns}, kubernetesServiceAccountToken: {{serviceAccountRef: {{name: reader, audiences: [vault]}}}}}}}}"
            ),
        ),
        (
            "userpass",
            format!(
                "{{userPass: {{path: userpass, username: {ns}, secretRef: {{name: password, key: password}}}}}}"
            ),
        ),
        (
            "ldap",
            format!(
                "{{ldap: {{path: ldap, username: {ns}, secretRef: {{name: password, key: password}}}}}}"
            ),
        ),
    ];
    testenv::apply_yaml_in(
        &client,
        &ns,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: password}\nstringData: {password: pa55word}\n",
        true,
    )
    .await?;
    for (name, auth) in &stores {
        testenv::apply_yaml_in(&client, &ns, &store(name, auth), true).await?;
        let es = format!(
            "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: via-{name}}}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {{name: {name}}}\n  data: [{{secretKey: v, remoteRef: {{key: {ns}/s, property: v}}}}]\n"
        );
        testenv::apply_yaml_in(&client, &ns, &es, true).await?;
    }
    for (name, _) in &stores {
        store_ready(&client, &ns, name)
            .await
            .with_context(|| format!("the {name} login"))?;
        wait_secret(&client, &ns, &format!("via-{name}"), &bytes(&[("v", "ok")])).await?;
    }
    Ok(())
}

async fn push_and_delete(env: Arc<Env>) -> Result<()> {
    let (vault, client, ns, role_id) = approle_namespace(&env, "vault-push").await?;
    vault
        .write_kv_v2(KV2, &format!("{ns}/theirs"), &json!({"token": "keep-me"}))
        .await?;
    let yaml = format!(
        r#"{store}
---
apiVersion: v1
kind: Secret
metadata: {{name: src}}
stringData: {{token: pushed-value}}
---
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {{name: push}}
spec:
  refreshInterval: 1h
  deletionPolicy: Delete
  secretStoreRefs: [{{name: vault, kind: SecretStore}}]
  selector: {{secret: {{name: src}}}}
  data:
  - match: {{secretKey: token, remoteRef: {{remoteKey: {ns}/ours, property: token}}}}
---
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {{name: overwrite}}
spec:
  refreshInterval: 1h
  secretStoreRefs: [{{name: vault, kind: SecretStore}}]
  selector: {{secret: {{name: src}}}}
  data:
  - match: {{secretKey: token, remoteRef: {{remoteKey: {ns}/theirs, property: token}}}}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: read-back}}
spec:
  refreshInterval: 2s
  secretStoreRef: {{name: vault}}
  data: [{{secretKey: token, remoteRef: {{key: {ns}/ours, property: token}}}}]
"#,
        store = approle_store(vault, "vault", &role_id, "v2")
    );
    testenv::apply_yaml_in(&client, &ns, &yaml, true).await?;
    let pushes: Api<PushSecret> = Api::namespaced(client.clone(), &ns);
    wait_ready("PushSecret push", "True", "Synced", || async {
        Ok(serde_json::to_value(pushes.get("push").await?)?)
    })
    .await?;
    wait_secret(
        &client,
        &ns,
        "read-back",
        &bytes(&[("token", "pushed-value")]),
    )
    .await?;
    // Pushing again what is there writes nothing.
    let touch = json!({"metadata": {"annotations": {"touched": "1"}}});
    pushes
        .patch(
            "push",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&touch),
        )
        .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ours = vault
        .read_kv_v2(KV2, &format!("{ns}/ours"), None)
        .await?
        .context("the pushed secret")?;
    ensure!(
        ours.version == 1,
        "an unchanged push wrote version {}",
        ours.version
    );
    ensure!(
        ours.custom_metadata.get("managed-by").map(String::as_str) == Some("external-secrets"),
        "pushed secrets are marked as ours: {:?}",
        ours.custom_metadata
    );
    // A secret someone else wrote is not overwritten.
    let refused = wait_ready("PushSecret overwrite", "False", "Errored", || async {
        Ok(serde_json::to_value(pushes.get("overwrite").await?)?)
    })
    .await?;
    let message = ready(&refused).and_then(|c| c.message).unwrap_or_default();
    ensure!(
        message.contains("not managed by external-secrets"),
        "the refusal says why: {message}"
    );
    let theirs = vault
        .read_kv_v2(KV2, &format!("{ns}/theirs"), None)
        .await?
        .context("their secret")?;
    ensure!(
        theirs.data["token"] == "keep-me",
        "their secret is untouched"
    );

    // Deleting the PushSecret (deletionPolicy Delete) removes what it pushed.
    pushes.delete("push", &DeleteParams::default()).await?;
    testenv::wait_for(TIMEOUT, "the pushed secret to be deleted", || async {
        match vault.read_kv_v2(KV2, &format!("{ns}/ours"), None).await? {
            None => Ok(()),
            Some(s) => Err(anyhow!("still there, version {}", s.version)),
        }
    })
    .await
}

/// find by name and by tags, and `metadataPolicy: Fetch` reading the same custom metadata.
/// The name regexp is matched against the whole path under the mount (namespace included), so it
/// is anchored to the last segment: unanchored, "db" matched every path of a namespace whose
/// random suffix held "db" (`vault-find-ycu7db`), and the Secret got `app/cache` too.
async fn find_by_name_and_tags(env: Arc<Env>) -> Result<()> {
    let (vault, client, ns, role_id) = approle_namespace(&env, "vault-find").await?;
    for (path, value, team) in [
        ("app/db", "1", "red"),
        ("app/cache", "2", "blue"),
        ("app/nested/queue", "3", "red"),
        ("other", "4", "red"),
    ] {
        let full = format!("{ns}/{path}");
        vault.write_kv_v2(KV2, &full, &json!({"v": value})).await?;
        vault
            .write_kv_v2_metadata(
                KV2,
                &full,
                &BTreeMap::from([("team".to_owned(), team.to_owned())]),
            )
            .await?;
    }
    let yaml = format!(
        r#"{store}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: by-name}}
spec:
  refreshInterval: 1h
  secretStoreRef: {{name: vault}}
  dataFrom:
  - find: {{path: {ns}/app, name: {{regexp: "/(db|queue)$"}}}}
    rewrite: [{{regexp: {{source: "/", target: "_"}}}}]
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: metadata}}
spec:
  refreshInterval: 1h
  secretStoreRef: {{name: vault}}
  data:
  - {{secretKey: team, remoteRef: {{key: {ns}/app/db, property: team, metadataPolicy: Fetch}}}}
  - {{secretKey: version, remoteRef: {{key: {ns}/app/db, property: current_version, metadataPolicy: Fetch}}}}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: by-tags}}
spec:
  refreshInterval: 1h
  secretStoreRef: {{name: vault}}
  dataFrom:
  - find: {{path: {ns}, tags: {{team: red}}}}
    rewrite: [{{regexp: {{source: "/", target: "_"}}}}]
"#,
        store = approle_store(vault, "vault", &role_id, "v2")
    );
    testenv::apply_yaml_in(&client, &ns, &yaml, true).await?;
    let value = |v: &str| format!(r#"{{"v":"{v}"}}"#);
    let key = |p: &str| format!("{ns}/{p}").replace('/', "_");
    let want = |pairs: &[(&str, &str)]| -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(p, v)| (key(p), value(v).into_bytes()))
            .collect()
    };
    wait_secret(
        &client,
        &ns,
        "by-name",
        &want(&[("app/db", "1"), ("app/nested/queue", "3")]),
    )
    .await?;
    let metadata = bytes(&[("team", "red"), ("version", "1")]);
    wait_secret(&client, &ns, "metadata", &metadata).await?;
    wait_secret(
        &client,
        &ns,
        "by-tags",
        &want(&[("app/db", "1"), ("app/nested/queue", "3"), ("other", "4")]),
    )
    .await?;
    Ok(())
}

/// The TLS listener, trusted through `caBundle` and through `caProvider` (a ConfigMap); without
/// either the store reports the certificate error.
async fn tls(env: Arc<Env>) -> Result<()> {
    let (vault, client, ns, role_id) = approle_namespace(&env, "vault-tls").await?;
    use base64::Engine as _;
    let bundle = base64::engine::general_purpose::STANDARD.encode(vault.ca_pem());
    let ca_map = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "vault-ca"},
        "data": {"ca.crt": vault.ca_pem()},
    });
    testenv::apply_yaml_in(&client, &ns, &serde_yaml::to_string(&ca_map)?, true).await?;
    let store = |name: &str, trust: &str| {
        format!(
            r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {{name: {name}}}
spec:
  provider:
    vault:
      server: {server}
      path: {KV2}
      {trust}
      auth:
        appRole: {{roleId: {role_id}, secretRef: {{name: approle, key: secret-id}}}}
"#,
            server = vault.tls_address()
        )
    };
    for (name, trust) in [
        ("bundle", format!("caBundle: {bundle}")),
        (
            "provider",
            "caProvider: {type: ConfigMap, name: vault-ca, key: ca.crt}".to_owned(),
        ),
        ("untrusted", String::new()),
    ] {
        testenv::apply_yaml_in(&client, &ns, &store(name, &trust), true).await?;
    }
    store_ready(&client, &ns, "bundle").await?;
    store_ready(&client, &ns, "provider").await?;
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), &ns);
    let untrusted = testenv::wait_for(TIMEOUT, "SecretStore untrusted to fail", || async {
        let s = serde_json::to_value(stores.get("untrusted").await?)?;
        match ready(&s) {
            Some(c) if c.status.as_str() == "False" => Ok(c.message.unwrap_or_default()),
            other => Err(anyhow!("Ready is {other:?}")),
        }
    })
    .await?;
    ensure!(
        untrusted.to_lowercase().contains("certificate") || untrusted.contains("login failed"),
        "the failure names the TLS problem: {untrusted}"
    );
    Ok(())
}

/// `headers` reach Vault on every request (its audit log shows them), and pushes carry the
/// check-and-set version when `checkAndSet.required`: a path that demands it takes them.
async fn headers_and_cas(env: Arc<Env>) -> Result<()> {
    let (vault, client, ns, role_id) = approle_namespace(&env, "vault-cas").await?;
    let path = format!("{ns}/cas");
    vault
        .api(
            http::Method::POST,
            &format!("{KV2}/metadata/{path}"),
            Some(&json!({"cas_required": true})),
        )
        .await?;
    let store = approle_store(vault, "vault", &role_id, "v2").replace(
        "      auth:",
        &format!(
            "      headers: {{X-Team: {ns}}}\n      checkAndSet: {{required: true}}\n      auth:"
        ),
    );
    let source = |value: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: src}}\nstringData: {{token: {value}}}\n"
        )
    };
    let push = format!(
        "apiVersion: external-secrets.io/v1alpha1\nkind: PushSecret\nmetadata: {{name: cas}}\nspec:\n  refreshInterval: 1h\n  secretStoreRefs: [{{name: vault, kind: SecretStore}}]\n  selector: {{secret: {{name: src}}}}\n  data: [{{match: {{secretKey: token, remoteRef: {{remoteKey: {path}, property: token}}}}}}]\n"
    );
    testenv::apply_yaml_in(&client, &ns, &store, true).await?;
    testenv::apply_yaml_in(&client, &ns, &source("one"), true).await?;
    testenv::apply_yaml_in(&client, &ns, &push, true).await?;
    let version_holding = |want: &'static str, version: u64| {
        let path = path.clone();
        async move {
            testenv::wait_for(
                TIMEOUT,
                &format!("version {version} holding {want}"),
                || async {
                    match vault.read_kv_v2(KV2, &path, None).await? {
                        Some(s) if s.data["token"] == want && s.version == version => Ok(()),
                        other => Err(anyhow!("{:?}", other.map(|s| (s.version, s.data)))),
                    }
                },
            )
            .await
        }
    };
    version_holding("one", 1).await?;
    testenv::apply_yaml_in(&client, &ns, &source("two"), true).await?;
    version_holding("two", 2).await?;
    let with_header = vault.count_audit_responses(|r| {
        r.path == format!("{KV2}/data/{path}") && r.headers["x-team"] == json!([ns.as_str()])
    })?;
    ensure!(
        with_header >= 2,
        "{with_header} requests to {path} carried X-Team"
    );
    Ok(())
}

/// `readYourWrites`, `forwardInconsistent`, `namespace` and `auth.namespace` as Vault
/// Enterprise sees them, through a standby in front of the dev server (testenv::VaultStandby):
/// a read after a push requires the state the push returned, waits out the standby's 412, and
/// sees the pushed value; a store without readYourWrites requires nothing.
async fn read_your_writes(env: Arc<Env>) -> Result<()> {
    let (vault, client, ns, role_id) = approle_namespace(&env, "vault-ryw").await?;
    let standby = testenv::VaultStandby::start(vault.address()).await?;
    let store = |name: &str, options: &str| {
        approle_store(vault, name, &role_id, "v2")
            .replace(vault.address(), &standby.address())
            .replace("      auth:", &format!("{options}      auth:"))
    };
    let consistent = store(
        "consistent",
        "      readYourWrites: true\n      forwardInconsistent: true\n      namespace: team-a\n",
    )
    .replace(
        "        appRole:",
        "        namespace: team-a-auth\n        appRole:",
    );
    let plain = store("plain", "      namespace: team-b\n");
    let yaml = format!(
        r#"{consistent}
---
{plain}
---
apiVersion: v1
kind: Secret
metadata: {{name: src}}
stringData: {{token: written-then-read}}
---
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {{name: push}}
spec:
  refreshInterval: 1h
  secretStoreRefs: [{{name: consistent, kind: SecretStore}}]
  selector: {{secret: {{name: src}}}}
  data:
  - match: {{secretKey: token, remoteRef: {{remoteKey: {ns}/ryw, property: token}}}}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: read-back}}
spec:
  refreshInterval: 2s
  secretStoreRef: {{name: consistent}}
  data: [{{secretKey: token, remoteRef: {{key: {ns}/ryw, property: token}}}}]
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: plain}}
spec:
  refreshInterval: 1h
  secretStoreRef: {{name: plain}}
  data: [{{secretKey: token, remoteRef: {{key: {ns}/ryw, property: token}}}}]
"#
    );
    testenv::apply_yaml_in(&client, &ns, &yaml, true).await?;
    let want = bytes(&[("token", "written-then-read")]);
    wait_secret(&client, &ns, "read-back", &want).await?;
    wait_secret(&client, &ns, "plain", &want).await?;
    let read_path = format!("{KV2}/data/{ns}/ryw");
    // Which request first requires the new state (and meets the lagging standby's 412) depends
    // on timing; that it is asked again and answered, and that reads require the state, not.
    let seen = testenv::wait_for(TIMEOUT, "a read that required the push's state", || async {
        let seen = standby.seen();
        let retried = seen.iter().enumerate().any(|(i, r)| {
            r.status == 412
                && seen[i + 1..].iter().any(|later| {
                    later.method == r.method && later.path == r.path && later.status < 300
                })
        });
        let read = seen.iter().any(|r| {
            r.path == read_path && r.method == "GET" && r.status == 200 && !r.index.is_empty()
        });
        if retried && read {
            Ok(seen)
        } else {
            let summary: Vec<String> = seen
                .iter()
                .map(|r| {
                    format!(
                        "{} {} {} {:?} {}",
                        r.method,
                        r.path,
                        r.status,
                        r.namespace,
                        r.index.len()
                    )
                })
                .collect();
            Err(anyhow!("requests so far: {summary:#?}"))
        }
    })
    .await?;
    let of = |namespaces: &[&str]| -> Vec<&testenv::SeenRequest> {
        seen.iter()
            .filter(|r| {
                r.namespace
                    .as_deref()
                    .is_some_and(|n| namespaces.contains(&n))
            })
            .collect()
    };
    let consistent: Vec<_> = of(&["team-a"]);
    ensure!(
        !consistent.is_empty()
            && consistent
                .iter()
                .all(|r| r.inconsistent.as_deref() == Some("forward-active-node")),
        "every request of the consistent store asks to be forwarded: {consistent:?}"
    );
    let logins: Vec<_> = seen
        .iter()
        .filter(|r| r.path.starts_with("auth/approle/login"))
        .collect();
    ensure!(
        logins
            .iter()
            .any(|r| r.namespace.as_deref() == Some("team-a-auth"))
            && logins
                .iter()
                .any(|r| r.namespace.as_deref() == Some("team-b"))
            && logins
                .iter()
                .all(|r| matches!(r.namespace.as_deref(), Some("team-a-auth" | "team-b"))),
        "logins in auth.namespace, else namespace: {logins:?}"
    );
    let without_namespace: Vec<_> = seen.iter().filter(|r| r.namespace.is_none()).collect();
    ensure!(
        without_namespace.is_empty(),
        "requests without a namespace: {without_namespace:?}"
    );
    let plain: Vec<_> = of(&["team-b"]);
    ensure!(
        !plain.is_empty()
            && plain
                .iter()
                .all(|r| r.index.is_empty() && r.inconsistent.is_none()),
        "a store without readYourWrites requires no state: {plain:?}"
    );
    Ok(())
}

/// A path the role's policy does not allow: Vault answers 403, as it does for a token it no
/// longer knows, but the token is still good, so the retries log in no more.
async fn forbidden(env: Arc<Env>) -> Result<()> {
    let (vault, client, ns, role_id) = approle_namespace(&env, "vault-forbidden").await?;
    let standby = testenv::VaultStandby::start(vault.address()).await?;
    let store =
        approle_store(vault, "vault", &role_id, "v2").replace(vault.address(), &standby.address());
    let es = "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {name: forbidden}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {name: vault}\n  data: [{secretKey: v, remoteRef: {key: elsewhere/s, property: v}}]\n";
    testenv::apply_yaml_in(&client, &ns, &format!("{store}---\n{es}"), true).await?;
    let path = format!("{KV2}/data/elsewhere/s");
    let refused_reads = |at_least: usize| {
        let (standby, path) = (&standby, &path);
        async move {
            testenv::wait_for(TIMEOUT, &format!("{at_least} refused reads"), || async {
                let refused = standby
                    .seen()
                    .iter()
                    .filter(|r| &r.path == path && r.status == 403)
                    .count();
                if refused >= at_least {
                    Ok(())
                } else {
                    Err(anyhow!("{refused} so far"))
                }
            })
            .await
        }
    };
    let logins = || {
        standby
            .seen()
            .iter()
            .filter(|r| r.path == "auth/approle/login")
            .count()
    };
    refused_reads(1).await?;
    let first = logins();
    refused_reads(4).await?;
    ensure!(
        logins() == first,
        "{} logins after three retries, {first} before",
        logins()
    );
    let es: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let status = wait_ready(
        "ExternalSecret forbidden",
        "False",
        "SecretSyncedError",
        || async { Ok(serde_json::to_value(es.get("forbidden").await?)?) },
    )
    .await?;
    let message = status["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default();
    ensure!(message.contains("403"), "the refusal is named: {message}");
    Ok(())
}

/// 60 ExternalSecrets on one store whose Vault becomes sealed (503 from the standby) while the
/// store stays Ready: their shared client answers for Vault while it waits, so Vault is asked a
/// few times, not once per ExternalSecret and retry; once unsealed, the first answer wakes them
/// all, and they sync again without waiting out their backoff.
async fn sealed(env: Arc<Env>) -> Result<()> {
    const COUNT: usize = 60;
    let (vault, client, ns, role_id) = approle_namespace(&env, "vault-sealed").await?;
    vault
        .write_kv_v2(KV2, &format!("{ns}/s"), &json!({"v": "before"}))
        .await?;
    let standby = testenv::VaultStandby::start(vault.address()).await?;
    let store =
        approle_store(vault, "vault", &role_id, "v2").replace(vault.address(), &standby.address());
    testenv::apply_yaml_in(&client, &ns, &store, true).await?;
    for i in 0..COUNT {
        let es = format!(
            "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: es-{i}}}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {{name: vault}}\n  data: [{{secretKey: v, remoteRef: {{key: {ns}/s, property: v}}}}]\n"
        );
        testenv::apply_yaml_in(&client, &ns, &es, true).await?;
    }
    let all_hold = |want: &'static str| {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            for i in 0..COUNT {
                wait_secret(&client, &ns, &format!("es-{i}"), &bytes(&[("v", want)])).await?;
            }
            anyhow::Ok(())
        }
    };
    all_hold("before").await?;
    standby.set_down(true);
    let sealed_at = Instant::now();
    let before = standby.seen().len();
    // Each ExternalSecret is asked to sync now (force-sync), and retries on its own backoff.
    let externalsecrets: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let force = json!({"metadata": {"annotations": {"force-sync": "1"}}});
    for i in 0..COUNT {
        externalsecrets
            .patch(
                &format!("es-{i}"),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&force),
            )
            .await?;
    }
    for i in 0..COUNT {
        let name = format!("es-{i}");
        wait_ready(&name, "False", "SecretSyncedError", || async {
            Ok(serde_json::to_value(externalsecrets.get(&name).await?)?)
        })
        .await?;
    }
    // The breaker's waits double from 1 s and it asks when each ends, so Vault is asked again
    // about 1, 3, 7, 15 and 31 s into the outage whenever the ExternalSecrets' own backoffs end.
    // Unsealing at 22 s, between two of those, makes the recovery take about 9 s whatever the
    // machine's speed; unsealing at 30 s would race the 31 s question. When the breaker waited
    // for the ExternalSecrets to ask, their jittered backoffs moved its questions, and under
    // load the recovery took 40 s.
    tokio::time::sleep(Duration::from_secs(22).saturating_sub(sealed_at.elapsed())).await;
    let asked = standby.seen().len() - before;
    ensure!(
        asked < COUNT,
        "Vault was asked {asked} times while sealed, by {COUNT} ExternalSecrets"
    );
    vault
        .write_kv_v2(KV2, &format!("{ns}/s"), &json!({"v": "after"}))
        .await?;
    standby.set_down(false);
    let unsealed = Instant::now();
    all_hold("after").await?;
    eprintln!(
        "{COUNT} ExternalSecrets asked a sealed Vault {asked} times in 22 s, and synced {:?} after the unseal",
        unsealed.elapsed()
    );
    ensure!(
        unsealed.elapsed() < Duration::from_secs(25),
        "the last ExternalSecret synced {:?} after the unseal",
        unsealed.elapsed()
    );
    Ok(())
}

/// ESO's documented Vault manifests (tests/eso-docs-vault: the example store and ExternalSecret,
/// one store per login method, the cert ClusterSecretStore, the PushSecret) as they are written,
/// but for the server's address and the namespaces. Vault gets what the documents assume: the
/// roles, users and role id they name, a secret `foo` with `my-value` and a `dev` label.
async fn documented(env: Arc<Env>) -> Result<()> {
    let vault = env.vault()?;
    let client = env.client().await;
    let policy = r#"
path "secret/data/foo" { capabilities = ["read"] }
path "secret/metadata/foo" { capabilities = ["read"] }
path "secret/data/vault/*" { capabilities = ["create", "read", "update", "delete"] }
path "secret/metadata/vault/*" { capabilities = ["create", "read", "update", "delete"] }
"#;
    vault.write_policy("eso-docs", policy).await?;
    vault
        .write_kv_v2(KV2, "foo", &json!({"my-value": "s3cr3t"}))
        .await?;
    vault
        .write_kv_v2_metadata(
            KV2,
            "foo",
            &BTreeMap::from([("dev".to_owned(), "alice".to_owned())]),
        )
        .await?;
    let token_options = TokenOptions::policies(&["eso-docs"]);
    let token = |id: Option<&'static str>| async move {
        let mut body = json!({"policies": ["eso-docs"], "no_parent": true});
        if let Some(id) = id {
            body["id"] = json!(id);
        }
        let answer = vault
            .api(http::Method::POST, "auth/token/create", Some(&body))
            .await?
            .context("a token")?;
        anyhow::Ok(
            answer["auth"]["client_token"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    };
    // The example's Secret holds the dev server's usual root token, "root".
    token(Some("root")).await?;
    vault
        .create_approle_role("approle", "eso-docs", &token_options)
        .await?;
    vault
        .api(
            http::Method::POST,
            "auth/approle/role/eso-docs/role-id",
            Some(&json!({"role_id": "db02de05-fa39-4855-059b-67221c5c2f63"})),
        )
        .await?;
    for mount in ["userpass", "ldap"] {
        vault
            .create_userpass_user(mount, "username", "pa55word", &token_options)
            .await?;
    }

    let as_documented = |file: &str, ns: &str| -> Result<String> {
        Ok(
            std::fs::read_to_string(Env::path(format!("tests/eso-docs-vault/{file}")))?
                .replace("https://vault.acme.org", vault.address())
                .replace("http://my.vault.server:8200", vault.address())
                .replace("https://vault.example.com", vault.tls_address())
                .replace("namespace: example", &format!("namespace: {ns}"))
                .replace("namespace: default", &format!("namespace: {ns}"))
                .replace(
                    "namespace: \"external-secrets\"",
                    &format!("namespace: {ns}"),
                ),
        )
    };
    let secret = |name: &str, data: &[(&str, &str)]| {
        serde_yaml::to_string(&json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "stringData": data.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect::<serde_json::Map<_, _>>(),
        }))
    };
    let mut namespaces = Vec::new();
    for (store, credentials) in [
        ("example-store.yaml", None),
        ("token-store.yaml", Some("vault-token")),
        ("approle-store.yaml", Some("secret-id")),
        ("kubernetes-store.yaml", Some("vault")),
        ("ldap-store.yaml", Some("ldap-password")),
        ("userpass-store.yaml", Some("password")),
        ("jwt-store.yaml", Some("jwt-token")),
    ] {
        let ns = testenv::create_namespace(&client, "vault-docs").await?;
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
        let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "my-sa"}}))?;
        accounts.create(&PostParams::default(), &sa).await?;
        let value = match credentials {
            None => None,
            Some("vault-token") => Some(token(None).await?),
            Some("secret-id") => Some(vault.approle_secret_id("approle", "eso-docs").await?),
            Some("vault" | "jwt-token") => Some(
                testenv::service_account_token(
                    &client,
                    &ns,
                    "my-sa",
                    &["vault"],
                    Duration::from_secs(3600),
                )
                .await?,
            ),
            Some(_) => Some("pa55word".to_owned()),
        };
        if let (Some(key), Some(value)) = (credentials, value) {
            testenv::apply_yaml_in(&client, &ns, &secret("my-secret", &[(key, &value)])?, true)
                .await?;
        }
        let role = TokenOptions::policies(&["eso-docs"]);
        match store {
            "kubernetes-store.yaml" => {
                vault
                    .create_kubernetes_role(
                        "kubernetes",
                        "demo",
                        &KubernetesRole {
                            service_account_names: vec!["my-sa".into()],
                            namespaces: vec![ns.clone()],
                            audience: Some("vault".into()),
                        },
                        &role,
                    )
                    .await?
            }
            "jwt-store.yaml" => {
                vault
                    .create_jwt_role(
                        "jwt",
                        "vault-jwt-role",
                        &JwtRole {
                            audiences: vec!["vault".into()],
                            subject: Some(format!("system:serviceaccount:{ns}:my-sa")),
                            claims: None,
                        },
                        &role,
                    )
                    .await?
            }
            _ => {}
        }
        testenv::apply_yaml_in(&client, &ns, &as_documented(store, &ns)?, true).await?;
        testenv::apply_yaml_in(
            &client,
            &ns,
            &as_documented("example-externalsecret.yaml", &ns)?,
            true,
        )
        .await?;
        namespaces.push((store, ns));
    }

    // The cert ClusterSecretStore, read from a namespace of its own.
    let ns = testenv::create_namespace(&client, "vault-docs-cert").await?;
    let ca = testenv::CertificateAuthority::new("documented cert login")?;
    let issued = ca.issue_client("external-secrets", None)?;
    vault
        .create_cert_role("cert", "eso-docs", &ca.cert_pem(), &token_options)
        .await?;
    let objects = serde_yaml::to_string(&json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "vault-tls-cert"},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": issued.cert_pem, "tls.key": issued.key_pem},
    }))? + "---\n"
        + &serde_yaml::to_string(&json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "vault-ca-bundle"},
            "data": {"ca.crt": vault.ca_pem()},
        }))?;
    testenv::apply_yaml_in(&client, &ns, &objects, true).await?;
    let store = as_documented("cert-store.yaml", &ns)?.replace(
        "name: vault-cert-auth",
        &format!("name: vault-cert-auth-{ns}"),
    );
    testenv::apply_yaml_in(&client, &ns, &store, true).await?;
    let es = as_documented("example-externalsecret.yaml", &ns)?.replace(
        "    name: vault-backend\n    kind: SecretStore",
        &format!("    name: vault-cert-auth-{ns}\n    kind: ClusterSecretStore"),
    );
    testenv::apply_yaml_in(&client, &ns, &es, true).await?;
    namespaces.push(("cert-store.yaml", ns));

    for (store, ns) in &namespaces {
        let synced = testenv::wait_for(TIMEOUT, &format!("{store}: example-sync"), || async {
            let secret = Api::<Secret>::namespaced(client.clone(), ns)
                .get("example-sync")
                .await?;
            let data = crate::sync::data_of(&secret);
            match (data.get("foobar"), data.get("developer")) {
                (Some(f), Some(d)) if f == b"s3cr3t" && d == b"alice" => Ok(data),
                _ => Err(anyhow!("keys {:?}", data.keys().collect::<Vec<_>>())),
            }
        })
        .await?;
        let tags: Value = serde_json::from_slice(synced.get("tags").context("tags")?)?;
        ensure!(
            tags["dev"] == "alice" && tags["current_version"] == "1",
            "{store}: tags {tags}"
        );
    }

    // The documented PushSecret, through a token store of the name it refers to.
    let ns = testenv::create_namespace(&client, "vault-docs-push").await?;
    let store = format!(
        "apiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {{name: vault-secretstore}}\nspec:\n  provider:\n    vault:\n      server: {}\n      path: secret\n      auth: {{tokenSecretRef: {{name: pusher, key: token}}}}\n",
        vault.address()
    );
    testenv::apply_yaml_in(
        &client,
        &ns,
        &secret("pusher", &[("token", &token(None).await?)])?,
        true,
    )
    .await?;
    testenv::apply_yaml_in(&client, &ns, &store, true).await?;
    testenv::apply_yaml_in(&client, &ns, &as_documented("pushsecret.yaml", &ns)?, true).await?;
    for (path, want) in [
        ("vault/secret1", json!({"foo": "bar"})),
        ("vault/secret2", json!({"foo": "bar"})),
    ] {
        testenv::wait_for(TIMEOUT, &format!("{path} pushed"), || async {
            match vault.read_kv_v2(KV2, path, None).await? {
                Some(s) if Value::Object(s.data.clone()) == want => Ok(()),
                other => Err(anyhow!(
                    "{:?}",
                    other.map(|s| s.data.keys().cloned().collect::<Vec<_>>())
                )),
            }
        })
        .await?;
    }
    Ok(())
}

/// `tls.certSecretRef`/`keySecretRef`: a listener that requires a client certificate is reached
/// with one, and refuses a store without.
async fn mutual_tls(env: Arc<Env>) -> Result<()> {
    let (vault, client, ns, role_id) = approle_namespace(&env, "vault-mtls").await?;
    vault
        .write_kv_v2(KV2, &format!("{ns}/s"), &json!({"v": "mtls"}))
        .await?;
    let cert = vault.client_certificate();
    let tls_secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "vault-client"},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": cert.cert_pem, "tls.key": cert.key_pem},
    });
    testenv::apply_yaml_in(&client, &ns, &serde_yaml::to_string(&tls_secret)?, true).await?;
    use base64::Engine as _;
    let bundle = base64::engine::general_purpose::STANDARD.encode(vault.ca_pem());
    let store = |name: &str, tls: &str| {
        approle_store(vault, name, &role_id, "v2")
            .replace(vault.address(), vault.mtls_address())
            .replace(
                "      auth:",
                &format!("      caBundle: {bundle}\n{tls}      auth:"),
            )
    };
    let with = "      tls:\n        certSecretRef: {name: vault-client, key: tls.crt}\n        keySecretRef: {name: vault-client, key: tls.key}\n";
    testenv::apply_yaml_in(&client, &ns, &store("with-cert", with), true).await?;
    testenv::apply_yaml_in(&client, &ns, &store("without-cert", ""), true).await?;
    let es = format!(
        "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: s}}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {{name: with-cert}}\n  data: [{{secretKey: v, remoteRef: {{key: {ns}/s, property: v}}}}]\n"
    );
    testenv::apply_yaml_in(&client, &ns, &es, true).await?;
    store_ready(&client, &ns, "with-cert").await?;
    wait_secret(&client, &ns, "s", &bytes(&[("v", "mtls")])).await?;
    let stores: Api<SecretStore> = Api::namespaced(client, &ns);
    testenv::wait_for(
        TIMEOUT,
        "the store without a certificate to fail",
        || async {
            let s = serde_json::to_value(stores.get("without-cert").await?)?;
            match ready(&s) {
                Some(c) if c.status.as_str() == "False" => Ok(()),
                other => Err(anyhow!("Ready is {other:?}")),
            }
        },
    )
    .await
}

/// A store that says v1 for a KV v2 mount fails validation saying so, instead of failing each
/// read with a puzzling 404.
async fn wrong_version(env: Arc<Env>) -> Result<()> {
    let (vault, client, ns, role_id) = approle_namespace(&env, "vault-version").await?;
    let yaml = approle_store(vault, "vault", &role_id, "v1")
        .replace(&format!("path: {KV1}"), &format!("path: {KV2}"));
    testenv::apply_yaml_in(&client, &ns, &yaml, true).await?;
    let stores: Api<SecretStore> = Api::namespaced(client, &ns);
    let store = wait_ready("SecretStore vault", "False", "ValidationFailed", || async {
        Ok(serde_json::to_value(stores.get("vault").await?)?)
    })
    .await?;
    let message = ready(&store).and_then(|c| c.message).unwrap_or_default();
    ensure!(
        message.contains("version: mount \"secret\" is KV v2, the store says v1"),
        "{message}"
    );
    Ok(())
}

/// TLS certificate login: the client certificate and key come from a Secret, over the TLS
/// listener.
async fn cert_login(env: Arc<Env>) -> Result<()> {
    let vault = env.vault()?;
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "vault-cert").await?;
    policy_for(vault, &ns).await?;
    vault
        .write_kv_v2(KV2, &format!("{ns}/s"), &json!({"v": "by-cert"}))
        .await?;
    let ca = testenv::CertificateAuthority::new("vault clients")?;
    let issued = ca.issue_client("external-secrets", None)?;
    vault
        .create_cert_role(
            "cert",
            &ns,
            &ca.cert_pem(),
            &TokenOptions::policies(&[ns.as_str()]),
        )
        .await?;
    let tls_secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "client-cert"},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": issued.cert_pem, "tls.key": issued.key_pem},
    });
    testenv::apply_yaml_in(&client, &ns, &serde_yaml::to_string(&tls_secret)?, true).await?;
    use base64::Engine as _;
    let yaml = format!(
        r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {{name: cert}}
spec:
  provider:
    vault:
      server: {server}
      path: {KV2}
      caBundle: {bundle}
      auth:
        cert:
          path: cert
          vaultRole: {ns}
          clientCert: {{name: client-cert, key: tls.crt}}
          secretRef: {{name: client-cert, key: tls.key}}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: by-cert}}
spec:
  refreshInterval: 1h
  secretStoreRef: {{name: cert}}
  data: [{{secretKey: v, remoteRef: {{key: {ns}/s, property: v}}}}]
"#,
        server = vault.tls_address(),
        bundle = base64::engine::general_purpose::STANDARD.encode(vault.ca_pem()),
    );
    testenv::apply_yaml_in(&client, &ns, &yaml, true).await?;
    store_ready(&client, &ns, "cert").await?;
    wait_secret(&client, &ns, "by-cert", &bytes(&[("v", "by-cert")])).await?;
    Ok(())
}

/// One ClusterSecretStore, no namespace in its credential reference: each namespace using it
/// logs in with its own Secret, and so reads only what its own role may.
async fn referent_cluster_store(env: Arc<Env>) -> Result<()> {
    let vault = env.vault()?;
    let client = env.client().await;
    let a = testenv::create_namespace(&client, "vault-ref-a").await?;
    let b = testenv::create_namespace(&client, "vault-ref-b").await?;
    // JWT login with a ServiceAccount token requested in the consumer's namespace: each
    // namespace's own token, bound to its own role and policy.
    for ns in [&a, &b] {
        policy_for(vault, ns).await?;
        vault
            .write_kv_v2(KV2, &format!("{ns}/mine"), &json!({"owner": ns.as_str()}))
            .await?;
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        let sa: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": "eso-reader"}}))?;
        accounts.create(&PostParams::default(), &sa).await?;
        vault
            .create_jwt_role(
                "jwt",
                &format!("referent-{ns}"),
                &JwtRole {
                    audiences: vec!["vault".into()],
                    subject: Some(format!("system:serviceaccount:{ns}:eso-reader")),
                    claims: None,
                },
                &TokenOptions::policies(&[ns.as_str()]),
            )
            .await?;
    }
    // No namespace in serviceAccountRef: the token is requested where the ExternalSecret is.
    let store = |name: &str, ns: &str| {
        format!(
            r#"
apiVersion: external-secrets.io/v1
kind: ClusterSecretStore
metadata: {{name: {name}}}
spec:
  provider:
    vault:
      server: {server}
      path: {KV2}
      auth:
        jwt:
          path: jwt
          role: referent-{ns}
          kubernetesServiceAccountToken:
            serviceAccountRef: {{name: eso-reader, audiences: [vault]}}
"#,
            server = vault.address()
        )
    };
    let store_a = format!("{a}-store");
    testenv::apply_yaml_in(&client, &a, &store(&store_a, &a), true).await?;
    let stores: Api<ClusterSecretStore> = Api::all(client.clone());
    let checked = wait_ready(
        "referent ClusterSecretStore",
        "True",
        "ValidationUnknown",
        || async { Ok(serde_json::to_value(stores.get(&store_a).await?)?) },
    )
    .await?;
    ensure!(checked["status"]["capabilities"] == "ReadWrite");
    let es = |name: &str, key: &str| {
        format!(
            "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: {name}}}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {{kind: ClusterSecretStore, name: {store_a}}}\n  data: [{{secretKey: owner, remoteRef: {{key: {key}, property: owner}}}}]\n"
        )
    };
    // From a: a's own ServiceAccount token, a's role, a's paths, and not b's.
    testenv::apply_yaml_in(&client, &a, &es("own", &format!("{a}/mine")), true).await?;
    wait_secret(&client, &a, "own", &bytes(&[("owner", &a)])).await?;
    testenv::apply_yaml_in(&client, &a, &es("theirs", &format!("{b}/mine")), true).await?;
    let in_a: Api<ExternalSecret> = Api::namespaced(client.clone(), &a);
    let forbidden = wait_ready(
        "ExternalSecret reading b's path from a",
        "False",
        "SecretSyncedError",
        || async { Ok(serde_json::to_value(in_a.get("theirs").await?)?) },
    )
    .await?;
    let message = ready(&forbidden)
        .and_then(|c| c.message)
        .unwrap_or_default();
    ensure!(message.contains("403"), "{message}");
    // From b: b's ServiceAccount token does not match a's role: refused, b reads nothing.
    testenv::apply_yaml_in(&client, &b, &es("other", &format!("{a}/mine")), true).await?;
    let externalsecrets: Api<ExternalSecret> = Api::namespaced(client.clone(), &b);
    let denied = wait_ready(
        "ExternalSecret in namespace b",
        "False",
        "SecretSyncedError",
        || async { Ok(serde_json::to_value(externalsecrets.get("other").await?)?) },
    )
    .await?;
    let message = ready(&denied).and_then(|c| c.message).unwrap_or_default();
    ensure!(message.contains("login failed"), "{message}");
    let secrets: Api<Secret> = Api::namespaced(client, &b);
    ensure!(secrets.get_opt("other").await?.is_none(), "b got no Secret");
    Ok(())
}

async fn outside_namespace(env: Arc<Env>) -> Result<()> {
    let vault = env.vault()?;
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "vault-scope").await?;
    let yaml = format!(
        r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {{name: sneaky}}
spec:
  provider:
    vault:
      server: {server}
      path: {KV2}
      auth:
        appRole:
          roleId: any
          secretRef: {{name: approle, namespace: kube-system, key: secret-id}}
"#,
        server = vault.address()
    );
    testenv::apply_yaml_in(&client, &ns, &yaml, true).await?;
    let stores: Api<SecretStore> = Api::namespaced(client, &ns);
    let store = wait_ready(
        "SecretStore sneaky",
        "False",
        "InvalidProviderConfig",
        || async { Ok(serde_json::to_value(stores.get("sneaky").await?)?) },
    )
    .await?;
    let message = ready(&store).and_then(|c| c.message).unwrap_or_default();
    ensure!(
        message.contains("auth.appRole.secretRef.namespace"),
        "the condition names the field: {message}"
    );
    Ok(())
}

/// 200 ExternalSecrets on one store, refreshed every 3 s for longer than the token lives:
/// Vault sees about one login per token lifetime, not one per reconcile; rotating the secret id
/// gives a new login without a restart.
async fn one_login_per_identity(env: Arc<Env>) -> Result<()> {
    const COUNT: usize = 200;
    const TTL: Duration = Duration::from_secs(8);
    let vault = env.vault()?;
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "vault-logins-once").await?;
    vault
        .write_kv_v2(KV2, &format!("{ns}/shared"), &json!({"v": "1"}))
        .await?;
    // Renewable up to the max TTL, then a new login is needed.
    let token = TokenOptions::policies(&[ns.as_str()])
        .ttl(TTL)
        .max_ttl(TTL * 2);
    let (mount, role_id) = approle_of_its_own(vault, &client, &ns, token).await?;
    let path = format!("auth/{mount}/login");
    let logins = || vault.count_audit_responses(|r| !r.failed && r.path == path);
    // Only the operator logs in at this mount; the helpers use the root token.
    let before = logins()?;
    let started = Instant::now();
    // Its requests carry `X-Team: <ns>`: renewals have no path of their own to tell them apart.
    let store = approle_store_on(vault, "vault", &role_id, &mount).replace(
        "      auth:\n",
        &format!("      headers: {{X-Team: {ns}}}\n      auth:\n"),
    );
    testenv::apply_yaml_in(&client, &ns, &store, true).await?;
    for i in 0..COUNT {
        let es = format!(
            "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: es-{i}}}\nspec:\n  refreshInterval: 3s\n  secretStoreRef: {{name: vault}}\n  data: [{{secretKey: v, remoteRef: {{key: {ns}/shared, property: v}}}}]\n"
        );
        testenv::apply_yaml_in(&client, &ns, &es, true).await?;
    }
    wait_secret(
        &client,
        &ns,
        &format!("es-{}", COUNT - 1),
        &bytes(&[("v", "1")]),
    )
    .await?;
    // Keep refreshing for several token lifetimes.
    tokio::time::sleep(TTL * 3).await;
    let elapsed = started.elapsed();
    let after = logins()?;
    let made = after - before;
    let bound = (elapsed.as_secs_f64() / TTL.as_secs_f64()).floor() as usize + 1;
    ensure!(
        made >= 1 && made <= bound,
        "{made} AppRole logins in {elapsed:?} with a {TTL:?} token; at most {bound} expected"
    );
    let shared = format!("{KV2}/data/{ns}/shared");
    let reads =
        vault.count_audit_responses(|r| !r.failed && r.operation == "read" && r.path == shared)?;
    ensure!(reads >= COUNT, "every ExternalSecret read: {reads} reads");
    let ours = |r: &testenv::AuditedRequest<'_>| r.headers["x-team"][0] == ns.as_str();
    // A renewal is asked for once a token is near its end, and extends it by its TTL until the
    // max TTL caps it; a token that can be renewed no further is used as it is, not renewed
    // again at every read until it expires.
    let renewals = vault.count_audit_responses(|r| r.path == "auth/token/renew-self" && ours(r))?;
    ensure!(
        renewals <= 4 * made,
        "{renewals} token renewals for {made} logins with a {TTL:?} token renewable up to {:?}",
        TTL * 2
    );
    eprintln!(
        "{made} logins (at most {bound}), {renewals} renewals and {reads} reads for {COUNT} ExternalSecrets in {elapsed:?}"
    );

    // A new secret id in the Secret: the client is rebuilt and logs in with it, and the token
    // of the client it replaces is revoked rather than left to expire.
    let revocations = || {
        vault.count_audit_responses(|r| !r.failed && r.path == "auth/token/revoke-self" && ours(r))
    };
    let (before_rotation, revoked_before) = (logins()?, revocations()?);
    store_secret_id(vault, &client, &mount, &ns).await?;
    testenv::wait_for(TIMEOUT, "a login with the rotated secret id", || async {
        if logins()? > before_rotation && revocations()? > revoked_before {
            Ok(())
        } else {
            Err(anyhow!("no new login and revocation yet"))
        }
    })
    .await
}

/// An inline SecretStore is checked twice (the store's check, and its converted provider
/// object's own check) and read by several ExternalSecrets: all of them are one identity, the
/// provider object in one namespace with one set of credentials, so Vault sees one login. An
/// AppRole mount of its own, so that no other trial's logins count.
async fn inline_store_logs_in_once(env: Arc<Env>) -> Result<()> {
    const COUNT: usize = 5;
    let vault = env.vault()?;
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "vault-inline-once").await?;
    let (mount, role_id) =
        approle_of_its_own(vault, &client, &ns, TokenOptions::policies(&[ns.as_str()])).await?;
    vault
        .write_kv_v2(KV2, &format!("{ns}/shared"), &json!({"v": "1"}))
        .await?;
    let mut yaml = approle_store_on(vault, "vault", &role_id, &mount);
    for i in 0..COUNT {
        yaml.push_str(&format!(
            "---\napiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: es-{i}}}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {{name: vault}}\n  data: [{{secretKey: v, remoteRef: {{key: {ns}/shared, property: v}}}}]\n"
        ));
    }
    testenv::apply_yaml_in(&client, &ns, &yaml, true).await?;
    let externalsecrets: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    for i in 0..COUNT {
        let name = format!("es-{i}");
        if let Err(e) = wait_secret(&client, &ns, &name, &bytes(&[("v", "1")])).await {
            let es = externalsecrets.get(&name).await?;
            let condition = ready(&serde_json::to_value(&es)?);
            return Err(e.context(format!("ExternalSecret {name}: {condition:?}")));
        }
    }
    store_ready(&client, &ns, "vault").await?;
    // The converted object was validated on its own, with a client of its own until now.
    let resource =
        api::providers::vault::DESCRIPTOR.storage_resource(api::provider_kinds::Scope::Namespaced);
    let objects: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &resource);
    wait_ready("Vault vault", "True", "Valid", || async {
        Ok(serde_json::to_value(objects.get("vault").await?)?)
    })
    .await?;
    // Room for a late second login to reach the audit log.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let path = format!("auth/{mount}/login");
    let logins = vault.count_audit_responses(|r| !r.failed && r.path == path)?;
    ensure!(
        logins == 1,
        "{logins} logins for one inline store, its provider object and {COUNT} ExternalSecrets"
    );
    Ok(())
}

/// A namespaced Vault object `name` logging in with the namespace's AppRole, its requests
/// carrying `X-Team: <ns>` for the audit log, once Ready; its API.
async fn audited_vault_object(
    vault: &VaultServer,
    client: kube::Client,
    ns: &str,
    role_id: &str,
    name: &str,
) -> Result<Api<kube::api::DynamicObject>> {
    let yaml = format!(
        "apiVersion: providers.external-secrets.io/v1alpha1\nkind: Vault\nmetadata: {{name: {name}}}\nspec:\n  server: {server}\n  path: {KV2}\n  headers: {{X-Team: {ns}}}\n  auth:\n    appRole:\n      roleId: {role_id}\n      secretRef: {{name: approle, key: secret-id}}\n",
        server = vault.address(),
    );
    testenv::apply_yaml_in(&client, ns, &yaml, true).await?;
    let resource =
        api::providers::vault::DESCRIPTOR.storage_resource(api::provider_kinds::Scope::Namespaced);
    let objects: Api<kube::api::DynamicObject> = Api::namespaced_with(client, ns, &resource);
    wait_ready(&format!("Vault {name}"), "True", "Valid", || async {
        Ok(serde_json::to_value(objects.get(name).await?)?)
    })
    .await?;
    Ok(objects)
}

/// The provider reconciler's own status write is no reason to validate again (issue 21 §3): a
/// Vault object alone, Ready, asked Vault `lookup-self` once, not once more for the event of
/// the status it wrote.
async fn status_write_validates_nothing(env: Arc<Env>) -> Result<()> {
    let (vault, client, ns, role_id) = approle_namespace(&env, "vault-status-once").await?;
    audited_vault_object(vault, client, &ns, &role_id, "alone").await?;
    // Room for the reconcile a status event would start.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let lookups = vault.count_audit_responses(|r| {
        r.path == "auth/token/lookup-self" && r.headers["x-team"] == json!([ns.as_str()])
    })?;
    ensure!(
        lookups == 1,
        "{lookups} validations (lookup-self) of one provider object that changed once"
    );
    Ok(())
}

/// A provider object deleted takes its client with it at once (issue 21 §2): the token it
/// logged in for is revoked (`revoke-self`, told apart by its `X-Team` header), not left alive
/// in the client cache until the idle eviction a quarter of an hour later.
async fn deleted_object_revokes(env: Arc<Env>) -> Result<()> {
    let (vault, client, ns, role_id) = approle_namespace(&env, "vault-revoked").await?;
    let objects = audited_vault_object(vault, client, &ns, &role_id, "gone").await?;
    let revoked = || {
        vault.count_audit_responses(|r| {
            !r.failed
                && r.path == "auth/token/revoke-self"
                && r.headers["x-team"] == json!([ns.as_str()])
        })
    };
    ensure!(revoked()? == 0, "revoked while the object was still there");
    objects.delete("gone", &Default::default()).await?;
    testenv::wait_for(TIMEOUT, "the deleted object's token revoked", || async {
        match revoked()? {
            0 => Err(anyhow!("no revoke-self with this object's header yet")),
            _ => Ok(()),
        }
    })
    .await
}

/// Vault stops: every Secret stays byte for byte, the ExternalSecrets say so; Vault comes back:
/// they recover without an operator restart. A server of its own, so others keep theirs.
async fn outage(env: Arc<Env>) -> Result<()> {
    let vault = VaultServer::start()?;
    configure(&vault, &env).await?;
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "vault-outage").await?;
    vault
        .write_kv_v2(KV2, &format!("{ns}/s"), &json!({"v": "before"}))
        .await?;
    let role_id = approle_for(&vault, &client, &ns, TokenOptions::policies(&[ns.as_str()])).await?;
    let es = format!(
        "{store}---\napiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: s}}\nspec:\n  refreshInterval: 1s\n  secretStoreRef: {{name: vault}}\n  data: [{{secretKey: v, remoteRef: {{key: {ns}/s, property: v}}}}]\n",
        store = approle_store(&vault, "vault", &role_id, "v2")
    );
    testenv::apply_yaml_in(&client, &ns, &es, true).await?;
    let synced = wait_secret(&client, &ns, "s", &bytes(&[("v", "before")])).await?;
    vault.stop();
    let externalsecrets: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    wait_ready("ExternalSecret s", "False", "SecretSyncedError", || async {
        Ok(serde_json::to_value(externalsecrets.get("s").await?)?)
    })
    .await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let during = secrets.get("s").await?;
    ensure!(
        during.data == synced.data
            && during.metadata.resource_version == synced.metadata.resource_version,
        "the Secret is untouched while Vault is down"
    );
    vault.restart()?;
    vault
        .write_kv_v2(KV2, &format!("{ns}/s"), &json!({"v": "after"}))
        .await?;
    // The same operator, not restarted, reads again: at its next retry, whose per-object
    // backoff (doubling from 1 s) can pass a minute when a loaded machine keeps Vault down a
    // while, hence the longer wait.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    testenv::wait_for(
        Duration::from_secs(180),
        "the value written after the restart",
        || async {
            let secret = secrets.get("s").await?;
            if crate::sync::data_of(&secret) == bytes(&[("v", "after")]) {
                Ok(())
            } else {
                Err(anyhow!("not yet"))
            }
        },
    )
    .await
}
