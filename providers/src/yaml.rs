//! YAML errors for people: one location, the parser's own words where they help, and
//! never its internals (option names, budget structs) or a whole long value.

/// The longest a quoted value in a message stays before it is cut.
const MAX_VALUE: usize = 200;
/// The longest a whole message may be.
const MAX_MESSAGE: usize = 600;

/// Line and column (1-based; 0 when the parser gave none) and a message for a person.
pub fn describe(e: &serde_saphyr::Error) -> (u64, u64, String) {
    let (line, column) = e
        .location()
        .map(|l| (l.line(), l.column()))
        .unwrap_or((0, 0));
    let message = e.without_snippet().to_string();
    // The location is said once, in front, by the caller.
    let repeated = format!(" at line {line}, column {column}");
    let message = message.strip_suffix(&repeated).unwrap_or(&message);
    (line, column, humane(message))
}

/// `message` without parser internals, long values cut.
pub fn humane(message: &str) -> String {
    let message = if let Some(rest) = message.strip_prefix("duplicate mapping key") {
        match rest
            .strip_prefix(": ")
            .and_then(|r| r.strip_suffix(", set DuplicateKeyPolicy in Options if acceptable"))
        {
            Some(key) => format!("`{key}` is given twice; give each key once"),
            None => "a key is given twice; give each key once".to_owned(),
        }
    } else if message.starts_with("multiple YAML documents detected") {
        "the file holds more than one YAML document (a `---` line starts another); it must hold one"
            .to_owned()
    } else if message.contains("recursive references require weak recursion types") {
        "an alias refers to the node that holds it (`*name` inside `&name`); nothing here may refer to itself"
            .to_owned()
    } else if let Some(breach) = message.strip_prefix("budget breached: ") {
        let what = breach
            .split(|c: char| !c.is_ascii_alphanumeric())
            .next()
            .unwrap_or("size")
            .to_lowercase();
        format!(
            "the file is too large to read (over the limit on YAML {what}); split it or make it smaller"
        )
    } else {
        message.to_owned()
    };
    cut_values(&message)
}

/// Cuts every backquoted value over [`MAX_VALUE`] characters, then the whole message over
/// [`MAX_MESSAGE`].
fn cut_values(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(MAX_MESSAGE + 64));
    for (i, part) in message.split('`').enumerate() {
        if i > 0 {
            out.push('`');
        }
        out.push_str(&cut(part, MAX_VALUE));
    }
    cut(&out, MAX_MESSAGE)
}

/// `text` cut to `keep` characters, saying how long it was.
pub fn cut(text: &str, keep: usize) -> String {
    match text.char_indices().nth(keep) {
        None => text.to_owned(),
        Some((at, _)) => format!("{}… ({} bytes in all)", &text[..at], text.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_internals_become_words() {
        let e =
            humane("duplicate mapping key: name, set DuplicateKeyPolicy in Options if acceptable");
        assert_eq!(e, "`name` is given twice; give each key once");
        let e = humane(
            "multiple YAML documents detected; use from_str_multiple or from_str_multiple_with_options",
        );
        assert_eq!(
            e,
            "the file holds more than one YAML document (a `---` line starts another); it must hold one"
        );
        let e = humane("recursive references require weak recursion types");
        assert!(
            e.starts_with("an alias refers to the node that holds it"),
            "{e}"
        );
        let e = humane("budget breached: Nodes { nodes: 250001 }");
        assert!(!e.contains("Nodes {") && e.contains("too large"), "{e}");
        let long = format!(
            "unknown variant `{}`, expected one of `a`",
            "v".repeat(5000)
        );
        let e = humane(&long);
        assert!(
            e.len() < 400 && e.contains("5000 bytes in all") && e.ends_with("`a`"),
            "{e}"
        );
    }
}
