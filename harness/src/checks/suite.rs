//! The conformance suite's dispatch: for each check of sandbox-contract/v1, what it asks of
//! the sandbox (a probe, code, a restart, contexts at once, the secrets scan) and how the
//! answer is judged. The runner hands it a [`CheckTarget`]; what a check cannot test was
//! decided before it runs ([`conformance::nothing_to_test`]).

use std::future::Future;
use std::time::Duration;

use sandbox_providers::{Capabilities, CodeOutput, ProviderError};
use serde_json::{Value, json};

use crate::checks::conformance::{self, Check, CheckParams, Verdict};
use crate::model::outcome::StepEnd;

/// What a check needs of the sandbox it runs in; the runner implements it for a step.
pub trait CheckTarget: Sync {
    /// What the variant can do.
    fn capabilities(&self) -> Capabilities;

    /// Runs probe `code` and returns its one JSON answer.
    fn probe(&self, code: &str) -> impl Future<Output = Result<Value, StepEnd>> + Send;

    /// Runs `code` on the code channel.
    fn run_code(&self, code: &str) -> impl Future<Output = Result<CodeOutput, StepEnd>> + Send;

    /// Runs `code` in context `context`, a kernel of its own.
    fn run_code_in(
        &self,
        context: &str,
        code: &str,
    ) -> impl Future<Output = Result<CodeOutput, ProviderError>> + Send;

    /// Restarts the code channel, keeping its timings.
    fn restart(&self) -> impl Future<Output = Result<(), StepEnd>> + Send;

    /// Looks for the run's secrets; `name at location` for each hit.
    fn find_secrets(&self) -> impl Future<Output = Result<Vec<String>, StepEnd>> + Send;

    /// A timing measured earlier in the scenario, such as `create-to-first-result`.
    fn measured(&self, name: &str) -> Option<Duration>;
}

/// Whether `check` goes through the sandbox's code channel on a variant with
/// `capabilities`: every probe does; the secrets scan runs through exec, as root, where
/// the variant can.
pub fn uses_code_channel(check: Check, capabilities: &Capabilities) -> bool {
    !(check == Check::Secrets && capabilities.exec_as_root)
}

/// Runs `check` with `params` against `target` and judges it.
pub async fn run(
    target: &impl CheckTarget,
    check: Check,
    params: &CheckParams,
) -> Result<Verdict, StepEnd> {
    Ok(match check {
        Check::Doctor => {
            conformance::judge_doctor(&target.probe(&conformance::doctor_probe()).await?)
        }
        Check::Identity => conformance::judge_identity(
            &target
                .probe(&conformance::probe_code(conformance::IDENTITY_PROBE))
                .await?,
        ),
        Check::Python => conformance::judge_python(
            &target
                .probe(&conformance::probe_code(conformance::PYTHON_PROBE))
                .await?,
            // `nothing_to_test` skips check 3 without an expected version.
            params.python.as_deref().unwrap_or_default(),
        ),
        Check::Kernel => {
            let output = target.run_code("1+1").await?;
            let problems = check_answer("1+1", "2", &output)
                .err()
                .into_iter()
                .collect();
            Verdict::new(problems, json!({ "answer": output.result }))
        }
        Check::Imports => conformance::judge_imports(
            &target
                .probe(&conformance::imports_probe(&params.packages))
                .await?,
            &params.packages,
        ),
        Check::Filesystem => {
            conformance::judge_filesystem(&target.probe(&conformance::filesystem_probe()).await?)
        }
        Check::Restart => restart(target).await?,
        Check::Shutdown => {
            conformance::judge_shutdown(&target.probe(&conformance::shutdown_probe()).await?)
        }
        Check::Secrets => {
            let found = target.find_secrets().await?;
            let problems = if found.is_empty() {
                Vec::new()
            } else {
                vec![format!("build secret found: {}", found.join(", "))]
            };
            Verdict::new(problems, json!({ "found": found }))
        }
        Check::Egress => conformance::judge_egress(
            &target
                .probe(&conformance::egress_probe(&params.allowed, &params.blocked))
                .await?,
            &params.allowed,
            &params.blocked,
        ),
        Check::Gpu if target.capabilities().gpus < params.gpus.max(1) => Verdict::new(
            vec![format!(
                "{} GPU(s) asked for, and this variant attaches {}",
                params.gpus.max(1),
                target.capabilities().gpus
            )],
            json!({ "gpus": [] }),
        ),
        Check::Gpu => conformance::judge_gpu(
            &target
                .probe(&conformance::probe_code(conformance::GPU_PROBE))
                .await?,
            params.gpus.max(1),
            params.cuda.as_deref(),
        ),
        Check::Throughput => conformance::judge_throughput(
            &target.probe(&conformance::throughput_probe()).await?,
            params
                .minimum_mib_per_second
                .unwrap_or(conformance::DEFAULT_MIN_MIB_PER_SECOND),
        ),
        Check::ColdStart => match params.within {
            Some(within) => {
                conformance::judge_cold_start(target.measured("create-to-first-result"), within)
            }
            // Decided before the check runs, by `conformance::nothing_to_test`.
            None => Verdict::skip("no cold-start budget (`within:`)", json!({})),
        },
        Check::ConcurrentKernels => {
            concurrent(target, params.kernels.unwrap_or(4), CONTEXT_ANSWER_DEADLINE).await
        }
    })
}

