//! The docs cannot drift from the tool: every command and example in README.md,
//! reports/README.md and docs/ is checked against this checkout.
//!
//! - Every `sandbox-matrix …` command, in a code block or a code span (a command table's
//!   synopsis included, its `[optional]` parts and `A|B` alternatives taken, its
//!   placeholders given a sample value), parses: `list`, `lint`, `gate` and `compare` on
//!   files that exist run for real against the checkout (a `console` block's output must
//!   be theirs); the others run with `--help` appended. clap handles `--help` as it reaches
//!   it, after the subcommands, the flags and the values before it were parsed: an
//!   unknown subcommand or flag, or a value its parser refuses (`--repeat 0`), still fails,
//!   while what is checked after parsing (a missing required argument, two flags that
//!   conflict) is not; the real runs cover those.
//! - Every flag of every command's `--help` is in docs/guide/commands.md.
//! - Every `cargo test`, `cargo bench` and `cargo run` names packages, test and bench
//!   targets that exist, and each test filter matches a test of its target (for the
//!   `engine` binary, `module::` names a module of harness/tests/engine/).
//! - Every repository path in a code span or a command, every link and every anchor
//!   resolves; every page under docs/ is in docs/SUMMARY.md.
//! - Every scenario and policy example parses; every SDK walkthrough runs a flow script
//!   the engine tests run, with variables that script reads, and a Python example is a
//!   part of one.
//! - The README stays a front page: at most 150 lines, its two commands in the first 40,
//!   a row per variant; reports/README.md names every file of a run folder and
//!   docs/guide/reports.md every row of the comparison table.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use sandbox_matrix::analyze::gate::Policy;
use sandbox_matrix::model::results;
use sandbox_matrix::report::{run_folder, table};
use sandbox_matrix::run::scenario::Scenario;
use sandbox_matrix::run::{ledger, variants};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("harness/ has a parent")
        .to_path_buf()
}

const BIN: &str = env!("CARGO_BIN_EXE_sandbox-matrix");

/// A Markdown file of the docs, by its path from the checkout.
struct Doc {
    path: String,
    text: String,
}

/// A fenced code block.
struct Fence {
    lang: String,
    /// The line of its first body line, from 1.
    line: usize,
    body: Vec<String>,
}

/// A code span, its line breaks made spaces.
struct Span {
    line: usize,
    text: String,
}

/// README.md, reports/README.md and every Markdown file under docs/.
fn docs() -> &'static [Doc] {
    static DOCS: OnceLock<Vec<Doc>> = OnceLock::new();
    DOCS.get_or_init(|| {
        let mut paths = vec!["README.md".to_owned(), "reports/README.md".to_owned()];
        let mut found = Vec::new();
        markdown_under(&root().join("docs"), &mut found);
        found.sort();
        paths.extend(found.iter().map(|p| relative(p)));
        paths
            .into_iter()
            .map(|path| {
                let text = std::fs::read_to_string(root().join(&path))
                    .unwrap_or_else(|e| panic!("{path}: {e}"));
                Doc { path, text }
            })
            .collect()
    })
}

fn markdown_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            markdown_under(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

fn doc(path: &str) -> &'static Doc {
    docs()
        .iter()
        .find(|d| d.path == path)
        .unwrap_or_else(|| panic!("{path} is not among the docs"))
}

/// The fenced blocks of `text`, and its prose: the text with every fenced line blanked.
fn split(text: &str) -> (Vec<Fence>, String) {
    let mut fences = Vec::new();
    let mut prose = Vec::new();
    let mut open: Option<(usize, Fence)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match open.take() {
            None if trimmed.starts_with("```") => {
                let lang = trimmed.trim_start_matches('`').trim().to_owned();
                open = Some((
                    indent,
                    Fence {
                        lang,
                        line: i + 2,
                        body: Vec::new(),
                    },
                ));
                prose.push("");
            }
            None => prose.push(line),
            Some((_, fence)) if trimmed == "```" => {
                fences.push(fence);
                prose.push("");
            }
            Some((indent, mut fence)) => {
                let cut = line.len() - line.trim_start().len();
                fence.body.push(line[cut.min(indent)..].to_owned());
                open = Some((indent, fence));
                prose.push("");
            }
        }
    }
    (fences, prose.join("\n"))
}

/// The code spans of `prose`.
fn spans(prose: &str) -> Vec<Span> {
    let bytes = prose.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let run = bytes[i..].iter().take_while(|b| **b == b'`').count();
        let start = i + run;
        let mut j = start;
        let mut end = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let close = bytes[j..].iter().take_while(|b| **b == b'`').count();
                if close == run {
                    end = Some(j);
                    break;
                }
                j += close;
            } else {
                j += 1;
            }
        }
        let Some(end) = end else {
            i = start;
            continue;
        };
        let text = prose[start..end].replace('\n', " ");
        let text = text.strip_prefix(' ').unwrap_or(&text);
        let text = text.strip_suffix(' ').unwrap_or(text);
        out.push(Span {
            line: prose[..i].matches('\n').count() + 1,
            text: text.to_owned(),
        });
        i = end + run;
    }
    out
}

/// `prose` with its code spans blanked, so that what they hold is not taken for links.
fn without_spans(prose: &str) -> String {
    let mut out = prose.to_owned();
    for span in spans(prose) {
        let quoted = format!("`{}`", span.text);
        out = out.replacen(&quoted, &" ".repeat(quoted.len()), 1);
    }
    out
}

