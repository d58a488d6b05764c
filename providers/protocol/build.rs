//! Generates the gRPC types from `proto/` with pure-Rust tooling (protox parses the file, so a
//! fresh machine needs no `protoc`), and keeps the encoded descriptors for server reflection.

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(["provider/v1/secretstore.proto"], ["proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("provider_v1_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}
