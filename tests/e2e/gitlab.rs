//! The GitLab provider end to end: the operator on the real control plane reads and writes CI/CD
//! variables of the GitLab stand-in (`tests/gitlab-standin`, checked against GitLab's OpenAPI and
//! python-gitlab). Each trial starts its own stand-in, so they run in parallel.

use std::sync::Arc;

use anyhow::{Context, Result, anyhow, ensure};
use api::external_secret::ExternalSecret;
use api::push_secret::PushSecret;
use api::store::{ClusterSecretStore, SecretStore};
use gitlab_standin::{GitlabStandin, Role, Variable};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use libtest_mimic::Trial;

use crate::operator::{TIMEOUT, wait_ready};
use crate::sync::{bytes, value, wait_secret};
use crate::{Env, trial};

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial(
            "gitlab::project_groups_environment_property_and_find",
            env,
            reads,
        ),
        trial(
            "gitlab::push_read_back_refuse_unmanaged_and_delete",
            env,
            push,
        ),
        trial("gitlab::a_bad_token_names_its_secret", env, bad_token),
        trial("gitlab::esos_documented_manifests", env, documented),
        trial("gitlab::outage_keeps_every_secret", env, outage),
        trial(
            "gitlab::referent_cluster_store_uses_each_namespaces_token",
            env,
            referent,
        ),
        trial(
            "gitlab::v1beta1_objects_read_at_v1alpha1_and_a_store_naming_v1beta1_syncs",
            env,
            v1beta1,
        ),
    ]
}

pub(crate) const PROJECT: &str = "acme/platform/app";
pub(crate) const TOKEN: &str = "glpat-e2e-maintainer";

/// A group `acme`, its subgroup `acme/platform` and the project, a user with `token` who
/// maintains the project and owns the groups.
pub(crate) fn standin(token: &str) -> Result<GitlabStandin> {
    let gitlab = GitlabStandin::start_strict()?;
    gitlab.add_group("acme")?;
    gitlab.add_group("acme/platform")?;
    gitlab.add_project(PROJECT)?;
    gitlab.add_user("ci", token)?;
    gitlab.grant("ci", "acme", Role::Owner)?;
    gitlab.grant("ci", PROJECT, Role::Maintainer)?;
    Ok(gitlab)
}

pub(crate) fn store(kind: &str, url: &str, extra: &str) -> String {
    format!(
        r#"
apiVersion: external-secrets.io/v1
kind: {kind}
metadata: {{name: gitlab}}
spec:
  provider:
    gitlab:
      url: {url}
      projectID: "{PROJECT}"
      auth:
        SecretRef:
          accessToken: {{name: gitlab-token, key: token}}
{extra}"#
    )
}

pub(crate) fn token_secret(token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: gitlab-token}}\nstringData: {{token: {token}}}\n"
    )
}

/// A namespace with the token Secret and a Ready store.
pub(crate) async fn namespace_with_store(
    client: &kube::Client,
    prefix: &str,
    gitlab: &GitlabStandin,
    extra: &str,
) -> Result<String> {
    let ns = testenv::create_namespace(client, prefix).await?;
    testenv::apply_yaml_in(client, &ns, &token_secret(TOKEN), true).await?;
    testenv::apply_yaml_in(
        client,
        &ns,
        &store("SecretStore", &gitlab.url(), extra),
        true,
    )
    .await?;
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), &ns);
    wait_ready("SecretStore gitlab", "True", "Valid", || {
        value(&stores, "gitlab")
    })
    .await?;
    Ok(ns)
}

