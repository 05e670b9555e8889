//! Each limit held by the real HTTPS server on 127.0.0.1: slow and idle connections are cut
//! off, the connection cap leaves `/healthz` reachable, the in-flight budget sheds with 429 +
//! `Retry-After`, request-borne labels stay bounded, and the first response on a fresh TLS
//! connection is not held back by Nagle's algorithm.

mod common;

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use common::{review, webhooks, widget, GROUP};
use kerf_certs::{server_config, ReloadingCertResolver, SelfSigned, DEFAULT_VALIDITY};
use kerf_webhooks::{AdmissionHook, ConnectionLimits, Denial, ReviewRequest, Server, Webhooks};
use reqwest::{Certificate, Client, StatusCode};
use rustls::{crypto::aws_lc_rs, pki_types::ServerName, ClientConfig, RootCertStore};
use serde_json::{json, Value};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tokio_rustls::{client::TlsStream, TlsConnector};

/// Short limits, so each test sees them fire within a second or two.
const LIMITS: ConnectionLimits = ConnectionLimits {
    max_connections: 16,
    header_timeout: Duration::from_millis(500),
    idle_timeout: Duration::from_millis(800),
};

struct Running {
    server: Server,
    ca: SelfSigned,
    _dir: tempfile::TempDir,
}

async fn start(webhooks: Webhooks, limits: ConnectionLimits) -> Running {
    let ca =
        SelfSigned::generate(["127.0.0.1"], SystemTime::now(), DEFAULT_VALIDITY).expect("generate");
    let dir = tempfile::tempdir().expect("tempdir");
    let paths = ca.write_files(dir.path()).expect("write");
    let (resolver, _task) =
        ReloadingCertResolver::watch(&paths.cert, &paths.key, Duration::from_secs(60))
            .expect("watch");
    let tls = Arc::new(server_config(resolver).expect("tls"));
    let addr = "127.0.0.1:0".parse().expect("addr");
    let server = Server::start(
        webhooks.into_router(),
        addr,
        tls,
        limits,
        std::future::pending(),
    )
    .await
    .expect("start");
    Running {
        server,
        ca,
        _dir: dir,
    }
}

impl Running {
    fn base(&self) -> String {
        format!("https://127.0.0.1:{}", self.server.local_addr().port())
    }

    /// A client with its own connection pool: its first request opens a fresh connection.
    fn client(&self) -> Client {
        let ca = Certificate::from_pem(self.ca.ca_cert_pem.as_bytes()).expect("ca");
        Client::builder()
            .tls_certs_only([ca])
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client")
    }

    /// A raw TLS connection (HTTP/1.1 by ALPN), TCP_NODELAY on the client side too.
    async fn tls(&self) -> TlsStream<TcpStream> {
        let mut roots = RootCertStore::empty();
        roots
            .add(rustls::pki_types::CertificateDer::from(rustls_pem(
                &self.ca.ca_cert_pem,
            )))
            .expect("root");
        let mut config =
            ClientConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let tcp = TcpStream::connect(self.server.local_addr())
            .await
            .expect("connect");
        tcp.set_nodelay(true).expect("nodelay");
        let name = ServerName::try_from("127.0.0.1").expect("name");
        TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .expect("handshake")
    }

    async fn healthz(&self) -> StatusCode {
        self.client()
            .get(format!("{}/healthz", self.base()))
            .send()
            .await
            .expect("healthz")
            .status()
    }
}

fn rustls_pem(pem: &str) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("pem")
        .to_vec()
}

