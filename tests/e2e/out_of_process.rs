//! Providers out of process: `external-secrets provider serve` in its own process with mTLS,
//! reached through ProviderClass and ClusterProviderClass objects, on the real control plane.
//! Each trial runs a server of its own, so it can kill it or rotate its certificates.
//!
//! The Vault, GitLab and Kubernetes suites run a second time out of process when
//! `E2E_PROVIDERS_OUT_OF_PROCESS` is set (hack/test.sh does so): set-up then starts one server
//! for these kinds and the shared operator routes every store of them to it (`--out-of-process`),
//! and their trials run unchanged.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use api::external_secret::ExternalSecret;
use api::provider_class::{ClusterProviderClass, ProviderClass};
use api::store::{ClusterSecretStore, SecretStore};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use libtest_mimic::Trial;
use serde_json::json;
use testenv::{ProviderPki, ProviderServer};

use crate::operator::{TIMEOUT, sample, scrape, wait_ready};
use crate::sync::{ES, bytes, data_of, expected, value, wait_secret};
use crate::{Env, trial};

/// Set: the Vault, GitLab and Kubernetes trials go through a provider server.
pub const MODE: &str = "E2E_PROVIDERS_OUT_OF_PROCESS";
/// The trials that run again in that mode.
pub const SUITES: [&str; 4] = ["vault::", "gitlab::", "kubernetes::", "aws::"];
/// The kinds a provider server serves in that mode.
const MOVED: [&str; 4] = ["Vault", "Gitlab", "Kubernetes", "AWS"];
/// The ClusterProviderClass of that mode.
const SHARED_CLASS: &str = "e2e-out-of-process";

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial(
            "out_of_process::a_store_reads_through_a_provider_class",
            env,
            through_a_class,
        ),
        trial(
            "out_of_process::a_cluster_store_reads_a_namespaced_object_through_a_cluster_class",
            env,
            cluster_store_namespaced_object,
        ),
        trial(
            "out_of_process::esos_own_fake_kind_is_passed_through_to_the_server",
            env,
            esos_fake_kind,
        ),
        trial(
            "out_of_process::our_servers_pass_the_conformance_command",
            env,
            conformance,
        ),
        trial(
            "out_of_process::a_class_names_what_is_wrong_with_it",
            env,
            broken_classes,
        ),
        trial(
            "out_of_process::killing_the_server_keeps_every_secret",
            env,
            kill_and_restart,
        ),
        trial(
            "out_of_process::a_rolling_restart_of_three_replicas_fails_no_sync",
            env,
            rolling_restart,
        ),
        trial(
            "out_of_process::rotated_certificates_are_picked_up_by_both_sides",
            env,
            rotation,
        ),
        trial(
            "out_of_process::steady_state_opens_no_connection",
            env,
            steady_state,
        ),
        trial(
            "out_of_process::python_example_end_to_end",
            env,
            python_example,
        ),
        trial(
            "out_of_process::a_tenant_holds_a_certificate_of_its_namespace_only",
            env,
            tenant_certificate,
        ),
        trial(
            "out_of_process::a_class_call_timeout_bounds_a_call_to_a_hanging_back_end",
            env,
            call_timeout,
        ),
    ]
}

pub fn binary() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_BIN_EXE_external-secrets"))
}

pub fn start_server(env: &Env, kinds: &[&str]) -> Result<ProviderServer> {
    ProviderServer::start(binary(), &env.control_plane().kubeconfig_path(), kinds)
}

/// The client half of `pki` as ESO's TLS Secret, `name` in `ns`.
async fn tls_secret(client: &Client, ns: &str, name: &str, pki: &ProviderPki) -> Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": ns},
        "stringData": pki.client_secret_data(),
    });
    secrets
        .patch(
            name,
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(&secret),
        )
        .await?;
    Ok(())
}

/// A ProviderClass `name` in `ns` for `server`, its TLS Secret beside it.
async fn provider_class(
    client: &Client,
    ns: &str,
    name: &str,
    server: &ProviderServer,
) -> Result<()> {
    provider_class_at(client, ns, name, &server.address, &server.pki()).await
}

/// A ProviderClass `name` in `ns` for the server at `address`, the client half of `pki` in its
/// TLS Secret beside it.
pub async fn provider_class_at(
    client: &Client,
    ns: &str,
    name: &str,
    address: &str,
    pki: &ProviderPki,
) -> Result<()> {
    tls_secret(client, ns, &format!("{name}-tls"), pki).await?;
    testenv::apply_yaml_in(
        client,
        ns,
        &format!(
            "apiVersion: external-secrets.io/v1alpha1\nkind: ProviderClass\nmetadata: {{name: {name}}}\nspec: {{address: '{address}', tlsSecretRef: {{name: {name}-tls}}}}\n"
        ),
        true,
    )
    .await?;
    Ok(())
}

/// A ClusterProviderClass `name` for `server`, its TLS Secret in `ns`.
async fn cluster_provider_class(
    client: &Client,
    ns: &str,
    name: &str,
    server: &ProviderServer,
) -> Result<()> {
    tls_secret(client, ns, &format!("{name}-tls"), &server.pki()).await?;
    testenv::apply_yaml_in(
        client,
        ns,
        &format!(
            "apiVersion: external-secrets.io/v1alpha1\nkind: ClusterProviderClass\nmetadata: {{name: {name}}}\nspec: {{address: '{}', tlsSecretRef: {{name: {name}-tls, namespace: {ns}}}}}\n",
            server.address
        ),
        true,
    )
    .await?;
    Ok(())
}

async fn wait_class(
    client: &Client,
    ns: Option<&str>,
    name: &str,
    status: &str,
    reason: &str,
) -> Result<serde_json::Value> {
    match ns {
        Some(ns) => {
            let api: Api<ProviderClass> = Api::namespaced(client.clone(), ns);
            wait_ready(
                &format!("ProviderClass {ns}/{name}"),
                status,
                reason,
                || value(&api, name),
            )
            .await
        }
        None => {
            let api: Api<ClusterProviderClass> = Api::all(client.clone());
            wait_ready(
                &format!("ClusterProviderClass {name}"),
                status,
                reason,
                || value(&api, name),
            )
            .await
        }
    }
}

/// ESO's inline Fake store of the sync trials, served by the class `runtime_ref` names.
fn fake_store(name: &str, runtime_ref: &str, refresh: &str) -> String {
    let store = crate::sync::STORE.replace(
        "metadata: {name: fake}",
        &format!("metadata: {{name: {name}}}"),
    );
    store.replace(
        "spec:\n  provider:",
        &format!("spec:\n  refreshInterval: {refresh}\n  runtimeRef: {runtime_ref}\n  provider:"),
    )
}

async fn wait_store(
    client: &Client,
    ns: &str,
    name: &str,
    status: &str,
    reason: &str,
) -> Result<serde_json::Value> {
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), ns);
    wait_ready(&format!("SecretStore {ns}/{name}"), status, reason, || {
        value(&stores, name)
    })
    .await
}

