//! A generic Kubernetes admission webhook server: AdmissionReview v1 over HTTPS.
//!
//! The application implements [`AdmissionHook`] per kind as plain functions of the request and
//! registers them on [`Webhooks`]; this crate does the rest: routing by `request.kind`, JSON
//! Patch from "object before / object after", denials with causes, a body limit, a budget of
//! bytes in flight, a deadline per request, panic isolation, connection limits (a cap, header
//! and idle timeouts), health and readiness, and Prometheus metrics. It knows nothing of
//! kerf's kinds.
//!
//! ```no_run
//! # async fn run(tls: std::sync::Arc<rustls::ServerConfig>) -> Result<(), kerf_webhooks::ServeError> {
//! use kerf_webhooks::{AdmissionHook, Denial, ReviewRequest, Webhooks};
//!
//! struct Widgets;
//! impl AdmissionHook for Widgets {
//!     fn validate(&self, _: &ReviewRequest) -> Result<Vec<String>, Denial> {
//!         Err(Denial::invalid("widgets are not allowed"))
//!     }
//! }
//!
//! let router = Webhooks::new().hook("example.com", "Widget", Widgets).into_router();
//! let addr = std::net::SocketAddr::from(([0, 0, 0, 0], 8443));
//! let limits = kerf_webhooks::ConnectionLimits::default();
//! kerf_webhooks::serve(router, addr, tls, limits, std::future::pending()).await
//! # }
//! ```

mod admit;
mod budget;
mod connections;
mod hook;
mod metrics;
mod ready;
mod review;
mod router;
mod serve;

pub use admit::{BODY_LIMIT, VALUE_LIMIT};
pub use budget::DEFAULT_IN_FLIGHT_BYTES;
pub use connections::ConnectionLimits;
pub use hook::{AdmissionHook, Denial, Mutated};
pub use kube_core::{admission::Operation, response::StatusCause, GroupVersionKind};
pub use ready::ReadyFlag;
pub use review::ReviewRequest;
pub use router::{metrics_response, openmetrics_response, Webhooks, DEFAULT_TIMEOUT};
pub use serve::{serve, ServeError, Server};
