//! `--scale`: the first count's ExternalSecrets (the figure is 100k) on one Fake store,
//! the operator without its client rate limiter, beside a bare client on a fresh control plane
//! of its own that creates the same ExternalSecrets and makes, for each, the two writes any
//! operator must make (the Secret and the status). Reported: the time ratio, the operator's
//! peak RSS, its API requests per ExternalSecret, how long an ExternalSecret created while the
//! backlog drains waits to be Ready, what a restart with everything in sync asks of the API
//! server in its first minute, and the CPU the API server spent per ExternalSecret in each run:
//! on a small machine it is what both runs wait for.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use api::conditions::{ConditionStatus, READY};
use api::external_secret::{ExternalSecret, ExternalSecretSpec};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use prometheus_client::metrics::counter::Counter;
use testenv::ControlPlane;

use crate::{
    Args, CREATE_PARALLELISM, Watched, alive, free_port, rss_mib, scrape, spawn_operator_at,
};

/// How often an ExternalSecret is created in the probe namespace while the backlog drains.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// What a restart is given before its requests are counted, as the issue measures it.
const RESTART_WINDOW: Duration = Duration::from_secs(60);

pub fn run(tokio: &tokio::runtime::Runtime, args: &Args) -> Result<()> {
    let count = args.counts[0];
    let rounds = args.scale_rounds.max(1);
    let mut runs = Vec::new();
    for round in 1..=rounds {
        eprintln!(
            "bench: scale, round {round} of {rounds}, {count} ExternalSecrets, a bare client first"
        );
        let bare = {
            // Started outside the runtime: start() blocks, and dropping it joins the supervisor.
            let cp = ControlPlane::start()?;
            tokio.block_on(async { bare(&cp, &cp.client().await, args, count).await })?
        };
        eprintln!(
            "bench: the bare client took {:.1}s; now the operator",
            bare.took.as_secs_f64()
        );
        let cp = ControlPlane::start()?;
        let restart = round == rounds;
        let result =
            tokio.block_on(async { operator(&cp, &cp.client().await, args, count, restart).await });
        let log = cp.dir().join("operator.log");
        crate::report_log("operator", &log);
        if result.is_err() {
            crate::print_tail(&log);
        }
        runs.push((result?, bare));
    }
    print(&runs, count, args);
    Ok(())
}

