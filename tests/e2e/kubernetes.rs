//! The Kubernetes provider against a second real control plane ("remote": its own etcd and
//! kube-apiserver, the same binaries) and against the operator's own cluster: every way to
//! authenticate, reads of each shape, find, push and delete, a remote RBAC that refuses, and the
//! remote cluster stopped and started again.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, ensure};
use api::external_secret::ExternalSecret;
use api::push_secret::PushSecret;
use api::store::SecretStore;
use base64::Engine;
use k8s_openapi::api::authentication::v1::{SelfSubjectReview, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::{Api, Client, ResourceExt};
use libtest_mimic::Trial;
use serde_json::Value;
use testenv::ControlPlane;

use crate::operator::{TIMEOUT, wait_ready};
use crate::sync::{bytes, data_of, value, wait_secret, wait_secret_within};
use crate::{Env, trial};

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial(
            "kubernetes::a_token_reads_every_shape_and_finds_by_name_and_label",
            env,
            reads_every_shape,
        ),
        trial(
            "kubernetes::a_client_certificate_with_the_ca_from_a_secret",
            env,
            client_certificate,
        ),
        trial(
            "kubernetes::a_kubeconfig_in_a_secret_for_a_cluster_store",
            env,
            kubeconfig,
        ),
        trial(
            "kubernetes::a_service_account_reads_another_namespace_of_the_operators_cluster",
            env,
            own_cluster,
        ),
        trial(
            "kubernetes::a_service_account_token_the_remote_cluster_trusts",
            env,
            federated_service_account,
        ),
        trial(
            "kubernetes::pushed_values_merge_and_deletion_removes_only_what_was_pushed",
            env,
            push_and_delete,
        ),
        trial(
            "kubernetes::a_verb_the_remote_rbac_refuses_is_named",
            env,
            forbidden,
        ),
        trial(
            "kubernetes::the_remote_cluster_stopped_and_started_again",
            env,
            remote_down_and_back,
        ),
        trial("kubernetes::esos_documented_manifests", env, documented),
    ]
}

/// A Secret to create: its name, data and labels.
type RemoteSecret<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [(&'a str, &'a str)]);

/// Get, list and watch Secrets in a namespace; with `push`, also write and delete them.
fn role(push: bool) -> Value {
    let mut verbs = vec!["get", "list", "watch"];
    if push {
        verbs.extend(["create", "update", "patch", "delete"]);
    }
    serde_json::json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": verbs}])
}

/// A new namespace of a cluster, [`fill`]ed.
async fn remote_namespace(
    client: &Client,
    prefix: &str,
    secrets: &[RemoteSecret<'_>],
    rules: Value,
    subject: Value,
) -> Result<String> {
    let ns = testenv::create_namespace(client, prefix).await?;
    fill(client, &ns, secrets, rules, subject).await
}

fn pairs(pairs: &[(&str, &str)]) -> Value {
    Value::Object(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
            .collect(),
    )
}

/// A ServiceAccount `reader` in `ns` of `cluster` and a token the cluster issues for it.
async fn service_account_token(client: &Client, ns: &str) -> Result<(Value, String)> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let sa = serde_json::from_value(serde_json::json!({"metadata": {"name": "reader"}}))?;
    accounts.create(&PostParams::default(), &sa).await?;
    let answer = accounts
        .create_token_request(
            "reader",
            &PostParams::default(),
            &TokenRequest {
                spec: TokenRequestSpec {
                    expiration_seconds: Some(3600),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await?;
    let token = answer.status.context("a TokenRequest answer")?.token;
    let subject = serde_json::json!({"kind": "ServiceAccount", "name": "reader", "namespace": ns});
    Ok((subject, token))
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

async fn store_ready(client: &Client, ns: &str, name: &str) -> Result<Value> {
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), ns);
    wait_ready(&format!("SecretStore {name}"), "True", "Valid", || {
        value(&stores, name)
    })
    .await
}

/// A namespace of `remote` with `secrets` and a Role of `rules` for a ServiceAccount there,
/// and a namespace (`prefix-...`) of the operator's cluster with the SecretStore `remote`
/// reading it with a token the remote cluster issued for that ServiceAccount, its CA inline:
/// (remote namespace, local namespace).
async fn token_store(
    client: &Client,
    remote: &ControlPlane,
    prefix: &str,
    secrets: &[RemoteSecret<'_>],
    rules: Value,
) -> Result<(String, String)> {
    let rc = remote.client().await;
    let remote_ns = testenv::create_namespace(&rc, prefix).await?;
    let (subject, token) = service_account_token(&rc, &remote_ns).await?;
    fill(&rc, &remote_ns, secrets, rules, subject).await?;
    let ns = testenv::create_namespace(client, prefix).await?;
    let manifests = format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: token}}
stringData: {{token: {token}}}
---
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {{name: remote}}
spec:
  provider:
    kubernetes:
      remoteNamespace: {remote_ns}
      server:
        url: {url}
        caBundle: {ca}
      auth:
        token:
          bearerToken: {{name: token, key: token}}
"#,
        url = remote.server_url(),
        ca = b64(remote.ca_cert_pem()),
    );
    testenv::apply_yaml_in(client, &ns, &manifests, true).await?;
    Ok((remote_ns, ns))
}

