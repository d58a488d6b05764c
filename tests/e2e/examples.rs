//! `examples/` holds only what works: every manifest there is accepted with strict field
//! validation, and every store, ExternalSecret and PushSecret it defines becomes Ready, in
//! whichever order the files are applied. `tests/accepted-manifests/` holds manifests the API
//! accepts for features not built yet; a provider kind this build lacks is named
//! as such in the store's condition.
//!
//! The Vault and GitLab examples are what a user applies, with the servers a user's cluster
//! would name: `http://vault.vault.svc:8200` (`https://` for TLS) and
//! `https://gitlab.acme.internal/`. Applying them here rewrites those three addresses to the
//! test's Vault (`hack/build-vault.sh`) and a GitLab stand-in (`tests/gitlab-standin`), and
//! nothing else ([`example`]). What a user creates beside the examples is created by
//! [`prepare`]: on the Vault side the `external-secrets` Kubernetes-auth role for the
//! ServiceAccount `vault-auth`, its policy and the secrets the ExternalSecret reads, and the
//! `vault-token`, `vault-ca` and `vault-client-tls` Secrets and the `vault-ca` ConfigMap the
//! stores name; on the GitLab side the project, its groups, their variables and a user whose
//! token is the examples' `glpat-replace-me`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail, ensure};
use api::conditions::{ConditionStatus, READY, find};
use api::external_secret::ExternalSecret;
use api::push_secret::PushSecret;
use api::store::{ClusterSecretStore, SecretStore};
use gitlab_standin::{GitlabStandin, Variable};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client, ResourceExt};
use libtest_mimic::Trial;
use serde_json::{Value, json};
use testenv::{KubernetesRole, TokenOptions};
use tokio::sync::OnceCell;

use crate::gitlab::PROJECT;
use crate::operator::{TIMEOUT, wait_ready};
use crate::sync::{bytes, wait_secret};
use crate::vault::KV2;
use crate::{Env, trial};

const NAMESPACE: &str = "examples";
const ACCEPTED_NAMESPACE: &str = "accepted-manifests";
const REVERSED_NAMESPACE: &str = "examples-reversed";

/// Where the Vault and GitLab examples say their servers are.
const VAULT_HTTP: &str = "http://vault.vault.svc:8200";
const VAULT_HTTPS: &str = "https://vault.vault.svc:8200";
const GITLAB_URL: &str = "https://gitlab.acme.internal/";
/// The token of examples/provider-gitlab.yaml, which the stand-in takes for a maintainer's.
const GITLAB_TOKEN: &str = "glpat-replace-me";

/// The servers the Vault and GitLab examples are rewritten to, prepared once for the run.
struct Servers {
    vault_http: String,
    vault_https: String,
    gitlab: GitlabStandin,
}

static SERVERS: OnceCell<Servers> = OnceCell::const_new();

async fn servers(env: &Env) -> Result<&'static Servers> {
    SERVERS.get_or_try_init(|| prepare(env)).await
}

/// An example's YAML with the three server addresses rewritten (see the module's comment); any
/// other file as it is.
async fn example(env: &Env, file: &Path) -> Result<String> {
    let yaml = std::fs::read_to_string(file)?;
    if !file.starts_with(Env::path("examples")) {
        return Ok(yaml);
    }
    let servers = servers(env).await?;
    Ok(yaml
        .replace(VAULT_HTTP, &servers.vault_http)
        .replace(VAULT_HTTPS, &servers.vault_https)
        .replace(GITLAB_URL, &format!("{}/", servers.gitlab.url())))
}

