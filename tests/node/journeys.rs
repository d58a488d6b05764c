//! What a user meets on day one, on Pods: `helm install`, the operator Ready under its own
//! ServiceAccount, a synced Secret, `/metrics` on the Pod's address, the chart's RBAC enough;
//! then leader failover between two replicas, the Fake provider served out of process by a Pod
//! of its own, the conversion webhook through its Service, `helm upgrade` to a chart storing Vault
//! at v1beta1 with `migrate storage` losing nothing, 1000 ExternalSecrets within the chart's default
//! resources, the host's Vault read from the operator Pod, and `helm uninstall` leaving the
//! Secrets.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    DeleteParams, DynamicObject, ListParams, LogParams, Patch, PatchParams, PostParams,
};
use kube::{Api, Client};
use libtest_mimic::Trial;
use testenv::Node;

use crate::{Env, repo, trial};

const RELEASE: &str = "es";
pub(crate) const NAMESPACE: &str = "external-secrets";
/// The chart's full name for release `es`: its ServiceAccount, Deployment and Lease prefix.
pub(crate) const FULLNAME: &str = "es-external-secrets";
pub(crate) const SELECTOR: &str =
    "app.kubernetes.io/name=external-secrets,app.kubernetes.io/instance=es";
/// The Fake provider server's Deployment (`providers.fake.outOfProcess`) and its Pods' labels.
pub(crate) const FAKE_SERVER: &str = "es-external-secrets-provider-fake";
pub(crate) const FAKE_SERVER_SELECTOR: &str =
    "app.kubernetes.io/name=external-secrets-provider-fake,app.kubernetes.io/instance=es";
pub(crate) const METRICS_PORT: u16 = 8080;
/// The chart's provider servers' metrics port.
pub(crate) const PROVIDER_METRICS_PORT: u16 = 8081;
/// A Pod from an imported image: its start, probes and caches synced, on a 2-core machine
/// shared with other builds.
const POD_TIMEOUT: Duration = Duration::from_secs(180);
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);
/// The chart's `leaderElection.leaseDuration`.
const LEASE_DURATION: Duration = Duration::from_secs(15);

pub fn trials(env: &Arc<Env>) -> Vec<Trial> {
    vec![
        trial(
            "install::the_operator_pod_syncs_under_its_own_service_account",
            env,
            install,
        ),
        trial(
            "failover::the_other_replica_takes_the_lease_and_syncs",
            env,
            failover,
        ),
        trial(
            "out_of_process::the_fake_provider_server_pod_serves_the_store",
            env,
            out_of_process,
        ),
        trial(
            "webhook::a_vault_object_written_at_v1beta1_reads_at_v1alpha1_through_the_service",
            env,
            conversion,
        ),
        trial(
            "upgrade::to_a_chart_storing_vault_at_v1beta1_loses_nothing",
            env,
            upgrade_storage,
        ),
        trial(
            "limits::the_default_resources_hold_1000_external_secrets",
            env,
            limits,
        ),
        trial(
            "vault::the_operator_pod_syncs_from_the_hosts_vault_through_the_bridge",
            env,
            vault,
        ),
        trial(
            "replicas::three_provider_servers_share_the_calls_and_one_goes_unnoticed",
            env,
            crate::rollouts::replicas,
        ),
        trial(
            "rollouts::rolling_updates_of_the_server_and_the_operator_go_unnoticed",
            env,
            crate::rollouts::rolling_updates,
        ),
        trial(
            "network_policy::only_the_operators_pods_reach_the_provider_servers_grpc_port",
            env,
            crate::network_policy::enforced,
        ),
        trial(
            "uninstall::leaves_every_synced_secret_in_place",
            env,
            uninstall,
        ),
    ]
}

