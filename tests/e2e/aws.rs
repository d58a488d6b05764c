//! The AWS provider end to end on moto, the AWS stand-in, found the way an operator deployment
//! finds a VPC endpoint: `AWS_ENDPOINT_URL` in the operator's environment (this binary runs
//! itself again with it set, [`environment`]). ESO's documentation manifests (`tests/eso-docs-aws`)
//! are applied unchanged; moto's contents are written and read with boto3.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use api::external_secret::ExternalSecret;
use api::push_secret::PushSecret;
use api::store::{ClusterSecretStore, SecretStore};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use libtest_mimic::Trial;
use serde_json::json;

use crate::operator::{TIMEOUT, wait_ready};
use crate::sync::{bytes, value, wait_secret};
use crate::{Env, trial};

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial("aws::esos_documented_reads", env, documented_reads),
        trial(
            "aws::esos_documented_pushes_refusal_and_deletion",
            env,
            pushes,
        ),
        trial(
            "aws::irsa_with_an_api_server_token_and_one_assume_role_for_50_external_secrets",
            env,
            sessions,
        ),
    ]
}

/// What the operator's process gets besides moto's endpoint: credentials for stores without
/// `auth` (the SDK's default chain reads them first), and nothing of the machine's AWS setup.
pub fn environment(endpoint: &str) -> Vec<(String, String)> {
    [
        ("AWS_ENDPOINT_URL", endpoint),
        ("AWS_ACCESS_KEY_ID", "pod-access-key"),
        ("AWS_SECRET_ACCESS_KEY", "pod-secret-key"),
        ("AWS_CONFIG_FILE", "/dev/null"),
        ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

macro_rules! doc {
    ($name:literal) => {
        include_str!(concat!("../eso-docs-aws/", $name, ".yaml"))
    };
}

/// The Secret ESO's documented stores read their keys from; moto takes any key.
const KEYS: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: awssm-secret}\nstringData: {access-key: AKIDE2E, secret-access-key: e2e-secret}\n";

fn store(kind: &str, name: &str, service: &str, keys_namespace: Option<&str>) -> String {
    let ns = keys_namespace
        .map(|n| format!(", namespace: {n}"))
        .unwrap_or_default();
    format!(
        r#"
apiVersion: external-secrets.io/v1
kind: {kind}
metadata: {{name: {name}}}
spec:
  provider:
    aws:
      service: {service}
      region: eu-central-1
      auth:
        secretRef:
          accessKeyIDSecretRef: {{name: awssm-secret, key: access-key{ns}}}
          secretAccessKeySecretRef: {{name: awssm-secret, key: secret-access-key{ns}}}
"#
    )
}

async fn ready_store(client: &kube::Client, ns: &str, name: &str) -> Result<()> {
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), ns);
    wait_ready(&format!("SecretStore {ns}/{name}"), "True", "Valid", || {
        value(&stores, name)
    })
    .await?;
    Ok(())
}

/// A namespace of a fixed name, as a documented manifest names it.
async fn namespace(client: &kube::Client, name: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(name).await?.is_none() {
        let ns = serde_json::from_value(json!({"metadata": {"name": name}}))?;
        namespaces.create(&PostParams::default(), &ns).await?;
    }
    Ok(())
}