async fn es_ready(client: &Client, ns: &str, name: &str) -> Result<Value> {
    let api: Api<ExternalSecret> = Api::namespaced(client.clone(), ns);
    wait_ready(
        &format!("ExternalSecret {name}"),
        "True",
        "SecretSynced",
        || value(&api, name),
    )
    .await
}

const DB: RemoteSecret<'static> = (
    "db",
    &[
        ("username", "admin"),
        ("password", "s3cr3t"),
        ("config", r#"{"db":{"host":"pg","port":5432}}"#),
    ],
    &[("dev", "alice"), ("app", "shop")],
);

async fn reads_every_shape(env: Arc<Env>) -> Result<()> {
    let remote = env.remote()?;
    let rc = remote.client().await;
    let client = env.client().await;
    let secrets: &[RemoteSecret<'_>] = &[
        DB,
        ("tls-a", &[("crt", "A")], &[("app", "nginx")]),
        ("tls-b", &[("crt", "B")], &[("app", "shop")]),
        ("other", &[("x", "y")], &[("app", "nginx")]),
        ("ephemeral", &[("k", "v")], &[]),
    ];
    let (remote_ns, ns) = token_store(&client, remote, "k8s-reads", secrets, role(false)).await?;
    store_ready(&client, &ns, "remote").await?;
    let es = r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: shapes}
spec:
  refreshInterval: 1h
  secretStoreRef: {kind: SecretStore, name: remote}
  target: {name: shapes}
  data:
  - {secretKey: username, remoteRef: {key: db, property: username}}
  - {secretKey: host, remoteRef: {key: db, property: config.db.host}}
  - {secretKey: whole, remoteRef: {key: db}}
  - {secretKey: tags, remoteRef: {key: db, metadataPolicy: Fetch}}
  - {secretKey: labels, remoteRef: {key: db, metadataPolicy: Fetch, property: labels}}
  - {secretKey: developer, remoteRef: {key: db, metadataPolicy: Fetch, property: labels.dev}}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: extracted}
spec:
  refreshInterval: 1h
  secretStoreRef: {kind: SecretStore, name: remote}
  target: {name: extracted}
  dataFrom:
  - extract: {key: db}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: found}
spec:
  refreshInterval: 1h
  secretStoreRef: {kind: SecretStore, name: remote}
  target: {name: found}
  dataFrom:
  - find: {name: {regexp: "^tls-"}}
  - find: {tags: {app: nginx}}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: ephemeral}
spec:
  refreshInterval: 2s
  secretStoreRef: {kind: SecretStore, name: remote}
  target: {name: ephemeral, deletionPolicy: Delete}
  data:
  - {secretKey: k, remoteRef: {key: ephemeral, property: k}}
"#;
    testenv::apply_yaml_in(&client, &ns, es, true).await?;
    let whole = r#"{"config":"{\"db\":{\"host\":\"pg\",\"port\":5432}}","password":"s3cr3t","username":"admin"}"#;
    wait_secret(
        &client,
        &ns,
        "shapes",
        &bytes(&[
            ("username", "admin"),
            ("host", "pg"),
            ("whole", whole),
            (
                "tags",
                r#"{"annotations":{"note":"hello"},"labels":{"app":"shop","dev":"alice"}}"#,
            ),
            ("labels", r#"{"app":"shop","dev":"alice"}"#),
            ("developer", "alice"),
        ]),
    )
    .await?;
    wait_secret(
        &client,
        &ns,
        "extracted",
        &bytes(&[
            ("username", "admin"),
            ("password", "s3cr3t"),
            ("config", r#"{"db":{"host":"pg","port":5432}}"#),
        ]),
    )
    .await?;
    wait_secret(
        &client,
        &ns,
        "found",
        &bytes(&[
            ("tls-a", r#"{"crt":"A"}"#),
            ("tls-b", r#"{"crt":"B"}"#),
            ("other", r#"{"x":"y"}"#),
        ]),
    )
    .await?;
    wait_secret(&client, &ns, "ephemeral", &bytes(&[("k", "v")])).await?;

    // Gone at the remote: "does not exist", so deletionPolicy Delete removes the target.
    Api::<Secret>::namespaced(rc.clone(), &remote_ns)
        .delete("ephemeral", &DeleteParams::default())
        .await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    testenv::wait_for(TIMEOUT, "Secret ephemeral to be deleted", || async {
        match secrets.get_opt("ephemeral").await? {
            None => Ok(()),
            Some(_) => Err(anyhow!("still there")),
        }
    })
    .await
}

/// Fills the namespace `ns` of a cluster with `secrets` (name → (data, labels), each annotated
/// `note: hello`), and a Role of `rules` bound to `subject` (a User or a ServiceAccount).
async fn fill(
    client: &Client,
    ns: &str,
    secrets: &[RemoteSecret<'_>],
    rules: Value,
    subject: Value,
) -> Result<String> {
    for (name, data, labels) in secrets {
        let manifest = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "labels": pairs(labels), "annotations": {"note": "hello"}},
            "stringData": pairs(data),
        });
        testenv::apply_yaml_in(client, ns, &serde_yaml::to_string(&manifest)?, true).await?;
    }
    let rbac = serde_json::json!([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "eso-store"}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "eso-store"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "eso-store"},
         "subjects": [subject]},
    ]);
    for doc in rbac.as_array().expect("a list") {
        testenv::apply_yaml_in(client, ns, &serde_yaml::to_string(doc)?, true).await?;
    }
    Ok(ns.to_owned())
}

