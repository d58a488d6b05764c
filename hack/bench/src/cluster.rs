//! `--cluster-namespaces N`: one ClusterExternalSecret over N labelled namespaces, reading from
//! one Fake ClusterSecretStore. The time until every namespace holds its synced Secret, then what
//! the operator asks of the API server in `--steady` seconds of steady state, from its own
//! `external_secrets_api_requests_total` (the goal: nothing beyond the provider refreshes, which
//! `refreshInterval: 1h` keeps out of a short window).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};

use crate::{Args, CREATE_PARALLELISM, POLL, alive, scrape};

const LABEL: &str = "bench.external-secrets.io/cluster";
const TARGET: &str = "bench-cluster";

pub async fn run(cp: &testenv::ControlPlane, client: &Client, args: &Args) -> Result<()> {
    let count = args.cluster_namespaces;
    let (operator, metrics_port) = crate::operator_warmed_up(cp, client, args).await?;
    let watched = [operator];
    eprintln!("bench: one ClusterExternalSecret over {count} namespaces");
    testenv::apply_yaml(
        client,
        "apiVersion: external-secrets.io/v1\nkind: ClusterSecretStore\nmetadata: {name: bench}\nspec:\n  provider:\n    fake:\n      data: [{key: user, value: alice}]\n",
        true,
    )
    .await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = (0..count).map(|i| format!("bench-{i:04}")).collect();
    futures::stream::iter(names.iter().map(|name| {
        let api = namespaces.clone();
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([(LABEL.to_owned(), "yes".to_owned())])),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        async move {
            api.create(&PostParams::default(), &ns)
                .await
                .with_context(|| {
                    format!(
                        "creating namespace {}",
                        ns.metadata.name.unwrap_or_default()
                    )
                })
        }
    }))
    .buffer_unordered(CREATE_PARALLELISM)
    .try_for_each(|_| async { Ok(()) })
    .await?;

    let started = Instant::now();
    testenv::apply_yaml(
        client,
        &format!(
            "apiVersion: external-secrets.io/v1\nkind: ClusterExternalSecret\nmetadata: {{name: bench}}\nspec:\n  namespaceSelectors: [{{matchLabels: {{{LABEL}: \"yes\"}}}}]\n  refreshTime: 1m\n  externalSecretSpec:\n    refreshInterval: 1h\n    secretStoreRef: {{name: bench, kind: ClusterSecretStore}}\n    target: {{name: {TARGET}}}\n    data: [{{secretKey: user, remoteRef: {{key: user}}}}]\n"
        ),
        true,
    )
    .await?;
    let secrets: Api<Secret> = Api::all(client.clone());
    let deadline = started + Duration::from_secs(args.timeout);
    let synced = loop {
        alive(&watched)?;
        let present = secrets
            .list_metadata(&ListParams::default().fields(&format!("metadata.name={TARGET}")))
            .await?
            .items
            .len();
        if present == count {
            break started.elapsed();
        }
        if Instant::now() >= deadline {
            bail!(
                "after {}s only {present} of {count} namespaces had their Secret",
                args.timeout
            );
        }
        tokio::time::sleep(POLL).await;
    };
    eprintln!(
        "bench: every namespace synced after {:.1}s",
        synced.as_secs_f64()
    );

    // Steady state: what the operator asks for while nothing changes.
    tokio::time::sleep(Duration::from_secs(args.settle)).await;
    let before = requests(&scrape(metrics_port).await?);
    tokio::time::sleep(Duration::from_secs(args.steady)).await;
    alive(&watched)?;
    let after = requests(&scrape(metrics_port).await?);
    let mut delta: BTreeMap<String, f64> = BTreeMap::new();
    for (series, value) in &after {
        let d = value - before.get(series).copied().unwrap_or_default();
        if d > 0.0 {
            delta.insert(series.clone(), d);
        }
    }
    println!(
        "\nOne ClusterExternalSecret (refreshTime 1m, its ExternalSecrets refreshInterval 1h) over \
         {count} namespaces, one Fake ClusterSecretStore; requests counted by the operator \
         (`external_secrets_api_requests_total`) over {} s of steady state, starting {} s after \
         the last Secret appeared.\n",
        args.steady, args.settle
    );
    println!("| namespaces | time to every Secret | requests in steady state | of which writes |");
    println!("|---:|---:|---:|---:|");
    // Counts, so whole numbers (a sum of no f64 is -0).
    let total = delta.values().sum::<f64>() as u64;
    let writes = delta
        .iter()
        .filter(|(s, _)| {
            ["create", "patch", "update", "delete"]
                .iter()
                .any(|v| s.contains(&format!("verb=\"{v}\"")))
        })
        .map(|(_, v)| v)
        .sum::<f64>() as u64;
    println!(
        "| {count} | {:.1} s | {total} | {writes} |",
        synced.as_secs_f64()
    );
    if !delta.is_empty() {
        println!("\n| request (verb, resource) | count |\n|---|---:|");
        for (series, n) in &delta {
            println!("| {series} | {n} |");
        }
    }
    Ok(())
}

/// `external_secrets_api_requests_total` by its label set.
fn requests(metrics: &str) -> BTreeMap<String, f64> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("external_secrets_api_requests_total"))
        .filter_map(|rest| {
            let (labels, value) = rest.rsplit_once(' ')?;
            Some((labels.to_owned(), value.parse().ok()?))
        })
        .collect()
}
