//! The real server over HTTPS, with a kerf-certs self-signed certificate and reqwest.

mod common;

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use common::{review, webhooks, widget, GROUP};
use kerf_certs::{server_config, ReloadingCertResolver, SelfSigned, DEFAULT_VALIDITY};
use kerf_webhooks::{ConnectionLimits, ServeError, Server};
use reqwest::{Certificate, Client, StatusCode};
use serde_json::{json, Value};
use tokio::sync::oneshot;

struct Running {
    server: Server,
    stop: oneshot::Sender<()>,
    client: Client,
    base: String,
    _dir: tempfile::TempDir,
}

/// A TLS configuration serving a fresh certificate for `localhost` and `127.0.0.1`, the
/// certificates (for their CA) and the directory holding the files.
fn tls() -> (Arc<rustls::ServerConfig>, SelfSigned, tempfile::TempDir) {
    let certs = SelfSigned::generate(
        ["localhost", "127.0.0.1"],
        SystemTime::now(),
        DEFAULT_VALIDITY,
    )
    .expect("generate");
    let dir = tempfile::tempdir().expect("tempdir");
    let paths = certs.write_files(dir.path()).expect("write");
    let (resolver, _task) =
        ReloadingCertResolver::watch(&paths.cert, &paths.key, Duration::from_secs(60))
            .expect("watch");
    let config = Arc::new(server_config(resolver).expect("tls"));
    (config, certs, dir)
}

/// Starts the Widget webhooks on 127.0.0.1:0 and a client that trusts only the generated CA.
async fn start() -> Running {
    let (tls, certs, dir) = tls();
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async {
        let _ = stopped.await;
    };
    let addr = "127.0.0.1:0".parse().expect("addr");
    let server = Server::start(
        webhooks().into_router(),
        addr,
        tls,
        ConnectionLimits::default(),
        shutdown,
    )
    .await
    .expect("start");
    let ca = Certificate::from_pem(certs.ca_cert_pem.as_bytes()).expect("ca");
    let client = Client::builder()
        .tls_certs_only([ca])
        .build()
        .expect("client");
    let base = format!("https://127.0.0.1:{}", server.local_addr().port());
    Running {
        server,
        stop,
        client,
        base,
        _dir: dir,
    }
}

impl Running {
    async fn post(&self, path: &str, body: impl Into<reqwest::Body>) -> (StatusCode, String) {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("send");
        let status = response.status();
        (status, response.text().await.expect("text"))
    }

    async fn admit(&self, path: &str, review: &Value) -> Value {
        let (status, text) = self.post(path, review.to_string()).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let mut answer: Value = serde_json::from_str(&text).expect("json");
        answer["response"].take()
    }
}

#[tokio::test]
async fn admission_over_https() {
    let running = start().await;

    let health = running
        .client
        .get(format!("{}/healthz", running.base))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status(), StatusCode::OK);

    let mutated = running
        .admit("/mutate", &review(GROUP, "Widget", widget(json!({}))))
        .await;
    assert_eq!(mutated["allowed"], true);
    assert_eq!(mutated["patchType"], "JSONPatch");

    let denied = running
        .admit(
            "/validate",
            &review(GROUP, "Widget", widget(json!({"size": "huge"}))),
        )
        .await;
    assert_eq!(denied["allowed"], false);
    assert_eq!(denied["status"]["code"], 422);
    assert_eq!(
        denied["status"]["details"]["causes"][0]["field"],
        "spec.size"
    );

    let (status, text) = running.post("/validate", "{").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");

    let mut huge = review(GROUP, "Widget", widget(json!({})));
    huge["request"]["object"]["spec"]["blob"] = json!("x".repeat(4 * 1024 * 1024));
    let (status, text) = running.post("/mutate", huge.to_string()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{text}");

    let Running { server, stop, .. } = running;
    stop.send(()).expect("server still running");
    server.wait().await.expect("clean shutdown");
}

#[tokio::test]
async fn a_taken_port_is_a_bind_error() {
    let running = start().await;
    let (tls, _certs, _dir) = tls();
    let taken = running.server.local_addr();
    let error = Server::start(
        webhooks().into_router(),
        taken,
        tls,
        ConnectionLimits::default(),
        std::future::pending(),
    )
    .await
    .err();
    assert!(
        matches!(error, Some(ServeError::Bind { addr, .. }) if addr == taken),
        "{error:?}"
    );
}
