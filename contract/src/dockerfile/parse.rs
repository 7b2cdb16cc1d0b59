//! The one Dockerfile parser: text in, instructions out, read the way BuildKit's parser reads
//! them. The linter and the providers' builders all read Dockerfiles through it.
//!
//! What is read as BuildKit reads it: parser directives at the top (`# escape=` switches the
//! escape character to a backtick), comments, line continuations (comment and blank lines
//! inside a continuation are skipped), heredoc bodies of `RUN`, `COPY` and `ADD` (also under
//! `ONBUILD`, not in exec form; `<<-` strips leading tabs; quoted markers are unquoted),
//! case-insensitive instruction names, leading `--flag=value` words, quoted or not, and
//! exec-form JSON arrays where BuildKit takes them. A value-taking flag written without `=`
//! takes the next word as its value, as newer parsers do; BuildKit's own rejects it. Nothing
//! is expanded: `$VAR` stays as written. Any text parses: there is no error, and text with no
//! instruction gives none.

/// Flags that take a value, so `--flag value` reads the next word as the value.
const VALUE_FLAGS: &[&str] = &["mount", "network", "platform", "security"];

/// Instructions whose arguments may be a JSON array (exec form).
const JSON_FORMS: &[&str] = &["ADD", "CMD", "COPY", "ENTRYPOINT", "RUN", "SHELL", "VOLUME"];

/// One instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instruction {
    /// 1-based line where it starts.
    pub line: usize,
    /// 1-based line where it ends: its last continuation line or heredoc terminator.
    pub last_line: usize,
    /// The instruction name, uppercased.
    pub keyword: String,
    /// The leading `--name[=value]` words, in order.
    pub flags: Vec<Flag>,
    /// What follows the keyword and flags, as written, trimmed.
    pub raw: String,
    /// What follows the keyword and flags, parsed.
    pub args: Args,
    /// Heredoc bodies, in the order their markers appear.
    pub heredocs: Vec<Heredoc>,
    /// The whole instruction, keyword first, continuations joined, without heredoc bodies.
    pub text: String,
}

/// One `--name[=value]` word before an instruction's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flag {
    /// The name without `--`, lowercased.
    pub name: String,
    /// The value with quotes and `\` escapes removed; empty when none is given.
    pub value: String,
    /// The flag as written, with its value word when that comes separately.
    pub raw: String,
}

/// An instruction's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Args {
    /// Exec form: a JSON array of strings, for the instructions that take one.
    Exec(Vec<String>),
    /// Shell form: words split on whitespace outside quotes, with quotes and escapes removed.
    Shell {
        /// The words.
        words: Vec<String>,
        /// Whether a quote is still open at the end (its word runs to the end).
        open_quote: bool,
    },
}

impl Args {
    /// The exec form's strings or the shell form's words.
    pub fn words(&self) -> &[String] {
        match self {
            Args::Exec(words) | Args::Shell { words, .. } => words,
        }
    }
}

/// The body of one heredoc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heredoc {
    /// The marker's name, unquoted (`EOF` for `<<'EOF'`).
    pub name: String,
    /// The lines up to the terminator, each ending in `\n`; leading tabs stripped for `<<-`.
    pub body: String,
}