/// Shell words: whitespace-separated, quotes removed (no expansion).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    let mut any = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
                any = false;
            }
            (None, c) => word.push(c),
        }
    }
    if any || !word.is_empty() {
        out.push(word);
    }
    out
}

/// The simple commands of a shell line: comments cut, split at `;`, `&&`, `||` and `|`
/// outside quotes.
fn simple_commands(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quote = None;
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match quote {
            Some(q) => {
                if c == q {
                    quote = None;
                }
                current.push(c);
            }
            None => match c {
                '"' | '\'' => {
                    quote = Some(c);
                    current.push(c);
                }
                '#' if current.is_empty() || current.ends_with(char::is_whitespace) => break,
                ';' | '|' | '&' => {
                    out.push(std::mem::take(&mut current));
                    if i + 1 < chars.len() && chars[i + 1] == c {
                        i += 1;
                    }
                }
                _ => current.push(c),
            },
        }
        i += 1;
    }
    out.push(current);
    out.into_iter()
        .map(|c| c.trim().to_owned())
        .filter(|c| !c.is_empty())
        .collect()
}

/// What a command line runs.
#[derive(Debug, Clone)]
enum Program {
    /// `sandbox-matrix ARGS` (or `cargo run -p sandbox-matrix -- ARGS`).
    Matrix(Vec<String>),
    /// `datalayer-sandbox ARGS`: the doctor.
    Doctor(Vec<String>),
    /// `cargo ARGS`.
    Cargo(Vec<String>),
    /// A script of the checkout run as a program (`.ci/run`).
    Script(String),
    /// A Python interpreter running a flow script, with the variables set before it.
    Flow { script: String, vars: Vec<String> },
}

/// A command found in the docs.
#[derive(Debug, Clone)]
struct Found {
    at: String,
    program: Program,
    /// A `console` block's output under it.
    output: Option<Vec<String>>,
}

/// A repository path as a command names it: `"$SM"/harness/…` is `harness/…`.
fn repo_path(word: &str) -> String {
    word.rsplit_once("$SM/")
        .or_else(|| word.rsplit_once("$PWD/"))
        .map_or(word, |(_, p)| p)
        .trim_start_matches("./")
        .to_owned()
}

/// What `words` (one simple command) runs, if it is one of ours.
fn program(words: &[String]) -> Option<Program> {
    let mut vars = Vec::new();
    let mut rest = words;
    while let Some((first, tail)) = rest.split_first() {
        let assignment = first.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        });
        if assignment {
            vars.push(first.split_once('=').expect("checked").0.to_owned());
        } else if first != "time" && first != "exec" {
            break;
        }
        rest = tail;
    }
    let (first, args) = rest.split_first()?;
    let args: Vec<String> = args.to_vec();
    let name = first.rsplit('/').next().unwrap_or(first);
    if name == "sandbox-matrix" {
        return Some(Program::Matrix(args));
    }
    if name == "datalayer-sandbox" && !args.is_empty() {
        return Some(Program::Doctor(args));
    }
    if first == "cargo" {
        return Some(Program::Cargo(args));
    }
    let path = repo_path(first);
    if path == ".ci/run" || (path.starts_with(".github/") && path.ends_with(".sh")) {
        return Some(Program::Script(path));
    }
    if (name == "python" || name == "python3")
        && let Some(script) = args.first().filter(|a| a.ends_with(".py"))
    {
        let script = repo_path(script);
        return Some(if script.starts_with("harness/tests/sdk/") {
            Program::Flow { script, vars }
        } else {
            Program::Script(script)
        });
    }
    None
}

/// The visible subcommands of `sandbox-matrix`, from its help.
fn subcommands() -> &'static BTreeSet<String> {
    static SUBS: OnceLock<BTreeSet<String>> = OnceLock::new();
    SUBS.get_or_init(|| {
        let help = run(&["--help"], None).stdout;
        commands_in_help(&help)
    })
}

/// The names under `Commands:` in a clap help text, `help` left out.
fn commands_in_help(help: &str) -> BTreeSet<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

/// Every command in the docs.
fn found() -> &'static [Found] {
    static FOUND: OnceLock<Vec<Found>> = OnceLock::new();
    FOUND.get_or_init(|| {
        let mut out = Vec::new();
        for doc in docs() {
            let (fences, prose) = split(&doc.text);
            for fence in &fences {
                out.extend(fence_commands(doc, fence));
            }
            for span in spans(&prose) {
                let w = words(&span.text);
                let program = program(&w).or_else(|| {
                    // `run --live`, `emulate e2b --template …`: a subcommand with its flags.
                    let sub = w.first().is_some_and(|s| subcommands().contains(s));
                    (sub && w.iter().any(|a| a.starts_with("--")))
                        .then(|| Program::Matrix(w.clone()))
                });
                if let Some(program) = program {
                    out.push(Found {
                        at: format!("{}:{}", doc.path, span.line),
                        program,
                        output: None,
                    });
                }
            }
        }
        out
    })
}