async fn reads(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let gitlab = standin(TOKEN)?;
    gitlab.add_project_variable(PROJECT, Variable::new("DB_USER", "app-any"))?;
    gitlab.add_project_variable(
        PROJECT,
        Variable::new("DB_USER", "app-prod").scope("production"),
    )?;
    gitlab.add_project_variable(
        PROJECT,
        Variable::new("DB_CONFIG", r#"{"host":"db.internal","port":"5432"}"#),
    )?;
    gitlab.add_group_variable("acme", Variable::new("SHARED", "from-acme"))?;
    gitlab.add_group_variable("acme", Variable::new("ONLY_ROOT", "root"))?;
    gitlab.add_group_variable("acme/platform", Variable::new("SHARED", "from-platform"))?;
    let ns = namespace_with_store(
        &client,
        "gitlab-read",
        &gitlab,
        "      environment: production\n      inheritFromGroups: true\n",
    )
    .await?;
    let es = r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: app}
spec:
  refreshInterval: 1h
  secretStoreRef: {name: gitlab, kind: SecretStore}
  target: {name: app}
  data:
  - {secretKey: user, remoteRef: {key: DB-USER}}
  - {secretKey: shared, remoteRef: {key: SHARED}}
  - {secretKey: root, remoteRef: {key: ONLY_ROOT}}
  - {secretKey: host, remoteRef: {key: DB_CONFIG, property: host}}
  dataFrom:
  - extract: {key: DB_CONFIG}
"#;
    testenv::apply_yaml_in(&client, &ns, es, true).await?;
    // The environment's value over `*`; the nearest group over its parent.
    wait_secret(
        &client,
        &ns,
        "app",
        &bytes(&[
            ("user", "app-prod"),
            ("shared", "from-platform"),
            ("root", "root"),
            ("host", "db.internal"),
            ("port", "5432"),
        ]),
    )
    .await?;

    let find = r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: found}
spec:
  refreshInterval: 1h
  secretStoreRef: {name: gitlab, kind: SecretStore}
  dataFrom:
  - find: {name: {regexp: "^DB_"}}
"#;
    testenv::apply_yaml_in(&client, &ns, find, true).await?;
    wait_secret(
        &client,
        &ns,
        "found",
        &bytes(&[
            ("DB_USER", "app-prod"),
            ("DB_CONFIG", r#"{"host":"db.internal","port":"5432"}"#),
        ]),
    )
    .await?;
    gitlab.assert_no_violations();
    Ok(())
}

async fn push(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let gitlab = standin(TOKEN)?;
    gitlab.add_project_variable(PROJECT, Variable::new("HANDMADE", "keep-me"))?;
    let ns = namespace_with_store(&client, "gitlab-push", &gitlab, "").await?;
    let manifests = r#"
apiVersion: v1
kind: Secret
metadata: {name: src}
stringData: {token: s3cr3t-t0ken}
---
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {name: push}
spec:
  refreshInterval: 1h
  deletionPolicy: Delete
  secretStoreRefs: [{name: gitlab, kind: SecretStore}]
  selector: {secret: {name: src}}
  data:
  - match: {secretKey: token, remoteRef: {remoteKey: API-TOKEN}}
    metadata:
      apiVersion: gitlab.external-secrets.io/v1alpha1
      kind: PushSecretMetadata
      spec: {masked: true, protected: true}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: reader}
spec:
  refreshInterval: 1h
  secretStoreRef: {name: gitlab, kind: SecretStore}
  data: [{secretKey: token, remoteRef: {key: API_TOKEN}}]
"#;
    testenv::apply_yaml_in(&client, &ns, manifests, true).await?;
    let pushes: Api<PushSecret> = Api::namespaced(client.clone(), &ns);
    wait_ready("PushSecret push", "True", "Synced", || {
        value(&pushes, "push")
    })
    .await?;
    wait_secret(&client, &ns, "reader", &bytes(&[("token", "s3cr3t-t0ken")])).await?;
    let pushed = gitlab
        .project_variables(PROJECT)?
        .into_iter()
        .find(|v| v.key == "API_TOKEN")
        .ok_or_else(|| anyhow!("API_TOKEN was not created"))?;
    ensure!(
        pushed.masked && pushed.protected,
        "metadata applied: {pushed:?}"
    );
    ensure!(
        pushed
            .description
            .as_deref()
            .is_some_and(|d| d.starts_with("managed-by: external-secrets")),
        "the managed-by marker: {:?}",
        pushed.description
    );

    // A variable someone made by hand is never overwritten.
    let unmanaged = r#"
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {name: overwrite}
spec:
  refreshInterval: 1h
  secretStoreRefs: [{name: gitlab, kind: SecretStore}]
  selector: {secret: {name: src}}
  data:
  - match: {secretKey: token, remoteRef: {remoteKey: HANDMADE}}