/// Calls the provider server answered for `method`, from its own metrics.
async fn server_calls(server: &ProviderServer, method: &str) -> Result<f64> {
    let text = scrape(server.metrics_address).await?;
    Ok(text
        .lines()
        .filter(|l| {
            l.starts_with("grpc_server_handled_total")
                && l.contains(&format!("method=\"{method}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// Connections the shared operator opened to `address`.
async fn connections_opened(env: &Env, address: &str) -> Result<f64> {
    let text = scrape(env.metrics_addr()).await?;
    Ok(sample(
        &text,
        &format!("provider_connections_opened_total{{address=\"{address}\"}}"),
    )
    .unwrap_or(0.0))
}

async fn through_a_class(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let server = start_server(&env, &["Fake"])?;
    let ns = testenv::create_namespace(&client, "oop-class").await?;
    provider_class(&client, &ns, "fake", &server).await?;
    let class = wait_class(&client, Some(&ns), "fake", "True", "Healthy").await?;
    let methods: Vec<&str> = class["status"]["methods"]
        .as_array()
        .map(|m| m.iter().filter_map(|m| m.as_str()).collect())
        .unwrap_or_default();
    ensure!(
        methods == provider_protocol::METHODS,
        "the class lists the server's methods from reflection: {methods:?}"
    );
    // ESO's inline store, served out of process by naming the class.
    testenv::apply_yaml_in(
        &client,
        &ns,
        &fake_store("fake", "{name: fake}", "1h"),
        true,
    )
    .await?;
    wait_store(&client, &ns, "fake", "True", "Valid").await?;
    testenv::apply_yaml_in(&client, &ns, ES, true).await?;
    // data, a version, a property, decoding, dataFrom extract and find with a rewrite.
    wait_secret(&client, &ns, "app-secret", &expected()).await?;
    let served =
        server_calls(&server, "GetSecret").await? + server_calls(&server, "GetAllSecrets").await?;
    ensure!(
        served >= 2.0,
        "the server answered the reads itself: {served}"
    );

    // A providerRef store with a runtimeRef reads the same object through the same server.
    testenv::apply_yaml_in(
        &client,
        &ns,
        "apiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {name: by-ref}\nspec:\n  runtimeRef: {name: fake}\n  providerRef: {apiVersion: providers.external-secrets.io/v1alpha1, kind: Fake, name: fake}\n",
        true,
    )
    .await?;
    wait_store(&client, &ns, "by-ref", "True", "Valid").await?;
    testenv::apply_yaml_in(
        &client,
        &ns,
        "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {name: by-ref}\nspec:\n  secretStoreRef: {name: by-ref}\n  data: [{secretKey: user, remoteRef: {key: user}}]\n",
        true,
    )
    .await?;
    wait_secret(&client, &ns, "by-ref", &bytes(&[("user", "alice")])).await?;

    // A key the provider does not have: NOT_FOUND on the wire, the usual condition here.
    testenv::apply_yaml_in(
        &client,
        &ns,
        "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {name: missing}\nspec:\n  secretStoreRef: {name: fake}\n  data: [{secretKey: x, remoteRef: {key: no-such-key}}]\n",
        true,
    )
    .await?;
    let es: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let failed = wait_ready(
        "ExternalSecret missing",
        "False",
        "SecretSyncedError",
        || value(&es, "missing"),
    )
    .await?;
    let message = crate::operator::ready(&failed)
        .and_then(|c| c.message)
        .unwrap_or_default();
    ensure!(
        message.contains("Secret does not exist") && message.contains("no-such-key"),
        "a missing key reads as in process: {message}"
    );

    // A store whose class does not exist names it.
    testenv::apply_yaml_in(
        &client,
        &ns,
        &fake_store("orphan", "{name: missing}", "1h"),
        true,
    )
    .await?;
    let orphan = wait_store(&client, &ns, "orphan", "False", "InvalidProviderConfig").await?;
    let message = crate::operator::ready(&orphan)
        .and_then(|c| c.message)
        .unwrap_or_default();
    ensure!(
        message.contains(&format!("ProviderClass {ns}/missing does not exist")),
        "{message}"
    );
    Ok(())
}

/// ESO's `provider.external-secrets.io/v2alpha1` Fake: a kind this operator does not compile in
/// (an out-of-tree kind, as far as it knows), which our server serves as ESO's core would ask.
const ESO_FAKE_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: fakes.provider.external-secrets.io}
spec:
  group: provider.external-secrets.io
  scope: Namespaced
  names: {plural: fakes, singular: fake, kind: Fake, listKind: FakeList}
  versions:
  - name: v2alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

/// A ClusterSecretStore may name a namespaced provider object (`providerRef.namespace`) when a
/// ClusterProviderClass serves it, as ESO's v2 stores do: the object is read from its own
/// namespace, for ExternalSecrets of any namespace.
async fn cluster_store_namespaced_object(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let server = start_server(&env, &["Fake"])?;
    let ns = testenv::create_namespace(&client, "oop-owner").await?;
    let class = format!("{ns}-class");
    cluster_provider_class(&client, &ns, &class, &server).await?;
    wait_class(&client, None, &class, "True", "Healthy").await?;
    testenv::apply_yaml_in(
        &client,
        &ns,
        &format!(
            "apiVersion: providers.external-secrets.io/v1alpha1\nkind: Fake\nmetadata: {{name: shared}}\nspec: {{data: [{{key: user, value: alice}}]}}\n---\napiVersion: external-secrets.io/v1\nkind: ClusterSecretStore\nmetadata: {{name: {ns}}}\nspec:\n  runtimeRef: {{kind: ClusterProviderClass, name: {class}}}\n  providerRef: {{apiVersion: providers.external-secrets.io/v1alpha1, kind: Fake, name: shared, namespace: {ns}}}\n"
        ),
        true,
    )
    .await?;
    let stores: Api<ClusterSecretStore> = Api::all(client.clone());
    wait_ready(&format!("ClusterSecretStore {ns}"), "True", "Valid", || {
        value(&stores, &ns)
    })
    .await?;
    let reader = testenv::create_namespace(&client, "oop-reader").await?;
    testenv::apply_yaml_in(
        &client,
        &reader,
        &format!(
            "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: shared}}\nspec:\n  secretStoreRef: {{kind: ClusterSecretStore, name: {ns}}}\n  data: [{{secretKey: user, remoteRef: {{key: user}}}}]\n"
        ),
        true,
    )
    .await?;
    wait_secret(&client, &reader, "shared", &bytes(&[("user", "alice")])).await?;
    Ok(())
}

async fn esos_fake_kind(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    testenv::apply_yaml_in(&client, "default", ESO_FAKE_CRD, true).await?;
    testenv::wait_for_crd_established(&client, "fakes.provider.external-secrets.io", TIMEOUT)
        .await?;
    let server = start_server(&env, &["Fake"])?;
    let ns = testenv::create_namespace(&client, "oop-eso-kind").await?;
    provider_class(&client, &ns, "fake", &server).await?;
    testenv::apply_yaml_in(
        &client,
        &ns,
        "apiVersion: provider.external-secrets.io/v2alpha1\nkind: Fake\nmetadata: {name: eso-fake}\nspec:\n  data: [{key: user, value: alice}]\n",
        true,
    )
    .await?;
    testenv::apply_yaml_in(
        &client,
        &ns,
        "apiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {name: eso}\nspec:\n  runtimeRef: {name: fake}\n  providerRef: {apiVersion: provider.external-secrets.io/v2alpha1, kind: Fake, name: eso-fake}\n",
        true,
    )
    .await?;
    let store = wait_store(&client, &ns, "eso", "True", "Valid").await?;
    ensure!(
        store["status"]["capabilities"] == "ReadWrite",
        "the server's capabilities: {}",
        store["status"]
    );
    testenv::apply_yaml_in(
        &client,
        &ns,
        "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {name: eso}\nspec:\n  secretStoreRef: {name: eso}\n  data: [{secretKey: user, remoteRef: {key: user}}]\n",
        true,
    )
    .await?;
    wait_secret(&client, &ns, "eso", &bytes(&[("user", "alice")])).await?;

    // A kind of our group that this build does not have, and no server named for it.
    testenv::apply_yaml_in(
        &client,
        &ns,
        "apiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {name: unknown}\nspec:\n  providerRef: {apiVersion: providers.external-secrets.io/v1alpha1, kind: Acme, name: acme}\n",
        true,
    )
    .await?;
    let unknown = wait_store(&client, &ns, "unknown", "False", "InvalidProviderConfig").await?;
    let message = crate::operator::ready(&unknown)
        .and_then(|c| c.message)
        .unwrap_or_default();
    ensure!(
        message.contains("Acme") && message.contains("needs spec.runtimeRef"),
        "{message}"
    );
    Ok(())
}

/// `external-secrets provider conformance`, as a server author runs it, against our own server
/// for the Fake, the Vault (on the real Vault) and the GitLab provider (on the stand-in).
async fn conformance(env: Arc<Env>) -> Result<()> {
    let vault = env.vault()?;
    let client = env.client().await;
    let server = start_server(&env, &["Fake", "Vault", "Gitlab"])?;
    let ns = testenv::create_namespace(&client, "oop-conformance").await?;
    let gitlab = crate::gitlab::standin(crate::gitlab::TOKEN)?;
    gitlab.add_project_variable(
        crate::gitlab::PROJECT,
        gitlab_standin::Variable::new("CONF_READ", "value-1"),
    )?;
    crate::vault::policy_for(vault, &ns).await?;
    // GetAllSecrets without a path lists from the mount's root, through every folder (other
    // trials' too); it reads only what matches.
    let list = format!("{ns}-list");
    vault
        .write_policy(
            &list,
            &format!(
                "path \"{0}/metadata/\" {{ capabilities = [\"list\"] }}\npath \"{0}/metadata/*\" {{ capabilities = [\"list\"] }}",
                crate::vault::KV2
            ),
        )
        .await?;
    vault
        .write_kv_v2(
            crate::vault::KV2,
            &format!("{ns}/app"),
            &json!({"password": "hunter22"}),
        )
        .await?;
    let token = vault
        .api(
            http::Method::POST,
            "auth/token/create",
            Some(&json!({"policies": [ns, list], "ttl": "1h"})),
        )
        .await?
        .and_then(|a| a["auth"]["client_token"].as_str().map(str::to_owned))
        .context("creating a Vault token")?;
    testenv::apply_yaml_in(
        &client,
        &ns,
        &format!(
            r#"
apiVersion: providers.external-secrets.io/v1alpha1
kind: Fake
metadata: {{name: fake}}
spec:
  data: [{{key: user, value: alice}}]
---
apiVersion: v1
kind: Secret
metadata: {{name: vault-token}}
stringData: {{token: {token}}}
---
apiVersion: providers.external-secrets.io/v1alpha1
kind: Vault
metadata: {{name: vault}}
spec:
  server: {server}
  path: {kv}
  version: v2
  auth: {{tokenSecretRef: {{name: vault-token, key: token}}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: gitlab-token}}
stringData: {{token: {gitlab_token}}}
---
apiVersion: providers.external-secrets.io/v1alpha1
kind: Gitlab
metadata: {{name: gitlab}}
spec:
  url: {gitlab_url}
  projectID: "{project}"
  auth: {{SecretRef: {{accessToken: {{name: gitlab-token, key: token}}}}}}
"#,
            server = vault.address(),
            kv = crate::vault::KV2,
            gitlab_token = crate::gitlab::TOKEN,
            gitlab_url = gitlab.url(),
            project = crate::gitlab::PROJECT,
        ),
        true,
    )
    .await?;
    let dir = tempfile::tempdir()?;
    let pki = server.pki();
    for (name, contents) in pki.client_secret_data() {
        std::fs::write(dir.path().join(name), contents)?;
    }
    let vault_key = format!("{ns}/app");
    let runs = [
        (
            format!("providers.external-secrets.io/v1alpha1/Fake/{ns}/fake"),
            vec!["--read-key", "user", "--read-value", "alice"],
            "conformance-".to_owned(),
        ),
        (
            format!("providers.external-secrets.io/v1alpha1/Vault/{ns}/vault"),
            vec!["--read-key", vault_key.as_str()],
            format!("{ns}/conformance-"),
        ),
        (
            format!("providers.external-secrets.io/v1alpha1/Gitlab/{ns}/gitlab"),
            vec!["--read-key", "CONF_READ", "--read-value", "value-1"],
            // GitLab variable keys take letters, digits and underscores.
            "conformance_".to_owned(),
        ),
    ];
    for (reference, reads, prefix) in runs {
        let mut reads: Vec<String> = reads.into_iter().map(str::to_owned).collect();
        if reference.contains("/Vault/") {
            reads.extend(["--read-value".into(), r#"{"password":"hunter22"}"#.into()]);
        }
        // The provider object's watch may not have seen it yet.
        let output = testenv::wait_for(TIMEOUT, &format!("conformance of {reference}"), || {
            let (reference, reads, prefix, dir) = (&reference, &reads, &prefix, dir.path());
            let address = server.address.clone();
            async move {
                let output = std::process::Command::new(binary())
                    .args([
                        "provider",
                        "conformance",
                        "--address",
                        &address,
                        "--tls-dir",
                    ])
                    .arg(dir)
                    .args(["--provider-ref", reference, "--remote-key-prefix", prefix])
                    .args(reads)
                    .output()?;
                let text = String::from_utf8_lossy(&output.stdout).into_owned();
                if output.status.success() {
                    Ok(text)
                } else {
                    Err(anyhow!("{text}{}", String::from_utf8_lossy(&output.stderr)))
                }
            }
        })
        .await?;
        ensure!(
            output.contains("0 failed") && !output.contains("FAIL"),
            "{reference}:\n{output}"
        );
        ensure!(
            !output.contains("hunter22") && !output.contains("alice"),
            "the report shows no secret value:\n{output}"
        );
    }
    Ok(())
}

async fn broken_classes(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let server = start_server(&env, &["Fake"])?;
    let ns = testenv::create_namespace(&client, "oop-broken").await?;
    // A Secret without the client key.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let data: BTreeMap<String, String> = server
        .pki()
        .client_secret_data()
        .into_iter()
        .filter(|(k, _)| k != "client.key")
        .collect();
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "no-key"}, "stringData": data}))?,
        )
        .await?;
    // A CA the server's certificate was not issued by.
    let stranger = ProviderPki::generate()?;
    tls_secret(&client, &ns, "wrong-ca", &stranger).await?;
    for (name, secret) in [
        ("no-key", "no-key"),
        ("wrong-ca", "wrong-ca"),
        ("no-secret", "absent"),
    ] {
        testenv::apply_yaml_in(
            &client,
            &ns,
            &format!(
                "apiVersion: external-secrets.io/v1alpha1\nkind: ProviderClass\nmetadata: {{name: {name}}}\nspec: {{address: '{}', tlsSecretRef: {{name: {secret}}}}}\n",
                server.address
            ),
            true,
        )
        .await?;
    }
    let reason_of = |v: &serde_json::Value| {
        crate::operator::ready(v)
            .and_then(|c| c.message)
            .unwrap_or_default()
    };
    let no_key = wait_class(&client, Some(&ns), "no-key", "False", "TLSConfigFailed").await?;
    ensure!(
        reason_of(&no_key).contains("client.key"),
        "{}",
        reason_of(&no_key)
    );
    let absent = wait_class(&client, Some(&ns), "no-secret", "False", "TLSConfigFailed").await?;
    ensure!(
        reason_of(&absent).contains("absent"),
        "{}",
        reason_of(&absent)
    );
    let wrong = wait_class(&client, Some(&ns), "wrong-ca", "False", "HealthCheckFailed").await?;
    ensure!(
        reason_of(&wrong).to_lowercase().contains("certificate"),
        "a server the CA did not sign is refused: {}",
        reason_of(&wrong)
    );
    // Nothing of the key material reaches a status.
    for v in [&no_key, &absent, &wrong] {
        ensure!(!v.to_string().contains("PRIVATE KEY"), "{v}");
    }
    Ok(())
}

const KILL_COUNT: usize = 200;

async fn kill_and_restart(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let server = start_server(&env, &["Fake"])?;
    let ns = testenv::create_namespace(&client, "oop-kill").await?;
    let class = format!("{ns}-class");
    cluster_provider_class(&client, &ns, &class, &server).await?;
    wait_class(&client, None, &class, "True", "Healthy").await?;
    let runtime = format!("{{kind: ClusterProviderClass, name: {class}}}");
    testenv::apply_yaml_in(&client, &ns, &fake_store("fake", &runtime, "2s"), true).await?;
    wait_store(&client, &ns, "fake", "True", "Valid").await?;
    let es: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    for i in 0..KILL_COUNT {
        let manifest: ExternalSecret = serde_yaml::from_str(&format!(
            "{{apiVersion: external-secrets.io/v1, kind: ExternalSecret, metadata: {{name: es-{i}, namespace: {ns}}}, spec: {{refreshInterval: 1s, secretStoreRef: {{name: fake}}, data: [{{secretKey: user, remoteRef: {{key: user}}}}]}}}}"
        ))?;
        es.create(&PostParams::default(), &manifest).await?;
        if i == KILL_COUNT / 4 {
            // In the middle of the sync: some Secrets written, most not yet.
            testenv::wait_for(TIMEOUT, "a first Secret", || async {
                let n = secrets
                    .list_metadata(&Default::default())
                    .await?
                    .items
                    .len();
                if n > 0 {
                    Ok(())
                } else {
                    Err(anyhow!("none yet"))
                }
            })
            .await?;
        }
    }
    server.kill();
    // Everything that notices says why, and nothing is written meanwhile. Counted from when the
    // store says so: a call answered just before the kill may still be written after it.
    wait_class(&client, None, &class, "False", "HealthCheckFailed").await?;
    let store = wait_store(&client, &ns, "fake", "False", "ValidationFailed").await?;
    let message = crate::operator::ready(&store)
        .and_then(|c| c.message)
        .unwrap_or_default();
    ensure!(
        message.contains(&server.address),
        "the store names the server: {message}"
    );
    let before = crate::restart::secret_versions(&secrets).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let during = crate::restart::secret_versions(&secrets).await?;
    ensure!(
        during == before,
        "no Secret changed while the server was down ({} before, {} during)",
        before.len(),
        during.len()
    );
    let targets = |s: &Secret| {
        s.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("es-"))
    };
    for s in secrets
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter(|s| targets(s))
    {
        ensure!(
            data_of(s) == bytes(&[("user", "alice")]),
            "Secret {:?} kept its bytes",
            s.metadata.name
        );
    }
    let synced = before.keys().filter(|n| n.starts_with("es-")).count();
    ensure!(
        synced < KILL_COUNT,
        "the server was killed mid-sync ({synced} of {KILL_COUNT} synced)"
    );
    let unsynced = es
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|e| crate::operator::ready(&serde_json::to_value(&e).ok()?))
        .find(|c| c.status.as_str() == "False")
        .context("an ExternalSecret that could not sync says so")?;
    // Failed at the server, or at its store that is not ready because of it: either way the
    // server is named.
    ensure!(
        unsynced
            .message
            .as_deref()
            .unwrap_or_default()
            .contains(&server.address),
        "{unsynced:?}"
    );

    // Back without restarting the operator.
    server.restart()?;
    wait_class(&client, None, &class, "True", "Healthy").await?;
    wait_store(&client, &ns, "fake", "True", "Valid").await?;
    testenv::wait_for(
        Duration::from_secs(180),
        "every ExternalSecret synced after the restart",
        || async {
            let n = secrets
                .list(&Default::default())
                .await?
                .items
                .iter()
                .filter(|s| targets(s) && data_of(s) == bytes(&[("user", "alice")]))
                .count();
            if n == KILL_COUNT {
                return Ok(());
            }
            // What the first few still waiting say, to tell a call never retried from one
            // still failing.
            let waiting: Vec<String> = es
                .list(&Default::default())
                .await?
                .items
                .iter()
                .filter_map(|e| {
                    let ready = crate::operator::ready(&serde_json::to_value(e).ok()?)?;
                    (ready.status.as_str() != "True")
                        .then(|| format!("{:?}: {ready:?}", e.metadata.name))
                })
                .take(3)
                .collect();
            Err(anyhow!("{n} of {KILL_COUNT}; not Ready: {waiting:?}"))
        },
    )
    .await?;
    Ok(())
}