fn fence_commands(doc: &Doc, fence: &Fence) -> Vec<Found> {
    let mut out = Vec::new();
    let at = |i: usize| format!("{}:{}", doc.path, fence.line + i);
    match fence.lang.as_str() {
        "console" => {
            let mut i = 0;
            while i < fence.body.len() {
                let Some(command) = fence.body[i].strip_prefix("$ ") else {
                    i += 1;
                    continue;
                };
                let output: Vec<String> = fence.body[i + 1..]
                    .iter()
                    .take_while(|l| !l.starts_with("$ "))
                    .cloned()
                    .collect();
                let n = output.len();
                for simple in simple_commands(command) {
                    if let Some(program) = program(&words(&simple)) {
                        out.push(Found {
                            at: at(i),
                            program,
                            output: Some(output.clone()),
                        });
                    }
                }
                i += 1 + n;
            }
        }
        "sh" | "bash" | "shell" | "" | "text" => {
            let mut logical = String::new();
            let mut first = 0;
            let mut heredoc: Option<String> = None;
            for (i, line) in fence.body.iter().enumerate() {
                if let Some(end) = &heredoc {
                    if line.trim() == end {
                        heredoc = None;
                    }
                    continue;
                }
                let line = if fence.lang == "text" {
                    // Only what a text block shows typed: `$ …`, or a command line alone.
                    let trimmed = line.trim_start();
                    match trimmed.strip_prefix("$ ") {
                        Some(command) => command,
                        None if trimmed.starts_with("sandbox-matrix ") => trimmed,
                        None => continue,
                    }
                } else {
                    line.as_str()
                };
                if logical.is_empty() {
                    first = i;
                }
                if let Some(start) = line.find("<<") {
                    let end = line[start + 2..]
                        .trim()
                        .trim_matches(|c| c == '\'' || c == '"' || c == '-');
                    heredoc = Some(end.to_owned());
                }
                match line.strip_suffix('\\') {
                    Some(part) => {
                        logical.push_str(part);
                        logical.push(' ');
                    }
                    None => {
                        logical.push_str(line);
                        for simple in simple_commands(&logical) {
                            if let Some(program) = program(&words(&simple)) {
                                out.push(Found {
                                    at: at(first),
                                    program,
                                    output: None,
                                });
                            }
                        }
                        logical.clear();
                    }
                }
            }
        }
        _ => {}
    }
    out
}

/// What a run of the binary gave.
#[derive(Clone)]
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// A run of the binary: the name it runs under, and its arguments.
type RunKey = (Option<String>, Vec<String>);

/// Runs the binary with `args` from the checkout, once per distinct `args`; `name` runs it
/// under another name (`datalayer-sandbox`, the doctor).
fn run(args: &[&str], name: Option<&str>) -> Ran {
    static RUNS: OnceLock<std::sync::Mutex<BTreeMap<RunKey, Ran>>> = OnceLock::new();
    let key = (
        name.map(str::to_owned),
        args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>(),
    );
    let runs = RUNS.get_or_init(Default::default);
    if let Some(ran) = runs.lock().expect("runs").get(&key) {
        return ran.clone();
    }
    let program = match name {
        None => PathBuf::from(BIN),
        Some(name) => {
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("docs-commands");
            std::fs::create_dir_all(&dir).expect("a temporary folder");
            let link = dir.join(name);
            if !link.exists() {
                std::os::unix::fs::symlink(BIN, &link).expect("a link to the binary");
            }
            link
        }
    };
    let output = Command::new(program)
        .args(args)
        .current_dir(root())
        .env_remove("SANDBOX_MATRIX_BASE")
        .env_remove("SANDBOX_MATRIX_APPROVED_BASES")
        .env("COLUMNS", "200")
        .output()
        .expect("the binary runs");
    let ran = Ran {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    runs.lock().expect("runs").insert(key, ran.clone());
    ran
}

/// A word standing for a value: `<run-id>`, `RUN_ID`, `N`, `A.json`.
fn placeholder(word: &str) -> bool {
    word.contains('<') || word.starts_with(|c: char| c.is_ascii_uppercase())
}

/// A sample value for `flag`'s placeholder, one its parser takes.
fn sample(flag: &str) -> &'static str {
    match flag {
        "--repeat" => "2",
        "--partition" => "1/2",
        "--port" => "0",
        "--router-jwt-ttl" | "--kill-after" => "60",
        "--warm-up" => "1",
        "--older-than" => "24h",
        "--pace" => "instant",
        "--variant" => "docker",
        "--scenario" => "lifecycle",
        _ => "x",
    }
}

/// A synopsis made a command line: `[…]` opened, `A|B` as `A`, `...` dropped, each
/// placeholder a sample value. Also says whether a placeholder was replaced.
fn concrete(args: &[String]) -> (Vec<String>, bool) {
    let mut out: Vec<String> = Vec::new();
    let mut replaced = false;
    for arg in args {
        let arg = arg
            .replace("\\|", "|")
            .replace(['[', ']'], "")
            .replace("...", "")
            .replace('…', "");
        if arg.is_empty() {
            continue;
        }
        let arg = if arg.contains('|') && !arg.starts_with('-') {
            arg.split('|').next().unwrap_or_default().to_owned()
        } else {
            arg
        };
        if placeholder(&arg) {
            replaced = true;
            let flag = out.last().filter(|f| f.starts_with("--")).cloned();
            out.push(flag.map_or("x".to_owned(), |f| sample(&f).to_owned()));
        } else {
            out.push(arg);
        }
    }
    (out, replaced)
}

/// The paths among `args` (the words that are no flag and follow no flag taking a value).
fn operands<'a>(args: &'a [String], valued: &[&str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut skip = false;
    for arg in &args[1..] {
        if skip {
            skip = false;
            continue;
        }
        if arg.starts_with("--") {
            skip = valued.contains(&arg.as_str());
            continue;
        }
        out.push(arg.as_str());
    }
    out
}

