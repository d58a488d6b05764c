//! `--soak`: memory under churn. Waves create N ExternalSecrets with their stores in fresh
//! namespaces, wait until all are Ready, delete the namespaces and wait until they are gone, for
//! `--soak-minutes`; after each wave, and a settling pause, the operator's RSS and the number of
//! series on its /metrics. An operator that forgets nothing of deleted objects grows wave by
//! wave; one that prunes returns to where the first wave left it.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use api::external_secret::{ExternalSecret, ExternalSecretSpec};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};

use crate::{
    Args, CREATE_PARALLELISM, POLL, Watched, alive, count_ready, fake_store_yaml, rss_mib, scrape,
};

const WAVE_LABEL: &str = "bench.external-secrets.io/soak-wave";

struct Wave {
    ready: Duration,
    gone: Duration,
    rss_mib: f64,
    series: usize,
}

pub async fn run(cp: &testenv::ControlPlane, client: &Client, args: &Args) -> Result<()> {
    let count = args.counts[0];
    let namespaces = args.soak_namespaces.clamp(1, count);
    let (operator, metrics_port) = crate::operator_warmed_up(cp, client, args).await?;
    let pid = operator.pid;
    let watched = [operator];
    let baseline = (rss_mib(pid, "VmRSS")?, series(&scrape(metrics_port).await?));
    eprintln!(
        "bench: soak, {count} ExternalSecrets in {namespaces} namespaces a wave, for {} minutes",
        args.soak_minutes
    );
    let started = Instant::now();
    let mut waves: Vec<Wave> = Vec::new();
    while waves.is_empty() || started.elapsed() < Duration::from_secs(args.soak_minutes * 60) {
        let wave = waves.len();
        let wave_started = Instant::now();
        let created = create_wave(client, wave, count, namespaces).await?;
        wait_ready(client, wave, count, args.timeout, &watched).await?;
        let ready = wave_started.elapsed();
        let deleted = Instant::now();
        delete_wave(client, &created, args.timeout, &watched).await?;
        let gone = deleted.elapsed();
        tokio::time::sleep(Duration::from_secs(args.settle)).await;
        alive(&watched)?;
        let metrics = scrape(metrics_port).await?;
        // Kept with the control plane's folder (EXTERNAL_SECRETS_TESTENV_KEEP=1), to tell which
        // series stayed.
        std::fs::write(cp.dir().join(format!("soak-metrics-{wave}.txt")), &metrics)?;
        let w = Wave {
            ready,
            gone,
            rss_mib: rss_mib(pid, "VmRSS")?,
            series: series(&metrics),
        };
        eprintln!(
            "bench: wave {wave}: Ready in {:.1}s, gone in {:.1}s, RSS {:.1} MiB, {} series",
            w.ready.as_secs_f64(),
            w.gone.as_secs_f64(),
            w.rss_mib,
            w.series
        );
        waves.push(w);
    }
    print(&waves, baseline, count, namespaces, args);
    Ok(())
}

/// Series on /metrics: every sample line.
fn series(metrics: &str) -> usize {
    metrics
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count()
}

async fn create_wave(
    client: &Client,
    wave: usize,
    count: usize,
    namespaces: usize,
) -> Result<Vec<String>> {
    let spec: ExternalSecretSpec = serde_json::from_value(serde_json::json!({
        "refreshInterval": "1h",
        "secretStoreRef": {"name": crate::STORE},
        "data": [{"secretKey": "user", "remoteRef": {"key": "user"}}],
        "dataFrom": [{"extract": {"key": "config"}}],
    }))?;
    let mut names = Vec::with_capacity(namespaces);
    let mut labels = std::collections::BTreeMap::new();
    labels.insert(WAVE_LABEL.to_owned(), wave.to_string());
    for n in 0..namespaces {
        let ns = testenv::create_namespace(client, &format!("soak-{wave}")).await?;
        testenv::apply_yaml_in(client, &ns, &fake_store_yaml(), true).await?;
        // The wave's share, the first namespaces taking the remainder.
        let here = count / namespaces + usize::from(n < count % namespaces);
        let api: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
        futures::stream::iter((0..here).map(|i| {
            let api = api.clone();
            let mut es = ExternalSecret::new(&format!("es-{i:05}"), spec.clone());
            es.metadata.labels = Some(labels.clone());
            async move {
                api.create(&PostParams::default(), &es)
                    .await
                    .context("creating an ExternalSecret")
            }
        }))
        .buffer_unordered(CREATE_PARALLELISM)
        .try_for_each(|_| async { Ok(()) })
        .await?;
        names.push(ns);
    }
    Ok(names)
}

async fn wait_ready(
    client: &Client,
    wave: usize,
    count: usize,
    timeout: u64,
    watched: &[Watched],
) -> Result<()> {
    let all: Api<ExternalSecret> = Api::all(client.clone());
    let selector = ListParams::default().labels(&format!("{WAVE_LABEL}={wave}"));
    let deadline = Instant::now() + Duration::from_secs(timeout);
    loop {
        alive(watched)?;
        let ready = count_ready(&all, &selector).await?;
        if ready == count {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "wave {wave}: after {timeout}s only {ready} of {count} ExternalSecrets were Ready=True"
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Deletes the namespaces and waits until the API server has none of them left: their
/// ExternalSecrets released by the operator (finalizers), Secrets and stores with them.
async fn delete_wave(
    client: &Client,
    namespaces: &[String],
    timeout: u64,
    watched: &[Watched],
) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    for ns in namespaces {
        api.delete(ns, &DeleteParams::default()).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(timeout);
    loop {
        alive(watched)?;
        let mut left = 0;
        for ns in namespaces {
            left += usize::from(api.get_opt(ns).await?.is_some());
        }
        if left == 0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("after {timeout}s {left} namespaces of the wave still exist");
        }
        tokio::time::sleep(POLL).await;
    }
}

fn print(waves: &[Wave], baseline: (f64, usize), count: usize, namespaces: usize, args: &Args) {
    println!(
        "\nSoak: waves of {count} ExternalSecrets in {namespaces} fresh namespaces (a Fake store each), \
         created, Ready, then the namespaces deleted, for {} minutes; RSS and /metrics series \
         {} s after each wave was gone. Before the first wave: {:.1} MiB, {} series.\n",
        args.soak_minutes, args.settle, baseline.0, baseline.1
    );
    println!(
        "| wave | time to all Ready | time to all gone | operator RSS (MiB) | vs wave 0 | metric series | vs wave 0 |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let first = &waves[0];
    for (i, w) in waves.iter().enumerate() {
        println!(
            "| {i} | {:.1} s | {:.1} s | {:.1} | {:+.1} % | {} | {:+.1} % |",
            w.ready.as_secs_f64(),
            w.gone.as_secs_f64(),
            w.rss_mib,
            (w.rss_mib / first.rss_mib - 1.0) * 100.0,
            w.series,
            (w.series as f64 / first.series as f64 - 1.0) * 100.0,
        );
    }
}
