use super::*;

#[test]
fn the_names_are_the_local_then_the_cloud_variants() {
    let from_variants: Vec<&str> = LOCAL
        .iter()
        .copied()
        .chain(CLOUD.iter().map(|c| c.name))
        .collect();
    assert_eq!(known(), from_variants);
}

#[test]
fn only_an_address_on_this_machine_is_loopback() {
    for here in [
        "e2b.localhost:43117",
        "http://127.0.0.1:8080",
        "https://localhost/api",
        "http://[::1]:9000/v1",
        "https://user@api.daytona.localhost:443/api",
    ] {
        assert!(names_loopback(here, None), "{here}");
    }
    for there in [
        "e2b.app",
        "https://app.daytona.io/api",
        "https://api.modal.com:443",
        "http://localhost.example.com",
        "http://10.0.0.1:8080",
    ] {
        assert!(!names_loopback(there, None), "{there}");
    }
    // A name pinned to this machine, as `emulate` prints it, is loopback; one pinned
    // elsewhere, or a name the pin does not cover, is not.
    let pin = Some("e2b.test=127.0.0.1");
    assert!(names_loopback("https://api.e2b.test:40487", pin));
    assert!(!names_loopback("https://api.e2b.app", pin));
    assert!(!names_loopback(
        "https://api.e2b.test",
        Some("e2b.test=10.0.0.1")
    ));
}

#[test]
fn a_replay_names_its_cassette_from_the_project_root_and_reads_its_header() {
    let cassette = Cassette::parse(
            "origin: authored from a spec\nwritten: 2026-11-29\nvariant: e2b\nscenario: lifecycle\nexchanges: []\n",
        )
        .expect("parses");
    let shown = |dir: &Path| {
        let path = cassette_path(dir, "e2b", "lifecycle");
        let header = (cassette.origin.clone(), cassette.written.clone());
        match replay_source(dir, &path, Pace::Recorded, Some(header)) {
            Source::Replay { replay } => replay,
            other => panic!("not a replay: {other:?}"),
        }
    };
    // The project's own folder, however it is reached: relative, or under the checkout.
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for dir in [
        PathBuf::from("./fixtures/cassettes"),
        PathBuf::from(CASSETTES_DIR),
        checkout.join(CASSETTES_DIR),
    ] {
        assert_eq!(
            shown(&dir).cassette,
            "fixtures/cassettes/e2b/lifecycle.yaml",
            "{}",
            dir.display()
        );
    }
    // A folder of the user's own is shown as given.
    let mine = std::env::temp_dir().join("mine");
    assert_eq!(
        shown(&mine).cassette,
        mine.join("e2b/lifecycle.yaml").display().to_string()
    );
    let replay = shown(Path::new(CASSETTES_DIR));
    assert_eq!(replay.origin.as_deref(), Some("authored from a spec"));
    assert_eq!(replay.written.as_deref(), Some("2026-11-29"));
    assert_eq!(replay.pace, crate::model::results::ReplayPace::Recorded);

    let missing = CloudMode::Replay {
        dir: std::env::temp_dir()
            .join("sm-no-such-checkout")
            .join(CASSETTES_DIR),
        pace: Pace::Instant,
    }
    .source("e2b", "lifecycle");
    let Source::Replay { replay } = missing else {
        panic!("not a replay: {missing:?}")
    };
    assert_eq!(
        (replay.cassette.as_str(), replay.origin, replay.written),
        ("fixtures/cassettes/e2b/lifecycle.yaml", None, None),
        "an unreadable cassette's origin and date stay unknown"
    );
    assert_eq!(CloudMode::Live.source("e2b", "lifecycle"), Source::Live);
}
