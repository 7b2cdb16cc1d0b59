//! An emulator of Datalayer's runtimes API (`/api/runtimes/v1`), written from what
//! Datalayer's own Python client (`datalayer-core` 1.1.40) sends and reads, served over
//! HTTPS on 127.0.0.1 (and plain HTTP on another loopback port) and backed by the local
//! docker variant, so every answer about a runtime is real.
//!
//! Its one environment is the environment folder it was started with, built on the docker
//! variant and listed under a name (`ai-agents-env`, datalayer-core's default, unless told) with a burning rate. A
//! runtime is a docker sandbox of that build: created by `POST /runtimes` (`type`,
//! `environment_name` — or the newer client's `environment.name` — `given_name`,
//! `credits_limit`), got, listed and deleted by its `pod_name`. Its `uid` is no key: a get
//! or delete by uid answers 404 and the runtime stays, as a client keyed by uid would leak
//! it. What the platform refuses comes back as a 200 whose body says `success: false`.
//!
//! Each runtime's Jupyter Server is served at its ingress, `<origin>/jupyter/server/<pod>`
//! on the host the client called, admitting the runtime's token (`Authorization: token
//! <t>`, `Bearer <t>`, or `?token=<t>`) and forwarding to the docker sandbox's server
//! with that server's own token; kernel WebSockets are relayed frame for frame. Faults for
//! cassettes: the next create refused with `success: false`, and an ingress that answers
//! 503 for its first N requests, as a warming ingress does.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use sandbox_providers::docker::DockerProvider;
use sandbox_providers::{
    Artifact, Housekeeping as _, LogFn, Provider, Resource, RunLabels, SandboxId,
};
use serde_json::{Value, json};

use crate::emulator::Emulator as _;
use crate::emulator::{ClientEnv, Reach};
use crate::error::EmulateError;
use crate::http::{Answer, HttpRequest, lock, set_field_outside};
use crate::jupyter::serve_kernel_socket;
use crate::site::Site;

/// The domain the emulator serves when none is given: the API at `r1.<domain>`.
pub const DEFAULT_DOMAIN: &str = "datalayer.test";
/// The environment name it lists when none is given.
pub const DEFAULT_ENVIRONMENT: &str = sandbox_providers::datalayer::runtimes::DEFAULT_ENVIRONMENT;
// Fake: the emulator accepts any bearer token; this one grants nothing anywhere.
const FAKE_KEY: &str = "dl_sm_fake_emulator_key_0000";
/// Credits a second its environment burns (the client reserves `rate × 60 × minutes`).
pub const BURNING_RATE: f64 = 0.01;
/// The label under `<domain>` the API is served at.
const API_LABEL: &str = "r1";
/// The ingress path prefix: `/jupyter/server/<pod_name>`.
const INGRESS_PREFIX: &str = "/jupyter/server/";
/// The variant label of the docker sandboxes and builds it makes.
const EMULATOR_VARIANT: &str = "datalayer-emulator";

/// Where and as what the emulator serves.
#[derive(Debug, Clone)]
pub struct Options {
    /// Port on 127.0.0.1; 0 takes a free one.
    pub port: u16,
    /// The domain: the API is `https://r1.<domain>`.
    pub domain: String,
    /// The name that environment is listed under.
    pub environment_name: String,
    /// Faults, for fault cassettes.
    pub faults: Faults,
    /// The run whose label every build and runtime it makes carries (`run --emulated`);
    /// `None`: labels of its own, unique to this emulator.
    pub run_id: Option<String>,
    /// Fault: every sandbox ends this long after its create, whatever its timeout asks,
    /// as a live provider's sandbox may die early.
    pub kill_after: Option<Duration>,
}

/// Misbehaviours the emulator can be started with.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// The next create answers 200 with `success: false` and this message.
    pub refuse_create: Option<String>,
    /// Each runtime's ingress answers 503 to this many requests before serving.
    pub warm_up: u32,
}

struct Runtime {
    pod_name: String,
    uid: String,
    given_name: String,
    environment_name: String,
    token: String,
    inner: SandboxId,
    started_at: SystemTime,
    /// How long its credits last: `credits_limit` at the burning rate. The platform ends
    /// it then.
    lifetime: Duration,
    /// 503s its ingress still gives.
    warming: u32,
}