async fn install(env: Arc<Env>) -> Result<()> {
    let node = env.node()?;
    let client = node.client().await;
    let pod = one_operator(node, &client).await?;
    let name = pod.metadata.name.clone().unwrap_or_default();

    // In-cluster config under the chart's ServiceAccount: no kubeconfig anywhere.
    let spec = pod.spec.as_ref().context("a Pod without spec")?;
    ensure!(
        spec.service_account_name.as_deref() == Some(FULLNAME),
        "Pod {name} runs as ServiceAccount {:?}, not {FULLNAME}",
        spec.service_account_name
    );
    let container = &spec.containers[0];
    let args = container.args.clone().unwrap_or_default();
    ensure!(
        !args.iter().any(|a| a.contains("kubeconfig"))
            && !container
                .env
                .iter()
                .flatten()
                .any(|e| e.name == "KUBECONFIG"),
        "the operator is given a kubeconfig: {args:?}"
    );

    let ns = sync_one(&client, "install").await?;

    let ip = pod_ip(&pod)?;
    let series = format!("externalsecret_sync_calls_total{{name=\"demo\",namespace=\"{ns}\"}}");
    // The sync is counted when its reconcile ends, after the Secret's write that `sync_one` saw.
    testenv::wait_for(
        Duration::from_secs(30),
        "the sync counted in /metrics",
        || async {
            let metrics = http_get(SocketAddr::new(ip.parse()?, METRICS_PORT), "/metrics")?;
            ensure!(
                metrics
                    .lines()
                    .any(|l| l.starts_with(&series) && !l.ends_with(" 0")),
                "no sync of {ns}/demo counted in http://{ip}:{METRICS_PORT}/metrics:\n{}",
                metrics
                    .lines()
                    .filter(|l| l.starts_with("externalsecret_sync_calls"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            Ok::<_, anyhow::Error>(())
        },
    )
    .await?;

    // Through the API server and the kubelet, as `kubectl logs` reads it.
    let log = Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .logs(&name, &LogParams::default())
        .await
        .context("reading the operator's log through the kubelet")?;
    ensure!(!log.is_empty(), "the operator's log is empty");
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.to_lowercase().contains("forbidden"))
        .collect();
    ensure!(
        refused.is_empty(),
        "the chart's RBAC refused the operator:\n{}",
        refused.join("\n")
    );
    Ok(())
}

async fn failover(env: Arc<Env>) -> Result<()> {
    let node = env.node()?;
    let client = node.client().await;
    let pods = release(node, &client, &["replicaCount=2", "leaderElect=true"]).await?;
    ensure!(
        pods.len() == 2,
        "{} operator Pods Ready, not two",
        pods.len()
    );
    sync_one(&client, "before-failover").await?;

    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let lease_name = format!("{FULLNAME}-controller");
    let leader = holder(&leases, &lease_name, &pods).await?;
    // No replacement Pod may start: it is the other replica that must take over.
    cordon(&client, node.name(), true).await?;
    let taken = take_over(&client, &leases, &lease_name, &pods, &leader).await;
    cordon(&client, node.name(), false).await?;
    let (survivor, deleted) = taken?;
    eprintln!(
        "failover: the other replica {survivor} synced a new ExternalSecret {:.1}s after {leader} was deleted",
        deleted.as_secs_f64()
    );
    Ok(())
}

/// Sets the Node's `spec.unschedulable`, as `kubectl cordon` and `uncordon` do.
async fn cordon(client: &Client, node: &str, unschedulable: bool) -> Result<()> {
    let patch = serde_json::json!({"spec": {"unschedulable": unschedulable}});
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Deletes the `leader` among `pods`; the other Pod must hold the Lease and sync a new
/// ExternalSecret within the lease duration and 10 s. Returns that Pod and how long it took.
async fn take_over(
    client: &Client,
    leases: &Api<Lease>,
    lease_name: &str,
    pods: &[Pod],
    leader: &str,
) -> Result<(String, Duration)> {
    Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .delete(leader, &DeleteParams::default().grace_period(0))
        .await?;
    let deleted = Instant::now();

    // The deleted Pod's process outlives its API object for a moment and may still hold the
    // Lease and sync: the new ExternalSecret is made once another Pod holds it, so that it is
    // not the deleted one that syncs it.
    let within = LEASE_DURATION + Duration::from_secs(10);
    let survivor = pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .find(|p| *p != leader)
        .context("no other operator Pod")?;
    let operator_pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let new_leader = testenv::wait_for(
        within,
        &format!("another operator Pod to hold Lease {lease_name} after {leader} was deleted"),
        || async {
            let live = operator_pods
                .list(&ListParams::default().labels(SELECTOR))
                .await?
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| p.metadata.name.as_deref() != Some(leader))
                .collect::<Vec<_>>();
            holder(leases, lease_name, &live).await
        },
    )
    .await?;
    ensure!(
        new_leader == survivor,
        "{new_leader} holds Lease {lease_name}, not the other replica {survivor}"
    );
    let ns = testenv::create_namespace(client, "after-failover").await?;
    apply_demo(client, &ns).await?;
    wait_demo_secret(client, &ns, within.saturating_sub(deleted.elapsed()))
        .await
        .with_context(|| format!("after deleting the leader Pod {leader}"))?;
    Ok((survivor, deleted.elapsed()))
}

/// The Fake provider in a Deployment of its own (`providers.fake.outOfProcess`, its own image):
/// the operator reaches it over mutual TLS through its Service, and the server counts the calls.
async fn out_of_process(env: Arc<Env>) -> Result<()> {
    let node = env.node()?;
    let client = node.client().await;
    release(node, &client, &["providers.fake.outOfProcess.enabled=true"]).await?;
    let servers = wait_pods(node, &client, FAKE_SERVER, FAKE_SERVER_SELECTOR, 1).await?;
    let ns = sync_one(&client, "out-of-process").await?;
    served_a_call(&servers[0], &ns)
}

/// The provider server `pod` counted a call (`grpc_server_handled_total` above 0 in its own
/// `/metrics`) once `ns/demo` synced.
pub(crate) fn served_a_call(pod: &Pod, ns: &str) -> Result<()> {
    let ip = pod_ip(pod)?;
    let metrics = http_get(
        SocketAddr::new(ip.parse()?, PROVIDER_METRICS_PORT),
        "/metrics",
    )?;
    ensure!(
        metrics
            .lines()
            .any(|l| l.starts_with("grpc_server_handled_total") && !l.ends_with(" 0")),
        "{ns}/demo synced, but the provider server at {ip} counted no call:\n{}",
        metrics
            .lines()
            .filter(|l| l.starts_with("grpc_server"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    Ok(())
}

/// The API server converts through the operator Pod's webhook, reached at the chart's Service
/// (not a URL), with the CA the operator injected.
async fn conversion(env: Arc<Env>) -> Result<()> {
    let node = env.node()?;
    let client = node.client().await;
    release(node, &client, &[]).await?;
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get(VAULT_CRDS[0])
        .await?;
    let service = crd
        .spec
        .conversion
        .and_then(|c| c.webhook)
        .and_then(|w| w.client_config)
        .and_then(|c| c.service)
        .context("the Vault CRD's conversion webhook names no Service")?;
    ensure!(
        service.namespace == NAMESPACE,
        "the conversion webhook's Service is in {}, not {NAMESPACE}",
        service.namespace
    );

    let ns = testenv::create_namespace(&client, "conversion").await?;
    // Stored at v1alpha1: the create itself goes through the webhook.
    create_vault(&vaults(&client, &ns, VAULT_NEW), VAULT_NEW, "beta").await?;
    let alpha = vaults(&client, &ns, VAULT_OLD);
    let read = alpha.get("beta").await?;
    ensure!(
        read.data["spec"]["path"] == "secret" && read.data["spec"]["version"] == "v1",
        "the v1alpha1 view of a v1beta1 Vault: {}",
        read.data["spec"]
    );
    Ok(())
}

/// The Vault CRDs' names and the version each release of the chart stores Vault at.
const VAULT_CRDS: [&str; 2] = [
    "vaults.providers.external-secrets.io",
    "vaults.cluster.providers.external-secrets.io",
];
const VAULT_OLD: &str = "v1alpha1";
const VAULT_NEW: &str = "v1beta1";

/// README, "Upgrading one provider", step 2: `helm upgrade` to a release whose Vault CRDs store
/// at v1beta1 (this chart with only that changed: no release of ours stores there yet), then
/// `external-secrets migrate storage --kind Vault` from the host as a user runs it. Nothing is
/// lost: etcd holds every Vault at v1beta1 afterwards, each reads the same at both versions, the
/// synced Secret keeps its bytes and its ExternalSecret stays Ready throughout the upgrade.
async fn upgrade_storage(env: Arc<Env>) -> Result<()> {
    let node = env.node()?;
    let client = node.client().await;
    release(node, &client, &[]).await?;
    let ns = sync_one(&client, "upgrade").await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let before = secrets.get("demo-credentials").await?;
    let vaults = |version| vaults(&client, &ns, version);
    for i in 0..3 {
        create_vault(&vaults(VAULT_OLD), VAULT_OLD, &format!("old-{i}")).await?;
    }
    ensure!(
        vault_versions_in_etcd(node, &ns).await?
            == BTreeMap::from([
                ("old-0".to_owned(), VAULT_OLD.to_owned()),
                ("old-1".to_owned(), VAULT_OLD.to_owned()),
                ("old-2".to_owned(), VAULT_OLD.to_owned()),
            ]),
        "the Vaults are not stored at {VAULT_OLD} before the upgrade"
    );
    let specs_before = vault_specs(&vaults(VAULT_NEW)).await?;

    let chart = chart_storing_vault_at(VAULT_NEW)?;
    let chart = chart.path().join("external-secrets");
    let chart = chart.to_str().context("a chart path that is not UTF-8")?;
    upgrade_keeping_ready(node, &client, &ns, chart).await?;
    for crd in VAULT_CRDS {
        ensure!(
            stored_versions(&client, crd).await? == [VAULT_OLD, VAULT_NEW],
            "after the upgrade {crd} lists storedVersions {:?}",
            stored_versions(&client, crd).await?
        );
    }
    // Written after the upgrade: stored at the new version straight away.
    create_vault(&vaults(VAULT_NEW), VAULT_NEW, "new").await?;

    let migrated = std::process::Command::new(env!("CARGO_BIN_EXE_external-secrets"))
        .args(["migrate", "storage", "--kind", "Vault", "--kubeconfig"])
        .arg(node.kubeconfig_path())
        .output()
        .context("running external-secrets migrate storage")?;
    ensure!(
        migrated.status.success(),
        "migrate storage --kind Vault failed: {}\n{}",
        String::from_utf8_lossy(&migrated.stderr),
        String::from_utf8_lossy(&migrated.stdout)
    );

    for crd in VAULT_CRDS {
        let versions = stored_versions(&client, crd).await?;
        ensure!(
            versions == [VAULT_NEW],
            "after migrate storage {crd} lists storedVersions {versions:?}"
        );
    }
    let stored = vault_versions_in_etcd(node, &ns).await?;
    ensure!(
        stored.len() == 4 && stored.values().all(|v| v == VAULT_NEW),
        "etcd holds the Vaults at {stored:?}, not all at {VAULT_NEW}"
    );
    let mut specs_after = vault_specs(&vaults(VAULT_NEW)).await?;
    specs_after.remove("new");
    ensure!(
        specs_after == specs_before,
        "a Vault's v1beta1 spec changed in the migration:\nbefore {specs_before:?}\nafter {specs_after:?}"
    );
    let alpha = vault_specs(&vaults(VAULT_OLD)).await?;
    ensure!(
        alpha.len() == 4
            && alpha
                .values()
                .all(|s| s["path"] == "secret" && s["version"] == "v1"),
        "the Vaults read at {VAULT_OLD} after the migration: {alpha:?}"
    );

    let after = secrets.get("demo-credentials").await?;
    ensure!(
        after.data == before.data,
        "the synced Secret's data changed across the upgrade"
    );
    ensure!(
        external_secret_ready(&client, &ns, "demo").await?,
        "{ns}/demo is not Ready after the migration"
    );
    Ok(())
}

/// `helm upgrade` of the release to `chart` while a watcher reads `ns`'s ExternalSecret every
/// half second: an error if it was ever not Ready, or the new operator Pod is not.
async fn upgrade_keeping_ready(node: &Node, client: &Client, ns: &str, chart: &str) -> Result<()> {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (client, ns, stop) = (client.clone(), ns.to_owned(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                ensure!(
                    external_secret_ready(&client, &ns, "demo").await?,
                    "{ns}/demo turned not Ready during the upgrade"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            anyhow::Ok(())
        })
    };
    let upgraded = testenv::helm(
        Some(&node.kubeconfig_path()),
        &[
            "upgrade",
            RELEASE,
            chart,
            "--namespace",
            NAMESPACE,
            "--reset-values",
            "--set",
            "image.pullPolicy=Never",
            "--wait",
        ],
    );
    let pods = match upgraded {
        Ok(_) => wait_pods(node, client, FULLNAME, SELECTOR, 1)
            .await
            .map(drop),
        Err(e) => Err(e),
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    watcher.await??;
    pods
}

/// A copy of this chart whose Vault CRDs store at `version`, as a later release's would.
fn chart_storing_vault_at(version: &str) -> Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix("external-secrets-chart-")
        .tempdir()?;
    let copied = std::process::Command::new("cp")
        .args(["-r"])
        .arg(repo("charts/external-secrets"))
        .arg(dir.path())
        .status()?;
    ensure!(copied.success(), "cp -r of the chart: {copied}");
    for crd in VAULT_CRDS {
        let path = dir
            .path()
            .join(format!("external-secrets/templates/crds/{crd}.yaml"));
        let yaml = std::fs::read_to_string(&path)?;
        // Each version's block ends with `served:` then `storage:`; the one named `version`
        // gets `true`, the other `false`.
        let mut current = String::new();
        let mut flipped = 0;
        let lines: Vec<String> = yaml
            .lines()
            .map(|line| {
                if let Some(name) = line.strip_prefix("    name: ") {
                    current = name.to_owned();
                }
                if line.starts_with("    storage: ") {
                    flipped += 1;
                    format!("    storage: {}", current == version)
                } else {
                    line.to_owned()
                }
            })
            .collect();
        ensure!(flipped == 2, "{} storage lines in {crd}, not two", flipped);
        std::fs::write(&path, lines.join("\n") + "\n")?;
    }
    Ok(dir)
}

async fn create_vault(vaults: &Api<DynamicObject>, version: &str, name: &str) -> Result<()> {
    let spec = if version == VAULT_OLD {
        serde_json::json!({"server": "https://vault.example:8200", "path": "secret", "version": "v1",
            "auth": {"tokenSecretRef": {"name": "vault-token", "key": "token"}}})
    } else {
        serde_json::json!({"server": "https://vault.example:8200",
            "kv": {"mountPath": "secret", "version": 1},
            "auth": {"tokenSecretRef": {"name": "vault-token", "key": "token"}}})
    };
    let object: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": format!("providers.external-secrets.io/{version}"),
        "kind": "Vault",
        "metadata": {"name": name},
        "spec": spec,
    }))?;
    // Through the webhook when `version` is not the stored one; its CA may still be on its way
    // into the CRD right after an install.
    testenv::wait_for(
        SYNC_TIMEOUT,
        &format!("Vault {name} created at {version}"),
        || async {
            match vaults.create(&PostParams::default(), &object).await {
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                other => other.map(drop),
            }
        },
    )
    .await
}

/// The Vaults of `ns` read and written at `version`.
fn vaults(client: &Client, ns: &str, version: &str) -> Api<DynamicObject> {
    let resource =
        api::providers::vault::DESCRIPTOR.resource(api::provider_kinds::Scope::Namespaced, version);
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// Every Vault's spec read through `vaults`, by name.
async fn vault_specs(vaults: &Api<DynamicObject>) -> Result<BTreeMap<String, serde_json::Value>> {
    Ok(vaults
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|v| (v.metadata.name.unwrap_or_default(), v.data["spec"].clone()))
        .collect())
}

/// The apiVersion etcd holds each Vault of `ns` at, by name: what the API never shows.
async fn vault_versions_in_etcd(node: &Node, ns: &str) -> Result<BTreeMap<String, String>> {
    let names: Vec<String> = vaults(&node.client().await, ns, VAULT_OLD)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|v| v.metadata.name)
        .collect();
    names
        .into_iter()
        .map(|name| {
            let key = format!("/registry/providers.external-secrets.io/vaults/{ns}/{name}");
            let raw = node
                .control_plane()
                .etcd_get(&key)?
                .with_context(|| format!("etcd has no {key}"))?;
            let stored: serde_json::Value = serde_json::from_slice(&raw)?;
            let version = stored["apiVersion"]
                .as_str()
                .and_then(|v| v.rsplit('/').next())
                .unwrap_or_default()
                .to_owned();
            Ok((name, version))
        })
        .collect()
}

async fn stored_versions(client: &Client, crd: &str) -> Result<Vec<String>> {
    Ok(Api::<CustomResourceDefinition>::all(client.clone())
        .get(crd)
        .await?
        .status
        .and_then(|s| s.stored_versions)
        .unwrap_or_default())
}

/// Whether `ns`'s ExternalSecret `name` has `Ready=True`.
async fn external_secret_ready(client: &Client, ns: &str, name: &str) -> Result<bool> {
    let es = Api::<api::external_secret::ExternalSecret>::namespaced(client.clone(), ns)
        .get(name)
        .await?;
    Ok(es.status.is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == api::conditions::ConditionStatus::True)
    }))
}

