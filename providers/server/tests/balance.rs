//! The operator's pool against three real servers behind one name, as behind a headless
//! Service: calls spread over every replica, a replica the name gains later gets calls within the
//! re-resolution period, and a rolling restart of every replica fails no call.
//!
//! The name is `localhost`, given the addresses 127.0.0.1-3 (all local on Linux) by an
//! /etc/hosts of the test's own: each test runs again in a private mount namespace
//! (`unshare --mount`, as root) with that file bound over /etc/hosts, which the resolver
//! (glibc, through tokio's `lookup_host`) reads at every lookup.

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use external_secrets_provider_server::{ServeOptions, TlsFiles};
use provider::{RemoteRef, SecretsClient};
use provider_remote::{Pool, PoolMetrics, RemoteClient, Settings, TlsMaterial};
use support::*;

/// Set in the re-run: the hosts file bound over /etc/hosts, which the test may rewrite.
const HOSTS: &str = "BALANCE_TEST_HOSTS";

/// Runs `body` with `localhost` resolving to the `replicas` first of 127.0.0.1-3: in this
/// process when it is the re-run, else by running this test again under `unshare`.
fn with_own_hosts<F: std::future::Future<Output = ()>>(
    test: &str,
    replicas: u8,
    body: impl FnOnce(PathBuf) -> F,
) {
    if let Some(hosts) = std::env::var_os(HOSTS) {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        return tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(body(PathBuf::from(hosts)));
    }
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    write_hosts(&hosts, replicas);
    let run = testenv::with_own_hosts(&hosts, std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(HOSTS, &hosts)
        .output()
        .unwrap_or_else(|e| {
            panic!("this test needs util-linux's `unshare` (apt-get install util-linux): {e}")
        });
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    println!("{output}");
    assert!(
        run.status.success(),
        "the test in its own mount namespace failed (it needs root, or CAP_SYS_ADMIN, for `unshare --mount`): {output}"
    );
    assert!(
        output.contains("1 passed"),
        "the re-run ran no test: {output}"
    );
}

/// Rewritten in place: the bind mount follows the file, not its name.
fn write_hosts(path: &Path, replicas: u8) {
    let lines: String = (1..=replicas)
        .map(|n| format!("127.0.0.{n} localhost\n"))
        .collect();
    std::fs::write(path, lines).unwrap();
}

fn replica_ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))
}

/// Three replicas' shared port, its certificates, and the servers running.
struct Replicas {
    port: u16,
    ca: Ca,
    client: Issued,
    certs: tempfile::TempDir,
    running: Vec<Option<Running>>,
    shutdown_delay: Duration,
}