/// Waits until kube-controller-manager's garbage collector watches ExternalSecrets, the only
/// cluster-wide watch of them before the operator starts. It finds a new CRD at its next
/// discovery, up to half a minute after the install: the bare client, which started at once,
/// ran without it, and the operator's run, which waits for the operator's start, with it (its
/// graph and its watch cost the API server some 20k metadata events of ExternalSecrets).
async fn collector_follows_externalsecrets(client: &Client) -> Result<()> {
    let labels = "component=\"apiserver\",group=\"external-secrets.io\",resource=\"externalsecrets\",\
                  scope=\"cluster\",subresource=\"\",verb=\"WATCH\",version=\"v1\"";
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let metrics = crate::apiserver_metrics(client).await?;
        if crate::sample(&metrics, "apiserver_longrunning_requests", labels).unwrap_or(0.0) >= 1.0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("the garbage collector did not watch ExternalSecrets within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What the operator watches while it syncs: the ExternalSecrets whole, the managed Secrets'
/// metadata. Drained and dropped.
fn operator_watches(client: &Client, ns: &str) {
    let externalsecrets: Api<ExternalSecret> = Api::namespaced(client.clone(), ns);
    let secrets: Api<kube::core::PartialObjectMeta<Secret>> = Api::namespaced(client.clone(), ns);
    let managed = format!("{}=true", api::external_secret::LABEL_MANAGED);
    tokio::spawn(
        watcher(externalsecrets, watcher::Config::default())
            .default_backoff()
            .for_each(|_| async {}),
    );
    tokio::spawn(
        watcher(secrets, watcher::Config::default().labels(&managed))
            .default_backoff()
            .for_each(|_| async {}),
    );
}

fn spec() -> Result<ExternalSecretSpec> {
    Ok(serde_json::from_value(serde_json::json!({
        "refreshInterval": "1h",
        "secretStoreRef": {"name": crate::STORE},
        "data": [{"secretKey": "user", "remoteRef": {"key": "user"}}],
    }))?)
}

fn names(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("es-{i:06}")).collect()
}

struct BareRun {
    took: Duration,
    /// CPU seconds of the API server from the first create until all were seen Ready.
    apiserver_cpu: f64,
}

/// CPU seconds the API server of `cp` has used so far.
fn apiserver_cpu(cp: &ControlPlane) -> Result<f64> {
    crate::cpu_seconds(crate::apiserver_pid(cp)?)
}

/// Creates each ExternalSecret, then its Secret, then patches its status Ready, as fast as the
/// same parallelism of creates allows: the floor of any operator. Done when the bench's watch
/// has seen them all Ready, as in the operator's run: the bench's own watch weighs on the API
/// server, and was counted against the operator alone until session 15.
async fn bare(cp: &ControlPlane, client: &Client, args: &Args, count: usize) -> Result<BareRun> {
    testenv::install_crds(client, &args.crds).await?;
    collector_follows_externalsecrets(client).await?;
    let ns = testenv::create_namespace(client, "bench").await?;
    let spec = spec()?;
    let externalsecrets: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let ready = ready_times(client, &ns);
    let as_operator = args.bare_as_operator;
    // The operator's own recorder, with its in-flight count: kube's `Recorder` scans every event
    // of the last six minutes at each publish, which cost this client CPU that the operator's
    // run does not spend.
    let dropped = Counter::<u64>::default();
    let recorder = Arc::new(controllers::events::Recorder::start(
        client.clone(),
        "bench",
        None,
        CREATE_PARALLELISM,
        dropped.clone(),
    ));
    if as_operator {
        operator_watches(client, &ns);
    }
    let cpu_before = apiserver_cpu(cp)?;
    let started = Instant::now();
    let create = |name: String| {
        let externalsecrets = externalsecrets.clone();
        let es = ExternalSecret::new(&name, spec.clone());
        async move {
            externalsecrets
                .create(&PostParams::default(), &es)
                .await
                .with_context(|| format!("creating ExternalSecret {name}"))
        }
    };
    // As the operator's run has them: every create first, then the writes.
    let created: Option<HashMap<String, ExternalSecret>> = match args.bare_creates_first {
        true => Some(
            futures::stream::iter(names(count).into_iter().map(create))
                .buffer_unordered(CREATE_PARALLELISM)
                .map_ok(|es| (es.name_any(), es))
                .try_collect()
                .await?,
        ),
        false => None,
    };
    futures::stream::iter(names(count).into_iter().map(|name| {
        let (externalsecrets, secrets) = (externalsecrets.clone(), secrets.clone());
        let precreated = created.as_ref().and_then(|c| c.get(&name).cloned());
        let creating = create(name.clone());
        let apply = args.bare_apply || as_operator;
        let recorder = recorder.clone();
        async move {
            let es = match precreated {
                Some(es) => es,
                None => creating.await?,
            };
            // Owned by its ExternalSecret, as any operator's must be for the Secret to go with
            // it (ESO's default `creationPolicy: Owner`): the garbage collector follows every
            // owner reference, and that work was missing from the floor until session 20. As the
            // operator, also labelled managed and its data's hash annotated.
            let mut metadata = ObjectMeta {
                name: Some(name.clone()),
                owner_references: Some(es.controller_owner_ref(&()).into_iter().collect()),
                ..ObjectMeta::default()
            };
            if as_operator {
                metadata.labels = Some(BTreeMap::from([
                    (api::external_secret::LABEL_MANAGED.into(), "true".into()),
                    (
                        api::external_secret::LABEL_CREATED_BY.into(),
                        "0".repeat(56),
                    ),
                ]));
                metadata.annotations = Some(BTreeMap::from([(
                    api::external_secret::ANNOTATION_DATA_HASH.into(),
                    "0".repeat(56),
                )]));
            }
            let secret = Secret {
                metadata,
                string_data: Some(BTreeMap::from([("user".into(), "alice".into())])),
                ..Secret::default()
            };
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let mut status = serde_json::json!({"status": {
                "refreshTime": now,
                "conditions": [{"type": READY, "status": "True", "reason": "SecretSynced",
                                "message": "secret synced", "lastTransitionTime": now}],
            }});
            if apply {
                let params = PatchParams::apply("bench").force();
                secrets
                    .patch(&name, &params, &Patch::Apply(&secret))
                    .await?;
                status["apiVersion"] = ExternalSecret::api_version(&()).into();
                status["kind"] = ExternalSecret::kind(&()).into();
                externalsecrets
                    .patch_status(&name, &params, &Patch::Apply(&status))
                    .await?;
                if as_operator {
                    recorder.record(
                        &es.object_ref(&()),
                        EventType::Normal,
                        "Created",
                        "Secret created".into(),
                    );
                }
                Ok(es)
            } else {
                secrets.create(&PostParams::default(), &secret).await?;
                externalsecrets
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await
            }
            .with_context(|| format!("the bare client's writes for {name}"))
        }
    }))
    .buffer_unordered(CREATE_PARALLELISM)
    .try_for_each(|_| async { Ok(()) })
    .await?;
    let deadline = started + Duration::from_secs(args.timeout);
    while ready.lock().expect("ready times poisoned").len() < count {
        if Instant::now() >= deadline {
            bail!(
                "the bare client's ExternalSecrets not all seen Ready within {}s",
                args.timeout
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A floor that left events out would cost less than the operator's requests.
    ensure!(
        dropped.get() == 0,
        "the bare client dropped {} events behind its writes",
        dropped.get()
    );
    Ok(BareRun {
        took: last_ready(&ready, started),
        apiserver_cpu: apiserver_cpu(cp)? - cpu_before,
    })
}

struct OperatorRun {
    all_ready: Duration,
    /// CPU seconds of the API server and of the operator from the first create until all were
    /// Ready.
    apiserver_cpu: f64,
    operator_cpu: f64,
    peak_rss_mib: f64,
    requests_per_es: f64,
    /// Seconds from create to Ready of the ExternalSecrets created while the backlog drained.
    probes: Vec<f64>,
    /// The operator's requests from the first create until all were Ready, by verb and
    /// resource.
    sync: BTreeMap<String, f64>,
    /// The restarted operator's requests in its first minute, by verb and resource, when it
    /// was restarted.
    restart: Option<BTreeMap<String, f64>>,
}

/// When each ExternalSecret of `ns` was first seen Ready=True, from a watch (a poll of 100k
/// objects would weigh on the API server more than the operator does).
fn ready_times(client: &Client, ns: &str) -> Arc<Mutex<HashMap<String, Instant>>> {
    let seen = Arc::new(Mutex::new(HashMap::new()));
    let api: Api<ExternalSecret> = Api::namespaced(client.clone(), ns);
    let record = seen.clone();
    tokio::spawn(
        watcher(api, watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .try_for_each(move |es| {
                let ready = es.status.as_ref().is_some_and(|s| {
                    api::conditions::find(&s.conditions, READY)
                        .is_some_and(|c| c.status == ConditionStatus::True)
                });
                if ready {
                    record
                        .lock()
                        .expect("ready times poisoned")
                        .entry(es.name_any())
                        .or_insert_with(Instant::now);
                }
                async { Ok(()) }
            }),
    );
    seen
}

/// From `started` to the last Ready the watch saw: the waiting loops poll, and their period
/// (a second in the operator's run, for its probes) is not the operator's time.
fn last_ready(ready: &Mutex<HashMap<String, Instant>>, started: Instant) -> Duration {
    let ready = ready.lock().expect("ready times poisoned");
    ready
        .values()
        .max()
        .map_or(Duration::ZERO, |last| last.duration_since(started))
}

async fn operator(
    cp: &ControlPlane,
    client: &Client,
    args: &Args,
    count: usize,
    restart_after: bool,
) -> Result<OperatorRun> {
    let mut args = args.clone();
    args.operator_args.push("--client-qps=0".into());
    testenv::install_crds(client, &args.crds).await?;
    collector_follows_externalsecrets(client).await?;
    let ns = testenv::create_namespace(client, "bench").await?;
    let probe_ns = testenv::create_namespace(client, "probe").await?;
    for namespace in [&ns, &probe_ns] {
        testenv::apply_yaml_in(client, namespace, &crate::fake_store_yaml(), true).await?;
    }
    let webhook_port = free_port()?;
    let (pid, metrics_port) = spawn_operator_at(cp, &args, webhook_port)?;
    let watched = [Watched {
        pid,
        name: "the operator",
    }];
    tokio::time::sleep(Duration::from_secs(args.warm_up)).await;
    alive(&watched)?;
    let requests_before = requests(&scrape(metrics_port).await?);

    let spec = spec()?;
    let ready = ready_times(client, &ns);
    let cpu_before = (apiserver_cpu(cp)?, crate::cpu_seconds(pid)?);
    let probes_ready = ready_times(client, &probe_ns);
    let externalsecrets: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let started = Instant::now();
    let creating = futures::stream::iter(names(count).into_iter().map(|name| {
        let api = externalsecrets.clone();
        let es = ExternalSecret::new(&name, spec.clone());
        async move {
            api.create(&PostParams::default(), &es)
                .await
                .with_context(|| format!("creating ExternalSecret {name}"))
        }
    }))
    .buffer_unordered(CREATE_PARALLELISM)
    .try_for_each(|_| async { Ok(()) });
    let probes: Api<ExternalSecret> = Api::namespaced(client.clone(), &probe_ns);
    let mut probe_created: Vec<(String, Instant)> = Vec::new();
    let deadline = started + Duration::from_secs(args.timeout);
    let waiting = async {
        let mut last_print = Instant::now();
        loop {
            alive(&watched)?;
            let done = ready.lock().expect("ready times poisoned").len();
            if done == count {
                return anyhow::Ok(last_ready(&ready, started));
            }
            if Instant::now() >= deadline {
                bail!(
                    "after {}s only {done} of {count} ExternalSecrets were Ready=True",
                    args.timeout
                );
            }
            let name = format!("probe-{:04}", probe_created.len());
            probes
                .create(
                    &PostParams::default(),
                    &ExternalSecret::new(&name, spec.clone()),
                )
                .await
                .with_context(|| format!("creating probe {name}"))?;
            probe_created.push((name, Instant::now()));
            if last_print.elapsed() >= Duration::from_secs(10) {
                // Where the peak comes: while the backlog drains, or at the end.
                eprintln!(
                    "bench: {:.0}s: {done} Ready, operator RSS {:.1} MiB",
                    started.elapsed().as_secs_f64(),
                    rss_mib(pid, "VmRSS").unwrap_or(f64::NAN)
                );
                last_print = Instant::now();
            }
            tokio::time::sleep(PROBE_EVERY).await;
        }
    };
    let ((), all_ready) = tokio::try_join!(creating, waiting)?;
    let (apiserver_cpu, operator_cpu) = (
        apiserver_cpu(cp)? - cpu_before.0,
        crate::cpu_seconds(pid)? - cpu_before.1,
    );
    let peak_rss_mib = rss_mib(pid, "VmHWM")?;
    let sync: BTreeMap<String, f64> = requests(&scrape(metrics_port).await?)
        .into_iter()
        .map(|(series, n)| {
            let before = requests_before.get(&series).copied().unwrap_or_default();
            (series, n - before)
        })
        .filter(|(_, n)| *n > 0.0)
        .collect();

    // The probes created last may still be on their way.
    let probe_deadline = Instant::now() + Duration::from_secs(30);
    let probes = loop {
        let seen = probes_ready.lock().expect("ready times poisoned").clone();
        if probe_created.iter().all(|(n, _)| seen.contains_key(n)) {
            break probe_created
                .iter()
                .map(|(n, created)| seen[n].duration_since(*created).as_secs_f64())
                .collect::<Vec<_>>();
        }
        if Instant::now() >= probe_deadline {
            bail!("probe ExternalSecrets still not Ready 30s after the backlog drained");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    let restart = match restart_after {
        true => Some(restart(cp, &args, pid, webhook_port).await?),
        false => None,
    };
    Ok(OperatorRun {
        all_ready,
        apiserver_cpu,
        operator_cpu,
        peak_rss_mib,
        requests_per_es: sync.values().sum::<f64>() / count as f64,
        probes,
        sync,
        restart,
    })
}

/// Stops the operator as Kubernetes would (SIGTERM), starts it again, and returns its own count
/// of API requests after a minute, by verb and resource.
async fn restart(
    cp: &ControlPlane,
    args: &Args,
    pid: u32,
    webhook_port: u16,
) -> Result<BTreeMap<String, f64>> {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()?;
    if !status.success() {
        bail!("kill -TERM {pid}: {status}");
    }
    let stopped = Instant::now();
    while alive(&[Watched {
        pid,
        name: "the operator",
    }])
    .is_ok()
    {
        if stopped.elapsed() > Duration::from_secs(30) {
            bail!("the operator did not stop within 30s of SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (pid, metrics_port) = spawn_operator_at(cp, args, webhook_port)?;
    tokio::time::sleep(RESTART_WINDOW).await;
    alive(&[Watched {
        pid,
        name: "the restarted operator",
    }])?;
    Ok(requests(&scrape(metrics_port).await?))
}

/// The operator's own `external_secrets_api_requests_total`, by its labels (verb, resource).
fn requests(metrics: &str) -> BTreeMap<String, f64> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("external_secrets_api_requests_total{"))
        .filter_map(|l| {
            let (labels, value) = l.rsplit_once(' ')?;
            Some((labels.trim_end_matches('}').to_owned(), value.parse().ok()?))
        })
        .filter(|(_, v): &(String, f64)| *v > 0.0)
        .collect()
}

fn print(runs: &[(OperatorRun, BareRun)], count: usize, args: &Args) {
    let ratio = |(run, bare): &(OperatorRun, BareRun)| {
        run.all_ready.as_secs_f64() / bare.took.as_secs_f64()
    };
    let per_es_ms = |seconds: f64| seconds * 1000.0 / count as f64;
    let rss_goal = 16.0 + 3.0 * count as f64 / 1024.0;
    println!(
        "\n{count} ExternalSecrets on one Fake store, the operator with --client-qps=0 and --concurrent {}; \
         the bare client creates each ExternalSecret, its Secret (owned by it) and a Ready status with {} in flight, \
         on a fresh control plane of its own. Probes: one ExternalSecret created every {}s in \
         another namespace while the backlog drained. One row per pair of runs.\n",
        args.concurrency,
        CREATE_PARALLELISM,
        PROBE_EVERY.as_secs()
    );
    println!(
        "| ExternalSecrets | bare client | operator, all Ready | ratio (goal ≤ 1.25) | operator peak RSS | goal (16 MiB + 3 KiB each) | API requests per ExternalSecret (bare: 2 besides the create) | probe to Ready p50 / p99 (goal p99 ≤ 2 s) | probes |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for pair @ (run, bare) in runs {
        let mut probes = run.probes.clone();
        probes.sort_by(f64::total_cmp);
        println!(
            "| {count} | {:.1} s | {:.1} s | {:.2} | {:.1} MiB | {rss_goal:.1} MiB | {:.2} | {:.2} s / {:.2} s | {} |",
            bare.took.as_secs_f64(),
            run.all_ready.as_secs_f64(),
            ratio(pair),
            run.peak_rss_mib,
            run.requests_per_es,
            crate::quantile(&probes, 0.5),
            crate::quantile(&probes, 0.99),
            probes.len(),
        );
    }
    if runs.len() > 1 {
        let mut ratios: Vec<f64> = runs.iter().map(ratio).collect();
        ratios.sort_by(f64::total_cmp);
        let mid = ratios.len() / 2;
        let median = match ratios.len() % 2 {
            1 => ratios[mid],
            _ => (ratios[mid - 1] + ratios[mid]) / 2.0,
        };
        println!(
            "\nMedian ratio of {} pairs: {median:.2} (from {:.2} to {:.2}).",
            runs.len(),
            ratios[0],
            ratios[ratios.len() - 1],
        );
    }
    println!(
        "\nCPU per ExternalSecret from the first create until the bench's watch saw all Ready, \
         in both runs. Watches are part of the API server's: the bench's own in both, the \
         operator's in its run.\n"
    );
    println!(
        "| API server, bare client | API server, operator | ratio | operator |\n|---:|---:|---:|---:|"
    );
    for (run, bare) in runs {
        println!(
            "| {:.2} ms | {:.2} ms | {:.2} | {:.2} ms |",
            per_es_ms(bare.apiserver_cpu),
            per_es_ms(run.apiserver_cpu),
            run.apiserver_cpu / bare.apiserver_cpu,
            per_es_ms(run.operator_cpu),
        );
    }
    let Some((run, _)) = runs.last() else {
        return;
    };
    println!("\nThe operator's requests during the (last) sync, per ExternalSecret:\n");
    println!("| request (verb, resource) | per ExternalSecret |\n|---|---:|");
    for (series, n) in &run.sync {
        println!("| {series} | {:.3} |", n / count as f64);
    }
    let Some(restart) = &run.restart else {
        return;
    };
    let is_write = |s: &str| {
        ["create", "patch", "update", "delete"]
            .iter()
            .any(|v| s.contains(&format!("verb=\"{v}\"")))
    };
    let total = |f: &dyn Fn(&str) -> bool| -> f64 {
        restart
            .iter()
            .filter(|(s, _)| f(s))
            .map(|(_, v)| v)
            // Not `sum`, whose empty sum of floats is -0, printed as such.
            .fold(0.0, |total, v| total + v)
    };
    println!(
        "\nA restart with all {count} in sync: the new operator's own requests in its first {} s \
         (goal: no writes, no per-object reads, one list per kind).\n",
        RESTART_WINDOW.as_secs()
    );
    println!("| writes | gets | lists | watches |\n|---:|---:|---:|---:|");
    println!(
        "| {} | {} | {} | {} |",
        total(&is_write),
        total(&|s: &str| s.contains("verb=\"get\"")),
        total(&|s: &str| s.contains("verb=\"list\"")),
        total(&|s: &str| s.contains("verb=\"watch\"")),
    );
    println!("\n| request (verb, resource) | count |\n|---|---:|");
    for (series, n) in restart {
        println!("| {series} | {n} |");
    }
}