/// Parses Dockerfile `text` (a leading byte-order mark and `\r\n` line ends are allowed).
pub fn parse(text: &str) -> Vec<Instruction> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text
        .split('\n')
        .map(|line| line.trim_end_matches('\r'))
        .enumerate()
        .map(|(index, line)| (index + 1, line));
    let mut directives = Directives {
        escape: '\\',
        done: false,
        seen: Vec::new(),
    };
    let mut instructions = Vec::new();
    while let Some((number, raw)) = lines.next() {
        let first = raw.trim_start();
        directives.read(first);
        if first.starts_with('#') {
            continue;
        }
        let escape = directives.escape;
        let (start, mut ended) = trim_continuation(first, escape);
        if ended && start.is_empty() {
            continue;
        }
        let mut last_line = number;
        let mut text = start.to_string();
        while !ended {
            let Some((number, raw)) = lines.next() else {
                break;
            };
            last_line = number;
            let trimmed = raw.trim_start();
            if trimmed.starts_with('#') || trimmed.is_empty() {
                continue;
            }
            let (more, end) = trim_continuation(raw, escape);
            text.push_str(more);
            ended = end;
        }
        let mut heredocs = Vec::new();
        for (name, strip_tabs) in heredoc_markers(&text) {
            let mut body = String::new();
            for (number, raw) in lines.by_ref() {
                last_line = number;
                let line = if strip_tabs {
                    raw.trim_start_matches('\t')
                } else {
                    raw
                };
                if line == name {
                    break;
                }
                body.push_str(line);
                body.push('\n');
            }
            heredocs.push(Heredoc { name, body });
        }
        let (keyword, rest) = split_command(&text);
        let keyword = keyword.to_ascii_uppercase();
        let (flags, raw) = extract_flags(rest);
        let exec = json_array(raw)
            .filter(|_| JSON_FORMS.contains(&keyword.as_str()))
            .and_then(|array| {
                array
                    .iter()
                    .map(|v| v.as_str().map(str::to_owned))
                    .collect()
            });
        let args = match exec {
            Some(strings) => Args::Exec(strings),
            None => {
                let (words, open_quote) = shell_words(raw, escape);
                Args::Shell { words, open_quote }
            }
        };
        instructions.push(Instruction {
            line: number,
            last_line,
            keyword,
            flags,
            raw: raw.to_string(),
            args,
            heredocs,
            text,
        });
    }
    instructions
}

/// Parser directives as BuildKit reads them: only before the first line that is not one.
struct Directives {
    escape: char,
    done: bool,
    seen: Vec<String>,
}

impl Directives {
    /// Reads `line` (leading whitespace trimmed) as a possible directive.
    fn read(&mut self, line: &str) {
        if self.done {
            return;
        }
        let Some((key, value)) = directive(line) else {
            self.done = true;
            return;
        };
        let key = key.to_ascii_lowercase();
        if !matches!(key.as_str(), "escape" | "syntax" | "check") {
            self.done = true;
            return;
        }
        // A repeated directive or an escape other than ` or \ fails the build; keep the first.
        if self.seen.contains(&key) {
            return;
        }
        if key == "escape" {
            match value {
                "`" => self.escape = '`',
                "\\" => self.escape = '\\',
                _ => return,
            }
        }
        self.seen.push(key);
    }
}

/// `# key = value`: BuildKit's `^#\s*([a-zA-Z][a-zA-Z0-9]*)\s*=\s*(.+?)\s*$`.
fn directive(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix('#')?.trim_start_matches(is_re_space);
    let key_end = rest
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(rest.len());
    let key = &rest[..key_end];
    if !key.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    let value = rest[key_end..]
        .trim_start_matches(is_re_space)
        .strip_prefix('=')?
        .trim_matches(is_re_space);
    (!value.is_empty()).then_some((key, value))
}

/// Go's `\s`.
fn is_re_space(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\x0c' | '\r' | ' ')
}

/// Removes a trailing continuation (the escape character, then spaces or tabs, not itself
/// escaped); returns the line and whether the instruction ends on it.
fn trim_continuation(line: &str, escape: char) -> (&str, bool) {
    match line.trim_end_matches([' ', '\t']).strip_suffix(escape) {
        Some(rest) if !rest.ends_with(escape) => (rest, false),
        _ => (line, true),
    }
}

/// The instruction name, lowercased, and the rest of the line.
fn split_command(line: &str) -> (String, &str) {
    let line = line.trim();
    match line.find(['\t', '\x0b', '\x0c', '\r', ' ']) {
        Some(end) => (line[..end].to_ascii_lowercase(), line[end..].trim()),
        None => (line.to_ascii_lowercase(), ""),
    }
}