impl Replicas {
    fn new(shutdown_delay: Duration) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let ca = Ca::new("provider-ca");
        let certs = tempfile::tempdir().unwrap();
        write_server_files(certs.path(), &ca, &ca.server());
        Self {
            port,
            client: ca.client(),
            ca,
            certs,
            running: (0..3).map(|_| None).collect(),
            shutdown_delay,
        }
    }

    /// Starts replica `n` (1-3) on 127.0.0.n.
    async fn start(&mut self, n: u8) {
        let grpc = SocketAddr::new(replica_ip(n), self.port);
        let tls = TlsFiles::in_dir(self.certs.path());
        let delay = self.shutdown_delay;
        let server = Running::start_with(|o: &mut ServeOptions| {
            o.grpc = grpc;
            o.metrics = Some(SocketAddr::new(replica_ip(n), 0));
            o.tls = Some(tls);
            o.shutdown_delay = delay;
        })
        .await;
        self.running[usize::from(n - 1)] = Some(server);
    }

    /// Stops replica `n` as SIGTERM does and waits until it has.
    async fn stop(&mut self, n: u8) {
        let mut server = self.running[usize::from(n - 1)].take().unwrap();
        server.stop();
        tokio::time::timeout(Duration::from_secs(30), server.task)
            .await
            .expect("the replica stops")
            .unwrap()
            .unwrap();
    }

    /// GetSecret calls replica `n` served since it started.
    async fn served(&self, n: u8) -> usize {
        let server = self.running[usize::from(n - 1)].as_ref().unwrap();
        let text = http_get(server.metrics, "/metrics").await;
        text.lines()
            .filter(|l| {
                l.starts_with("grpc_server_handled_total") && l.contains("method=\"GetSecret\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as usize
    }

    fn client(&self, pool: &Pool) -> RemoteClient {
        let material = TlsMaterial {
            ca: self.ca.pem().into_bytes(),
            cert: self.client.cert.clone().into_bytes(),
            key: self.client.key.clone().into_bytes(),
        };
        let connection = pool
            .get(&format!("localhost:{}", self.port), Some(&material))
            .expect("the TLS material is good");
        RemoteClient::new(
            connection,
            reference("fake").expect("a reference"),
            NAMESPACE.into(),
        )
    }
}

const RESOLVE_INTERVAL: Duration = Duration::from_secs(1);

fn pool() -> Pool {
    Pool::new(
        Settings {
            resolve_interval: RESOLVE_INTERVAL,
            ..Settings::default()
        },
        PoolMetrics::default(),
    )
}

fn plain() -> RemoteRef {
    RemoteRef {
        key: "plain".into(),
        ..Default::default()
    }
}

/// `n` GetSecret calls, 10 at a time; each must answer the Fake's value.
async fn calls(client: &Arc<RemoteClient>, n: usize) {
    let left = Arc::new(AtomicUsize::new(n));
    let workers: Vec<_> = (0..10)
        .map(|_| {
            let (client, left) = (client.clone(), left.clone());
            tokio::spawn(async move {
                while left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(1))
                    .is_ok()
                {
                    assert_eq!(client.get_secret(&plain()).await.unwrap(), b"v0");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
}

#[test]
fn calls_spread_over_every_replica_and_one_added_later_gets_its_share() {
    with_own_hosts(
        "calls_spread_over_every_replica_and_one_added_later_gets_its_share",
        2,
        |hosts| async move {
            let mut replicas = Replicas::new(Duration::ZERO);
            replicas.start(1).await;
            replicas.start(2).await;
            let pool = pool();
            let client = Arc::new(replicas.client(&pool));
            calls(&client, 300).await;
            let (one, two) = (replicas.served(1).await, replicas.served(2).await);
            println!("two replicas, 300 calls: {one} and {two}");
            assert_eq!(one + two, 300);
            assert!(one > 100 && two > 100, "uneven: {one} and {two}");

            // A third replica, which the name gains (a Pod turning ready behind a headless
            // Service): within the re-resolution period it gets its share.
            replicas.start(3).await;
            write_hosts(&hosts, 3);
            let found = eventually(RESOLVE_INTERVAL * 3, || async {
                calls(&client, 10).await;
                replicas.served(3).await > 0
            })
            .await;
            assert!(found, "the replica added gets no calls");
            let before = [
                replicas.served(1).await,
                replicas.served(2).await,
                replicas.served(3).await,
            ];
            calls(&client, 300).await;
            let mut spread = [0; 3];
            for (n, earlier) in (1..=3).zip(before) {
                spread[usize::from(n - 1)] = replicas.served(n).await - earlier;
            }
            println!("three replicas, 300 calls: {spread:?}");
            assert_eq!(spread.iter().sum::<usize>(), 300);
            assert!(
                spread.iter().all(|&s| s > 60),
                "a replica got 20 % of the calls or less: {spread:?}"
            );
        },
    );
}

#[test]
fn a_rolling_restart_of_every_replica_fails_no_call() {
    with_own_hosts(
        "a_rolling_restart_of_every_replica_fails_no_call",
        3,
        |_| async move {
            let mut replicas = Replicas::new(Duration::from_millis(500));
            for n in 1..=3 {
                replicas.start(n).await;
            }
            let pool = pool();
            let client = Arc::new(replicas.client(&pool));
            // Steady calls from 10 callers, each failure recorded.
            let stop = Arc::new(AtomicBool::new(false));
            let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
            let made = Arc::new(AtomicUsize::new(0));
            let callers: Vec<_> = (0..10)
                .map(|_| {
                    let (client, stop, failures, made) =
                        (client.clone(), stop.clone(), failures.clone(), made.clone());
                    tokio::spawn(async move {
                        while !stop.load(Ordering::Relaxed) {
                            if let Err(e) = client.get_secret(&plain()).await {
                                failures.lock().unwrap().push(e.to_string());
                            }
                            made.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            for n in 1..=3 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                replicas.stop(n).await;
                replicas.start(n).await;
                // It is back in the spread before the next one goes.
                let rejoined = eventually(RESOLVE_INTERVAL * 5, || async {
                    replicas.served(n).await > 0
                })
                .await;
                assert!(rejoined, "replica {n} gets no calls after its restart");
            }
            stop.store(true, Ordering::Relaxed);
            for caller in callers {
                caller.await.unwrap();
            }
            let failures = failures.lock().unwrap();
            println!(
                "{} calls during the rolling restart, {} failed",
                made.load(Ordering::Relaxed),
                failures.len()
            );
            assert!(failures.is_empty(), "calls failed: {failures:?}");
        },
    );
}

/// One replica replaced by another (a Deployment of one rolled: the new Pod turns ready, the old
/// one is stopped) between two lookups: the name now resolves to the new address only, and the
/// call after the old one stopped must not wait for the next timed lookup (30 s) to find it.
#[test]
fn a_single_replica_replaced_by_another_fails_no_call() {
    with_own_hosts(
        "a_single_replica_replaced_by_another_fails_no_call",
        1,
        |hosts| async move {
            let mut replicas = Replicas::new(Duration::ZERO);
            replicas.start(1).await;
            let pool = Pool::new(Settings::default(), PoolMetrics::default());
            let client = replicas.client(&pool);
            assert_eq!(client.get_secret(&plain()).await.unwrap(), b"v0");
            replicas.start(2).await;
            std::fs::write(&hosts, format!("{} localhost\n", replica_ip(2))).unwrap();
            replicas.stop(1).await;
            assert_eq!(
                client.get_secret(&plain()).await.map_err(|e| e.to_string()),
                Ok(b"v0".to_vec()),
                "the first call after the old replica stopped"
            );
            assert_eq!(replicas.served(2).await, 1);
        },
    );
}
