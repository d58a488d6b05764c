//! The `external-secrets` binary: a thin front over the workspace's crates.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "external-secrets", about = "Keeps Kubernetes Secrets in sync with external secret managers")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write every CRD as one YAML file per CRD.
    Crds {
        /// Folder to write into.
        #[arg(long, default_value = "crds")]
        out: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crds { out } => write_crds(&out),
    }
}

fn write_crds(out: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    for (name, yaml) in api::crds::files()? {
        let path = out.join(name);
        std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