/// How long until the server ends `stream` (EOF or reset), failing after `limit`.
async fn closed_within(stream: &mut TlsStream<TcpStream>, limit: Duration) -> Duration {
    let started = Instant::now();
    let mut buffer = [0u8; 4096];
    loop {
        match tokio::time::timeout_at((started + limit).into(), stream.read(&mut buffer)).await {
            Err(_) => panic!("the connection was still open after {limit:?}"),
            Ok(Ok(0) | Err(_)) => return started.elapsed(),
            // A response (e.g. 408 or 400) before the close is fine.
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test]
async fn a_partial_header_is_cut_off_at_the_header_timeout() {
    let running = start(webhooks(), LIMITS).await;
    let mut slow = running.tls().await;
    slow.write_all(b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        .await
        .expect("write");
    slow.flush().await.expect("flush");
    let after = closed_within(&mut slow, Duration::from_secs(3)).await;
    assert!(
        after >= Duration::from_millis(300),
        "closed too early: {after:?}"
    );
}

#[tokio::test]
async fn a_connection_that_sends_nothing_after_tls_is_closed() {
    let running = start(webhooks(), LIMITS).await;
    let mut idle = running.tls().await;
    closed_within(&mut idle, Duration::from_secs(3)).await;
}

#[tokio::test]
async fn a_kept_alive_connection_is_closed_after_the_idle_timeout() {
    let running = start(webhooks(), LIMITS).await;
    let mut connection = running.tls().await;
    connection
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .expect("write");
    let mut buffer = [0u8; 1024];
    let read = connection.read(&mut buffer).await.expect("read");
    assert!(
        buffer[..read].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        &buffer[..read]
    );
    let after = closed_within(&mut connection, Duration::from_secs(4)).await;
    assert!(
        after >= Duration::from_millis(600),
        "closed too early: {after:?}"
    );
}

#[tokio::test]
async fn healthz_answers_within_a_second_while_idle_connections_exceed_the_cap() {
    let running = start(webhooks(), LIMITS).await;
    let mut idle = Vec::new();
    for _ in 0..3 * LIMITS.max_connections {
        idle.push(running.tls().await);
    }
    for _ in 0..5 {
        let started = Instant::now();
        assert_eq!(running.healthz().await, StatusCode::OK);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }
    // The cap held: the oldest idle connections were closed to make room.
    let mut open = 0;
    for stream in &mut idle {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_millis(20), stream.read(&mut byte));
        if read.await.is_err() {
            open += 1;
        }
    }
    assert!(
        open <= LIMITS.max_connections,
        "{open} idle connections still open"
    );
}

/// Validates slowly (on a blocking thread), so requests pile up on the budget.
struct Slow;

impl AdmissionHook for Slow {
    fn validate(&self, _: &ReviewRequest) -> Result<Vec<String>, Denial> {
        std::thread::sleep(Duration::from_millis(300));
        Ok(Vec::new())
    }
}

#[tokio::test]
async fn concurrent_bodies_over_the_budget_are_shed_with_retry_after() {
    let webhooks = webhooks()
        .hook(GROUP, "Slow", Slow)
        .in_flight_bytes(4 * 1024 * 1024);
    let running = start(webhooks, ConnectionLimits::default()).await;
    let mut big = review(GROUP, "Slow", widget(json!({})));
    big["request"]["object"]["spec"]["blob"] = json!("x".repeat(3 * 1024 * 1024 - 1024));
    let big = big.to_string();
    let uid = "705ab4f5-6393-11e8-b7cc-42010a800002";
    let requests: Vec<_> = (0..10)
        .map(|_| {
            let client = running.client();
            let url = format!("{}/validate", running.base());
            let body = big.clone();
            tokio::spawn(async move {
                let response = client.post(url).body(body).send().await.expect("send");
                let status = response.status();
                let retry_after = response.headers().get("retry-after").cloned();
                let text = response.text().await.expect("text");
                (status, retry_after, text)
            })
        })
        .collect();
    let (mut answered, mut shed) = (0, 0);
    for request in requests {
        let (status, retry_after, text) = request.await.expect("task");
        match status {
            StatusCode::OK => {
                let answer: Value = serde_json::from_str(&text).expect("a review");
                assert_eq!(answer["response"]["uid"], uid);
                answered += 1;
            }
            StatusCode::TOO_MANY_REQUESTS => {
                assert_eq!(retry_after.as_ref().map(|v| v.as_bytes()), Some(&b"1"[..]));
                shed += 1;
            }
            other => panic!("{other}: {text}"),
        }
    }
    assert!(
        answered >= 1 && shed >= 1,
        "answered {answered}, shed {shed}"
    );
    assert_eq!(running.healthz().await, StatusCode::OK);
}

#[tokio::test]
async fn a_thousand_kinds_do_not_grow_the_metric_series() {
    let running = start(webhooks(), ConnectionLimits::default()).await;
    let client = running.client();
    for n in 0..1000 {
        let body = review("example.org", &format!("Kind{n}"), widget(json!({}))).to_string();
        let status = client
            .post(format!("{}/validate", running.base()))
            .body(body)
            .send()
            .await
            .expect("send")
            .status();
        assert_eq!(status, StatusCode::OK);
    }
    let text = client
        .get(format!("{}/metrics", running.base()))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let series = text
        .lines()
        .filter(|l| l.starts_with("kerf_webhook_requests_total{"))
        .count();
    assert_eq!(series, 1, "{text}");
    assert!(text.contains(
        r#"kerf_webhook_requests_total{path="/validate",kind="other",operation="CREATE",result="allowed"} 1000"#
    ));
}

#[tokio::test]
async fn the_first_response_on_a_fresh_tls_connection_is_not_delayed() {
    let running = start(webhooks(), ConnectionLimits::default()).await;
    let body = review(GROUP, "Widget", widget(json!({}))).to_string();
    let request = format!(
        "POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut latencies = Vec::new();
    for _ in 0..20 {
        let mut connection = running.tls().await;
        let started = Instant::now();
        // Header and body in two writes, as clients often do: with Nagle on the server's side,
        // its response waited for the ACK the client delays.
        let (head, rest) = request.split_at(request.find("\r\n\r\n").expect("head") + 4);
        connection.write_all(head.as_bytes()).await.expect("write");
        connection.flush().await.expect("flush");
        connection.write_all(rest.as_bytes()).await.expect("write");
        connection.flush().await.expect("flush");
        let mut buffer = vec![0u8; 8192];
        let read = connection.read(&mut buffer).await.expect("read");
        assert!(buffer[..read].starts_with(b"HTTP/1.1 200"));
        latencies.push(started.elapsed());
    }
    latencies.sort_unstable();
    let median = latencies[latencies.len() / 2];
    assert!(
        median < Duration::from_millis(30),
        "median {median:?}: {latencies:?}"
    );
}
