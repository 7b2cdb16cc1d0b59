//! Property tests of what the providers' transports decode from the wire or from disk: the
//! cassette parser, Connect envelopes and JSON-lines bodies. Inputs are generated near the
//! valid grammar (real cassette keys with random values, well-formed envelopes with wrong
//! lengths, random bytes). Each must answer Ok or a clear error, never panic, and stay
//! within a bounded peak of memory, measured by a counting allocator in this test binary:
//! an envelope that claims 4 GiB must not make the decoder reserve it.
//!
//! `cargo test` runs 256 cases per decoder; the nightly's longer run sets
//! `PROPTEST_CASES=20000`.

use proptest::prelude::*;
use sandbox_providers::api::cassette::{decode_connect, encode_connect};
use sandbox_providers::api::{Body, Cassette};

#[path = "support/peak.rs"]
mod peak;

use peak::{MEASURING, PEAK_BOUND, peak_of, runner};

#[global_allocator]
static ALLOCATOR: peak::Counting = peak::Counting;

fn scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        "-?[0-9]{1,6}(\\.[0-9]{1,4})?(e[0-9]{1,3})?",
        Just("1e300".to_owned()),
        Just("-1".to_owned()),
        Just("NaN".to_owned()),
        "[a-z/<>-]{0,16}",
        "\"[ -~&&[^\"\\\\]]{0,20}\"",
        Just("~".to_owned()),
        Just("[]".to_owned()),
    ]
}

/// A cassette: its real keys, one to three exchanges, random values where numbers, paths
/// and bodies go.
fn cassette_text() -> impl Strategy<Value = String> {
    let exchange = (
        prop_oneof![Just("GET"), Just("POST"), Just("DELETE"), Just("PATCH")],
        prop_oneof!["/[a-z0-9/?=&%-]{0,20}", "[a-z]{0,5}"],
        scalar(),
        scalar(),
        scalar(),
        prop_oneof![
            Just("json: {}".to_owned()),
            Just("text: hi".to_owned()),
            Just("connect: []".to_owned()),
            Just("base64: '%%'".to_owned()),
            "json: [ -~]{0,20}",
        ],
    )
        .prop_map(|(method, path, status, latency, reset, body)| {
            format!(
                "- request:\n    method: {method}\n    path: {path}\n  response:\n    status: {status}\n    latency_ms: {latency}\n    reset_after_bytes: {reset}\n    body:\n      {body}\n"
            )
        });
    (
        prop_oneof![
            Just("e2b".to_owned()),
            Just("daytona".to_owned()),
            "[a-z./]{0,8}"
        ],
        proptest::collection::vec(exchange, 0..3),
        any::<usize>(),
    )
        .prop_map(|(variant, exchanges, cut)| {
            let mut text =
                format!("origin: generated\nvariant: {variant}\nscenario: lifecycle\nexchanges:\n");
            for exchange in exchanges {
                text.push_str(&exchange);
            }
            if cut % 4 == 0 {
                let at = cut % text.len();
                let at = (0..=at)
                    .rev()
                    .find(|&i| text.is_char_boundary(i))
                    .unwrap_or(0);
                text.truncate(at);
            }
            text
        })
}

#[test]
fn the_cassette_parser_answers_every_input_without_panic_in_bounded_memory() {
    let _one = MEASURING.lock().unwrap_or_else(|p| p.into_inner());
    runner()
        .run(&cassette_text(), |text| {
            let (result, peak) = peak_of(|| Cassette::parse(&text).map(|c| c.exchanges.len()));
            prop_assert!(peak < PEAK_BOUND, "{peak} bytes for {} bytes", text.len());
            if let Err(e) = result {
                prop_assert!(!e.to_string().trim().is_empty());
            }
            Ok(())
        })
        .unwrap();
}

/// Envelopes: well-formed ones, then a random suffix, a cut, or a header whose length lies
/// (up to 4 GiB).
fn connect_bytes() -> impl Strategy<Value = Vec<u8>> {
    let message = prop_oneof![
        Just(serde_json::json!({})),
        "[ -~]{0,30}".prop_map(|s| serde_json::json!({ "text": s })),
        any::<i64>().prop_map(|n| serde_json::json!(n)),
    ];
    (
        proptest::collection::vec((any::<u8>(), message), 0..4),
        proptest::collection::vec(any::<u8>(), 0..12),
        proptest::option::of(any::<u32>()),
        any::<usize>(),
    )
        .prop_map(|(frames, suffix, lying_length, cut)| {
            let mut bytes = Vec::new();
            for (flags, message) in frames {
                bytes.extend(encode_connect(flags, &message).expect("a small message encodes"));
            }
            if let Some(length) = lying_length {
                bytes.push(0);
                bytes.extend(length.to_be_bytes());
                bytes.extend(b"{}");
            }
            bytes.extend(suffix);
            if cut % 3 == 0 && !bytes.is_empty() {
                bytes.truncate(cut % bytes.len());
            }
            bytes
        })
}

#[test]
fn connect_envelopes_decode_or_fail_without_panic_in_bounded_memory() {
    let _one = MEASURING.lock().unwrap_or_else(|p| p.into_inner());
    runner()
        .run(&connect_bytes(), |bytes| {
            let (result, peak) = peak_of(|| decode_connect(&bytes));
            prop_assert!(peak < PEAK_BOUND, "{peak} bytes for {} bytes", bytes.len());
            if let Ok(frames) = result {
                // What decodes encodes back to the same bytes.
                let again: Vec<u8> = frames
                    .iter()
                    .flat_map(|f| encode_connect(f.flags, &f.message).unwrap())
                    .collect();
                prop_assert_eq!(decode_connect(&again).unwrap(), frames);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn bodies_of_every_content_type_read_without_panic_in_bounded_memory() {
    let _one = MEASURING.lock().unwrap_or_else(|p| p.into_inner());
    let content_type = prop_oneof![
        Just("application/x-ndjson"),
        Just("application/jsonl"),
        Just("application/json"),
        Just("application/connect+json"),
        Just("text/plain"),
        Just("application/octet-stream"),
    ];
    let bytes = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        "([ -~]{0,30}\n){0,6}".prop_map(String::into_bytes),
        "(\\{\"a\": [0-9]{1,3}\\}\n){0,6}".prop_map(String::into_bytes),
    ];
    runner()
        .run(&(content_type, bytes), |(content_type, bytes)| {
            let (body, peak) = peak_of(|| Body::from_bytes(content_type, &bytes));
            prop_assert!(peak < PEAK_BOUND, "{peak} bytes");
            // Every body but a reformatted JSON one gives back bytes on the wire.
            prop_assert!(body.to_bytes().is_ok(), "{body:?}");
            Ok(())
        })
        .unwrap();
}
