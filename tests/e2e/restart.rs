//! A restart of the operator binary over ExternalSecrets that are in sync: no Secret is
//! written, none is read one by one but those someone changed while it was down (once each),
//! and the provider is not asked for anything the refresh intervals do not ask for.
//! Its own operator process, class and namespace, so the shared operator stays out of it.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use api::external_secret::ExternalSecret;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use libtest_mimic::Trial;
use serde_json::json;

use crate::operator::{TIMEOUT, ready, scrape};
use crate::{Env, trial};

/// As many as issue 13 asks for; the request limiter is off so that the first sync is quick,
/// and the shared operator serves conversions (the webhook's certificate Secret is read
/// otherwise, which is not what is counted here).
const COUNT: usize = 1000;
const ARGS: &[&str] = &["--client-qps=0", "--disable-webhook"];
/// Secrets annotated by someone else while the operator is down.
const CHANGED_WHILE_DOWN: usize = 10;

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial(
            "restart::nothing_is_refetched_or_rewritten",
            env,
            nothing_refetched,
        ),
        trial(
            "restart::a_start_lists_each_kind_once",
            env,
            a_start_lists_each_kind_once,
        ),
    ]
}

/// The operator binary in its own process, for one namespace and controller class.
pub struct Operator {
    pub child: Child,
    metrics: SocketAddr,
}

impl Operator {
    pub fn start(env: &Env, namespace: &str, class: &str) -> Result<Self> {
        Self::start_with(env, namespace, class, &[])
    }

    pub fn start_with(env: &Env, namespace: &str, class: &str, extra: &[&str]) -> Result<Self> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_external-secrets"));
        command
            .arg("controller")
            .arg("--kubeconfig")
            .arg(env.control_plane().kubeconfig_path())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        Self::start_command(command, namespace, class, extra)
    }

    /// `command`, which runs `controller` with a kubeconfig (the binary, or an image's
    /// entrypoint), for `namespace` and `class`, serving metrics on a port of its own.
    pub fn start_command(
        mut command: Command,
        namespace: &str,
        class: &str,
        extra: &[&str],
    ) -> Result<Self> {
        let free = || -> Result<SocketAddr> { Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?) };
        let (metrics, probes) = (free()?, free()?);
        let child = command
            .args(["--namespace", namespace, "--controller-class", class])
            .args(["--metrics-addr", &metrics.to_string()])
            .args(["--live-addr", &probes.to_string()])
            .args(extra)
            .spawn()
            .context("starting the operator")?;
        Ok(Self { child, metrics })
    }

    /// As Kubernetes stops a pod: SIGTERM, then wait.
    pub fn stop(mut self) {
        if let Err(e) = testenv::terminate(&mut self.child, std::time::Duration::from_secs(30)) {
            panic!("the operator: {e}");
        }
    }

    /// Provider calls that read secrets, from /metrics (validation is the store's own).
    pub async fn reads(&self) -> Result<f64> {
        self.sum("externalsecret_provider_api_calls_count", |l| {
            !l.contains("call=\"Validate\"")
        })
        .await
    }

    /// Its requests to the API server so far (`external_secrets_api_requests_total`), by
    /// `verb resource`.
    pub async fn requests(&self) -> Result<BTreeMap<String, f64>> {
        let text = scrape(self.metrics).await?;
        let label = |line: &str, name: &str| -> String {
            let start = format!("{name}=\"");
            line.split_once(&start)
                .and_then(|(_, rest)| rest.split_once('"'))
                .map(|(value, _)| value.to_owned())
                .unwrap_or_default()
        };
        Ok(text
            .lines()
            .filter(|l| l.starts_with("external_secrets_api_requests_total{"))
            .filter_map(|l| {
                let value = l.rsplit(' ').next()?.parse::<f64>().ok()?;
                Some((
                    format!("{} {}", label(l, "verb"), label(l, "resource")),
                    value,
                ))
            })
            .collect())
    }

    /// The sum of a metric's series that `keep` accepts.
    pub async fn sum(&self, metric: &str, keep: impl Fn(&str) -> bool) -> Result<f64> {
        let text = scrape(self.metrics).await?;
        Ok(text
            .lines()
            .filter(|l| l.starts_with(metric) && keep(l))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// resourceVersions of the Secrets this operator manages, by name.
pub async fn secret_versions(secrets: &Api<Secret>) -> Result<BTreeMap<String, String>> {
    Ok(secrets
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|s| {
            s.labels()
                .contains_key("reconcile.external-secrets.io/managed")
        })
        .map(|s| (s.name_any(), s.resource_version().unwrap_or_default()))
        .collect())
}

/// Waits until every ExternalSecret `externalsecrets` lists is Ready=True.
pub async fn every_one_ready(externalsecrets: &Api<ExternalSecret>) -> Result<()> {
    testenv::wait_for(TIMEOUT, "every ExternalSecret Ready", || async {
        let not_ready = externalsecrets
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|es| {
                let value = serde_json::to_value(es).unwrap_or_default();
                ready(&value).is_none_or(|c| c.status.as_str() != "True")
            })
            .count();
        ensure!(not_ready == 0, "{not_ready} not Ready");
        anyhow::Ok(())
    })
    .await
}

