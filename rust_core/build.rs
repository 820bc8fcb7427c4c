//! Compiles the durable_rpc.v1 protobuf contract (without the gRPC service) into Rust
//! types with prost. `protox` parses the .proto files in pure Rust, so no `protoc`
//! binary is needed.

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "durable_rpc/v1/payload.proto",
    "durable_rpc/v1/options.proto",
    "durable_rpc/v1/search_attributes.proto",
    "durable_rpc/v1/history.proto",
    "durable_rpc/v1/workflow_task.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let include = manifest_dir.join("../proto");
    println!(
        "cargo:rerun-if-changed={}",
        include.join("durable_rpc/v1").display()
    );
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={}", include.join(proto).display());
    }
    let fds = protox::compile(PROTOS, [&include])?;
    prost_build::Config::new().compile_fds(fds)?;
    Ok(())
}