/// Check 7: a name bound before a kernel restart, and kept between calls, is gone after it.
async fn restart(target: &impl CheckTarget) -> Result<Verdict, StepEnd> {
    let marker = "_sm_restart_marker";
    target.run_code(&format!("{marker} = 1")).await?;
    // Without this, a channel that keeps nothing would pass on a marker never kept.
    let before = target
        .run_code(&format!("\"{marker}\" in globals()"))
        .await?;
    if before.result.as_deref() != Some("True") {
        return Err(StepEnd::Failed(format!(
            "the code channel is declared stateful but kept nothing between two calls ({}), so the restart cannot be shown",
            describe(&before)
        )));
    }
    target.restart().await?;
    let after = target
        .run_code(&format!("\"{marker}\" in globals()"))
        .await?;
    let problems = match after.result.as_deref() {
        Some("False") => Vec::new(),
        _ => vec![format!("state survived the restart: {}", describe(&after))],
    };
    Ok(Verdict::new(problems, json!({ "after": after.result })))
}

/// How long each context of check 14 holds its turn, so that contexts running at once
/// overlap in time by a margin no scheduling jitter closes.
const OVERLAP_HOLD_SECONDS: f64 = 1.0;

/// How long one context of check 14 may take to answer, a kernel's start included: long
/// for a loaded machine, and short enough that a context that hangs is named within the
/// step's budget rather than the whole step timing out.
const CONTEXT_ANSWER_DEADLINE: Duration = Duration::from_secs(50);

/// Runs `code` in context `name`, as `target` does, within `deadline`; an error names the
/// context.
async fn answer_in(
    target: &impl CheckTarget,
    name: &str,
    code: &str,
    deadline: Duration,
) -> Result<CodeOutput, String> {
    match tokio::time::timeout(deadline, target.run_code_in(name, code)).await {
        Ok(answer) => answer.map_err(|e| format!("{name}: {e}")),
        Err(_) => Err(format!(
            "{name} did not answer within {}",
            sandbox_providers::for_people(deadline)
        )),
    }
}