"#;
    testenv::apply_yaml_in(&client, &ns, unmanaged, true).await?;
    let refused = wait_ready("PushSecret overwrite", "False", "Errored", || {
        value(&pushes, "overwrite")
    })
    .await?;
    let message = crate::operator::ready(&refused)
        .and_then(|c| c.message)
        .unwrap_or_default();
    ensure!(
        message.contains("HANDMADE"),
        "names the variable: {message}"
    );
    ensure!(
        !message.contains("s3cr3t"),
        "no secret in the message: {message}"
    );
    let handmade = gitlab
        .project_variables(PROJECT)?
        .into_iter()
        .find(|v| v.key == "HANDMADE")
        .ok_or_else(|| anyhow!("HANDMADE is gone"))?;
    ensure!(handmade.value == "keep-me", "HANDMADE was overwritten");

    // deletionPolicy Delete: what we pushed goes with the PushSecret.
    pushes.delete("push", &DeleteParams::default()).await?;
    testenv::wait_for(TIMEOUT, "API_TOKEN to be deleted", || async {
        let gone = !gitlab
            .project_variables(PROJECT)?
            .iter()
            .any(|v| v.key == "API_TOKEN");
        if gone {
            Ok(())
        } else {
            Err(anyhow!("API_TOKEN is still there"))
        }
    })
    .await?;
    gitlab.assert_no_violations();
    Ok(())
}

async fn bad_token(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let gitlab = standin(TOKEN)?;
    let ns = testenv::create_namespace(&client, "gitlab-401").await?;
    testenv::apply_yaml_in(&client, &ns, &token_secret("glpat-revoked"), true).await?;
    testenv::apply_yaml_in(&client, &ns, &store("SecretStore", &gitlab.url(), ""), true).await?;
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), &ns);
    let store = wait_ready("SecretStore gitlab", "False", "ValidationFailed", || {
        value(&stores, "gitlab")
    })
    .await?;
    let message = crate::operator::ready(&store)
        .and_then(|c| c.message)
        .unwrap_or_default();
    ensure!(
        message.contains(&format!("{ns}/gitlab-token")),
        "the condition names the token Secret: {message}"
    );
    ensure!(
        !message.contains("glpat-revoked"),
        "no token in the message"
    );
    Ok(())
}

async fn outage(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let gitlab = standin(TOKEN)?;
    gitlab.add_project_variable(PROJECT, Variable::new("DB_PASSWORD", "pw-1"))?;
    let ns = namespace_with_store(&client, "gitlab-down", &gitlab, "").await?;
    let es = r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: app}
spec:
  refreshInterval: 1h
  secretStoreRef: {name: gitlab, kind: SecretStore}
  data: [{secretKey: password, remoteRef: {key: DB_PASSWORD}}]
"#;
    testenv::apply_yaml_in(&client, &ns, es, true).await?;
    let want = bytes(&[("password", "pw-1")]);
    let before = wait_secret(&client, &ns, "app", &want).await?;

    gitlab.stop();
    let ess: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    ess.patch(
        "app",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"force-sync": "1"}}})),
    )
    .await?;
    wait_ready("ExternalSecret app", "False", "SecretSyncedError", || {
        value(&ess, "app")
    })
    .await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let during = secrets.get("app").await?;
    ensure!(
        during.data == before.data,
        "a provider outage never changes the Secret"
    );

    gitlab.restart()?;
    wait_ready("ExternalSecret app", "True", "SecretSynced", || {
        value(&ess, "app")
    })
    .await?;
    wait_secret(&client, &ns, "app", &want).await?;
    Ok(())
}

