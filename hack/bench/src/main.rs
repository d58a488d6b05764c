//! Times the operator binary the way a user runs it: its own process, talking to a real
//! kube-apiserver through a kubeconfig, syncing N ExternalSecrets from a Fake SecretStore or,
//! with `--store vault`, from a real Vault server through one AppRole SecretStore, and with
//! `--store gitlab`, from the GitLab stand-in through one token. With `--provider
//! out-of-process` the store names a ProviderClass of a `provider serve` process (the same
//! binary) the bench starts, and a loop in this process times single GetSecret calls through
//! the real client-side adapter against that server, beside the in-process Fake client. The
//! server runs as `--replicas` processes on 127.0.0.1, .2, ... at one port behind the name
//! `localhost`, as Pods behind a headless Service: the bench runs itself again in a mount
//! namespace of its own whose /etc/hosts gives `localhost` those addresses, so the operator and
//! the per-call loop resolve the name and spread their calls over the replicas.
//! `hack/bench.sh` builds everything and runs this; see `hack/README.md` for results.

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
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
use provider::{ProviderRuntime, ProviderSchema, SecretsClient};
use provider_protocol::v1;
use testenv::{ControlPlane, KvVersion, ProviderServer, VaultServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod cluster;
mod scale;
mod soak;

const STORE: &str = "bench";

/// The ProviderClass (or ClusterProviderClass) of the out-of-process runs, and its TLS Secret.
const CLASS: &str = "bench-provider";
const CLASS_TLS: &str = "bench-provider-tls";

/// Set in the bench's own re-run in a mount namespace: the hosts file bound over /etc/hosts.
const OWN_HOSTS: &str = "EXTERNAL_SECRETS_BENCH_HOSTS";

/// The name every replica of the provider server answers to, given their addresses by the
/// re-run's /etc/hosts (and in the server certificates testenv issues).
const REPLICAS_HOST: &str = "localhost";

/// The inline `spec.provider.fake` of the Fake store, in process and out of process alike.
fn fake_inline() -> serde_json::Value {
    serde_json::json!({"data": [
        {"key": "user", "value": "alice"},
        {"key": "config", "value": r#"{"a":"1","b":"2"}"#},
    ]})
}

fn fake_store_yaml() -> String {
    // JSON is YAML: the same value as `fake_inline`, no second copy of the data.
    format!(
        "apiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {{name: {STORE}}}\nspec:\n  provider:\n    fake: {}\n",
        fake_inline()
    )
}

/// Enough parallel creates to keep the apiserver busy without the bench itself becoming the
/// bottleneck being measured.
const CREATE_PARALLELISM: usize = 32;

const POLL: Duration = Duration::from_millis(500);

/// Calls of each kind before the per-call loop starts timing.
const WARM_UP_CALLS: usize = 200;

#[derive(Clone, Parser)]
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
    /// Where the provider runs, one fresh control plane per choice and count: in the operator,
    /// or in `<operator> provider serve` started by the bench and named by the store's
    /// runtimeRef (a ProviderClass, mTLS on loopback). Default: both for the Fake store,
    /// in-process for the others.
    #[arg(long, value_enum, value_delimiter = ',')]
    provider: Vec<Runtime>,
    /// Out of process through a ClusterProviderClass whose TLS Secret is in a namespace of its
    /// own, instead of a ProviderClass with its Secret beside the ExternalSecrets' Secrets.
    #[arg(long)]
    cluster_provider_class: bool,
    /// Provider server processes of an out-of-process run, on 127.0.0.1, .2, ... at one port,
    /// all behind the name `localhost` the class names (needs root for the mount namespace).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=254))]
    replicas: u8,
    /// GetSecret calls of the per-call loop after each out-of-process Fake run, through the
    /// client-side adapter and through the in-process Fake client, one at a time.
    #[arg(long, default_value_t = 5000)]
    calls: usize,
    /// Seconds from the operator's start until the first create, at the least (the store must be
    /// Ready too). At start the operator injects the conversion webhook's CA into the provider
    /// CRDs, so the API server rebuilds their watch caches and the operator's watches re-list for
    /// a few seconds; creates during that are about twice as slow, which made a run that got its
    /// store Ready early (out of process) look slower than one that did not.
    #[arg(long, default_value_t = 15)]
    warm_up: u64,
    /// Seconds to wait once everything is Ready before reading the settled RSS (printed when a
    /// run is out of process).
    #[arg(long, default_value_t = 10)]
    settle: u64,
    /// Instead of one sync: waves of the first count's ExternalSecrets, created in fresh
    /// namespaces with a store each and deleted again, for --soak-minutes; the operator's RSS and
    /// metric series after each wave (src/soak.rs).
    #[arg(long)]
    soak: bool,
    #[arg(long, default_value_t = 10)]
    soak_minutes: u64,
    /// Namespaces a soak wave spreads its ExternalSecrets over, one Fake store each.
    #[arg(long, default_value_t = 100)]
    soak_namespaces: usize,
    /// Instead of one sync: one ClusterExternalSecret over this many namespaces, then
    /// --steady seconds of steady state (src/cluster.rs).
    #[arg(long, default_value_t = 0)]
    cluster_namespaces: usize,
    /// Seconds of steady state counted after a --cluster-namespaces sync.
    #[arg(long, default_value_t = 300)]
    steady: u64,
    /// Instead of one sync: the first count's ExternalSecrets without the client rate limiter,
    /// beside a bare client making the same minimal writes, ExternalSecrets created while the
    /// backlog drains, and a restart (src/scale.rs).
    #[arg(long)]
    scale: bool,
    /// The bare client of --scale writes the Secret and the status by server-side apply, as the
    /// operator does, instead of a create and a merge patch: what field ownership costs the API
    /// server.
    #[arg(long)]
    bare_apply: bool,
    /// The bare client of --scale makes every request the operator makes, and nothing else: the
    /// writes by server-side apply, the Secret labelled as managed, a `Created` event published
    /// by the operator's own recorder, and the operator's two busy watches (the ExternalSecrets,
    /// the managed Secrets' metadata). What the API server then spends beyond the operator's run
    /// is the operator's own doing.
    #[arg(long)]
    bare_as_operator: bool,
    /// The bare client of --scale creates every ExternalSecret first, then makes the writes,
    /// as the operator's run has them come.
    #[arg(long)]
    bare_creates_first: bool,
    /// Pairs of --scale runs (the bare client's, then the operator's), each on fresh control
    /// planes: one pair's time ratio varies by a third on a small machine, their median less.
    /// The restart is measured after the last.
    #[arg(long, default_value_t = 1)]
    scale_rounds: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Runtime {
    /// The operator calls the provider in its own process.
    InProcess,
    /// The store's runtimeRef names a ProviderClass of a provider server the bench starts.
    OutOfProcess,
}

impl Runtime {
    fn label(self) -> &'static str {
        match self {
            Self::InProcess => "in process",
            Self::OutOfProcess => "out of process",
        }
    }
}

impl Args {
    /// `--provider` without repeats, or its default for the store.
    fn runtimes(&self) -> Vec<Runtime> {
        let mut chosen: Vec<Runtime> = Vec::new();
        for &r in &self.provider {
            if !chosen.contains(&r) {
                chosen.push(r);
            }
        }
        if chosen.is_empty() {
            chosen.push(Runtime::InProcess);
            if self.store == Backend::Fake {
                chosen.push(Runtime::OutOfProcess);
            }
        }
        chosen
    }

    /// Whether the table with the provider server's columns is printed (and RSS settles).
    fn compares_runtimes(&self) -> bool {
        self.runtimes() != [Runtime::InProcess]
    }
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
    /// moto, the AWS stand-in: Secrets Manager through a role, found through AWS_ENDPOINT_URL.
    Aws,
}

/// The secret manager a run reads from, when it is not the in-process Fake.
enum Server {
    Vault(Box<VaultServer>),
    Gitlab(GitlabStandin),
    Aws(&'static testenv::Moto),
}

/// What a run against a server adds to the table: Vault's logins and reads of the bench secret
/// from its audit log; every HTTP request the GitLab stand-in answered.
struct ServerCounts {
    logins: Option<usize>,
    requests: usize,
}

/// The provider servers of an out-of-process run: their memory (summed over the replicas), the
/// calls each answered and the connections the operator opened to them.
struct ProviderStats {
    rss_before_mib: f64,
    peak_rss_mib: f64,
    rss_settled_mib: f64,
    /// `grpc_server_handled_total` of each replica, in replica order.
    calls: Vec<f64>,
    connections_opened: f64,
    /// CPU seconds from the first create until all were Ready.
    cpu_s: f64,
    /// gRPC health Checks from the bench while the ExternalSecrets synced, sorted, in µs.
    round_trips: Vec<f64>,
}

/// Times of single GetSecret calls, sorted, in microseconds.
struct PerCall {
    in_process: Vec<f64>,
    remote: Vec<f64>,
    /// Remote minus in-process, call by call (each pair made back to back).
    difference: Vec<f64>,
    /// gRPC health Check on the same connection: a round trip through the same TLS, HTTP/2 and
    /// tonic layers with next to nothing for either side to do, the floor of any call.
    health: Vec<f64>,
    /// CPU per remote GetSecret in microseconds, from a second loop of remote calls only: this
    /// process (the client side) and the server, from their `/proc` CPU times.
    client_cpu: f64,
    server_cpu: f64,
    /// The machine's 1-minute load average as the loop started (other work shares the cores).
    load: f64,
    /// The server's own time per GetSecret from `grpc_server_handling_seconds` (sum / count over
    /// the loop): the part of a remote call spent inside the server's handler.
    server_mean: Option<f64>,
}

struct Run {
    /// Which entry of `--counts` (a count may be repeated); in and out of process share it.
    round: usize,
    runtime: Runtime,
    count: usize,
    creates_done: Duration,
    all_ready: Duration,
    all_secrets: Duration,
    rss_before_mib: f64,
    peak_rss_mib: f64,
    rss_end_mib: f64,
    /// The machine's 1-minute load average when all were Ready.
    load: f64,
    /// CPU seconds of the operator, and of the API server when found, from the first create
    /// until all were Ready: work, where the wall time also counts waiting for the shared cores.
    operator_cpu_s: f64,
    apiserver_cpu_s: Option<f64>,
    /// Requests the API server answered from the first create until all were Ready
    /// (`apiserver_request_total`, watches included as one each).
    api_requests: f64,
    /// The mean of `externalsecret_reconcile_duration` (each ExternalSecret's last reconcile),
    /// in milliseconds.
    reconcile_ms: f64,
    /// `VmRSS` after `--settle` seconds, when the runtimes are compared.
    rss_settled_mib: Option<f64>,
    sync_calls: f64,
    server: Option<ServerCounts>,
    provider: Option<ProviderStats>,
    per_call: Option<PerCall>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    // The operator finds moto as a deployment finds AWS, through its environment, which only a
    // process started with it has: the bench runs itself again with the endpoint set, and the
    // operator it spawns inherits it.
    let moto: Option<&'static testenv::Moto> = if args.store == Backend::Aws {
        let run = testenv::Moto::in_environment(|endpoint| {
            vec![("AWS_ENDPOINT_URL".to_owned(), endpoint.to_owned())]
        })?;
        match run {
            testenv::MotoRun::Parent(code) => {
                ensure!(
                    code == std::process::ExitCode::SUCCESS,
                    "the bench's run with moto failed"
                );
                return Ok(());
            }
            testenv::MotoRun::Child(moto) => Some(Box::leak(Box::new(moto))),
        }
    } else {
        None
    };
    ensure!(
        args.operator.is_file(),
        "the operator binary {} does not exist; build it with cargo build --release -p external-secrets",
        args.operator.display()
    );
    ensure!(!args.counts.is_empty(), "--counts is empty");
    let tokio = tokio::runtime::Runtime::new()?;
    if args.scale {
        return scale::run(&tokio, &args);
    }
    let mut runs = Vec::new();
    let mut kubernetes = String::new();
    if args.soak || args.cluster_namespaces > 0 {
        let cp = ControlPlane::start()?;
        let result = tokio.block_on(async {
            let client = cp.client().await;
            if args.soak {
                soak::run(&cp, &client, &args).await
            } else {
                cluster::run(&cp, &client, &args).await
            }
        });
        let log = cp.dir().join("operator.log");
        report_log("operator", &log);
        if result.is_err() {
            print_tail(&log);
        }
        return result;
    }
    let runtimes = if args.conversion {
        vec![Runtime::InProcess]
    } else {
        args.runtimes()
    };
    if runtimes.contains(&Runtime::OutOfProcess) && std::env::var_os(OWN_HOSTS).is_none() {
        return in_own_hosts(&args);
    }
    for (round, &count) in args.counts.iter().enumerate() {
        for &runtime in &runtimes {
            // Started outside the runtime: start() blocks, and dropping it joins the supervisor.
            let cp = ControlPlane::start()?;
            let server = match args.store {
                Backend::Fake => None,
                Backend::Vault => Some(Server::Vault(Box::new(VaultServer::start()?))),
                Backend::Gitlab => Some(Server::Gitlab(GitlabStandin::start()?)),
                Backend::Aws => {
                    let moto = moto.context("moto is started for --store aws")?;
                    // Each round starts from an empty AWS.
                    moto.reset()?;
                    Some(Server::Aws(moto))
                }
            };
            if args.conversion {
                if count == args.counts[0] {
                    println!(
                        "| Vault objects | LIST at v1alpha1 (storage) | LIST at v1beta1 (converted) | ratio | conversions/s |"
                    );
                    println!("|---:|---:|---:|---:|---:|");
                }
                tokio.block_on(async {
                    let client = cp.client().await;
                    run_conversion(&cp, &client, &args, count).await
                })?;
                continue;
            }
            let result = tokio.block_on(async {
                let client = cp.client().await;
                kubernetes = client.apiserver_version().await?.git_version;
                run(&cp, &client, &args, count, runtime, server.as_ref()).await
            });
            let log = cp.dir().join("operator.log");
            report_log("operator", &log);
            match result {
                Ok(r) => runs.push(Run { round, ..r }),
                Err(e) => {
                    print_tail(&log);
                    return Err(e.context(format!(
                        "the run with {count} ExternalSecrets, provider {}, failed",
                        runtime.label()
                    )));
                }
            }
        }
    }
    if !args.conversion {
        if args.compares_runtimes() {
            print_runtime_tables(&runs, &kubernetes, &args);
        } else {
            print_table(&runs, &kubernetes, &args);
        }
    }
    Ok(())
}

/// Runs this bench again, with the same arguments, in a mount namespace whose /etc/hosts gives
/// [`REPLICAS_HOST`] the replicas' addresses: the operator it starts and its own per-call loop
/// then resolve the class's name as they would a headless Service's. The control plane and the
/// secret managers are reached at 127.0.0.1, which no lookup touches.
fn in_own_hosts(args: &Args) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let hosts = dir.path().join("hosts");
    let lines: String = (1..=args.replicas)
        .map(|n| format!("127.0.0.{n} {REPLICAS_HOST}\n"))
        .collect();
    std::fs::write(&hosts, lines)?;
    let status = testenv::with_own_hosts(&hosts, std::env::current_exe()?)
        .args(std::env::args_os().skip(1))
        .env(OWN_HOSTS, &hosts)
        .status()
        .context(
            "running the bench again under util-linux's `unshare` (apt-get install util-linux)",
        )?;
    ensure!(
        status.success(),
        "the bench in its own mount namespace (which needs root, or CAP_SYS_ADMIN, for \
         `unshare --mount`) {status}"
    );
    Ok(())
}