async fn client_certificate(env: Arc<Env>) -> Result<()> {
    let remote = env.remote()?;
    let rc = remote.client().await;
    let client = env.client().await;
    let user = "cert-reader";
    let remote_ns = remote_namespace(
        &rc,
        "k8s-cert",
        &[DB],
        role(false),
        serde_json::json!({"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}),
    )
    .await?;
    let issued = remote.issue_client_certificate(user, None)?;
    let ns = testenv::create_namespace(&client, "k8s-cert").await?;
    let manifests = serde_json::json!([
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "client"},
         "type": "kubernetes.io/tls",
         "stringData": {"tls.crt": issued.cert_pem, "tls.key": issued.key_pem}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "remote-ca"},
         "stringData": {"ca.crt": remote.ca_cert_pem()}},
        {"apiVersion": "external-secrets.io/v1", "kind": "SecretStore",
         "metadata": {"name": "remote"},
         "spec": {"provider": {"kubernetes": {
            "remoteNamespace": remote_ns,
            "server": {"url": remote.server_url(),
                       "caProvider": {"type": "Secret", "name": "remote-ca", "key": "ca.crt"}},
            "auth": {"cert": {"clientCert": {"name": "client", "key": "tls.crt"},
                              "clientKey": {"name": "client", "key": "tls.key"}}}}}}},
        {"apiVersion": "external-secrets.io/v1", "kind": "ExternalSecret",
         "metadata": {"name": "db"},
         "spec": {"secretStoreRef": {"kind": "SecretStore", "name": "remote"},
                  "target": {"name": "db"},
                  "data": [{"secretKey": "password", "remoteRef": {"key": "db", "property": "password"}}]}},
    ]);
    for doc in manifests.as_array().expect("a list") {
        testenv::apply_yaml_in(&client, &ns, &serde_yaml::to_string(doc)?, true).await?;
    }
    store_ready(&client, &ns, "remote").await?;
    wait_secret(&client, &ns, "db", &bytes(&[("password", "s3cr3t")])).await?;
    Ok(())
}

async fn kubeconfig(env: Arc<Env>) -> Result<()> {
    let remote = env.remote()?;
    let rc = remote.client().await;
    let client = env.client().await;
    let remote_ns = testenv::create_namespace(&rc, "k8s-kubeconfig").await?;
    let (subject, token) = service_account_token(&rc, &remote_ns).await?;
    fill(&rc, &remote_ns, &[DB], role(false), subject).await?;
    let kubeconfig = serde_yaml::to_string(&serde_json::json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "remote",
        "clusters": [{"name": "remote", "cluster": {
            "server": remote.server_url(),
            "certificate-authority-data": b64(remote.ca_cert_pem())}}],
        "users": [{"name": "reader", "user": {"token": token}}],
        "contexts": [{"name": "remote", "context": {"cluster": "remote", "user": "reader"}}],
    }))?;
    let ns = testenv::create_namespace(&client, "k8s-kubeconfig").await?;
    let store = format!("k8s-kubeconfig-{ns}");
    let manifests = serde_json::json!([
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kubeconfig", "namespace": ns},
         "stringData": {"config": kubeconfig}},
        {"apiVersion": "external-secrets.io/v1", "kind": "ClusterSecretStore",
         "metadata": {"name": store},
         "spec": {"provider": {"kubernetes": {
            "remoteNamespace": remote_ns,
            "authRef": {"name": "kubeconfig", "key": "config", "namespace": ns}}}}},
        {"apiVersion": "external-secrets.io/v1", "kind": "ExternalSecret",
         "metadata": {"name": "db", "namespace": ns},
         "spec": {"secretStoreRef": {"kind": "ClusterSecretStore", "name": store},
                  "target": {"name": "db"},
                  "data": [{"secretKey": "user", "remoteRef": {"key": "db", "property": "username"}}]}},
    ]);
    for doc in manifests.as_array().expect("a list") {
        testenv::apply_yaml_in(&client, &ns, &serde_yaml::to_string(doc)?, true).await?;
    }
    let stores: Api<api::store::ClusterSecretStore> = Api::all(client.clone());
    wait_ready(
        &format!("ClusterSecretStore {store}"),
        "True",
        "Valid",
        || value(&stores, &store),
    )
    .await?;
    wait_secret(&client, &ns, "db", &bytes(&[("user", "admin")])).await?;
    stores.delete(&store, &DeleteParams::default()).await?;
    Ok(())
}