/// How a sandbox-matrix command is checked: run for real (and which exit codes are fine),
/// or with `--help` appended.
fn check_matrix(args: &[String], replaced: bool) -> (Vec<String>, &'static [i32]) {
    let sub = args.first().map_or("", String::as_str);
    // The files a lint, gate or compare reads: its operands and its flags' files.
    let valued = ["--policy", "--baseline"];
    let mut files = operands(args, &valued);
    for flag in valued {
        if let Some(i) = args.iter().position(|a| a == flag) {
            files.extend(args.get(i + 1).map(String::as_str));
        }
    }
    let on_files = !replaced
        && files.len() > usize::from(sub != "lint")
        && files.iter().all(|p| root().join(p).is_file());
    match sub {
        "--help" | "--version" | "help" => (args.to_vec(), &[0]),
        "list" if !replaced => {
            let mut args = args.to_vec();
            if !args.iter().any(|a| a == "--root") {
                args.extend(["--root".to_owned(), root().display().to_string()]);
            }
            (args, &[0])
        }
        "lint" | "gate" if on_files => (args.to_vec(), &[0, 1]),
        "compare" if on_files => (args.to_vec(), &[0]),
        _ => with_help(args),
    }
}

fn with_help(args: &[String]) -> (Vec<String>, &'static [i32]) {
    let mut args = args.to_vec();
    if args.last().is_none_or(|a| a != "--help") {
        args.push("--help".to_owned());
    }
    (args, &[0])
}

#[test]
fn every_sandbox_matrix_command_in_the_docs_parses() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for found in found() {
        let args = match &found.program {
            Program::Matrix(args) => args.clone(),
            // `cargo run -p sandbox-matrix -- ARGS`.
            Program::Cargo(args) if args.first().is_some_and(|a| a == "run") => {
                match args.iter().position(|a| a == "--") {
                    Some(i) if args.windows(2).any(|w| w == ["-p", "sandbox-matrix"]) => {
                        args[i + 1..].to_vec()
                    }
                    _ => continue,
                }
            }
            _ => continue,
        };
        if args.is_empty() {
            continue;
        }
        let (args, replaced) = concrete(&args);
        let (run_args, codes) = check_matrix(&args, replaced);
        let mut run_args = run_args;
        let mut ran = run(
            &run_args.iter().map(String::as_str).collect::<Vec<_>>(),
            None,
        );
        // Prose names a flag without its value (`sweep --run`): give it one.
        if ran.stderr.contains("a value is required for")
            && let [.., flag, help] = run_args.as_slice()
            && flag.starts_with("--")
            && help == "--help"
        {
            let at = run_args.len() - 1;
            run_args.insert(at, sample(&run_args[at - 1]).to_owned());
            ran = run(
                &run_args.iter().map(String::as_str).collect::<Vec<_>>(),
                None,
            );
        }
        checked += 1;
        let shown = format!("sandbox-matrix {}", run_args.join(" "));
        if std::env::var_os("DOCS_COMMANDS_SHOW").is_some() {
            eprintln!("{}: `{shown}` exited {:?}", found.at, ran.code);
        }
        if !ran.code.is_some_and(|c| codes.contains(&c)) {
            failures.push(format!(
                "{}: `{shown}` exited {:?}: {}",
                found.at,
                ran.code,
                ran.stderr.trim()
            ));
            continue;
        }
        if let Some(expected) = &found.output {
            if run_args.last().is_some_and(|a| a == "--help") {
                failures.push(format!(
                    "{}: `{shown}`: a console example must be one that runs for real here (list, lint, gate, compare on files of the checkout)",
                    found.at
                ));
                continue;
            }
            let expected: Vec<&str> = expected
                .iter()
                .map(|l| l.trim_end())
                .filter(|l| !l.starts_with("$ "))
                .collect();
            // What the terminal shows: the output, then the messages.
            let shown_text = format!("{}{}", ran.stdout, ran.stderr);
            let printed: Vec<&str> = shown_text.lines().map(str::trim_end).collect();
            if printed != expected {
                failures.push(format!(
                    "{}: `{shown}` printed\n{}\nbut the docs show\n{}",
                    found.at,
                    printed.join("\n"),
                    expected.join("\n")
                ));
            }
        }
    }
    assert!(
        checked > 40,
        "only {checked} commands found: is the extraction broken?"
    );
    assert!(
        failures.is_empty(),
        "commands in the docs that the tool refuses or answers otherwise:\n{}",
        failures.join("\n")
    );
}

/// The long flags a help text lists, `--help` and `--version` left out.
fn flags_in_help(help: &str) -> BTreeSet<String> {
    help.lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let line = line
                .strip_prefix('-')
                .filter(|l| l.chars().nth(1) == Some(','))
                .map_or(line, |l| l[2..].trim_start());
            let flag = line.strip_prefix("--")?;
            let name: String = flag
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            (!name.is_empty() && name != "help" && name != "version").then(|| format!("--{name}"))
        })
        .collect()
}

