//! Templates end to end (ESO's documented templates are the docs suite's, `eso_docs`): a
//! template sets the Secret's type, labels and annotations; a template source ConfigMap edited
//! re-renders at once; a broken template leaves the Secret alone; a PushSecret pushes its
//! template's output.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow, ensure};
use api::external_secret::ExternalSecret;
use api::push_secret::PushSecret;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{Patch, PatchParams};
use libtest_mimic::Trial;

use crate::operator::{TIMEOUT, wait_ready};
use crate::sync::{bytes, value, wait_secret};
use crate::{Env, trial};

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial(
            "templates::type_labels_and_annotations",
            env,
            type_labels_and_annotations,
        ),
        trial(
            "templates::config_map_edit_rerenders",
            env,
            config_map_edit_rerenders,
        ),
        trial(
            "templates::a_broken_template_keeps_the_secret",
            env,
            broken_template_keeps_the_secret,
        ),
        trial("templates::push_secret_pushes_the_template", env, push),
        trial(
            "templates::rewrite_transform_renames_keys",
            env,
            rewrite_transform,
        ),
        trial(
            "templates::an_expensive_template_stops_at_its_budget_and_probes_answer_meanwhile",
            env,
            expensive_template,
        ),
        trial(
            "templates::the_operators_webhook_answers_while_expensive_templates_render",
            env,
            webhook_answers_while_rendering,
        ),
    ]
}

const STORE: &str = r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: fake}
spec:
  provider:
    fake:
      data:
      - {key: /grafana/user, value: grafana-admin}
      - {key: /grafana/password, value: s3cr3t}
      - {key: /database/url, value: "postgres://db:5432/app"}
      - {key: /credentials/password, value: c3VwZXJzZWNyZXQ=}
      - {key: /credentials/username, value: root}
      - {key: /clock/now, value: "2026-11-23T10:00:00Z"}
"#;

/// ESO's documented multi-line template, which the docs suite (`eso_docs`) checks as written.
const MULTILINE: &str = include_str!("../eso-docs/multiline-template-v2-external-secret.yaml");

/// `docs/snippets/template-v2-scope-and-target.yaml` (its `.now` made a fetched key: ESO's
/// templates refuse a missing key).
const ANNOTATED: &str = r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata:
  name: annotated
spec:
  secretStoreRef: {name: fake, kind: SecretStore}
  target:
    name: annotated-secret
    template:
      engineVersion: v2
      type: kubernetes.io/basic-auth
      metadata:
        labels: {app: '{{ .user | trunc 7 }}'}
      templateFrom:
      - target: Annotations
        literal: "last-sync-for-user/{{ .user }}: {{ .now }}"
      data:
        username: '{{ .user }}'
        password: '{{ .password }}'
  data:
  - secretKey: user
    remoteRef:
      key: /grafana/user
  - secretKey: password
    remoteRef:
      key: /grafana/password
  - secretKey: now
    remoteRef:
      key: /clock/now
"#;

/// `docs/snippets/template-v2-from-secret.yaml`.
const FROM_CONFIG_MAP: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: grafana-config-tpl
data:
  config.yaml: |
    datasources:
      - name: Graphite
        type: graphite
        access: proxy
        url: http://localhost:8080
        password: "{{ .password }}"
        user: "{{ .user }}"
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata:
  name: my-template-example
spec:
  refreshInterval: 1h
  secretStoreRef: {name: fake, kind: SecretStore}
  target:
    name: secret-to-be-created
    template:
      engineVersion: v2
      templateFrom:
      - configMap:
          # name of the configmap to pull in
          name: grafana-config-tpl
          # here you define the keys that should be used as template
          items:
          - key: config.yaml
  data:
  - secretKey: user
    remoteRef:
      key: /grafana/user
  - secretKey: password
    remoteRef:
      key: /grafana/password
"#;