/// Check 14: `kernels` contexts each answer `1+1` at once, and prove they are separate
/// kernels running side by side: once every context has answered (each kernel started),
/// each reports its process id and the wall-clock times around a hold of
/// [`OVERLAP_HOLD_SECONDS`]. The ids must all differ and every hold must share an instant
/// (the latest start before the earliest end), which contexts served one at a time never do.
/// A context that does not answer within `deadline` is named.
async fn concurrent(target: &impl CheckTarget, kernels: u32, deadline: Duration) -> Verdict {
    let names: Vec<String> = (0..kernels).map(|i| format!("sm-context-{i}")).collect();
    let answers = futures_util::future::join_all(
        names
            .iter()
            .map(|name| answer_in(target, name, "1+1", deadline)),
    )
    .await;
    let (mut answered, mut errors) = (0u32, Vec::new());
    for (name, answer) in names.iter().zip(answers) {
        match answer {
            Ok(output) if output.result.as_deref() == Some("2") => answered += 1,
            Ok(output) => errors.push(format!("{name}: {}", describe(&output))),
            Err(e) => errors.push(e),
        }
    }
    if answered != kernels {
        return Verdict::new(
            vec![format!(
                "{answered} of {kernels} contexts answered: {}",
                errors.join("; ")
            )],
            json!({ "answered": answered, "kernels": kernels }),
        );
    }
    let probe = format!(
        "import os as _sm_os, time as _sm_time\n_sm_t0 = _sm_time.time()\n_sm_time.sleep({OVERLAP_HOLD_SECONDS})\nprint(_sm_os.getpid(), repr(_sm_t0), repr(_sm_time.time()))\ndel _sm_os, _sm_time, _sm_t0"
    );
    let held = futures_util::future::join_all(
        names
            .iter()
            .map(|name| answer_in(target, name, &probe, deadline)),
    )
    .await;
    let mut spans: Vec<(u64, f64, f64)> = Vec::new();
    let mut problems = Vec::new();
    for (name, answer) in names.iter().zip(held) {
        let parsed = answer.and_then(|output| {
            let fields: Vec<&str> = output.stdout.split_whitespace().collect();
            match fields[..] {
                [pid, start, end] => Ok((
                    pid.parse::<u64>()
                        .map_err(|e| format!("pid `{pid}`: {e}"))?,
                    start
                        .parse::<f64>()
                        .map_err(|e| format!("start `{start}`: {e}"))?,
                    end.parse::<f64>()
                        .map_err(|e| format!("end `{end}`: {e}"))?,
                )),
                _ => Err(format!("no pid and times: {}", describe(&output))),
            }
        });
        match parsed {
            Ok(span) => spans.push(span),
            Err(e) if e.starts_with(name.as_str()) => problems.push(e),
            Err(e) => problems.push(format!("{name}: {e}")),
        }
    }
    let pids: std::collections::BTreeSet<u64> = spans.iter().map(|(pid, _, _)| *pid).collect();
    let latest_start = spans.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
    let earliest_end = spans.iter().map(|s| s.2).fold(f64::INFINITY, f64::min);
    if problems.is_empty() {
        if pids.len() != spans.len() {
            problems.push(format!(
                "the {kernels} contexts ran in {} process(es), not {kernels} kernels",
                pids.len()
            ));
        }
        if latest_start >= earliest_end {
            problems.push(format!(
                "the contexts did not run at once: the last started {:.2} s after the first ended",
                latest_start - earliest_end
            ));
        }
    }
    Verdict::new(
        problems,
        json!({
            "answered": answered,
            "kernels": kernels,
            "pids": pids,
            "overlap_seconds": (earliest_end - latest_start).max(0.0),
            "spans": spans.iter().map(|(pid, start, end)| json!({"pid": pid, "start": start, "end": end})).collect::<Vec<_>>(),
        }),
    )
}

/// Checks a code output against the expected answer, describing what came instead.
pub(crate) fn check_answer(code: &str, answer: &str, output: &CodeOutput) -> Result<(), String> {
    if output.result.as_deref() == Some(answer) {
        Ok(())
    } else {
        Err(format!(
            "`{code}` should answer `{answer}`, got {}",
            describe(output)
        ))
    }
}

