//! The controller's HTTP endpoints: `/healthz` (the process is alive) and `/readyz` (its cluster state has
//! synced; a standby replica with a warm cache is ready too, so a rollout does not wait on the election) on
//! one address, `/metrics` (Prometheus text) on another.

use super::metrics::Metrics;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use kerf_webhooks::ReadyFlag;
use std::net::SocketAddr;
use std::sync::Arc;

/// `/healthz` and `/readyz`.
pub fn health_router(ready: ReadyFlag) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(ready)
}

/// `/metrics`.
pub fn metrics_router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_text))
        .with_state(metrics)
}

/// Serves `router` on `address` until the task is dropped.
pub async fn serve(address: SocketAddr, router: Router) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    tracing::info!(%address, "serving");
    axum::serve(listener, router).await
}

async fn readyz(State(ready): State<ReadyFlag>) -> (StatusCode, &'static str) {
    if ready.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "cluster state not synced")
    }
}

async fn metrics_text(State(metrics): State<Arc<Metrics>>) -> Response {
    kerf_webhooks::openmetrics_response(metrics.encode())
}