/// ESO's documented set-up for reading another namespace of the same cluster, with the token
/// requested for a ServiceAccount of the store's namespace (the server URL left out: the
/// cluster the operator runs against; its CA from `kube-root-ca.crt`).
async fn own_cluster(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "k8s-own").await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "reader"}}))?,
        )
        .await?;
    let subject = serde_json::json!({"kind": "ServiceAccount", "name": "reader", "namespace": ns});
    let shared = remote_namespace(&client, "k8s-shared", &[DB], role(false), subject).await?;
    let manifests = format!(
        r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {{name: same-cluster}}
spec:
  provider:
    kubernetes:
      remoteNamespace: {shared}
      server:
        caProvider: {{type: ConfigMap, name: kube-root-ca.crt, key: ca.crt}}
      auth:
        serviceAccount: {{name: reader}}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: copied}}
spec:
  secretStoreRef: {{kind: SecretStore, name: same-cluster}}
  target: {{name: copied}}
  data:
  - {{secretKey: username, remoteRef: {{key: db, property: username}}}}
"#
    );
    testenv::apply_yaml_in(&client, &ns, &manifests, true).await?;
    store_ready(&client, &ns, "same-cluster").await?;
    wait_secret(&client, &ns, "copied", &bytes(&[("username", "admin")])).await?;
    Ok(())
}

/// The audience a remote cluster that trusts the operator's cluster wants in a token.
const FEDERATED_AUDIENCE: &str = "remote-cluster";
/// What that remote cluster puts before the `sub` of such a token.
const FEDERATED_PREFIX: &str = "home:";

/// ESO's `serviceAccount` auth against another cluster: the token is requested from the
/// operator's cluster, for a ServiceAccount of the store's namespace, and the remote cluster
/// trusts that cluster's ServiceAccount issuer (a structured authentication configuration, as
/// workload identity federation sets it up), knowing the account as `home:system:...`.
async fn federated_service_account(env: Arc<Env>) -> Result<()> {
    let home = env.control_plane();
    let client = env.client().await;
    // The remote API server reads the issuer's discovery document and keys without credentials.
    testenv::apply_yaml(
        &client,
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-anonymous-issuer-discovery}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:service-account-issuer-discovery"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:unauthenticated"}]
"#,
        true,
    )
    .await?;
    let remote = ControlPlane::start_trusting(Some(testenv::TrustedIssuer {
        url: home.service_account_issuer(),
        ca_pem: home.ca_cert_pem().to_owned(),
        audience: FEDERATED_AUDIENCE.into(),
        username_prefix: FEDERATED_PREFIX.into(),
    }))?;
    let ns = testenv::create_namespace(&client, "k8s-federated").await?;
    Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "reader"}}))?,
        )
        .await?;
    let user = format!("{FEDERATED_PREFIX}system:serviceaccount:{ns}:reader");
    let rc = remote.client().await;
    let subject =
        serde_json::json!({"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"});
    let remote_ns = remote_namespace(&rc, "k8s-federated", &[DB], role(false), subject).await?;
    // The remote API server fetches the issuer's keys once it runs; wait until it knows them.
    testenv::wait_for(
        TIMEOUT,
        "the remote cluster to trust the operator's cluster's tokens",
        || async {
            let token = testenv::service_account_token(
                &client,
                &ns,
                "reader",
                &[FEDERATED_AUDIENCE],
                std::time::Duration::from_secs(600),
            )
            .await?;
            let mut config = kube::Config::new(remote.server_url().parse()?);
            config.root_cert = Some(vec![pem_der(remote.ca_cert_pem())?]);
            config.auth_info.token = Some(token.into());
            let review: SelfSubjectReview = Api::all(Client::try_from(config)?)
                .create(&PostParams::default(), &SelfSubjectReview::default())
                .await?;
            let name = review
                .status
                .and_then(|s| s.user_info)
                .and_then(|u| u.username);
            ensure!(name.as_deref() == Some(user.as_str()), "known as {name:?}");
            Ok(())
        },
    )
    .await?;
    let manifests = format!(
        r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {{name: remote}}
spec:
  provider:
    kubernetes:
      remoteNamespace: {remote_ns}
      server: {{url: "{url}", caBundle: {ca}}}
      auth:
        serviceAccount: {{name: reader, audiences: [{FEDERATED_AUDIENCE}]}}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: db}}
spec:
  secretStoreRef: {{kind: SecretStore, name: remote}}
  target: {{name: db}}
  data:
  - {{secretKey: password, remoteRef: {{key: db, property: password}}}}
"#,
        url = remote.server_url(),
        ca = b64(remote.ca_cert_pem()),
    );
    testenv::apply_yaml_in(&client, &ns, &manifests, true).await?;
    store_ready(&client, &ns, "remote").await?;
    wait_secret(&client, &ns, "db", &bytes(&[("password", "s3cr3t")])).await?;
    Ok(())
}

/// The DER of the one certificate in `pem`.
fn pem_der(pem: &str) -> Result<Vec<u8>> {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    Ok(base64::engine::general_purpose::STANDARD.decode(body)?)
}

