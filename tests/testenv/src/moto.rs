//! A stand-in for AWS: [moto](https://docs.getmoto.org) in server mode, from a venv made of the
//! hash-pinned `tests/testenv/moto/requirements.txt` (under the target directory, `moto-venv`,
//! reused while the file is unchanged), and helpers that write and read fixtures with boto3,
//! a real AWS client, from the same venv.
//!
//! [`moto`] (or [`Moto::shared`]) is one server per test process, started by whichever test
//! asks first; tests that share it keep to names of their own. A test that needs a server to
//! itself, e.g. to count calls exactly while other tests run, starts one with
//! [`Moto::start_own`]. A missing python3 or venv support fails with the command that fixes it.
//!
//! Values given to the helpers reach Python as JSON on stdin, never inside the code, and are
//! never logged; moto's recording (see [`Moto::start_recording`]) holds request bodies, so its
//! file is read only to name the calls in it.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use base64::Engine;
use serde_json::{Value, json};

use crate::process::Supervisor;

/// How long moto gets to listen and answer, including importing every service it knows.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// How long one call to moto's own API may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What the helpers' boto3 clients use; moto accepts any credentials.
pub const ACCESS_KEY_ID: &str = "testing";
pub const SECRET_ACCESS_KEY: &str = "testing";
/// ESO's documentation stores name eu-central-1, and moto keeps each region apart.
pub const REGION: &str = "eu-central-1";

/// Runs moto on a port the kernel picks, so no other process can take it between our choosing it
/// and moto binding it. The recorder reads its file's path once, when moto is imported.
const SERVER_PY: &str = r#"
import os, sys, time
os.environ["MOTO_RECORDER_FILEPATH"] = sys.argv[1]
os.environ.pop("MOTO_ENABLE_RECORDING", None)
import moto
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
server = ThreadedMotoServer("127.0.0.1", 0, verbose=False)
server.start()
port = server.get_host_and_port()[1]
# What moto puts in URLs it hands out (SQS queue URLs, for one).
os.environ["MOTO_PORT"] = str(port)
print(f"moto {moto.__version__} listening on port {port}", flush=True)
# Without setpriv nothing else ends a shared server (never dropped) when the tests are gone.
parent = os.getppid()
while os.getppid() == parent:
    time.sleep(0.5)
"#;

/// What every [`Moto::boto3`] script starts with: `args` is the JSON given on stdin (`None`
/// without any).
const PREAMBLE: &str = "\
import base64, json, os, sys
import boto3
args = json.loads(sys.stdin.read() or 'null')
";

/// `tests/testenv/moto/requirements.txt`: moto, its server's extras, and boto3.
pub fn requirements_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("moto/requirements.txt")
}

/// The python of the moto venv, made from [`requirements_path`] when needed.
pub fn venv_python() -> Result<PathBuf> {
    crate::python_example::venv(&requirements_path(), "moto-venv")
}

/// The test process's shared moto server, started on first use; see [`Moto::shared`].
pub async fn moto() -> Result<&'static Moto> {
    tokio::task::spawn_blocking(Moto::shared)
        .await
        .context("the thread starting moto panicked")?
}

/// Where a run started by [`Moto::in_environment`] finds its parent's server.
const ENDPOINT_VARIABLE: &str = "EXTERNAL_SECRETS_TEST_MOTO_ENDPOINT";
const DIR_VARIABLE: &str = "EXTERNAL_SECRETS_TEST_MOTO_DIR";

/// Which run of a test binary this is; see [`Moto::in_environment`].
pub enum MotoRun {
    /// The first run, done: the exit code of the run it started.
    Parent(std::process::ExitCode),
    /// The run with the variables set, and the parent's server.
    Child(Moto),
}

/// What [`Moto::create_secret`] and [`Moto::create_secret_binary`] made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreatedSecret {
    pub arn: String,
    /// The `AWSCURRENT` version.
    pub version_id: String,
}

/// A running moto server; dropping it stops the process and deletes its folder.
pub struct Moto {
    // Field order matters: the process must be gone before its folder is removed.
    supervisor: Supervisor,
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    python: PathBuf,
    address: SocketAddr,
    endpoint: String,
}

