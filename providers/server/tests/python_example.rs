//! The reference out-of-tree secret store server in Python (`examples/out-of-tree/python`),
//! driven by the operator's own client adapter (`provider_remote::RemoteClient` over a `Pool`)
//! over mTLS, as the operator will call it: every method of `provider.v1.SecretStoreProvider`,
//! health and reflection, the error codes the README promises, and the example's manifests
//! and RBAC against a real API server (`testenv::ControlPlane`).
//!
//! The venv (the example's hash-pinned `requirements.txt`, installed under the target directory
//! and reused while the file is unchanged), the stubs generated from `providers/protocol/proto`
//! and the server process are `testenv::python_example`'s, which the e2e suite's trial of the
//! example through the operator shares. Missing python3 or venv support fails with the command
//! that fixes it: a test that quietly skips proves nothing.

mod support;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use base64::Engine;
use libtest_mimic::{Arguments, Failed, Trial};
use provider::{
    Error, FindRequest, PushRemoteRef, PushRequest, RemoteRef, SecretsClient, Validation,
};
use provider_protocol::v1;
use provider_remote::{Pool, PoolMetrics, RemoteClient, Settings, TlsMaterial};
use support::{Ca, Issued, write_server_files};
use testenv::python_example::{self, PythonExample, PythonServer, PythonServerFiles};
use testenv::{ControlPlane, Selection};

const API_VERSION: &str = "secrets.acme.example/v1";
const KIND: &str = "SqliteStore";
const TEAM_A: &str = "team-a";
const TEAM_B: &str = "team-b";
/// The example's own namespace for the server (server.yaml).
const SERVER_NAMESPACE: &str = "secret-stores";
const SERVER_ACCOUNT: &str = "sqlite-secret-store";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn example() -> PathBuf {
    python_example::example_dir()
}

// ---------------------------------------------------------------------------------------------
// Setup: the venv and stubs (testenv's), the database, the cluster objects and the running server

/// The rows the tests read. `db` is written as TEXT, as the sqlite3 shell would; the rest as
/// BLOB, as the server writes.
const SEED: &str = r#"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("CREATE TABLE secrets (key TEXT PRIMARY KEY, value BLOB NOT NULL)")
db.execute("INSERT INTO secrets VALUES ('db', ?)", ('{"user":"alice","port":5432,"tls":{"mode":"verify"}}',))
db.executemany("INSERT INTO secrets VALUES (?, ?)", [
    ("plain", b"v0"),
    ("binary", bytes([0, 255, 1])),
    ("not-json", b"just text"),
    ("app/one", b"1"),
    ("app/two", b"2"),
    ("other/three", b"3"),
])
db.commit()
# A database without the table.
other = sqlite3.connect(sys.argv[2])
other.execute("CREATE TABLE unrelated (x)")
other.commit()
"#;

/// Starts `server.py` on a free 127.0.0.1 port with the certificates in `certs`, reading the
/// cluster through `kubeconfig`; its output goes to `<name>.log`.
fn start_server(fx: &Files, certs: &Path, kubeconfig: &Path, name: &str) -> Result<PythonServer> {
    PythonServer::start(
        &fx.example,
        &PythonServerFiles {
            tls_dir: certs.to_owned(),
            kubeconfig: kubeconfig.to_owned(),
            data_dir: fx.dir.path().join("data"),
            log: fx.dir.path().join(format!("{name}.log")),
        },
    )
}

/// What the servers read: stubs, certificates, databases and kubeconfigs, in one folder.
struct Files {
    dir: tempfile::TempDir,
    example: PythonExample,
    ca: Ca,
    client: Issued,
}

struct Fixture {
    // Field order: the servers stop before the control plane and the files go.
    server: PythonServer,
    cp: ControlPlane,
    files: Files,
}

fn setup() -> Result<Fixture> {
    let dir = tempfile::Builder::new()
        .prefix("python-example-")
        .tempdir()?;
    let example = PythonExample::prepare(&dir.path().join("gen"))?;
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data)?;
    python_example::run(
        Command::new(&example.python)
            .args(["-c", SEED])
            .arg(data.join("secrets.db"))
            .arg(data.join("other.db")),
        "writing the SQLite files",
    )?;
    let certs = dir.path().join("certs");
    std::fs::create_dir_all(&certs)?;
    let ca = Ca::new("sqlite-secret-store-ca");
    write_server_files(&certs, &ca, &ca.server());
    let client = ca.client();
    let files = Files {
        dir,
        example,
        ca,
        client,
    };

    let cp = ControlPlane::start()?;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(cluster_objects(&cp, &files))?;
    // The admin kubeconfig as the control plane writes it: client certificate and key data.
    let server = start_server(&files, &certs, &cp.kubeconfig_path(), "server")?;
    Ok(Fixture { server, cp, files })
}