async fn push_and_delete(env: Arc<Env>) -> Result<()> {
    let remote = env.remote()?;
    let rc = remote.client().await;
    let client = env.client().await;
    let merged: &[RemoteSecret<'_>] = &[("merged", &[("keep", "1")], &[("remote", "own")])];
    let (remote_ns, ns) = token_store(&client, remote, "k8s-push", merged, role(true)).await?;
    store_ready(&client, &ns, "remote").await?;
    let manifests = r#"
apiVersion: v1
kind: Secret
metadata: {name: app, labels: {app: shop}}
stringData: {password: hunter2, api: k3y}
---
apiVersion: v1
kind: Secret
metadata: {name: login}
type: kubernetes.io/basic-auth
stringData: {username: admin, password: pw}
---
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {name: merge}
spec:
  refreshInterval: 1h
  deletionPolicy: Delete
  secretStoreRefs: [{kind: SecretStore, name: remote}]
  selector: {secret: {name: app}}
  data:
  - match: {secretKey: password, remoteRef: {remoteKey: merged, property: pw}}
    metadata:
      apiVersion: kubernetes.external-secrets.io/v1alpha1
      kind: PushSecretMetadata
      spec: {labels: {color: red}, annotations: {"yes": please}}
---
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {name: whole}
spec:
  refreshInterval: 1h
  deletionPolicy: Delete
  secretStoreRefs: [{kind: SecretStore, name: remote}]
  selector: {secret: {name: login}}
  data:
  - match: {remoteRef: {remoteKey: login-copy}}
---
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {name: elsewhere}
spec:
  refreshInterval: 1h
  secretStoreRefs: [{kind: SecretStore, name: remote}]
  selector: {secret: {name: app}}
  data:
  - match: {secretKey: api, remoteRef: {remoteKey: other, property: api}}
    metadata:
      apiVersion: kubernetes.external-secrets.io/v1alpha1
      kind: PushSecretMetadata
      spec: {remoteNamespace: default}
"#
    .replace("remoteKey: other", &format!("remoteKey: other-{ns}"));
    testenv::apply_yaml_in(&client, &ns, &manifests, true).await?;
    let pushes: Api<PushSecret> = Api::namespaced(client.clone(), &ns);
    for name in ["merge", "whole"] {
        wait_ready(&format!("PushSecret {name}"), "True", "Synced", || {
            value(&pushes, name)
        })
        .await?;
    }
    let refused = wait_ready("PushSecret elsewhere", "False", "Errored", || {
        value(&pushes, "elsewhere")
    })
    .await?;
    let message = refused["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default();
    ensure!(
        message.contains("remoteNamespace") && message.contains("ClusterSecretStore"),
        "the refusal should name the field: {message}"
    );

    let remote_secrets: Api<Secret> = Api::namespaced(rc.clone(), &remote_ns);
    let merged = remote_secrets.get("merged").await?;
    ensure!(
        data_of(&merged) == bytes(&[("keep", "1"), ("pw", "hunter2")]),
        "merged holds {:?}",
        data_of(&merged).keys().collect::<Vec<_>>()
    );
    let labels = merged.labels();
    ensure!(
        labels.get("color").map(String::as_str) == Some("red")
            && labels.get("app").map(String::as_str) == Some("shop")
            && labels.get("remote").map(String::as_str) == Some("own"),
        "labels: {labels:?}"
    );
    ensure!(
        merged.annotations().get("yes").map(String::as_str) == Some("please"),
        "annotations: {:?}",
        merged.annotations()
    );
    let copy = remote_secrets.get("login-copy").await?;
    ensure!(
        data_of(&copy) == bytes(&[("username", "admin"), ("password", "pw")]),
        "login-copy holds {:?}",
        data_of(&copy).keys().collect::<Vec<_>>()
    );
    ensure!(
        copy.type_.as_deref() == Some("kubernetes.io/basic-auth"),
        "type {:?}",
        copy.type_
    );
    ensure!(
        Api::<Secret>::namespaced(rc.clone(), "default")
            .get_opt(&format!("other-{ns}"))
            .await?
            .is_none(),
        "a SecretStore pushed to another namespace"
    );

    // Deleting the PushSecrets removes what they pushed: the property (the other key stays),
    // and the whole Secret.
    for name in ["merge", "whole"] {
        pushes.delete(name, &DeleteParams::default()).await?;
    }
    testenv::wait_for(TIMEOUT, "the pushed values to be removed", || async {
        let merged = remote_secrets.get("merged").await?;
        ensure!(
            data_of(&merged) == bytes(&[("keep", "1")]),
            "merged holds {:?}",
            data_of(&merged).keys().collect::<Vec<_>>()
        );
        ensure!(
            remote_secrets.get_opt("login-copy").await?.is_none(),
            "login-copy is still there"
        );
        Ok(())
    })
    .await
}

async fn forbidden(env: Arc<Env>) -> Result<()> {
    let remote = env.remote()?;
    let client = env.client().await;
    // May list Secrets but not get them.
    let list =
        serde_json::json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]);
    let (listing, list_only) = token_store(&client, remote, "k8s-list-only", &[DB], list).await?;
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), &list_only);
    let store = wait_ready("SecretStore remote", "False", "ValidationFailed", || {
        value(&stores, "remote")
    })
    .await?;
    let message = store["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default();
    ensure!(
        message.contains("may not get secrets") && message.contains(&listing),
        "the store should name the verb and namespace: {message}"
    );

    // May get one Secret by name only.
    let by_name = serde_json::json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["allowed"]}]);
    let two: &[RemoteSecret<'_>] = &[
        ("allowed", &[("k", "yes")], &[]),
        ("denied", &[("k", "no")], &[]),
    ];
    let (_, ns) = token_store(&client, remote, "k8s-picky", two, by_name).await?;
    store_ready(&client, &ns, "remote").await?;
    let es = r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: allowed}