async fn nothing_refetched(env: Arc<Env>) -> Result<()> {
    let client = env.client().await;
    let ns = testenv::create_namespace(&client, "restart").await?;
    let class = format!("restart-{ns}");
    let store = crate::leader::class_store(&class);
    testenv::apply_yaml_in(&client, &ns, &store, true).await?;
    // The ExternalSecrets whose Secrets change while the operator is down have a store of their
    // own, whose change later wakes them without a refresh (OnChange).
    testenv::apply_yaml_in(
        &client,
        &ns,
        &store.replace("name: fake", "name: fake-changed"),
        true,
    )
    .await?;
    for i in 0..COUNT {
        let (store, policy) = if i < CHANGED_WHILE_DOWN {
            ("fake-changed", "OnChange")
        } else {
            ("fake", "Periodic")
        };
        let es = format!(
            "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {{name: es-{i}}}\nspec:\n  refreshInterval: 1h\n  refreshPolicy: {policy}\n  secretStoreRef: {{name: {store}}}\n  data: [{{secretKey: user, remoteRef: {{key: user}}}}]\n"
        );
        testenv::apply_yaml_in(&client, &ns, &es, true).await?;
    }
    let first = Operator::start_with(&env, &ns, &class, ARGS)?;
    let externalsecrets: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    every_one_ready(&externalsecrets).await?;
    ensure!(
        first.reads().await? >= COUNT as f64,
        "the first operator read them all"
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    first.stop();
    // While it is down, someone annotates a few Secrets: what they change does not matter to
    // the ExternalSecrets, but their versions are new.
    for i in 0..CHANGED_WHILE_DOWN {
        secrets
            .patch(
                &format!("es-{i}"),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"someone": "else"}}})),
            )
            .await?;
    }
    let before = secret_versions(&secrets).await?;
    ensure!(before.len() == COUNT, "{} Secrets", before.len());

    let second = Operator::start_with(&env, &ns, &class, ARGS)?;
    // Until the second operator has reconciled every one of them at least once.
    testenv::wait_for(
        TIMEOUT,
        "the restarted operator to reconcile them all",
        || async {
            let reconciled = second
                .sum("externalsecret_sync_calls_total", |_| true)
                .await?;
            ensure!(reconciled >= COUNT as f64, "{reconciled} reconciles");
            anyhow::Ok(())
        },
    )
    .await?;
    let reads = second.reads().await?;
    ensure!(
        reads == 0.0,
        "the restarted operator asked the provider {reads} times for secrets that were in sync"
    );
    // Each store and its converted provider object is validated once, not again when the
    // PushSecrets (none here) turn out to be listed.
    let validations = second
        .sum("externalsecret_provider_api_calls_count", |l| {
            l.contains("call=\"Validate\"")
        })
        .await?;
    ensure!(
        validations == 4.0,
        "the restarted operator made {validations} validations of its 2 stores and their 2 \
         provider objects"
    );
    // Nor the API server, Secret by Secret: its watch of their metadata shows each unchanged
    // since the resourceVersion the ExternalSecret's status recorded.
    let requests = |verb: &'static str| {
        second.sum("external_secrets_api_requests_total", move |l| {
            l.contains(&format!("verb=\"{verb}\"")) && l.contains("resource=\"secrets\"")
        })
    };
    let (gets, lists) = (requests("get").await?, requests("list").await?);
    ensure!(
        gets == CHANGED_WHILE_DOWN as f64,
        "the restarted operator read {gets} Secrets one by one ({lists} lists of Secrets), \
         where {CHANGED_WHILE_DOWN} changed while it was down"
    );
    // Nor anything else until the store changes below: no write of any object (a store's
    // status, an event, an access review), no object read one by one but the Secrets that
    // changed, one list of each kind.
    let pages = COUNT.div_ceil(500) as f64;
    let unexpected: Vec<_> = second
        .requests()
        .await?
        .into_iter()
        .filter(|(request, n)| match request.split_once(' ') {
            Some(("get", resource)) => resource != "secrets",
            // Paged: the only kinds with a thousand objects.
            Some(("list", "secrets" | "externalsecrets")) => *n > pages,
            Some(("list", _)) => *n > 1.0,
            Some(("watch", _)) => false,
            _ => true,
        })
        .collect();
    ensure!(
        unexpected.is_empty(),
        "the restarted operator, beyond its one list and watch of each kind: {unexpected:?}"
    );
    // Those it read and found right are not read again at their next reconcile: their store
    // changes, which wakes them (an OnChange one is not refreshed by it).
    let reconciled = second
        .sum("externalsecret_sync_calls_total", |_| true)
        .await?;
    let changed_store = store
        .replace("name: fake", "name: fake-changed")
        .replace("value: alice}", "value: alice}, {key: other, value: bob}");
    testenv::apply_yaml_in(&client, &ns, &changed_store, true).await?;
    testenv::wait_for(TIMEOUT, "the woken ones to be reconciled", || async {
        let now = second
            .sum("externalsecret_sync_calls_total", |_| true)
            .await?;
        ensure!(
            now >= reconciled + CHANGED_WHILE_DOWN as f64,
            "{} reconciles since",
            now - reconciled
        );
        anyhow::Ok(())
    })
    .await?;
    let again = requests("get").await?;
    ensure!(
        again == gets,
        "the Secrets confirmed at the first reconcile were read again: {again} gets"
    );
    // One watch lists the Secrets, in pages of 500: those of PushSecret sources and of
    // templateFrom start with the first object that needs them.
    ensure!(
        lists <= pages,
        "the restarted operator listed Secrets {lists} times, one watch needs {pages}"
    );
    ensure!(
        secret_versions(&secrets).await? == before,
        "a Secret was rewritten after the restart"
    );
    Ok(())
}

