//! Two JSON values set side by side: where they differ, path by path, with arrays aligned
//! on their equal elements so that one element added or changed is one difference, not a
//! shifted tail. Used by the parity tests (our requests against an SDK's) and the drift
//! tests (a committed cassette against one authored now).

use std::collections::BTreeSet;

use serde_json::{Value, json};

/// An RFC 3339 date-time (`2026-12-06T14:10:00…`).
pub fn looks_like_time(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 19
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
}

/// Differences between `a` and `b` (ours and theirs, or committed and now) at `at`: objects key by key, arrays
/// aligned on equal elements (unequal ones left between two aligned ones are paired in
/// order and compared; the rest are added or missing elements).
pub fn diff_values(at: &str, a: &Value, b: &Value, found: &mut Vec<(String, Value, Value)>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for key in keys {
                let at = format!("{at}/{key}");
                match (x.get(key), y.get(key)) {
                    (Some(o), Some(t)) => diff_values(&at, o, t, found),
                    (o, t) => found.push((
                        at,
                        o.cloned().unwrap_or(Value::Null),
                        t.cloned().unwrap_or(Value::Null),
                    )),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            let pairs = align(x, y);
            let (mut i, mut j) = (0, 0);
            for (pi, pj) in pairs.into_iter().chain([(x.len(), y.len())]) {
                // The unequal run before this aligned pair: kin paired and compared.
                let (gap_x, gap_y) = (&x[i..pi], &y[j..pj]);
                let mut next = 0;
                for (k, o) in gap_x.iter().enumerate() {
                    match (next..gap_y.len()).find(|&l| kin(o, &gap_y[l])) {
                        Some(l) => {
                            for (m, t) in gap_y.iter().enumerate().take(l).skip(next) {
                                found.push((format!("{at}/~{}", j + m), Value::Null, t.clone()));
                            }
                            diff_values(&format!("{at}/{}", i + k), o, &gap_y[l], found);
                            next = l + 1;
                        }
                        None => found.push((format!("{at}/{}", i + k), o.clone(), Value::Null)),
                    }
                }
                for (m, t) in gap_y.iter().enumerate().skip(next) {
                    found.push((format!("{at}/~{}", j + m), Value::Null, t.clone()));
                }
                (i, j) = (pi + 1, pj + 1);
            }
        }
        (o, t) if o != t => found.push((at.to_owned(), o.clone(), t.clone())),
        _ => {}
    }
}

/// Whether two unequal array elements are one thing changed: objects of the same `type`
/// whose `args` (if any) begin alike, or two values that are not objects.
fn kin(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.get("type") == y.get("type") && a["args"].get(0) == b["args"].get(0)
        }
        (Value::Object(_), _) | (_, Value::Object(_)) => false,
        _ => true,
    }
}

/// The index pairs of a longest common subsequence of equal elements.
fn align(x: &[Value], y: &[Value]) -> Vec<(usize, usize)> {
    let (n, m) = (x.len(), y.len());
    let mut table = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            table[i][j] = if x[i] == y[j] {
                table[i + 1][j + 1] + 1
            } else {
                table[i + 1][j].max(table[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut pairs) = (0, 0, Vec::new());
    while i < n && j < m {
        if x[i] == y[j] {
            pairs.push((i, j));
            (i, j) = (i + 1, j + 1);
        } else if table[i + 1][j] >= table[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    pairs
}

pub fn one_step_added_or_changed_is_one_difference_each_not_a_shifted_tail() {
    let ours = json!({"steps": [
        {"type": "ENV", "args": ["A", "1"]},
        {"type": "COPY", "args": ["a", "/a"]},
        {"type": "RUN", "args": ["x", ""]},
        {"type": "USER", "args": ["u"]},
    ]});
    let theirs = json!({"steps": [
        {"type": "COPY", "args": ["a", "/a"]},
        {"type": "RUN", "args": ["x"]},
        {"type": "USER", "args": ["u"]},
    ]});
    let mut found = Vec::new();
    diff_values("body", &ours, &theirs, &mut found);
    assert_eq!(
        found,
        vec![
            (
                "body/steps/0".to_owned(),
                json!({"type": "ENV", "args": ["A", "1"]}),
                Value::Null
            ),
            ("body/steps/2/args/1".to_owned(), json!(""), Value::Null),
        ]
    );
}