/// Heredoc names (and whether `<<-` strips leading tabs) an instruction reads after its line:
/// only `RUN`, `COPY` and `ADD` (also under `ONBUILD`), and not in their JSON form.
fn heredoc_markers(line: &str) -> Vec<(String, bool)> {
    let (command, args) = split_command(line);
    let (command, args) = if command == "onbuild" {
        split_command(args)
    } else {
        (command, args)
    };
    if !matches!(command.as_str(), "run" | "copy" | "add")
        || json_array(extract_flags(args).1).is_some()
    {
        return Vec::new();
    }
    raw_words(line)
        .iter()
        .filter_map(|word| heredoc_marker(word))
        .collect()
}

/// BuildKit's `^(\d*)<<(-?)([^<]*)$` on one raw word; the name is unquoted.
fn heredoc_marker(word: &str) -> Option<(String, bool)> {
    let rest = word
        .trim_start_matches(|c: char| c.is_ascii_digit())
        .strip_prefix("<<")?;
    let (strip_tabs, rest) = match rest.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, rest),
    };
    if rest.contains('<') {
        return None;
    }
    let name = shell_words(rest, '\\').0.concat();
    (!name.is_empty()).then_some((name, strip_tabs))
}

/// `args` as a JSON array, when it is one.
fn json_array(args: &str) -> Option<Vec<serde_json::Value>> {
    args.starts_with('[')
        .then(|| serde_json::from_str(args).ok())
        .flatten()
}

/// Whitespace-separated words with quotes and backslash escapes kept as written.
fn raw_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                word.push(c);
                if c == q {
                    quote = None;
                } else if c == '\\' && q == '"' {
                    word.extend(chars.next());
                }
            }
            None if c.is_whitespace() => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            None => {
                word.push(c);
                if c == '\'' || c == '"' {
                    quote = Some(c);
                } else if c == '\\' {
                    word.extend(chars.next());
                }
            }
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// Shell-form words: split on whitespace outside quotes; single quotes keep everything,
/// double quotes let `escape` escape `"`, `$` and itself, and outside quotes `escape` keeps
/// the next character as it is. Also returns whether a quote is left open.
fn shell_words(args: &str, escape: char) -> (Vec<String>, bool) {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote = None;
    let mut chars = args.chars().peekable();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) if c == q => quote = None,
            Some('"') if c == escape => match chars.peek() {
                Some(&next) if next == '"' || next == '$' || next == escape => {
                    word.push(next);
                    chars.next();
                }
                _ => word.push(c),
            },
            Some(_) => word.push(c),
            None if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
                continue;
            }
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == escape => word.extend(chars.next()),
            None => word.push(c),
        }
        in_word = true;
    }
    if in_word {
        words.push(word);
    }
    (words, quote.is_some())
}

/// Leading `--name[=value]` words and the rest of the line, as BuildKit's
/// `extractBuilderFlags` splits them: quotes removed, `\` escaping, `--` ending.
fn extract_flags(args: &str) -> (Vec<Flag>, &str) {
    let mut flags = Vec::new();
    // A value-taking flag waiting for its value word: its name and where it starts.
    let mut pending: Option<(String, usize)> = None;
    let mut pos = 0;
    loop {
        let rest = args[pos..].trim_start();
        let start = args.len() - rest.len();
        if rest.is_empty() || (pending.is_none() && !rest.starts_with("--")) {
            if let Some((name, from)) = pending {
                flags.push(Flag::new(name, String::new(), &args[from..pos]));
            }
            return (flags, rest);
        }
        let (word, end) = flag_word(args, start);
        pos = end;
        if let Some((name, from)) = pending.take() {
            flags.push(Flag::new(name, word, &args[from..end]));
            continue;
        }
        if word == "--" {
            return (flags, args[end..].trim_start());
        }
        let raw = &args[start..end];
        let body = word.strip_prefix("--").unwrap_or(&word);
        match body.split_once('=') {
            Some((name, value)) => flags.push(Flag::new(name, value.to_string(), raw)),
            None if VALUE_FLAGS.contains(&body.to_ascii_lowercase().as_str()) => {
                pending = Some((body.to_ascii_lowercase(), start));
            }
            None => flags.push(Flag::new(body, String::new(), raw)),
        }
    }
}

impl Flag {
    fn new(name: impl AsRef<str>, value: String, raw: &str) -> Flag {
        Flag {
            name: name.as_ref().to_ascii_lowercase(),
            value,
            raw: raw.to_string(),
        }
    }
}

