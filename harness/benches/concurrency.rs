//! Whether the harness is ever the bottleneck: 1,000 launches, 100 in flight, against
//! replay servers at the cassette's recorded pace, for the e2b variant (over HTTP and a
//! WebSocket).
//!
//! What is compared is what `benches/overhead.rs` compares, one launch at a time, here
//! under concurrency. A harness launch replays the whole e2b lifecycle cassette (replay
//! serves exchanges in order, so one server serves one launch: each launch has a replay
//! server of its own) through the runner, the e2b client and its HTTP layer, and
//! yields the runner's create-to-first-result. A bare launch is a bare HTTP client
//! (a `reqwest::Client` of its own, made before the clock starts, and tokio-tungstenite
//! for the WebSocket) sending the same create-to-first-result requests and frames, one
//! after another, to a replay server of its own holding those exchanges. Every server
//! holds each response back its recorded latency (`Pace::Recorded`).
//!
//! The launches run in 10 rounds; each round is a batch of 100 harness launches, all in
//! flight at once, then a batch of 100 bare launches, all in flight at once: 1,000 of each
//! kind, the two kinds alternating so that drift on a noisy machine hits both alike. The
//! harness's overhead is the difference of the two distributions' p99s (and, as
//! `overhead.rs` gives it, of their medians): harness p99 minus bare p99.
//!
//! Targets, as issue 42 sets them (exits 1 when one is missed):
//! - overhead at p99 at most 10 ms;
//! - the bench process's peak resident memory (`VmHWM` in `/proc/self/status`) at most
//!   256 MB;
//! - no growth in open file descriptors (`/proc/self/fd`): the count after the last batch is
//!   no more than before the first (counted after one warm-up launch of each kind, and
//!   after each batch once its servers' tasks have had 100 ms to end).
//!
//! `cargo bench -p sandbox-matrix --bench concurrency` (about 3 minutes on 2 cores).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandbox_matrix::run::scenario::Scenario;
use sandbox_matrix::run::variants::{self, CloudVariant};
use sandbox_providers::api::Exchange;
use sandbox_providers::api::replay::Pace;

/// The variant measured, and the first request of its launch (where create-to-first-result
/// starts), as `overhead.rs`'s `LAUNCH_STARTS` has it.
const VARIANT: (&str, &str, &str) = ("e2b", "POST", "/sandboxes");
/// Launches of each kind.
const LAUNCHES: usize = 1_000;
/// Launches in flight at once.
const IN_FLIGHT: usize = 100;
/// The most the harness may add at p99.
const OVERHEAD_P99: Duration = Duration::from_millis(10);
/// The most the bench process may hold resident at its peak, in kB.
const PEAK_RSS_KB: u64 = 256 * 1024;
/// How long the tasks of a finished batch's servers have to end before the count.
const SETTLE: Duration = Duration::from_millis(100);

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "launches/mod.rs"]
mod launches;

/// What a batch of launches shares.
struct Setup {
    variant: &'static CloudVariant,
    cassettes: PathBuf,
    scenario: Scenario,
    exchanges: Vec<Exchange>,
}

/// `IN_FLIGHT` launches of one kind, all at once; their create-to-first-result and the
/// batch's wall time.
async fn batch(setup: &Arc<Setup>, harness: bool) -> (Vec<Duration>, Duration) {
    let started = Instant::now();
    let tasks: Vec<_> = (0..IN_FLIGHT)
        .map(|_| {
            let setup = setup.clone();
            tokio::spawn(async move {
                if harness {
                    launches::harness_once(
                        setup.variant,
                        &setup.cassettes,
                        &setup.scenario,
                        Pace::Recorded,
                    )
                    .await
                } else {
                    launches::bare_once(
                        setup.variant.name,
                        &setup.exchanges,
                        &reqwest::Client::new(),
                        Pace::Recorded,
                    )
                    .await
                }
            })
        })
        .collect();
    let mut durations = Vec::with_capacity(IN_FLIGHT);
    for task in tasks {
        durations.push(task.await.expect("a launch completes"));
    }
    (durations, started.elapsed())
}

/// Open file descriptors of this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd is readable")
        .count()
}

