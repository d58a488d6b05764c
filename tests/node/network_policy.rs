//! The chart's NetworkPolicy around a provider server ("only the controller's Pods may call
//! it"), enforced by the node's kube-router and seen as a user sees it: a Pod in another
//! namespace dials the server's Service and is refused on the gRPC port, while the metrics port
//! of the same Service answers it and the operator's store through the server still syncs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, ListParams, LogParams, PostParams};
use kube::{Api, Client};

use crate::Env;
use crate::journeys::{
    FAKE_SERVER, FAKE_SERVER_SELECTOR, NAMESPACE, PROVIDER_METRICS_PORT, SELECTOR, release,
    served_a_call, sync_one, wait_pods,
};

/// The server's gRPC port, the one the policy admits the controller's Pods to.
const GRPC_PORT: u16 = 8080;
/// A dialling Pod's own deadline for its connection and its call.
const DIAL_DEADLINE: &str = "5s";
/// A Pod from an imported image, run to its end.
const POD_TIMEOUT: Duration = Duration::from_secs(120);
/// How long kube-router may take to apply the policy to a new server Pod: the outsider dials
/// again until then.
const ENFORCED_WITHIN: Duration = Duration::from_secs(60);

/// What a dial of the server from outside its namespace met.
enum Dial {
    /// The connection was refused, reset at once or timed out: the packets never reached the
    /// server.
    Blocked(String),
    /// Anything else: the server (or its port) answered.
    Reached(String),
}

pub async fn enforced(env: Arc<Env>) -> Result<()> {
    let node = env.node()?;
    let client = node.client().await;
    release(node, &client, &["providers.fake.outOfProcess.enabled=true"]).await?;
    wait_pods(node, &client, FAKE_SERVER, FAKE_SERVER_SELECTOR, 1).await?;
    // The operator's image holds the binary: `provider conformance` dials like a client would.
    let image = Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default().labels(SELECTOR))
        .await?
        .items
        .into_iter()
        .find_map(|p| p.spec?.containers.into_iter().next()?.image)
        .context("no operator Pod naming an image")?;

    let outsider = testenv::create_namespace(&client, "outsider").await?;
    let service = format!("{FAKE_SERVER}.{NAMESPACE}.svc");
    // The policy admits anyone to the metrics port: reaching it shows that DNS, the Service and
    // the route from the outsider's namespace work, so that a refusal on the gRPC port is the
    // policy's.
    match dial(
        &client,
        &outsider,
        &image,
        "metrics",
        &service,
        PROVIDER_METRICS_PORT,
    )
    .await?
    {
        Dial::Reached(said) => eprintln!(
            "network_policy: {service}:{PROVIDER_METRICS_PORT} reached from {outsider}: {said}"
        ),
        Dial::Blocked(said) => bail!(
            "a Pod in {outsider} could not reach the metrics port {service}:{PROVIDER_METRICS_PORT}, which the policy admits from anywhere: {said}"
        ),
    }
    let deadline = Instant::now() + ENFORCED_WITHIN;
    let mut attempt = 0;
    loop {
        attempt += 1;
        match dial(
            &client,
            &outsider,
            &image,
            &format!("grpc-{attempt}"),
            &service,
            GRPC_PORT,
        )
        .await?
        {
            Dial::Blocked(said) => {
                eprintln!(
                    "network_policy: {service}:{GRPC_PORT} blocked for a Pod in {outsider} (attempt {attempt}): {said}"
                );
                break;
            }
            Dial::Reached(said) if Instant::now() > deadline => bail!(
                "a Pod in {outsider} still reaches the provider server's gRPC port {service}:{GRPC_PORT} {ENFORCED_WITHIN:?} after the release ({attempt} attempts): the chart's NetworkPolicy is not enforced; it met: {said}"
            ),
            Dial::Reached(_) => tokio::time::sleep(Duration::from_secs(5)).await,
        }
    }

    // The controller's Pod still calls the server: a new ExternalSecret syncs through it.
    let ns = sync_one(&client, "network-policy").await?;
    eprintln!("network_policy: {ns}/demo synced through the provider server");
    let servers = wait_pods(node, &client, FAKE_SERVER, FAKE_SERVER_SELECTOR, 1).await?;
    served_a_call(&servers[0], &ns)?;
    Api::<Namespace>::all(client.clone())
        .delete(&outsider, &DeleteParams::default())
        .await?;
    Ok(())
}

/// Runs a Pod in `ns` that dials `host:port` with `external-secrets provider conformance`
/// (plaintext gRPC, its first call the health check) and tells what it met, from the Pod's
/// log read through the kubelet.
async fn dial(
    client: &Client,
    ns: &str,
    image: &str,
    name: &str,
    host: &str,
    port: u16,
) -> Result<Dial> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("dial-{name}")},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "dial",
                "image": image,
                "imagePullPolicy": "Never",
                "args": [
                    "provider", "conformance",
                    "--address", format!("{host}:{port}"),
                    "--plaintext",
                    "--provider-ref", format!("providers.external-secrets.io/v1alpha1/Fake/{ns}/none"),
                    "--deadline", DIAL_DEADLINE,
                ],
            }],
        },
    }))?;
    let created = pods.create(&PostParams::default(), &pod).await?;
    let pod_name = created
        .metadata
        .name
        .context("a created Pod without a name")?;
    let phase = testenv::wait_for(POD_TIMEOUT, &format!("Pod {ns}/{pod_name} to end"), || {
        let pods = pods.clone();
        let pod_name = pod_name.clone();
        async move {
            let phase = pods
                .get(&pod_name)
                .await?
                .status
                .and_then(|s| s.phase)
                .unwrap_or_default();
            ensure!(phase == "Succeeded" || phase == "Failed", "phase {phase:?}");
            anyhow::Ok(phase)
        }
    })
    .await?;
    let log = pods
        .logs(&pod_name, &LogParams::default())
        .await
        .with_context(|| format!("reading Pod {ns}/{pod_name}'s log"))?;
    pods.delete(&pod_name, &DeleteParams::default().grace_period(0))
        .await?;
    let health = log
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("health"))
        .unwrap_or(log.trim())
        .trim()
        .to_owned();
    let said = format!("{phase}: {health}");
    let lower = health.to_lowercase();
    let blocked = lower.contains("cannot reach")
        && ["connection refused", "timed out", "deadline"]
            .iter()
            .any(|w| lower.contains(w));
    Ok(if blocked {
        Dial::Blocked(said)
    } else {
        Dial::Reached(said)
    })
}