/// The last lines of a log, and how to keep it.
fn print_tail(log: &Path) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
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
        Some(Server::Aws(moto)) => return prepare_aws(client, ns, moto).await,
        None => {
            let spec = serde_json::json!({
                "refreshInterval": "1h",
                "secretStoreRef": {"name": STORE},
                "data": [{"secretKey": "user", "remoteRef": {"key": "user"}}],
                "dataFrom": [{"extract": {"key": "config"}}],
            });
            return Ok((fake_store_yaml(), spec));
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

/// The same data as the other stores in one Secrets Manager secret, read through a role: every
/// call from here on is recorded, so the table counts the store's AssumeRole calls too.
async fn prepare_aws(
    client: &Client,
    ns: &str,
    moto: &testenv::Moto,
) -> Result<(String, serde_json::Value)> {
    moto.create_secret("bench", r#"{"user": "alice", "a": "1", "b": "2"}"#)?;
    moto.start_recording()?;
    testenv::apply_yaml_in(
        client,
        ns,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: aws-keys}\nstringData: {access-key: AKIDBENCH, secret-key: bench}\n",
        true,
    )
    .await?;
    let store = format!(
        "apiVersion: external-secrets.io/v1\nkind: SecretStore\nmetadata: {{name: {STORE}}}\nspec:\n  provider:\n    aws:\n      service: SecretsManager\n      region: {}\n      role: arn:aws:iam::123456789012:role/bench\n      auth:\n        secretRef:\n          accessKeyIDSecretRef: {{name: aws-keys, key: access-key}}\n          secretAccessKeySecretRef: {{name: aws-keys, key: secret-key}}\n",
        testenv::moto::REGION
    );
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

/// A process the bench watches: it fails as soon as one has exited.
#[derive(Clone, Copy)]
struct Watched {
    pid: u32,
    name: &'static str,
}

/// One provider server process and its pid (for its memory and CPU).
struct Replica {
    server: ProviderServer,
    pid: u32,
}

/// The provider server replicas of an out-of-process run and the name the class gives them.
struct ProviderProcess {
    replicas: Vec<Replica>,
    /// `localhost:<their port>`.
    address: String,
}

impl ProviderProcess {
    fn pki(&self) -> testenv::ProviderPki {
        self.replicas[0].server.pki()
    }

    fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.replicas.iter().map(|r| r.pid)
    }

    /// A `/proc/<pid>/status` memory field summed over the replicas.
    fn rss_mib(&self, field: &str) -> Result<f64> {
        self.pids().map(|pid| rss_mib(pid, field)).sum()
    }

    /// CPU seconds of all replicas.
    fn cpu_seconds(&self) -> Result<f64> {
        self.pids().map(cpu_seconds).sum()
    }

    /// Each replica's `/metrics`, in replica order.
    async fn scrape(&self) -> Result<Vec<String>> {
        let mut scrapes = Vec::with_capacity(self.replicas.len());
        for r in &self.replicas {
            scrapes.push(scrape_at(r.server.metrics_address).await?);
        }
        Ok(scrapes)
    }
}

async fn run(
    cp: &ControlPlane,
    client: &Client,
    args: &Args,
    count: usize,
    runtime: Runtime,
    server: Option<&Server>,
) -> Result<Run> {
    eprintln!(
        "bench: {count} ExternalSecrets, provider {}",
        runtime.label()
    );
    testenv::install_crds(client, &args.crds).await?;
    let ns = testenv::create_namespace(client, "bench").await?;

    let (pid, metrics_port) = spawn_operator(cp, args)?;
    let first_create = Instant::now() + Duration::from_secs(args.warm_up);
    let operator = Watched {
        pid,
        name: "the operator",
    };
    let provider = match runtime {
        Runtime::InProcess => None,
        // After the CRDs, which its watches need.
        Runtime::OutOfProcess => Some(start_provider_server(cp, args).await?),
    };
    let result = measure(
        cp,
        client,
        args,
        count,
        &ns,
        operator,
        metrics_port,
        first_create,
        server,
        provider.as_ref(),
    )
    .await;
    for r in provider.iter().flat_map(|p| &p.replicas) {
        let log = r.server.log_path();
        report_log("provider server", &log);
        if result.is_err() {
            print_tail(&log);
        }
    }
    result
}

/// `--replicas` of `<operator> provider serve --kind <the store's kind>` with mTLS on loopback,
/// on 127.0.0.1, .2, ... at one port.
async fn start_provider_server(cp: &ControlPlane, args: &Args) -> Result<ProviderProcess> {
    let kind = match args.store {
        Backend::Fake => "Fake",
        Backend::Vault => "Vault",
        Backend::Gitlab => "Gitlab",
        Backend::Aws => "AWS",
    };
    let binary = args.operator.clone();
    let kubeconfig = cp.kubeconfig_path();
    let count = args.replicas;
    // start() and replica() wait, blocking, until the gRPC port accepts connections.
    let servers = tokio::task::spawn_blocking(move || {
        let first = ProviderServer::start(&binary, &kubeconfig, &[kind])?;
        let mut servers = Vec::with_capacity(count.into());
        for n in 2..=count {
            servers.push(first.replica(n)?);
        }
        servers.insert(0, first);
        anyhow::Ok(servers)
    })
    .await??;
    let port = servers[0]
        .address
        .rsplit_once(':')
        .map(|(_, p)| p.to_owned())
        .context("the provider server's address has no port")?;
    let mut replicas = Vec::with_capacity(servers.len());
    for server in servers {
        // testenv keeps the pid to itself; each replica is the one process reading its
        // certificates folder.
        let pid = pid_with_arg(&format!("--tls-dir={}", server.certs_dir().display()))?;
        eprintln!(
            "bench: provider server {} (pid {pid}, log {})",
            server.address,
            server.log_path().display()
        );
        replicas.push(Replica { server, pid });
    }
    Ok(ProviderProcess {
        replicas,
        address: format!("{REPLICAS_HOST}:{port}"),
    })
}

/// The class of `provider` for a store in `ns`, with the client half of its mTLS in ESO's
/// Secret: a ProviderClass in `ns` with its Secret beside it or, with `--cluster-provider-class`,
/// a ClusterProviderClass whose Secret is in a namespace of its own. Returns the store's
/// `runtimeRef`.
async fn provider_class(
    client: &Client,
    ns: &str,
    provider: &ProviderProcess,
    cluster: bool,
) -> Result<String> {
    let tls_ns = if cluster {
        testenv::create_namespace(client, "bench-tls").await?
    } else {
        ns.to_owned()
    };
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": CLASS_TLS},
        "stringData": provider.pki().client_secret_data(),
    });
    // JSON is YAML.
    testenv::apply_yaml_in(client, &tls_ns, &secret.to_string(), true).await?;
    let (kind, tls_ref, runtime_ref) = if cluster {
        (
            "ClusterProviderClass",
            format!("{{name: {CLASS_TLS}, namespace: {tls_ns}}}"),
            format!("{{kind: ClusterProviderClass, name: {CLASS}}}"),
        )
    } else {
        (
            "ProviderClass",
            format!("{{name: {CLASS_TLS}}}"),
            format!("{{name: {CLASS}}}"),
        )
    };
    testenv::apply_yaml_in(
        client,
        ns,
        &format!(
            "apiVersion: external-secrets.io/v1alpha1\nkind: {kind}\nmetadata: {{name: {CLASS}}}\nspec: {{address: '{}', tlsSecretRef: {tls_ref}}}\n",
            provider.address
        ),
        true,
    )
    .await?;
    Ok(runtime_ref)
}