#[derive(Default)]
struct World {
    /// The environment's build, once seeded.
    built: Option<Artifact>,
    /// The environment folder's name, once a seed began.
    seeded_from: Option<String>,
    runtimes: Vec<Runtime>,
    counter: u32,
    refuse_create: Option<String>,
}

/// The runtimes emulator. Dropping it stops serving; [`Emulator::cleanup`] removes what
/// its docker sandboxes and build left.
#[derive(Clone)]
pub struct Emulator {
    inner: Arc<Inner>,
}

struct Inner {
    site: Arc<Site>,
    /// The plain HTTP address (WebSocket upgrades too), on loopback.
    plain: std::net::SocketAddr,
    options: Options,
    world: Mutex<World>,
    http: reqwest::Client,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Emulator").field(&self.inner.site).finish()
    }
}

fn time(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

/// `{"success": false, "message": …}` with `status`.
fn refused(status: u16, message: &str) -> Answer {
    Answer::json(status, json!({ "success": false, "message": message }))
}

impl crate::emulator::Emulator for Emulator {
    fn site(&self) -> &Site {
        &self.inner.site
    }

    fn client_env(&self, reach: Reach) -> ClientEnv {
        use sandbox_providers::datalayer::runtimes::{API_KEY_VAR, ENVIRONMENT_VAR, URL_VAR};
        let key = (API_KEY_VAR, FAKE_KEY.to_owned());
        let environment = (ENVIRONMENT_VAR, self.inner.options.environment_name.clone());
        match reach {
            Reach::WithPort => vec![
                key,
                (URL_VAR, self.api_url()),
                ("SANDBOX_MATRIX_DATALAYER_PLAIN_URL", self.plain_url()),
                environment,
                self.resolve(reach),
            ],
            Reach::Pinned => vec![
                key,
                (URL_VAR, self.api_url_without_port()),
                environment,
                self.resolve(reach),
            ],
        }
    }

    /// Builds `environment` on the docker variant as the one environment `POST /runtimes`
    /// starts, listed under [`Options::environment_name`] (in the settings already).
    async fn seed(&self, environment: &Path, log: &LogFn) -> Result<ClientEnv, EmulateError> {
        let scenario = crate::backend::seed_scenario(environment);
        let labels = self.labels(&self.port().to_string(), &scenario);
        self.inner.site.made_under(&labels);
        self.world().seeded_from = Some(scenario);
        let artifact = crate::backend::seed_build(
            self.inner.site.backend().as_ref(),
            environment,
            labels,
            log,
        )
        .await?;
        self.world().built = Some(artifact);
        Ok(ClientEnv::new())
    }
}

impl Emulator {
    /// Serves the runtimes API over HTTPS on 127.0.0.1 with `docker` behind it; its
    /// environment is built by [`crate::emulator::Emulator::seed`].
    pub async fn start(
        docker: Arc<DockerProvider>,
        options: Options,
    ) -> Result<Self, EmulateError> {
        let variant = sandbox_providers::datalayer::runtimes::VARIANT;
        let (port, domain) = (options.port, &options.domain);
        let listening = crate::site::Listening::on(port, domain, None, variant, docker).await?;
        let refuse_create = options.faults.refuse_create.clone();
        let emulator = Self {
            inner: Arc::new(Inner {
                site: listening.site(),
                plain: listening.upstream(),
                options,
                world: Mutex::new(World {
                    refuse_create,
                    ..World::default()
                }),
                http: crate::site::http_client()?,
            }),
        };
        let sockets = |e, stream| serve_kernel_socket(e, stream, Self::admit_socket);
        listening.serve(emulator.clone(), sockets, Self::serve);
        Ok(emulator)
    }

    /// `DATALAYER_RUNTIMES_URL` over HTTPS: `https://r1.<domain>:<port>`.
    pub fn api_url(&self) -> String {
        format!("https://{API_LABEL}.{}:{}", self.domain(), self.port())
    }

    /// The API's HTTPS URL without the port, for a client pinning `<domain>` to
    /// `127.0.0.1:<port>`: what it records then names no machine-specific port.
    pub fn api_url_without_port(&self) -> String {
        format!("https://{API_LABEL}.{}", self.domain())
    }

    /// The same API over plain HTTP on loopback, for a client that cannot be pinned or
    /// given the test CA (Datalayer's Python client).
    pub fn plain_url(&self) -> String {
        format!("http://{}", self.inner.plain)
    }

    /// The runtimes it holds, by `pod_name`.
    pub fn runtimes(&self) -> Vec<String> {
        self.world()
            .runtimes
            .iter()
            .map(|r| r.pod_name.clone())
            .collect()
    }

    /// The labels of what it makes for `scenario`: [`Options::run_id`]'s run, or one of
    /// its own, `datalayer-emulator-<unique>`.
    fn labels(&self, unique: &str, scenario: &str) -> RunLabels {
        RunLabels {
            run_id: (self.inner.options.run_id.clone())
                .unwrap_or_else(|| format!("datalayer-emulator-{unique}")),
            variant: EMULATOR_VARIANT.into(),
            scenario: scenario.to_owned(),
        }
    }

    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        lock(&self.inner.world)
    }

    async fn serve(self, request: HttpRequest) -> Answer {
        if let Some(rest) = request.path.strip_prefix(INGRESS_PREFIX) {
            let (pod, path) = rest.split_once('/').unwrap_or((rest, ""));
            return self.ingress(pod, &format!("/{path}"), &request).await;
        }
        let Some(route) = request.path.strip_prefix("/api/runtimes/v1") else {
            return refused(404, &format!("the emulator has no {}", request.path));
        };
        let bearer = request
            .headers
            .get("authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|token| !token.trim().is_empty());
        if !bearer {
            return refused(401, "missing or empty Authorization: Bearer token");
        }
        let parts: Vec<&str> = route.trim_start_matches('/').split('/').collect();
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let origin = self.origin(&request.host);
        match (request.method.as_str(), parts.as_slice()) {
            ("GET", ["environments"]) => self.environments(),
            ("POST", ["runtimes"]) => self.create(&body, &origin).await,
            ("GET", ["runtimes"]) => {
                let world = self.world();
                let listed: Vec<Value> = world
                    .runtimes
                    .iter()
                    .map(|r| self.describe(r, &origin))
                    .collect();
                Answer::json(
                    200,
                    json!({ "success": true, "message": "", "runtimes": listed }),
                )
            }
            ("GET", ["runtimes", pod]) => {
                let world = self.world();
                match world.runtimes.iter().find(|r| r.pod_name == *pod) {
                    Some(r) => Answer::json(
                        200,
                        json!({ "success": true, "message": "", "runtime": self.describe(r, &origin) }),
                    ),
                    None => refused(404, &format!("no runtime with pod_name {pod}")),
                }
            }
            ("DELETE", ["runtimes", pod]) => self.delete(pod).await,
            _ => refused(
                501,
                &format!(
                    "the datalayer emulator does not implement {} {}",
                    request.method, request.path
                ),
            ),
        }
    }

    /// The scheme and host a client called: an ingress is served on it.
    fn origin(&self, host: &str) -> String {
        let name = host.rsplit_once(':').map_or(host, |(name, _)| name);
        let scheme = if self.inner.site.label(&name.to_ascii_lowercase()).is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{host}")
    }

    fn environments(&self) -> Answer {
        let name = &self.inner.options.environment_name;
        Answer::json(
            200,
            json!({
                "success": true,
                "message": "",
                "environments": [{
                    "name": name,
                    "title": format!("{name} (emulated: the docker variant's build of the {} environment)",
                        self.world().seeded_from.clone().unwrap_or_else(|| "unseeded".into())),
                    "description": "the sandbox-matrix emulator's one environment",
                    "language": "python",
                    "owner": "sandbox-matrix",
                    "visibility": "public",
                    "burning_rate": BURNING_RATE,
                }],
            }),
        )
    }

    fn describe(&self, r: &Runtime, origin: &str) -> Value {
        json!({
            "pod_name": r.pod_name,
            "uid": r.uid,
            "given_name": r.given_name,
            "environment_name": r.environment_name,
            "type": "notebook",
            "ingress": format!("{origin}{INGRESS_PREFIX}{}", r.pod_name),
            "token": r.token,
            "reservation_id": format!("reservation-{}", r.uid),
            "burning_rate": BURNING_RATE,
            "started_at": time(r.started_at),
            "expired_at": time(r.started_at + r.lifetime),
        })
    }

    async fn create(&self, body: &Value, origin: &str) -> Answer {
        if let Some(message) = self.world().refuse_create.take() {
            return Answer::json(200, json!({ "success": false, "message": message }));
        }
        let environment = body["environment_name"]
            .as_str()
            .or_else(|| body["environment"]["name"].as_str())
            .unwrap_or_default()
            .to_owned();
        let given_name = body["given_name"].as_str().unwrap_or_default().to_owned();
        let credits = body["credits_limit"].as_f64();
        let implemented = [
            "type",
            "environment_name",
            "environment",
            "given_name",
            "credits_limit",
        ];
        if let Some(field) = set_field_outside(body, &implemented) {
            return refused(
                501,
                &format!(
                    "the datalayer emulator does not implement the runtime field `{field}`; it refuses it rather than drop it"
                ),
            );
        }
        match body["type"].as_str() {
            None => return refused(400, "`type` is required (such as \"notebook\")"),
            Some("notebook") => {}
            Some(other) => {
                return refused(
                    501,
                    &format!("the datalayer emulator runs notebook runtimes only, not `{other}`"),
                );
            }
        }
        if environment != self.inner.options.environment_name {
            return Answer::json(
                200,
                json!({ "success": false,
                        "message": format!("Runtime creation failed: no environment `{environment}`") }),
            );
        }
        if !credits.is_some_and(|c| c > 0.0) {
            return Answer::json(
                200,
                json!({ "success": false,
                        "message": "Runtime creation failed: credits_limit must be a positive number" }),
            );
        }
        let Some(artifact) = self.world().built.clone() else {
            return Answer::json(
                200,
                json!({ "success": false,
                        "message": "Runtime creation failed: the environment is not built yet" }),
            );
        };
        let n = {
            let mut world = self.world();
            world.counter += 1;
            world.counter
        };
        let pod_name = format!("jupyter-{environment}-{n:05}");
        let labels = self.labels(&format!("{}-{n}", self.port()), &given_name);
        self.inner.site.made_under(&labels);
        let inner = match self.inner.site.backend().launch(&artifact, &labels).await {
            Ok((inner, _)) => inner,
            Err(e) => return refused(500, &format!("starting the runtime: {e}")),
        };
        // The platform ends a runtime once its credits are spent (credits per second).
        // A month at most: what a user could ask more of is not waited for here.
        let lifetime = Duration::try_from_secs_f64(credits.unwrap_or_default() / BURNING_RATE)
            .unwrap_or(Duration::MAX)
            .min(Duration::from_secs(30 * 24 * 3600))
            .min(self.inner.options.kill_after.unwrap_or(Duration::MAX));
        let runtime = Runtime {
            lifetime,
            uid: format!("01JDEMU{n:019}"),
            pod_name,
            given_name,
            environment_name: environment,
            // Fake: an emulator token, redacted by clients like a real one.
            token: format!("sm-fake-runtime-token-{n:05}"),
            inner,
            started_at: SystemTime::now(),
            warming: self.inner.options.faults.warm_up,
        };
        let described = self.describe(&runtime, origin);
        let pod = runtime.pod_name.clone();
        self.world().runtimes.push(runtime);
        let emulator = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(lifetime).await;
            // Already deleted: nothing to end.
            let _ = emulator.delete(&pod).await;
        });
        Answer::json(
            201,
            json!({ "success": true, "message": "Runtime created.", "runtime": described }),
        )
    }

    async fn delete(&self, pod: &str) -> Answer {
        let removed = {
            let mut world = self.world();
            let at = world.runtimes.iter().position(|r| r.pod_name == pod);
            at.map(|i| world.runtimes.remove(i))
        };
        let Some(runtime) = removed else {
            return refused(404, &format!("no runtime with pod_name {pod}"));
        };
        let docker = self.inner.site.backend();
        let grace = Duration::from_secs(10);
        let stopping = std::time::Instant::now();
        let stopped = docker.shutdown(&runtime.inner, grace).await;
        let took = stopping.elapsed();
        // A sandbox that outlived its grace is the platform's to explain: what its server
        // said last goes to the emulator's log.
        if took >= grace || stopped.is_err() {
            let lines = docker.last_log_lines(&runtime.inner.0).await;
            eprintln!(
                "emulate datalayer: runtime {pod} took {:.2} s to stop ({}); its last {} log lines:\n  {}",
                took.as_secs_f64(),
                match &stopped {
                    Ok(report) => format!(
                        "{}, {}",
                        serde_json::to_value(report.ending)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default(),
                        report
                            .exit_code
                            .map_or("no exit code".to_owned(), |c| format!("exit code {c}"))
                    ),
                    Err(e) => e.to_string(),
                },
                lines.len(),
                lines.join("\n  ")
            );
        }
        let container = Resource {
            kind: "container".into(),
            id: runtime.inner.0.clone(),
        };
        if let Err(e) = docker.delete_resource(&container).await {
            return refused(500, &format!("removing the runtime: {e}"));
        }
        Answer::json(
            200,
            json!({ "success": true, "message": "Runtime deleted." }),
        )
    }

    /// Admits a request to `pod`'s ingress by the runtime's token; the docker sandbox
    /// behind it, or what refuses the request.
    fn admit(
        &self,
        pod: &str,
        headers: &HashMap<String, String>,
        query: &str,
    ) -> Result<SandboxId, Answer> {
        let mut world = self.world();
        let Some(runtime) = world.runtimes.iter_mut().find(|r| r.pod_name == pod) else {
            return Err(Answer::error(
                502,
                &format!("no runtime behind ingress {pod}"),
            ));
        };
        if runtime.warming > 0 {
            runtime.warming -= 1;
            return Err(Answer::error(503, "the ingress is warming up"));
        }
        let sent = headers
            .get("authorization")
            .and_then(|v| {
                v.strip_prefix("token ")
                    .or_else(|| v.strip_prefix("Bearer "))
            })
            .map(str::to_owned)
            .or_else(|| query_param(query, "token"));
        if sent.as_deref() != Some(runtime.token.as_str()) {
            return Err(Answer::json(
                403,
                json!({ "message": "Forbidden", "reason": null }),
            ));
        }
        Ok(runtime.inner.clone())
    }

    async fn ingress(&self, pod: &str, path: &str, r: &HttpRequest) -> Answer {
        let inner = match self.admit(pod, &r.headers, &r.query) {
            Ok(inner) => inner,
            Err(answer) => return answer,
        };
        let forwarded = HttpRequest {
            method: r.method.clone(),
            host: r.host.clone(),
            path: path.to_owned(),
            query: without_token(&r.query),
            headers: r.headers.clone(),
            body: r.body.clone(),
        };
        crate::jupyter::forward_to_jupyter(
            self.inner.site.backend(),
            &self.inner.http,
            &inner,
            path,
            &forwarded,
        )
        .await
    }

    /// Admits a WebSocket upgrade to a kernel's channels at a runtime's ingress: the
    /// docker sandbox and the path of those channels there.
    fn admit_socket(
        &self,
        request: &crate::jupyter::SocketRequest<'_>,
    ) -> Result<(SandboxId, String), (u16, String)> {
        let query = request.query;
        let Some(rest) = request.path.strip_prefix(INGRESS_PREFIX) else {
            return Err((404, "no WebSocket outside an ingress".to_owned()));
        };
        let (pod, path) = rest.split_once('/').unwrap_or((rest, ""));
        let parts: Vec<&str> = path.split('/').collect();
        if !matches!(parts.as_slice(), ["api", "kernels", _, "channels"]) {
            return Err((404, format!("the emulator has no WebSocket at /{path}")));
        }
        let inner = self
            .admit(pod, &request.headers, query)
            .map_err(|a| (a.status, String::from_utf8_lossy(&a.body).into_owned()))?;
        let query = without_token(query);
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        Ok((inner, format!("/{path}{query}")))
    }
}

