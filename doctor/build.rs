//! Sets `cfg(host_python3)` when this machine's `python3` answers, or under `CI=true` where
//! the tests that run it are required: without it they are reported ignored, with the reason.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(host_python3)");
    println!("cargo:rerun-if-env-changed=CI");
    println!("cargo:rerun-if-env-changed=PATH");
    let required = std::env::var("CI").is_ok_and(|v| v == "true");
    let answers = std::process::Command::new("python3")
        .arg("-V")
        .output()
        .is_ok_and(|out| out.status.success());
    if required || answers {
        println!("cargo:rustc-cfg=host_python3");
    }
}
