//! The modal variant's code channel: `channel.py`, run in the sandbox through the command
//! router as the contract's user, is a client of the sandbox's own Jupyter Server (the
//! contract base's main process) and its kernels. Launch installs it and waits for the
//! server in one exec; each later call is one exec printing one JSON line. A context is
//! a server session of its own (its kernel keeps state between calls, a restart clears
//! it, and several contexts run at once).

use std::time::Duration;

use serde::Deserialize;

use super::router::Router;
use crate::{CodeOutput, CommandOutput, ErrorKind, ProviderError, Result};

/// Where launch installs the channel in the sandbox.
pub const PATH: &str = "/tmp/sandbox-matrix/channel.py";
/// The context `run_code` and `restart` use.
pub const DEFAULT_CONTEXT: &str = "default";
/// The channel's source.
const SOURCE: &str = include_str!("channel.py");
/// Writes the source (its first argument) to [`PATH`], readable by the user alone, then
/// runs it with the remaining arguments.
const INSTALL: &str = "import os,sys\n\
p=sys.argv.pop(1);s=sys.argv.pop(1)\n\
os.makedirs(os.path.dirname(p),mode=0o700,exist_ok=True)\n\
f=os.open(p,os.O_WRONLY|os.O_CREAT|os.O_TRUNC,0o600);os.write(f,s.encode());os.close(f)\n\
sys.argv[0]=p\n\
exec(compile(s,p,'exec'),{'__name__':'__main__'})";
/// How long one code call may run, the kernel's start included.
pub const EXECUTE_TIMEOUT: Duration = Duration::from_secs(330);

/// What `ready` printed.
#[derive(Debug, Deserialize)]
pub struct Ready {
    /// How long the server took to answer, from the exec's start.
    pub waited_ms: f64,
    /// `MODAL_REGION` in the sandbox: where Modal placed it, if it says.
    #[serde(default)]
    pub region: Option<String>,
}

/// What `run` printed.
#[derive(Debug, Deserialize)]
struct Ran {
    stdout: String,
    stderr: String,
    result: Option<String>,
    error: Option<String>,
    kernel_ms: f64,
}

/// What `restart` printed.
#[derive(Debug, Deserialize)]
pub struct Restarted {
    /// The server's restart call.
    pub restart_ms: f64,
    /// From then until the kernel answered.
    pub ready_ms: f64,
}

/// Installs the channel and waits up to `wait` for the server to answer.
pub async fn install_and_wait(router: &Router, wait: Duration) -> Result<Ready> {
    let argv = [
        "python3",
        "-c",
        INSTALL,
        PATH,
        SOURCE,
        "ready",
        &wait.as_secs().max(1).to_string(),
    ];
    let output = router
        .exec(&owned(&argv), false, wait + Duration::from_secs(30))
        .await?;
    parse(&output, "ready")
}

/// Runs `code` in `context`'s kernel; the output and the time the exec spent getting a
/// kernel to answer (starting it on first use).
pub async fn run(router: &Router, context: &str, code: &str) -> Result<(CodeOutput, Duration)> {
    let argv = ["python3", PATH, "run", context, code];
    let output = router.exec(&owned(&argv), false, EXECUTE_TIMEOUT).await?;
    let ran: Ran = parse(&output, "run")?;
    Ok((
        CodeOutput {
            stdout: ran.stdout,
            stderr: ran.stderr,
            result: ran.result,
            error: ran.error,
        },
        millis(ran.kernel_ms),
    ))
}

/// Restarts `context`'s kernel and waits until it answers.
pub async fn restart(router: &Router, context: &str) -> Result<Restarted> {
    let argv = ["python3", PATH, "restart", context];
    let output = router.exec(&owned(&argv), false, EXECUTE_TIMEOUT).await?;
    parse(&output, "restart")
}

/// A span the channel printed in milliseconds.
pub fn millis(ms: f64) -> Duration {
    Duration::try_from_secs_f64(ms / 1000.0).unwrap_or_default()
}

fn owned(argv: &[&str]) -> Vec<String> {
    argv.iter().map(|s| (*s).to_owned()).collect()
}

#[derive(Deserialize)]
struct Failure {
    failure: String,
}

/// The JSON line an exec of the channel printed for `op`, or its failure.
fn parse<T: serde::de::DeserializeOwned>(output: &CommandOutput, op: &str) -> Result<T> {
    let line = output.stdout.lines().rev().find(|l| !l.trim().is_empty());
    if let Some(failure) = line.and_then(|l| serde_json::from_str::<Failure>(l).ok()) {
        return Err(ProviderError::new(
            ErrorKind::Api,
            format!("the code channel's {op} failed: {}", failure.failure),
        ));
    }
    match (output.exit_code, line.map(serde_json::from_str::<T>)) {
        (Some(0), Some(Ok(value))) => Ok(value),
        (code, parsed) => Err(ProviderError::new(
            ErrorKind::Protocol,
            format!(
                "the code channel's {op} exited {} with {}; stderr: {}",
                code.map_or("without a code".to_owned(), |c| c.to_string()),
                match parsed {
                    Some(Err(e)) => format!("output that is not its JSON line ({e})"),
                    _ => "no output".to_owned(),
                },
                crate::tail(output.stderr.trim(), 600)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(code: i64, stdout: &str) -> CommandOutput {
        CommandOutput {
            exit_code: Some(code),
            stdout: stdout.to_owned(),
            stderr: "Traceback: boom".to_owned(),
        }
    }

    #[test]
    fn a_run_line_becomes_the_code_output() {
        let ran: Ran = parse(
            &output(
                0,
                "noise\n{\"stdout\": \"hi\\n\", \"stderr\": \"\", \"result\": \"2\", \"error\": null, \"kernel_ms\": 12.5}\n",
            ),
            "run",
        )
        .expect("parses");
        assert_eq!(
            (ran.result.as_deref(), ran.stdout.as_str()),
            (Some("2"), "hi\n")
        );
        assert_eq!(millis(ran.kernel_ms), Duration::from_micros(12_500));
    }

    #[test]
    fn a_failure_or_a_crash_is_an_error_naming_the_call() {
        let failed = parse::<Ready>(
            &output(3, "{\"failure\": \"not ready after 60s\"}"),
            "ready",
        )
        .expect_err("a failure");
        assert!(
            failed
                .to_string()
                .contains("ready failed: not ready after 60s"),
            "{failed}"
        );
        let crashed = parse::<Ready>(&output(1, ""), "ready").expect_err("a crash");
        assert!(
            crashed.to_string().contains("exited 1 with no output")
                && crashed.to_string().contains("Traceback: boom"),
            "{crashed}"
        );
        let garbled = parse::<Ready>(&output(0, "{\"x\": 1}"), "ready").expect_err("not its line");
        assert!(
            garbled.to_string().contains("not its JSON line"),
            "{garbled}"
        );
    }
}
