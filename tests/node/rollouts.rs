//! Issue 39's journeys of the out-of-process transport on Pods: the Fake provider server at three
//! replicas behind its headless Service sharing the calls and losing one Pod, under a steady
//! refresh of 300 ExternalSecrets that must not notice: no failed sync, no `Ready=False`, no
//! Secret's bytes changed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::serde::de::DeserializeOwned;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use testenv::Node;

use crate::Env;
use crate::journeys::{
    FAKE_SERVER, FAKE_SERVER_SELECTOR, FULLNAME, METRICS_PORT, NAMESPACE, PROVIDER_METRICS_PORT,
    SELECTOR, create_many, http_get, pod_ip, release, wait_many, wait_pods,
};

const REPLICAS: usize = 3;
const MANY: usize = 300;
/// Short enough that every ExternalSecret is refreshed several times while a Pod goes.
const REFRESH: &str = "20s";
/// A full refresh round at [`REFRESH`], with room for a queue on 2 shared cores.
const ROUND: Duration = Duration::from_secs(30);
/// The operator re-resolves a provider class's addresses this often (README, "Scaling and
/// rollouts").
const RESOLVE_PERIOD: Duration = Duration::from_secs(30);
const SYNC_TIMEOUT: Duration = Duration::from_secs(300);

/// Every replica carries at least a fifth of the calls; then one server Pod deleted while the
/// ExternalSecrets refresh goes unnoticed.
pub async fn replicas(env: Arc<Env>) -> Result<()> {
    let node = env.node()?;
    let client = node.client().await;
    let steady = Steady::start(node, &client, "replicas").await?;
    let servers = wait_pods(node, &client, FAKE_SERVER, FAKE_SERVER_SELECTOR, REPLICAS).await?;

    // Counted from after a re-resolution: an operator that dialled one address before the
    // release grew to three may take until then to dial the others.
    tokio::time::sleep(RESOLVE_PERIOD + Duration::from_secs(5)).await;
    let before = handled(&servers)?;
    tokio::time::sleep(2 * ROUND).await;
    let after = handled(&servers)?;
    let calls: Vec<(String, f64)> = before
        .iter()
        .zip(&after)
        .map(|((pod, b), (_, a))| (pod.clone(), a - b))
        .collect();
    let total: f64 = calls.iter().map(|(_, n)| n).sum();
    let shares = calls
        .iter()
        .map(|(pod, n)| format!("{pod} {n} ({:.0} %)", 100.0 * n / total.max(1.0)))
        .collect::<Vec<_>>()
        .join(", ");
    eprintln!("replicas: {total} calls in {:?}: {shares}", 2 * ROUND);
    ensure!(total > 0.0, "no server counted a call in {:?}", 2 * ROUND);
    ensure!(
        calls.iter().all(|(_, n)| *n >= 0.2 * total),
        "a replica carried less than 20 % of the calls: {shares}"
    );

    let gone = servers[0]
        .metadata
        .name
        .clone()
        .context("a Pod without a name")?;
    // As `kubectl delete pod` does: with the Pod's grace period, so the server drains.
    Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .delete(&gone, &DeleteParams::default())
        .await?;
    wait_pods(node, &client, FAKE_SERVER, FAKE_SERVER_SELECTOR, REPLICAS).await?;
    tokio::time::sleep(ROUND).await;
    steady
        .undisturbed(&format!("server Pod {gone} deleted"))
        .await
}

/// A rolling update of the provider server's Deployment, then of the operator's, while the
/// ExternalSecrets refresh: each as `kubectl rollout restart` makes it, waited for until the old
/// Pods are gone (a server's drain included), then a refresh round more.
pub async fn rolling_updates(env: Arc<Env>) -> Result<()> {
    let node = env.node()?;
    let client = node.client().await;
    let mut steady = Steady::start(node, &client, "rollouts").await?;

    rollout_restart(node, &client, FAKE_SERVER, FAKE_SERVER_SELECTOR, REPLICAS).await?;
    tokio::time::sleep(ROUND).await;
    steady.check_failed("the provider server's rolling update")?;

    let operators = rollout_restart(node, &client, FULLNAME, SELECTOR, 1).await?;
    // The new operator Pod counts its failed syncs from 0; the old one's are checked above and
    // its last moments are in the condition watch.
    steady.operator = SocketAddr::new(
        pod_ip(operators.first().context("no operator Pod")?)?.parse()?,
        METRICS_PORT,
    );
    steady.failed = 0.0;
    tokio::time::sleep(ROUND).await;
    steady
        .undisturbed("rolling updates of the provider server and of the operator")
        .await
}