#[test]
fn every_flag_of_every_command_is_in_the_commands_page() {
    const PAGE: &str = "docs/guide/commands.md";
    let page = doc(PAGE);
    let (_, prose) = split(&page.text);
    let synopses: Vec<Vec<String>> = spans(&prose)
        .iter()
        .filter_map(|s| match program(&words(&s.text)) {
            Some(Program::Matrix(args)) => Some(args),
            _ => None,
        })
        .collect();
    let mut paths: Vec<Vec<String>> = subcommands().iter().map(|s| vec![s.clone()]).collect();
    for provider in commands_in_help(&run(&["emulate", "--help"], None).stdout) {
        paths.push(vec!["emulate".to_owned(), provider]);
    }
    let mut failures = Vec::new();
    for path in &paths {
        let rows: Vec<&Vec<String>> = synopses
            .iter()
            .filter(|args| args.starts_with(path))
            .collect();
        let name = path.join(" ");
        if rows.is_empty() && path != &["emulate".to_owned()] {
            failures.push(format!("`sandbox-matrix {name}` has no row"));
            continue;
        }
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = run(&args, None).stdout;
        for flag in flags_in_help(&help) {
            let documented = rows.iter().any(|args| {
                args.iter()
                    .any(|a| a.trim_matches(|c| c == '[' || c == ']') == flag)
            }) || (flag == "--root" && page.text.contains("`--root DIR`"));
            if !documented {
                failures.push(format!("`sandbox-matrix {name} {flag}` is in no row"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{PAGE} leaves out what the tool takes:\n{}",
        failures.join("\n")
    );
}

#[test]
fn the_doctor_commands_are_the_doctors() {
    let usage = run(&["--help"], Some("datalayer-sandbox")).stdout;
    let known = flags_in_help(&usage.replace("[--", "\n  --"));
    let mut failures = Vec::new();
    let mut documented = BTreeSet::new();
    for found in found() {
        let Program::Doctor(args) = &found.program else {
            continue;
        };
        match args.first().map(String::as_str) {
            Some("doctor" | "scan-secrets") => {}
            other => failures.push(format!("{}: no doctor command {other:?}", found.at)),
        }
        for arg in args {
            let flag = arg.trim_matches(|c| c == '[' || c == ']' || c == '.');
            if flag.starts_with("--") {
                documented.insert(flag.to_owned());
                if !known.contains(flag) {
                    failures.push(format!("{}: the doctor takes no {flag}", found.at));
                }
            }
        }
    }
    for flag in known.difference(&documented) {
        failures.push(format!("the doctor's {flag} is in no command of the docs"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The workspace's packages: name → folder.
fn packages() -> BTreeMap<String, PathBuf> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let members = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("the workspace's members");
    members
        .split('"')
        .skip(1)
        .step_by(2)
        .map(|dir| {
            let text = std::fs::read_to_string(root().join(dir).join("Cargo.toml"))
                .expect("a member's Cargo.toml");
            let name = text
                .lines()
                .find_map(|l| l.strip_prefix("name = \""))
                .and_then(|l| l.strip_suffix('"'))
                .expect("a package name")
                .to_owned();
            (name, root().join(dir))
        })
        .collect()
}

/// The files of test target `name` in `package`: `tests/<name>.rs`, or `tests/<name>/`'s.
fn target_files(package: &Path, kind: &str, name: &str) -> Option<Vec<PathBuf>> {
    let file = package.join(kind).join(format!("{name}.rs"));
    if file.is_file() {
        return Some(vec![file]);
    }
    let dir = package.join(kind).join(name);
    if dir.join("main.rs").is_file() {
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        return Some(files);
    }
    None
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The test names a target's files define: `module::function`, by file and `fn`.
fn test_names(target: &str, files: &[PathBuf]) -> Vec<String> {
    let mut names = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).expect("a test file");
        // The module path of the file inside a folder target: parity/e2b.rs is parity::e2b.
        let module = file
            .strip_prefix(
                file.ancestors()
                    .find(|a| a.ends_with(target))
                    .unwrap_or(file),
            )
            .ok()
            .map(|p| {
                p.with_extension("")
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .filter(|c| c != "main" && c != "mod")
                    .collect::<Vec<_>>()
                    .join("::")
            })
            .unwrap_or_default();
        for line in text.lines() {
            let line = line.trim_start();
            let line = line
                .strip_prefix("pub ")
                .or_else(|| line.strip_prefix("pub(crate) "))
                .unwrap_or(line);
            let line = line.strip_prefix("async ").unwrap_or(line);
            if let Some(rest) = line.strip_prefix("fn ") {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                names.push(if module.is_empty() {
                    name
                } else {
                    format!("{module}::{name}")
                });
            }
        }
    }
    names
}

/// Checks one `cargo …` command: its packages, targets and test filters.
fn check_cargo(args: &[String], packages: &BTreeMap<String, PathBuf>) -> Vec<String> {
    let mut failures = Vec::new();
    let (before, after) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &[][..]),
    };
    let Some(sub) = before.first() else {
        return failures;
    };
    let mut named = Vec::new();
    let mut tests = Vec::new();
    let mut benches = Vec::new();
    let mut filters = Vec::new();
    let valued = [
        "-p",
        "--package",
        "--test",
        "--bench",
        "--features",
        "-F",
        "-j",
        "--jobs",
        "--profile",
        "--target",
        "--target-dir",
        "--manifest-path",
        "--color",
        "--message-format",
        "--bin",
    ];
    let mut i = 1;
    while i < before.len() {
        let arg = before[i].as_str();
        if valued.contains(&arg) {
            let value = before.get(i + 1).cloned().unwrap_or_default();
            match arg {
                "-p" | "--package" => named.push(value),
                "--test" => tests.push(value),
                "--bench" => benches.push(value),
                _ => {}
            }
            i += 2;
            continue;
        }
        if !arg.starts_with('-') && sub != "nextest" {
            filters.push(arg.to_owned());
        }
        i += 1;
    }
    let mut j = 0;
    while j < after.len() {
        let arg = after[j].as_str();
        if ["--test-threads", "--skip", "--format", "--logfile"].contains(&arg) {
            j += 2;
            continue;
        }
        if !arg.starts_with('-') {
            filters.push(arg.to_owned());
        }
        j += 1;
    }
    for name in &named {
        if !packages.contains_key(name) {
            failures.push(format!("no package {name} in the workspace"));
        }
    }
    let searched: Vec<&PathBuf> = if named.is_empty() {
        packages.values().collect()
    } else {
        named.iter().filter_map(|n| packages.get(n)).collect()
    };
    for bench in &benches {
        if !searched
            .iter()
            .any(|p| target_files(p, "benches", bench).is_some())
        {
            failures.push(format!("no bench target {bench}"));
        }
    }
    let mut candidates: Vec<String> = Vec::new();
    for test in &tests {
        let found: Vec<Vec<PathBuf>> = searched
            .iter()
            .filter_map(|p| target_files(p, "tests", test))
            .collect();
        if found.is_empty() {
            let engine = root()
                .join("harness/tests/engine")
                .join(format!("{test}.rs"))
                .is_file();
            let hint = if engine {
                format!("; it is a module of the engine binary: --test engine {test}::")
            } else {
                String::new()
            };
            failures.push(format!(
                "no test target {test} (a file tests/{test}.rs or tests/{test}/main.rs){hint}"
            ));
        }
        for files in found {
            candidates.extend(test_names(test, &files));
        }
    }
    if sub == "test" && !tests.is_empty() {
        for filter in &filters {
            let ok = if tests == ["matrix"] {
                matrix_filter(filter)
            } else {
                candidates.iter().any(|name| name.contains(filter.as_str()))
            };
            if !ok {
                failures.push(format!(
                    "the filter {filter} matches no test of --test {}",
                    tests.join(", --test ")
                ));
            }
        }
    }
    failures
}

/// A filter of the `matrix` binary, whose tests are `variant::scenario::step`.
fn matrix_filter(filter: &str) -> bool {
    let mut parts = filter.split("::");
    let variant = parts.next().unwrap_or_default();
    let scenario = parts.next();
    variants::known().iter().any(|v| v.starts_with(variant))
        && scenario.is_none_or(|s| {
            s.is_empty() || root().join("scenarios").join(format!("{s}.yaml")).is_file()
        })
}

#[test]
fn every_cargo_command_names_targets_and_tests_that_exist() {
    let packages = packages();
    let mut failures = Vec::new();
    let mut checked = 0;
    for found in found() {
        let Program::Cargo(args) = &found.program else {
            continue;
        };
        checked += 1;
        for failure in check_cargo(args, &packages) {
            failures.push(format!(
                "{}: `cargo {}`: {failure}",
                found.at,
                args.join(" ")
            ));
        }
    }
    assert!(checked > 20, "only {checked} cargo commands found");
    assert!(
        failures.is_empty(),
        "cargo commands in the docs that name what does not exist:\n{}",
        failures.join("\n")
    );
}

#[test]
fn the_cargo_check_finds_what_the_issue_found() {
    let packages = packages();
    let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let wrong = check_cargo(
        &words("test -p sandbox-matrix --test emulate_daytona"),
        &packages,
    );
    assert!(
        wrong
            .iter()
            .any(|f| f.contains("--test engine emulate_daytona::")),
        "{wrong:?}"
    );
    assert!(
        check_cargo(
            &words("test -p sandbox-matrix --test engine emulate_daytona::"),
            &packages
        )
        .is_empty()
    );
    assert!(
        !check_cargo(
            &words("test -p sandbox-matrix --test engine no_such_module::"),
            &packages
        )
        .is_empty()
    );
    assert!(
        check_cargo(
            &words("test -p sandbox-matrix --test engine parity::e2b"),
            &packages
        )
        .is_empty()
    );
    assert!(
        check_cargo(
            &words("test --test matrix -- docker::lifecycle::first-result"),
            &packages
        )
        .is_empty()
    );
    assert!(
        !check_cargo(
            &words("test --test matrix -- docker::no-such-scenario::x"),
            &packages
        )
        .is_empty()
    );
    assert!(!check_cargo(&words("bench -p sandbox-matrix --bench nothing"), &packages).is_empty());
}

/// The top folders and files of the checkout a path in the docs may start with.
const TOP: [&str; 14] = [
    "harness/",
    "providers/",
    "contract/",
    "doctor/",
    "fixtures/",
    "scenarios/",
    "bench/",
    "docs/",
    "examples/",
    "policies/",
    ".github/",
    ".ci/",
    ".config/",
    "reports/README.md",
];

/// The path a code span or a command word names in the checkout, if it names one.
fn named_path(text: &str) -> Option<String> {
    let text = repo_path(text.trim_matches(|c| c == '"' || c == '\''));
    if text.contains(char::is_whitespace)
        || ['<', '*', '{', '…', '$', '|', '[']
            .iter()
            .any(|c| text.contains(*c))
        || !TOP.iter().any(|t| text.starts_with(t))
    {
        return None;
    }
    // `file.rs:12`, `file.md#anchor`.
    let text = text.split('#').next().unwrap_or_default();
    let text = match text.rsplit_once(':') {
        Some((path, line)) if line.chars().all(|c| c.is_ascii_digit()) => path,
        _ => text,
    };
    Some(text.trim_end_matches(['.', ',', ')']).to_owned())
}

/// GitHub's anchor of a heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file: its headings' slugs and its `<a id="…">`s.
fn anchors(text: &str) -> BTreeSet<String> {
    let (_, prose) = split(text);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose.lines() {
        if let Some(heading) = line.strip_prefix('#') {
            let base = slug(heading.trim_start_matches('#'));
            let n = seen.entry(base.clone()).or_default();
            out.insert(if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            });
            *n += 1;
        }
    }
    for part in text.split("<a id=\"").skip(1) {
        if let Some((id, _)) = part.split_once('"') {
            out.insert(id.to_owned());
        }
    }
    out
}

/// The link targets of a doc's prose, with their lines.
fn links(text: &str) -> Vec<(usize, String)> {
    let (_, prose) = split(text);
    let prose = without_spans(&prose);
    let mut out = Vec::new();
    for (i, line) in prose.lines().enumerate() {
        for part in line.split("](").skip(1) {
            if let Some((target, _)) = part.split_once(')') {
                out.push((i + 1, target.trim().to_owned()));
            }
        }
    }
    out
}

#[test]
fn every_path_link_and_anchor_in_the_docs_exists() {
    let mut failures = Vec::new();
    for doc in docs() {
        let (fences, prose) = split(&doc.text);
        for span in spans(&prose) {
            let mut named: Vec<String> = named_path(&span.text).into_iter().collect();
            // The files a command in a span names.
            let w = words(&span.text);
            if program(&w).is_some() {
                named.extend(w.iter().filter_map(|w| named_path(w)));
            }
            for path in named {
                if !root().join(&path).exists() {
                    failures.push(format!("{}:{}: no {path}", doc.path, span.line));
                }
            }
        }
        for fence in &fences {
            if !["sh", "bash", "console", ""].contains(&fence.lang.as_str()) {
                continue;
            }
            for (i, line) in fence.body.iter().enumerate() {
                for word in words(line) {
                    if let Some(path) = named_path(&word)
                        && !root().join(&path).exists()
                    {
                        failures.push(format!("{}:{}: no {path}", doc.path, fence.line + i));
                    }
                }
            }
        }
        let dir = Path::new(&doc.path).parent().unwrap_or(Path::new(""));
        for (line, target) in links(&doc.text) {
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with("mailto:")
            {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                PathBuf::from(&doc.path)
            } else {
                normalize(&dir.join(file))
            };
            let full = root().join(&path);
            if !full.exists() {
                failures.push(format!(
                    "{}:{line}: the link {target} leads nowhere",
                    doc.path
                ));
                continue;
            }
            if let Some(anchor) = anchor {
                let text = std::fs::read_to_string(&full).unwrap_or_default();
                if !anchors(&text).contains(anchor) {
                    failures.push(format!(
                        "{}:{line}: {} has no anchor #{anchor}",
                        doc.path,
                        path.display()
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "paths and links in the docs that lead nowhere:\n{}",
        failures.join("\n")
    );
}

/// `a/b/../c` as `a/c`.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn every_page_is_in_the_summary() {
    let summary = doc("docs/SUMMARY.md");
    let listed: BTreeSet<PathBuf> = links(&summary.text)
        .into_iter()
        .map(|(_, target)| normalize(&Path::new("docs").join(target)))
        .collect();
    let missing: Vec<&str> = docs()
        .iter()
        .filter(|d| d.path.starts_with("docs/") && d.path != "docs/SUMMARY.md")
        .filter(|d| !listed.contains(Path::new(&d.path)))
        .map(|d| d.path.as_str())
        .collect();
    assert!(
        missing.is_empty(),
        "pages docs/SUMMARY.md does not list: {missing:?}"
    );
    for part in [
        "guide/",
        "providers/",
        "design/architecture.md",
        "measurements/",
        "contributing/",
    ] {
        assert!(
            listed
                .iter()
                .any(|p| p.starts_with(Path::new("docs").join(part))
                    || p == &Path::new("docs").join(part)),
            "docs/SUMMARY.md has nothing under {part}"
        );
    }
}

#[test]
fn every_yaml_example_parses() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for doc in docs() {
        let (fences, _) = split(&doc.text);
        for fence in fences.iter().filter(|f| f.lang == "yaml") {
            let text = fence.body.join("\n") + "\n";
            let at = format!("{}:{}", doc.path, fence.line);
            let has = |key: &str| text.lines().any(|l| l.starts_with(key));
            if has("steps:") {
                // As a file of scenarios/, which its `environment:` is relative to.
                let path = root().join("scenarios/docs-example.yaml");
                match Scenario::parse(&path, &text).and_then(|s| s.check_runnable()) {
                    Ok(()) => checked += 1,
                    Err(e) => failures.push(format!("{at}: the scenario does not parse: {e}")),
                }
            } else if ["required:", "success_rate:", "p90_budgets:", "regression:"]
                .iter()
                .any(|k| has(k))
            {
                match Policy::parse(Path::new("docs-example.yaml"), &text) {
                    Ok(_) => checked += 1,
                    Err(e) => failures.push(format!("{at}: the policy does not parse: {e}")),
                }
            } else {
                failures.push(format!("{at}: a YAML example of no known kind"));
            }
        }
    }
    assert!(checked >= 2, "only {checked} YAML examples found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Python with its lines' indentation and blank lines dropped, for finding one in another.
fn flat(code: &str) -> String {
    code.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_sdk_walkthrough_runs_a_flow_the_tests_run() {
    let mut failures = Vec::new();
    let mut flows = 0;
    for found in found() {
        let Program::Flow { script, vars } = &found.program else {
            continue;
        };
        flows += 1;
        let Ok(text) = std::fs::read_to_string(root().join(script)) else {
            failures.push(format!("{}: no {script}", found.at));
            continue;
        };
        let name = Path::new(script)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let run_by_a_test = std::fs::read_dir(root().join("harness/tests/engine"))
            .expect("the engine tests")
            .filter_map(|e| std::fs::read_to_string(e.expect("an entry").path()).ok())
            .any(|t| t.contains(&format!("\"{name}\"")));
        if !run_by_a_test {
            failures.push(format!("{}: no engine test runs {script}", found.at));
        }
        for var in vars
            .iter()
            .filter(|v| v.starts_with("SANDBOX_MATRIX_") || v.starts_with("MODAL_"))
        {
            if !text.contains(var.as_str()) {
                failures.push(format!("{}: {script} reads no {var}", found.at));
            }
        }
    }
    for doc in docs() {
        let (fences, _) = split(&doc.text);
        for fence in fences.iter().filter(|f| f.lang == "python") {
            let example = flat(&fence.body.join("\n"));
            let in_a_flow = std::fs::read_dir(root().join("harness/tests/sdk"))
                .expect("the SDK flows")
                .filter_map(|e| std::fs::read_to_string(e.expect("an entry").path()).ok())
                .any(|t| flat(&t).contains(&example));
            if !in_a_flow {
                failures.push(format!(
                    "{}:{}: this Python is in no flow of harness/tests/sdk/, which the engine tests run",
                    doc.path, fence.line
                ));
            }
        }
    }
    assert!(flows >= 4, "only {flows} SDK walkthroughs found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_scripts_the_docs_run_exist() {
    let mut failures = Vec::new();
    for found in found() {
        let Program::Script(path) = &found.program else {
            continue;
        };
        let full = root().join(path);
        let runnable = std::fs::metadata(&full).is_ok_and(|m| {
            use std::os::unix::fs::PermissionsExt;
            m.is_file() && m.permissions().mode() & 0o111 != 0
        });
        if path.ends_with(".py") {
            if !full.is_file() {
                failures.push(format!("{}: no {path}", found.at));
            }
        } else if !runnable {
            failures.push(format!("{}: {path} is no executable file", found.at));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_readme_is_a_front_page() {
    let readme = doc("README.md");
    let lines: Vec<&str> = readme.text.lines().collect();
    assert!(
        lines.len() <= 150,
        "README.md is {} lines, over 150",
        lines.len()
    );
    let first: Vec<&str> = lines.iter().take(40).map(|l| l.trim()).collect();
    for command in [".ci/run", "cargo run --release -p sandbox-matrix -- run"] {
        assert!(
            first.iter().any(|l| l.starts_with(command)),
            "README.md's first 40 lines do not give `{command}`"
        );
    }
    for variant in variants::known() {
        let row = lines.iter().any(|l| {
            l.starts_with(&format!("| `{variant}` |"))
                || l.starts_with(&format!("| [`{variant}`]("))
        });
        assert!(row, "README.md's variants table has no row for {variant}");
    }
}

#[test]
fn the_reports_pages_name_every_file_and_table_row() {
    let readme = doc("reports/README.md");
    for file in run_folder::FILES.iter().chain([&ledger::LEDGER_FILE]) {
        assert!(
            readme.text.contains(&format!("| `{file}` |")),
            "reports/README.md has no row for {file}"
        );
    }
    let page = doc("docs/guide/reports.md");
    let sample = results::load(&root().join("docs/sample-run/results.json"))
        .expect("the sample run's results");
    let rendered = table::render(&sample);
    let rows: Vec<&str> = rendered
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('|').nth(1))
        .map(str::trim)
        .collect();
    assert!(rows.len() > 10, "the table has rows: {rendered}");
    let missing: Vec<&&str> = rows
        .iter()
        .filter(|row| !page.text.contains(&format!("| {row} |")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/guide/reports.md's table names no row {missing:?} of the comparison table"
    );
}

#[test]
fn the_local_nightly_names_the_variants_it_runs() {
    let script = std::fs::read_to_string(root().join(".github/scripts/nightly.sh"))
        .expect("the nightly's script");
    let runs: Vec<&str> = script
        .lines()
        .find_map(|l| l.trim().strip_prefix("for v in "))
        .and_then(|l| l.split_once(';'))
        .map(|(list, _)| list.split_whitespace().collect())
        .expect("nightly.sh's local run loops over its variants");
    let local = std::fs::read_to_string(root().join(".github/scripts/nightly-local.sh"))
        .expect("the local nightly");
    let header: String = local
        .lines()
        .filter(|l| l.starts_with('#'))
        .collect::<Vec<_>>()
        .join(" ");
    let page = &doc("docs/guide/nightly.md").text;
    for variant in &runs {
        assert!(
            header.contains(variant),
            "nightly-local.sh's header does not name {variant}, which it runs"
        );
        assert!(
            page.contains(variant),
            "docs/guide/nightly.md does not name {variant}"
        );
    }
    assert!(
        header.contains("SANDBOX_MATRIX") && header.contains("debug"),
        "nightly-local.sh's header does not say it builds a debug binary unless SANDBOX_MATRIX names one"
    );
}
