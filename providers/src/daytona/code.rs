//! How code and commands travel through Daytona's toolbox.
//!
//! `process/code-run` runs a fresh `python3` per call and answers its combined output and
//! exit code, with no value of the last expression and no separate stderr. The code is
//! therefore wrapped: the wrapper runs it like a notebook cell (the last expression's
//! `repr` is the result), keeps stderr in memory, and ends stdout with one marker line
//! carrying the result, the error and stderr as JSON.

use serde::Deserialize;

use crate::{CodeOutput, ErrorKind, ProviderError, Result, tail};

/// Starts the wrapper's last line; nothing else writes it.
const RESULT_MARKER: &str = "SANDBOX_MATRIX_DAYTONA_RESULT ";

/// The Python sent to code-run for `code`.
pub fn wrap(code: &str) -> String {
    let source = serde_json::to_string(code).expect("a string serializes");
    let marker = serde_json::to_string(RESULT_MARKER).expect("a string serializes");
    format!(
        r#"import ast as _a, io as _i, json as _j, sys as _s, traceback as _t
_src = {source}
_err = _i.StringIO()
_s.stderr = _err
_res = None
_exc = None
_g = {{"__name__": "__main__"}}
try:
    _tree = _a.parse(_src, "<cell>", "exec")
    _last = _tree.body.pop() if _tree.body and isinstance(_tree.body[-1], _a.Expr) else None
    exec(compile(_tree, "<cell>", "exec"), _g)
    if _last is not None:
        _v = eval(compile(_a.Expression(_last.value), "<cell>", "eval"), _g)
        if _v is not None:
            _res = repr(_v)
except BaseException as _e:
    _exc = type(_e).__name__ + ": " + str(_e)
    _t.print_exc()
_s.stdout.flush()
_s.__stdout__.write("\n" + {marker} + _j.dumps({{"result": _res, "error": _exc, "stderr": _err.getvalue()}}) + "\n")
_s.__stdout__.flush()
"#
    )
}

/// The wrapper's marker line.
#[derive(Deserialize)]
struct Answer {
    result: Option<String>,
    error: Option<String>,
    stderr: String,
}

/// Splits code-run's output into what the code printed and the wrapper's answer.
pub fn unwrap(output: &str, exit_code: Option<i64>) -> Result<CodeOutput> {
    let needle = format!("\n{RESULT_MARKER}");
    let Some(at) = output.rfind(&needle) else {
        return Err(ProviderError::new(
            ErrorKind::Protocol,
            format!(
                "code-run ended (exit code {exit_code:?}) without the wrapper's answer: {}",
                tail(output, 600)
            ),
        ));
    };
    let line = output[at + needle.len()..]
        .lines()
        .next()
        .unwrap_or_default();
    let answer: Answer = serde_json::from_str(line).map_err(|e| {
        ProviderError::new(
            ErrorKind::Protocol,
            format!("code-run's answer line is not the wrapper's JSON: {e}"),
        )
    })?;
    Ok(CodeOutput {
        stdout: output[..at].to_owned(),
        stderr: answer.stderr,
        result: answer.result,
        error: answer.error,
    })
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

    #[test]
    fn the_answer_line_is_split_from_stdout() {
        let out = format!(
            "hello\n\n{RESULT_MARKER}{{\"result\": \"2\", \"error\": null, \"stderr\": \"w\\n\"}}\n"
        );
        let got = unwrap(&out, Some(0)).unwrap();
        assert_eq!(got.stdout, "hello\n");
        assert_eq!(got.result.as_deref(), Some("2"));
        assert_eq!(got.stderr, "w\n");
        assert_eq!(got.error, None);
    }

    #[test]
    fn output_without_the_answer_is_a_protocol_error() {
        let e = unwrap("Killed", Some(137)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Protocol);
        assert!(e.message.contains("137") && e.message.contains("Killed"));
    }

    #[test]
    fn the_wrapper_embeds_the_code_as_a_string_literal() {
        let code = "print('a\"b')\n1+1";
        assert!(wrap(code).contains(&serde_json::to_string(code).unwrap()));
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