impl Moto {
    /// One server for the whole test process, started by the first caller (the others wait).
    /// It is never dropped: it ends with the process (see the module's documentation), and its
    /// folder is removed by the next start after that. A failed start is not retried: every
    /// caller gets its error.
    ///
    /// Blocks; from async code use [`moto`].
    pub fn shared() -> Result<&'static Moto> {
        static SHARED: OnceLock<Result<Moto, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| Self::start_own().map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow!("the shared moto server did not start: {e}"))
    }

    /// For test binaries whose code finds AWS through its environment, as the operator does
    /// (`AWS_ENDPOINT_URL`, ESO's `AWS_SECRETSMANAGER_ENDPOINT`, ...). A running process cannot
    /// safely set its own environment, so the first run starts a server and runs this binary
    /// again, same arguments, with `variables(endpoint)` set; that run gets [`MotoRun::Child`]
    /// with the parent's server, which ends when the parent does.
    pub fn in_environment(
        variables: impl FnOnce(&str) -> Vec<(String, String)>,
    ) -> Result<MotoRun> {
        if let (Some(endpoint), Some(dir)) = (
            std::env::var_os(ENDPOINT_VARIABLE),
            std::env::var_os(DIR_VARIABLE),
        ) {
            let endpoint = endpoint
                .into_string()
                .map_err(|_| anyhow!("{ENDPOINT_VARIABLE} is not UTF-8"))?;
            let address = endpoint
                .trim_start_matches("http://")
                .parse()
                .with_context(|| format!("{ENDPOINT_VARIABLE}={endpoint:?}"))?;
            return Ok(MotoRun::Child(Self {
                supervisor: Supervisor::new()?,
                dir: None,
                path: PathBuf::from(dir),
                python: venv_python()?,
                address,
                endpoint,
            }));
        }
        let moto = Self::start_own()?;
        let status = Command::new(std::env::current_exe().context("this test binary's path")?)
            .args(std::env::args_os().skip(1))
            .envs(variables(moto.endpoint()))
            .env(ENDPOINT_VARIABLE, moto.endpoint())
            .env(DIR_VARIABLE, moto.dir())
            .status()
            .context("running this test binary again with moto in its environment")?;
        let code = status
            .code()
            .map_or(101, |c| u8::try_from(c).unwrap_or(101));
        Ok(MotoRun::Parent(std::process::ExitCode::from(code)))
    }

    /// A server of the caller's own, with state and a recording no other test touches. Makes
    /// the venv if needed, starts moto on a free 127.0.0.1 port and waits until it answers.
    /// Blocks.
    pub fn start_own() -> Result<Self> {
        let started = Instant::now();
        let python = venv_python()?;
        let venv_ready = started.elapsed();
        let base = crate::python_example::target_dir().join("moto-servers");
        std::fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
        remove_folders_of_ended_processes(&base);
        let dir = tempfile::Builder::new()
            .prefix(&format!("{}-", std::process::id()))
            .tempdir_in(&base)
            .context("creating moto's folder")?;
        let path = dir.path().to_owned();
        let mut moto = Self {
            supervisor: Supervisor::new()?,
            dir: Some(dir),
            path,
            python,
            address: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            endpoint: String::new(),
        };
        let version = moto
            .boot()
            .with_context(|| format!("starting moto failed; log: {}", moto.log_path().display()))?;
        eprintln!(
            "testenv: moto {version} ready at {} in {:.1}s (venv {:.1}s; log {}){}",
            moto.endpoint,
            started.elapsed().as_secs_f64(),
            venv_ready.as_secs_f64(),
            moto.log_path().display(),
            crate::pdeathsig_note()
        );
        Ok(moto)
    }

    /// Starts the process, learns its port from its log and waits until its API answers;
    /// returns moto's version.
    fn boot(&mut self) -> Result<String> {
        let recording = self.path.join("recording.jsonl");
        self.supervisor.spawn(
            "moto",
            &self.python,
            vec![
                "-c".into(),
                SERVER_PY.into(),
                recording.to_string_lossy().into_owned(),
            ],
            &self.log_path(),
        )?;
        let deadline = Instant::now() + START_TIMEOUT;
        let (version, port) = loop {
            let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
            if let Some(line) = log.lines().find(|l| l.contains(" listening on port ")) {
                let (head, port) = line.split_once(" listening on port ").unwrap_or_default();
                let port: u16 = port
                    .trim()
                    .parse()
                    .with_context(|| format!("moto printed the port {port:?}"))?;
                break (head.trim_start_matches("moto ").to_owned(), port);
            }
            self.fail_if_exited()?;
            ensure!(
                Instant::now() < deadline,
                "moto did not say it listens within {START_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        self.address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        self.endpoint = format!("http://{}", self.address);
        loop {
            let last = match self.moto_api("GET", "/moto-api/") {
                Ok(_) => return Ok(version),
                Err(e) => e,
            };
            self.fail_if_exited()?;
            if Instant::now() > deadline {
                return Err(last.context(format!(
                    "moto did not answer GET /moto-api/ within {START_TIMEOUT:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn fail_if_exited(&self) -> Result<()> {
        crate::fail_if_exited(&self.supervisor, &self.path)
    }

    /// `http://127.0.0.1:<port>`: what `AWS_ENDPOINT_URL` (or a client's endpoint) is set to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The venv's python, which has boto3.
    pub fn python(&self) -> &Path {
        &self.python
    }

    /// moto's output: a line per request (method, path, status), never a body.
    pub fn log_path(&self) -> PathBuf {
        self.path.join("moto.log")
    }

    /// The server's folder (its log and its recording).
    pub fn dir(&self) -> &Path {
        &self.path
    }

    /// Runs the Python `script` with boto3 against this server: `AWS_ENDPOINT_URL`, the
    /// credentials `testing`/`testing` and the region `us-east-1` are set, and nothing else of
    /// the caller's AWS configuration reaches it. `base64`, `json`, `os`, `sys` and `boto3` are
    /// imported; `args` is `None`. Returns what it printed; an error carries its stderr (not its
    /// stdout, where values may be).
    pub fn boto3(&self, script: &str) -> Result<String> {
        self.run_boto3(script, None)
    }

    /// [`boto3`](Self::boto3) with `args` given to the script as the variable `args`: how values
    /// reach it without becoming code.
    pub fn boto3_with(&self, script: &str, args: &Value) -> Result<String> {
        self.run_boto3(script, Some(args))
    }

    fn run_boto3(&self, script: &str, args: Option<&Value>) -> Result<String> {
        let mut command = Command::new(&self.python);
        command.arg("-c").arg(format!("{PREAMBLE}{script}"));
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("AWS_") {
                command.env_remove(name);
            }
        }
        command
            .env("AWS_ENDPOINT_URL", &self.endpoint)
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)
            .env("AWS_DEFAULT_REGION", REGION)
            // A profile in the user's files could still set a region, a retry mode or a role.
            .env("AWS_CONFIG_FILE", "/dev/null")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().context("starting the venv's python")?;
        let mut stdin = child.stdin.take().context("the python's stdin")?;
        let input = match args {
            Some(args) => serde_json::to_vec(args)?,
            None => Vec::new(),
        };
        // From a thread of its own: a script that prints much before it reads would otherwise
        // block on a full stdout pipe while we block on a full stdin one.
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let output = child.wait_with_output().context("waiting for the python")?;
        let written = writer
            .join()
            .map_err(|_| anyhow!("the thread feeding the python's stdin panicked"))?;
        ensure!(
            output.status.success(),
            "a boto3 script against moto at {} failed ({})\n--- stderr\n{}",
            self.endpoint,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        written.context("writing the boto3 script's arguments")?;
        String::from_utf8(output.stdout).context("the boto3 script printed something not UTF-8")
    }

    /// Runs `script`, which prints one JSON document, and parses it.
    fn boto3_json(&self, script: &str, args: &Value) -> Result<Value> {
        let out = self.boto3_with(script, args)?;
        serde_json::from_str(&out).context("the boto3 script printed something not JSON")
    }

    /// Secrets Manager `CreateSecret` with a `SecretString`.
    pub fn create_secret(&self, name: &str, value: &str) -> Result<CreatedSecret> {
        self.create_secret_with(name, json!({"SecretString": value}))
    }

    /// Secrets Manager `CreateSecret` with a `SecretBinary`.
    pub fn create_secret_binary(&self, name: &str, value: &[u8]) -> Result<CreatedSecret> {
        let b64 = base64::engine::general_purpose::STANDARD.encode(value);
        self.create_secret_with(name, json!({"SecretBinary": b64}))
    }

    fn create_secret_with(&self, name: &str, mut value: Value) -> Result<CreatedSecret> {
        value["Name"] = json!(name);
        let created = self
            .boto3_json(
                "\
sm = boto3.client('secretsmanager')
if 'SecretBinary' in args:
    args['SecretBinary'] = base64.b64decode(args['SecretBinary'])
r = sm.create_secret(**args)
print(json.dumps({'arn': r['ARN'], 'version_id': r['VersionId']}))
",
                &value,
            )
            .with_context(|| format!("creating the secret {name}"))?;
        Ok(CreatedSecret {
            arn: string_field(&created, "arn")?,
            version_id: string_field(&created, "version_id")?,
        })
    }

    /// Secrets Manager `PutSecretValue` with a `SecretString`: a new `AWSCURRENT` version, whose
    /// id it returns.
    pub fn put_secret_value(&self, name: &str, value: &str) -> Result<String> {
        let put = self
            .boto3_json(
                "\
r = boto3.client('secretsmanager').put_secret_value(**args)
print(json.dumps(r['VersionId']))
",
                &json!({"SecretId": name, "SecretString": value}),
            )
            .with_context(|| format!("putting a value of the secret {name}"))?;
        put.as_str()
            .map(str::to_owned)
            .context("PutSecretValue answered without a VersionId")
    }

    /// Secrets Manager `TagResource`: adds `tags`, replacing the values of keys it had.
    pub fn tag_secret(&self, name: &str, tags: &[(&str, &str)]) -> Result<()> {
        self.boto3_with(
            "boto3.client('secretsmanager').tag_resource(**args)\n",
            &json!({"SecretId": name, "Tags": aws_tags(tags)}),
        )
        .with_context(|| format!("tagging the secret {name}"))?;
        Ok(())
    }

    /// The `SecretString` of the secret's `AWSCURRENT` version; `None` when there is no such
    /// secret. A secret holding a `SecretBinary` is an error.
    pub fn get_secret_string(&self, name: &str) -> Result<Option<String>> {
        let value = self
            .get_secret_value(name)
            .with_context(|| format!("reading the secret {name}"))?;
        match value {
            None => Ok(None),
            Some(v) => match v["SecretString"].as_str() {
                Some(s) => Ok(Some(s.to_owned())),
                None => bail!("the secret {name} has no SecretString"),
            },
        }
    }

    /// The `SecretBinary` of the secret's `AWSCURRENT` version; `None` when there is no such
    /// secret. A secret holding a `SecretString` is an error.
    pub fn get_secret_binary(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let value = self
            .get_secret_value(name)
            .with_context(|| format!("reading the secret {name}"))?;
        match value {
            None => Ok(None),
            Some(v) => match v["SecretBinary"].as_str() {
                Some(b64) => Ok(Some(
                    base64::engine::general_purpose::STANDARD
                        .decode(b64)
                        .context("SecretBinary came back as something not base64")?,
                )),
                None => bail!("the secret {name} has no SecretBinary"),
            },
        }
    }

    fn get_secret_value(&self, name: &str) -> Result<Option<Value>> {
        let value = self.boto3_json(
            "\
sm = boto3.client('secretsmanager')
try:
    r = sm.get_secret_value(SecretId=args)
except sm.exceptions.ResourceNotFoundException:
    print('null')
else:
    out = {k: r[k] for k in ('SecretString',) if k in r}
    if 'SecretBinary' in r:
        out['SecretBinary'] = base64.b64encode(r['SecretBinary']).decode()
    print(json.dumps(out))
",
            &json!(name),
        )?;
        Ok((!value.is_null()).then_some(value))
    }

    /// The secret's tags (`DescribeSecret`); a missing secret is an error.
    pub fn secret_tags(&self, name: &str) -> Result<BTreeMap<String, String>> {
        let tags = self
            .boto3_json(
                "\
r = boto3.client('secretsmanager').describe_secret(SecretId=args)
print(json.dumps(r.get('Tags', [])))
",
                &json!(name),
            )
            .with_context(|| format!("reading the tags of the secret {name}"))?;
        tag_map(&tags)
    }

    /// SSM `PutParameter` (creating or overwriting it) of `type_` (`String`, `StringList` or
    /// `SecureString`, encrypted with the default key), then `AddTagsToResource` when there are
    /// `tags` (AWS refuses tags on an overwrite). Returns the parameter's new version.
    pub fn put_parameter(
        &self,
        name: &str,
        value: &str,
        type_: &str,
        tags: &[(&str, &str)],
    ) -> Result<u64> {
        let put = self
            .boto3_json(
                "\
ssm = boto3.client('ssm')
r = ssm.put_parameter(Name=args['Name'], Value=args['Value'], Type=args['Type'], Overwrite=True)
if args['Tags']:
    ssm.add_tags_to_resource(ResourceType='Parameter', ResourceId=args['Name'], Tags=args['Tags'])
print(json.dumps(r['Version']))
",
                &json!({"Name": name, "Value": value, "Type": type_, "Tags": aws_tags(tags)}),
            )
            .with_context(|| format!("putting the parameter {name}"))?;
        put.as_u64()
            .context("PutParameter answered without a Version")
    }

    /// The parameter's value (`GetParameter`, decrypted); `None` when there is no such
    /// parameter.
    pub fn get_parameter(&self, name: &str) -> Result<Option<String>> {
        let value = self
            .boto3_json(
                "\
ssm = boto3.client('ssm')
try:
    r = ssm.get_parameter(Name=args, WithDecryption=True)
except ssm.exceptions.ParameterNotFound:
    print('null')
else:
    print(json.dumps(r['Parameter']['Value']))
",
                &json!(name),
            )
            .with_context(|| format!("reading the parameter {name}"))?;
        match value {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s)),
            _ => bail!("GetParameter answered with a value that is not a string"),
        }
    }

    /// The parameter's tags (`ListTagsForResource`); a missing parameter is an error.
    pub fn parameter_tags(&self, name: &str) -> Result<BTreeMap<String, String>> {
        let tags = self
            .boto3_json(
                "\
r = boto3.client('ssm').list_tags_for_resource(ResourceType='Parameter', ResourceId=args)
print(json.dumps(r.get('TagList', [])))
",
                &json!(name),
            )
            .with_context(|| format!("reading the tags of the parameter {name}"))?;
        tag_map(&tags)
    }

    /// Empties the recording and records every request from now on (moto's
    /// `/moto-api/recorder/`); see [`recorded_actions`](Self::recorded_actions). On the shared
    /// server other tests' requests are recorded too: count exactly on a server of one's own.
    pub fn start_recording(&self) -> Result<()> {
        self.moto_api("POST", "/moto-api/recorder/reset-recording")?;
        self.moto_api("POST", "/moto-api/recorder/start-recording")?;
        Ok(())
    }

    /// Stops recording; what was recorded stays readable.
    pub fn stop_recording(&self) -> Result<()> {
        self.moto_api("POST", "/moto-api/recorder/stop-recording")?;
        Ok(())
    }

    /// The requests recorded since [`start_recording`](Self::start_recording), in order, each
    /// as `(service, action)`: the service of its SigV4 credential scope (`sts`,
    /// `secretsmanager`, `ssm`, …; for unsigned STS calls such as `AssumeRoleWithWebIdentity`,
    /// `sts`, as moto routes them), and the operation from `X-Amz-Target` (the part after its
    /// `.`) or the form's `Action` (`AssumeRole`, `GetSecretValue`, …). A request that names
    /// neither (a REST API's) is `<METHOD> <path>`; one whose service cannot be told has `""`.
    ///
    /// moto records a request before answering it: a call it refused counts too.
    /// The form fields of each recorded call of `action` (STS's calls are forms: `RoleArn`,
    /// `WebIdentityToken`, ...), for a test that checks what a call carried. Holds values: never
    /// print it.
    pub fn recorded_forms(&self, action: &str) -> Result<Vec<BTreeMap<String, String>>> {
        let recording = self.moto_api("GET", "/moto-api/recorder/download-recording")?;
        let recording =
            String::from_utf8(recording).context("moto's recording is not UTF-8 text")?;
        let mut forms = Vec::new();
        for (i, line) in recording
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
        {
            let entry: Value = serde_json::from_str(line)
                .with_context(|| format!("line {} of moto's recording is not JSON", i + 1))?;
            if recorded_action(&entry).1 == action {
                forms.push(
                    body_text(&entry)
                        .split('&')
                        .filter_map(|pair| pair.split_once('='))
                        .map(|(k, v)| (percent_decoded(k), percent_decoded(v)))
                        .collect(),
                );
            }
        }
        Ok(forms)
    }

    pub fn recorded_actions(&self) -> Result<Vec<(String, String)>> {
        let recording = self.moto_api("GET", "/moto-api/recorder/download-recording")?;
        let recording =
            String::from_utf8(recording).context("moto's recording is not UTF-8 text")?;
        recording
            .lines()
            .filter(|line| !line.trim().is_empty())
            .enumerate()
            .map(|(i, line)| {
                // The error must not quote the line: it holds the request's body.
                let entry: Value = serde_json::from_str(line)
                    .with_context(|| format!("line {} of moto's recording is not JSON", i + 1))?;
                Ok(recorded_action(&entry))
            })
            .collect()
    }

    /// How many recorded requests were `action` of `service` (see
    /// [`recorded_actions`](Self::recorded_actions)).
    pub fn count_recorded(&self, service: &str, action: &str) -> Result<usize> {
        Ok(self
            .recorded_actions()?
            .iter()
            .filter(|(s, a)| s == service && a == action)
            .count())
    }

    /// Forgets everything moto holds (`/moto-api/reset`): every secret, parameter and role of
    /// every account. Only for a server of one's own.
    pub fn reset(&self) -> Result<()> {
        self.moto_api("POST", "/moto-api/reset")?;
        Ok(())
    }

    /// One bodyless request to moto's own API; its answer's body, unless it was not a 200.
    ///
    /// HTTP/1.0, so that moto closes the connection after its answer: no client crate needed.
    fn moto_api(&self, method: &str, path: &str) -> Result<Vec<u8>> {
        let what = format!("{method} {path} at {}", self.endpoint);
        let mut stream = TcpStream::connect_timeout(&self.address, Duration::from_secs(2))
            .with_context(|| format!("connecting for {what}"))?;
        stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
        write!(
            stream,
            "{method} {path} HTTP/1.0\r\nHost: {}\r\nContent-Length: 0\r\n\r\n",
            self.address
        )
        .with_context(|| format!("sending {what}"))?;
        let mut response = Vec::new();
        stream
            .read_to_end(&mut response)
            .with_context(|| format!("reading the answer to {what}"))?;
        let end = response
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .with_context(|| format!("{what}: the answer has no end of headers"))?;
        let head = String::from_utf8_lossy(&response[..end]);
        let status = head.lines().next().unwrap_or_default();
        // Only the status line: a recording's body holds the requests' values.
        ensure!(
            status.split_whitespace().nth(1) == Some("200"),
            "{what}: {status}"
        );
        Ok(response.split_off(end + 4))
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        // `supervisor` is dropped first (declaration order): it kills and reaps the process.
        crate::keep_if_asked(&mut self.dir);
    }
}

/// Deletes the folders (`<pid>-…`) of servers whose test process has ended: a shared server's
/// folder outlives its process, which never drops it. Needs `/proc`; elsewhere nothing is
/// removed.
fn remove_folders_of_ended_processes(base: &Path) {
    if std::env::var_os("EXTERNAL_SECRETS_TESTENV_KEEP").is_some()
        || !Path::new("/proc/self").exists()
    {
        return;
    }
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// `(service, action)` of one line of moto's recording (its `headers`, `method`, `url`, `body`,
/// `body_encoded`).
fn recorded_action(entry: &Value) -> (String, String) {
    let header = |name: &str| {
        entry["headers"].as_object().and_then(|headers| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .and_then(|(_, v)| v.as_str())
        })
    };
    let url = entry["url"].as_str().unwrap_or_default();
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    // Only a form's `Action=` counts: a JSON body may hold the same letters inside a value.
    let form = if header("Content-Type").is_some_and(|t| t.contains("x-www-form-urlencoded")) {
        body_text(entry)
    } else {
        String::new()
    };
    let form_action = |text: &str| {
        text.split('&')
            .find_map(|pair| pair.strip_prefix("Action="))
            .map(str::to_owned)
    };
    let target = header("X-Amz-Target");
    let action = target
        .map(|t| t.rsplit('.').next().unwrap_or(t).to_owned())
        .or_else(|| form_action(&form))
        .or_else(|| form_action(query));
    let signed_for = header("Authorization").and_then(|auth| {
        // `AWS4-HMAC-SHA256 Credential=<key>/<date>/<region>/<service>/aws4_request, …`
        let scope = auth.split("Credential=").nth(1)?.split(',').next()?;
        scope.split('/').nth(3).map(str::to_owned)
    });
    let service = signed_for
        .or_else(|| target.and_then(|t| t.split('.').next()).map(str::to_owned))
        .or_else(|| {
            // What moto itself does with these unsigned calls.
            matches!(
                action.as_deref(),
                Some("AssumeRoleWithWebIdentity" | "AssumeRoleWithSAML")
            )
            .then(|| "sts".to_owned())
        })
        .unwrap_or_default();
    let method = entry["method"].as_str().unwrap_or_default();
    let action = action.unwrap_or_else(|| format!("{method} {}", url_path(path)));
    (service, action)
}

/// A recorded URL's path: moto records the full URL.
fn url_path(url: &str) -> &str {
    match url.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => url,
    }
}

/// A form field as sent: `+` for a space, `%XX` for a byte.
fn percent_decoded(text: &str) -> String {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        rest = tail;
        match b {
            b'+' => bytes.push(b' '),
            b'%' if rest.len() >= 2 => {
                match u8::from_str_radix(&String::from_utf8_lossy(&rest[..2]), 16) {
                    Ok(decoded) => {
                        bytes.push(decoded);
                        rest = &rest[2..];
                    }
                    Err(_) => bytes.push(b),
                }
            }
            b => bytes.push(b),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn body_text(entry: &Value) -> String {
    let body = entry["body"].as_str().unwrap_or_default();
    if entry["body_encoded"] == true {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    } else {
        body.to_owned()
    }
}

fn aws_tags(tags: &[(&str, &str)]) -> Value {
    tags.iter()
        .map(|(k, v)| json!({"Key": k, "Value": v}))
        .collect()
}

fn tag_map(tags: &Value) -> Result<BTreeMap<String, String>> {
    tags.as_array()
        .context("tags are not a list")?
        .iter()
        .map(|t| Ok((string_field(t, "Key")?, string_field(t, "Value")?)))
        .collect()
}

fn string_field(value: &Value, name: &str) -> Result<String> {
    value[name]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("no string {name} in boto3's answer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(headers: Value, url: &str, body: &str) -> Value {
        json!({"headers": headers, "method": "POST", "url": url, "body": body, "body_encoded": false})
    }

    #[test]
    fn names_the_calls_of_each_protocol() {
        let signed = |service: &str| {
            format!(
                "AWS4-HMAC-SHA256 Credential=testing/20250101/us-east-1/{service}/aws4_request, \
                 SignedHeaders=host, Signature=00"
            )
        };
        let form = "application/x-www-form-urlencoded; charset=utf-8";
        let cases = [
            (
                entry(
                    json!({"Authorization": signed("sts"), "Content-Type": form}),
                    "http://127.0.0.1:1/",
                    "Action=AssumeRole&Version=2011-06-15&RoleArn=x",
                ),
                ("sts", "AssumeRole"),
            ),
            (
                entry(
                    json!({"Content-Type": form}),
                    "http://127.0.0.1:1/",
                    "Action=AssumeRoleWithWebIdentity&Version=2011-06-15",
                ),
                ("sts", "AssumeRoleWithWebIdentity"),
            ),
            (
                entry(
                    json!({
                        "authorization": signed("secretsmanager"),
                        "x-amz-target": "secretsmanager.GetSecretValue",
                        "Content-Type": "application/x-amz-json-1.1",
                    }),
                    "http://127.0.0.1:1/",
                    r#"{"SecretId": "a&Action=AssumeRole"}"#,
                ),
                ("secretsmanager", "GetSecretValue"),
            ),
            (
                entry(
                    json!({"Authorization": signed("s3")}),
                    "http://127.0.0.1:1/bucket/key?x-id=PutObject",
                    "",
                ),
                ("s3", "POST /bucket/key"),
            ),
        ];
        for (entry, (service, action)) in cases {
            assert_eq!(
                recorded_action(&entry),
                (service.to_owned(), action.to_owned())
            );
        }
    }

    #[test]
    fn reads_an_encoded_form_body() {
        let body = base64::engine::general_purpose::STANDARD.encode("Action=AssumeRole");
        let entry = json!({
            "headers": {"Content-Type": "application/x-www-form-urlencoded"},
            "method": "POST", "url": "http://127.0.0.1:1/", "body": body, "body_encoded": true,
        });
        assert_eq!(recorded_action(&entry).1, "AssumeRole");
    }
}