async fn store_namespace(client: &kube::Client, prefix: &str) -> Result<String> {
    let ns = testenv::create_namespace(client, prefix).await?;
    testenv::apply_yaml_in(client, &ns, STORE, true).await?;
    Ok(ns)
}

async fn type_labels_and_annotations(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = store_namespace(&client, "tpl-docs").await?;
    testenv::apply_yaml_in(&client, &ns, ANNOTATED, true).await?;
    let secret = wait_secret(
        &client,
        &ns,
        "annotated-secret",
        &bytes(&[("username", "grafana-admin"), ("password", "s3cr3t")]),
    )
    .await?;
    ensure!(
        secret.type_.as_deref() == Some("kubernetes.io/basic-auth"),
        "type {:?}",
        secret.type_
    );
    let annotations = secret.metadata.annotations.clone().unwrap_or_default();
    ensure!(
        annotations
            .get("last-sync-for-user/grafana-admin")
            .map(String::as_str)
            == Some("2026-11-23T10:00:00Z"),
        "annotations {annotations:?}"
    );
    let labels = secret.metadata.labels.clone().unwrap_or_default();
    ensure!(
        labels.get("app").map(String::as_str) == Some("grafana"),
        "labels {labels:?}"
    );
    let api: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    wait_ready("ExternalSecret annotated", "True", "SecretSynced", || {
        value(&api, "annotated")
    })
    .await?;
    Ok(())
}

async fn config_map_edit_rerenders(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = store_namespace(&client, "tpl-cm").await?;
    testenv::apply_yaml_in(&client, &ns, FROM_CONFIG_MAP, true).await?;
    let first = "datasources:\n  - name: Graphite\n    type: graphite\n    access: proxy\n    url: http://localhost:8080\n    password: \"s3cr3t\"\n    user: \"grafana-admin\"\n";
    wait_secret(
        &client,
        &ns,
        "secret-to-be-created",
        &bytes(&[("config.yaml", first)]),
    )
    .await?;
    // refreshInterval is an hour: only the ConfigMap watch can bring the new template in.
    let started = std::time::Instant::now();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    cms.patch(
        "grafana-config-tpl",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"data": {"config.yaml": "user={{ .user | upper }}\n"}})),
    )
    .await?;
    wait_secret(
        &client,
        &ns,
        "secret-to-be-created",
        &bytes(&[("config.yaml", "user=GRAFANA-ADMIN\n")]),
    )
    .await?;
    eprintln!(
        "re-rendered {:?} after the ConfigMap edit",
        started.elapsed()
    );
    Ok(())
}

async fn broken_template_keeps_the_secret(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = store_namespace(&client, "tpl-broken").await?;
    testenv::apply_yaml_in(&client, &ns, MULTILINE, true).await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let api: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    wait_ready("ExternalSecret template", "True", "SecretSynced", || {
        value(&api, "template")
    })
    .await?;
    let before = secrets.get("secret-to-be-created").await?;
    let broken = MULTILINE.replace(
        r#"connection: '{{ .dburl | replace "postgres://" "postgresql://" }}'"#,
        r#"connection: "ok\n{{ .dburl | nosuchfunction }}""#,
    );
    testenv::apply_yaml_in(&client, &ns, &broken, true).await?;
    let es = wait_ready(
        "ExternalSecret template",
        "False",
        "SecretSyncedError",
        || value(&api, "template"),
    )
    .await?;
    let message = crate::operator::ready(&es)
        .and_then(|c| c.message)
        .unwrap_or_default();
    ensure!(
        message.contains("spec.target.template.data[connection]")
            && message.contains("connection:2:")
            && message.contains("function \"nosuchfunction\" not defined"),
        "the condition names the key, the line and the problem: {message}"
    );
    ensure!(
        !message.contains("s3cr3t") && !message.contains("postgres://db"),
        "no secret data in the message: {message}"
    );
    let after = secrets.get("secret-to-be-created").await?;
    ensure!(
        after.data == before.data
            && after.metadata.resource_version == before.metadata.resource_version,
        "the Secret was left as it was"
    );
    Ok(())
}

