//! The README's first command, `bash hack/dev.sh`, runs `local-cluster` with the operator binary.
//! This runs that same binary with the same argument, several times, and expects the quickstart
//! Secret every time: a race between the examples once failed it one run in three.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const RUNS: usize = 3;
const TIMEOUT: Duration = Duration::from_secs(240);

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `hack/dev.sh` builds both binaries into the same target folder.
fn operator_binary() -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_local-cluster")).with_file_name("external-secrets");
    assert!(
        path.exists(),
        "{} is missing; build it with: cargo build --locked -p external-secrets",
        path.display()
    );
    path
}

#[test]
fn the_quickstart_secret_appears_every_time() {
    let operator = operator_binary();
    for run in 1..=RUNS {
        let mut child = Command::new(env!("CARGO_BIN_EXE_local-cluster"))
            .arg(&operator)
            .current_dir(repository())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("local-cluster starts");
        let printed = read_until_ready(&mut child);
        stop(&mut child);
        let printed = match printed {
            Ok(lines) => lines,
            Err(output) => panic!("run {run} of {RUNS}: no quickstart Secret\n{output}"),
        };
        // Both Secrets the README promises: the Fake quickstart's and the Vault one's.
        for line in [
            "  username: demo-user",
            "  host: db.example.com",
            "  port: 5432",
            "  username: vault-user",
            "  password: from-vault",
        ] {
            assert!(
                printed.iter().any(|l| l == line),
                "run {run}: expected {line:?} in\n{}",
                printed.join("\n")
            );
        }
    }
}

/// Stdout up to the `export KUBECONFIG=` line, or everything it printed if it ended or took too
/// long without one.
fn read_until_ready(child: &mut Child) -> Result<Vec<String>, String> {
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    let out_tx = tx.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = out_tx.send((false, line));
        }
    });
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send((true, line));
        }
    });
    let deadline = std::time::Instant::now() + TIMEOUT;
    let (mut printed, mut everything) = (Vec::new(), Vec::new());
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok((is_err, line)) => {
                everything.push(line.clone());
                if is_err {
                    continue;
                }
                let ready = line.starts_with("export KUBECONFIG=");
                printed.push(line);
                if ready {
                    return Ok(printed);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                everything.push(format!("(no Secret after {TIMEOUT:?})"));
                return Err(everything.join("\n"));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(everything.join("\n")),
        }
    }
}

/// As Ctrl-C would: local-cluster stops the operator and the control plane on SIGTERM. One
/// that is still running a minute later is killed and the test fails: a hung `hack/dev.sh`
/// must not hang the suite.
fn stop(child: &mut Child) {
    if let Err(e) = external_secrets_testenv::terminate(child, Duration::from_secs(60)) {
        panic!("local-cluster: {e}");
    }
}