async fn referent(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let gitlab = standin(TOKEN)?;
    gitlab.add_project_variable(PROJECT, Variable::new("APP_KEY", "k-123"))?;
    let name = format!("gitlab-referent-{}", std::process::id());
    let css = store("ClusterSecretStore", &gitlab.url(), "").replace(
        "metadata: {name: gitlab}",
        &format!("metadata: {{name: {name}}}"),
    );
    testenv::apply_yaml(&client, &css, true).await?;
    let es = format!(
        "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: app}}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {{name: {name}, kind: ClusterSecretStore}}\n  data: [{{secretKey: key, remoteRef: {{key: APP_KEY}}}}]\n"
    );
    // The store names no namespace for its token: each consumer's own `gitlab-token` is read.
    // A's is valid and B's is revoked, so B fails while A syncs through the same store.
    let a = testenv::create_namespace(&client, "gitlab-ref-a").await?;
    testenv::apply_yaml_in(&client, &a, &token_secret(TOKEN), true).await?;
    testenv::apply_yaml_in(&client, &a, &es, true).await?;
    let b = testenv::create_namespace(&client, "gitlab-ref-b").await?;
    testenv::apply_yaml_in(&client, &b, &token_secret("glpat-revoked"), true).await?;
    testenv::apply_yaml_in(&client, &b, &es, true).await?;
    wait_secret(&client, &a, "app", &bytes(&[("key", "k-123")])).await?;
    let ess: Api<ExternalSecret> = Api::namespaced(client.clone(), &b);
    // Its first failure may still be the store's own readiness (a referent store validates
    // without a token); what counts is the failure B settles on.
    let token_secret = format!("{b}/gitlab-token");
    testenv::wait_for(TIMEOUT, "B's failure to name B's token Secret", || async {
        let es = value(&ess, "app").await?;
        let ready = crate::operator::ready(&es);
        let message = ready
            .as_ref()
            .and_then(|c| c.message.clone())
            .unwrap_or_default();
        ensure!(
            ready.is_some_and(|c| c.reason.as_deref() == Some("SecretSyncedError"))
                && message.contains(&token_secret),
            "B's failure names B's token Secret: {message}"
        );
        Ok(())
    })
    .await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &b);
    ensure!(
        secrets.get_opt("app").await?.is_none(),
        "B got no Secret with A's token"
    );
    let stores: Api<ClusterSecretStore> = Api::all(client.clone());
    stores.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}

/// `docs/snippets/gitlab-secret-store.yaml` and `gitlab-external-secret.yaml` from ESO's docs,
/// as a user fills them in: the url, a project and two numeric group IDs, an environment.
async fn documented(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let gitlab = standin(TOKEN)?;
    let (root, platform) = (gitlab.group_id("acme")?, gitlab.group_id("acme/platform")?);
    let project = gitlab.project_id(PROJECT)?;
    gitlab.add_group_variable("acme", Variable::new("myGitlabVariable", "from-acme"))?;
    gitlab.add_group_variable(
        "acme/platform",
        Variable::new("myGitlabVariable", "from-platform").scope("staging"),
    )?;
    let ns = testenv::create_namespace(&client, "gitlab-docs").await?;
    let manifests = format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: gitlab-secret}}
stringData: {{token: {TOKEN}}}
---
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata:
  name: gitlab-secret-store
spec:
  provider:
    # provider type: gitlab
    gitlab:
      url: {url}
      auth:
        SecretRef:
          accessToken:
            name: gitlab-secret
            key: token
      projectID: "{project}"
      # To sync variables from specific groups, provide their numeric IDs
      # (visible on the group's General Settings page).
      # groupIDs and inheritFromGroups are mutually exclusive: set only one.
      groupIDs: ["{root}", "{platform}"]
      # Alternatively, automatically inherit variables from all parent groups:
      # inheritFromGroups: true
      environment: "staging"
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata:
  name: gitlab-external-secret-example
spec:
  refreshInterval: 1h0m0s

  secretStoreRef:
    kind: SecretStore
    name: gitlab-secret-store # Must match SecretStore on the cluster

  target:
    name: gitlab-secret-to-create # Name for the secret to be created on the cluster
    creationPolicy: Owner

  data:
    - secretKey: secretKey # Key given to the secret to be created on the cluster
      remoteRef:
        key: myGitlabVariable # Key of the variable on Gitlab