/// ExternalSecrets of the rolling restart, each refreshed every second.
const ROLLING_COUNT: usize = 20;

/// Three replicas of a server behind one name, as a Deployment behind a headless Service: an
/// operator of its own (whose /etc/hosts, bound in a private mount namespace, gives `localhost`
/// the three addresses) spreads its calls over them; stopping each (SIGTERM, as Kubernetes
/// stops a Pod) and starting it again in turn, under a steady refresh, fails no sync and turns
/// neither the store nor any ExternalSecret `Ready=False`.
async fn rolling_restart(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let first = start_server(&env, &["Fake"])?;
    let replicas = [Arc::new(first.replica(2)?), Arc::new(first.replica(3)?)];
    let first = Arc::new(first);
    let replicas: Vec<Arc<ProviderServer>> =
        std::iter::once(first.clone()).chain(replicas).collect();
    let port = first
        .address
        .rsplit_once(':')
        .map(|(_, p)| p.to_owned())
        .context("a port")?;
    let dir = tempfile::tempdir()?;
    let hosts = dir.path().join("hosts");
    std::fs::write(
        &hosts,
        "127.0.0.1 localhost\n127.0.0.2 localhost\n127.0.0.3 localhost\n",
    )?;
    let ns = testenv::create_namespace(&client, "oop-rolling").await?;
    let controller = format!("rolling-{ns}");
    provider_class_at(
        &client,
        &ns,
        "replicas",
        &format!("localhost:{port}"),
        &first.pki(),
    )
    .await?;
    let store = fake_store("fake", "{kind: ProviderClass, name: replicas}", "1h")
        .replace("spec:\n", &format!("spec:\n  controller: {controller}\n"));
    testenv::apply_yaml_in(&client, &ns, &store, true).await?;
    for i in 0..ROLLING_COUNT {
        let es = format!(
            "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: es-{i}}}\nspec:\n  refreshInterval: 1s\n  secretStoreRef: {{name: fake}}\n  data: [{{secretKey: user, remoteRef: {{key: user}}}}]\n"
        );
        testenv::apply_yaml_in(&client, &ns, &es, true).await?;
    }
    let log = std::fs::File::create(dir.path().join("operator.log"))?;
    let mut command = testenv::with_own_hosts(&hosts, binary());
    command
        .arg("controller")
        .arg("--kubeconfig")
        .arg(env.control_plane().kubeconfig_path())
        .stdout(log.try_clone()?)
        .stderr(log);
    let operator = crate::restart::Operator::start_command(
        command,
        &ns,
        &controller,
        &["--client-qps=0", "--disable-webhook"],
    )
    .context(
        "this trial needs util-linux's `unshare` and root (CAP_SYS_ADMIN) for a mount namespace",
    )?;
    let externalsecrets: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    crate::restart::every_one_ready(&externalsecrets)
        .await
        .with_context(|| {
            format!(
                "operator log: {}",
                dir.path().join("operator.log").display()
            )
        })?;
    for replica in replicas.iter().map(AsRef::as_ref) {
        testenv::wait_for(TIMEOUT, "every replica serving calls", || async {
            ensure!(
                server_calls(replica, "GetSecret").await? > 0.0,
                "{} got none",
                replica.address
            );
            Ok(())
        })
        .await?;
    }

    // Whatever turns Ready=False meanwhile, seen by a watcher polling every 100 ms.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (client, ns, stop) = (client.clone(), ns.clone(), stop.clone());
        tokio::spawn(async move {
            let stores: Api<SecretStore> = Api::namespaced(client.clone(), &ns);
            let externalsecrets: Api<ExternalSecret> = Api::namespaced(client, &ns);
            let mut seen = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let objects = async {
                    let mut objects = Vec::new();
                    for s in stores.list(&Default::default()).await?.items {
                        objects.push(serde_json::to_value(s)?);
                    }
                    for e in externalsecrets.list(&Default::default()).await?.items {
                        objects.push(serde_json::to_value(e)?);
                    }
                    anyhow::Ok(objects)
                };
                for object in objects.await.unwrap_or_default() {
                    if let Some(c) = crate::operator::ready(&object)
                        && c.status.as_str() != "True"
                    {
                        seen.push(format!(
                            "{} {}: {c:?}",
                            object["kind"], object["metadata"]["name"]
                        ));
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            seen
        })
    };
    let errors = || operator.sum("externalsecret_sync_calls_error", |l| l.contains(&ns));
    let errors_before = errors().await?;
    let syncs = || operator.sum("externalsecret_sync_calls_total", |l| l.contains(&ns));
    let syncs_before = syncs().await?;
    for server in &replicas {
        tokio::time::sleep(Duration::from_secs(2)).await;
        // Off this thread, which the watcher shares.
        let stopping = server.clone();
        tokio::task::spawn_blocking(move || {
            stopping.terminate(Duration::from_secs(40))?;
            stopping.restart()
        })
        .await?
        .with_context(|| format!("stopping and starting {} again", server.address))?;
        testenv::wait_for(
            TIMEOUT,
            "the restarted replica serving calls again",
            || async {
                ensure!(
                    server_calls(server, "GetSecret").await? > 0.0,
                    "{} got none",
                    server.address
                );
                Ok(())
            },
        )
        .await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let not_ready = watcher.await?;
    let (errors, syncs) = (
        errors().await? - errors_before,
        syncs().await? - syncs_before,
    );
    println!("rolling restart of 3 replicas: {syncs} syncs, {errors} failed");
    ensure!(
        syncs > ROLLING_COUNT as f64,
        "the ExternalSecrets kept syncing ({syncs} syncs)"
    );
    ensure!(
        errors == 0.0,
        "{errors} of {syncs} syncs failed during the rolling restart"
    );
    ensure!(
        not_ready.is_empty(),
        "Ready=False during the rolling restart: {:?}",
        &not_ready[..not_ready.len().min(5)]
    );
    operator.stop();
    Ok(())
}

async fn rotation(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let server = start_server(&env, &["Fake"])?;
    let ns = testenv::create_namespace(&client, "oop-rotate").await?;
    provider_class(&client, &ns, "fake", &server).await?;
    wait_class(&client, Some(&ns), "fake", "True", "Healthy").await?;
    testenv::apply_yaml_in(
        &client,
        &ns,
        &fake_store("fake", "{name: fake}", "2s"),
        true,
    )
    .await?;
    wait_store(&client, &ns, "fake", "True", "Valid").await?;
    testenv::apply_yaml_in(
        &client,
        &ns,
        "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {name: app}\nspec:\n  refreshInterval: 1s\n  secretStoreRef: {name: fake}\n  data: [{secretKey: user, remoteRef: {key: user}}]\n",
        true,
    )
    .await?;
    wait_secret(&client, &ns, "app", &bytes(&[("user", "alice")])).await?;
    // A new CA on both sides: the server's files, the client's Secret. The old client
    // certificate is no longer accepted, nor the old server certificate trusted.
    let fresh = server.rotate()?;
    tls_secret(&client, &ns, "fake-tls", &fresh).await?;
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), &ns);
    stores
        .patch(
            "fake",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"provider": {"fake": {"data": [{"key": "user", "value": "carol"}]}}}})),
        )
        .await?;
    wait_secret(&client, &ns, "app", &bytes(&[("user", "carol")])).await?;
    wait_class(&client, Some(&ns), "fake", "True", "Healthy").await?;
    Ok(())
}

