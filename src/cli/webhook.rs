//! `kerf webhook`: the admission webhook server for NodePools and EC2NodeClasses.

use super::validate::CatalogArgs;
use crate::admission::{ObjectHook, EC2NODECLASS, NODEPOOL};
use crate::catalog::Catalog;
use kerf_certs::ReloadingCertResolver;
use kerf_webhooks::Webhooks;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct WebhookArgs {
    /// Address to serve HTTPS on.
    #[arg(long, env = "KERF_WEBHOOK_BIND", default_value = "0.0.0.0:8443")]
    pub bind: SocketAddr,
    /// PEM certificate chain; re-read when it changes (cert-manager rotation).
    #[arg(long, env = "KERF_TLS_CERT_FILE")]
    pub tls_cert_file: PathBuf,
    /// PEM private key of the certificate.
    #[arg(long, env = "KERF_TLS_PRIVATE_KEY_FILE")]
    pub tls_private_key_file: PathBuf,
    /// How often the certificate files are checked for changes.
    #[arg(long, env = "KERF_TLS_RELOAD_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub tls_reload_interval: Duration,
    #[command(flatten)]
    pub catalog: CatalogArgs,
    /// Deadline for one admission request.
    #[arg(long, env = "KERF_WEBHOOK_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
}

/// The router with kerf's kinds registered, as `kerf webhook` serves it (tests and benchmarks use it too).
/// With a catalog, NodePool admission adds the warnings that need one.
pub fn router(request_timeout: Duration, catalog: Option<Arc<Catalog>>) -> axum::Router {
    let nodepools = ObjectHook {
        kind: &NODEPOOL,
        catalog,
    };
    let nodeclasses = ObjectHook {
        kind: &EC2NODECLASS,
        catalog: None,
    };
    Webhooks::new()
        .hook(NODEPOOL.group, NODEPOOL.kind, nodepools)
        .hook(EC2NODECLASS.group, EC2NODECLASS.kind, nodeclasses)
        .timeout(request_timeout)
        .into_router()
}

/// Serves until SIGTERM or Ctrl-C.
pub async fn run(args: &WebhookArgs) -> anyhow::Result<()> {
    let (resolver, _reloader) = ReloadingCertResolver::watch(
        &args.tls_cert_file,
        &args.tls_private_key_file,
        args.tls_reload_interval,
    )?;
    let tls = Arc::new(kerf_certs::server_config(resolver)?);
    let catalog = Arc::new(args.catalog.load().map_err(anyhow::Error::msg)?);
    tracing::info!(bind = %args.bind, "serving admission webhooks");
    kerf_webhooks::serve(
        router(args.request_timeout, Some(catalog)),
        args.bind,
        tls,
        shutdown_signal(),
    )
    .await?;
    Ok(())
}

async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
    tracing::info!("shutting down");
}
