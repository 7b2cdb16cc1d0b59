//! Recording: every exchange of a recording client kept in the order it was sent, with
//! concurrent calls' groups, redacted before it is written.

use super::*;

/// Collects exchanges while recording and writes them as one cassette.
#[derive(Debug)]
pub struct Recorder {
    path: PathBuf,
    origin: Mutex<String>,
    variant: String,
    scenario: String,
    /// Ticks once when a request is sent and once when its exchange is complete.
    clock: AtomicU64,
    exchanges: Mutex<Vec<InFlight>>,
    credentials: Mutex<Vec<Secret>>,
}

/// An exchange and when, on the recorder's clock, its request went out and its response
/// ended.
#[derive(Debug)]
struct InFlight {
    exchange: Exchange,
    sent: u64,
    done: u64,
}

impl Recorder {
    /// Says where the exchanges came from instead of the `origin` it was made with: an
    /// emulator, as its answers announced.
    pub fn set_origin(&self, origin: String) {
        *self.origin.lock().expect("recorder origin lock") = origin;
    }

    /// A recorder that will write `path`; `origin` goes in the header
    /// (`recorded live <date>`, or `authored from <spec>@<version>`).
    pub fn new(
        path: impl Into<PathBuf>,
        origin: impl Into<String>,
        variant: impl Into<String>,
        scenario: impl Into<String>,
    ) -> Self {
        Self {
            path: path.into(),
            origin: Mutex::new(origin.into()),
            variant: variant.into(),
            scenario: scenario.into(),
            clock: AtomicU64::new(0),
            exchanges: Mutex::new(Vec::new()),
            credentials: Mutex::new(Vec::new()),
        }
    }

    /// Marks a request going out; the mark goes with its exchange to [`Self::add`].
    pub(super) fn send(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }

    pub(super) fn add(&self, exchange: Exchange, sent: u64, credentials: &[Secret]) {
        lock(&self.credentials).extend(credentials.iter().cloned());
        let mut exchanges = lock(&self.exchanges);
        let done = self.clock.fetch_add(1, Ordering::SeqCst);
        exchanges.push(InFlight {
            exchange,
            sent,
            done,
        });
    }

    /// How many exchanges so far.
    pub fn len(&self) -> usize {
        lock(&self.exchanges).len()
    }

    /// True before the first exchange.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the cassette; refuses if a credential value would reach the file.
    pub fn finish(&self) -> Result<PathBuf> {
        let credentials = lock(&self.credentials).clone();
        // A token learned from a response (registered after that response was recorded)
        // is redacted everywhere, that response included.
        let late = Normalizer::new(&credentials, &Volatiles::default());
        let exchanges = in_order_with_groups(&lock(&self.exchanges))
            .iter()
            .map(|e| redact_exchange(&late, e))
            .collect();
        let cassette = Cassette {
            origin: self.origin.lock().expect("recorder origin lock").clone(),
            written: Some(
                humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            ),
            variant: self.variant.clone(),
            scenario: self.scenario.clone(),
            note: None,
            exchanges,
        };
        let text = serde_saphyr::to_string(&cassette).map_err(|e| {
            ProviderError::new(ErrorKind::Protocol, format!("cannot write cassette: {e}"))
        })?;
        if let Some(leak) = credentials
            .iter()
            .find(|s| !s.expose().is_empty() && text.contains(s.expose()))
        {
            return Err(ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "refusing to write {}: it would hold the value of {}",
                    self.path.display(),
                    leak.name()
                ),
            ));
        }
        cassette.save(&self.path)?;
        Ok(self.path.clone())
    }
}

/// The exchanges in the order their requests went out, those in flight together marked
/// as one group (`concurrent-1`, `concurrent-2`…): a request sent before an earlier one's
/// response ended joins that request's group, so replay serves them in any order.
fn in_order_with_groups(recorded: &[InFlight]) -> Vec<Exchange> {
    let mut order: Vec<&InFlight> = recorded.iter().collect();
    order.sort_by_key(|r| r.sent);
    let mut runs: Vec<(std::ops::Range<usize>, u64)> = Vec::new();
    for (i, r) in order.iter().enumerate() {
        match runs.last_mut() {
            Some((run, end)) if r.sent < *end => {
                run.end = i + 1;
                *end = (*end).max(r.done);
            }
            _ => runs.push((i..i + 1, r.done)),
        }
    }
    let mut out: Vec<Exchange> = order.iter().map(|r| r.exchange.clone()).collect();
    for (n, (run, _)) in runs.iter().filter(|(run, _)| run.len() > 1).enumerate() {
        for exchange in &mut out[run.clone()] {
            exchange.group = Some(format!("concurrent-{}", n + 1));
        }
    }
    out
}

/// `exchange` with every credential value `normalizer` knows replaced.
fn redact_exchange(normalizer: &Normalizer, exchange: &Exchange) -> Exchange {
    let headers = |h: &std::collections::BTreeMap<String, String>| {
        h.iter()
            .map(|(k, v)| (k.clone(), normalizer.text(v)))
            .collect()
    };
    let (request, response) = (&exchange.request, &exchange.response);
    Exchange {
        request: RecordedRequest {
            method: request.method.clone(),
            path: normalizer.text(&request.path),
            headers: headers(&request.headers),
            body: request.body.as_ref().map(|b| normalizer.body(b)),
        },
        response: RecordedResponse {
            headers: headers(&response.headers),
            body: response.body.as_ref().map(|b| normalizer.body(b)),
            ..response.clone()
        },
        repeat: exchange.repeat,
        group: exchange.group.clone(),
        websocket: exchange
            .websocket
            .as_ref()
            .map(|frames| frames.iter().map(|f| normalizer.frame(f)).collect()),
    }
}
