//! The rustls configuration the webhook server listens with.

use std::sync::Arc;

use rustls::{
    crypto::aws_lc_rs,
    server::ResolvesServerCert,
    version::{TLS12, TLS13},
    ServerConfig,
};

use crate::CertError;

/// TLS 1.3 and 1.2 with the aws-lc-rs provider, no client authentication (the apiserver does
/// not present one to webhooks by default), and ALPN for both HTTP/2 and HTTP/1.1.
///
/// The provider is chosen here rather than taken from the process default so the server does
/// not depend on `main` having installed one first.
pub fn server_config(resolver: Arc<dyn ResolvesServerCert>) -> Result<ServerConfig, CertError> {
    let mut config = ServerConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
        .with_protocol_versions(&[&TLS13, &TLS12])
        .map_err(CertError::Config)?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
