//! The `lifetime` step: one sandbox launched with a lifetime limit, watched until the
//! provider ends it. Users of these providers report sandboxes that die long before their
//! timeout and sandboxes that outlive it; this step shows both.
//!
//! Every time is counted from the create request. The provider starts its clock somewhere
//! between that request and create's answer (or, for a limit counted from the last
//! activity, at the last call of the launch), so the sandbox must be alive at
//! `asked − margin` from the request, and gone by `asked + within` from the answer.
//! In between, the provider's own state is read every [`Watch::every`]; that read is not
//! activity, so it does not move a limit counted from the last activity.

use std::time::{Duration, Instant};

use sandbox_providers::{LifetimeLimit, Provider, SandboxId, SandboxState};

use crate::model::results::LifetimeSeen;
use crate::run::scenario::{DEFAULT_ANSWER, DEFAULT_CODE};

/// How the step watches: when it must see the sandbox alive and how often it looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watch {
    /// The lifetime asked for, in the provider's unit.
    pub asked: Duration,
    /// How long past it the sandbox may still be seen.
    pub within: Duration,
    /// How long before `asked` it must last be seen alive.
    pub margin: Duration,
    /// How often its state is read.
    pub every: Duration,
}

impl Watch {
    /// The watch for a sandbox asked to live `asked`: seen alive a tenth of it (2 s at
    /// least, half at most) before its end, its state read every tenth (1 s to 30 s).
    pub fn new(asked: Duration, within: Duration) -> Self {
        let tenth = asked / 10;
        Self {
            asked,
            within,
            margin: tenth.max(Duration::from_secs(2)).min(asked / 2),
            every: tenth.clamp(Duration::from_secs(1), Duration::from_secs(30)),
        }
    }
}

/// What the provider said of the sandbox at one look.
enum Look {
    Alive,
    Gone(String),
}

/// Watches `sandbox`, whose create was asked at `started` with `limit`, as `watch` says.
/// Returns what it saw and, when the sandbox did not keep its lifetime, why; the caller
/// stops it when it was not seen gone. `log` takes progress lines.
pub async fn watch(
    provider: &dyn Provider,
    limit: LifetimeLimit,
    watch: Watch,
    started: Instant,
    sandbox: SandboxId,
    log: &(dyn Fn(&str) + Send + Sync),
) -> (LifetimeSeen, Result<(), String>) {
    let created = started.elapsed();
    let since_create = matches!(limit, LifetimeLimit::SinceCreate { .. });
    let mut seen = LifetimeSeen {
        asked: watch.asked,
        counts_from: if since_create {
            "create"
        } else {
            "last activity"
        }
        .to_owned(),
        created,
        alive_at: None,
        gone_at: None,
        ending: None,
        early: false,
        every: watch.every,
    };
    let alive_by = watch.asked.saturating_sub(watch.margin);
    let gone_by = created + watch.asked + watch.within;
    log(&format!(
        "asked to end {} after its {}: must answer at {} and be gone by {}",
        secs(watch.asked),
        seen.counts_from,
        secs(alive_by),
        secs(gone_by)
    ));
    // Where the limit counts from create, the code channel answers once first: its first
    // answer (a kernel starting) is not what the look at `alive_by` should wait for.
    let mut first = since_create;
    // Alive until `alive_by`, looked at every `every`; the last look at `alive_by` itself.
    loop {
        let next = if first {
            started.elapsed()
        } else {
            (started.elapsed() + watch.every).min(alive_by)
        };
        tokio::time::sleep_until((started + next).into()).await;
        let last = next >= alive_by;
        // Create may return after `alive_by`: the look is then at once, timed as it is.
        let looked_at = started.elapsed();
        let look = if (last || std::mem::take(&mut first)) && since_create {
            answers(provider, &sandbox).await
        } else {
            look(provider, &sandbox).await
        };
        match look {
            Ok(Look::Alive) => seen.alive_at = Some(looked_at),
            Ok(Look::Gone(ending)) => {
                let at = started.elapsed();
                seen.gone_at = Some(at);
                // Seen gone before its limit could have passed: an early death. Seen gone
                // only after, because the launch or a look took that long: no verdict on
                // the provider, but nothing was seen alive where it had to be.
                seen.early = at < watch.asked;
                let why = if seen.early {
                    died_early(at, &watch, &ending, &seen)
                } else {
                    format!(
                        "not seen alive at {}: create returned at {} and the next look ended at {}, past the {} asked ({ending}); ask a longer `timeout`",
                        secs(alive_by),
                        secs(created),
                        secs(at),
                        secs(watch.asked),
                    )
                };
                seen.ending = Some(ending);
                return (seen, Err(why));
            }
            Err(e) => return (seen, Err(format!("at {}: {e}", secs(started.elapsed())))),
        }
        if last {
            break;
        }
    }
    log(&format!(
        "alive at {}",
        secs(seen.alive_at.unwrap_or_default())
    ));
    // Then gone by `gone_by`.
    loop {
        let next = (started.elapsed() + watch.every).min(gone_by);
        tokio::time::sleep_until((started + next).into()).await;
        match look(provider, &sandbox).await {
            Ok(Look::Gone(ending)) => {
                let at = started.elapsed();
                seen.gone_at = Some(at);
                // Seen gone past `alive_by` but before its limit could have passed: the
                // looks are a tenth of the lifetime apart, at most 30 s, and a long
                // lifetime's margin holds several of them.
                if at < watch.asked {
                    seen.early = true;
                    let why = died_early(at, &watch, &ending, &seen);
                    seen.ending = Some(ending);
                    return (seen, Err(why));
                }
                log(&format!(
                    "gone at {} ({ending}), {} past its limit",
                    secs(at),
                    secs(seen.overrun().unwrap_or_default())
                ));
                seen.ending = Some(ending);
                return (seen, Ok(()));
            }
            Ok(Look::Alive) if next >= gone_by => {
                return (
                    seen,
                    Err(format!(
                        "still running at {}, {} past the {} asked: the provider did not end it",
                        secs(next),
                        secs(next.saturating_sub(created + watch.asked)),
                        secs(watch.asked)
                    )),
                );
            }
            Ok(Look::Alive) => {}
            Err(e) => return (seen, Err(format!("at {}: {e}", secs(started.elapsed())))),
        }
    }
}