const STEADY_SYNCS: f64 = 1000.0;

async fn steady_state(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let server = start_server(&env, &["Fake"])?;
    let ns = testenv::create_namespace(&client, "oop-steady").await?;
    provider_class(&client, &ns, "fake", &server).await?;
    wait_class(&client, Some(&ns), "fake", "True", "Healthy").await?;
    testenv::apply_yaml_in(
        &client,
        &ns,
        &fake_store("fake", "{name: fake}", "1h"),
        true,
    )
    .await?;
    wait_store(&client, &ns, "fake", "True", "Valid").await?;
    for i in 0..100 {
        testenv::apply_yaml_in(
            &client,
            &ns,
            &format!("apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: es-{i}}}\nspec:\n  refreshInterval: 1s\n  secretStoreRef: {{name: fake}}\n  data: [{{secretKey: user, remoteRef: {{key: user}}}}]\n"),
            true,
        )
        .await?;
    }
    wait_secret(&client, &ns, "es-99", &bytes(&[("user", "alice")])).await?;
    let opened = connections_opened(&env, &server.address).await?;
    ensure!(
        opened >= 1.0,
        "the operator counts the connection it opened: {opened}"
    );
    let start = server_calls(&server, "GetSecret").await?;
    testenv::wait_for(
        Duration::from_secs(120),
        &format!("{STEADY_SYNCS} more reads"),
        || async {
            let now = server_calls(&server, "GetSecret").await?;
            if now - start >= STEADY_SYNCS {
                Ok(())
            } else {
                Err(anyhow!("{} so far", now - start))
            }
        },
    )
    .await?;
    let after = connections_opened(&env, &server.address).await?;
    ensure!(
        after == opened,
        "{STEADY_SYNCS} syncs opened {} new connections",
        after - opened
    );
    Ok(())
}