/// How many ExternalSecrets the chart's default requests and limits must hold.
const MANY: usize = 1000;
/// 1000 first syncs, each a write of a Secret and of a status, on 2 shared cores.
const MANY_TIMEOUT: Duration = Duration::from_secs(600);

/// The chart's default resources (no value set) with 1000 ExternalSecrets of one Fake store:
/// every Secret synced and every ExternalSecret Ready, while the operator's container is never
/// OOM-killed nor restarted. Prints its peak memory: the most the kubelet's `/stats/summary`
/// showed while they synced, and the cgroup's own high-water mark.
async fn limits(env: Arc<Env>) -> Result<()> {
    let node = env.node()?;
    let client = node.client().await;
    let pod = one_operator(node, &client).await?;
    let name = pod.metadata.name.clone().unwrap_or_default();
    let limit = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers[0].resources.as_ref())
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("memory"))
        .map(|q| q.0.clone())
        .context("the chart's default gives the operator no memory limit")?;

    let ns = testenv::create_namespace(&client, "limits").await?;
    let sampler = PeakSampler::start(&client, node.name(), &name);
    let started = Instant::now();
    let synced = match create_many(&client, &ns, MANY, "1m").await {
        Ok(()) => wait_many(&client, &ns, MANY, MANY_TIMEOUT)
            .await
            .map(|()| started.elapsed()),
        Err(e) => Err(e),
    };
    if synced.is_ok() {
        // A refresh of every one of them, at the 1m interval, under the same watch.
        tokio::time::sleep(Duration::from_secs(70)).await;
    }
    let sampled = sampler.stop().await;
    // Their refreshes would load the next journeys on 2 shared cores.
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await?;
    let synced = synced?;

    let now = Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .get(&name)
        .await?;
    let status = now
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .context("the operator Pod has no container status")?;
    ensure!(
        status.restart_count == 0
            && status
                .last_state
                .as_ref()
                .is_none_or(|s| s.terminated.is_none()),
        "the operator's container restarted with {MANY} ExternalSecrets: {}",
        pod_state(&now)
    );
    let container_id = status
        .container_id
        .as_deref()
        .and_then(|id| id.split_once("://"))
        .map(|(_, id)| id)
        .context("the operator's container has no ID")?;
    let cgroup = node.container_cgroup(
        "memory",
        now.status
            .as_ref()
            .and_then(|s| s.qos_class.as_deref())
            .unwrap_or_default(),
        now.metadata.uid.as_deref().unwrap_or_default(),
        container_id,
    )?;
    let read = |file: &str| -> Result<u64> {
        let path = cgroup.join(file);
        Ok(std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?
            .trim()
            .parse()?)
    };
    let (high_water, failcnt) = (read("memory.max_usage_in_bytes")?, read("memory.failcnt")?);
    let oom_kills = std::fs::read_to_string(cgroup.join("memory.oom_control"))?
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .map_or(Ok(0), |n| n.trim().parse::<u64>())?;
    ensure!(
        oom_kills == 0,
        "the kernel OOM-killed {oom_kills} of the operator's processes"
    );
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    eprintln!(
        "limits: {MANY} ExternalSecrets synced in {:.0}s under the chart's default limit {limit}; \
         the operator's peak memory: {:.1} MiB working set in the kubelet's /stats/summary \
         ({} samples), {:.1} MiB the cgroup's high-water mark (memory.max_usage_in_bytes, page \
         cache included), {failcnt} times at the limit",
        synced.as_secs_f64(),
        mib(sampled.peak_working_set),
        sampled.samples,
        mib(high_water),
    );
    ensure!(
        sampled.samples > 0,
        "the kubelet's /stats/summary never listed the operator's container"
    );
    Ok(())
}

