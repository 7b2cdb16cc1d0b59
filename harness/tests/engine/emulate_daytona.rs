//! `sandbox-matrix emulate daytona`, the binary, as a client meets it: the daytona client
//! runs the lifecycle over HTTPS through Daytona's live URL forms (the control plane at
//! `https://app.<domain>:<port>/api`, the toolbox at the `toolboxProxyUrl` the emulator
//! hands out, `https://proxy.app.<domain>:<port>/toolbox`), with exactly the settings the
//! command prints (the URL, the test CA to trust, the name pin); without the CA the
//! client refuses the emulator, so TLS is really checked.
//!
//! Needs Docker: `cargo test -p sandbox-matrix --test engine emulate_daytona::`.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::emulate::Emulate;
use sandbox_providers::Secret;
use sandbox_providers::api::network::RESOLVE_VAR;
use sandbox_providers::api::{ApiSettings, Endpoints, Mode, Volatiles};
use sandbox_providers::daytona::DaytonaProvider;

/// The fake key sent to the emulator, which checks only that one is sent.
const FAKE_KEY: &str = "fake-daytona-emulate-key-0000";

/// A daytona client configured as the printed settings say; `trust` adds the CA.
fn client(emulate: &Emulate, trust: bool, volatiles: Arc<Volatiles>) -> DaytonaProvider {
    DaytonaProvider::with_network(
        ApiSettings {
            endpoints: Endpoints {
                api_base: emulate.get("DAYTONA_API_URL").to_owned(),
                sandbox_domain: String::new(),
            },
            mode: Mode::Live,
            // Fake: the emulator checks only that a key is sent.
            credentials: vec![Secret::new("DAYTONA_API_KEY", FAKE_KEY)],
            volatiles,
            call_timeout: Duration::from_secs(120),
        },
        None,
        None,
        &emulate.network(trust),
    )
    .expect("a daytona client")
}

/// The lifecycle passes with the toolbox reached at the proxy host.
pub async fn the_daytona_client_runs_the_lifecycle_against_emulate_over_https_through_live_forms() {
    let emulate = Emulate::start("daytona", &[]);
    let api = emulate.get("DAYTONA_API_URL").to_owned();
    let pin = emulate.get(RESOLVE_VAR).to_owned();
    assert!(
        api.starts_with("https://app.daytona.test:") && api.ends_with("/api"),
        "{api}"
    );
    assert_eq!(pin, "daytona.test=127.0.0.1");
    common::emulate::client_runs_the_lifecycle(emulate, "daytona", client).await;
}