async fn push(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = store_namespace(&client, "tpl-push").await?;
    let manifests = r#"
apiVersion: v1
kind: Secret
metadata: {name: src}
stringData: {user: ada, pass: pw}
---
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {name: push}
spec:
  refreshInterval: 1h
  secretStoreRefs: [{name: fake, kind: SecretStore}]
  selector: {secret: {name: src}}
  template:
    engineVersion: v2
    data:
      dsn: 'postgres://{{ .user }}:{{ .pass | upper }}@db'
  data: [{match: {secretKey: dsn, remoteRef: {remoteKey: pushed-dsn}}}]
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: reader}
spec:
  secretStoreRef: {name: fake}
  data: [{secretKey: dsn, remoteRef: {key: pushed-dsn}}]
"#;
    testenv::apply_yaml_in(&client, &ns, manifests, true).await?;
    let pushes: Api<PushSecret> = Api::namespaced(client.clone(), &ns);
    wait_ready("PushSecret push", "True", "Synced", || async {
        Ok(serde_json::to_value(pushes.get("push").await?)?)
    })
    .await?;
    testenv::wait_for(TIMEOUT, "the pushed value to read back", || async {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let s = secrets
            .get_opt("reader")
            .await?
            .ok_or_else(|| anyhow!("no Secret yet"))?;
        let dsn = s.data.unwrap_or_default().remove("dsn").map(|v| v.0);
        if dsn.as_deref() == Some(b"postgres://ada:PW@db".as_slice()) {
            Ok(())
        } else {
            Err(anyhow!("dsn is {dsn:?}"))
        }
    })
    .await
}

async fn rewrite_transform(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = store_namespace(&client, "tpl-rewrite").await?;
    let es = r#"
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: renamed}
spec:
  refreshInterval: 1h
  secretStoreRef: {name: fake, kind: SecretStore}
  dataFrom:
  - find: {name: {regexp: "^/grafana/"}}
    rewrite:
    - regexp: {source: "^/grafana/(.*)$", target: "$1"}
    - transform: {template: "GRAFANA_{{ .value | upper }}"}
"#;
    testenv::apply_yaml_in(&client, &ns, es, true).await?;
    wait_secret(
        &client,
        &ns,
        "renamed",
        &bytes(&[
            ("GRAFANA_USER", "grafana-admin"),
            ("GRAFANA_PASSWORD", "s3cr3t"),
        ]),
    )
    .await?;
    // Two keys that one template turns into the same name: refused, naming both.
    let colliding = es
        .replace("name: renamed", "name: colliding")
        .replace("GRAFANA_{{ .value | upper }}", "same");
    testenv::apply_yaml_in(&client, &ns, &colliding, true).await?;
    let api: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let failed = wait_ready(
        "ExternalSecret colliding",
        "False",
        "SecretSyncedError",
        || value(&api, "colliding"),
    )
    .await?;
    let message = crate::operator::ready(&failed)
        .and_then(|c| c.message)
        .unwrap_or_default();
    ensure!(
        message.contains("rewrite[1]") && message.contains("both become \"same\""),
        "names the step and the collision: {message}"
    );
    Ok(())
}

/// RSA keys in a loop would hold a thread for many minutes. ExternalSecrets and a PushSecret
/// with such a template (their controllers render at the same time, as many as this machine
/// has cores) stop at their budget and say so, and meanwhile the probes answer at once: the
/// renders run off the async workers.
async fn expensive_template(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = store_namespace(&client, "tpl-budget").await?;
    let probes = env
        .addresses()
        .probes
        .expect("the test operator serves probes");
    let keys = r#"'{{ range until 1000 }}{{ genPrivateKey "rsa" }}{{ end }}'"#;
    let mut manifests = format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: src}}