/// A Fake SecretStore `fake` in `ns` holding `k<i>` = `value-<i>`, and `n` ExternalSecrets
/// `es-<i>` of it refreshed every `refresh`, each into Secret `secret-<i>`.
pub(crate) async fn create_many(client: &Client, ns: &str, n: usize, refresh: &str) -> Result<()> {
    let data: Vec<serde_json::Value> = (0..n)
        .map(|i| serde_json::json!({"key": format!("k{i}"), "value": format!("value-{i}")}))
        .collect();
    testenv::apply_yaml_in(
        client,
        ns,
        &serde_json::to_string(&serde_json::json!({
            "apiVersion": "external-secrets.io/v1",
            "kind": "SecretStore",
            "metadata": {"name": "fake"},
            "spec": {"provider": {"fake": {"data": data}}},
        }))?,
        true,
    )
    .await?;
    let external_secrets: Api<api::external_secret::ExternalSecret> =
        Api::namespaced(client.clone(), ns);
    futures::stream::iter(0..n)
        .map(|i| {
            let external_secrets = external_secrets.clone();
            async move {
                let es = serde_json::from_value(serde_json::json!({
                    "apiVersion": "external-secrets.io/v1",
                    "kind": "ExternalSecret",
                    "metadata": {"name": format!("es-{i}")},
                    "spec": {
                        "refreshInterval": refresh,
                        "secretStoreRef": {"kind": "SecretStore", "name": "fake"},
                        "target": {"name": format!("secret-{i}")},
                        "data": [{"secretKey": "value", "remoteRef": {"key": format!("k{i}")}}],
                    },
                }))?;
                external_secrets.create(&PostParams::default(), &es).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(8)
        .try_collect::<()>()
        .await
}

/// Waits until each of the `n` Secrets of [`create_many`] holds its store's bytes and every
/// ExternalSecret is Ready.
pub(crate) async fn wait_many(client: &Client, ns: &str, n: usize, within: Duration) -> Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let external_secrets: Api<api::external_secret::ExternalSecret> =
        Api::namespaced(client.clone(), ns);
    testenv::wait_for(within, &format!("{n} Secrets synced in {ns}"), || async {
        let right = secrets
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|s| {
                let name = s.metadata.name.as_deref().unwrap_or_default();
                let want = name
                    .strip_prefix("secret-")
                    .map(|i| format!("value-{i}").into_bytes());
                let got = s
                    .data
                    .as_ref()
                    .and_then(|d| d.get("value"))
                    .map(|v| v.0.clone());
                want.is_some() && got == want
            })
            .count();
        ensure!(
            right == n,
            "{right} of {n} Secrets hold their store's bytes"
        );
        let ready = external_secrets
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|es| {
                es.status.as_ref().is_some_and(|s| {
                    s.conditions.iter().any(|c| {
                        c.type_ == "Ready" && c.status == api::conditions::ConditionStatus::True
                    })
                })
            })
            .count();
        ensure!(ready == n, "{ready} of {n} ExternalSecrets Ready");
        anyhow::Ok(())
    })
    .await
}

