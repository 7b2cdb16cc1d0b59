//! Compiles the modal variant's protos (providers/proto/modal) with protox, so no system
//! `protoc` is needed, into prost messages with tonic clients and servers. The encoded
//! descriptor set is written beside them for prost-reflect (cassettes as JSON).

use std::path::PathBuf;

use protox::prost::Message;

const PROTO_DIR: &str = "proto/modal";
const PROTOS: [&str; 2] = ["api.proto", "task_command_router.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for file in PROTOS {
        println!("cargo:rerun-if-changed={PROTO_DIR}/{file}");
    }
    let descriptors = protox::Compiler::new([PROTO_DIR])?
        .include_imports(true)
        .include_source_info(false)
        .open_files(PROTOS)?
        .file_descriptor_set();
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("modal_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