stringData: {{user: ada}}
---
apiVersion: external-secrets.io/v1alpha1
kind: PushSecret
metadata: {{name: keys}}
spec:
  refreshInterval: 1h
  secretStoreRefs: [{{name: fake, kind: SecretStore}}]
  selector: {{secret: {{name: src}}}}
  template: {{data: {{key: {keys}}}}}
  data: [{{match: {{secretKey: key, remoteRef: {{remoteKey: pushed-key}}}}}}]
"#
    );
    for i in 0..2 {
        manifests.push_str(&format!(
            r#"---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: keys-{i}}}
spec:
  refreshInterval: 1h
  secretStoreRef: {{name: fake}}
  target: {{template: {{data: {{key: {keys}}}}}}}
  data: [{{secretKey: user, remoteRef: {{key: /grafana/user}}}}]
"#
        ));
    }
    testenv::apply_yaml_in(&client, &ns, &manifests, true).await?;
    let externalsecrets: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let pushes: Api<PushSecret> = Api::namespaced(client.clone(), &ns);
    // The longest a probe took, in microseconds.
    let slowest = std::sync::atomic::AtomicU64::new(0);
    let messages = testenv::wait_for(TIMEOUT, "every render to stop at its budget", || {
        let (externalsecrets, pushes) = (externalsecrets.clone(), pushes.clone());
        let slowest = &slowest;
        async move {
            let asked = std::time::Instant::now();
            crate::operator::get(probes, "/healthz").await?;
            slowest.fetch_max(
                asked.elapsed().as_micros() as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
            let mut objects = Vec::new();
            for i in 0..2 {
                objects.push(serde_json::to_value(
                    externalsecrets.get(&format!("keys-{i}")).await?,
                )?);
            }
            objects.push(serde_json::to_value(pushes.get("keys").await?)?);
            let messages: Vec<String> = objects
                .iter()
                .filter_map(crate::operator::ready)
                .filter(|c| c.status.as_str() == "False")
                .filter_map(|c| c.message)
                .filter(|m| m.contains("exceeded its"))
                .collect();
            if messages.len() == objects.len() {
                Ok(messages)
            } else {
                Err(anyhow!("{} of {} stopped", messages.len(), objects.len()))
            }
        }
    })
    .await?;
    for message in &messages {
        ensure!(
            message.contains("template.data[key]")
                && (message.contains("exceeded its budget")
                    || message.contains("exceeded its time budget")),
            "the condition names the template and its budget: {message}"
        );
    }
    let slowest = std::time::Duration::from_micros(slowest.into_inner());
    ensure!(
        slowest < std::time::Duration::from_secs(1),
        "a probe waited {slowest:?} while templates rendered"
    );
    Ok(())
}