/// The pairs of a raw query, percent-decoded.
fn query_pairs(query: &str) -> Vec<(String, String)> {
    reqwest::Url::parse(&format!("http://query.invalid/?{query}"))
        .map(|url| url.query_pairs().into_owned().collect())
        .unwrap_or_default()
}

/// The value of `name` in a raw query, percent-decoded.
fn query_param(query: &str, name: &str) -> Option<String> {
    query_pairs(query)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// `query` without its `token` parameter: the server behind wants its own.
fn without_token(query: &str) -> String {
    let mut url = match reqwest::Url::parse("http://query.invalid/") {
        Ok(url) => url,
        Err(_) => return String::new(),
    };
    let kept: Vec<(String, String)> = query_pairs(query)
        .into_iter()
        .filter(|(k, _)| k != "token")
        .collect();
    if !kept.is_empty() {
        url.query_pairs_mut().extend_pairs(kept);
    }
    url.query().unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_token_is_taken_out_of_a_forwarded_query() {
        assert_eq!(
            without_token("session_id=a-1&token=sm-fake&x=%2F"),
            "session_id=a-1&x=%2F"
        );
        assert_eq!(
            query_param("a=1&token=sm%2Dfake", "token").as_deref(),
            Some("sm-fake")
        );
        assert_eq!(without_token(""), "");
    }
}
