//! `hack/grpc-go-peer`: a gRPC client on grpc-go, the library ESO's core uses, which calls
//! GetSecret and prints the status code and details grpc-go reports. `hack/build-grpc-go-peer.sh`
//! builds it into the test cache, in a folder named after a hash of the module's files, so an
//! edited module is never run from an older build.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

/// The module's files, in the order the build script hashes them.
const FILES: [&str; 3] = ["go.mod", "go.sum", "main.go"];

/// The built peer, or an error naming the command that builds it.
pub fn grpc_go_peer() -> Result<PathBuf> {
    let module = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/grpc-go-peer");
    let mut hash = Sha256::new();
    for file in FILES {
        let path = module.join(file);
        hash.update(std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?);
    }
    let revision: String = hash.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let path = crate::testbin_root()
        .join(format!("grpc-go-peer-{revision}"))
        .join("grpc-go-peer");
    if !path.is_file() {
        bail!(
            "the grpc-go peer is missing at {}; run: bash hack/build-grpc-go-peer.sh",
            path.display()
        );
    }
    Ok(path)
}