/// As `kubectl rollout restart deployment/<name>`: a new Pod template, so the Deployment replaces
/// its Pods by its update strategy; returns the new Pods once every old one is gone.
async fn rollout_restart(
    node: &Node,
    client: &Client,
    name: &str,
    selector: &str,
    replicas: usize,
) -> Result<Vec<Pod>> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let patch = serde_json::json!({"spec": {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": jiff::Timestamp::now().to_string(),
    }}}}});
    deployments
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let pods = wait_pods(node, client, name, selector, replicas).await?;
    let all: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    testenv::wait_for(
        Duration::from_secs(120),
        &format!("the old Pods of {name} to go"),
        || async {
            let left = all
                .list(&ListParams::default().labels(selector))
                .await?
                .items;
            let old: Vec<_> = left
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_some())
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            ensure!(old.is_empty(), "still terminating: {old:?}");
            anyhow::Ok(())
        },
    )
    .await?;
    eprintln!(
        "rollouts: {name} replaced by {:?}",
        pods.iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect::<Vec<_>>()
    );
    Ok(pods)
}

/// 300 ExternalSecrets of a Fake store served by the provider server's replicas, synced and
/// refreshing, with what they must keep: their Secrets' bytes, their Ready conditions (watched
/// from here on), and the operator's count of failed syncs.
struct Steady {
    client: Client,
    ns: String,
    operator: SocketAddr,
    secrets: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    failed: f64,
    watch: ConditionWatch,
}

impl Steady {
    async fn start(node: &Node, client: &Client, prefix: &str) -> Result<Self> {
        let replicas = format!("providers.fake.outOfProcess.replicaCount={REPLICAS}");
        let operators = release(
            node,
            client,
            &["providers.fake.outOfProcess.enabled=true", &replicas],
        )
        .await?;
        let operator = SocketAddr::new(
            pod_ip(operators.first().context("no operator Pod")?)?.parse()?,
            METRICS_PORT,
        );
        let ns = testenv::create_namespace(client, prefix).await?;
        create_many(client, &ns, MANY, REFRESH).await?;
        wait_many(client, &ns, MANY, SYNC_TIMEOUT).await?;
        let watch = ConditionWatch::start(client, &ns);
        Ok(Self {
            client: client.clone(),
            secrets: secret_data(client, &ns).await?,
            failed: failed_syncs(operator, &ns)?,
            ns,
            operator,
            watch,
        })
    }

    /// No failed sync counted by the operator Pod watched since [`Steady::start`], though `what`
    /// happened.
    fn check_failed(&self, what: &str) -> Result<()> {
        let failed = failed_syncs(self.operator, &self.ns)? - self.failed;
        ensure!(
            failed == 0.0,
            "{what}: the operator counted {failed} failed syncs in {}",
            self.ns
        );
        Ok(())
    }

    /// No failed sync, no `Ready` other than `True`, no Secret's bytes changed since
    /// [`Steady::start`], though `what` happened.
    async fn undisturbed(self, what: &str) -> Result<()> {
        let not_ready = self.watch.stop().await?;
        let failed = failed_syncs(self.operator, &self.ns)? - self.failed;
        let changed: Vec<String> = secret_data(&self.client, &self.ns)
            .await?
            .into_iter()
            .filter(|(name, data)| self.secrets.get(name) != Some(data))
            .map(|(name, _)| name)
            .collect();
        eprintln!(
            "{what}: {failed} failed syncs, {} observations of Ready not True, {} Secrets changed",
            not_ready.len(),
            changed.len()
        );
        // Their refreshes would load the next journey's on 2 shared cores.
        Api::<Namespace>::all(self.client.clone())
            .delete(&self.ns, &DeleteParams::default())
            .await?;
        ensure!(
            failed == 0.0,
            "{what}: the operator counted {failed} failed syncs in {}",
            self.ns
        );
        ensure!(
            not_ready.is_empty(),
            "{what}: Ready not True {} times:\n{}",
            not_ready.len(),
            not_ready.join("\n")
        );
        ensure!(
            changed.is_empty(),
            "{what}: {} Secrets' data changed: {changed:?}",
            changed.len()
        );
        Ok(())
    }
}