/// Why a sandbox seen gone at `at`, before the `watch.asked` it was asked to live, failed.
fn died_early(at: Duration, watch: &Watch, ending: &str, seen: &LifetimeSeen) -> String {
    format!(
        "died early: gone at {} of the {} asked ({ending}); last seen alive at {}",
        secs(at),
        secs(watch.asked),
        seen.alive_at.map_or_else(|| "no time".to_owned(), secs)
    )
}

/// The provider's state of `sandbox`: running is alive; paused cannot answer, and is
/// counted as ended.
async fn look(provider: &dyn Provider, sandbox: &SandboxId) -> Result<Look, String> {
    match provider.sandbox_state(sandbox).await {
        Ok(Some(SandboxState::Running)) => Ok(Look::Alive),
        Ok(Some(SandboxState::Paused)) => Ok(Look::Gone("paused".to_owned())),
        Ok(Some(SandboxState::Stopped { ending, .. })) => Ok(Look::Gone(ending)),
        Ok(None) => Err("the provider cannot say what state a sandbox is in".to_owned()),
        Err(e) => Err(format!("asking the sandbox's state: {e}")),
    }
}

/// Alive and answering: the provider says it runs and `1+1` answers `2`.
async fn answers(provider: &dyn Provider, sandbox: &SandboxId) -> Result<Look, String> {
    if let Look::Gone(ending) = look(provider, sandbox).await? {
        return Ok(Look::Gone(ending));
    }
    match provider.run_code(sandbox, DEFAULT_CODE).await {
        Ok((output, _)) => {
            crate::checks::suite::check_answer(DEFAULT_CODE, DEFAULT_ANSWER, &output)
                .map(|()| Look::Alive)
                .map_err(|e| format!("it runs but does not answer: {e}"))
        }
        // A sandbox that ended as the code ran is gone, not broken.
        Err(e) => match look(provider, sandbox).await? {
            Look::Gone(ending) => Ok(Look::Gone(ending)),
            Look::Alive => Err(format!("it runs but does not answer `{DEFAULT_CODE}`: {e}")),
        },
    }
}

/// `6.4 s`.
fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests;