spec:
  secretStoreRef: {kind: SecretStore, name: remote}
  target: {name: allowed}
  data:
  - {secretKey: k, remoteRef: {key: allowed, property: k}}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: denied}
spec:
  secretStoreRef: {kind: SecretStore, name: remote}
  target: {name: denied}
  data:
  - {secretKey: k, remoteRef: {key: denied, property: k}}
"#;
    testenv::apply_yaml_in(&client, &ns, es, true).await?;
    wait_secret(&client, &ns, "allowed", &bytes(&[("k", "yes")])).await?;
    let externals: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let denied = wait_ready(
        "ExternalSecret denied",
        "False",
        "SecretSyncedError",
        || value(&externals, "denied"),
    )
    .await?;
    let message = denied["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default();
    ensure!(
        message.contains(r#"secrets "denied" is forbidden"#) && message.contains("get"),
        "the condition should name the Secret refused and the verb: {message}"
    );
    Ok(())
}

/// A remote cluster of its own (the others share one), stopped under a synced ExternalSecret:
/// the target stays as it was, and once the cluster is back the ExternalSecret syncs again
/// without the operator being restarted.
async fn remote_down_and_back(env: Arc<Env>) -> Result<()> {
    let remote = ControlPlane::start()?;
    let client = env.client().await;
    let (remote_ns, ns) = token_store(&client, &remote, "k8s-outage", &[DB], role(false)).await?;
    store_ready(&client, &ns, "remote").await?;
    let es = r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: db}
spec:
  refreshInterval: 2s
  secretStoreRef: {kind: SecretStore, name: remote}
  target: {name: db}
  data:
  - {secretKey: password, remoteRef: {key: db, property: password}}
"#;
    testenv::apply_yaml_in(&client, &ns, es, true).await?;
    let before = wait_secret(&client, &ns, "db", &bytes(&[("password", "s3cr3t")])).await?;
    es_ready(&client, &ns, "db").await?;

    remote.stop()?;
    let externals: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let server = remote.server_url();
    let failed = wait_ready("ExternalSecret db", "False", "SecretSyncedError", || {
        value(&externals, "db")
    });
    names_server(failed.await?, server)?;
    // The store says so too, rather than stay Ready until its next validation (5 minutes).
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), &ns);
    let failed = wait_ready("SecretStore remote", "False", "ValidationFailed", || {
        value(&stores, "remote")
    });
    names_server(failed.await?, server)?;
    // From then on the ExternalSecret is refused at its store, and says why the store is not
    // ready: the server again.
    testenv::wait_for(
        TIMEOUT,
        "the ExternalSecret to fail at its store, naming the server",
        || async {
            let es = value(&externals, "db").await?;
            let message = es["status"]["conditions"][0]["message"]
                .as_str()
                .unwrap_or_default();
            ensure!(
                message.starts_with(r#"SecretStore "remote" is not ready: "#),
                "{message}"
            );
            names_server(es, server)
        },
    )
    .await?;
    // And the provider object the store was converted to.
    let resource = ApiResource {
        group: "providers.external-secrets.io".into(),
        version: "v1alpha1".into(),
        api_version: "providers.external-secrets.io/v1alpha1".into(),
        kind: "Kubernetes".into(),
        plural: "kubernetes".into(),
    };
    let objects: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let failed = wait_ready("Kubernetes remote", "False", "ValidationFailed", || {
        value(&objects, "remote")
    });
    names_server(failed.await?, server)?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let during = secrets.get("db").await?;
    ensure!(
        during.resource_version() == before.resource_version(),
        "the Secret was written while the remote cluster was down"
    );

    remote.start_again()?;
    let rc = remote.client().await;
    let mut db = Api::<Secret>::namespaced(rc, &remote_ns).get("db").await?;
    let mut data: BTreeMap<String, k8s_openapi::ByteString> = db.data.take().unwrap_or_default();
    data.insert(
        "password".into(),
        k8s_openapi::ByteString(b"rotated".to_vec()),
    );
    db.data = Some(data);
    Api::<Secret>::namespaced(remote.client().await, &remote_ns)
        .replace("db", &PostParams::default(), &db)
        .await?;
    // During an outage the client's breaker asks the provider again at most a minute apart
    // (clientmanager's LONGEST_WAIT); under a whole suite's load the outage above lasts long
    // enough for a wait that long to be under way when the cluster returns.
    let rotated = bytes(&[("password", "rotated")]);
    wait_secret_within(
        std::time::Duration::from_secs(150),
        &client,
        &ns,
        "db",
        &rotated,
    )
    .await?;
    es_ready(&client, &ns, "db").await?;
    store_ready(&client, &ns, "remote").await?;
    wait_ready("Kubernetes remote", "True", "Valid", || {
        value(&objects, "remote")
    })
    .await?;
    Ok(())
}

