//! How a request that strays from the cassette is told apart from the recording: its
//! headers, body (JSON field by field) and WebSocket frames, a few differences each.

use super::*;

/// A request header's value, looked up by its lower-case name.
pub(super) fn header<'a>(request: &'a RecordedRequest, name: &str) -> Option<&'a str> {
    request
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// How `came` differs from `expected` in its matched headers and body (the mismatch's
/// first words give method and path): at most [`MAX_DIFFERENCES`] items, each short.
pub(super) fn differences(
    expected: &RecordedRequest,
    came: &RecordedRequest,
    headers: &[&str],
) -> Vec<String> {
    let mut out = Vec::new();
    for name in headers {
        let (e, c) = (header(expected, name), header(came, name));
        if e != c {
            out.push(format!(
                "header {name}: expected {}, came {}",
                header_value(e),
                header_value(c)
            ));
        }
    }
    body_differences(expected.body.as_ref(), came.body.as_ref(), &mut out);
    if out.len() > MAX_DIFFERENCES {
        out.truncate(MAX_DIFFERENCES);
        out.push("more differences".to_owned());
    }
    out
}

/// A header value as a difference shows it; a Basic credential's user is decoded (envd
/// runs a process as that user).
fn header_value(value: Option<&str>) -> String {
    let Some(value) = value else {
        return "none".to_owned();
    };
    let user = value
        .strip_prefix("Basic ")
        .and_then(|b| {
            base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .ok()
        })
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|pair| pair.split_once(':').map(|(user, _)| user.to_owned()));
    match user {
        Some(user) => format!("`{}` (user {user})", excerpt(value)),
        None => format!("`{}`", excerpt(value)),
    }
}

/// How two bodies differ: the first differing line of text, the first differing JSON
/// values (lines and Connect frames as arrays), or their forms.
fn body_differences(expected: Option<&Body>, came: Option<&Body>, out: &mut Vec<String>) {
    match (expected, came) {
        (None, None) => {}
        (Some(e), Some(c)) if e == c => {}
        (Some(Body::Text(e)), Some(Body::Text(c))) => {
            let (mut el, mut cl) = (e.lines(), c.lines());
            let mut line = 1;
            loop {
                match (el.next(), cl.next()) {
                    (Some(a), Some(b)) if a == b => line += 1,
                    (None, None) => {
                        out.push("body: differs in line endings".to_owned());
                        return;
                    }
                    (a, b) => {
                        out.push(format!(
                            "body line {line}: expected {}, came {}",
                            a.map_or("none".to_owned(), |a| crate::quoted(&excerpt(a))),
                            b.map_or("none".to_owned(), |b| crate::quoted(&excerpt(b)))
                        ));
                        return;
                    }
                }
            }
        }
        (Some(e), Some(c)) => match (json_form(e), json_form(c)) {
            (Some(ev), Some(cv)) if form(e) == form(c) => {
                json_differences("body", "", &ev, &cv, out)
            }
            _ => out.push(format!(
                "body: expected {} {}, came {} {}",
                form(e),
                excerpt(&short(e)),
                form(c),
                excerpt(&short(c))
            )),
        },
        (e, c) => out.push(format!(
            "body: expected {}, came {}",
            e.map_or("none".to_owned(), |b| format!(
                "{} {}",
                form(b),
                excerpt(&short(b))
            )),
            c.map_or("none".to_owned(), |b| format!(
                "{} {}",
                form(b),
                excerpt(&short(b))
            ))
        )),
    }
}

/// The body's form, as cassettes name it.
pub(super) fn form(body: &Body) -> &'static str {
    match body {
        Body::Json(_) => "json",
        Body::JsonLines(_) => "json_lines",
        Body::Connect(_) => "connect",
        Body::Text(_) => "text",
        Body::Base64(_) => "base64",
    }
}

/// The body as one JSON document to compare: lines and Connect frames as arrays.
fn json_form(body: &Body) -> Option<serde_json::Value> {
    match body {
        Body::Json(v) => Some(v.clone()),
        Body::JsonLines(lines) => Some(serde_json::Value::Array(lines.clone())),
        Body::Connect(frames) => serde_json::to_value(frames).ok(),
        Body::Text(_) | Body::Base64(_) => None,
    }
}

/// The first differences between two JSON documents, by JSON Pointer after `label` (such
/// as `body`); stops once `out` holds more than [`MAX_DIFFERENCES`].
fn json_differences(
    label: &str,
    at: &str,
    expected: &serde_json::Value,
    came: &serde_json::Value,
    out: &mut Vec<String>,
) {
    use serde_json::Value;
    if out.len() > MAX_DIFFERENCES {
        return;
    }
    let pointer = |at: &str| {
        if at.is_empty() {
            "/".to_owned()
        } else {
            at.to_owned()
        }
    };
    match (expected, came) {
        (Value::Object(e), Value::Object(c)) => {
            let mut keys: Vec<&String> = e.keys().chain(c.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let here = format!("{at}/{}", key.replace('~', "~0").replace('/', "~1"));
                match (e.get(key), c.get(key)) {
                    (Some(ev), Some(cv)) => json_differences(label, &here, ev, cv, out),
                    (ev, cv) => {
                        out.push(format!(
                            "{label} {here}: expected {}, came {}",
                            ev.map_or("none".to_owned(), |v| excerpt(&v.to_string())),
                            cv.map_or("none".to_owned(), |v| excerpt(&v.to_string()))
                        ));
                    }
                }
            }
        }
        (Value::Array(e), Value::Array(c)) => {
            for (i, (ev, cv)) in e.iter().zip(c).enumerate() {
                json_differences(label, &format!("{at}/{i}"), ev, cv, out);
            }
            if e.len() != c.len() {
                out.push(format!(
                    "{label} {}: expected {} items, came {}",
                    pointer(at),
                    e.len(),
                    c.len()
                ));
            }
        }
        (e, c) if e != c => {
            out.push(format!(
                "{label} {}: expected {}, came {}",
                pointer(at),
                excerpt(&e.to_string()),
                excerpt(&c.to_string())
            ));
        }
        _ => {}
    }
}

/// `text` cut to [`EXCERPT`] characters.
pub(super) fn excerpt(text: &str) -> String {
    match text.char_indices().nth(EXCERPT) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// How a client frame differs from the recorded one.
pub(super) fn frame_differences(expected: &WsFrame, came: &WsFrame) -> Vec<String> {
    let mut out = Vec::new();
    match (expected, came) {
        (WsFrame::Client(e), WsFrame::Client(c)) => json_differences("frame", "", e, c, &mut out),
        _ => out.push(format!(
            "expected {}, came {}",
            excerpt(&expected.text().unwrap_or_default()),
            excerpt(&came.text().unwrap_or_default())
        )),
    }
    if out.len() > MAX_DIFFERENCES {
        out.truncate(MAX_DIFFERENCES);
        out.push("more differences".to_owned());
    }
    out
}

fn short(body: &Body) -> String {
    match body {
        Body::Json(v) => v.to_string(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}