"#,
        url = gitlab.url()
    );
    testenv::apply_yaml_in(&client, &ns, &manifests, true).await?;
    // The last group wins, with the store's environment.
    wait_secret(
        &client,
        &ns,
        "gitlab-secret-to-create",
        &bytes(&[("secretKey", "from-platform")]),
    )
    .await?;
    let ess: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    wait_ready(
        "ExternalSecret gitlab-external-secret-example",
        "True",
        "SecretSynced",
        || value(&ess, "gitlab-external-secret-example"),
    )
    .await?;
    gitlab.assert_no_violations();
    Ok(())
}

/// The `Gitlab` kind at both versions through the real API server and the conversion webhook:
/// written at v1beta1 and read at v1alpha1 (the storage version) in ESO's shape, written at
/// v1alpha1 with both group settings and read at v1beta1 with one and back with both, and a
/// store whose `providerRef` names v1beta1 syncs from the stand-in, inheriting the groups.
async fn v1beta1(env: Arc<Env>) -> Result<()> {
    use api::provider_kinds::Scope;
    use serde_json::json;

    let client = env.client().await;
    let gitlab = standin(TOKEN)?;
    gitlab.add_project_variable(PROJECT, Variable::new("DB_USER", "app"))?;
    gitlab.add_group_variable("acme", Variable::new("SHARED", "from-acme"))?;
    let ns = testenv::create_namespace(&client, "gitlab-beta").await?;
    testenv::apply_yaml_in(&client, &ns, &token_secret(TOKEN), true).await?;
    let at = |version| {
        let resource = api::providers::gitlab::DESCRIPTOR.resource(Scope::Namespaced, version);
        Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &resource)
    };
    let (alpha, beta) = (at("v1alpha1"), at("v1beta1"));
    let token = json!({"accessToken": {"name": "gitlab-token", "key": "token"}});

    let written: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "providers.external-secrets.io/v1beta1",
        "kind": "Gitlab",
        "metadata": {"name": "beta"},
        "spec": {
            "url": gitlab.url(),
            "project": PROJECT,
            "groups": {"inherit": true},
            "auth": {"secretRef": token},
        },
    }))?;
    beta.create(&PostParams::default(), &written).await?;
    let read = alpha.get("beta").await?.data["spec"].clone();
    let esos_shape = json!({
        "url": gitlab.url(),
        "projectID": PROJECT,
        "inheritFromGroups": true,
        "auth": {"SecretRef": token},
    });
    ensure!(read == esos_shape, "v1alpha1 view: {read}");

    // ESO's schema takes a list beside inheritFromGroups (and reads the ancestors); v1beta1
    // shows what is read and keeps the list aside, so reading back at v1alpha1 loses nothing.
    let spec = json!({
        "url": gitlab.url(),
        "projectID": PROJECT,
        "groupIDs": ["acme"],
        "inheritFromGroups": true,
        "auth": {"SecretRef": token},
    });
    let written: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "providers.external-secrets.io/v1alpha1",
        "kind": "Gitlab",
        "metadata": {"name": "alpha"},
        "spec": spec,
    }))?;
    alpha.create(&PostParams::default(), &written).await?;
    let as_beta = beta.get("alpha").await?.data["spec"].clone();
    ensure!(
        as_beta["groups"] == json!({"inherit": true}) && as_beta["project"] == PROJECT,
        "v1beta1 view: {as_beta}"
    );
    let back = alpha.get("alpha").await?.data["spec"].clone();
    ensure!(back == spec, "round trip: {back}");

    let manifests = r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: beta}
spec:
  providerRef: {apiVersion: providers.external-secrets.io/v1beta1, kind: Gitlab, name: beta}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: app}
spec:
  refreshInterval: 1h
  secretStoreRef: {name: beta}
  data:
  - {secretKey: user, remoteRef: {key: DB_USER}}
  - {secretKey: shared, remoteRef: {key: SHARED}}
"#;
    testenv::apply_yaml_in(&client, &ns, manifests, true).await?;
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), &ns);
    wait_ready("SecretStore beta", "True", "Valid", || {
        value(&stores, "beta")
    })
    .await
    .context("a store whose providerRef names v1beta1")?;
    wait_secret(
        &client,
        &ns,
        "app",
        &bytes(&[("user", "app"), ("shared", "from-acme")]),
    )
    .await?;
    gitlab.assert_no_violations();
    Ok(())
}