/// `object`'s Ready condition names `server`, which cannot be reached.
fn names_server(object: Value, server: &str) -> Result<()> {
    let message = object["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default();
    ensure!(
        message.contains(server),
        "{}'s condition should name the server that cannot be reached: {message}",
        object["kind"]
    );
    Ok(())
}

/// A documented manifest of `tests/eso-docs-kubernetes`, with what the page leaves to the
/// reader filled in: `server` (the cluster's CA from `kube-root-ca.crt`), and `replacements`.
fn as_documented(file: &str, replacements: &[(&str, &str)]) -> Result<String> {
    let mut text = std::fs::read_to_string(Env::path(format!("tests/eso-docs-kubernetes/{file}")))?
        .replace(
            "      server:\n        # ...\n",
            "      server:\n        caProvider: {type: ConfigMap, name: kube-root-ca.crt, key: ca.crt}\n",
        );
    for (from, to) in replacements {
        text = text.replace(from, to);
    }
    Ok(text)
}

/// `kubectl create rolebinding NAME --role=ROLE --<user or serviceaccount>=...` in `ns`.
async fn bind(client: &Client, ns: &str, role: &str, subject: Value) -> Result<()> {
    let binding = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"generateName": format!("{role}-")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [subject],
    });
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &serde_json::from_value(binding)?)
        .await?;
    Ok(())
}

