//! How code and commands travel through Daytona's toolbox.
//!
//! Code runs in an interpreter context over the `process/interpreter/execute` WebSocket:
//! the client sends `{code, contextId, timeout}` and the toolbox answers `stdout`,
//! `stderr` and `error` frames (`{type, text, name, value, traceback}`), a `control`
//! frame (`completed` or `interrupted`) and a close (1000, or 4008 on its timeout). The
//! context's worker `exec`s the code in its globals, so no value of the last expression
//! comes back: the code is wrapped to run like a notebook cell in those globals and to
//! end stdout with one marker line carrying the last expression's `repr` as JSON.

use serde::Deserialize;
use serde_json::Value;

use crate::{CodeOutput, ErrorKind, ProviderError, Result, tail};

/// Starts the wrapper's last line; nothing else writes it.
const RESULT_MARKER: &str = "SANDBOX_MATRIX_DAYTONA_RESULT ";

/// The Python sent to the interpreter for `code`: it runs in the context's globals, the
/// wrapper's own name (not `_sm_`: probes drop those) is gone afterwards, and an exception
/// reaches the toolbox as its `error` frame.
pub fn wrap(code: &str) -> String {
    let source = serde_json::to_string(code).expect("a string serializes");
    let marker = serde_json::to_string(RESULT_MARKER).expect("a string serializes");
    format!(
        r#"def _daytona_cell(_src, _g):
    import ast as _a, json as _j, sys as _s
    _tree = _a.parse(_src, "<cell>", "exec")
    _last = _tree.body.pop() if _tree.body and isinstance(_tree.body[-1], _a.Expr) else None
    exec(compile(_tree, "<cell>", "exec"), _g)
    _res = None
    if _last is not None:
        _v = eval(compile(_a.Expression(_last.value), "<cell>", "eval"), _g)
        if _v is not None:
            _res = repr(_v)
    _s.stdout.flush()
    _s.stdout.write("\n" + {marker} + _j.dumps({{"result": _res}}) + "\n")
    _s.stdout.flush()
try:
    _daytona_cell({source}, globals())
finally:
    del _daytona_cell
"#
    )
}

/// The wrapper's marker line.
#[derive(Deserialize)]
struct Answer {
    result: Option<String>,
}

/// One output frame of the execute WebSocket (`OutputMessage`), the fields read.
#[derive(Deserialize)]
struct Frame {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    value: String,
}

/// What the execute WebSocket's frames say: stdout without the wrapper's line, stderr,
/// the last expression's value and the error. An `interrupted` control frame is a
/// timeout; output with neither the wrapper's line nor an error is a protocol error.
pub fn output_from_frames(frames: &[Value]) -> Result<CodeOutput> {
    let mut out = CodeOutput::default();
    for value in frames {
        let frame: Frame = serde_json::from_value(value.clone()).map_err(|e| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "an interpreter frame is not an output message: {e}: {}",
                    tail(&value.to_string(), 200)
                ),
            )
        })?;
        match frame.kind.as_str() {
            "stdout" => out.stdout.push_str(&frame.text),
            "stderr" => out.stderr.push_str(&frame.text),
            "error" => out.error = Some(format!("{}: {}", frame.name, frame.value)),
            "control" if frame.text == "interrupted" => {
                return Err(ProviderError::new(
                    ErrorKind::Timeout,
                    "the interpreter interrupted the code (its timeout passed)",
                ));
            }
            _ => {}
        }
    }
    let needle = format!("\n{RESULT_MARKER}");
    match out.stdout.rfind(&needle) {
        Some(at) => {
            let line = out.stdout[at + needle.len()..]
                .lines()
                .next()
                .unwrap_or_default();
            let answer: Answer = serde_json::from_str(line).map_err(|e| {
                ProviderError::new(
                    ErrorKind::Protocol,
                    format!("the interpreter's answer line is not the wrapper's JSON: {e}"),
                )
            })?;
            out.result = answer.result;
            out.stdout.truncate(at);
        }
        None if out.error.is_none() => {
            return Err(ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "the interpreter ended without the wrapper's answer or an error: {}",
                    tail(&out.stdout, 600)
                ),
            ));
        }
        None => {}
    }
    Ok(out)
}

/// `argv` as one POSIX shell command line, every word single-quoted.
pub fn shell_command(argv: &[String]) -> String {
    argv.iter()
        .map(|word| format!("'{}'", word.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::json;

    fn stdout(text: &str) -> Value {
        json!({"type": "stdout", "text": text, "name": "", "value": "", "traceback": ""})
    }

    #[test]
    fn the_answer_line_is_split_from_stdout() {
        let frames = [
            stdout("hello\n"),
            json!({"type": "stderr", "text": "w\n"}),
            stdout(&format!("\n{RESULT_MARKER}{{\"result\": \"2\"}}\n")),
            json!({"type": "control", "text": "completed"}),
        ];
        let got = output_from_frames(&frames).unwrap();
        assert_eq!(got.stdout, "hello\n");
        assert_eq!(got.result.as_deref(), Some("2"));
        assert_eq!(got.stderr, "w\n");
        assert_eq!(got.error, None);
    }

    #[test]
    fn an_error_frame_is_the_error_and_needs_no_answer_line() {
        let frames = [
            json!({"type": "error", "name": "NameError", "value": "name 'x' is not defined", "traceback": ""}),
        ];
        let got = output_from_frames(&frames).unwrap();
        assert_eq!(
            got.error.as_deref(),
            Some("NameError: name 'x' is not defined")
        );
        assert_eq!(got.result, None);
    }

    #[test]
    fn output_without_the_answer_is_a_protocol_error_and_an_interrupt_a_timeout() {
        let e = output_from_frames(&[stdout("Killed")]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Protocol);
        assert!(e.message.contains("Killed"), "{e}");
        let e =
            output_from_frames(&[json!({"type": "control", "text": "interrupted"})]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Timeout);
    }

    #[test]
    fn the_wrapper_embeds_the_code_as_a_string_literal_and_runs_in_globals() {
        let code = "print('a\"b')\n1+1";
        let wrapped = wrap(code);
        assert!(wrapped.contains(&serde_json::to_string(code).unwrap()));
        assert!(wrapped.contains("globals()"), "{wrapped}");
    }

    #[test]
    fn words_are_quoted_for_the_shell() {
        let argv = [
            "python3".to_owned(),
            "-c".to_owned(),
            "print('x y')".to_owned(),
        ];
        assert_eq!(
            shell_command(&argv),
            r#"'python3' '-c' 'print('\''x y'\'')'"#
        );
    }
}