/// For [`MODE`]: one server for the kinds of [`MOVED`], a ClusterProviderClass for it, and the
/// routes the shared operator is started with.
pub async fn setup_mode(env: &Env) -> Result<Option<(ProviderServer, BTreeMap<String, String>)>> {
    if std::env::var_os(MODE).is_none() {
        return Ok(None);
    }
    let client = env.client().await;
    let server = start_server(env, &MOVED)?;
    let ns = testenv::create_namespace(&client, "provider-server").await?;
    cluster_provider_class(&client, &ns, SHARED_CLASS, &server).await?;
    eprintln!(
        "e2e: Vault, GitLab, Kubernetes and AWS stores are served out of process by {} (log {})",
        server.address,
        server.log_path().display()
    );
    let routes = MOVED
        .into_iter()
        .map(|k| (k.to_owned(), SHARED_CLASS.to_owned()))
        .collect();
    Ok(Some((server, routes)))
}

// ---------------------------------------------------------------------------------------------
// The Python example (`examples/out-of-tree/python`): a secret store this operator knows
// nothing of, served by a server in another language, used through the shared operator.

/// The example's rows: `db` a JSON object written as TEXT (as the sqlite3 shell would), the
/// rest bytes.
const SQLITE_SEED: &str = r#"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("CREATE TABLE secrets (key TEXT PRIMARY KEY, value BLOB NOT NULL)")
db.execute("INSERT INTO secrets VALUES ('db', ?)",
           ('{"user":"alice","password":"s3cr3t","port":5432,"tls":{"mode":"verify"}}',))
db.executemany("INSERT INTO secrets VALUES (?, ?)", [
    ("plain", b"v0"),
    ("binary", bytes([0, 255, 1])),
    ("app-one", b"1"),
    ("app-two", b"2"),
    ("other", b"3"),
])
db.commit()
"#;

/// Prints the value of the row `argv[2]` in the file `argv[1]` as hex, or `absent`.
const SQLITE_READ: &str = r#"
import sqlite3, sys
row = sqlite3.connect(sys.argv[1]).execute(
    "SELECT value FROM secrets WHERE key = ?", (sys.argv[2],)).fetchone()
value = None if row is None else row[0]
print("absent" if value is None else (value.encode() if isinstance(value, str) else bytes(value)).hex())
"#;

const SQLITE_STORE: &str = "apiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {name: sqlite}\nspec:\n  refreshInterval: 2s\n  providerRef: {apiVersion: secrets.acme.example/v1, kind: SqliteStore, name: sqlite}\n  runtimeRef: {name: sqlite}\n";

