//! `datalayer-sandbox`: the sandbox-contract/v1 doctor. See the `doctor` library.

fn main() -> std::process::ExitCode {
    doctor::main_from_env()
}
