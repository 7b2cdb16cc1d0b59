//! The tests that need a Docker engine (required under CI=true, skipped with a printed
//! reason elsewhere), in one binary so that `cargo test` runs them side by side: most of
//! their time is the engine's and the sandboxes' (builds, container starts, kernels, a
//! budget running out), not this process's. One module per subject; filter by module,
//! e.g. `cargo test -p sandbox-matrix --test engine violations::`.
//!
//! Not here: `base_from_image` (it retags the reference base the others build on),
//! `sweep` and `sweep_cloud` (a sweep without `--run` may remove what a neighbour is
//! using). The `author_*` modules' authoring tests are ignored: they rewrite cassettes
//! (`cargo test -p sandbox-matrix --test engine -- --ignored author_e2b::`); `drift::`
//! authors them again into a temporary folder and diffs them with the committed ones.

#[path = "../common/mod.rs"]
mod common;

mod author_daytona;
mod author_e2b;
mod author_modal;
mod breakage;
mod cloud_call_timeout;
mod crash_cleanup;
mod datalayer_push;
mod datalayer_runtimes;
mod drift;
mod emulate_daytona;
mod emulate_e2b;
mod interrupt;
mod json_diff;
mod kernel_death;
mod launch_exit;
mod launch_hang;
mod modal_cli;
mod modal_client_emulator;
mod modal_emulator;
mod parity;
mod preflight;
mod private_base;
mod sdk_datalayer;
mod sdk_daytona;
mod sdk_e2b;
mod sdk_modal;
mod server_rules;
mod shared_build;
mod violations;