/// The flag word starting at byte `start`, unquoted, and the byte offset after it.
fn flag_word(args: &str, start: usize) -> (String, usize) {
    let mut word = String::new();
    let mut quote = None;
    let mut chars = args[start..].char_indices();
    while let Some((offset, c)) = chars.next() {
        match quote {
            Some(q) if c == q => quote = None,
            None if c.is_whitespace() => return (word, start + offset),
            None if c == '\'' || c == '"' => quote = Some(c),
            _ if c == '\\' => word.extend(chars.next().map(|(_, next)| next)),
            _ => word.push(c),
        }
    }
    (word, args.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(words: &[&str]) -> Args {
        Args::Shell {
            words: words.iter().map(|w| w.to_string()).collect(),
            open_quote: false,
        }
    }

    fn keywords_and_lines(text: &str) -> Vec<(String, usize, usize)> {
        parse(text)
            .into_iter()
            .map(|i| (i.keyword, i.line, i.last_line))
            .collect()
    }

    #[test]
    fn continuations_join_and_skip_comments_and_blank_lines() {
        let text = "# syntax=docker/dockerfile:1\n\
                    FROM \\\n    # a comment inside\n    base:v1 \\\n\n    AS b\n\
                    run echo one \\\n  && echo two\n";
        let parsed = parse(text);
        assert_eq!(parsed.len(), 2);
        assert_eq!((parsed[0].line, parsed[0].last_line), (2, 6));
        assert_eq!(parsed[0].keyword, "FROM");
        assert_eq!(parsed[0].text, "FROM     base:v1     AS b");
        assert_eq!(parsed[0].args, shell(&["base:v1", "AS", "b"]));
        assert_eq!(parsed[1].keyword, "RUN");
        assert_eq!((parsed[1].line, parsed[1].last_line), (7, 8));
        assert_eq!(parsed[1].raw, "echo one   && echo two");
    }

    #[test]
    fn backtick_escape_directive() {
        let body = "FROM base\nCOPY . C:\\app\\\nRUN echo a `\n  b\n";
        assert_eq!(
            keywords_and_lines(&format!("# escape=`\n{body}")),
            [
                ("FROM".into(), 2, 2),
                ("COPY".into(), 3, 3),
                ("RUN".into(), 4, 5)
            ]
        );
        let parsed = parse(&format!("# escape=`\n{body}"));
        assert_eq!(parsed[1].args, shell(&[".", "C:\\app\\"]));
        // With the default backslash the COPY runs on into the RUN line; a directive after
        // another line is a comment.
        for text in [body.to_string(), format!("FROM x\n# escape=`\n{body}")] {
            let keywords: Vec<_> = parse(&text).into_iter().map(|i| i.keyword).collect();
            assert!(!keywords.contains(&"RUN".to_string()), "{keywords:?}");
        }
    }

    #[test]
    fn heredocs_with_chomp_and_quoted_markers() {
        let text = "\
RUN <<EOF
echo one
EOF
RUN cat <<-'ONE' > /a && cat <<\"TWO\" > /b
\t\tfirst
\tONE
\tsecond
TWO
COPY --chmod=644 <<EOF /etc/x
FROM debian
EOF
VOLUME /after
";
        let parsed = parse(text);
        let heredocs: Vec<Vec<(&str, &str)>> = parsed
            .iter()
            .map(|i| {
                i.heredocs
                    .iter()
                    .map(|h| (h.name.as_str(), h.body.as_str()))
                    .collect()
            })
            .collect();
        assert_eq!(
            heredocs,
            [
                vec![("EOF", "echo one\n")],
                vec![("ONE", "first\n"), ("TWO", "\tsecond\n")],
                vec![("EOF", "FROM debian\n")],
                vec![],
            ]
        );
        assert_eq!(
            keywords_and_lines(text),
            [
                ("RUN".into(), 1, 3),
                ("RUN".into(), 4, 8),
                ("COPY".into(), 9, 11),
                ("VOLUME".into(), 12, 12)
            ]
        );
        assert_eq!(parsed[2].text, "COPY --chmod=644 <<EOF /etc/x");
    }

    #[test]
    fn unterminated_heredoc_runs_to_the_end() {
        let parsed = parse("RUN <<EOF\nVOLUME /x\n");
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].heredocs[0].body, "VOLUME /x\n\n");
        assert_eq!(parsed[0].last_line, 3);
    }

    #[test]
    fn exec_and_shell_forms() {
        let parsed = parse(
            "RUN [\"sh\", \"-c\", \"cat <<EOF\"]\n\
             CMD [ \"a b\" ]\n\
             RUN [\"sh\", 1]\n\
             FROM [\"base\"]\n\
             ENV A=\"x y\" B='$z' C=a\\ b\n\
             RUN echo \"unclosed\n",
        );
        assert_eq!(
            parsed[0].args,
            Args::Exec(vec!["sh".into(), "-c".into(), "cat <<EOF".into()])
        );
        assert!(parsed[0].heredocs.is_empty());
        assert_eq!(parsed[1].args, Args::Exec(vec!["a b".into()]));
        // Not an array of strings, or not an instruction that takes one: shell form.
        assert_eq!(parsed[2].args, shell(&["[sh,", "1]"]));
        assert_eq!(parsed[3].args, shell(&["[base]"]));
        assert_eq!(parsed[4].args.words(), ["A=x y", "B=$z", "C=a b"]);
        assert_eq!(parsed[4].raw, "A=\"x y\" B='$z' C=a\\ b");
        assert_eq!(
            parsed[5].args,
            Args::Shell {
                words: vec!["echo".into(), "unclosed".into()],
                open_quote: true
            }
        );
    }

    #[test]
    fn flags_come_before_the_arguments() {
        let parsed = parse(
            "FROM --platform=linux/amd64 base AS b\n\
             RUN --MOUNT=\"type=bind,source=/etc\" --network host -- --not-a-flag\n\
             COPY --from=b --link /a /b\n\
             RUN --security\n",
        );
        let flags: Vec<Vec<(&str, &str, &str)>> = parsed
            .iter()
            .map(|i| {
                i.flags
                    .iter()
                    .map(|f| (f.name.as_str(), f.value.as_str(), f.raw.as_str()))
                    .collect()
            })
            .collect();
        assert_eq!(
            flags,
            [
                vec![("platform", "linux/amd64", "--platform=linux/amd64")],
                vec![
                    (
                        "mount",
                        "type=bind,source=/etc",
                        "--MOUNT=\"type=bind,source=/etc\""
                    ),
                    ("network", "host", "--network host"),
                ],
                vec![("from", "b", "--from=b"), ("link", "", "--link")],
                vec![("security", "", "--security")],
            ]
        );
        assert_eq!(parsed[0].args.words(), ["base", "AS", "b"]);
        assert_eq!(parsed[1].raw, "--not-a-flag");
        assert_eq!(parsed[2].args.words(), ["/a", "/b"]);
        assert_eq!(parsed[3].raw, "");
    }

    #[test]
    fn crlf_and_byte_order_mark() {
        assert_eq!(
            keywords_and_lines("\u{feff}FROM base\r\nRUN echo \\\r\n  hi\r\nvolume /x\r\n"),
            [
                ("FROM".into(), 1, 1),
                ("RUN".into(), 2, 3),
                ("VOLUME".into(), 4, 4)
            ]
        );
    }

    #[test]
    fn empty_binary_and_from_less_input() {
        assert_eq!(parse(""), []);
        assert_eq!(parse("\n\n# only comments\n  \n"), []);
        assert_eq!(keywords_and_lines("RUN true\n"), [("RUN".into(), 1, 1)]);
        let bytes: Vec<u8> = (0..=255).collect();
        let text = String::from_utf8_lossy(&bytes);
        for end in text.char_indices().map(|(at, _)| at) {
            parse(&text[..end]);
        }
        let sample = "# escape=`\nFROM --platform base `\n AS x\nRUN <<-\"E\" [\"a\"\n\tE\nCOPY \"";
        for end in sample.char_indices().map(|(at, _)| at) {
            parse(&sample[..end]);
        }
    }
}