/// What a code output holds, for a person: its error, its result, its stdout, or nothing.
pub(crate) fn describe(output: &CodeOutput) -> String {
    match (&output.result, &output.error) {
        (_, Some(error)) => format!("an error: {error}"),
        (Some(result), None) => format!("`{result}`"),
        (None, None) if !output.stdout.is_empty() => {
            format!(
                "no result (stdout: {})",
                sandbox_providers::quoted(output.stdout.trim())
            )
        }
        (None, None) => "no result".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Contexts that answer `1+1`, then report the pid and times `span` gives context `i`;
    /// context `hangs`, if any, never answers.
    struct Contexts {
        span: fn(usize) -> (u64, f64, f64),
        hangs: Option<usize>,
    }

    impl CheckTarget for Contexts {
        fn capabilities(&self) -> Capabilities {
            unreachable!("check 14 asks only run_code_in")
        }
        async fn probe(&self, _: &str) -> Result<Value, StepEnd> {
            unreachable!("check 14 asks only run_code_in")
        }
        async fn run_code(&self, _: &str) -> Result<CodeOutput, StepEnd> {
            unreachable!("check 14 asks only run_code_in")
        }
        async fn run_code_in(
            &self,
            context: &str,
            code: &str,
        ) -> Result<CodeOutput, ProviderError> {
            let i: usize = context
                .trim_start_matches("sm-context-")
                .parse()
                .expect("an index");
            if self.hangs == Some(i) {
                std::future::pending::<()>().await;
            }
            Ok(if code == "1+1" {
                CodeOutput {
                    result: Some("2".to_owned()),
                    ..CodeOutput::default()
                }
            } else {
                let (pid, start, end) = (self.span)(i);
                CodeOutput {
                    stdout: format!("{pid} {start:?} {end:?}\n"),
                    ..CodeOutput::default()
                }
            })
        }
        async fn restart(&self) -> Result<(), StepEnd> {
            unreachable!("check 14 asks only run_code_in")
        }
        async fn find_secrets(&self) -> Result<Vec<String>, StepEnd> {
            unreachable!("check 14 asks only run_code_in")
        }
        fn measured(&self, _: &str) -> Option<Duration> {
            None
        }
    }

    #[tokio::test]
    async fn check_14_passes_only_on_separate_kernels_running_at_once() {
        let together = Contexts {
            span: |i| (100 + i as u64, 10.0 + 0.1 * i as f64, 11.0 + 0.1 * i as f64),
            hangs: None,
        };
        let verdict = concurrent(&together, 4, DEADLINE).await;
        assert!(verdict.passed, "{verdict:?}");
        assert_eq!(verdict.data["pids"], json!([100, 101, 102, 103]));

        // One kernel serving every context in turn: one pid, holds one after another.
        let one_at_a_time = Contexts {
            span: |i| (42, 10.0 + i as f64 * 1.01, 11.0 + i as f64 * 1.01),
            hangs: None,
        };
        let verdict = concurrent(&one_at_a_time, 4, DEADLINE).await;
        assert!(!verdict.passed);
        assert_eq!(
            verdict.detail.as_deref(),
            Some(
                "the 4 contexts ran in 1 process(es), not 4 kernels; the contexts did not run at once: the last started 2.03 s after the first ended"
            )
        );
        // Separate kernels served one at a time.
        let queued = Contexts {
            span: |i| (100 + i as u64, 10.0 + i as f64 * 1.5, 11.0 + i as f64 * 1.5),
            hangs: None,
        };
        let verdict = concurrent(&queued, 2, DEADLINE).await;
        assert_eq!(
            verdict.detail.as_deref(),
            Some("the contexts did not run at once: the last started 0.50 s after the first ended")
        );
    }

    /// A short deadline for the tests' contexts, which answer at once or never.
    const DEADLINE: Duration = Duration::from_millis(200);

    #[tokio::test]
    async fn check_14_names_the_context_that_does_not_answer() {
        let one_hangs = Contexts {
            span: |i| (100 + i as u64, 10.0, 11.0),
            hangs: Some(2),
        };
        let verdict = concurrent(&one_hangs, 4, DEADLINE).await;
        assert!(!verdict.passed);
        assert_eq!(
            verdict.detail.as_deref(),
            Some("3 of 4 contexts answered: sm-context-2 did not answer within 200ms")
        );
    }
}
