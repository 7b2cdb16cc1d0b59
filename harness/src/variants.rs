//! The variants sandbox-matrix knows, and how to connect to each. Adding a variant adds a
//! line here and a module in `providers/`; the runner and the suite stay as they are.

use std::path::Path;
use std::sync::Arc;

use sandbox_providers::Provider;
use sandbox_providers::docker::{BaseRecipe, DockerProvider, DoctorBinary};

/// Every variant name, in report order.
pub const KNOWN: &[&str] = &["docker"];

/// Where, under the project root, the docker variant's base image recipe lives.
pub const BASE_RECIPE_DIR: &str = "fixtures/images/contract-base";

/// The doctor baked into reference images: the standalone `datalayer-sandbox` built beside
/// `executable` when there is one (it is small), else `executable` itself, a sandbox-matrix
/// binary, which acts as the doctor when run under that name.
pub fn doctor_binary(executable: &Path) -> DoctorBinary {
    let sibling = executable.with_file_name(sandbox_contract::doctor::DOCTOR);
    DoctorBinary {
        path: if sibling.is_file() {
            sibling
        } else {
            executable.to_path_buf()
        },
        source_hash: env!("SANDBOX_MATRIX_DOCTOR_SOURCE_HASH").to_owned(),
    }
}

/// Connects to variant `name`; `root` is the project checkout (fixtures live there) and
/// `harness` the sandbox-matrix executable (it carries the doctor).
pub async fn connect(name: &str, root: &Path, harness: &Path) -> Result<Arc<dyn Provider>, String> {
    match name {
        "docker" => DockerProvider::connect(BaseRecipe::new(
            root.join(BASE_RECIPE_DIR),
            doctor_binary(harness),
        ))
        .await
        .map(|p| Arc::new(p) as Arc<dyn Provider>)
        .map_err(|e| format!("the docker variant needs a Docker engine: {e}")),
        other => Err(format!(
            "unknown variant `{other}`; known variants: {}",
            KNOWN.join(", ")
        )),
    }
}