/// What a user of the Vault and GitLab examples has set up beside them.
async fn prepare(env: &Env) -> Result<Servers> {
    let vault = env.vault()?;
    let client = env.client().await;
    let policy = "examples";
    vault
        .write_policy(
            policy,
            &format!(
                r#"
path "{KV2}/data/myapp/*" {{ capabilities = ["create", "read", "update", "delete", "list"] }}
path "{KV2}/metadata/myapp/*" {{ capabilities = ["create", "read", "update", "delete", "list"] }}
"#
            ),
        )
        .await?;
    vault
        .create_kubernetes_role(
            "kubernetes",
            "external-secrets",
            &KubernetesRole {
                service_account_names: vec!["vault-auth".into()],
                namespaces: vec![NAMESPACE.into(), REVERSED_NAMESPACE.into()],
                audience: None,
            },
            &TokenOptions::policies(&[policy]),
        )
        .await?;
    vault
        .write_kv_v2(KV2, "myapp/db", &json!({"password": "old-pa55word"}))
        .await?;
    vault
        .write_kv_v2(KV2, "myapp/db", &json!({"password": "pa55word"}))
        .await?;
    vault
        .write_kv_v2_metadata(
            KV2,
            "myapp/db",
            &BTreeMap::from([("owner".to_owned(), "team-payments".to_owned())]),
        )
        .await?;
    vault
        .write_kv_v2(
            KV2,
            "myapp/config",
            &json!({"log_level": "info", "region": "eu-west-1"}),
        )
        .await?;
    let token = vault
        .api(
            http::Method::POST,
            "auth/token/create",
            Some(&json!({"policies": [policy], "ttl": "24h"})),
        )
        .await?
        .and_then(|a| a["auth"]["client_token"].as_str().map(str::to_owned))
        .context("creating the token of examples/clustersecretstore-vault-inline.yaml")?;
    let tls = vault.client_certificate();
    let credentials = serde_yaml::to_string(&json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "vault-token"},
        "stringData": {"token": token},
    }))? + "---\n"
        + &serde_yaml::to_string(&json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "vault-ca"},
            "stringData": {"ca.crt": vault.ca_pem()},
        }))?
        + "---\n"
        + &serde_yaml::to_string(&json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": "vault-client-tls"},
            "stringData": {"tls.crt": tls.cert_pem, "tls.key": tls.key_pem},
        }))?;
    testenv::apply_yaml_in(&client, NAMESPACE, &credentials, true).await?;
    let ca = serde_yaml::to_string(&json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "vault-ca"},
        "data": {"ca.crt": vault.ca_pem()},
    }))?;
    for ns in [NAMESPACE, REVERSED_NAMESPACE] {
        testenv::apply_yaml_in(&client, ns, &ca, true).await?;
    }

    // What the AWS examples read, in the region they name.
    let moto = env.moto()?;
    moto.create_secret("myapp/db", r#"{"password": "aws-pa55word"}"#)?;
    moto.put_parameter("/myapp/log-level", "info", "String", &[])?;

    // The project and groups the examples name, the examples' token a maintainer's.
    let gitlab = crate::gitlab::standin(GITLAB_TOKEN)?;
    gitlab.add_project_variable(PROJECT, Variable::new("DEPLOY_TOKEN", "d3ploy"))?;
    gitlab.add_project_variable(PROJECT, Variable::new("DB_USER", "app"))?;
    gitlab.add_project_variable(
        PROJECT,
        Variable::new("DB_PASSWORD", "prod-pa55word").scope("production"),
    )?;
    gitlab.add_project_variable(
        PROJECT,
        Variable::new("DB_PASSWORD", "staging-pa55word").scope("staging"),
    )?;
    gitlab.add_group_variable("acme", Variable::new("DB_HOST", "db.acme.internal"))?;
    gitlab.add_group_variable("acme/platform", Variable::new("DB_PORT", "5432"))?;
    Ok(Servers {
        vault_http: vault.address().to_owned(),
        vault_https: vault.tls_address().to_owned(),
        gitlab,
    })
}

pub async fn setup(env: &Env) -> Result<()> {
    for name in [NAMESPACE, ACCEPTED_NAMESPACE, REVERSED_NAMESPACE] {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(env.client().await)
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
    }
    Ok(())
}

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    let mut trials: Vec<Trial> = ["examples", "tests/accepted-manifests"]
        .into_iter()
        .flat_map(|dir| {
            let root = Env::path(dir);
            yaml_files(&root).into_iter().map(move |file| {
                let rel = file
                    .strip_prefix(Env::path(""))
                    .unwrap_or(&file)
                    .display()
                    .to_string();
                (rel, file)
            })
        })
        .map(|(rel, file)| {
            trial(format!("examples::{rel}"), env, move |env| async move {
                let client = env.client().await;
                wait_for_late_crd(&client).await?;
                let yaml = example(&env, &file).await?;
                testenv::apply_yaml_in(&client, NAMESPACE, &yaml, true).await?;
                Ok(())
            })
        })
        .collect();
    trials.push(trial(
        "examples::every_example_becomes_ready",
        env,
        every_example_becomes_ready,
    ));
    trials.push(trial(
        "examples::applied_in_reverse_order",
        env,
        applied_in_reverse_order,
    ));
    trials.push(trial(
        "examples::a_provider_not_compiled_in_is_named",
        env,
        not_compiled_in,
    ));
    trials
}

