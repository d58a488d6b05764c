//! The reference out-of-tree secret store server in Python (`examples/out-of-tree/python`) as a
//! process of its own: its venv, its generated stubs, and the running server, which tests can
//! stop (SIGTERM), kill (SIGKILL) and restart on the same port.
//!
//! The server's packages come from the example's hash-pinned `requirements.txt`, installed into
//! a venv under the target directory (`python-example-venv`) and reused while the file is
//! unchanged; the stubs are generated from `providers/protocol/proto` by each caller. A missing
//! python3 or venv support fails with the command that fixes it: a test that quietly skips
//! proves nothing.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};

use crate::process::pdeathsig_available;

/// How long the server gets to say it listens.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long SIGTERM may take (the server's `--grace` is 10 s) before [`PythonServer::stop`]
/// kills it and errs.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `examples/out-of-tree/python`.
pub fn example_dir() -> PathBuf {
    root().join("examples/out-of-tree/python")
}

/// `CARGO_TARGET_DIR` if set, else the workspace's `target`.
pub(crate) fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => root().join("target"),
    }
}

/// A command's exit status and output, for an error message.
pub fn describe(output: &Output) -> String {
    format!(
        "exit {}\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs `command` to completion; errs with its output unless it succeeded.
pub fn run(command: &mut Command, what: &str) -> Result<Output> {
    let output = command
        .output()
        .with_context(|| format!("running {what}"))?;
    ensure!(
        output.status.success(),
        "{what} failed\n{}",
        describe(&output)
    );
    Ok(output)
}

/// The example server's venv ([`venv`] of its `requirements.txt`, `python-example-venv`).
pub fn venv_python() -> Result<PathBuf> {
    venv(
        &example_dir().join("requirements.txt"),
        "python-example-venv",
    )
}

/// The python of the venv `name` under the target directory, (re)made from the hash-pinned
/// `requirements` unless it was made from a file with the same contents.
///
/// Test binaries that run at the same time share the venv: one of them creates it while the
/// others wait on a lock file beside it (`<name>.lock`).
pub fn venv(requirements: &Path, name: &str) -> Result<PathBuf> {
    let wanted = std::fs::read_to_string(requirements)
        .with_context(|| format!("reading {}", requirements.display()))?;
    let target = target_dir();
    std::fs::create_dir_all(&target).with_context(|| format!("creating {}", target.display()))?;
    let venv = target.join(name);
    let lock = File::create(target.join(format!("{name}.lock")))
        .context("creating the venv's lock file")?;
    lock.lock().context("locking the venv")?;
    let python = venv.join("bin/python");
    // The stamp is the requirements file the venv was made from.
    let stamp = venv.join("requirements.installed");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) && python.exists() {
        return Ok(python);
    }
    let version = Command::new("python3").arg("--version").output();
    if !version.as_ref().is_ok_and(|o| o.status.success()) {
        bail!(
            "python3 is needed to make the venv {} from {} and was not found ({version:?}). \
             Install it, e.g. `apt-get install -y python3 python3-venv`.",
            venv.display(),
            requirements.display()
        );
    }
    let _ = std::fs::remove_dir_all(&venv);
    let created = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .context("running python3 -m venv")?;
    if !created.status.success() {
        // A half-made venv would pass for one next time were the stamp ever written.
        let _ = std::fs::remove_dir_all(&venv);
        bail!(
            "`python3 -m venv {}` failed; install venv support, e.g. `apt-get install -y python3-venv`.\n{}",
            venv.display(),
            describe(&created)
        );
    }
    let installed = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(["--require-hashes", "--only-binary=:all:", "-r"])
        .arg(requirements)
        .output()
        .context("running pip")?;
    ensure!(
        installed.status.success(),
        "installing {} into {} failed (PyPI must be reachable once; later runs reuse the venv)\n{}",
        requirements.display(),
        venv.display(),
        describe(&installed)
    );
    std::fs::write(&stamp, wanted).context("writing the venv stamp")?;
    Ok(python)
}

/// Generates the `provider.v1` stubs into `out` with the venv's `grpc_tools.protoc`.
pub fn generate_stubs(python: &Path, out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    run(
        Command::new(python)
            .args(["-m", "grpc_tools.protoc", "-I"])
            .arg(root().join("providers/protocol/proto"))
            .arg(format!("--python_out={}", out.display()))
            .arg(format!("--grpc_python_out={}", out.display()))
            .arg("provider/v1/secretstore.proto"),
        "generating the Python stubs with grpc_tools.protoc",
    )?;
    Ok(())
}

/// The venv's python with the stubs generated into a folder: what a [`PythonServer`] runs.
#[derive(Clone, Debug)]
pub struct PythonExample {
    pub python: PathBuf,
    pub stubs: PathBuf,
}

impl PythonExample {
    /// The venv ([`venv_python`]) and the stubs, generated into `stubs`.
    pub fn prepare(stubs: &Path) -> Result<Self> {
        let python = venv_python()?;
        generate_stubs(&python, stubs)?;
        Ok(Self {
            python,
            stubs: stubs.to_owned(),
        })
    }
}

/// Where a [`PythonServer`] reads and writes.
#[derive(Clone, Debug)]
pub struct PythonServerFiles {
    /// ESO's layout: `ca.crt`, `tls.crt`, `tls.key` (`--tls-dir`).
    pub tls_dir: PathBuf,
    /// A kubeconfig with embedded credentials (`--kubeconfig`).
    pub kubeconfig: PathBuf,
    /// The folder every `SqliteStore`'s `path` must lie in (`--data-dir`).
    pub data_dir: PathBuf,
    /// The server's output, appended to across restarts.
    pub log: PathBuf,
}

/// A running child and the thread that spawned it.
///
/// With `setpriv --pdeathsig KILL` the kernel kills the child when the thread that spawned it
/// exits (also when our process is killed): a thread of its own keeps it alive exactly as long
/// as the child is ours, whichever thread started or restarts the server.
struct Running {
    child: Child,
    keeper: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
}

impl Running {
    fn spawn(mut command: Command) -> Result<Self> {
        let (spawned_tx, spawned) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("python-example-server".into())
            .spawn(move || {
                let _ = spawned_tx.send(command.spawn());
                // Until the child was reaped and the sender dropped.
                let _ = released.recv();
            })
            .context("starting the thread that keeps the Python server")?;
        let child = spawned
            .recv()
            .map_err(|_| anyhow!("the thread that keeps the Python server is gone"))?
            .context("starting server.py")?;
        Ok(Self {
            child,
            keeper: Some((release, thread)),
        })
    }

    /// SIGTERM, then up to `grace` for it to exit; errs when it had to be killed.
    fn terminate(mut self, grace: Duration) -> Result<()> {
        crate::terminate(&mut self.child, grace)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some((release, thread)) = self.keeper.take() {
            drop(release);
            let _ = thread.join();
        }
    }
}

/// `server.py` on 127.0.0.1 with mTLS; stopped with SIGTERM, as a pod is, when dropped.
pub struct PythonServer {
    example: PythonExample,
    files: PythonServerFiles,
    running: Mutex<Option<Running>>,
    port: u16,
    /// `127.0.0.1:<port>`, the same across restarts.
    pub address: String,
}

impl PythonServer {
    /// Starts `server.py` on a free 127.0.0.1 port (`--port 0`, the port it prints).
    pub fn start(example: &PythonExample, files: &PythonServerFiles) -> Result<Self> {
        let mut server = Self {
            example: example.clone(),
            files: files.clone(),
            running: Mutex::new(None),
            port: 0,
            address: String::new(),
        };
        server.port = server.spawn(0)?;
        server.address = format!("127.0.0.1:{}", server.port);
        Ok(server)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn log_path(&self) -> &Path {
        &self.files.log
    }

    /// The last `lines` lines of the server's output.
    pub fn log_tail(&self, lines: usize) -> String {
        crate::tail(&self.files.log, lines)
    }

    fn lock(&self) -> MutexGuard<'_, Option<Running>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts the process with `--port port` and waits until it prints the port it listens on.
    fn spawn(&self, port: u16) -> Result<u16> {
        // Only what this start writes counts: the log is appended to across restarts.
        let offset = std::fs::metadata(&self.files.log).map_or(0, |m| m.len() as usize);
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.files.log)
            .with_context(|| format!("opening {}", self.files.log.display()))?;
        let mut command = if pdeathsig_available() {
            let mut c = Command::new("setpriv");
            c.args(["--pdeathsig", "KILL", "--"])
                .arg(&self.example.python);
            c
        } else {
            Command::new(&self.example.python)
        };
        command
            .arg(example_dir().join("server.py"))
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--tls-dir")
            .arg(&self.files.tls_dir)
            .arg("--kubeconfig")
            .arg(&self.files.kubeconfig)
            .arg("--data-dir")
            .arg(&self.files.data_dir)
            .env("PYTHONPATH", &self.example.stubs)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let mut running = self.lock();
        *running = Some(Running::spawn(command)?);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let text = std::fs::read(&self.files.log).unwrap_or_default();
            let text = String::from_utf8_lossy(text.get(offset..).unwrap_or_default());
            if let Some(port) = text
                .lines()
                .find_map(|l| l.strip_prefix("listening on port "))
            {
                return port
                    .trim()
                    .parse()
                    .with_context(|| format!("server.py printed the port {port:?}"));
            }
            let child = &mut running.as_mut().expect("spawned above").child;
            if let Some(status) = child.try_wait()? {
                running.take();
                bail!(
                    "server.py exited ({status}) before listening on 127.0.0.1:{port}; its log {}:\n{text}",
                    self.files.log.display()
                );
            }
            if Instant::now() > deadline {
                running.take();
                bail!(
                    "server.py did not say it listens within {START_TIMEOUT:?}; its log {}:\n{text}",
                    self.files.log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, as Kubernetes stops a pod; errs when it had to be killed after 15 s.
    pub fn stop(&self) -> Result<()> {
        match self.lock().take() {
            Some(running) => running.terminate(STOP_GRACE),
            None => Ok(()),
        }
    }

    /// SIGKILL: gone at once, calls in flight and all.
    pub fn kill(&self) {
        // Dropping it kills it.
        drop(self.lock().take());
    }

    /// Whether the process is still running (not stopped, killed or exited).
    pub fn is_running(&self) -> bool {
        self.lock()
            .as_mut()
            .is_some_and(|r| matches!(r.child.try_wait(), Ok(None)))
    }

    /// Starts it again on the same port with the same files (killing it first if it runs).
    pub fn restart(&self) -> Result<()> {
        self.kill();
        let port = self.spawn(self.port)?;
        ensure!(
            port == self.port,
            "server.py restarted on port {port}, not {}",
            self.port
        );
        Ok(())
    }
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        if let Some(running) = self.lock().take() {
            let _ = running.terminate(Duration::from_secs(10));
        }
    }
}