async fn documented_reads(env: Arc<Env>) -> Result<()> {
    let m = env.moto()?;
    let client = env.client().await;
    m.create_secret(
        "friendslist",
        r#"{"name": {"first": "Tom", "last": "Anderson"}, "friends": [{"first": "Dale", "last": "Murphy"}, {"first": "Roger", "last": "Craig"}]}"#,
    )?;
    m.create_secret("database-credentials", r#"{"password": "unused"}"#)?;
    m.tag_secret("database-credentials", &[("dev", "seed"), ("team", "db")])?;

    // aws-sm-store.yaml (a role assumed with the Secret's keys) and its ExternalSecret.
    let ns = testenv::create_namespace(&client, "aws-docs").await?;
    testenv::apply_yaml_in(&client, &ns, KEYS, true).await?;
    testenv::apply_yaml_in(&client, &ns, doc!("sm-store"), true).await?;
    ready_store(&client, &ns, "aws-secretsmanager").await?;
    testenv::apply_yaml_in(&client, &ns, doc!("sm-external-secret"), true).await?;
    wait_secret(
        &client,
        &ns,
        "friends",
        &bytes(&[
            ("my_name", "Tom"),
            ("first_friend", "Roger"),
            ("tags", r#"{"dev":"seed","team":"db"}"#),
            ("developer", "seed"),
        ]),
    )
    .await?;

    // aws-sm-store-secretsmanager-config.yaml: no auth, so the operator's own credentials.
    let own = testenv::create_namespace(&client, "aws-docs-own").await?;
    testenv::apply_yaml_in(&client, &own, doc!("sm-store-secretsmanager-config"), true).await?;
    ready_store(&client, &own, "aws-secretsmanager").await?;
    // aws-parameter-store.yaml.
    testenv::apply_yaml_in(&client, &ns, doc!("parameter-store"), true).await?;
    ready_store(&client, &ns, "parameterstore").await?;

    // The examples' ExternalSecrets in `ci`, through the ClusterSecretStores they name.
    for (name, value) in [
        (
            "service/anchore-engine/engineAccess",
            r#"{"ANCHORE_ADMIN_USERNAME": "admin", "ANCHORE_ADMIN_PASSWORD": "anchore-pw"}"#,
        ),
        ("service/sonarqube/apiToken", "sonar-token"),
        (
            "service/harbor/chartRobot",
            r#"{"username": "robot$chart", "password": "harbor-pw"}"#,
        ),
    ] {
        m.create_secret(name, value)?;
    }
    m.put_parameter(
        "/service/github/sshUserPrivateKeyUserName",
        "git",
        "String",
        &[],
    )?;
    m.put_parameter(
        "/service/github/sshUserPrivateKey",
        "-----BEGIN KEY-----",
        "SecureString",
        &[],
    )?;
    namespace(&client, "ci").await?;
    for (name, service) in [
        ("cluster-secrets-store", "SecretsManager"),
        ("cluster-parameter-store", "ParameterStore"),
    ] {
        testenv::apply_yaml(
            &client,
            &store("ClusterSecretStore", name, service, Some(&ns)),
            true,
        )
        .await?;
        let stores: Api<ClusterSecretStore> = Api::all(client.clone());
        wait_ready(
            &format!("ClusterSecretStore {name}"),
            "True",
            "Valid",
            || value(&stores, name),
        )
        .await?;
    }
    for manifest in [
        doc!("anchore-engine-external-secret"),
        doc!("jenkins-github-ssh-external-secret"),
        doc!("jenkins-sonarqube-external-secret"),
        doc!("jenkins-harbor-external-secret"),
    ] {
        testenv::apply_yaml(&client, manifest, true).await?;
    }
    wait_secret(
        &client,
        "ci",
        "anchore-access-credentials",
        &bytes(&[
            ("ANCHORE_ADMIN_USERNAME", "admin"),
            ("ANCHORE_ADMIN_PASSWORD", "anchore-pw"),
        ]),
    )
    .await?;
    wait_secret(
        &client,
        "ci",
        "sonarqube-api-token",
        &bytes(&[("text", "sonar-token")]),
    )
    .await?;
    wait_secret(
        &client,
        "ci",
        "harbor-chart-robot",
        &bytes(&[("username", "robot$chart"), ("password", "harbor-pw")]),
    )
    .await?;
    let ssh = wait_secret(
        &client,
        "ci",
        "github-ssh-access",
        &bytes(&[("username", "git"), ("privateKey", "-----BEGIN KEY-----")]),
    )
    .await?;
    let labels = ssh.metadata.labels.unwrap_or_default();
    ensure!(
        labels
            .get("jenkins.io/credentials-type")
            .map(String::as_str)
            == Some("basicSSHUserPrivateKey"),
        "{labels:?}"
    );
    Ok(())
}

async fn pushes(env: Arc<Env>) -> Result<()> {
    let m = env.moto()?;
    let client = env.client().await;
    // aws-sm-push-secret-with-metadata.yaml, in the namespace it names, with its store.
    namespace(&client, "teamb").await?;
    testenv::apply_yaml_in(&client, "teamb", KEYS, true).await?;
    testenv::apply_yaml_in(
        &client,
        "teamb",
        &store("SecretStore", "teamb-secret-store", "SecretsManager", None),
        true,
    )
    .await?;
    ready_store(&client, "teamb", "teamb-secret-store").await?;
    let source = "apiVersion: v1\nkind: Secret\nmetadata: {name: my-secret}\nstringData: {key1: pushed-by-docs}\n";
    testenv::apply_yaml_in(&client, "teamb", source, true).await?;
    testenv::apply_yaml(&client, doc!("sm-push-secret-with-metadata"), true).await?;
    let teamb: Api<PushSecret> = Api::namespaced(client.clone(), "teamb");
    wait_ready("PushSecret pushsecret-example", "True", "Synced", || {
        value(&teamb, "pushsecret-example")
    })
    .await?;
    ensure!(
        m.get_secret_string("teamb-my-first-parameter-3")?
            .as_deref()
            == Some("pushed-by-docs")
    );
    let tags = m.secret_tags("teamb-my-first-parameter-3")?;
    for (k, v) in [
        ("managed-by", "external-secrets"),
        ("secret-store", "teamb-secret-store"),
        ("refresh-interval", "1h"),
    ] {
        ensure!(tags.get(k).map(String::as_str) == Some(v), "{tags:?}");
    }

    // aws-pm-push-secret-with-metadata.yaml: the whole Secret, SecureString, Advanced tier.
    testenv::apply_yaml_in(&client, "default", KEYS, true).await?;
    testenv::apply_yaml_in(
        &client,
        "default",
        &store("SecretStore", "aws-parameterstore", "ParameterStore", None),
        true,
    )
    .await?;
    ready_store(&client, "default", "aws-parameterstore").await?;
    let pokedex = "apiVersion: v1\nkind: Secret\nmetadata: {name: pokedex-credentials}\nstringData: {username: ash, password: pikachu}\n";
    testenv::apply_yaml_in(&client, "default", pokedex, true).await?;
    testenv::apply_yaml(&client, doc!("pm-push-secret-with-metadata"), true).await?;
    let default: Api<PushSecret> = Api::namespaced(client.clone(), "default");
    wait_ready(
        "PushSecret default/pushsecret-example",
        "True",
        "Synced",
        || value(&default, "pushsecret-example"),
    )
    .await?;
    let pushed: serde_json::Value = serde_json::from_str(
        &m.get_parameter("my-first-parameter")?
            .context("my-first-parameter was not pushed")?,
    )?;
    // ESO's default for a whole Secret: base64 values.
    ensure!(
        pushed == json!({"password": "cGlrYWNodQ==", "username": "YXNo"}),
        "{pushed}"
    );
    ensure!(
        m.parameter_tags("my-first-parameter")?
            .get("team")
            .map(String::as_str)
            == Some("pokedex")
    );

    // A remote secret someone else made is refused, and left as it was.
    m.create_secret("teamb-not-ours", "theirs")?;
    let refused = r#"
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {name: not-ours}
spec:
  secretStoreRefs: [{name: teamb-secret-store, kind: SecretStore}]
  selector: {secret: {name: my-secret}}
  data: [{match: {secretKey: key1, remoteRef: {remoteKey: teamb-not-ours}}}]
"#;
    testenv::apply_yaml_in(&client, "teamb", refused, true).await?;
    let status = wait_ready("PushSecret not-ours", "False", "Errored", || {
        value(&teamb, "not-ours")
    })
    .await?;
    ensure!(
        status
            .to_string()
            .contains("not managed by external-secrets"),
        "{status}"
    );
    ensure!(m.get_secret_string("teamb-not-ours")?.as_deref() == Some("theirs"));

    // deletionPolicy: Delete takes what was pushed away with the PushSecrets.
    teamb
        .delete("pushsecret-example", &DeleteParams::default())
        .await?;
    default
        .delete("pushsecret-example", &DeleteParams::default())
        .await?;
    testenv::wait_for(TIMEOUT, "the pushed secret and parameter deleted", || async {
        let scheduled = m.boto3(
            "sm = boto3.client('secretsmanager')\nprint('DeletedDate' in sm.describe_secret(SecretId='teamb-my-first-parameter-3'))",
        )?;
        ensure!(scheduled.trim() == "True", "the secret is not scheduled for deletion");
        ensure!(m.get_parameter("my-first-parameter")?.is_none(), "the parameter is still there");
        Ok(())
    })
    .await?;
    Ok(())
}

/// Calls moto recorded of the STS `action` for `role`.
fn assumed(m: &testenv::Moto, action: &str, role: &str) -> Result<Vec<BTreeMap<String, String>>> {
    Ok(m.recorded_forms(action)?
        .into_iter()
        .filter(|form| form.get("RoleArn").map(String::as_str) == Some(role))
        .collect())
}

async fn sessions(env: Arc<Env>) -> Result<()> {
    let m = env.moto()?;
    let client = env.client().await;
    m.start_recording()?;
    // IRSA: the role in the ServiceAccount's annotation, a token the API server issues.
    let irsa_role = "arn:aws:iam::123456789012:role/e2e-irsa";
    m.create_secret("irsa/value", "via irsa")?;
    let ns = testenv::create_namespace(&client, "aws-irsa").await?;
    let account = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: eso-irsa\n  annotations: {{eks.amazonaws.com/role-arn: \"{irsa_role}\"}}\n"
    );
    testenv::apply_yaml_in(&client, &ns, &account, true).await?;
    let jwt = r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: irsa}
spec:
  provider:
    aws:
      service: SecretsManager
      region: eu-central-1
      auth: {jwt: {serviceAccountRef: {name: eso-irsa}}}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: irsa}
spec:
  refreshInterval: 1h
  secretStoreRef: {name: irsa}
  target: {name: irsa}
  data: [{secretKey: value, remoteRef: {key: irsa/value}}]
"#;
    testenv::apply_yaml_in(&client, &ns, jwt, true).await?;
    wait_secret(&client, &ns, "irsa", &bytes(&[("value", "via irsa")])).await?;
    let exchanges = assumed(m, "AssumeRoleWithWebIdentity", irsa_role)?;
    let token = exchanges
        .first()
        .and_then(|f| f.get("WebIdentityToken"))
        .context("no AssumeRoleWithWebIdentity for the IRSA role was recorded")?;
    let review = Api::<TokenReview>::all(client.clone())
        .create(
            &PostParams::default(),
            &TokenReview {
                spec: TokenReviewSpec {
                    token: Some(token.clone()),
                    audiences: Some(vec!["sts.amazonaws.com".into()]),
                },
                ..Default::default()
            },
        )
        .await?;
    let status = review.status.context("a TokenReview without status")?;
    ensure!(
        status.authenticated == Some(true),
        "the token moto got is not valid: {:?}",
        status.error
    );
    let user = status.user.and_then(|u| u.username).unwrap_or_default();
    ensure!(
        user == format!("system:serviceaccount:{ns}:eso-irsa"),
        "{user}"
    );

    // 50 ExternalSecrets through one store's role, then a forced refresh of all: one session.
    let role = "arn:aws:iam::123456789012:role/e2e-fifty";
    m.create_secret("fifty/value", "first")?;
    let ns = testenv::create_namespace(&client, "aws-fifty").await?;
    testenv::apply_yaml_in(&client, &ns, KEYS, true).await?;
    let mut yaml = store("SecretStore", "fifty", "SecretsManager", None);
    yaml.push_str(&format!("      role: {role}\n"));
    for i in 0..50 {
        yaml.push_str(&format!(
            "---\napiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: es-{i}}}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {{name: fifty}}\n  target: {{name: es-{i}}}\n  data: [{{secretKey: value, remoteRef: {{key: fifty/value}}}}]\n"
        ));
    }
    testenv::apply_yaml_in(&client, &ns, &yaml, true).await?;
    for i in 0..50 {
        wait_secret(
            &client,
            &ns,
            &format!("es-{i}"),
            &bytes(&[("value", "first")]),
        )
        .await?;
    }
    m.put_secret_value("fifty/value", "second")?;
    let externals: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    for i in 0..50 {
        externals
            .patch(
                &format!("es-{i}"),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"force-sync": "1"}}})),
            )
            .await?;
    }
    for i in 0..50 {
        wait_secret(
            &client,
            &ns,
            &format!("es-{i}"),
            &bytes(&[("value", "second")]),
        )
        .await?;
    }
    let sessions = assumed(m, "AssumeRole", role)?.len();
    m.stop_recording()?;
    ensure!(
        sessions == 1,
        "{sessions} AssumeRole calls for one store's role"
    );
    Ok(())
}