/// Installed while the operator runs, by the first stores trial.
async fn wait_for_late_crd(client: &Client) -> Result<()> {
    testenv::wait_for_crd_established(
        client,
        crate::stores::LATE_CRD,
        std::time::Duration::from_secs(120),
    )
    .await
}

async fn every_example_becomes_ready(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    wait_for_late_crd(&client).await?;
    let mut cluster_stores = Vec::new();
    for file in yaml_files(&Env::path("examples")) {
        let yaml = example(&env, &file).await?;
        for object in testenv::apply_yaml_in(&client, NAMESPACE, &yaml, true).await? {
            if object
                .types
                .as_ref()
                .is_some_and(|t| t.kind == "ClusterSecretStore")
            {
                cluster_stores.push(object.name_any());
            }
        }
    }
    wait_all_ready(&client, NAMESPACE, &cluster_stores, true).await?;
    vault_and_gitlab_examples_did_what_they_say(&env, &client).await
}

/// The Vault and GitLab examples' ExternalSecrets wrote what their servers hold, and their
/// PushSecrets pushed there.
async fn vault_and_gitlab_examples_did_what_they_say(env: &Env, client: &Client) -> Result<()> {
    wait_secret(
        client,
        NAMESPACE,
        "vault",
        &bytes(&[
            ("password", "pa55word"),
            ("previous-password", "old-pa55word"),
            ("owner", "team-payments"),
            ("log_level", "info"),
            ("region", "eu-west-1"),
        ]),
    )
    .await?;
    // The `production` scope's DB_PASSWORD, not staging's; the project's variables only.
    wait_secret(
        client,
        NAMESPACE,
        "gitlab",
        &bytes(&[
            ("deploy-token", "d3ploy"),
            ("DB_USER", "app"),
            ("DB_PASSWORD", "prod-pa55word"),
        ]),
    )
    .await?;
    // A property from Secrets Manager; Parameter Store's `/myapp/` found and renamed.
    wait_secret(
        client,
        NAMESPACE,
        "aws",
        &bytes(&[("db-password", "aws-pa55word"), ("log-level", "info")]),
    )
    .await?;
    let servers = servers(env).await?;
    let pushed = env
        .vault()?
        .read_kv_v2(KV2, "myapp/pushed", None)
        .await?
        .context("secret/myapp/pushed was not written")?;
    ensure!(
        pushed.data.get("api-token") == Some(&json!("t0k3n-for-vault")),
        "examples/pushsecret-vault.yaml pushed the api-token"
    );
    let variable = servers
        .gitlab
        .project_variables(PROJECT)?
        .into_iter()
        .find(|v| v.key == "CI_API_TOKEN")
        .context("CI_API_TOKEN was not created")?;
    ensure!(
        variable.value == "t0k3n-for-gitlab-ci"
            && variable.masked
            && variable.protected
            && variable.environment_scope == "production",
        "examples/pushsecret-gitlab.yaml pushed a masked, protected variable for production: {variable:?}"
    );
    let violations = servers.gitlab.violations();
    ensure!(
        violations.is_empty(),
        "the GitLab stand-in answered outside GitLab's OpenAPI document: {violations:?}"
    );
    Ok(())
}

/// Waits until every SecretStore in `namespace`, each of `cluster_stores` and, `with_users`,
/// every ExternalSecret and PushSecret in `namespace` is Ready=True; names those that are not.
async fn wait_all_ready(
    client: &Client,
    namespace: &str,
    cluster_stores: &[String],
    with_users: bool,
) -> Result<()> {
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), namespace);
    let css: Api<ClusterSecretStore> = Api::all(client.clone());
    let externalsecrets: Api<ExternalSecret> = Api::namespaced(client.clone(), namespace);
    let pushsecrets: Api<PushSecret> = Api::namespaced(client.clone(), namespace);
    let what = format!("every example in {namespace} to be Ready=True");
    testenv::wait_for(TIMEOUT, &what, || async {
        let mut not_ready = Vec::new();
        for s in stores.list(&Default::default()).await? {
            let conditions = s.status.as_ref().map(|s| s.conditions.as_slice());
            note(&mut not_ready, "SecretStore", &s.name_any(), conditions);
        }
        for name in cluster_stores {
            let s = css.get(name).await?;
            let conditions = s.status.as_ref().map(|s| s.conditions.as_slice());
            note(&mut not_ready, "ClusterSecretStore", name, conditions);
        }
        if with_users {
            for es in externalsecrets.list(&Default::default()).await? {
                let conditions = es.status.as_ref().map(|s| s.conditions.as_slice());
                note(&mut not_ready, "ExternalSecret", &es.name_any(), conditions);
            }
            for ps in pushsecrets.list(&Default::default()).await? {
                let conditions = ps.status.as_ref().map(|s| s.conditions.as_slice());
                note(&mut not_ready, "PushSecret", &ps.name_any(), conditions);
            }
        }
        if not_ready.is_empty() {
            Ok(())
        } else {
            Err(anyhow!("not Ready: {}", not_ready.join("; ")))
        }
    })
    .await
}