/// A start with the conversion webhook and leader election, as in a pod, lists each kind once:
/// the CRDs too, which the webhook (on every replica) and the provider discovery (on the
/// leader) both follow. On a control plane of its own: this operator's webhook points the
/// CRDs at itself.
async fn a_start_lists_each_kind_once(_env: Arc<Env>) -> Result<()> {
    let cp = testenv::ControlPlane::start()?;
    let client = cp.client().await;
    testenv::install_crds(&client, Env::path("crds")).await?;
    let ns = testenv::create_namespace(&client, "start").await?;
    let class = format!("start-{ns}");
    testenv::apply_yaml_in(&client, &ns, &crate::leader::class_store(&class), true).await?;
    testenv::apply_yaml_in(
        &client,
        &ns,
        "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {name: es}\nspec:\n  refreshInterval: 1h\n  secretStoreRef: {name: fake}\n  data: [{secretKey: user, remoteRef: {key: user}}]\n",
        true,
    )
    .await?;
    let webhook = TcpListener::bind("127.0.0.1:0")?.local_addr()?.to_string();
    let url = format!("https://{webhook}/convert");
    let mut command = Command::new(env!("CARGO_BIN_EXE_external-secrets"));
    command
        .arg("controller")
        .arg("--kubeconfig")
        .arg(cp.kubeconfig_path())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let operator = Operator::start_command(
        command,
        &ns,
        &class,
        &[
            "--client-qps=0",
            "--webhook-addr",
            &webhook,
            "--webhook-url",
            &url,
            "--webhook-namespace",
            "default",
            "--enable-leader-election",
            "--leader-election-namespace",
            "default",
        ],
    )?;
    every_one_ready(&Api::namespaced(client.clone(), &ns)).await?;
    // The webhook followed the converting CRDs: it pointed them at itself.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    testenv::wait_for(TIMEOUT, "the webhook's URL in the Vault CRD", || async {
        let crd = crds.get("vaults.providers.external-secrets.io").await?;
        let config = crd
            .spec
            .conversion
            .and_then(|c| c.webhook)
            .and_then(|w| w.client_config);
        ensure!(
            config.as_ref().and_then(|c| c.url.as_deref()) == Some(url.as_str())
                && config.is_some_and(|c| c.ca_bundle.is_some()),
            "not yet"
        );
        anyhow::Ok(())
    })
    .await?;
    let requests = operator.requests().await?;
    let crd_lists = requests
        .get("list customresourcedefinitions")
        .copied()
        .unwrap_or_default();
    ensure!(
        crd_lists == 1.0,
        "the operator listed CRDs {crd_lists} times at its start"
    );
    let repeated: Vec<_> = requests
        .iter()
        .filter(|(request, n)| request.starts_with("list ") && **n > 1.0)
        .collect();
    ensure!(
        repeated.is_empty(),
        "the operator listed these kinds more than once at its start: {repeated:?}"
    );
    Ok(())
}