/// What the kubelet's summary said of one container while it ran.
struct Sampled {
    peak_working_set: u64,
    samples: usize,
}

/// Reads the kubelet's `/stats/summary` (through the API server's node proxy, as `kubectl get
/// --raw` does) every second until stopped, keeping the operator container's largest working set.
struct PeakSampler {
    stop: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<Sampled>,
}

impl PeakSampler {
    fn start(client: &Client, node: &str, pod: &str) -> Self {
        let stop = Arc::new(tokio::sync::Notify::new());
        let (client, uri, pod, stopped) = (
            client.clone(),
            format!("/api/v1/nodes/{node}/proxy/stats/summary"),
            pod.to_owned(),
            stop.clone(),
        );
        let task = tokio::spawn(async move {
            let mut sampled = Sampled {
                peak_working_set: 0,
                samples: 0,
            };
            loop {
                let request = http::Request::get(&uri).body(Vec::new());
                let summary = match request {
                    Ok(request) => client.request::<serde_json::Value>(request).await.ok(),
                    Err(_) => None,
                };
                let working_set = summary.as_ref().and_then(|s| {
                    s["pods"]
                        .as_array()?
                        .iter()
                        .find(|p| p["podRef"]["name"] == pod.as_str())?["containers"]
                        .as_array()?
                        .first()?["memory"]["workingSetBytes"]
                        .as_u64()
                });
                if let Some(bytes) = working_set {
                    sampled.samples += 1;
                    sampled.peak_working_set = sampled.peak_working_set.max(bytes);
                }
                tokio::select! {
                    () = stopped.notified() => return sampled,
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        });
        Self { stop, task }
    }

    async fn stop(self) -> Sampled {
        self.stop.notify_one();
        self.task.await.unwrap_or(Sampled {
            peak_working_set: 0,
            samples: 0,
        })
    }
}

/// The Vault provider in the operator's process, reading the suite's real Vault server on the
/// host through the node's bridge address (`Env::vault`): a KV v2 secret's bytes in the synced
/// Secret, and the store Ready.
async fn vault(env: Arc<Env>) -> Result<()> {
    let node = env.node()?;
    let vault = env.vault()?;
    let server = vault
        .address_on()
        .context("Vault has no listener on the node's address")?;
    let client = node.client().await;
    release(node, &client, &[]).await?;

    let mount = "node-kv";
    // One Vault a test process, and this journey runs once in it.
    vault.mount_kv(mount, testenv::KvVersion::V2).await?;
    let written = serde_json::json!({"user": "app", "password": "from the host's Vault"});
    vault.write_kv_v2(mount, "app/db", &written).await?;

    let ns = testenv::create_namespace(&client, "vault").await?;
    let yaml = format!(
        "apiVersion: v1
kind: Secret
metadata: {{name: vault-token}}
stringData: {{token: {token}}}
---
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {{name: vault}}
spec:
  provider:
    vault:
      server: {server}
      path: {mount}
      version: v2
      auth: {{tokenSecretRef: {{name: vault-token, key: token}}}}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {{name: db}}
spec:
  refreshInterval: 1h
  secretStoreRef: {{kind: SecretStore, name: vault}}
  target: {{name: db}}
  dataFrom: [{{extract: {{key: app/db}}}}]
",
        token = vault.root_token()
    );
    testenv::apply_yaml_in(&client, &ns, &yaml, true).await?;

    let held = vault
        .read_kv_v2(mount, "app/db", None)
        .await?
        .context("Vault holds no app/db")?;
    let want: BTreeMap<String, Vec<u8>> = held
        .data
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.as_str().unwrap_or_default().as_bytes().to_vec(),
            )
        })
        .collect();
    wait_secret(&client, &ns, "db", &want, SYNC_TIMEOUT)
        .await
        .with_context(|| format!("syncing from the host's Vault at {server}"))?;
    ensure!(
        external_secret_ready(&client, &ns, "db").await?,
        "{ns}/db synced but is not Ready"
    );
    eprintln!("vault: {ns}/db synced from the host's Vault at {server}");
    Ok(())
}