/// Every way an ExternalSecret reads: keys, a JSON property (nested too), bytes that are not
/// UTF-8, `dataFrom` extract and find by name.
const SQLITE_ES: &str = r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: app}
spec:
  refreshInterval: 1s
  secretStoreRef: {name: sqlite}
  target: {name: app-secret}
  data:
  - {secretKey: plain, remoteRef: {key: plain}}
  - {secretKey: db-user, remoteRef: {key: db, property: user}}
  - {secretKey: tls-mode, remoteRef: {key: db, property: tls.mode}}
  - {secretKey: binary, remoteRef: {key: binary}}
  dataFrom:
  - extract: {key: db}
  - find: {name: {regexp: "^app-"}}
"#;

const SQLITE_SOURCE: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: src}\nstringData: {token: t0k3n, password: pa55}\n";

/// A key as a row of its own, and a key as a property of a JSON row.
const SQLITE_PUSH: &str = r#"
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {name: push}
spec:
  refreshInterval: 1h
  deletionPolicy: Delete
  secretStoreRefs: [{name: sqlite, kind: SecretStore}]
  selector: {secret: {name: src}}
  data:
  - match: {secretKey: token, remoteRef: {remoteKey: pushed/token}}
  - match: {secretKey: password, remoteRef: {remoteKey: pushed/db, property: password}}
"#;

/// What [`SQLITE_ES`] writes, byte for byte.
fn sqlite_expected() -> BTreeMap<String, Vec<u8>> {
    let mut want = bytes(&[
        ("plain", "v0"),
        ("db-user", "alice"),
        ("tls-mode", "verify"),
        // extract: one entry per field, strings as they are, the rest as JSON.
        ("user", "alice"),
        ("password", "s3cr3t"),
        ("port", "5432"),
        ("tls", r#"{"mode":"verify"}"#),
        // find: every row whose key matches.
        ("app-one", "1"),
        ("app-two", "2"),
    ]);
    want.insert("binary".into(), vec![0, 255, 1]);
    want
}

/// A trial's files: the stubs, the certificates, the SQLite file and the server's log.
struct PythonFixture {
    dir: tempfile::TempDir,
    example: testenv::PythonExample,
    db: std::path::PathBuf,
}

impl PythonFixture {
    /// The value of the row `key` as the server sees it, straight from the file; None when
    /// there is no such row.
    fn row(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let output = testenv::python_example::run(
            std::process::Command::new(&self.example.python)
                .args(["-c", SQLITE_READ])
                .arg(&self.db)
                .arg(key),
            &format!("reading the row {key:?} from {}", self.db.display()),
        )?;
        let text = String::from_utf8(output.stdout)?;
        let text = text.trim();
        if text == "absent" {
            return Ok(None);
        }
        let bytes = (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16))
            .collect::<Result<Vec<u8>, _>>()
            .with_context(|| format!("the row {key:?} read as {text:?}"))?;
        Ok(Some(bytes))
    }
}

async fn python_example(env: Arc<Env>) -> Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("e2e-python-example-")
        .tempdir()?;
    // The venv (created here on a fresh machine) and the stubs.
    let example = testenv::PythonExample::prepare(&dir.path().join("gen"))?;
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data)?;
    let db = data.join("team.db");
    testenv::python_example::run(
        std::process::Command::new(&example.python)
            .args(["-c", SQLITE_SEED])
            .arg(&db),
        "seeding the SQLite file",
    )?;
    // The server's half of the TLS material in ESO's layout; the client half goes to the class.
    let pki = ProviderPki::generate()?;
    let certs = dir.path().join("certs");
    std::fs::create_dir_all(&certs)?;
    for (name, contents) in [
        ("ca.crt", &pki.ca_pem),
        ("tls.crt", &pki.server.cert_pem),
        ("tls.key", &pki.server.key_pem),
    ] {
        std::fs::write(certs.join(name), contents)?;
    }
    let client = env.client().await;
    let crd = std::fs::read_to_string(testenv::python_example::example_dir().join("crd.yaml"))?;
    testenv::apply_yaml(&client, &crd, true)
        .await
        .context("applying the example's crd.yaml")?;
    testenv::wait_for_crd_established(&client, "sqlitestores.secrets.acme.example", TIMEOUT)
        .await?;
    let server = testenv::PythonServer::start(
        &example,
        &testenv::PythonServerFiles {
            tls_dir: certs,
            // The control plane's admin: client certificate and key data, as kube.py reads.
            kubeconfig: env.control_plane().kubeconfig_path(),
            data_dir: data,
            log: dir.path().join("server.log"),
        },
    )?;
    let fixture = PythonFixture { dir, example, db };
    match python_example_checks(&env, &client, &server, &pki, &fixture).await {
        Ok(()) => Ok(()),
        Err(e) => {
            let tail = server.log_tail(40);
            drop(server);
            // Kept for a look at the log and the file.
            let kept = fixture.dir.keep();
            Err(anyhow!(
                "{}\n--- last lines of the Python server's log (kept in {})\n{tail}",
                crate::chain(&e),
                kept.display()
            ))
        }
    }
}

