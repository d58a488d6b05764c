//! Times the operator binary the way a user runs it: its own process, talking to a real
//! kube-apiserver through a kubeconfig, syncing N ExternalSecrets from a Fake SecretStore or,
//! with `--store vault`, from a real Vault server through one AppRole SecretStore, and with
//! `--store gitlab`, from the GitLab stand-in through one token.
//! `hack/bench.sh` builds everything and runs this; see `hack/README.md` for results.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use api::conditions::{ConditionStatus, READY};
use api::external_secret::{ExternalSecret, ExternalSecretSpec};
use api::store::SecretStore;
use clap::{Parser, ValueEnum};
use futures::{StreamExt, TryStreamExt};
use gitlab_standin::{GitlabStandin, Role, Variable};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use testenv::{ControlPlane, KvVersion, VaultServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const STORE: &str = "bench";

const FAKE_STORE_YAML: &str = r#"
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata:
  name: bench
spec:
  provider:
    fake:
      data:
      - key: user
        value: alice
      - key: config
        value: '{"a":"1","b":"2"}'
"#;

/// Enough parallel creates to keep the apiserver busy without the bench itself becoming the
/// bottleneck being measured.
const CREATE_PARALLELISM: usize = 32;

const POLL: Duration = Duration::from_millis(500);

#[derive(Parser)]
#[command(
    name = "bench",
    about = "Times the operator syncing N ExternalSecrets against a fresh control plane per N"
)]
struct Args {
    /// The operator binary (target/release/external-secrets).
    #[arg(long)]
    operator: PathBuf,
    /// Numbers of ExternalSecrets, one fresh control plane each.
    #[arg(long, value_delimiter = ',', default_value = "500")]
    counts: Vec<usize>,
    /// The operator's --concurrent.
    #[arg(long, default_value_t = 8)]
    concurrency: u16,
    /// Seconds from the first create until every ExternalSecret must be Ready.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// Folder of the CRDs to install.
    #[arg(long, default_value = "crds")]
    crds: PathBuf,
    /// Another argument for the operator, e.g. --operator-arg=--client-qps=0 (repeatable).
    #[arg(long = "operator-arg", allow_hyphen_values = true)]
    operator_args: Vec<String>,
    /// Where the ExternalSecrets read from.
    #[arg(long, value_enum, default_value_t = Backend::Fake)]
    store: Backend,
    /// Every ExternalSecret renders a template: a few data keys, a sprig pipeline each.
    #[arg(long)]
    templated: bool,
    /// Instead of ExternalSecrets: N Vault objects, listed at their storage version (v1alpha1)
    /// and at v1beta1, which the API server converts through the operator's webhook.
    #[arg(long)]
    conversion: bool,
}

