//! Registration of hooks and the axum router that serves them.

use std::{sync::Arc, time::Duration};

use axum::{
    body::Body,
    extract::State,
    http::{header, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
    Router,
};
use prometheus_client::registry::Registry;
use tokio::sync::Semaphore;

use crate::{
    admit::{Admission, Endpoint, Hooks},
    budget::{Budget, DEFAULT_IN_FLIGHT_BYTES},
    metrics::Metrics,
    AdmissionHook, ReadyFlag,
};

/// How long a request may take, body included, unless [`Webhooks::timeout`] says otherwise.
/// The apiserver's default webhook timeout is 10 s too.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The admission server's configuration: which hook handles which kind, and its limits.
///
/// `POST /mutate` and `POST /validate` dispatch on the review's `request.kind` (group and
/// kind; any version). A kind without a hook is allowed unchanged, so one webhook
/// configuration can list more kinds than the application handles yet.
pub struct Webhooks {
    hooks: Hooks,
    timeout: Duration,
    in_flight_bytes: usize,
    hook_threads: usize,
    registry: Registry,
    ready: ReadyFlag,
}

impl Default for Webhooks {
    fn default() -> Self {
        Self {
            hooks: Hooks::new(),
            timeout: DEFAULT_TIMEOUT,
            in_flight_bytes: DEFAULT_IN_FLIGHT_BYTES,
            hook_threads: default_hook_threads(),
            registry: Registry::default(),
            ready: ReadyFlag::new(true),
        }
    }
}

impl Webhooks {
    pub fn new() -> Self {
        Self::default()
    }

    /// Handles `kind` of API `group` (`""` for the core group) with `hook`; a second hook for
    /// the same kind replaces the first.
    #[must_use]
    pub fn hook(
        mut self,
        group: impl Into<String>,
        kind: impl Into<String>,
        hook: impl AdmissionHook,
    ) -> Self {
        self.hooks
            .insert((group.into(), kind.into()), Arc::new(hook));
        self
    }

    /// The deadline for one admission request, from the first body byte to the answer.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The memory admission requests may hold at once, in bytes: bodies being read and reviews
    /// being decided. A request that finds no room within a second gets 429 with `Retry-After`
    /// before its body is read.
    #[must_use]
    pub fn in_flight_bytes(mut self, bytes: usize) -> Self {
        self.in_flight_bytes = bytes;
        self
    }

    /// How many hooks may run at once on blocking threads (every hook but inline ones on small
    /// reviews); other requests wait for a thread within their deadline, without holding one.
    /// Hooks are CPU work: more threads than cores only make every request, and `/healthz`,
    /// slower. Twice the available cores unless set (at least one).
    #[must_use]
    pub fn hook_threads(mut self, threads: usize) -> Self {
        self.hook_threads = threads.max(1);
        self
    }

    /// The registry `/metrics` serves. The webhook's metrics are added under the
    /// `kerf_webhook` prefix; register the application's own metrics before passing it.
    #[must_use]
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = registry;
        self
    }

    /// The flag `/readyz` reports; ready unless one is given.
    #[must_use]
    pub fn readiness(mut self, ready: ReadyFlag) -> Self {
        self.ready = ready;
        self
    }

    /// `POST /mutate`, `POST /validate`, `GET /healthz`, `GET /readyz` and `GET /metrics`.
    pub fn into_router(self) -> Router {
        let mut registry = self.registry;
        let kinds = self.hooks.keys().map(|(_, kind)| kind.clone()).collect();
        let metrics = Metrics::register(&mut registry, kinds);
        let state = Arc::new(AppState {
            admission: Admission {
                hooks: self.hooks,
                timeout: self.timeout,
                budget: Budget::new(self.in_flight_bytes),
                hook_threads: Arc::new(Semaphore::new(self.hook_threads)),
                metrics,
            },
            registry,
            ready: self.ready,
        });
        Router::new()
            .route("/mutate", post(mutate))
            .route("/validate", post(validate))
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics_text))
            .with_state(state)
    }
}

/// Twice the cores the process may use: a hook waiting on nothing but the CPU gains nothing
/// from more, and a core's worth stays for the runtime's own tasks.
fn default_hook_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |cores| cores.get() * 2)
}

struct AppState {
    admission: Admission,
    registry: Registry,
    ready: ReadyFlag,
}

async fn mutate(State(state): State<Arc<AppState>>, body: Body) -> Response {
    state.admission.admit(Endpoint::Mutate, body).await
}

async fn validate(State(state): State<Arc<AppState>>, body: Body) -> Response {
    state.admission.admit(Endpoint::Validate, body).await
}

/// Alive as long as it answers; readiness is where the application's state shows.
async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<Arc<AppState>>) -> (StatusCode, &'static str) {
    if state.ready.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

async fn metrics_text(State(state): State<Arc<AppState>>) -> Response {
    metrics_response(&state.registry)
}

/// `registry` as an OpenMetrics text response.
pub fn metrics_response(registry: &Registry) -> Response {
    let mut text = String::new();
    openmetrics_response(
        prometheus_client::encoding::text::encode(&mut text, registry).map(|()| text),
    )
}

/// Encoded OpenMetrics text as a `/metrics` response, or a 500 naming the encoding error (the controller's
/// `/metrics`, which appends summaries to its registry, answers the same way).
pub fn openmetrics_response(encoded: Result<String, std::fmt::Error>) -> Response {
    match encoded {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode metrics: {error}"),
        )
            .into_response(),
    }
}