async fn uninstall(env: Arc<Env>) -> Result<()> {
    let node = env.node()?;
    let client = node.client().await;
    release(node, &client, &[]).await?;
    let ns = sync_one(&client, "uninstall").await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let before = secrets.get("demo-credentials").await?;

    testenv::helm(
        Some(&node.kubeconfig_path()),
        &["uninstall", RELEASE, "--namespace", NAMESPACE, "--wait"],
    )?;
    wait_no_operator_pods(&client).await?;
    let after = secrets
        .get_opt("demo-credentials")
        .await?
        .context("helm uninstall deleted the synced Secret")?;
    ensure!(
        after.data == before.data,
        "helm uninstall changed the synced Secret's data"
    );
    Ok(())
}

/// `helm upgrade --install` of the chart with `sets`, from the images imported into the node
/// (nothing can be pulled); the operator Pods once every one of them is Ready.
pub(crate) async fn release(node: &Node, client: &Client, sets: &[&str]) -> Result<Vec<Pod>> {
    let chart = repo("charts/external-secrets");
    let mut args = vec![
        "upgrade",
        "--install",
        RELEASE,
        chart.to_str().context("a chart path that is not UTF-8")?,
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--reset-values",
        "--set",
        "image.pullPolicy=Never",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    testenv::helm(Some(&node.kubeconfig_path()), &args)?;
    let replicas = sets
        .iter()
        .find_map(|s| s.strip_prefix("replicaCount="))
        .map_or(Ok(1), str::parse)?;
    wait_pods(node, client, FULLNAME, SELECTOR, replicas).await
}

/// The release with the chart's defaults: its one operator Pod, once Ready.
async fn one_operator(node: &Node, client: &Client) -> Result<Pod> {
    let pods = release(node, client, &[]).await?;
    match <[Pod; 1]>::try_from(pods) {
        Ok([pod]) => Ok(pod),
        Err(pods) => bail!("{} operator Pods Ready, not one", pods.len()),
    }
}

/// Waits until the Deployment `name`'s rollout is done (its old Pods gone) and exactly
/// `replicas` of its Pods (`selector`) run, all Ready; on time-out, says why each is not.
pub(crate) async fn wait_pods(
    node: &Node,
    client: &Client,
    name: &str,
    selector: &str,
    replicas: usize,
) -> Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let deadline = Instant::now() + POD_TIMEOUT;
    loop {
        let deployment = deployments.get(name).await?;
        let status = deployment.status.unwrap_or_default();
        let want = i32::try_from(replicas)?;
        let rolled_out = status.observed_generation == deployment.metadata.generation
            && status.updated_replicas == Some(want)
            && status.replicas == Some(want)
            && status.ready_replicas == Some(want);
        let listed = pods.list(&ListParams::default().labels(selector)).await?;
        let live: Vec<Pod> = listed
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let ready = live.iter().filter(|p| pod_ready(p)).count();
        if rolled_out && live.len() == replicas && ready == replicas {
            return Ok(live);
        }
        if Instant::now() > deadline {
            let states: Vec<String> = live.iter().map(pod_state).collect();
            bail!(
                "{ready} of {replicas} Pods of {name} Ready after {POD_TIMEOUT:?} ({} live):\n{}\nnode folder (kubelet.log, containerd.log, pod-logs): {}",
                live.len(),
                states.join("\n"),
                node.dir().display()
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn wait_no_operator_pods(client: &Client) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    testenv::wait_for(POD_TIMEOUT, "the operator Pods to go", || async {
        let left = pods.list(&ListParams::default().labels(SELECTOR)).await?;
        ensure!(left.items.is_empty(), "{} Pods left", left.items.len());
        anyhow::Ok(())
    })
    .await
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// A Pod's phase and its containers' states, for a failure message.
fn pod_state(pod: &Pod) -> String {
    let status = pod.status.clone().unwrap_or_default();
    let containers: Vec<String> = status
        .container_statuses
        .unwrap_or_default()
        .iter()
        .map(|c| {
            format!(
                "{} ready={} restarts={} {:?}",
                c.name, c.ready, c.restart_count, c.state
            )
        })
        .collect();
    format!(
        "{}: {} {:?} {}",
        pod.metadata.name.clone().unwrap_or_default(),
        status.phase.unwrap_or_default(),
        status.conditions.unwrap_or_default(),
        containers.join("; ")
    )
}

pub(crate) fn pod_ip(pod: &Pod) -> Result<String> {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .context("a Ready Pod without an IP")
}

/// The Pod among `pods` holding the Lease: its identity is `<host name>-<pid>`, the host name
/// of a Pod its name.
async fn holder(leases: &Api<Lease>, name: &str, pods: &[Pod]) -> Result<String> {
    let lease = testenv::wait_for(SYNC_TIMEOUT, &format!("Lease {NAMESPACE}/{name}"), || {
        leases.get(name)
    })
    .await?;
    let identity = lease
        .spec
        .and_then(|s| s.holder_identity)
        .context("the Lease names no holder")?;
    let names: Vec<String> = pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    names
        .iter()
        .find(|pod| identity.starts_with(&format!("{pod}-")))
        .cloned()
        .with_context(|| {
            format!("the Lease's holder {identity} is none of the operator Pods {names:?}")
        })
}

/// A Fake store and an ExternalSecret in a new namespace; the namespace once its Secret holds
/// the store's bytes.
pub(crate) async fn sync_one(client: &Client, prefix: &str) -> Result<String> {
    let ns = testenv::create_namespace(client, prefix).await?;
    apply_demo(client, &ns).await?;
    wait_demo_secret(client, &ns, SYNC_TIMEOUT).await?;
    Ok(ns)
}

async fn apply_demo(client: &Client, ns: &str) -> Result<()> {
    let yaml = std::fs::read_to_string(repo("examples/fake-quickstart.yaml"))?
        .replace("namespace: examples", &format!("namespace: {ns}"));
    testenv::apply_yaml_in(client, ns, &yaml, true).await?;
    Ok(())
}

async fn wait_demo_secret(client: &Client, ns: &str, within: Duration) -> Result<()> {
    let want: BTreeMap<String, Vec<u8>> = [
        ("username", "demo-user"),
        ("password", "s3cr3t"),
        ("host", "db.example.com"),
        ("port", "5432"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
    .collect();
    wait_secret(client, ns, "demo-credentials", &want, within).await
}

/// Waits until Secret `ns/name` holds exactly `want`.
async fn wait_secret(
    client: &Client,
    ns: &str,
    name: &str,
    want: &BTreeMap<String, Vec<u8>>,
    within: Duration,
) -> Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    testenv::wait_for(
        within,
        &format!("Secret {ns}/{name} with its store's data"),
        || async {
            let got: BTreeMap<String, Vec<u8>> = secrets
                .get(name)
                .await?
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            // Keys only: the values are secrets, even in a test's message.
            ensure!(
                &got == want,
                "keys {:?}, or a value differs",
                got.keys().collect::<Vec<_>>()
            );
            anyhow::Ok(())
        },
    )
    .await
}

/// One plain HTTP/1.0 GET from the host: the node routes Pod addresses over its bridge.
pub(crate) fn http_get(addr: SocketAddr, path: &str) -> Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .with_context(|| format!("GET http://{addr}{path}: no HTTP body"))?;
    ensure!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "GET http://{addr}{path}: {head}"
    );
    Ok(body.to_owned())
}
