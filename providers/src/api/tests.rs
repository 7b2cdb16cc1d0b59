use super::*;

#[test]
fn a_request_debug_shows_header_names_not_their_values() {
    // A fake credential, made up for this test.
    let request = ApiRequest::get(Target::Api, "/sandboxes")
        .header("X-API-Key", "fake-key-in-a-header-0000")
        .what("list sandboxes");
    let shown = format!("{request:?}");
    assert!(
        shown.contains("x-api-key") && shown.contains("list sandboxes: GET /sandboxes"),
        "{shown}"
    );
    assert!(!shown.contains("fake-key-in-a-header-0000"), "{shown}");
}