fn note(
    not_ready: &mut Vec<String>,
    kind: &str,
    name: &str,
    conditions: Option<&[api::conditions::Condition]>,
) {
    match conditions.and_then(|c| find(c, READY)) {
        Some(c) if c.status == ConditionStatus::True => {}
        Some(c) => not_ready.push(format!(
            "{kind} {name}: {} {}",
            c.reason.clone().unwrap_or_default(),
            c.message.clone().unwrap_or_default()
        )),
        None => not_ready.push(format!("{kind} {name}: no Ready condition")),
    }
}

/// The namespaced examples, last file first and last document first, into a namespace of their
/// own: whichever of a provider object and a store's converted object comes first, both work.
async fn applied_in_reverse_order(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    wait_for_late_crd(&client).await?;
    let mut files = yaml_files(&Env::path("examples"));
    files.reverse();
    for file in files {
        let yaml = example(&env, &file).await?;
        let mut docs = testenv::parse_yaml(&yaml)?;
        docs.reverse();
        for mut doc in docs {
            let Some(meta) = doc.get("metadata").and_then(Value::as_object) else {
                bail!("{}: a document without metadata", file.display());
            };
            if meta.get("namespace").and_then(Value::as_str) != Some(NAMESPACE) {
                continue;
            }
            // The namespace wherever the example names it: its own, a RoleBinding's subject, a
            // Kubernetes store's remoteNamespace.
            moved(&mut doc);
            let yaml = serde_yaml::to_string(&doc)?;
            testenv::apply_yaml_in(&client, REVERSED_NAMESPACE, &yaml, true).await?;
        }
    }
    // Its ExternalSecrets that use cluster stores are denied by their conditions here.
    wait_all_ready(&client, REVERSED_NAMESPACE, &[], false).await?;
    let secrets: Api<Secret> = Api::namespaced(client, REVERSED_NAMESPACE);
    testenv::wait_for(TIMEOUT, "the quickstart Secret", || async {
        match secrets.get_opt("demo-credentials").await? {
            Some(s) if s.data.as_ref().is_some_and(|d| d.contains_key("username")) => Ok(()),
            other => Err(anyhow!(
                "not written yet: {:?}",
                other.map(|s| s.name_any())
            )),
        }
    })
    .await
}

/// Every string that is the examples' namespace, as the reversed namespace.
fn moved(value: &mut Value) {
    match value {
        Value::String(s) if s == NAMESPACE => *s = REVERSED_NAMESPACE.to_owned(),
        Value::Array(items) => items.iter_mut().for_each(moved),
        Value::Object(map) => map.values_mut().for_each(moved),
        _ => {}
    }
}

/// An operator built without the Kubernetes provider, for the accepted-manifests namespace.
async fn not_compiled_in(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let class = crate::operator::start_scoped_lacking(&env, ACCEPTED_NAMESPACE, "Kubernetes")?;
    let yaml = std::fs::read_to_string(Env::path("examples/secretstore-kubernetes-inline.yaml"))?
        .replace("namespace: examples", "namespace: accepted-manifests")
        .replace("spec:\n", &format!("spec:\n  controller: {class}\n"));
    testenv::apply_yaml_in(&client, ACCEPTED_NAMESPACE, &yaml, true).await?;
    let stores: Api<SecretStore> = Api::namespaced(client, ACCEPTED_NAMESPACE);
    let store = wait_ready(
        "SecretStore kubernetes-inline",
        "False",
        "InvalidProviderConfig",
        || async {
            Ok(serde_json::to_value(
                stores.get("kubernetes-inline").await?,
            )?)
        },
    )
    .await?;
    let message = store["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default();
    anyhow::ensure!(
        message.contains("provider Kubernetes is not compiled into this build of the operator"),
        "the condition should say Kubernetes is not compiled in: {message:?}"
    );
    Ok(())
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    files
}