async fn python_example_checks(
    env: &Env,
    client: &Client,
    server: &testenv::PythonServer,
    pki: &ProviderPki,
    fx: &PythonFixture,
) -> Result<()> {
    let ns = testenv::create_namespace(client, "oop-python").await?;
    testenv::apply_yaml_in(
        client,
        &ns,
        &format!(
            "apiVersion: secrets.acme.example/v1\nkind: SqliteStore\nmetadata: {{name: sqlite}}\nspec: {{path: {:?}, table: secrets}}\n",
            fx.db.display().to_string()
        ),
        true,
    )
    .await
    .context("creating the SqliteStore")?;

    // The class: healthy, with the methods the server serves through reflection.
    provider_class_at(client, &ns, "sqlite", &server.address, pki).await?;
    let class = wait_class(client, Some(&ns), "sqlite", "True", "Healthy").await?;
    let mut methods: Vec<&str> = class["status"]["methods"]
        .as_array()
        .map(|m| m.iter().filter_map(|m| m.as_str()).collect())
        .unwrap_or_default();
    methods.sort_unstable();
    let mut every = provider_protocol::METHODS;
    every.sort_unstable();
    ensure!(
        methods == every,
        "the ProviderClass lists the Python server's methods from reflection: {methods:?}"
    );

    // The store: Ready from the server's Validate, capabilities from its Capabilities.
    testenv::apply_yaml_in(client, &ns, SQLITE_STORE, true).await?;
    let store = wait_store(client, &ns, "sqlite", "True", "Valid").await?;
    ensure!(
        store["status"]["capabilities"] == "ReadWrite",
        "the store's capabilities come from the server's Capabilities (READ_WRITE): {}",
        store["status"]
    );

    // A server author's check, run as they would: the conformance command against it.
    let tls = fx.dir.path().join("client");
    std::fs::create_dir_all(&tls)?;
    for (name, contents) in pki.client_secret_data() {
        std::fs::write(tls.join(name), contents)?;
    }
    let conformance = std::process::Command::new(binary())
        .args([
            "provider",
            "conformance",
            "--address",
            &server.address,
            "--tls-dir",
        ])
        .arg(&tls)
        .args([
            "--provider-ref",
            &format!("secrets.acme.example/v1/SqliteStore/{ns}/sqlite"),
        ])
        .args(["--read-key", "plain", "--read-value", "v0"])
        .output()?;
    let report = String::from_utf8_lossy(&conformance.stdout);
    ensure!(
        conformance.status.success() && report.contains("0 failed"),
        "the conformance command against the Python server:\n{report}{}",
        String::from_utf8_lossy(&conformance.stderr)
    );

    // A read-only store (spec.readOnly): Capabilities says so, and a PushSecret to it is
    // refused by the operator with a condition that says why, before any call.
    testenv::apply_yaml_in(
        client,
        &ns,
        &format!(
            "apiVersion: secrets.acme.example/v1\nkind: SqliteStore\nmetadata: {{name: sqlite-ro}}\nspec: {{path: {:?}, table: secrets, readOnly: true}}\n---\napiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {{name: sqlite-ro}}\nspec:\n  runtimeRef: {{name: sqlite}}\n  providerRef: {{apiVersion: secrets.acme.example/v1, kind: SqliteStore, name: sqlite-ro}}\n",
            fx.db.display().to_string()
        ),
        true,
    )
    .await?;
    let read_only = wait_store(client, &ns, "sqlite-ro", "True", "Valid").await?;
    ensure!(
        read_only["status"]["capabilities"] == "ReadOnly",
        "{}",
        read_only["status"]
    );
    let pushes: Api<api::push_secret::PushSecret> = Api::namespaced(client.clone(), &ns);
    testenv::apply_yaml_in(
        client,
        &ns,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: ro-src}\nstringData: {token: nope}\n---\napiVersion: external-secrets.io/v1alpha1\nkind: PushSecret\nmetadata: {name: ro}\nspec:\n  refreshInterval: 1h\n  secretStoreRefs: [{name: sqlite-ro, kind: SecretStore}]\n  selector: {secret: {name: ro-src}}\n  data:\n  - match: {secretKey: token, remoteRef: {remoteKey: never/written}}\n",
        true,
    )
    .await?;
    let refused = wait_ready("PushSecret ro", "False", "Errored", || value(&pushes, "ro")).await?;
    let message = crate::operator::ready(&refused)
        .and_then(|c| c.message)
        .unwrap_or_default();
    ensure!(
        message.contains("read-only"),
        "the PushSecret says why: {message}"
    );
    ensure!(
        fx.row("never/written")?.is_none(),
        "nothing reached the read-only store"
    );

    // Reads: every kind of reference, exact bytes.
    testenv::apply_yaml_in(client, &ns, SQLITE_ES, true).await?;
    wait_secret(client, &ns, "app-secret", &sqlite_expected())
        .await
        .context("the ExternalSecret reading keys, properties, extract and find")?;
    let es: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    wait_ready("ExternalSecret app", "True", "SecretSynced", || {
        value(&es, "app")
    })
    .await?;

    // Writes: a PushSecret puts a Secret's keys into the table...
    testenv::apply_yaml_in(client, &ns, SQLITE_SOURCE, true).await?;
    testenv::apply_yaml_in(client, &ns, SQLITE_PUSH, true).await?;
    let pushes: Api<api::push_secret::PushSecret> = Api::namespaced(client.clone(), &ns);
    wait_ready("PushSecret push", "True", "Synced", || {
        value(&pushes, "push")
    })
    .await?;
    let token = fx.row("pushed/token")?;
    ensure!(
        token.as_deref() == Some(b"t0k3n".as_slice()),
        "the pushed key is a row of the table: pushed/token holds {token:?}"
    );
    let pushed_db = fx.row("pushed/db")?;
    ensure!(
        pushed_db.as_deref() == Some(br#"{"password":"pa55"}"#.as_slice()),
        "the pushed property is a field of a JSON row: pushed/db holds {:?}",
        pushed_db.as_deref().map(String::from_utf8_lossy)
    );
    // ...which an ExternalSecret reads back through the same store.
    testenv::apply_yaml_in(
        client,
        &ns,
        "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {name: pushed}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {name: sqlite}\n  data:\n  - {secretKey: token, remoteRef: {key: pushed/token}}\n  - {secretKey: password, remoteRef: {key: pushed/db, property: password}}\n",
        true,
    )
    .await?;
    wait_secret(
        client,
        &ns,
        "pushed",
        &bytes(&[("token", "t0k3n"), ("password", "pa55")]),
    )
    .await
    .context("reading the pushed values back")?;
    // Deleting the PushSecret (deletionPolicy Delete) deletes the rows before it goes.
    pushes
        .delete("push", &kube::api::DeleteParams::default())
        .await?;
    testenv::wait_for(TIMEOUT, "the PushSecret to be deleted", || async {
        match pushes.get_opt("push").await? {
            None => Ok(()),
            Some(_) => Err(anyhow!("PushSecret push still exists")),
        }
    })
    .await?;
    for key in ["pushed/token", "pushed/db"] {
        let row = fx.row(key)?;
        ensure!(
            row.is_none(),
            "deleting the PushSecret (deletionPolicy Delete) left the row {key}: {:?}",
            row.as_deref().map(String::from_utf8_lossy)
        );
    }

    // An ExternalSecret that will change while the server is down.
    let later = "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {name: later}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {name: sqlite}\n  data: [{secretKey: value, remoteRef: {key: plain}}]\n";
    testenv::apply_yaml_in(client, &ns, later, true).await?;
    wait_secret(client, &ns, "later", &bytes(&[("value", "v0")])).await?;

    // SIGKILL: nothing the operator wrote changes, and the store says the server is gone.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    server.kill();
    let versions = crate::restart::secret_versions(&secrets).await?;
    let contents = managed_contents(&secrets).await?;
    ensure!(
        versions.len() == 3 && contents.len() == 3,
        "the Secrets the operator wrote: {:?}",
        versions.keys().collect::<Vec<_>>()
    );
    let store = wait_store(client, &ns, "sqlite", "False", "ValidationFailed")
        .await
        .context("the store once the Python server was killed")?;
    let message = crate::operator::ready(&store)
        .and_then(|c| c.message)
        .unwrap_or_default();
    ensure!(
        message.contains(&server.address),
        "the store names the server it cannot reach: {message}"
    );
    wait_class(client, Some(&ns), "sqlite", "False", "HealthCheckFailed")
        .await
        .context("the ProviderClass once the Python server was killed")?;
    // A change made meanwhile cannot sync yet, and says so.
    es.patch(
        "later",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"data": [{"secretKey": "value", "remoteRef": {"key": "other"}}]}}),
        ),
    )
    .await?;
    let failed = wait_ready(
        "ExternalSecret later, changed while the server is down",
        "False",
        "SecretSyncedError",
        || value(&es, "later"),
    )
    .await?;
    let message = crate::operator::ready(&failed)
        .and_then(|c| c.message)
        .unwrap_or_default();
    ensure!(
        message.contains(&server.address),
        "the ExternalSecret says why it cannot sync: {message}"
    );
    // Several of `app`'s 1 s refreshes fail meanwhile.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let versions_during = crate::restart::secret_versions(&secrets).await?;
    ensure!(
        versions_during == versions,
        "a Secret was rewritten while the Python server was down: resourceVersions {versions:?} before, {versions_during:?} during"
    );
    let contents_during = managed_contents(&secrets).await?;
    ensure!(
        contents_during == contents,
        "a Secret's bytes changed while the Python server was down"
    );

    // Back on the same port, the operator not restarted: everything recovers by itself.
    server.restart()?;
    wait_class(client, Some(&ns), "sqlite", "True", "Healthy")
        .await
        .context("the ProviderClass after the restart")?;
    wait_store(client, &ns, "sqlite", "True", "Valid")
        .await
        .context("the store after the restart")?;
    wait_secret(client, &ns, "later", &bytes(&[("value", "3")]))
        .await
        .context("the ExternalSecret changed while the server was down, after the restart")?;
    wait_ready("ExternalSecret later", "True", "SecretSynced", || {
        value(&es, "later")
    })
    .await?;
    wait_ready("ExternalSecret app", "True", "SecretSynced", || {
        value(&es, "app")
    })
    .await?;
    let app = data_of(&secrets.get("app-secret").await?);
    ensure!(
        app == sqlite_expected(),
        "app-secret after the restart holds {:?}",
        app.keys().collect::<Vec<_>>()
    );
    let served = connections_opened(env, &server.address).await?;
    ensure!(
        served >= 1.0,
        "the shared operator counts its connections to the Python server: {served}"
    );
    Ok(())
}

/// The data of every Secret the operator manages in the namespace, by name.
async fn managed_contents(
    secrets: &Api<Secret>,
) -> Result<BTreeMap<String, BTreeMap<String, Vec<u8>>>> {
    Ok(secrets
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter(|s| {
            s.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key("reconcile.external-secrets.io/managed"))
        })
        .map(|s| (s.metadata.name.clone().unwrap_or_default(), data_of(s)))
        .collect())
}