/// The operator's CRDs and the example's, the example's server manifests (its ServiceAccount
/// and RBAC), both teams' namespaces, and the SqliteStores the trials use.
async fn cluster_objects(cp: &ControlPlane, files: &Files) -> Result<()> {
    let client = cp.client().await;
    testenv::install_crds(&client, root().join("crds"))
        .await
        .context("installing the operator's CRDs")?;
    let crd = std::fs::read_to_string(example().join("crd.yaml"))?;
    testenv::apply_yaml(&client, &crd, true)
        .await
        .context("applying the example's crd.yaml")?;
    testenv::wait_for_crd_established(
        &client,
        "sqlitestores.secrets.acme.example",
        Duration::from_secs(60),
    )
    .await?;
    for ns in [TEAM_A, TEAM_B] {
        testenv::apply_yaml(
            &client,
            &format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n"),
            true,
        )
        .await?;
    }
    let yaml = std::fs::read_to_string(example().join("server.yaml"))?;
    testenv::apply_yaml(&client, &yaml, true)
        .await
        .context("applying the example's server.yaml")?;
    let data = files.dir.path().join("data");
    let store = |ns: &str, name: &str, path: &Path| {
        format!(
            "apiVersion: {API_VERSION}\nkind: {KIND}\nmetadata: {{name: {name}, namespace: {ns}}}\n\
             spec: {{path: {:?}, table: secrets}}\n",
            path.display().to_string()
        )
    };
    for object in [
        store(TEAM_A, "test-db", &data.join("secrets.db")),
        store(TEAM_B, "test-db", &data.join("secrets.db")),
        store(TEAM_A, "no-table", &data.join("other.db")),
        store(TEAM_A, "no-file", &data.join("absent.db")),
        store(TEAM_A, "outside", Path::new("/etc/passwd")),
    ] {
        testenv::apply_yaml(&client, &object, true)
            .await
            .with_context(|| format!("applying {object}"))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Trials

type Shared = Arc<OnceLock<Arc<Fixture>>>;

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let shared: Shared = Arc::default();
    let trials = vec![
        trial(
            &shared,
            "health_is_serving_and_reflection_lists_every_method",
            health_and_reflection,
        ),
        trial(
            &shared,
            "get_secret_reads_a_row_a_json_property_and_raw_bytes",
            get_secret,
        ),
        trial(
            &shared,
            "a_missing_key_or_property_is_no_secret",
            missing_is_no_secret,
        ),
        trial(
            &shared,
            "get_secret_map_parses_a_json_object",
            get_secret_map,
        ),
        trial(
            &shared,
            "get_all_secrets_finds_by_regexp_and_path_and_refuses_tags",
            get_all_secrets,
        ),
        trial(&shared, "push_then_read_back_then_delete", push_read_delete),
        trial(
            &shared,
            "the_operators_keep_alive_pings_keep_the_connection",
            keep_alive,
        ),
        trial(
            &shared,
            "an_empty_source_namespace_is_refused_on_every_data_call",
            empty_source_namespace,
        ),
        trial(
            &shared,
            "a_secret_store_reads_only_sqlitestores_of_its_own_namespace",
            namespace_rule,
        ),
        trial(
            &shared,
            "a_namespace_certificate_may_claim_only_its_own_secret_store",
            namespace_certificate,
        ),
        trial(
            &shared,
            "the_conformance_run_passes_with_a_namespace_certificate",
            conformance_run,
        ),
        trial(
            &shared,
            "validate_and_capabilities_report_the_store",
            validate_and_capabilities,
        ),
        trial(
            &shared,
            "the_servers_service_account_needs_only_get_on_sqlitestores",
            service_account_rbac,
        ),
        trial(
            &shared,
            "rotated_certificates_are_served_without_a_restart_and_sigterm_stops_it",
            rotation_and_shutdown,
        ),
        trial(
            &shared,
            "the_example_manifests_are_accepted_by_the_api_server",
            manifests_accepted,
        ),
    ];
    let names = trials.iter().map(Trial::name);
    if let Err(failed) = Selection::from(&args).set_up(
        names,
        &shared,
        "setting up the Python example server",
        || {
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
            setup().map(Arc::new)
        },
    ) {
        return failed;
    }
    let conclusion = libtest_mimic::run(&args, trials);
    // The trials are gone: this is the last owner, so the server and the control plane stop.
    drop(shared);
    conclusion.exit_code()
}

fn trial<F, Fut>(shared: &Shared, name: &'static str, body: F) -> Trial
where
    F: FnOnce(Arc<Fixture>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<()>>,
{
    let shared = shared.clone();
    Trial::test(name, move || {
        let fx = shared.get().ok_or("the fixture was not set up")?.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(body(fx.clone())).map_err(|e| {
            Failed::from(format!(
                "{e:#}\n--- last lines of the Python server's log\n{}",
                fx.server.log_tail(30)
            ))
        })
    })
}

// ---------------------------------------------------------------------------------------------
// Clients of the server, as the operator makes them

fn material(ca: &Ca, client: &Issued) -> TlsMaterial {
    TlsMaterial {
        ca: ca.pem().into_bytes(),
        cert: client.cert.clone().into_bytes(),
        key: client.key.clone().into_bytes(),
    }
}

fn pool() -> Pool {
    Pool::new(Settings::default(), PoolMetrics::default())
}

fn reference(namespace: &str, name: &str, store_ref_kind: &str) -> v1::ProviderReference {
    v1::ProviderReference {
        api_version: API_VERSION.into(),
        kind: KIND.into(),
        name: name.into(),
        namespace: namespace.into(),
        store_ref_kind: store_ref_kind.into(),
    }
}

impl Fixture {
    fn material(&self) -> TlsMaterial {
        material(&self.files.ca, &self.files.client)
    }

    /// A client of `server` for `reference`, on behalf of `source_namespace`.
    fn client_of(
        &self,
        server: &PythonServer,
        pool: &Pool,
        reference: v1::ProviderReference,
        source_namespace: &str,
    ) -> Result<RemoteClient> {
        let connection = pool.get(&server.address, Some(&self.material()))?;
        Ok(RemoteClient::new(
            connection,
            reference,
            source_namespace.into(),
        ))
    }

    fn client(
        &self,
        pool: &Pool,
        reference: v1::ProviderReference,
        source_namespace: &str,
    ) -> Result<RemoteClient> {
        self.client_of(&self.server, pool, reference, source_namespace)
    }

    /// Team A's SecretStore on the SqliteStore `name` of its namespace, used from team A.
    fn team_a(&self, pool: &Pool, name: &str) -> Result<RemoteClient> {
        self.client(pool, reference(TEAM_A, name, "SecretStore"), TEAM_A)
    }
}

fn key(key: &str) -> RemoteRef {
    RemoteRef {
        key: key.into(),
        ..RemoteRef::default()
    }
}

fn property(key: &str, property: &str) -> RemoteRef {
    RemoteRef {
        key: key.into(),
        property: Some(property.into()),
        ..RemoteRef::default()
    }
}

fn at(remote_key: &str, property: Option<&str>) -> PushRemoteRef {
    PushRemoteRef {
        remote_key: remote_key.into(),
        property: property.map(Into::into),
    }
}

fn push(remote: PushRemoteRef, secret_key: Option<&str>, value: &[u8]) -> PushRequest {
    PushRequest {
        remote,
        secret_key: secret_key.map(Into::into),
        value: value.to_vec(),
        metadata: None,
        source: Default::default(),
    }
}

fn map(entries: &[(&str, &str)]) -> std::collections::BTreeMap<String, Vec<u8>> {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
        .collect()
}

/// `got` must be `Err(NoSecret)`, the operator's "the secret does not exist".
fn expect_no_secret<T: std::fmt::Debug>(got: provider::Result<T>, what: &str) -> Result<()> {
    match got {
        Err(Error::NoSecret) => Ok(()),
        other => bail!("{what}: expected NoSecret (NOT_FOUND), got {other:?}"),
    }
}

/// `got` must be `Err(InvalidSpec)` (INVALID_ARGUMENT) whose message contains `words`.
fn expect_invalid<T: std::fmt::Debug>(
    got: provider::Result<T>,
    words: &str,
    what: &str,
) -> Result<()> {
    match got {
        Err(Error::InvalidSpec(message)) if message.contains(words) => Ok(()),
        other => {
            bail!("{what}: expected InvalidSpec (INVALID_ARGUMENT) saying {words:?}, got {other:?}")
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The trials' bodies

async fn health_and_reflection(fx: Arc<Fixture>) -> Result<()> {
    let pool = pool();
    let connection = pool.get(&fx.server.address, Some(&fx.material()))?;
    // What the operator's ProviderClass status is made of: health SERVING for service "" and
    // the methods through server reflection.
    let probe = provider_remote::probe(&connection)
        .await
        .map_err(anyhow::Error::msg)
        .context("the health check, as the operator's ProviderClass makes it")?;
    let mut methods = probe
        .methods
        .context("the server answered no reflection (grpc.reflection.v1)")?;
    methods.sort();
    let mut every = [
        "Capabilities",
        "DeleteSecret",
        "GetAllSecrets",
        "GetSecret",
        "GetSecretMap",
        "PushSecret",
        "SecretExists",
        "Validate",
    ];
    every.sort_unstable();
    ensure!(methods == every, "reflection lists {methods:?}");
    Ok(())
}

/// The operator pings an idle connection, and one whose calls send nothing for a while, every
/// 10 s, so that a dead peer is noticed between calls. grpc-core's default policy answers the
/// third such ping within 5 minutes with GOAWAY `too_many_pings`, ending the calls in flight;
/// the example permits them. Pings every second here.
async fn keep_alive(fx: Arc<Fixture>) -> Result<()> {
    let pool = Pool::new(
        Settings {
            keepalive_interval: Duration::from_secs(1),
            ..Settings::default()
        },
        PoolMetrics::default(),
    );
    let store = fx.team_a(&pool, "test-db")?;
    store.get_secret(&key("plain")).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    store.get_secret(&key("plain")).await?;
    let opened = pool.metrics().opened(&fx.server.address);
    ensure!(
        opened == 1,
        "{opened} connections opened for two calls 5 s apart: the server closed the first"
    );
    Ok(())
}

async fn get_secret(fx: Arc<Fixture>) -> Result<()> {
    let pool = pool();
    let store = fx.team_a(&pool, "test-db")?;
    for (remote, want, what) in [
        (key("plain"), &b"v0"[..], "a row's value"),
        (
            property("db", "user"),
            b"alice",
            "a string field of a JSON value",
        ),
        (
            property("db", "port"),
            b"5432",
            "a number field, as JSON text",
        ),
        (
            property("db", "tls.mode"),
            b"verify",
            "a nested field, `a.b`",
        ),
        (
            property("db", "tls"),
            br#"{"mode":"verify"}"#,
            "an object field, as JSON",
        ),
        (
            key("binary"),
            &[0, 255, 1],
            "bytes that are not UTF-8, unchanged",
        ),
        (
            RemoteRef {
                version: Some("7".into()),
                ..key("plain")
            },
            b"v0",
            "a version, ignored (the table keeps none)",
        ),
    ] {
        let got = store
            .get_secret(&remote)
            .await
            .with_context(|| format!("GetSecret {what}: {remote:?}"))?;
        ensure!(
            got == want,
            "GetSecret {what}: {remote:?} gave {:?}",
            String::from_utf8_lossy(&got)
        );
    }
    Ok(())
}

async fn missing_is_no_secret(fx: Arc<Fixture>) -> Result<()> {
    let pool = pool();
    let store = fx.team_a(&pool, "test-db")?;
    expect_no_secret(
        store.get_secret(&key("absent")).await,
        "GetSecret of a missing key",
    )?;
    expect_no_secret(
        store.get_secret(&property("db", "nope")).await,
        "GetSecret of a missing property",
    )?;
    expect_no_secret(
        store.get_secret(&property("not-json", "field")).await,
        "GetSecret of a property of a value that is not JSON",
    )?;
    expect_no_secret(
        store.get_secret_map(&key("absent")).await,
        "GetSecretMap of a missing key",
    )?;
    ensure!(
        !store.secret_exists(&at("absent", None)).await?,
        "SecretExists of a missing key said true"
    );
    Ok(())
}

async fn get_secret_map(fx: Arc<Fixture>) -> Result<()> {
    let pool = pool();
    let store = fx.team_a(&pool, "test-db")?;
    let got = store
        .get_secret_map(&key("db"))
        .await
        .context("GetSecretMap db")?;
    let want = map(&[
        ("port", "5432"),
        ("tls", r#"{"mode":"verify"}"#),
        ("user", "alice"),
    ]);
    ensure!(got == want, "GetSecretMap db gave {got:?}");
    let got = store
        .get_secret_map(&property("db", "tls"))
        .await
        .context("GetSecretMap of a property")?;
    ensure!(
        got == map(&[("mode", "verify")]),
        "GetSecretMap db.tls gave {got:?}"
    );
    expect_invalid(
        store.get_secret_map(&key("not-json")).await,
        "not a JSON object",
        "GetSecretMap of a value that is not a JSON object",
    )?;
    Ok(())
}

async fn get_all_secrets(fx: Arc<Fixture>) -> Result<()> {
    let pool = pool();
    let store = fx.team_a(&pool, "test-db")?;
    let find = |path: Option<&str>, regexp: Option<&str>| FindRequest {
        path: path.map(Into::into),
        name_regexp: regexp.map(Into::into),
        ..FindRequest::default()
    };
    let apps = map(&[("app/one", "1"), ("app/two", "2")]);
    for (request, want, what) in [
        (find(None, Some("^app/")), apps.clone(), "by name.regexp"),
        (
            find(Some("app/"), None),
            apps.clone(),
            "by path, a key prefix",
        ),
        (
            find(Some("app/"), Some("two")),
            map(&[("app/two", "2")]),
            "by path and regexp",
        ),
        (
            find(Some("other/"), Some("^app/")),
            map(&[]),
            "nothing matching",
        ),
    ] {
        let got = store
            .get_all_secrets(&request)
            .await
            .with_context(|| format!("GetAllSecrets {what}"))?;
        ensure!(
            got == want,
            "GetAllSecrets {what}: {request:?} gave {got:?}"
        );
    }
    let tags = FindRequest {
        tags: [("team".to_owned(), "a".to_owned())].into(),
        ..FindRequest::default()
    };
    expect_invalid(
        store.get_all_secrets(&tags).await,
        "tags",
        "GetAllSecrets by tags",
    )?;
    expect_invalid(
        store.get_all_secrets(&find(None, Some("("))).await,
        "regexp",
        "GetAllSecrets with a broken regexp",
    )?;
    Ok(())
}

async fn push_read_delete(fx: Arc<Fixture>) -> Result<()> {
    let pool = pool();
    let store = fx.team_a(&pool, "test-db")?;

    // One key of a Secret, as a row of its own.
    let token = at("pushed/token", None);
    ensure!(
        !store.secret_exists(&token).await?,
        "pushed/token exists before the push"
    );
    store
        .push_secret(&push(token.clone(), Some("api-token"), b"t0k3n"))
        .await
        .context("PushSecret of one key")?;
    ensure!(
        store.secret_exists(&token).await?,
        "SecretExists after the push said false"
    );
    ensure!(
        store.get_secret(&key("pushed/token")).await? == b"t0k3n",
        "the pushed value did not read back"
    );

    // The whole Secret: its keys as one JSON object.
    store
        .push_secret(&push(
            at("pushed/whole", None),
            None,
            br#"{"a":"1","b":"2"}"#,
        ))
        .await
        .context("PushSecret of a whole Secret")?;
    let got = store.get_secret_map(&key("pushed/whole")).await?;
    ensure!(
        got == map(&[("a", "1"), ("b", "2")]),
        "the whole Secret read back as {got:?}"
    );

    // Fields of one JSON object, one push each.
    let password = at("pushed/db", Some("password"));
    store
        .push_secret(&push(password.clone(), Some("db-password"), b"pa55"))
        .await
        .context("PushSecret of a property")?;
    store
        .push_secret(&push(
            at("pushed/db", Some("user")),
            Some("db-user"),
            b"bob",
        ))
        .await
        .context("PushSecret of a second property")?;
    let got = store.get_secret(&key("pushed/db")).await?;
    ensure!(
        got == br#"{"password":"pa55","user":"bob"}"#,
        "two pushed properties read back as {:?}",
        String::from_utf8_lossy(&got)
    );
    ensure!(
        store.secret_exists(&password).await?,
        "SecretExists of a pushed property said false"
    );

    // A field is not written into a value that is not a JSON object: refused, not overwritten.
    match store
        .push_secret(&push(at("not-json", Some("x")), Some("k"), b"v"))
        .await
    {
        Err(Error::Conflict(_)) => {}
        other => bail!(
            "a property pushed into a value that is not JSON: expected Conflict (FAILED_PRECONDITION), got {other:?}"
        ),
    }
    ensure!(
        store.get_secret(&key("not-json")).await? == b"just text",
        "not-json was changed"
    );

    // Deleting a property keeps the others; deleting the key removes the row; again is fine.
    store
        .delete_secret(&password)
        .await
        .context("DeleteSecret of a property")?;
    expect_no_secret(
        store.get_secret(&property("pushed/db", "password")).await,
        "GetSecret of a deleted property",
    )?;
    ensure!(
        !store.secret_exists(&password).await?,
        "a deleted property still exists"
    );
    ensure!(
        store.get_secret(&property("pushed/db", "user")).await? == b"bob",
        "deleting one property lost the other"
    );
    store
        .delete_secret(&token)
        .await
        .context("DeleteSecret of a key")?;
    expect_no_secret(
        store.get_secret(&key("pushed/token")).await,
        "GetSecret after DeleteSecret",
    )?;
    ensure!(
        !store.secret_exists(&token).await?,
        "SecretExists after DeleteSecret said true"
    );
    store
        .delete_secret(&token)
        .await
        .context("DeleteSecret of a key already gone")?;
    Ok(())
}

async fn empty_source_namespace(fx: Arc<Fixture>) -> Result<()> {
    let pool = pool();
    let store = fx.client(&pool, reference(TEAM_A, "test-db", "SecretStore"), "")?;
    let words = "source_namespace is required";
    expect_invalid(store.get_secret(&key("plain")).await, words, "GetSecret")?;
    expect_invalid(
        store.get_secret_map(&key("db")).await,
        words,
        "GetSecretMap",
    )?;
    expect_invalid(
        store.get_all_secrets(&FindRequest::default()).await,
        words,
        "GetAllSecrets",
    )?;
    let remote = at("pushed/refused", None);
    expect_invalid(
        store
            .push_secret(&push(remote.clone(), Some("k"), b"v"))
            .await,
        words,
        "PushSecret",
    )?;
    expect_invalid(store.secret_exists(&remote).await, words, "SecretExists")?;
    expect_invalid(store.delete_secret(&remote).await, words, "DeleteSecret")?;
    // Validate is also the operator checking a store, with no caller: allowed.
    ensure!(
        store
            .validate()
            .await
            .context("Validate without a source namespace")?
            == Validation::Ready,
        "Validate without a source namespace was not Ready"
    );
    Ok(())
}

async fn namespace_rule(fx: Arc<Fixture>) -> Result<()> {
    let pool = pool();
    // A SecretStore in team A naming team B's SqliteStore: refused, naming the object.
    let across = fx.client(&pool, reference(TEAM_B, "test-db", "SecretStore"), TEAM_A)?;
    match across.get_secret(&key("plain")).await {
        Err(Error::Credentials { reference, reason })
            if reference == "SqliteStore team-b/test-db" && reason.contains("team-a") => {}
        other => bail!(
            "a SecretStore in team-a reading team-b's SqliteStore: expected Credentials \
             (PERMISSION_DENIED) naming SqliteStore team-b/test-db, got {other:?}"
        ),
    }
    // A ClusterSecretStore may.
    let cluster = fx.client(
        &pool,
        reference(TEAM_B, "test-db", "ClusterSecretStore"),
        TEAM_A,
    )?;
    ensure!(
        cluster
            .get_secret(&key("plain"))
            .await
            .context("a ClusterSecretStore across namespaces")?
            == b"v0",
        "a ClusterSecretStore read the wrong value"
    );
    // No namespace in the reference: the caller's.
    let own = fx.client(&pool, reference("", "test-db", "SecretStore"), TEAM_B)?;
    ensure!(
        own.get_secret(&key("plain"))
            .await
            .context("a reference without a namespace")?
            == b"v0",
        "a reference without a namespace read the wrong value"
    );
    Ok(())
}

/// A client of the server for `reference` on behalf of `source_namespace`, with team A's
/// namespace certificate (the one the operator writes into team A's ProviderClass Secret).
fn as_team_a(
    fx: &Fixture,
    pool: &Pool,
    reference: v1::ProviderReference,
    source_namespace: &str,
) -> Result<RemoteClient> {
    let tenant = material(&fx.files.ca, &fx.files.ca.namespace_client(TEAM_A));
    let connection = pool.get(&fx.server.address, Some(&tenant))?;
    Ok(RemoteClient::new(
        connection,
        reference,
        source_namespace.into(),
    ))
}

/// Issue 40, item 4: team A, holding its namespace's certificate, calls the server directly as a
/// ClusterSecretStore or for team B to read team B's store.
async fn namespace_certificate(fx: Arc<Fixture>) -> Result<()> {
    let pool = pool();
    let own = as_team_a(
        &fx,
        &pool,
        reference(TEAM_A, "test-db", "SecretStore"),
        TEAM_A,
    )?;
    ensure!(
        own.get_secret(&key("plain"))
            .await
            .context("team A's own store")?
            == b"v0",
        "team A's own store read the wrong value"
    );
    for (kind, provider_ns, ns) in [
        ("ClusterSecretStore", TEAM_B, TEAM_A),
        ("ClusterSecretStore", TEAM_B, TEAM_B),
        ("ClusterSecretStore", TEAM_A, TEAM_A),
        ("SecretStore", TEAM_B, TEAM_B),
    ] {
        let attack = as_team_a(&fx, &pool, reference(provider_ns, "test-db", kind), ns)?;
        match attack.get_secret(&key("plain")).await {
            Err(Error::Credentials { reason, .. })
                if reason.contains(
                    "may claim only store_ref_kind SecretStore with source_namespace and provider_ref.namespace \"team-a\"",
                ) => {}
            other => bail!(
                "team A's certificate as {kind} of {provider_ns} for {ns}: expected Credentials \
                 (PERMISSION_DENIED) saying what it may claim, got {other:?}"
            ),
        }
    }
    Ok(())
}

/// `provider conformance`'s run against the example, with team A's certificate: every check
/// passes, the two about identity among them.
async fn conformance_run(fx: Arc<Fixture>) -> Result<()> {
    use provider_conformance::{Options, Outcome, Read, names};
    let tenant = material(&fx.files.ca, &fx.files.ca.namespace_client(TEAM_A));
    let mut options = Options::new(
        fx.server.address.clone(),
        Some(tenant),
        reference(TEAM_A, "test-db", "SecretStore"),
    );
    options.reads = vec![Read {
        key: "plain".into(),
        value: b"v0".to_vec(),
    }];
    let report = provider_conformance::run(options).await;
    ensure!(report.passed(), "the conformance run failed:\n{report}");
    for check in [names::CLIENT_CERTIFICATE_REQUIRED, names::NAMESPACE_CLAIMS] {
        ensure!(
            report.outcome(check) == Some(Outcome::Pass),
            "{check} did not pass:\n{report}"
        );
    }
    Ok(())
}

async fn validate_and_capabilities(fx: Arc<Fixture>) -> Result<()> {
    let pool = pool();
    let good = fx.team_a(&pool, "test-db")?;
    ensure!(
        good.validate().await.context("Validate")? == Validation::Ready,
        "Validate was not Ready"
    );
    ensure!(
        good.capabilities().await.context("Capabilities")?
            == api::provider_kinds::Capabilities::ReadWrite,
        "Capabilities was not ReadWrite"
    );

    // The file opens but has no table: a failed check, in `valid`/`error` as ESO's servers do.
    match fx.team_a(&pool, "no-table")?.validate().await {
        Err(Error::Backend(message)) if message.contains("table 'secrets' does not exist") => {}
        other => bail!(
            "Validate of a SqliteStore whose table is missing: expected valid=false naming the table, got {other:?}"
        ),
    }
    expect_invalid(
        fx.team_a(&pool, "no-table")?
            .get_secret(&key("plain"))
            .await,
        "does not exist",
        "GetSecret from a missing table",
    )?;
    // The file cannot be opened: UNAVAILABLE, so the operator backs off and retries.
    for (what, got) in [
        (
            "Validate",
            fx.team_a(&pool, "no-file")?.validate().await.map(|_| ()),
        ),
        (
            "GetSecret",
            fx.team_a(&pool, "no-file")?
                .get_secret(&key("plain"))
                .await
                .map(|_| ()),
        ),
    ] {
        match got {
            Err(Error::Unavailable(message)) if message.contains("cannot open") => {}
            other => bail!(
                "{what} of a SqliteStore whose file is missing: expected Unavailable, got {other:?}"
            ),
        }
    }
    expect_invalid(
        fx.team_a(&pool, "ghost")?.validate().await,
        "not found",
        "Validate of a SqliteStore that does not exist",
    )?;
    expect_invalid(
        fx.team_a(&pool, "outside")?.get_secret(&key("root")).await,
        "outside the server's data directory",
        "GetSecret from a file outside --data-dir",
    )?;
    let vault = v1::ProviderReference {
        kind: "Vault".into(),
        api_version: "providers.external-secrets.io/v1alpha1".into(),
        ..reference(TEAM_A, "test-db", "SecretStore")
    };
    expect_invalid(
        fx.client(&pool, vault, TEAM_A)?.capabilities().await,
        "this server serves SqliteStore",
        "Capabilities of a kind the server does not serve",
    )?;
    Ok(())
}

async fn service_account_rbac(fx: Arc<Fixture>) -> Result<()> {
    // A second server that reads the cluster as server.yaml's ServiceAccount, with its token:
    // the ClusterRole there (get on sqlitestores) is all it needs.
    let client = fx.cp.client().await;
    let token = testenv::service_account_token(
        &client,
        SERVER_NAMESPACE,
        SERVER_ACCOUNT,
        &[],
        Duration::from_secs(3600),
    )
    .await?;
    let kubeconfig = fx.files.dir.path().join("service-account.kubeconfig");
    let ca = base64::engine::general_purpose::STANDARD.encode(fx.cp.ca_cert_pem());
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    \
             server: {}\n    certificate-authority-data: {ca}\nusers:\n- name: {SERVER_ACCOUNT}\n  \
             user:\n    token: {token}\n",
            fx.cp.server_url()
        ),
    )?;
    let certs = fx.files.dir.path().join("certs");
    let server = start_server(&fx.files, &certs, &kubeconfig, "server-service-account")?;
    let pool = pool();
    let store = fx.client_of(
        &server,
        &pool,
        reference(TEAM_B, "test-db", "SecretStore"),
        TEAM_B,
    )?;
    let got = store.get_secret(&key("plain")).await.map_err(|e| {
        anyhow::anyhow!("GetSecret through a server running as {SERVER_NAMESPACE}/{SERVER_ACCOUNT}: {e}\n--- its log\n{}", server.log_tail(30))
    })?;
    ensure!(got == b"v0", "the ServiceAccount's server read {got:?}");
    Ok(())
}

async fn manifests_accepted(fx: Arc<Fixture>) -> Result<()> {
    // crd.yaml and server.yaml were applied by the setup; these are the ones a team writes.
    let client = fx.cp.client().await;
    for file in [
        "sqlitestore.yaml",
        "providerclass.yaml",
        "secretstore.yaml",
        "externalsecret.yaml",
        "pushsecret.yaml",
    ] {
        let yaml = std::fs::read_to_string(example().join(file))?;
        testenv::apply_yaml(&client, &yaml, true)
            .await
            .with_context(|| format!("applying {file} with strict field validation"))?;
    }
    Ok(())
}

async fn rotation_and_shutdown(fx: Arc<Fixture>) -> Result<()> {
    // A server of its own, since its certificates change.
    let certs = fx.files.dir.path().join("certs-rotated");
    std::fs::create_dir_all(&certs)?;
    let old_ca = Ca::new("before-rotation");
    write_server_files(&certs, &old_ca, &old_ca.server());
    let server = start_server(
        &fx.files,
        &certs,
        &fx.cp.kubeconfig_path(),
        "server-rotated",
    )?;
    let team_a = reference(TEAM_A, "test-db", "SecretStore");
    let read = |ca: &Ca, client: &Issued| {
        // A new pool: a connection per TLS material, as the operator makes after a rotation.
        let pool = pool();
        let store = pool
            .get(&server.address, Some(&material(ca, client)))
            .map(|c| RemoteClient::new(c, team_a.clone(), TEAM_A.into()));
        async move {
            store?
                .get_secret(&key("plain"))
                .await
                .map_err(anyhow::Error::from)
        }
    };
    let old_client = old_ca.client();
    read(&old_ca, &old_client)
        .await
        .context("a call before the rotation")?;

    // A new CA, server certificate and client CA, written as a Secret volume changes them.
    let new_ca = Ca::new("after-rotation");
    write_server_files(&certs, &new_ca, &new_ca.server());
    let new_client = new_ca.client();
    read(&new_ca, &new_client)
        .await
        .context("a call with the new certificates, the server not restarted")?;
    ensure!(
        read(&old_ca, &old_client).await.is_err(),
        "a client of the old CA is still served after the rotation"
    );

    server.stop().map_err(|e| {
        anyhow::anyhow!(
            "SIGTERM did not stop the server: {e}\n{}",
            server.log_tail(30)
        )
    })
}
