//! The variants sandbox-matrix knows, and how to connect to each. Adding a variant adds a
//! line here and a module in `providers/`; the runner and the suite stay as they are.

use std::path::Path;
use std::sync::Arc;

use sandbox_providers::Provider;
use sandbox_providers::docker::{BaseRecipe, DockerProvider};

/// Every variant name, in report order.
pub const KNOWN: &[&str] = &["docker"];

/// Where, under the project root, the docker variant's base image recipe lives.
pub const BASE_RECIPE_DIR: &str = "fixtures/images/contract-base";

/// Connects to variant `name`; `root` is the project checkout (fixtures live there).
pub async fn connect(name: &str, root: &Path) -> Result<Arc<dyn Provider>, String> {
    match name {
        "docker" => DockerProvider::connect(BaseRecipe::new(root.join(BASE_RECIPE_DIR)))
            .await
            .map(|p| Arc::new(p) as Arc<dyn Provider>)
            .map_err(|e| format!("the docker variant needs a Docker engine: {e}")),
        other => Err(format!(
            "unknown variant `{other}`; known variants: {}",
            KNOWN.join(", ")
        )),
    }
}
