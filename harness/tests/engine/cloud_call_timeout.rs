//! A cloud service that takes the connection and never answers fails the step at the
//! step's budget, never at a shorter timeout hidden in the client (before, 60 s per call):
//! the e2b and daytona clients are pointed at a loopback server that accepts and stays
//! silent, and a build with a 65 s budget must end at that budget, named. No Docker.

use crate::common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use sandbox_matrix::model::results::{RunResults, StepStatus};

/// The build step's budget: longer than the clients' old 60 s call timeout.
const BUDGET: &str = "65s";

/// Accepts connections on 127.0.0.1 and holds them open without a byte of answer, until
/// the test process ends. Returns its address.
fn silent_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let address = listener.local_addr().expect("its address").to_string();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    address
}

/// Runs the build with `variant` live against the silent server, with `env` set.
fn hung_build(variant: &str, env: &[(&str, String)]) {
    let dir = common::out_dir(&format!("hung-call-{variant}"));
    std::fs::create_dir_all(&dir).expect("test folder");
    let environment = common::root().join("fixtures/environments/reference");
    let scenario = dir.join("hung.yaml");
    std::fs::write(
        &scenario,
        format!(
            "name: hung-call\nenvironment: {}\nsteps:\n  - step: build\n    budget: {BUDGET}\n  - step: cleanup\n    budget: 5s\n",
            environment.display()
        ),
    )
    .expect("scenario written");
    let out = dir.join("reports");
    let started = Instant::now();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sandbox-matrix"))
        .args(["run", "--live", "--variant", variant, "--scenario"])
        .arg(&scenario)
        .arg("--out")
        .arg(&out)
        .current_dir(common::root())
        .env_remove("DAYTONA_JWT_TOKEN")
        .env_remove("DAYTONA_ORGANIZATION_ID")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("sandbox-matrix runs");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let text = std::fs::read_to_string(out.join("latest/results.json"));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let results: RunResults =
        serde_json::from_str(&text.expect("results.json written")).expect("it parses");
    let build = results.scenarios[0].step("build").expect("build ran");
    let StepStatus::Failed { reason } = &build.status else {
        panic!("build did not fail: {build:?}");
    };
    assert!(
        reason.contains("exceeded its budget of 1m 5s"),
        "ended by the step's budget, not a client timeout: {reason}"
    );
    assert!(
        build.duration >= Duration::from_secs(65),
        "{:?}",
        build.duration
    );
    assert!(took < Duration::from_secs(120), "the run took {took:?}");
}

/// Both variants side by side: each run spends its 65 s waiting, so one test thread (not
/// two) waits for both.
pub fn silent_e2b_and_daytona_services_fail_build_at_the_step_budget() {
    let address = silent_server();
    std::thread::scope(|scope| {
        let e2b = scope.spawn(|| {
            hung_build(
                "e2b",
                &[
                    // Fake: the silent server reads nothing.
                    ("E2B_API_KEY", "sm-fake-e2b-key".to_owned()),
                    ("E2B_API_URL", format!("http://{address}")),
                    ("E2B_DOMAIN", address.clone()),
                ],
            )
        });
        let daytona = scope.spawn(|| {
            hung_build(
                "daytona",
                &[
                    // Fake: the silent server reads nothing.
                    ("DAYTONA_API_KEY", "sm-fake-daytona-key".to_owned()),
                    ("DAYTONA_API_URL", format!("http://{address}/api")),
                ],
            )
        });
        // Both are joined before either's failure is raised, so neither is left running.
        let (e2b, daytona) = (e2b.join(), daytona.join());
        for (variant, outcome) in [("e2b", e2b), ("daytona", daytona)] {
            if let Err(panic) = outcome {
                eprintln!("the {variant} run failed its assertions");
                std::panic::resume_unwind(panic);
            }
        }
    });
}
