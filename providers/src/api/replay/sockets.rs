//! The WebSocket side of replay: each recorded upgrade served frame by frame, a stray frame
//! closing the socket with the difference.

use super::mismatch::frame_differences;
use super::*;

/// Serves WebSocket exchanges: the upgrade is matched as a request, then the frames are
/// played.
pub(super) struct Sockets {
    pub(super) state: Arc<Mutex<State>>,
    pub(super) options: ReplayOptions,
}

/// Close code of a socket whose client sent a frame other than the recorded one.
const CLOSE_MISMATCH: u16 = 1008;

impl Sockets {
    pub(super) async fn serve(self: Arc<Self>, stream: Rewound) {
        let normalizer = Normalizer::new(&self.options.credentials, &self.options.volatiles);
        let admitted: Arc<Mutex<Option<usize>>> = Arc::default();
        let (this, picked) = (self.clone(), admitted.clone());
        let check = move |request: &tokio_tungstenite::tungstenite::handshake::server::Request| {
            let uri = request.uri();
            let path = uri
                .path_and_query()
                .map_or_else(|| uri.path().to_owned(), |p| p.as_str().to_owned());
            let headers = matched(request.headers(), this.options.matched_headers, &normalizer);
            let incoming = RecordedRequest {
                method: request.method().to_string(),
                path: normalizer.text(&path),
                headers,
                body: None,
            };
            let (index, response) =
                admit(&this.state, &this.options, incoming).map_err(|answer| (418, answer))?;
            if lock(&this.state).cassette.exchanges[index]
                .websocket
                .is_none()
            {
                // A refused upgrade, recorded as such: answer what was recorded.
                let body = response
                    .body
                    .as_ref()
                    .map(|b| {
                        String::from_utf8_lossy(&b.to_bytes().unwrap_or_default()).into_owned()
                    })
                    .unwrap_or_default();
                return Err((response.status, body));
            }
            *lock(&picked) = Some(index);
            Ok(())
        };
        let Some(mut socket) = crate::api::ws::accept(stream, check).await else {
            return;
        };
        let Some(index) = *lock(&admitted) else {
            return;
        };
        let mut index = index;
        let (mut frames, latency_ms, mut reset) = {
            let state = lock(&self.state);
            let exchange = &state.cassette.exchanges[index];
            (
                exchange.websocket.clone().unwrap_or_default(),
                exchange.response.latency_ms,
                exchange.response.reset_after_bytes,
            )
        };
        // Bytes of server frames sent: a socket marked `reset_after_bytes` is dropped,
        // with no close frame, once they reach it.
        let mut sent_bytes = 0usize;
        let mut bound = false;
        tokio::time::sleep(delay(self.options.pace, latency_ms)).await;
        let normalizer = Normalizer::new(&self.options.credentials, &self.options.volatiles);
        // Indexed: binding to another exchange of the group swaps `frames` on the way.
        for k in 0..frames.len() {
            let frame = &frames[k].clone();
            if let WsFrame::Close { code, reason } = frame {
                close_with(&mut socket, *code, reason).await;
                return;
            }
            if !frame.from_client() {
                if reset.is_some_and(|cut| sent_bytes >= cut) {
                    return;
                }
                let text = normalizer.restore_frame(frame).text().unwrap_or_default();
                sent_bytes += text.len();
                if socket.send(Message::text(text)).await.is_err() {
                    self.problem(format!(
                        "exchange #{index}: the client left before frame #{k} was sent"
                    ));
                    return;
                }
                continue;
            }
            let came = loop {
                match socket.next().await {
                    Some(Ok(Message::Text(text))) => break Some(text.as_str().to_owned()),
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(_)) | Some(Err(_)) | None => break None,
                }
            };
            let Some(came) = came else {
                self.problem(format!(
                    "exchange #{index}: the client closed the socket before sending frame #{k}"
                ));
                return;
            };
            // Normalized the same way the recorder did, with the values known by now.
            let normalizer = Normalizer::new(&self.options.credentials, &self.options.volatiles);
            let came = normalizer.frame(&WsFrame::from_text(true, &came));
            if !bound {
                // Sockets of one group send the same upgrade: the first client frame tells
                // which recorded socket this one is.
                bound = true;
                if let Some(j) = self.bind(index, k, &came) {
                    index = j;
                    let state = lock(&self.state);
                    frames = state.cassette.exchanges[j]
                        .websocket
                        .clone()
                        .unwrap_or_default();
                    reset = state.cassette.exchanges[j].response.reset_after_bytes;
                    drop(state);
                    continue;
                }
            }
            if came != frames[k] {
                let problem = format!(
                    "exchange #{index} (GET {}), frame #{k}: {}",
                    lock(&self.state).cassette.exchanges[index].request.path,
                    frame_differences(&frames[k], &came).join("; ")
                );
                self.problem(problem.clone());
                close_with(&mut socket, CLOSE_MISMATCH, &problem).await;
                return;
            }
        }
        // Recorded without a close: the client closed; wait for it to.
        while let Some(Ok(message)) = socket.next().await {
            if matches!(message, Message::Close(_)) {
                break;
            }
        }
    }

    /// Keeps `problem` for [`ReplayServer::finish`].
    fn problem(&self, problem: String) {
        lock(&self.state).problems.push(problem);
    }

    /// The exchange a socket admitted as `index` is, now that its client frame `k` is
    /// `came`: `index` itself or another of its group with the same upgrade, frames
    /// before `k` and frame `k`, not taken by another socket yet (the served counts move
    /// with it). `None` when none fits: `index` then reports the difference.
    fn bind(&self, index: usize, k: usize, came: &WsFrame) -> Option<usize> {
        let mut state = lock(&self.state);
        let segment = state
            .segments
            .iter()
            .find(|s| s.contains(&index))
            .cloned()
            .unwrap_or(index..index + 1);
        let exchanges = &state.cassette.exchanges;
        let mine = exchanges[index].websocket.as_deref().unwrap_or_default();
        let fits = |j: usize| {
            let theirs = exchanges[j].websocket.as_deref().unwrap_or_default();
            !state.bound[j]
                && exchanges[j].request == exchanges[index].request
                && theirs.len() > k
                && theirs[..k] == mine[..k.min(mine.len())]
                && &theirs[k] == came
        };
        let j = std::iter::once(index)
            .chain(segment.filter(|&j| j != index))
            .find(|&j| fits(j))?;
        state.bound[j] = true;
        if j != index {
            state.served[index] -= 1;
            state.served[j] += 1;
        }
        Some(j)
    }
}
