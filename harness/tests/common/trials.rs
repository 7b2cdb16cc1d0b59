//! Tests registered with what they need from the machine (libtest-mimic), so that one
//! which cannot run here is reported `ignored` with its reason, never `ok`; under
//! `CI=true` a missing need fails the test instead, as the tests are required there.

use std::future::Future;
use std::sync::OnceLock;

use libtest_mimic::{Completion, Failed, Trial};

/// What a test needs before it can run.
#[derive(Clone, Copy, Debug)]
pub enum Need {
    /// Nothing beyond the build.
    Nothing,
    /// A Docker engine that answers.
    Docker,
    /// A Docker engine and the SDK venv holding this distribution at its pinned version.
    Sdk(&'static str),
}

impl Need {
    /// Why this need is not met here, if it is not.
    pub fn missing(self) -> Option<String> {
        match self {
            Need::Nothing => None,
            Need::Docker => docker_missing(),
            Need::Sdk(sdk) => docker_missing().or_else(|| super::sdk::missing(sdk)),
        }
    }
}

/// Whether `CI=true`, which makes every need required.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Why no Docker engine can be used here, if none can (asked once per process).
pub fn docker_missing() -> Option<String> {
    static ANSWER: OnceLock<Option<String>> = OnceLock::new();
    ANSWER
        .get_or_init(|| {
            let answer = std::process::Command::new("docker")
                .args(["version", "--format", "{{.Server.Version}}"])
                .output();
            let reason = match answer {
                Ok(out) if out.status.success() => return None,
                Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_owned(),
                Err(e) => format!("cannot run the docker CLI: {e}"),
            };
            Some(format!("needs a Docker engine, and none answers: {reason}"))
        })
        .clone()
}

/// A test named `name` that runs `body` once `need` is met: ignored with the reason when it
/// is not, failed with it under `CI=true`.
pub fn trial(name: &str, need: Need, body: impl FnOnce() + Send + 'static) -> Trial {
    let name = name.to_owned();
    Trial::ignorable_test(name.clone(), move || match need.missing() {
        Some(reason) if ci() => Err(Failed::from(format!(
            "CI=true requires this test: {reason}"
        ))),
        Some(reason) => Ok(Completion::ignored_with(reason)),
        None => {
            let started = std::time::Instant::now();
            body();
            took(&name, started.elapsed());
            Ok(Completion::Completed)
        }
    })
}

/// Says on stderr how long a test that ran took, as nextest does, so that a CI log shows
/// which tests its time went to (libtest-mimic's own lines carry no time).
fn took(name: &str, elapsed: std::time::Duration) {
    eprintln!("    took {:>6.1} s: {name}", elapsed.as_secs_f64());
}

/// Sets the test threads of a binary whose tests mostly wait (on the Docker engine, on
/// their sandboxes' kernels, on a budget running out) when the command line does not:
/// `RUST_TEST_THREADS` if set, else twice the CPUs and at least 4. libtest's default of
/// one thread per CPU leaves a 2-CPU machine idle for most of such a run. Pass
/// `--test-threads N` to choose.
pub fn waiting_threads(args: &mut libtest_mimic::Arguments) {
    if args.test_threads.is_some() {
        return;
    }
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    args.test_threads = Some(
        std::env::var("RUST_TEST_THREADS")
            .ok()
            .and_then(|n| n.parse().ok())
            .filter(|n| *n > 0)
            .unwrap_or((2 * cpus).max(4)),
    );
}

/// Runs `test` to its end on a multi-threaded runtime of `threads` workers.
pub fn block_on(threads: usize, test: impl Future<Output = ()>) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(test)
}

/// The trials of a binary: `trials![need => kind path, ...; ...]` with kind `sync`,
/// `async(threads)`, or either after `ignored` (run only with `--ignored`). A test's name
/// is its path, e.g. `violations::each_violating_image_fails_what_it_breaks_and_nothing_else`.
#[macro_export]
macro_rules! trials {
    ($($need:expr => [$($kind:ident $(($threads:literal))? $($path:ident)::+ $(@ $ignored:ident)?),* $(,)?]);* $(;)?) => {
        vec![$($($crate::trials!(@one $need, $kind $(($threads))? $($path)::+ $(@ $ignored)?)),*),*]
    };
    (@one $need:expr, sync $($path:ident)::+ $(@ $ignored:ident)?) => {
        $crate::trials!(@mark
            common::trials::trial(&[$(stringify!($path)),+].join("::"), $need, || $($path)::+()),
            $($ignored)?)
    };
    (@one $need:expr, async($threads:literal) $($path:ident)::+ $(@ $ignored:ident)?) => {
        $crate::trials!(@mark
            common::trials::trial(&[$(stringify!($path)),+].join("::"), $need, || {
                common::trials::block_on($threads, $($path)::+())
            }),
            $($ignored)?)
    };
    (@mark $trial:expr, ignored) => { $trial.with_ignored_flag(true) };
    (@mark $trial:expr,) => { $trial };
}