/// The operator's own binary, its conversion webhook on its runtime as in a pod, on a control
/// plane of its own (the other trials' webhook runs apart from their operator, and this one
/// points the CRDs at itself): while ExternalSecrets whose templates exceed their budget keep
/// the render pool busy, the API server's calls to the webhook (a Vault object read at
/// v1beta1, stored at v1alpha1) and the probes are each answered within a second, and the
/// leader's Lease (4 s, renewed 2 s before it ends) never runs out.
async fn webhook_answers_while_rendering(_env: Arc<Env>) -> Result<()> {
    const RENDERS: usize = 6;
    let cp = testenv::ControlPlane::start()?;
    let client = cp.client().await;
    testenv::install_crds(&client, Env::path("crds")).await?;
    let ns = testenv::create_namespace(&client, "tpl-webhook").await?;
    let free = || -> Result<std::net::SocketAddr> {
        Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
    };
    let (metrics, probes, webhook) = (free()?, free()?, free()?);
    cp.spawn(
        "operator",
        std::path::Path::new(env!("CARGO_BIN_EXE_external-secrets")),
        [
            "controller",
            "--kubeconfig",
            &cp.kubeconfig_path().to_string_lossy(),
            "--metrics-addr",
            &metrics.to_string(),
            "--live-addr",
            &probes.to_string(),
            "--webhook-addr",
            &webhook.to_string(),
            "--webhook-url",
            &format!("https://{webhook}/convert"),
            "--webhook-namespace",
            "default",
            "--enable-leader-election",
            "--lease-duration",
            "4s",
            "--renew-deadline",
            "2s",
        ]
        .map(str::to_owned)
        .to_vec(),
    )?;
    testenv::apply_yaml_in(
        &client,
        &ns,
        "apiVersion: providers.external-secrets.io/v1alpha1\nkind: Vault\nmetadata: {name: converted}\nspec:\n  server: https://vault.example:8200\n  path: secret\n  auth: {tokenSecretRef: {name: token, key: token}}\n",
        true,
    )
    .await?;
    let at_v1beta1: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &api::providers::vault::DESCRIPTOR
            .resource(api::provider_kinds::Scope::Namespaced, "v1beta1"),
    );
    testenv::wait_for(TIMEOUT, "the operator's webhook converting", || {
        let at_v1beta1 = at_v1beta1.clone();
        async move { anyhow::Ok(at_v1beta1.get("converted").await.map(drop)?) }
    })
    .await?;

    let keys = r#"'{{ range until 1000 }}{{ genPrivateKey "rsa" }}{{ end }}'"#;
    let mut manifests = STORE.to_owned();
    for i in 0..RENDERS {
        manifests.push_str(&format!(
            "---\napiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: keys-{i}}}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {{name: fake}}\n  target: {{template: {{data: {{key: {keys}}}}}}}\n  data: [{{secretKey: user, remoteRef: {{key: /grafana/user}}}}]\n"
        ));
    }
    testenv::apply_yaml_in(&client, &ns, &manifests, true).await?;
    let externalsecrets: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let lease = || async {
        let spec = leases
            .get("external-secrets-controller")
            .await?
            .spec
            .unwrap_or_default();
        let renewed = spec
            .renew_time
            .ok_or_else(|| anyhow!("the Lease has no renewTime"))?;
        anyhow::Ok((spec.holder_identity.unwrap_or_default(), renewed.0))
    };
    let (leader, _) = lease().await?;
    let mut stalest_lease = Duration::ZERO;
    let (mut slowest_conversion, mut slowest_probe) = (Duration::ZERO, Duration::ZERO);
    let mut asked_while_rendering = 0;
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let asked = std::time::Instant::now();
        at_v1beta1.get("converted").await?;
        slowest_conversion = slowest_conversion.max(asked.elapsed());
        let asked = std::time::Instant::now();
        crate::operator::get(probes, "/healthz").await?;
        slowest_probe = slowest_probe.max(asked.elapsed());
        let (holder, renewed) = lease().await?;
        ensure!(holder == leader, "the Lease went from {leader} to {holder}");
        let age = jiff::Timestamp::now().duration_since(renewed);
        stalest_lease = stalest_lease.max(age.try_into().unwrap_or_default());
        let mut stopped = 0;
        for i in 0..RENDERS {
            let es = serde_json::to_value(externalsecrets.get(&format!("keys-{i}")).await?)?;
            if crate::operator::ready(&es).is_some_and(|c| {
                c.status.as_str() == "False"
                    && c.message.is_some_and(|m| m.contains("exceeded its"))
            }) {
                stopped += 1;
            }
        }
        if stopped == RENDERS {
            break;
        }
        asked_while_rendering += 1;
        ensure!(
            std::time::Instant::now() < deadline,
            "{stopped} of {RENDERS} renders stopped at their budget"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ensure!(
        stalest_lease < Duration::from_secs(4),
        "while templates rendered, the 4 s Lease was last renewed {stalest_lease:?} before"
    );
    ensure!(
        slowest_conversion < Duration::from_secs(1) && slowest_probe < Duration::from_secs(1),
        "while templates rendered, a conversion took {slowest_conversion:?} and a probe {slowest_probe:?}"
    );
    ensure!(
        asked_while_rendering >= 3,
        "only {asked_while_rendering} rounds of questions while templates rendered: nothing was shown"
    );
    Ok(())
}