/// `store_yaml` with `spec.runtimeRef: <runtime_ref>`.
fn with_runtime_ref(store_yaml: &str, runtime_ref: &str) -> Result<String> {
    const SPEC: &str = "\nspec:\n  provider:";
    ensure!(
        store_yaml.contains(SPEC),
        "the store has no `spec:` followed by `provider:`:\n{store_yaml}"
    );
    Ok(store_yaml.replacen(
        SPEC,
        &format!("\nspec:\n  runtimeRef: {runtime_ref}\n  provider:"),
        1,
    ))
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    cp: &ControlPlane,
    client: &Client,
    args: &Args,
    count: usize,
    ns: &str,
    operator: Watched,
    metrics_port: u16,
    first_create: Instant,
    server: Option<&Server>,
    provider: Option<&ProviderProcess>,
) -> Result<Run> {
    let pid = operator.pid;
    let mut watched = vec![operator];
    for pid in provider.iter().flat_map(|p| p.pids()) {
        watched.push(Watched {
            pid,
            name: "a provider server replica",
        });
    }
    let (mut store_yaml, mut spec) = prepare(client, ns, server).await?;
    if let Some(p) = provider {
        let runtime_ref = provider_class(client, ns, p, args.cluster_provider_class).await?;
        store_yaml = with_runtime_ref(&store_yaml, &runtime_ref)?;
    }

    if args.templated {
        spec["target"] = template();
    }
    testenv::apply_yaml_in(client, ns, &store_yaml, true).await?;
    let stores: Api<SecretStore> = Api::namespaced(client.clone(), ns);
    // Not testenv::wait_for: that would take a dead operator for "not yet" and wait it out.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        alive(&watched)?;
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
    tokio::time::sleep_until(first_create.into()).await;
    alive(&watched)?;
    // What the operator needs with one store and nothing to sync, to tell its fixed cost from
    // its cost per ExternalSecret.
    let rss_before_mib = rss_mib(pid, "VmRSS")?;
    let provider_rss_before_mib = provider.map(|p| p.rss_mib("VmRSS")).transpose()?;
    // Requests per refresh, not the store's validation.
    if let Some(Server::Gitlab(gitlab)) = server {
        gitlab.reset_requests();
    }

    let spec: ExternalSecretSpec = serde_json::from_value(spec)?;
    let names: Vec<String> = (0..count).map(|i| format!("es-{i:05}")).collect();
    let externalsecrets: Api<ExternalSecret> = Api::namespaced(client.clone(), ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);

    let apiserver = apiserver_pid(cp).ok();
    let cpu = |pid: Option<u32>| pid.map(cpu_seconds).transpose();
    let provider_cpu = || provider.map(ProviderProcess::cpu_seconds).transpose();
    let cpu_before = [cpu(Some(pid))?, provider_cpu()?, cpu(apiserver)?];
    let api_before = apiserver_metrics(client).await?;
    let stop_probe = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let probe = match provider {
        Some(p) => Some(tokio::spawn(probe_while_syncing(
            connect(p)?,
            stop_probe.clone(),
        ))),
        None => None,
    };
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
    let waiting = wait_all(
        &externalsecrets,
        &secrets,
        &names,
        start,
        args.timeout,
        &watched,
    );
    let (creates_done, (all_ready, all_secrets)) = tokio::try_join!(
        async {
            creating.await?;
            anyhow::Ok(start.elapsed())
        },
        waiting
    )?;
    stop_probe.store(true, std::sync::atomic::Ordering::Relaxed);
    let round_trips = match probe {
        Some(task) => Some(task.await??),
        None => None,
    };

    let cpu_after = [cpu(Some(pid))?, provider_cpu()?, cpu(apiserver)?];
    let [operator_cpu_s, provider_cpu_s, apiserver_cpu_s] =
        std::array::from_fn(|i| Some(cpu_after[i]? - cpu_before[i]?));
    let api_after = apiserver_metrics(client).await?;
    // Both kept with the control plane's folder, to tell requests apart by verb and resource.
    std::fs::write(cp.dir().join("apiserver-metrics-before.txt"), &api_before)?;
    std::fs::write(cp.dir().join("apiserver-metrics-after.txt"), &api_after)?;
    let api_requests = sum_of(&api_after, "apiserver_request_total")
        - sum_of(&api_before, "apiserver_request_total");
    let peak_rss_mib = rss_mib(pid, "VmHWM")?;
    let rss_end_mib = rss_mib(pid, "VmRSS")?;
    let load = load_average()?;
    let provider_peak_rss_mib = provider.map(|p| p.rss_mib("VmHWM")).transpose()?;
    let rss_settled_mib = if args.compares_runtimes() {
        tokio::time::sleep(Duration::from_secs(args.settle)).await;
        alive(&watched)?;
        Some(rss_mib(pid, "VmRSS")?)
    } else {
        None
    };
    let metrics = scrape(metrics_port).await?;
    // Kept with the control plane's folder (EXTERNAL_SECRETS_TESTENV_KEEP=1) for a closer look.
    std::fs::write(cp.dir().join("operator-metrics.txt"), &metrics)?;
    let sync_calls = sum_of(&metrics, "externalsecret_sync_calls_total");
    let durations = samples(&metrics, "externalsecret_reconcile_duration");
    let reconcile_ms = durations.iter().sum::<f64>() / durations.len().max(1) as f64 / 1e6;
    let provider_stats = match provider {
        None => None,
        Some(p) => {
            let served = p.scrape().await?;
            for (n, text) in served.iter().enumerate() {
                std::fs::write(
                    cp.dir().join(format!("provider-metrics-{}.txt", n + 1)),
                    text,
                )?;
            }
            Some(ProviderStats {
                rss_before_mib: provider_rss_before_mib.unwrap_or_default(),
                peak_rss_mib: provider_peak_rss_mib.unwrap_or_default(),
                rss_settled_mib: p.rss_mib("VmRSS")?,
                calls: served
                    .iter()
                    .map(|text| sum_of(text, "grpc_server_handled_total"))
                    .collect(),
                connections_opened: sum_of(&metrics, "provider_connections_opened_total"),
                cpu_s: provider_cpu_s.unwrap_or_default(),
                round_trips: round_trips.unwrap_or_default(),
            })
        }
    };
    // After the memory readings: the loop's calls are not the sync's.
    let per_call = match provider {
        Some(p) if server.is_none() => Some(per_call(p, ns, args.calls).await?),
        _ => None,
    };
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
        Some(Server::Aws(moto)) => {
            let counts = Some(ServerCounts {
                logins: Some(moto.count_recorded("sts", "AssumeRole")?),
                requests: moto.count_recorded("secretsmanager", "GetSecretValue")?,
            });
            moto.stop_recording()?;
            counts
        }
    };
    Ok(Run {
        round: 0,
        runtime: if provider.is_some() {
            Runtime::OutOfProcess
        } else {
            Runtime::InProcess
        },
        server,
        count,
        creates_done,
        all_ready,
        all_secrets,
        rss_before_mib,
        peak_rss_mib,
        rss_end_mib,
        rss_settled_mib,
        load,
        operator_cpu_s: operator_cpu_s.unwrap_or_default(),
        apiserver_cpu_s,
        api_requests,
        reconcile_ms,
        sync_calls,
        provider: provider_stats,
        per_call,
    })
}