/// What `--templated` adds to each ExternalSecret: the fetched keys (`user`, `a`, `b` from both
/// stores) through typical ESO template pipelines.
fn template() -> serde_json::Value {
    serde_json::json!({"template": {"engineVersion": "v2", "data": {
        "dsn": "postgres://{{ .user | upper }}:{{ .a | b64enc }}@db:5432/app",
        "user": "{{ .user | trim | lower | quote }}",
        "pair": "{{ printf \"%s-%s\" .a .b | sha256sum | trunc 12 }}",
        "json": "{{ dict \"user\" .user \"b\" .b | toJson }}",
    }}})
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Backend {
    Fake,
    /// A Vault server built by hack/build-vault.sh, KV v2, one AppRole SecretStore.
    Vault,
    /// The GitLab stand-in (tests/gitlab-standin): one project's CI/CD variables.
    Gitlab,
}

/// The secret manager a run reads from, when it is not the in-process Fake.
enum Server {
    Vault(Box<VaultServer>),
    Gitlab(GitlabStandin),
}

/// What a run against a server adds to the table: Vault's logins and reads of the bench secret
/// from its audit log; every HTTP request the GitLab stand-in answered.
struct ServerCounts {
    logins: Option<usize>,
    requests: usize,
}

struct Run {
    count: usize,
    creates_done: Duration,
    all_ready: Duration,
    all_secrets: Duration,
    rss_before_mib: f64,
    peak_rss_mib: f64,
    rss_end_mib: f64,
    sync_calls: f64,
    server: Option<ServerCounts>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(
        args.operator.is_file(),
        "the operator binary {} does not exist; build it with cargo build --release -p external-secrets",
        args.operator.display()
    );
    ensure!(!args.counts.is_empty(), "--counts is empty");
    let runtime = tokio::runtime::Runtime::new()?;
    let mut runs = Vec::new();
    let mut kubernetes = String::new();
    for &count in &args.counts {
        // Started outside the runtime: start() blocks, and dropping it joins the supervisor.
        let cp = ControlPlane::start()?;
        let server = match args.store {
            Backend::Fake => None,
            Backend::Vault => Some(Server::Vault(Box::new(VaultServer::start()?))),
            Backend::Gitlab => Some(Server::Gitlab(GitlabStandin::start()?)),
        };
        if args.conversion {
            if runs.is_empty() && count == args.counts[0] {
                println!(
                    "| Vault objects | LIST at v1alpha1 (storage) | LIST at v1beta1 (converted) | ratio | conversions/s |"
                );
                println!("|---:|---:|---:|---:|---:|");
            }
            runtime.block_on(async {
                let client = cp.client().await;
                run_conversion(&cp, &client, &args, count).await
            })?;
            continue;
        }
        let result = runtime.block_on(async {
            let client = cp.client().await;
            kubernetes = client.apiserver_version().await?.git_version;
            run(&cp, &client, &args, count, server.as_ref()).await
        });
        let log = cp.dir().join("operator.log");
        report_operator_log(&log);
        match result {
            Ok(r) => runs.push(r),
            Err(e) => {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                eprintln!("bench: the end of {}:", log.display());
                for line in &lines[lines.len().saturating_sub(20)..] {
                    eprintln!("  {line}");
                }
                if std::env::var_os("EXTERNAL_SECRETS_TESTENV_KEEP").is_none() {
                    eprintln!(
                        "bench: set EXTERNAL_SECRETS_TESTENV_KEEP=1 to keep {}",
                        log.display()
                    );
                }
                return Err(e.context(format!("the run with {count} ExternalSecrets failed")));
            }
        }
    }
    if !args.conversion {
        print_table(&runs, &kubernetes, &args);
    }
    Ok(())
}

/// The store to read from, and the spec of every ExternalSecret.
async fn prepare(
    client: &Client,
    ns: &str,
    server: Option<&Server>,
) -> Result<(String, serde_json::Value)> {
    let vault = match server {
        Some(Server::Vault(vault)) => vault,
        Some(Server::Gitlab(gitlab)) => return prepare_gitlab(client, ns, gitlab).await,
        None => {
            let spec = serde_json::json!({
                "refreshInterval": "1h",
                "secretStoreRef": {"name": STORE},
                "data": [{"secretKey": "user", "remoteRef": {"key": "user"}}],
                "dataFrom": [{"extract": {"key": "config"}}],
            });
            return Ok((FAKE_STORE_YAML.to_owned(), spec));
        }
    };
    vault.mount_kv("secret", KvVersion::V2).await?;
    vault
        .write_kv_v2(
            "secret",
            "bench",
            &serde_json::json!({"user": "alice", "a": "1", "b": "2"}),
        )
        .await?;
    vault.enable_auth("approle", "approle").await?;
    vault.enable_file_audit().await?;
    let role_id =
        testenv::approle_reader(vault, client, ns, "bench", "secret/data/bench", "approle").await?;
    let store = format!(
        "apiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {{name: {STORE}}}\nspec:\n  provider:\n    vault:\n      server: {}\n      path: secret\n      auth:\n        appRole: {{roleId: {role_id}, secretRef: {{name: approle, key: secret-id}}}}\n",
        vault.address()
    );
    // The same shape as the Fake run: one property and one whole map, from one secret.
    let spec = serde_json::json!({
        "refreshInterval": "1h",
        "secretStoreRef": {"name": STORE},
        "data": [{"secretKey": "user", "remoteRef": {"key": "bench", "property": "user"}}],
        "dataFrom": [{"extract": {"key": "bench"}}],
    });
    Ok((store, spec))
}

/// One project with the same data as the other stores, and a token Secret to read it.
async fn prepare_gitlab(
    client: &Client,
    ns: &str,
    gitlab: &GitlabStandin,
) -> Result<(String, serde_json::Value)> {
    const TOKEN: &str = "glpat-bench";
    gitlab.add_group("bench")?;
    gitlab.add_project("bench/app")?;
    gitlab.add_user("bench", TOKEN)?;
    gitlab.grant("bench", "bench/app", Role::Maintainer)?;
    gitlab.add_project_variable("bench/app", Variable::new("USER", "alice"))?;
    gitlab.add_project_variable("bench/app", Variable::new("CONFIG", r#"{"a":"1","b":"2"}"#))?;
    testenv::apply_yaml_in(
        client,
        ns,
        &format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: gitlab-token}}\nstringData: {{token: {TOKEN}}}\n"),
        true,
    )
    .await?;
    let store = format!(
        "apiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {{name: {STORE}}}\nspec:\n  provider:\n    gitlab:\n      url: {}\n      projectID: bench/app\n      auth:\n        SecretRef:\n          accessToken: {{name: gitlab-token, key: token}}\n",
        gitlab.url()
    );
    let spec = serde_json::json!({
        "refreshInterval": "1h",
        "secretStoreRef": {"name": STORE},
        "data": [{"secretKey": "user", "remoteRef": {"key": "USER"}}],
        "dataFrom": [{"extract": {"key": "CONFIG"}}],
    });
    Ok((store, spec))
}

async fn run(
    cp: &ControlPlane,
    client: &Client,
    args: &Args,
    count: usize,
    server: Option<&Server>,
) -> Result<Run> {
    eprintln!("bench: {count} ExternalSecrets");
    testenv::install_crds(client, &args.crds).await?;
    let ns = testenv::create_namespace(client, "bench").await?;

    let (pid, metrics_port) = spawn_operator(cp, args)?;

    let (store_yaml, mut spec) = prepare(client, &ns, server).await?;

    if args.templated {
        spec["target"] = template();
    }
    testenv::apply_yaml_in(client, &ns, &store_yaml, true).await?;
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), &ns);
    // Not testenv::wait_for: that would take a dead operator for "not yet" and wait it out.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        alive(pid)?;
        let store = stores.get(STORE).await?;
        let conditions = store.status.map(|s| s.conditions).unwrap_or_default();
        match api::conditions::find(&conditions, READY) {
            Some(c) if c.status == ConditionStatus::True => break,
            other if Instant::now() >= deadline => {
                bail!(
                    "SecretStore {STORE} is not Ready=True after 60s; its Ready condition is {other:?}"
                )
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    // What the operator needs with one store and nothing to sync, to tell its fixed cost from
    // its cost per ExternalSecret.
    let rss_before_mib = rss_mib(pid, "VmRSS")?;
    // Requests per refresh, not the store's validation.
    if let Some(Server::Gitlab(gitlab)) = server {
        gitlab.reset_requests();
    }

    let spec: ExternalSecretSpec = serde_json::from_value(spec)?;
    let names: Vec<String> = (0..count).map(|i| format!("es-{i:05}")).collect();
    let externalsecrets: Api<ExternalSecret> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);

    let start = Instant::now();
    let creating = futures::stream::iter(names.iter().map(|name| {
        let api = externalsecrets.clone();
        let es = ExternalSecret::new(name, spec.clone());
        async move {
            api.create(&PostParams::default(), &es)
                .await
                .with_context(|| format!("creating ExternalSecret {name}"))
        }
    }))
    .buffer_unordered(CREATE_PARALLELISM)
    .try_for_each(|_| async { Ok(()) });
    // Polled alongside the creates, so that time to Ready is not rounded up to the end of them.
    let waiting = wait_all(&externalsecrets, &secrets, &names, start, args.timeout, pid);
    let (creates_done, (all_ready, all_secrets)) = tokio::try_join!(
        async {
            creating.await?;
            anyhow::Ok(start.elapsed())
        },
        waiting
    )?;

    let peak_rss_mib = rss_mib(pid, "VmHWM")?;
    let rss_end_mib = rss_mib(pid, "VmRSS")?;
    let metrics = scrape(metrics_port).await?;
    // Kept with the control plane's folder (EXTERNAL_SECRETS_TESTENV_KEEP=1) for a closer look.
    std::fs::write(cp.dir().join("operator-metrics.txt"), &metrics)?;
    let sync_calls = metrics
        .lines()
        .filter(|l| l.starts_with("externalsecret_sync_calls_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    let server = match server {
        None => None,
        Some(Server::Vault(v)) => Some(ServerCounts {
            logins: Some(v.count_audit_responses(|r| !r.failed && r.path == "auth/approle/login")?),
            requests: v.count_audit_responses(|r| {
                !r.failed && r.operation == "read" && r.path == "secret/data/bench"
            })?,
        }),
        Some(Server::Gitlab(g)) => Some(ServerCounts {
            logins: None,
            requests: usize::try_from(g.total_requests())?,
        }),
    };
    Ok(Run {
        server,
        count,
        creates_done,
        all_ready,
        all_secrets,
        rss_before_mib,
        peak_rss_mib,
        rss_end_mib,
        sync_calls,
    })
}

/// Polls until every ExternalSecret in `names` is Ready=True and every target Secret exists;
/// returns both times since `start`.
async fn wait_all(
    externalsecrets: &Api<ExternalSecret>,
    secrets: &Api<Secret>,
    names: &[String],
    start: Instant,
    timeout: u64,
    pid: u32,
) -> Result<(Duration, Duration)> {
    let wanted: HashSet<&str> = names.iter().map(String::as_str).collect();
    let deadline = start + Duration::from_secs(timeout);
    let (mut all_ready, mut all_secrets) = (None, None);
    let mut last_print = Instant::now();
    loop {
        alive(pid)?;
        let (mut ready, mut present) = (0, 0);
        if all_ready.is_none() {
            ready = externalsecrets
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .filter(|es| {
                    es.status.as_ref().is_some_and(|s| {
                        api::conditions::find(&s.conditions, READY)
                            .is_some_and(|c| c.status == ConditionStatus::True)
                    })
                })
                .count();
            if ready == names.len() {
                all_ready = Some(start.elapsed());
            }
        }
        if all_secrets.is_none() {
            // The target name defaults to the ExternalSecret's name.
            present = secrets
                .list_metadata(&ListParams::default())
                .await?
                .items
                .iter()
                .filter(|s| {
                    s.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| wanted.contains(n))
                })
                .count();
            if present == names.len() {
                all_secrets = Some(start.elapsed());
            }
        }
        if let (Some(r), Some(s)) = (all_ready, all_secrets) {
            return Ok((r, s));
        }
        if Instant::now() >= deadline {
            let ready = all_ready.map_or(format!("{ready}"), |_| "all".into());
            let present = all_secrets.map_or(format!("{present}"), |_| "all".into());
            bail!(
                "after {timeout}s only {ready} of {} ExternalSecrets were Ready=True and {present} of their Secrets existed",
                names.len()
            );
        }
        if last_print.elapsed() >= Duration::from_secs(10) {
            eprintln!(
                "bench: {:.0}s: {} Ready, {} Secrets",
                start.elapsed().as_secs_f64(),
                all_ready.map_or(ready, |_| names.len()),
                all_secrets.map_or(present, |_| names.len()),
            );
            last_print = Instant::now();
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Starts the release operator against `cp` (its webhook on loopback, where the API server
/// calls it); returns its pid and metrics port.
fn spawn_operator(cp: &ControlPlane, args: &Args) -> Result<(u32, u16)> {
    let metrics_port = free_port()?;
    // Its default probe address is a fixed port on every interface, which anything else on
    // the machine may hold.
    let probes_port = free_port()?;
    let webhook_port = free_port()?;
    let mut operator_args = vec![
        "controller".into(),
        "--kubeconfig".into(),
        cp.kubeconfig_path().to_string_lossy().into_owned(),
        "--metrics-addr".into(),
        format!("127.0.0.1:{metrics_port}"),
        "--live-addr".into(),
        format!("127.0.0.1:{probes_port}"),
        "--concurrent".into(),
        args.concurrency.to_string(),
        // The API server calls the conversion webhook here, not at an in-cluster Service.
        "--webhook-addr".into(),
        format!("127.0.0.1:{webhook_port}"),
        "--webhook-url".into(),
        format!("https://127.0.0.1:{webhook_port}/convert"),
        "--webhook-namespace".into(),
        "default".into(),
    ];
    operator_args.extend(args.operator_args.iter().cloned());
    let pid = cp.spawn("operator", &args.operator, operator_args)?;
    Ok((pid, metrics_port))
}

/// `--conversion`: N Vault objects written at v1alpha1, then each version listed three times.
async fn run_conversion(
    cp: &ControlPlane,
    client: &Client,
    args: &Args,
    count: usize,
) -> Result<()> {
    use kube::api::{ApiResource, DynamicObject, ListParams};
    testenv::install_crds(client, &args.crds).await?;
    let ns = testenv::create_namespace(client, "bench").await?;
    let (pid, _) = spawn_operator(cp, args)?;
    let resource = |v: &str| -> ApiResource {
        api::providers::vault::DESCRIPTOR.resource(api::provider_kinds::Scope::Namespaced, v)
    };
    let alpha: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &resource("v1alpha1"));
    let beta: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource("v1beta1"));
    // The webhook has put its URL and CA into the CRD once a v1beta1 read succeeds.
    let deadline = Instant::now() + Duration::from_secs(60);
    while beta.list(&ListParams::default()).await.is_err() {
        alive(pid)?;
        ensure!(
            Instant::now() < deadline,
            "the conversion webhook did not come up in 60s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let started = Instant::now();
    futures::stream::iter((0..count).map(|i| {
        let alpha = alpha.clone();
        async move {
            let object: DynamicObject = serde_json::from_value(serde_json::json!({
                "apiVersion": "providers.external-secrets.io/v1alpha1",
                "kind": "Vault",
                "metadata": {"name": format!("vault-{i:05}")},
                "spec": {
                    "server": "https://vault.example:8200", "path": "secret", "version": "v2",
                    "auth": {"appRole": {"path": "approle", "roleId": "r",
                        "secretRef": {"name": "approle", "key": "secret-id"}}},
                },
            }))?;
            alpha.create(&PostParams::default(), &object).await?;
            anyhow::Ok(())
        }
    }))
    .buffer_unordered(CREATE_PARALLELISM)
    .try_for_each(|()| async { Ok(()) })
    .await?;
    eprintln!(
        "bench: {count} Vault objects created in {:.1?}",
        started.elapsed()
    );
    let mut times = Vec::new();
    for api in [&alpha, &beta] {
        let mut best = Duration::MAX;
        for _ in 0..3 {
            let t = Instant::now();
            let listed = api.list(&ListParams::default()).await?;
            ensure!(
                listed.items.len() == count,
                "listed {} of {count}",
                listed.items.len()
            );
            // Each version's own shape: the v1beta1 list really went through the webhook.
            let converted = std::ptr::eq(api, &beta);
            let spec = &listed.items[0].data["spec"];
            ensure!(
                spec["kv"].is_object() == converted,
                "the list at {} is not in that version's shape: {spec}",
                if converted { "v1beta1" } else { "v1alpha1" }
            );
            best = best.min(t.elapsed());
        }
        times.push(best);
    }
    alive(pid)?;
    println!(
        "| {count} | {:.2} s | {:.2} s | {:.2} | {:.0} |",
        times[0].as_secs_f64(),
        times[1].as_secs_f64(),
        times[1].as_secs_f64() / times[0].as_secs_f64(),
        count as f64 / times[1].as_secs_f64(),
    );
    Ok(())
}

/// Fails when the operator process has exited; the supervisor reaps children only when the
/// control plane stops, so a dead operator is still a zombie here.
fn alive(pid: u32) -> Result<()> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the parenthesised command name, which may itself contain spaces.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    if matches!(state, None | Some("Z" | "X")) {
        bail!("the operator (pid {pid}) exited");
    }
    Ok(())
}

/// A `/proc/<pid>/status` memory field (reported in kB) in MiB.
fn rss_mib(pid: u32, field: &str) -> Result<f64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("{path} has no {field}"))?;
    Ok(kib / 1024.0)
}

fn free_port() -> Result<u16> {
    // The operator binds it a moment later; the same small race testenv accepts for its ports.
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

async fn scrape(port: u16) -> Result<String> {
    let mut stream = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .await
        .context("connecting to the operator's /metrics")?;
    stream
        .write_all(
            format!("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    ensure!(
        response.starts_with("HTTP/1.1 200"),
        "/metrics answered {}",
        response.lines().next().unwrap_or_default()
    );
    Ok(response)
}

/// Warnings and errors in the operator's log go to stderr: a fast run that logged errors is
/// not a good result.
fn report_operator_log(path: &Path) {
    let Ok(text) = std::fs::read_to_string(path) else {
        eprintln!("bench: no operator log at {}", path.display());
        return;
    };
    let bad: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    eprintln!(
        "bench: operator log: {} lines, {} WARN/ERROR",
        text.lines().count(),
        bad.len()
    );
    for line in bad.iter().take(10) {
        eprintln!("  {line}");
    }
}

fn print_table(runs: &[Run], kubernetes: &str, args: &Args) {
    let nproc = std::thread::available_parallelism().map_or(0, usize::from);
    let extra: String = args.operator_args.iter().map(|a| format!(" {a}")).collect();
    let store = match args.store {
        Backend::Fake => "Fake".to_owned(),
        Backend::Vault => format!("Vault {} (AppRole, KV v2)", testenv::VAULT_VERSION),
        Backend::Gitlab => "GitLab stand-in (one project)".to_owned(),
    };
    let templated = if args.templated {
        ", templated (4 keys, a sprig pipeline each)"
    } else {
        ""
    };
    println!(
        "Kubernetes {kubernetes}, {store}{templated}, nproc {nproc}, operator --concurrent {}{extra}\n",
        args.concurrency
    );
    println!(
        "| ExternalSecrets | time to all Ready | Secrets/s | peak RSS (MiB) | RSS at end (MiB) \
         | RSS before ExternalSecrets (MiB) | creates done | time to all Secrets | sync calls \
         | provider logins | provider requests |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in runs {
        let (logins, reads) = r.server.as_ref().map_or(("-".into(), "-".into()), |c| {
            (
                c.logins.map_or("-".into(), |l| l.to_string()),
                c.requests.to_string(),
            )
        });
        println!(
            "| {} | {:.1} s | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} s | {:.1} s | {} | {logins} | {reads} |",
            r.count,
            r.all_ready.as_secs_f64(),
            r.count as f64 / r.all_ready.as_secs_f64(),
            r.peak_rss_mib,
            r.rss_end_mib,
            r.rss_before_mib,
            r.creates_done.as_secs_f64(),
            r.all_secrets.as_secs_f64(),
            r.sync_calls,
        );
    }
}