/// Every server's `grpc_server_handled_total`, summed over methods and codes, read from its Pod's
/// address.
fn handled(servers: &[Pod]) -> Result<Vec<(String, f64)>> {
    servers
        .iter()
        .map(|pod| {
            let ip = pod_ip(pod)?;
            let text = http_get(
                SocketAddr::new(ip.parse()?, PROVIDER_METRICS_PORT),
                "/metrics",
            )?;
            Ok((
                pod.metadata.name.clone().unwrap_or_default(),
                sum(&text, "grpc_server_handled_total", ""),
            ))
        })
        .collect()
}

/// The operator's `externalsecret_sync_calls_error` of the ExternalSecrets in `ns`.
fn failed_syncs(operator: SocketAddr, ns: &str) -> Result<f64> {
    let text = http_get(operator, "/metrics").context("scraping the operator's metrics")?;
    Ok(sum(
        &text,
        "externalsecret_sync_calls_error",
        &format!("namespace=\"{ns}\""),
    ))
}

/// The sum of `metric`'s samples whose labels contain `label`.
fn sum(text: &str, metric: &str, label: &str) -> f64 {
    text.lines()
        .filter_map(|l| l.strip_prefix(metric))
        .filter(|rest| rest.starts_with('{') || rest.starts_with(' '))
        .filter(|rest| rest.contains(label))
        .filter_map(|rest| rest.rsplit_once(' ')?.1.parse::<f64>().ok())
        .fold(0.0, |sum, v| sum + v)
}

async fn secret_data(
    client: &Client,
    ns: &str,
) -> Result<BTreeMap<String, BTreeMap<String, Vec<u8>>>> {
    Ok(Api::<Secret>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|s| {
            let data = s.data?.into_iter().map(|(k, v)| (k, v.0)).collect();
            Some((s.metadata.name?, data))
        })
        .collect())
}

/// Watches the ExternalSecrets and SecretStores of a namespace, keeping every state in which an
/// object's `Ready` condition was not `True` (a poll could miss a short one).
struct ConditionWatch {
    stop: Arc<tokio::sync::Notify>,
    tasks: Vec<tokio::task::JoinHandle<Result<Vec<String>>>>,
}

impl ConditionWatch {
    fn start(client: &Client, ns: &str) -> Self {
        let stop = Arc::new(tokio::sync::Notify::new());
        let tasks = vec![
            watch::<api::external_secret::ExternalSecret>(client, ns, &stop, |es| {
                es.status.as_ref().map(|s| s.conditions.clone())
            }),
            watch::<api::store::SecretStore>(client, ns, &stop, |store| {
                store.status.as_ref().map(|s| s.conditions.clone())
            }),
        ];
        Self { stop, tasks }
    }

    async fn stop(self) -> Result<Vec<String>> {
        self.stop.notify_waiters();
        let mut seen = Vec::new();
        for task in self.tasks {
            seen.extend(task.await??);
        }
        Ok(seen)
    }
}

fn watch<K>(
    client: &Client,
    ns: &str,
    stop: &Arc<tokio::sync::Notify>,
    conditions: fn(&K) -> Option<Vec<api::conditions::Condition>>,
) -> tokio::task::JoinHandle<Result<Vec<String>>>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + DeserializeOwned
        + Clone
        + std::fmt::Debug
        + Send
        + 'static,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let stop = stop.clone();
    tokio::spawn(async move {
        let mut seen = Vec::new();
        let stream = watcher(api, watcher::Config::default()).applied_objects();
        let mut stream = std::pin::pin!(stream);
        let stopped = stop.notified();
        let mut stopped = std::pin::pin!(stopped);
        loop {
            tokio::select! {
                () = &mut stopped => return Ok(seen),
                next = stream.next() => {
                    let object = next.context("the watch ended")??;
                    let ready = conditions(&object)
                        .unwrap_or_default()
                        .into_iter()
                        .find(|c| c.type_ == "Ready");
                    if let Some(c) = ready.filter(|c| c.status != api::conditions::ConditionStatus::True) {
                        seen.push(format!(
                            "{} {}: Ready={:?} {} {}",
                            K::kind(&()),
                            object.meta().name.clone().unwrap_or_default(),
                            c.status,
                            c.reason.unwrap_or_default(),
                            c.message.unwrap_or_default()
                        ));
                    }
                }
            }
        }
    })
}