/// Issue 40, item 4, through the operator: for a server whose TLS Secret it keeps
/// (`--provider-tls-secret`, in its own namespace), the operator writes a client certificate of
/// team A's namespace into team A's ProviderClass Secret; team A's store syncs through it, and
/// team A, reading that Secret and calling the server itself, may claim nothing outside its
/// namespace (the conformance run's `namespace-claims`: a ClusterSecretStore, or another
/// namespace, is refused with PERMISSION_DENIED).
async fn tenant_certificate(env: Arc<Env>) -> Result<()> {
    use api::caller_identity::CallerIdentity;
    let client = env.client().await;
    let server = start_server(&env, &["Fake"])?;
    let operator_ns = testenv::create_namespace(&client, "oop-operator").await?;
    let team = testenv::create_namespace(&client, "oop-team").await?;
    let controller = format!("tenant-{team}");
    let kept = format!("{operator_ns}/provider-tls=provider,127.0.0.1");
    let _operator = crate::restart::Operator::start_with(
        &env,
        &team,
        &controller,
        &["--disable-webhook", "--provider-tls-secret", &kept],
    )?;
    // The server serves what the operator issued, as a pod mounting the Secret would.
    let operator_secrets: Api<Secret> = Api::namespaced(client.clone(), &operator_ns);
    let issued = testenv::wait_for(TIMEOUT, "the server's TLS Secret", || async {
        let data = operator_secrets
            .get_opt("provider-tls")
            .await?
            .and_then(|s| s.data)
            .unwrap_or_default();
        ensure!(data.contains_key("ca.key"), "not issued yet");
        anyhow::Ok(data)
    })
    .await?;
    for file in ["ca.crt", "tls.crt", "tls.key"] {
        std::fs::write(server.certs_dir().join(file), &issued[file].0)?;
    }

    testenv::apply_yaml_in(
        &client,
        &team,
        &format!(
            "apiVersion: providers.external-secrets.io/v1alpha1\nkind: Fake\nmetadata: {{name: team}}\nspec: {{data: [{{key: user, value: alice}}]}}\n---\napiVersion: external-secrets.io/v1alpha1\nkind: ProviderClass\nmetadata: {{name: fake}}\nspec: {{address: '{}'}}\n---\napiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {{name: fake}}\nspec:\n  controller: {controller}\n  runtimeRef: {{kind: ProviderClass, name: fake}}\n  providerRef: {{apiVersion: providers.external-secrets.io/v1alpha1, kind: Fake, name: team}}\n---\napiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: team}}\nspec:\n  secretStoreRef: {{name: fake}}\n  data: [{{secretKey: user, remoteRef: {{key: user}}}}]\n",
            server.address
        ),
        true,
    )
    .await?;
    wait_secret(&client, &team, "team", &bytes(&[("user", "alice")]))
        .await
        .context("team A's ExternalSecret through its ProviderClass")?;

    let team_secrets: Api<Secret> = Api::namespaced(client.clone(), &team);
    let written = team_secrets
        .get("external-secrets-provider-tls")
        .await?
        .data
        .unwrap_or_default();
    ensure!(
        written.keys().map(String::as_str).collect::<Vec<_>>()
            == ["ca.crt", "client.crt", "client.key"],
        "team A's Secret holds only the client's half: {:?}",
        written.keys()
    );
    let client_crt = &written["client.crt"].0;
    ensure!(
        CallerIdentity::of_pem_chain(client_crt).map_err(anyhow::Error::msg)?
            == CallerIdentity::Namespace(team.clone()),
        "team A's certificate names its namespace"
    );
    // What team A can do with what it can read: the conformance command with its Secret.
    let dir = tempfile::tempdir()?;
    for (key, value) in &written {
        std::fs::write(dir.path().join(key), &value.0)?;
    }
    let output = std::process::Command::new(binary())
        .args(["provider", "conformance", "--address", &server.address])
        .arg("--tls-dir")
        .arg(dir.path())
        .args([
            "--provider-ref",
            &format!("providers.external-secrets.io/v1alpha1/Fake/{team}/team"),
        ])
        .args(["--read-key", "user", "--read-value", "alice"])
        .output()?;
    let report = String::from_utf8_lossy(&output.stdout);
    // The checks about who may claim what, and team A's own read; the server's other checks
    // are the conformance trial's.
    let passed = |check: &str| {
        report
            .lines()
            .any(|l| l.split_whitespace().take(2).eq(["PASS", check]))
    };
    ensure!(
        [
            "namespace-claims",
            "client-certificate-required",
            "get-secret:user"
        ]
        .into_iter()
        .all(passed),
        "team A's certificate against the server:\n{report}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// A ProviderClass's `spec.callTimeout` is the deadline of the calls through it: a store whose
/// GitLab accepts connections and never answers turns `Ready=False` at the class's 2 s, naming
/// the server, not at the 30 s the server's GitLab client or the default deadline would take.
async fn call_timeout(env: Arc<Env>) -> Result<()> {
    const CALL_TIMEOUT: Duration = Duration::from_secs(2);
    /// Far below the 30 s either other bound would take; room for a loaded machine.
    const WITHIN: Duration = Duration::from_secs(20);
    let client = env.client().await;
    let server = start_server(&env, &["Gitlab"])?;
    let ns = testenv::create_namespace(&client, "oop-timeout").await?;
    // Connections complete in the kernel's backlog; nothing ever reads or answers them.
    let hole = std::net::TcpListener::bind("127.0.0.1:0")?;
    tls_secret(&client, &ns, "quick-tls", &server.pki()).await?;
    testenv::apply_yaml_in(
        &client,
        &ns,
        &format!(
            r#"
apiVersion: external-secrets.io/v1alpha1
kind: ProviderClass
metadata: {{name: quick}}
spec: {{address: '{address}', tlsSecretRef: {{name: quick-tls}}, callTimeout: {timeout}s}}
---
apiVersion: v1
kind: Secret
metadata: {{name: gitlab-token}}
stringData: {{token: never-read}}
---
apiVersion: providers.external-secrets.io/v1alpha1
kind: Gitlab
metadata: {{name: hole}}
spec:
  url: http://{hole}
  projectID: "1"
  auth: {{SecretRef: {{accessToken: {{name: gitlab-token, key: token}}}}}}
"#,
            address = server.address,
            timeout = CALL_TIMEOUT.as_secs(),
            hole = hole.local_addr()?,
        ),
        true,
    )
    .await?;
    wait_class(&client, Some(&ns), "quick", "True", "Healthy").await?;
    let created = std::time::Instant::now();
    testenv::apply_yaml_in(
        &client,
        &ns,
        "apiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {name: quick}\nspec:\n  runtimeRef: {name: quick}\n  providerRef: {apiVersion: providers.external-secrets.io/v1alpha1, kind: Gitlab, name: hole}\n",
        true,
    )
    .await?;
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), &ns);
    let store = testenv::wait_for(
        WITHIN,
        "SecretStore quick to fail its validation",
        || async {
            let store = value(&stores, "quick").await?;
            let ready = store["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                .context("no Ready condition yet")?;
            ensure!(
                ready["status"] == "False" && ready["reason"] == "ValidationFailed",
                "Ready={} {}",
                ready["status"],
                ready["reason"]
            );
            anyhow::Ok(store)
        },
    )
    .await
    .with_context(|| {
        format!("a class with callTimeout {CALL_TIMEOUT:?} in front of a GitLab that never answers")
    })?;
    let message = crate::operator::ready_message(&store);
    ensure!(
        message.contains(&server.address) && message.contains("deadline of 2s"),
        "the store names the server and the class's deadline: {message}"
    );
    eprintln!(
        "call_timeout: Ready=False {:.1}s after the store was made: {message}",
        created.elapsed().as_secs_f64()
    );
    drop(hole);
    Ok(())
}
