//! `oci-image`: what `hack/build-images.sh` runs once the binary is built.

use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;

/// Writes the operator's image and one image per provider server as OCI image layouts.
#[derive(Parser)]
struct Args {
    /// The `external-secrets` binary the images carry.
    #[arg(long)]
    binary: PathBuf,
    /// Where the layouts (`<name>/`) and archives (`<name>.tar`) go.
    #[arg(long)]
    out: PathBuf,
    /// The repository whose revision and chart appVersion label the images.
    #[arg(long, default_value = ".")]
    repository: PathBuf,
    #[arg(long, default_value = "ghcr.io/external-secrets-rs")]
    registry: String,
    #[arg(long, default_value = "/etc/ssl/certs/ca-certificates.crt")]
    ca_certificates: PathBuf,
    /// A provider kind that gets an image serving it out of process; repeatable (default: every
    /// provider the binary can serve out of process).
    #[arg(long = "provider-server")]
    provider_servers: Vec<String>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let inputs = external_secrets_image::Inputs {
        binary: args.binary,
        ca_certificates: args.ca_certificates,
        registry: args.registry,
        source: external_secrets_image::Source::from_repository(&args.repository)?,
        provider_servers: if args.provider_servers.is_empty() {
            external_secrets_image::PROVIDER_SERVERS
                .map(String::from)
                .to_vec()
        } else {
            args.provider_servers
        },
    };
    for built in external_secrets_image::build(&inputs, &args.out)? {
        println!(
            "{}@{}  {:.1} MB compressed  {}",
            built.reference,
            built.digest,
            built.size as f64 / 1e6,
            built.archive.display()
        );
    }
    Ok(())
}
