//! Drives the stand-in with python-gitlab, a real GitLab client, through
//! `conformance/test_conformance.py` — the same script that can be pointed at a real GitLab
//! (see the crate README).
//!
//! The client is installed from the hash-pinned `conformance/requirements.txt` into a venv
//! under the target directory, reused while the requirements are unchanged (a stamp file holds
//! their hash). Missing python3 or venv support fails the test with the command that fixes it:
//! a conformance test that quietly skips proves nothing.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use sha3::{Digest, Sha3_256};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `CARGO_TARGET_DIR` if set, else the workspace's `target`.
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => crate_dir().join("../../target"),
    }
}

fn run(command: &mut Command) -> std::io::Result<Output> {
    command.output()
}

fn describe(output: &Output) -> String {
    format!(
        "exit {}\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The venv's python, creating the venv and installing the requirements when needed.
fn venv_python() -> PathBuf {
    let requirements = crate_dir().join("conformance/requirements.txt");
    let text = std::fs::read(&requirements).expect("read conformance/requirements.txt");
    let stamp_value = hex::encode(Sha3_256::digest(&text));
    let venv = target_dir().join("gitlab-conformance-venv");
    let python = venv.join("bin/python");
    let stamp = venv.join("requirements.sha3");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(stamp_value.as_str())
        && python.exists()
    {
        return python;
    }

    let version = run(Command::new("python3").arg("--version"));
    if !version.as_ref().is_ok_and(|o| o.status.success()) {
        panic!(
            "python3 is needed for the python-gitlab conformance test and was not found \
             ({version:?}). Install it, e.g. `apt-get install -y python3 python3-venv`."
        );
    }
    let _ = std::fs::remove_dir_all(&venv);
    let created =
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv)).expect("run python3 -m venv");
    assert!(
        created.status.success(),
        "`python3 -m venv {}` failed; install venv support, e.g. \
         `apt-get install -y python3-venv`.\n{}",
        venv.display(),
        describe(&created)
    );
    let installed = run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(["--require-hashes", "--only-binary=:all:", "-r"])
        .arg(&requirements))
    .expect("run pip");
    assert!(
        installed.status.success(),
        "installing {} into {} failed (PyPI must be reachable once; later runs reuse the venv)\n{}",
        requirements.display(),
        venv.display(),
        describe(&installed)
    );
    std::fs::write(&stamp, stamp_value).expect("write the venv stamp");
    python
}

fn run_script(python: &Path, url: &str) -> Output {
    Command::new(python)
        .arg(crate_dir().join("conformance/test_conformance.py"))
        .env("GITLAB_URL", url)
        .env("GITLAB_TOKEN", OWNER)
        .env("GITLAB_LOW_TOKEN", DEVELOPER)
        .env("GITLAB_PROJECT", PROJECT)
        .env("GITLAB_GROUP", GROUP)
        // Warnings (e.g. a base URL mismatch in pagination links) are errors here.
        .env("PYTHONWARNINGS", "error")
        .output()
        .expect("run the conformance script")
}

#[test]
fn python_gitlab_conformance() {
    let python = venv_python();
    let gitlab = seeded();
    let output = run_script(&python, &gitlab.url());
    assert!(
        output.status.success(),
        "python-gitlab conformance failed\n{}",
        describe(&output)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains(" 0 failed, 0 skipped"), "{stdout}");
    // The script cleaned up after itself.
    assert!(gitlab.project_variables(PROJECT).expect("read").is_empty());
    assert!(gitlab.group_variables(GROUP).expect("read").is_empty());
    gitlab.assert_no_violations();
    eprintln!("{stdout}");
}