/// A `kB` field of `/proc/self/status`.
fn status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// The `q` quantile of `sorted` (nearest rank).
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    // `cargo test --benches` runs bench targets once as tests; this one is a measurement.
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    let (name, method, path) = VARIANT;
    let root = common::root();
    let cassettes = root.join("fixtures/cassettes");
    let scenario = Scenario::load(&root.join("scenarios/lifecycle.yaml"))
        .expect("the lifecycle scenario loads");
    let variant = variants::CLOUD
        .iter()
        .find(|v| v.name == name)
        .expect("the e2b variant");
    let cassette = variants::load_cassette(
        &variants::cassette_path(&cassettes, name, &scenario.name),
        name,
        &scenario.name,
    )
    .expect("the lifecycle cassette loads");
    let exchanges = launches::create_to_first_result(&cassette, method, path);
    let recorded: f64 = exchanges.iter().map(|e| e.response.latency_ms).sum();
    let setup = Arc::new(Setup {
        variant,
        cassettes,
        scenario,
        exchanges,
    });
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let started = Instant::now();
    let (harness, bare, fds) = runtime.block_on(async {
        // One launch of each kind first: what is opened once, lazily, is not growth.
        launches::harness_once(setup.variant, &setup.cassettes, &setup.scenario, Pace::Recorded).await;
        launches::bare_once(setup.variant.name, &setup.exchanges, &reqwest::Client::new(), Pace::Recorded).await;
        tokio::time::sleep(SETTLE).await;
        let mut fds = vec![("before".to_owned(), open_fds())];
        let (mut harness, mut bare) = (Vec::new(), Vec::new());
        for round in 1..=LAUNCHES / IN_FLIGHT {
            for (kind, is_harness) in [("harness", true), ("bare", false)] {
                let (durations, wall) = batch(&setup, is_harness).await;
                tokio::time::sleep(SETTLE).await;
                let open = open_fds();
                println!(
                    "round {round:2} {kind:7}: {IN_FLIGHT} launches in {:6.2} s, create-to-first-result max {:8.2} ms; open fds {open}, VmRSS {} kB",
                    wall.as_secs_f64(),
                    ms(*durations.iter().max().expect("a batch")),
                    status_kb("VmRSS"),
                );
                fds.push((format!("after round {round} {kind}"), open));
                if is_harness {
                    harness.extend(durations);
                } else {
                    bare.extend(durations);
                }
            }
        }
        (harness, bare, fds)
    });
    drop(runtime);
    let end = open_fds();
    let peak_kb = status_kb("VmHWM");
    let (mut harness, mut bare) = (harness, bare);
    harness.sort();
    bare.sort();
    let (h50, h99) = (quantile(&harness, 0.5), quantile(&harness, 0.99));
    let (b50, b99) = (quantile(&bare, 0.5), quantile(&bare, 0.99));
    let overhead99 = ms(h99) - ms(b99);
    let before = fds[0].1;
    let most = fds.iter().map(|(_, n)| *n).max().expect("counted");
    println!(
        "{name}: create-to-first-result over {} responses at the recorded pace ({recorded:.1} ms recorded), {} launches of each kind, {IN_FLIGHT} in flight, {:.0} s in all",
        setup.exchanges.len(),
        harness.len(),
        started.elapsed().as_secs_f64(),
    );
    println!(
        "  harness p50 {:.2} ms, p99 {:.2} ms; bare client p50 {:.2} ms, p99 {:.2} ms",
        ms(h50),
        ms(h99),
        ms(b50),
        ms(b99)
    );
    println!(
        "  harness overhead: p99 {overhead99:+.2} ms (budget {} ms), p50 {:+.2} ms",
        OVERHEAD_P99.as_millis(),
        ms(h50) - ms(b50)
    );
    println!(
        "  peak RSS (VmHWM) {:.1} MB (budget {} MB)",
        peak_kb as f64 / 1024.0,
        PEAK_RSS_KB / 1024
    );
    println!(
        "  open fds: {before} before, at most {most} after a batch, {} after the last batch, {end} at the end (runtime dropped)",
        fds.last().expect("counted").1
    );
    let mut missed = Vec::new();
    if overhead99 > ms(OVERHEAD_P99) {
        missed.push(format!(
            "the harness adds {overhead99:.2} ms at p99, over {} ms",
            OVERHEAD_P99.as_millis()
        ));
    }
    if peak_kb > PEAK_RSS_KB {
        missed.push(format!("peak RSS {} kB, over {PEAK_RSS_KB} kB", peak_kb));
    }
    let last = fds.last().expect("counted").1;
    if last > before || end > before {
        missed.push(format!(
            "open file descriptors grew: {before} before, {last} after the last batch, {end} at the end"
        ));
    }
    if !missed.is_empty() {
        eprintln!("{}", missed.join("; "));
        std::process::exit(1);
    }
}
