//! The controller's apiserver client: kube-rs's request stack (base URI, auth, extra headers, the server-aware
//! retry, the call bound) over a connection that speaks HTTP/2 when the apiserver offers it, as client-go does.
//! kube-rs's own builder offers HTTP/1.1 only, which opens a TLS connection per request in flight: a burst of
//! NodeClaim creates then pays a handshake each, or waits in a small queue. Over HTTP/2 every call, watches
//! included, shares one multiplexed connection, and a batch's creates can all go at once.

use super::throttle::Throttle;
use ::kube::client::retry::RetryPolicy;
use ::kube::client::{ClientBuilder, ConfigExt};
use ::kube::{Client, Config};
use hyper_rustls::{FixedServerNameResolver, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls_pki_types::ServerName;
use std::time::Duration;
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

/// How long the connection may be silent before it is pinged, and how long the ping's answer may take
/// (client-go's `ReadIdleTimeout` and `PingTimeout`).
const HTTP2_PING_INTERVAL: Duration = Duration::from_secs(30);
const HTTP2_PING_TIMEOUT: Duration = Duration::from_secs(15);

/// Why the client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Kube(#[from] ::kube::Error),
    #[error("tls-server-name {0:?} is not a valid server name")]
    ServerName(String),
}

/// A client for `config`, every request under `throttle`. A configuration with a proxy goes through kube-rs's
/// own stack, which tunnels through it (over HTTP/1.1).
pub fn build(config: Config, throttle: &Throttle) -> Result<Client, ClientError> {
    if config.proxy_url.is_some() {
        return Ok(ClientBuilder::try_from(config)?
            .with_layer(throttle)
            .build());
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    // HTTP/2 writes a request's HEADERS and DATA frames apart: with Nagle's algorithm the DATA frame waits for the
    // server's delayed ACK of the HEADERS, about 40 ms per write.
    http.set_nodelay(true);
    let builder = HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    let builder = match &config.tls_server_name {
        Some(name) => {
            let name = ServerName::try_from(name.clone())
                .map_err(|_| ClientError::ServerName(name.clone()))?;
            builder.with_server_name_resolver(FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    // Both versions: ALPN offers h2 first and falls back to HTTP/1.1 where the server has no h2.
    let https = builder.enable_all_versions().wrap_connector(http);
    // One connection carries every watch too: pinged like client-go's (30 s idle, 15 s for the answer), so a
    // connection that died silently is found and every stream on it restarts.
    let connection = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(HTTP2_PING_INTERVAL)
        .http2_keep_alive_timeout(HTTP2_PING_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .build(https);
    let service = ServiceBuilder::new()
        .layer(throttle.clone())
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(connection);
    Ok(Client::new(service, config.default_namespace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::{extract::Request, routing::get, Router};
    use kerf_certs::{load_certified_key, server_config, SelfSigned, DEFAULT_VALIDITY};
    use kerf_webhooks::{ConnectionLimits, Server};
    use rustls::sign::SingleCertAndKey;
    use rustls_pki_types::{pem::PemObject, CertificateDer};
    use std::sync::Arc;
    use std::time::SystemTime;

    /// An HTTPS server for `localhost` only that answers each request with the HTTP version it came in, and a
    /// client configuration that trusts its CA.
    async fn version_server() -> (Server, Config, tempfile::TempDir) {
        let certs = SelfSigned::generate(["localhost"], SystemTime::now(), DEFAULT_VALIDITY)
            .expect("certificates");
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = certs.write_files(dir.path()).expect("write");
        let key = load_certified_key(&paths.cert, &paths.key).expect("key");
        let tls = Arc::new(server_config(Arc::new(SingleCertAndKey::from(key))).expect("tls"));
        let router = Router::new().route(
            "/version",
            get(|request: Request| async move { format!("{:?}", request.version()) }),
        );
        let addr = "127.0.0.1:0".parse().expect("address");
        let server = Server::start(router, addr, tls, ConnectionLimits::default(), async {
            std::future::pending::<()>().await
        })
        .await
        .expect("server");
        let url = format!("https://127.0.0.1:{}", server.local_addr().port());
        let mut config = Config::new(url.parse().expect("url"));
        let ca = CertificateDer::from_pem_slice(certs.ca_cert_pem.as_bytes()).expect("ca");
        config.root_cert = Some(vec![ca.to_vec()]);
        (server, config, dir)
    }

    async fn version(client: &Client) -> String {
        let request = http::Request::get("/version")
            .body(Vec::new())
            .expect("request");
        client.request_text(request).await.expect("answer")
    }

    #[tokio::test]
    async fn requests_go_over_http2_when_the_server_offers_it() {
        let (_server, mut config, _dir) = version_server().await;
        // The certificate names `localhost`, the URL an address: the configured server name is what is verified.
        config.tls_server_name = Some(String::from("localhost"));
        let client = build(config, &Throttle::new(100, 100)).expect("client");
        let versions = futures::future::join_all((0..8).map(|_| version(&client))).await;
        assert!(versions.iter().all(|v| v == "HTTP/2.0"), "{versions:?}");
    }

    #[tokio::test]
    async fn a_certificate_for_another_name_is_refused() {
        let (_server, config, _dir) = version_server().await;
        let client = build(config, &Throttle::new(100, 100)).expect("client");
        let request = http::Request::get("/version")
            .body(Vec::new())
            .expect("request");
        assert!(client.request_text(request).await.is_err());
    }

    #[test]
    fn an_invalid_server_name_is_named() {
        let mut config = Config::new("https://127.0.0.1:1".parse().expect("url"));
        config.tls_server_name = Some(String::from("not a name!"));
        let Err(error) = build(config, &Throttle::new(1, 1)) else {
            panic!("an invalid server name was taken");
        };
        assert!(error.to_string().contains("not a name!"), "{error}");
    }
}