/// ESO's documented Kubernetes-provider manifests (tests/eso-docs-kubernetes) against the
/// cluster the operator runs in: the ExternalSecrets through each documented store, the
/// same-cluster walk-through, and the PushSecrets.
async fn documented(env: Arc<Env>) -> Result<()> {
    let cp = env.control_plane();
    let client = env.client().await;
    // The documents' `default` namespace, holding what they read.
    let data = remote_namespace(
        &client,
        "k8s-docs-data",
        &[
            ("database-credentials", &[("username", "admin"), ("password", "s3cr3t")], &[("dev", "alice")]),
            ("tls-a", &[("crt", "A")], &[]),
            ("nginx-conf", &[("x", "y")], &[("app", "nginx")]),
        ],
        role(false),
        serde_json::json!({"kind": "User", "name": "nobody", "apiGroup": "rbac.authorization.k8s.io"}),
    )
    .await?;
    let in_data: &[(&str, &str)] = &[
        ("namespace: default", &format!("namespace: {data}")),
        (
            "remoteNamespace: default",
            &format!("remoteNamespace: {data}"),
        ),
    ];
    testenv::apply_yaml_in(&client, &data, &as_documented("role.yaml", in_data)?, true).await?;

    for store in [
        "token-store.yaml",
        "serviceaccount-store.yaml",
        "cert-store.yaml",
    ] {
        let ns = testenv::create_namespace(&client, "k8s-docs").await?;
        let subject = match store {
            "token-store.yaml" => {
                let (subject, token) = service_account_token(&client, &ns).await?;
                let secret = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "my-token"}, "data": {"token": b64(&token)}});
                testenv::apply_yaml_in(&client, &ns, &serde_yaml::to_string(&secret)?, true)
                    .await?;
                subject
            }
            "serviceaccount-store.yaml" => {
                // kubectl create serviceaccount my-store
                Api::<ServiceAccount>::namespaced(client.clone(), &ns)
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(
                            serde_json::json!({"metadata": {"name": "my-store"}}),
                        )?,
                    )
                    .await?;
                serde_json::json!({"kind": "ServiceAccount", "name": "my-store", "namespace": ns})
            }
            _ => {
                let user = format!("eso-docs-{ns}");
                let issued = cp.issue_client_certificate(&user, None)?;
                // kubectl create secret tls tls-secret --cert=... --key=...
                let secret = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "tls-secret"}, "type": "kubernetes.io/tls",
                    "stringData": {"tls.crt": issued.cert_pem, "tls.key": issued.key_pem}});
                testenv::apply_yaml_in(&client, &ns, &serde_yaml::to_string(&secret)?, true)
                    .await?;
                serde_json::json!({"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"})
            }
        };
        bind(&client, &data, "eso-store-role", subject).await?;
        let documented_name = store.replace(".yaml", "");
        let name = match documented_name.as_str() {
            "token-store" => "k8s-store-token-auth",
            "serviceaccount-store" => "k8s-store-sa-auth",
            _ => "k8s-store-cert-auth",
        };
        // The documented ExternalSecrets name the store `k8s-store`.
        let mut replacements = in_data.to_vec();
        let renamed = "name: k8s-store\n".to_owned();
        let from = format!("name: {name}\n");
        replacements.push((&from, &renamed));
        testenv::apply_yaml_in(&client, &ns, &as_documented(store, &replacements)?, true)
            .await
            .with_context(|| store.to_owned())?;
        store_ready(&client, &ns, "k8s-store")
            .await
            .with_context(|| store.to_owned())?;
        for es in ["externalsecret.yaml", "find-by-tag-and-name.yaml"] {
            testenv::apply_yaml_in(&client, &ns, &as_documented(es, &[])?, true).await?;
        }
        wait_secret(
            &client,
            &ns,
            "database-credentials",
            &bytes(&[
                ("username", "admin"),
                ("password", "s3cr3t"),
                (
                    "tags",
                    r#"{"annotations":{"note":"hello"},"labels":{"dev":"alice"}}"#,
                ),
                ("labels", r#"{"dev":"alice"}"#),
                ("developer", "alice"),
            ]),
        )
        .await
        .with_context(|| store.to_owned())?;
        wait_secret(
            &client,
            &ns,
            "fetch-tls-and-nginx",
            &bytes(&[("tls-a", r#"{"crt":"A"}"#), ("nginx-conf", r#"{"x":"y"}"#)]),
        )
        .await
        .with_context(|| store.to_owned())?;
    }

    // Another namespace of the same cluster, with a pasted `kubectl create token`.
    let shared = testenv::create_namespace(&client, "shared-secrets").await?;
    let target = testenv::create_namespace(&client, "target-namespace").await?;
    let moved: &[(&str, &str)] = &[("shared-secrets", &shared), ("target-namespace", &target)];
    testenv::apply_yaml_in(
        &client,
        &shared,
        &as_documented("shared-secrets.yaml", moved)?,
        true,
    )
    .await?;
    let token = testenv::service_account_token(
        &client,
        &shared,
        "eso-service-account",
        &[],
        std::time::Duration::from_secs(3600),
    )
    .await?;
    let mut pasted = moved.to_vec();
    pasted.push(("<paste-bearer-token-here>", &token));
    testenv::apply_yaml_in(
        &client,
        &target,
        &as_documented("target-namespace.yaml", &pasted)?,
        true,
    )
    .await?;
    wait_secret(
        &client,
        &target,
        "eso-kubernetes-secret",
        &bytes(&[("username", "peter")]),
    )
    .await?;

    // The PushSecrets, through a token store with the documented push Role.
    let remote = testenv::create_namespace(&client, "k8s-docs-remote").await?;
    let ns = testenv::create_namespace(&client, "k8s-docs-push").await?;
    let in_remote: &[(&str, &str)] = &[("namespace: remote", &format!("namespace: {remote}"))];
    testenv::apply_yaml_in(
        &client,
        &remote,
        &as_documented("push-role.yaml", in_remote)?,
        true,
    )
    .await?;
    let (subject, token) = service_account_token(&client, &ns).await?;
    bind(&client, &remote, "eso-store-push-role", subject).await?;
    let ca = b64(cp.ca_cert_pem());
    let setup = format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: token}}
stringData: {{token: {token}}}
---
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {{name: k8s-store-remote-ns}}
spec:
  provider:
    kubernetes:
      remoteNamespace: {remote}
      server: {{caBundle: {ca}}}
      auth: {{token: {{bearerToken: {{name: token, key: token}}}}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: pokedex-credentials}}
stringData:
  best-pokemon: pikachu
  dockerconfigjson: '{{"auths":{{"registry.example.com":{{"auth":"dXNlcjpwdw=="}}}}}}'
"#
    );
    testenv::apply_yaml_in(&client, &ns, &setup, true).await?;
    store_ready(&client, &ns, "k8s-store-remote-ns").await?;
    let remote_secrets: Api<Secret> = Api::namespaced(client.clone(), &remote);
    for (file, name, key, value, type_) in [
        (
            "pushsecret.yaml",
            "remote-best-pokemon",
            "best-pokemon",
            "pikachu",
            "Opaque",
        ),
        (
            "pushsecret-type.yaml",
            "remote-dockerconfigjson",
            ".dockerconfigjson",
            r#"{"auths":{"registry.example.com":{"auth":"dXNlcjpwdw=="}}}"#,
            "kubernetes.io/dockerconfigjson",
        ),
    ] {
        testenv::apply_yaml_in(&client, &ns, &as_documented(file, &[])?, true).await?;
        testenv::wait_for(TIMEOUT, &format!("{file} to push {name}"), || async {
            let pushed = remote_secrets
                .get_opt(name)
                .await?
                .ok_or_else(|| anyhow!("not pushed yet"))?;
            ensure!(
                data_of(&pushed) == bytes(&[(key, value)]),
                "{name} holds {:?}",
                data_of(&pushed).keys().collect::<Vec<_>>()
            );
            ensure!(
                pushed.type_.as_deref() == Some(type_),
                "type {:?}",
                pushed.type_
            );
            Ok(())
        })
        .await?;
    }
    Ok(())
}
