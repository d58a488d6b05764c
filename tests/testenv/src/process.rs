//! Child processes that cannot outlive the test run.
//!
//! Every child is spawned from one long-lived thread, wrapped in `setpriv --pdeathsig KILL`
//! when util-linux provides it: the kernel then kills the child when the *spawning thread*
//! exits, which covers our process being killed with SIGKILL (no destructor runs then).
//! Spawning from whichever thread happens to call `ControlPlane::start` would be wrong: a
//! short-lived thread (e.g. a tokio worker or a libtest-mimic trial thread) exiting would
//! kill the control plane under the remaining tests.
//!
//! Without setpriv only `Drop` (including during a panic's unwinding) stops the children;
//! a SIGKILLed test process then leaves them behind.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::thread::JoinHandle;

use anyhow::{Context, Result, anyhow};

struct SpawnRequest {
    name: String,
    program: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    reply: mpsc::Sender<Result<u32>>,
}

enum Request {
    Spawn(SpawnRequest),
    Exited(mpsc::Sender<Option<(String, ExitStatus)>>),
    /// Stops every child, last started first, and forgets them.
    StopAll(mpsc::Sender<()>),
}

pub(crate) struct Supervisor {
    tx: Option<mpsc::Sender<Request>>,
    thread: Option<JoinHandle<()>>,
}

/// Whether `setpriv --pdeathsig` works here; asked once per process.
pub(crate) fn pdeathsig_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

impl Supervisor {
    pub(crate) fn new() -> Result<Self> {
        let (tx, rx) = mpsc::channel::<Request>();
        let thread = std::thread::Builder::new()
            .name("testenv-supervisor".into())
            .spawn(move || supervise(rx))
            .context("starting the process supervisor thread")?;
        Ok(Self {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Starts `program args…` with stdout and stderr appended to `log`; returns its pid.
    pub(crate) fn spawn(
        &self,
        name: &str,
        program: &Path,
        args: Vec<String>,
        log: &Path,
    ) -> Result<u32> {
        let (reply, answer) = mpsc::channel();
        self.send(Request::Spawn(SpawnRequest {
            name: name.to_owned(),
            program: program.to_owned(),
            args,
            log: log.to_owned(),
            reply,
        }))?;
        answer
            .recv()
            .map_err(|_| anyhow!("process supervisor thread is gone"))?
    }

    /// The first child that is no longer running, if any.
    pub(crate) fn exited(&self) -> Result<Option<(String, ExitStatus)>> {
        let (reply, answer) = mpsc::channel();
        self.send(Request::Exited(reply))?;
        answer
            .recv()
            .map_err(|_| anyhow!("process supervisor thread is gone"))
    }

    /// Stops every child (the last started first) and waits until they are reaped.
    pub(crate) fn stop_all(&self) -> Result<()> {
        let (reply, answer) = mpsc::channel();
        self.send(Request::StopAll(reply))?;
        answer
            .recv()
            .map_err(|_| anyhow!("process supervisor thread is gone"))
    }

    fn send(&self, request: Request) -> Result<()> {
        self.tx
            .as_ref()
            .and_then(|tx| tx.send(request).ok())
            .ok_or_else(|| anyhow!("process supervisor thread is gone"))
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        // Closing the channel is the stop signal; joining waits until every child was reaped.
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn supervise(rx: mpsc::Receiver<Request>) {
    let mut children: Vec<(String, Child)> = Vec::new();
    for request in rx {
        match request {
            Request::Spawn(req) => {
                let result = spawn(&req).map(|child| {
                    let pid = child.id();
                    children.push((req.name.clone(), child));
                    pid
                });
                let _ = req.reply.send(result);
            }
            Request::Exited(reply) => {
                let exited = children
                    .iter_mut()
                    .find_map(|(name, child)| match child.try_wait() {
                        Ok(Some(status)) => Some((name.clone(), status)),
                        _ => None,
                    });
                let _ = reply.send(exited);
            }
            Request::StopAll(reply) => {
                stop(std::mem::take(&mut children));
                let _ = reply.send(());
            }
        }
    }
    stop(children);
}

/// Reverse start order: clients (controller-manager, apiserver) go before etcd, which keeps
/// their logs free of "etcd unreachable" noise during shutdown.
fn stop(children: Vec<(String, Child)>) {
    for (_, mut child) in children.into_iter().rev() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn spawn(req: &SpawnRequest) -> Result<Child> {
    let log = File::options()
        .create(true)
        .append(true)
        .open(&req.log)
        .with_context(|| format!("opening {}", req.log.display()))?;
    let mut command = if pdeathsig_available() {
        let mut c = Command::new("setpriv");
        c.args(["--pdeathsig", "KILL", "--"]).arg(&req.program);
        c
    } else {
        Command::new(&req.program)
    };
    command
        .args(&req.args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    command
        .spawn()
        .with_context(|| format!("starting {} ({})", req.name, req.program.display()))
}

/// Stops `child` as Kubernetes stops a pod: SIGTERM, then up to `grace` for it to exit, then
/// SIGKILL. Errs when it had to be killed, so a caller can fail a test over a process that does
/// not shut down, rather than hang on it.
pub fn terminate(child: &mut Child, grace: std::time::Duration) -> Result<()> {
    if child.try_wait()?.is_some() {
        return Ok(());
    }
    let pid = rustix::process::Pid::from_child(child);
    // The child may exit on its own between the check and the signal; that is fine.
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    let deadline = std::time::Instant::now() + grace;
    while std::time::Instant::now() < deadline {
        if child.try_wait()?.is_some() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(anyhow!("still running {grace:?} after SIGTERM; killed"))
}

/// `program` in a mount namespace of its own where `hosts` is bound over /etc/hosts: a name
/// resolves there to the addresses the test writes (several replicas behind one name, as a
/// headless Service's), and nothing else on the machine sees it. Needs root (CAP_SYS_ADMIN) and
/// util-linux's `unshare`. The bind follows the file, so rewriting it in place changes what the
/// name resolves to at the next lookup.
pub fn with_own_hosts(hosts: &Path, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new("unshare");
    command
        .args([
            "--mount",
            "sh",
            "-c",
            r#"mount --bind "$0" /etc/hosts && exec "$@""#,
        ])
        .arg(hosts)
        .arg(program);
    command
}