/// The API server's own `/metrics`.
async fn apiserver_metrics(client: &Client) -> Result<String> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    Ok(client.request_text(request).await?)
}

/// Every sample of `metric` (any labels) in a Prometheus text scrape.
fn samples(text: &str, metric: &str) -> Vec<f64> {
    text.lines()
        .filter(|l| {
            l.strip_prefix(metric)
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .collect()
}

fn sum_of(text: &str, metric: &str) -> f64 {
    // From +0.0: `Sum` of no floats is -0.0, which a replica that answered nothing printed as.
    samples(text, metric).iter().fold(0.0, |sum, v| sum + v)
}

/// The value of the sample `metric{labels}` (exactly those labels), if present.
fn sample(text: &str, metric: &str, labels: &str) -> Option<f64> {
    let name = format!("{metric}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&name)?.trim().parse().ok())
}

/// A pooled connection to `provider` with the client half of its mTLS, as the operator makes
/// one (the pool dials on the first call).
fn connect(provider: &ProviderProcess) -> Result<provider_remote::Connection> {
    let pki = provider.pki();
    let tls = provider_remote::TlsMaterial {
        ca: pki.ca_pem.into_bytes(),
        cert: pki.client.cert_pem.into_bytes(),
        key: pki.client.key_pem.into_bytes(),
    };
    let pool = provider_remote::Pool::new(
        provider_remote::Settings::default(),
        provider_remote::PoolMetrics::default(),
    );
    Ok(pool.get(&provider.address, Some(&tls))?)
}

fn health_check() -> tonic_health::pb::HealthCheckRequest {
    tonic_health::pb::HealthCheckRequest {
        service: String::new(),
    }
}

/// How often the probe times a round trip to the server while the ExternalSecrets sync.
const PROBE_EVERY: Duration = Duration::from_millis(50);

/// Times a gRPC health Check on a connection of its own every [`PROBE_EVERY`] until `stop`:
/// what a round trip to the server takes while the machine is busy with the sync, in µs.
async fn probe_while_syncing(
    connection: provider_remote::Connection,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Result<Vec<f64>> {
    use std::sync::atomic::Ordering;
    let mut health = tonic_health::pb::health_client::HealthClient::new(connection.transport());
    // The first call connects.
    health.check(health_check()).await?;
    let mut times = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        health.check(health_check()).await?;
        times.push(started.elapsed().as_secs_f64() * 1e6);
        tokio::time::sleep(PROBE_EVERY).await;
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

/// Times `calls` GetSecret calls one at a time through the client-side adapter
/// (`provider_remote::Pool` + `RemoteClient`, mTLS, loopback) against the run's server, each
/// paired with the same call on an in-process Fake client built from the same spec.
async fn per_call(provider: &ProviderProcess, ns: &str, calls: usize) -> Result<PerCall> {
    use api::provider_kinds::Scope;
    eprintln!(
        "bench: {calls} GetSecret calls in process and through {}",
        provider.address
    );
    let resource = api::providers::fake::DESCRIPTOR.storage_resource(Scope::Namespaced);

    // In process: what the operator builds for the inline store (its converted spec).
    let fake = provider_fake::Fake::default();
    let spec = fake.convert(&fake_inline())?;
    let local = fake
        .new_client(
            provider::ClientRequest {
                provider: provider::ProviderIdentity {
                    kind: resource.kind.clone(),
                    namespace: Some(ns.to_owned()),
                    name: STORE.to_owned(),
                },
                api_version: resource.api_version.clone(),
                spec,
                namespace: ns.to_owned(),
            },
            Arc::new(provider::StaticCredentials::default()),
        )
        .await?;

    // Out of process: what the operator sends for the same store, the provider object converted
    // from its inline spec, which the server reads from its watch cache.
    let connection = connect(provider)?;
    let remote = provider_remote::RemoteClient::new(
        connection.clone(),
        v1::ProviderReference {
            api_version: resource.api_version.clone(),
            kind: resource.kind.clone(),
            name: STORE.to_owned(),
            namespace: ns.to_owned(),
            store_ref_kind: api::store::SECRET_STORE_KIND.into(),
        },
        ns.to_owned(),
    );

    let key = provider::RemoteRef {
        key: "user".into(),
        ..Default::default()
    };
    for (name, client) in [
        ("in process", &*local),
        ("out of process", &remote as &dyn SecretsClient),
    ] {
        let value = client
            .get_secret(&key)
            .await
            .with_context(|| format!("GetSecret {name}"))?;
        ensure!(
            value == b"alice",
            "GetSecret {name} answered {:?}",
            String::from_utf8_lossy(&value)
        );
    }
    for _ in 0..WARM_UP_CALLS {
        local.get_secret(&key).await?;
        remote.get_secret(&key).await?;
    }

    // Over every replica: the calls spread over them.
    let histogram = |texts: &[String]| {
        let labels = r#"method="GetSecret""#;
        let mut total = (0.0, 0.0);
        for text in texts {
            total.0 += sample(text, "grpc_server_handling_seconds_sum", labels)?;
            total.1 += sample(text, "grpc_server_handling_seconds_count", labels)?;
        }
        Some(total)
    };
    let mut health = tonic_health::pb::health_client::HealthClient::new(connection.transport());
    for _ in 0..WARM_UP_CALLS {
        health.check(health_check()).await?;
    }

    let load = load_average()?;
    let before = histogram(&provider.scrape().await?);
    let mut times: [Vec<f64>; 3] = std::array::from_fn(|_| Vec::with_capacity(calls));
    let mut difference = Vec::with_capacity(calls);
    for i in 0..calls {
        // Rotated, so that no side always runs on the caches another one warmed.
        let mut took = [0.0; 3];
        for k in 0..3 {
            let side = (i + k) % 3;
            let started = Instant::now();
            match side {
                0 => {
                    local.get_secret(&key).await?;
                }
                1 => {
                    remote.get_secret(&key).await?;
                }
                _ => {
                    health.check(health_check()).await?;
                }
            }
            took[side] = started.elapsed().as_secs_f64() * 1e6;
        }
        for (v, t) in times.iter_mut().zip(took) {
            v.push(t);
        }
        difference.push(took[1] - took[0]);
    }
    let after = histogram(&provider.scrape().await?);
    // What a call costs each side in CPU, which the wall times above only bound: the pairs'
    // loop also runs the other calls, so this one runs remote calls alone.
    let self_pid = std::process::id();
    let (client0, server0) = (cpu_seconds(self_pid)?, provider.cpu_seconds()?);
    for _ in 0..calls {
        remote.get_secret(&key).await?;
    }
    let per = |s: f64| s / calls as f64 * 1e6;
    let client_cpu = per(cpu_seconds(self_pid)? - client0);
    let server_cpu = per(provider.cpu_seconds()? - server0);
    let server_mean = match (before, after) {
        (Some((sum0, n0)), Some((sum1, n1))) if n1 > n0 => Some((sum1 - sum0) / (n1 - n0) * 1e6),
        _ => None,
    };
    difference.sort_by(f64::total_cmp);
    let [mut in_process, mut out, mut health] = times;
    for v in [&mut in_process, &mut out, &mut health] {
        v.sort_by(f64::total_cmp);
    }
    Ok(PerCall {
        in_process,
        remote: out,
        difference,
        health,
        client_cpu,
        server_cpu,
        load,
        server_mean,
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
    watched: &[Watched],
) -> Result<(Duration, Duration)> {
    let wanted: HashSet<&str> = names.iter().map(String::as_str).collect();
    let deadline = start + Duration::from_secs(timeout);
    let (mut all_ready, mut all_secrets) = (None, None);
    let mut last_print = Instant::now();
    loop {
        alive(watched)?;
        let (mut ready, mut present) = (0, 0);
        if all_ready.is_none() {
            ready = count_ready(externalsecrets, &ListParams::default()).await?;
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

/// CRDs installed and the operator started, past its warm-up: for the runs of one operator
/// throughout (the soak, the cluster run); its pid's watch and metrics port.
async fn operator_warmed_up(
    cp: &ControlPlane,
    client: &Client,
    args: &Args,
) -> Result<(Watched, u16)> {
    testenv::install_crds(client, &args.crds).await?;
    let (pid, metrics_port) = spawn_operator(cp, args)?;
    let operator = Watched {
        pid,
        name: "the operator",
    };
    tokio::time::sleep(Duration::from_secs(args.warm_up)).await;
    alive(std::slice::from_ref(&operator))?;
    Ok((operator, metrics_port))
}

/// How many of the ExternalSecrets `params` lists are Ready=True.
async fn count_ready(api: &Api<ExternalSecret>, params: &ListParams) -> Result<usize> {
    Ok(api
        .list(params)
        .await?
        .items
        .iter()
        .filter(|es| {
            es.status.as_ref().is_some_and(|s| {
                api::conditions::find(&s.conditions, READY)
                    .is_some_and(|c| c.status == ConditionStatus::True)
            })
        })
        .count())
}

/// Starts the release operator against `cp` (its webhook on loopback, where the API server
/// calls it); returns its pid and metrics port.
fn spawn_operator(cp: &ControlPlane, args: &Args) -> Result<(u32, u16)> {
    spawn_operator_at(cp, args, free_port()?)
}

/// As [`spawn_operator`], its webhook at `webhook_port`: an operator restarted where it was,
/// as behind a Service, finds the CRDs already calling it.
fn spawn_operator_at(cp: &ControlPlane, args: &Args, webhook_port: u16) -> Result<(u32, u16)> {
    let metrics_port = free_port()?;
    // Its default probe address is a fixed port on every interface, which anything else on
    // the machine may hold.
    let probes_port = free_port()?;
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
    let watched = [Watched {
        pid,
        name: "the operator",
    }];
    let resource = |v: &str| -> ApiResource {
        api::providers::vault::DESCRIPTOR.resource(api::provider_kinds::Scope::Namespaced, v)
    };
    let alpha: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &resource("v1alpha1"));
    let beta: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource("v1beta1"));
    // The webhook has put its URL and CA into the CRD once a v1beta1 read succeeds.
    let deadline = Instant::now() + Duration::from_secs(60);
    while beta.list(&ListParams::default()).await.is_err() {
        alive(&watched)?;
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
    alive(&watched)?;
    println!(
        "| {count} | {:.2} s | {:.2} s | {:.2} | {:.0} |",
        times[0].as_secs_f64(),
        times[1].as_secs_f64(),
        times[1].as_secs_f64() / times[0].as_secs_f64(),
        count as f64 / times[1].as_secs_f64(),
    );
    Ok(())
}

/// Fails when a watched process has exited; the supervisor reaps children only when the
/// control plane (or the provider server) stops, so a dead one is still a zombie here.
fn alive(watched: &[Watched]) -> Result<()> {
    for w in watched {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", w.pid)).unwrap_or_default();
        // The state follows the parenthesised command name, which may itself contain spaces.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        if matches!(state, None | Some("Z" | "X")) {
            bail!("{} (pid {}) exited", w.name, w.pid);
        }
    }
    Ok(())
}

/// The one running process with `arg` among its arguments.
/// The pid of `cp`'s API server: testenv keeps it to itself, but its certificates folder is in
/// the control plane's.
fn apiserver_pid(cp: &ControlPlane) -> Result<u32> {
    pid_with_arg(&format!(
        "--cert-dir={}",
        cp.dir().join("apiserver-certs").display()
    ))
}

fn pid_with_arg(arg: &str) -> Result<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if cmdline.split(|&b| b == 0).any(|a| a == arg.as_bytes()) {
            found.push(pid);
        }
    }
    match found[..] {
        [pid] => Ok(pid),
        _ => bail!(
            "{} processes have the argument {arg}: {found:?}",
            found.len()
        ),
    }
}

/// User and system CPU seconds of a process, all its threads.
fn cpu_seconds(pid: u32) -> Result<f64> {
    // Reported in clock ticks of USER_HZ, which is 100 on every Linux ABI.
    const TICKS: f64 = 100.0;
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // After the parenthesised command name: state is field 3, utime and stime fields 14 and 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| -> Result<f64> {
        fields
            .get(i - 3)
            .and_then(|v| v.parse::<f64>().ok())
            .with_context(|| format!("{path} has no field {i}"))
    };
    Ok((ticks(14)? + ticks(15)?) / TICKS)
}

/// The 1-minute load average.
fn load_average() -> Result<f64> {
    let text = std::fs::read_to_string("/proc/loadavg")?;
    text.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("/proc/loadavg: {text:?}"))
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
    scrape_at(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await
}

/// `/metrics` of the operator or of a provider server replica.
async fn scrape_at(address: SocketAddr) -> Result<String> {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .with_context(|| format!("connecting to /metrics at {address}"))?;
    stream
        .write_all(
            format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n")
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

/// Warnings and errors in a process's log go to stderr: a fast run that logged errors is not a
/// good result.
fn report_log(what: &str, path: &Path) {
    let Ok(text) = std::fs::read_to_string(path) else {
        eprintln!("bench: no {what} log at {}", path.display());
        return;
    };
    let bad: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    eprintln!(
        "bench: {what} log: {} lines, {} WARN/ERROR",
        text.lines().count(),
        bad.len()
    );
    for line in bad.iter().take(10) {
        eprintln!("  {line}");
    }
}

/// The line above a table: what ran where.
fn describe(kubernetes: &str, args: &Args) -> String {
    let nproc = std::thread::available_parallelism().map_or(0, usize::from);
    let extra: String = args.operator_args.iter().map(|a| format!(" {a}")).collect();
    let store = match args.store {
        Backend::Fake => "Fake".to_owned(),
        Backend::Vault => format!("Vault {} (AppRole, KV v2)", testenv::VAULT_VERSION),
        Backend::Gitlab => "GitLab stand-in (one project)".to_owned(),
        Backend::Aws => "moto (AWS Secrets Manager through a role)".to_owned(),
    };
    let templated = if args.templated {
        ", templated (4 keys, a sprig pipeline each)"
    } else {
        ""
    };
    format!(
        "Kubernetes {kubernetes}, {store}{templated}, nproc {nproc}, operator --concurrent {}{extra}",
        args.concurrency
    )
}

fn print_table(runs: &[Run], kubernetes: &str, args: &Args) {
    println!("{}\n", describe(kubernetes, args));
    println!(
        "| ExternalSecrets | time to all Ready | Secrets/s | peak RSS (MiB) | RSS at end (MiB) \
         | RSS before ExternalSecrets (MiB) | creates done | time to all Secrets | sync calls \
         | provider logins | provider requests |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in runs {
        let (logins, reads) = server_columns(r);
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

/// Vault's logins and the secret manager's requests, `-` where there is none.
fn server_columns(r: &Run) -> (String, String) {
    r.server.as_ref().map_or(("-".into(), "-".into()), |c| {
        (
            c.logins.map_or("-".into(), |l| l.to_string()),
            c.requests.to_string(),
        )
    })
}

/// Each replica's calls and its share of all, in replica order: `412 (34 %) / 398 (33 %) / …`.
fn spread(calls: &[f64]) -> String {
    let total: f64 = calls.iter().sum();
    calls
        .iter()
        .map(|c| format!("{c} ({:.0} %)", 100.0 * c / total.max(1.0)))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// The value at quantile `q` of sorted `values` (nearest rank).
fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let rank = (q * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// In process beside out of process: time, both processes' memory, the server's calls; then
/// the per-call loop's times.
fn print_runtime_tables(runs: &[Run], kubernetes: &str, args: &Args) {
    let mib = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
    println!(
        "{}; out of process: {} replicas of `{} provider serve` on 127.0.0.1-{} at one port \
         with mTLS, behind the name `{REPLICAS_HOST}`, through a {}; server memory is the sum \
         over the replicas; calls per replica are each one's `grpc_server_handled_total` and its \
         share of all; settled = {} s after all Ready\n",
        describe(kubernetes, args),
        args.replicas,
        args.operator
            .file_name()
            .map_or("external-secrets".into(), |n| n.to_string_lossy()),
        args.replicas,
        if args.cluster_provider_class {
            "ClusterProviderClass (its TLS Secret in a namespace of its own)"
        } else {
            "ProviderClass (its TLS Secret beside the ExternalSecrets)"
        },
        args.settle,
    );
    println!(
        "| provider | ExternalSecrets | time to all Ready | vs in process | Secrets/s \
         | operator peak RSS (MiB) | operator RSS settled (MiB) | operator RSS before ExternalSecrets (MiB) \
         | servers' peak RSS, sum (MiB) | servers' RSS settled, sum (MiB) \
         | servers' RSS before ExternalSecrets, sum (MiB) | creates done | time to all Secrets \
         | sync calls | server calls | calls per replica (share) | connections opened \
         | provider logins | provider requests | operator CPU | server CPU | API server CPU \
         | API requests | mean last reconcile | round trip while syncing, p50 / p99 | load avg |"
    );
    println!(
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in runs {
        let baseline = runs
            .iter()
            .find(|b| b.round == r.round && b.runtime == Runtime::InProcess);
        let ratio = match (r.runtime, baseline) {
            (Runtime::OutOfProcess, Some(b)) => format!(
                "{:.2} ×",
                r.all_ready.as_secs_f64() / b.all_ready.as_secs_f64()
            ),
            _ => "-".into(),
        };
        let p = r.provider.as_ref();
        let (logins, reads) = server_columns(r);
        println!(
            "| {} | {} | {:.1} s | {ratio} | {:.0} | {:.1} | {} | {:.1} | {} | {} | {} | {:.1} s | {:.1} s | {} | {} | {} | {} | {logins} | {reads} | {:.1} s | {} | {} | {} | {:.1} ms | {} | {:.1} |",
            r.runtime.label(),
            r.count,
            r.all_ready.as_secs_f64(),
            r.count as f64 / r.all_ready.as_secs_f64(),
            r.peak_rss_mib,
            mib(r.rss_settled_mib),
            r.rss_before_mib,
            mib(p.map(|p| p.peak_rss_mib)),
            mib(p.map(|p| p.rss_settled_mib)),
            mib(p.map(|p| p.rss_before_mib)),
            r.creates_done.as_secs_f64(),
            r.all_secrets.as_secs_f64(),
            r.sync_calls,
            p.map_or("-".into(), |p| p.calls.iter().sum::<f64>().to_string()),
            p.map_or("-".into(), |p| spread(&p.calls)),
            p.map_or("-".into(), |p| p.connections_opened.to_string()),
            r.operator_cpu_s,
            p.map_or("-".into(), |p| format!("{:.1} s", p.cpu_s)),
            r.apiserver_cpu_s
                .map_or("-".into(), |c| format!("{c:.1} s")),
            r.api_requests,
            r.reconcile_ms,
            p.filter(|p| !p.round_trips.is_empty())
                .map_or("-".into(), |p| format!(
                    "{:.2} / {:.2} ms",
                    quantile(&p.round_trips, 0.5) / 1e3,
                    quantile(&p.round_trips, 0.99) / 1e3
                )),
            r.load,
        );
    }
    let measured: Vec<&Run> = runs.iter().filter(|r| r.per_call.is_some()).collect();
    if measured.is_empty() {
        return;
    }
    println!(
        "\nGetSecret one call at a time from the bench process, {} calls after {WARM_UP_CALLS} of warm-up, \
         each out-of-process call (`provider_remote::Pool` + `RemoteClient`, mTLS, loopback) \
         paired with the same call on an in-process Fake client; after the run of N \
         ExternalSecrets, on its server. *gRPC health Check*: a round trip on the same connection \
         with next to nothing to do on either side, timed in the same loop. *server handler*: \
         the server's own `grpc_server_handling_seconds` sum / count over the loop. *CPU per \
         remote call*: user + system CPU time of each process over a second loop of {} remote \
         calls alone, per call (10 ms ticks).\n",
        args.calls, args.calls
    );
    println!("| after N | path | p50 (µs) | p99 (µs) | mean (µs) | load avg |");
    println!("|---:|---|---:|---:|---:|---:|");
    for r in measured {
        let Some(c) = &r.per_call else { continue };
        for (path, values) in [
            ("in process (Fake client)", &c.in_process),
            ("out of process (RemoteClient → server)", &c.remote),
            ("difference (per pair)", &c.difference),
            ("gRPC health Check, same connection", &c.health),
        ] {
            println!(
                "| {} | {path} | {:.1} | {:.1} | {:.1} | {:.1} |",
                r.count,
                quantile(values, 0.5),
                quantile(values, 0.99),
                mean(values),
                c.load,
            );
        }
        println!(
            "| {} | server handler (histogram) | - | - | {} | {:.1} |",
            r.count,
            c.server_mean.map_or("-".into(), |m| format!("{m:.1}")),
            c.load,
        );
        for (path, cpu) in [
            ("CPU per remote call, client (bench process)", c.client_cpu),
            ("CPU per remote call, server", c.server_cpu),
        ] {
            println!(
                "| {} | {path} | - | - | {cpu:.0} | {:.1} |",
                r.count, c.load
            );
        }
    }
}
