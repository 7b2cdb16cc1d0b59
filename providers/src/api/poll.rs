//! Polling for providers that cannot push: short first interval, backing off, and the
//! interval reported as the measurement's resolution.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::{ErrorKind, ProviderError, Result};

/// The first wait between polls.
const POLL_FIRST_INTERVAL: Duration = Duration::from_millis(50);
/// The longest wait between polls.
const POLL_MAX_INTERVAL: Duration = Duration::from_secs(2);

/// How long to wait between polls: the first wait, growing by half each time up to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollIntervals {
    /// The first wait.
    pub first: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl PollIntervals {
    /// 50 ms, backing off to 2 s: for a real service.
    pub const LIVE: PollIntervals = PollIntervals {
        first: POLL_FIRST_INTERVAL,
        max: POLL_MAX_INTERVAL,
    };
    /// 1 ms throughout: for a replay at instant pace, where only the order of answers
    /// matters and a real wait would only slow the run.
    pub const INSTANT: PollIntervals = PollIntervals {
        first: Duration::from_millis(1),
        max: Duration::from_millis(1),
    };
}

/// Calls `probe` until it returns `Some`, waiting `intervals.first` after the first call
/// and half as long again after each, up to `intervals.max`, or fails with
/// [`ErrorKind::Timeout`] naming `what` once `deadline` has passed. Returns the value and the resolution: the last wait, within
/// which the change happened.
pub async fn poll_until<T, F, Fut>(
    what: &str,
    deadline: Duration,
    intervals: PollIntervals,
    mut probe: F,
) -> Result<(T, Duration)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let started = Instant::now();
    let mut interval = intervals.first;
    let mut last_wait = Duration::ZERO;
    let mut polls = 0u32;
    loop {
        polls += 1;
        if let Some(value) = probe().await? {
            return Ok((value, last_wait));
        }
        let elapsed = started.elapsed();
        if elapsed >= deadline {
            return Err(ProviderError::new(
                ErrorKind::Timeout,
                format!(
                    "{what}: still not done after {:.1} s ({polls} polls)",
                    elapsed.as_secs_f64()
                ),
            ));
        }
        let wait = interval.min(deadline - elapsed);
        tokio::time::sleep(wait).await;
        last_wait = wait;
        interval = (interval * 3 / 2).min(intervals.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn polls_back_off_and_report_the_last_wait() {
        let calls = AtomicU32::new(0);
        let (value, resolution) = poll_until(
            "ready",
            Duration::from_secs(5),
            PollIntervals::LIVE,
            || async {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                Ok((n == 3).then_some(n))
            },
        )
        .await
        .unwrap();
        assert_eq!(value, 3);
        // 50 ms, 75 ms, then 112.5 ms before the fourth call.
        assert_eq!(resolution, Duration::from_micros(112_500));
    }

    #[tokio::test]
    async fn a_condition_never_met_times_out_by_the_deadline() {
        let started = Instant::now();
        let err = poll_until(
            "sandbox ready",
            Duration::from_millis(300),
            PollIntervals::LIVE,
            || async { Ok(None::<()>) },
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Timeout);
        assert!(err.message.contains("sandbox ready"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
