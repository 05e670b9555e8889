//! `kerf webhook`: the admission webhook server for NodePools and EC2NodeClasses, and pod advice.

use super::validate::CatalogArgs;
use crate::admission::pods::{PodAdvisor, PodHook, VolumeSource};
use crate::admission::{ObjectHook, CAPACITYBUFFER, EC2NODECLASS, NODEOVERLAY, NODEPOOL};
use crate::catalog::Catalog;
use crate::kube::ca_bundle::{self, WebhookConfigurations};
use crate::kube::self_signed::{self, SecretSettings};
use crate::kube::volumes::VolumeStores;
use anyhow::Context;
use arc_swap::ArcSwapOption;
use kerf_certs::{ReloadingCertResolver, SelfSigned};
use kerf_webhooks::{ConnectionLimits, ReadyFlag, Webhooks};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::{counter::ConstCounter, gauge::ConstGauge};
use prometheus_client::registry::{Registry, Unit};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

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
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Annotate pods with advice (needs the cluster: in-cluster configuration or KUBECONFIG, to watch NodePools
    /// and EC2NodeClasses). `/readyz` says not ready until both have been listed.
    #[arg(long, env = "KERF_POD_ADVICE", default_value_t = true, action = clap::ArgAction::Set)]
    pub pod_advice: bool,
    /// How long `/readyz` waits for those lists at most. NodePool admission (failure policy Fail) matters more than
    /// advice, so a replica whose watch cannot sync (no RBAC, apiserver trouble) still becomes ready, and admits pods
    /// unchanged until it syncs.
    #[arg(long, env = "KERF_POD_ADVICE_READY_GRACE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub pod_advice_ready_grace: Duration,
    /// Boxed so that `Command` stays small.
    #[command(flatten)]
    pub self_signed: Box<SelfSignedArgs>,
}

/// What the server holds at most: connections, their idle time, and request bytes in flight (docs/limits.md).
#[derive(clap::Args, Debug)]
pub struct LimitArgs {
    /// MiB that admission requests may hold at once (bodies being read, reviews being decided). A request that finds
    /// no room within a second gets 429 with Retry-After: 1 (the apiserver retries). Keep it well under the
    /// container's memory limit.
    #[arg(long, env = "KERF_WEBHOOK_MAX_IN_FLIGHT_MIB", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4095))]
    pub max_in_flight_mib: u32,
    /// Open connections at most. At the cap a new connection closes the longest-idle one; it is refused only when
    /// every connection has a request in flight.
    #[arg(long, env = "KERF_WEBHOOK_MAX_CONNECTIONS", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Time a new connection has to finish its TLS handshake and send a whole request header.
    #[arg(long, env = "KERF_WEBHOOK_HEADER_TIMEOUT", default_value = "5s", value_parser = positive_duration)]
    pub header_timeout: Duration,
    /// Admission hooks that may run at once on their own threads (pod advice, and validation of reviews over 16 KiB);
    /// other requests wait for one within their deadline. Default: twice the cores available to the process.
    #[arg(long, env = "KERF_WEBHOOK_HOOK_THREADS", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub hook_threads: Option<u32>,
    /// Time a connection may stay open without a request after answering one.
    #[arg(long, env = "KERF_WEBHOOK_IDLE_TIMEOUT", default_value = "30s", value_parser = positive_duration)]
    pub idle_timeout: Duration,
}

impl LimitArgs {
    fn connections(&self) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: self.max_connections as usize,
            header_timeout: self.header_timeout,
            idle_timeout: self.idle_timeout,
        }
    }

    fn in_flight_bytes(&self) -> usize {
        self.max_in_flight_mib as usize * 1024 * 1024
    }
}

/// A humantime duration above zero: a zero timeout would close every connection at once.
fn positive_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text) {
        Ok(duration) if duration.is_zero() => Err("must be longer than 0s".to_owned()),
        Ok(duration) => Ok(duration),
        Err(error) => Err(error.to_string()),
    }
}

/// The serving certificate on `/metrics`, read from the resolver at each scrape.
#[derive(Debug)]
struct CertificateMetrics(Arc<ReloadingCertResolver>);

impl Collector for CertificateMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let errors = ConstCounter::new(self.0.failed_reloads());
        errors.encode(encoder.encode_descriptor(
            "kerf_webhook_certificate_reload_errors",
            "Re-reads of the TLS files that could not be served (unreadable, invalid, expired or not yet valid); the previous certificate stays",
            None,
            errors.metric_type(),
        )?)?;
        let reloads = ConstCounter::new(self.0.reloads());
        reloads.encode(encoder.encode_descriptor(
            "kerf_webhook_certificate_reloads",
            "Rotated certificates swapped in",
            None,
            reloads.metric_type(),
        )?)?;
        let expiry = self
            .0
            .not_after()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |since| {
                i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
            });
        let expiry = ConstGauge::new(expiry);
        expiry.encode(encoder.encode_descriptor(
            "kerf_webhook_certificate_expiry_timestamp",
            "When the served certificate expires (notAfter), in seconds since the epoch",
            Some(&Unit::Seconds),
            expiry.metric_type(),
        )?)?;
        Ok(())
    }
}

/// The self-signed certificate mode, for installs without cert-manager.
#[derive(clap::Args, Debug)]
pub struct SelfSignedArgs {
    /// Self-signed mode: keep a CA and serving certificate in this Secret of --namespace (created when missing,
    /// renewed 30 days before expiry, shared by all replicas), write them to --tls-cert-file and
    /// --tls-private-key-file, and inject the CA into the webhook configurations named below.
    #[arg(long, env = "KERF_SELF_SIGNED_SECRET")]
    pub self_signed_secret: Option<String>,
    /// The serving certificate's DNS names or IP addresses, comma-separated (the webhook Service's names).
    #[arg(long, env = "KERF_SELF_SIGNED_NAMES", value_delimiter = ',')]
    pub self_signed_names: Vec<String>,
    /// kerf's namespace, where the Secret lives (the chart passes the pod's).
    #[arg(long, env = "KERF_NAMESPACE")]
    pub namespace: Option<String>,
    /// MutatingWebhookConfiguration whose webhooks get the CA bundle.
    #[arg(long, env = "KERF_MUTATING_WEBHOOK_CONFIGURATION")]
    pub mutating_webhook_configuration: Option<String>,
    /// ValidatingWebhookConfiguration whose webhooks get the CA bundle.
    #[arg(long, env = "KERF_VALIDATING_WEBHOOK_CONFIGURATION")]
    pub validating_webhook_configuration: Option<String>,
    /// How often the Secret and the CA bundles are checked again (a renewal, a `helm upgrade` that reset them).
    #[arg(long, env = "KERF_SELF_SIGNED_RESYNC", default_value = "1m", value_parser = humantime::parse_duration)]
    pub self_signed_resync: Duration,
}

impl SelfSignedArgs {
    /// The Secret's settings, when the mode is on; an error when it is on but incomplete.
    fn settings(&self) -> anyhow::Result<Option<SecretSettings>> {
        let Some(name) = &self.self_signed_secret else {
            return Ok(None);
        };
        let namespace = self
            .namespace
            .clone()
            .context("--self-signed-secret needs --namespace (KERF_NAMESPACE)")?;
        anyhow::ensure!(
            !self.self_signed_names.is_empty(),
            "--self-signed-secret needs --self-signed-names: the names the apiserver reaches the webhook at"
        );
        Ok(Some(SecretSettings {
            namespace,
            name: name.clone(),
            names: self.self_signed_names.clone(),
            validity: kerf_certs::DEFAULT_VALIDITY,
        }))
    }

    fn configurations(&self) -> WebhookConfigurations {
        WebhookConfigurations {
            mutating: self.mutating_webhook_configuration.clone(),
            validating: self.validating_webhook_configuration.clone(),
        }
    }
}

/// The router with kerf's kinds registered, as `kerf webhook` serves it (tests and benchmarks use it too).
/// With a catalog, NodePool admission adds the warnings that need one.
pub fn router(request_timeout: Duration, catalog: Option<Arc<Catalog>>) -> axum::Router {
    object_hooks(request_timeout, catalog).into_router()
}

/// The NodePool, EC2NodeClass, NodeOverlay and CapacityBuffer hooks.
fn object_hooks(request_timeout: Duration, catalog: Option<Arc<Catalog>>) -> Webhooks {
    let nodepools = ObjectHook {
        kind: &NODEPOOL,
        catalog,
    };
    let nodeclasses = ObjectHook {
        kind: &EC2NODECLASS,
        catalog: None,
    };
    let nodeoverlays = ObjectHook {
        kind: &NODEOVERLAY,
        catalog: None,
    };
    let capacitybuffers = ObjectHook {
        kind: &CAPACITYBUFFER,
        catalog: None,
    };
    Webhooks::new()
        .hook(NODEPOOL.group, NODEPOOL.kind, nodepools)
        .hook(EC2NODECLASS.group, EC2NODECLASS.kind, nodeclasses)
        .hook(NODEOVERLAY.group, NODEOVERLAY.kind, nodeoverlays)
        .hook(CAPACITYBUFFER.group, CAPACITYBUFFER.kind, capacitybuffers)
        .timeout(request_timeout)
}

/// Serves until SIGTERM or Ctrl-C.
pub async fn run(args: &WebhookArgs) -> anyhow::Result<()> {
    // Loaded once and kept for the life of the process: the prepared NodePools of pod advice borrow it.
    let catalog: &'static Arc<Catalog> = Box::leak(Box::new(Arc::new(
        args.catalog.load().map_err(anyhow::Error::msg)?,
    )));
    let self_signed = args.self_signed.settings()?;
    let client = if args.pod_advice || self_signed.is_some() {
        match ::kube::Client::try_default().await {
            Ok(client) => Some(client),
            Err(error) if self_signed.is_none() => {
                tracing::warn!(%error, "no cluster configuration (in-cluster or KUBECONFIG): serving without pod advice");
                None
            }
            Err(error) => {
                return Err(anyhow::Error::new(error)
                    .context("the self-signed mode needs the cluster (in-cluster or KUBECONFIG)"))
            }
        }
    } else {
        None
    };
    if let (Some(settings), Some(client)) = (self_signed, &client) {
        let material = first_certificate(client, &settings).await?;
        material.write_key_pair(&args.tls_cert_file, &args.tls_private_key_file)?;
        tokio::spawn(keep_certificate_current(
            client.clone(),
            settings,
            args.self_signed.configurations(),
            args.self_signed.self_signed_resync,
            material,
            (
                args.tls_cert_file.clone(),
                args.tls_private_key_file.clone(),
            ),
        ));
    }
    let (resolver, _reloader) = ReloadingCertResolver::watch(
        &args.tls_cert_file,
        &args.tls_private_key_file,
        args.tls_reload_interval,
    )?;
    let mut registry = Registry::default();
    registry.register_collector(Box::new(CertificateMetrics(resolver.clone())));
    let tls = Arc::new(kerf_certs::server_config(resolver)?);
    let pod_advice = args.pod_advice && client.is_some();
    let ready = ReadyFlag::new(!pod_advice);
    let mut webhooks = object_hooks(args.request_timeout, Some(catalog.clone()))
        .in_flight_bytes(args.limits.in_flight_bytes())
        .registry(registry);
    if let Some(threads) = args.limits.hook_threads {
        webhooks = webhooks.hook_threads(threads as usize);
    }
    if let Some(client) = client.filter(|_| pod_advice) {
        let advisor = Arc::new(ArcSwapOption::empty());
        let volumes: Arc<dyn VolumeSource> = Arc::new(VolumeStores::watch(client.clone()));
        tokio::spawn(keep_advisor_current(
            client,
            catalog,
            advisor.clone(),
            ready.clone(),
        ));
        webhooks = webhooks.hook(
            "",
            "Pod",
            PodHook {
                advisor,
                volumes: Some(volumes),
            },
        );
        tokio::spawn(ready_after(args.pod_advice_ready_grace, ready.clone()));
    }
    tracing::info!(bind = %args.bind, pod_advice, "serving admission webhooks");
    kerf_webhooks::serve(
        webhooks.readiness(ready).into_router(),
        args.bind,
        tls,
        args.limits.connections(),
        shutdown_signal(),
    )
    .await?;
    Ok(())
}

/// Readiness waits for the first lists so that a new replica advises from its first pod, but at most `grace`.
async fn ready_after(grace: Duration, ready: ReadyFlag) {
    tokio::time::sleep(grace).await;
    if !ready.is_ready() {
        tracing::warn!(?grace, "NodePools and EC2NodeClasses not synced yet: ready anyway, pods get no advice until they are");
        ready.set(true);
    }
}

/// Rebuilds the pod advisor whenever NodePools or EC2NodeClasses change; ready once the first lists are in.
async fn keep_advisor_current(
    client: ::kube::Client,
    catalog: &'static Catalog,
    advisor: Arc<ArcSwapOption<PodAdvisor>>,
    ready: ReadyFlag,
) {
    crate::kube::pools::watch_pools(client, |nodepools, nodeclasses| {
        advisor.store(Some(Arc::new(PodAdvisor::new(
            nodepools,
            nodeclasses,
            catalog,
        ))));
        ready.set(true);
        tracing::debug!(
            nodepools = nodepools.len(),
            nodeclasses = nodeclasses.len(),
            "pod advice updated"
        );
    })
    .await;
}

/// How long start-up keeps trying to read or store the certificate Secret before giving up with the error.
const FIRST_CERTIFICATE_DEADLINE: Duration = Duration::from_secs(60);

/// The certificate from the Secret (issued and stored when needed), retried with backoff at start-up: the
/// apiserver may be briefly unreachable while the pod starts.
async fn first_certificate(
    client: &::kube::Client,
    settings: &SecretSettings,
) -> anyhow::Result<SelfSigned> {
    let deadline = tokio::time::Instant::now() + FIRST_CERTIFICATE_DEADLINE;
    let mut retry = Duration::from_millis(500);
    loop {
        match self_signed::ensure(client.clone(), settings).await {
            Ok(material) => return Ok(material),
            Err(error) if tokio::time::Instant::now() + retry < deadline => {
                tracing::warn!(
                    error = chain(error),
                    "cannot get the self-signed certificate yet; retrying"
                );
            }
            Err(error) => {
                return Err(anyhow::Error::new(error).context("getting the self-signed certificate"))
            }
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(Duration::from_secs(8));
    }
}

/// Keeps the served certificate and the webhook configurations' CA bundle in step with the Secret: injects the
/// CA (retrying quickly until it first works, since the configurations may be created after this pod starts),
/// then every `resync` re-reads the Secret, renews it when due, and rewrites the files when it changed (the
/// certificate resolver picks them up).
async fn keep_certificate_current(
    client: ::kube::Client,
    settings: SecretSettings,
    configurations: WebhookConfigurations,
    resync: Duration,
    mut material: SelfSigned,
    (cert_file, key_file): (PathBuf, PathBuf),
) {
    let mut retry = Duration::from_secs(1);
    loop {
        let wait =
            match ca_bundle::inject(&client, &configurations, &material.ca_bundle_base64()).await {
                Ok(_) => {
                    retry = Duration::from_secs(1);
                    resync
                }
                Err(error) => {
                    tracing::warn!(
                        error = chain(error),
                        "cannot inject the CA bundle; retrying"
                    );
                    retry = (retry * 2).min(resync);
                    retry
                }
            };
        tokio::time::sleep(wait).await;
        match self_signed::ensure(client.clone(), &settings).await {
            Ok(current) if current != material => {
                // The new bundle (which still holds the previous CA) goes in before the new certificate is
                // served, so the apiserver never meets a certificate it does not trust yet.
                if let Err(error) =
                    ca_bundle::inject(&client, &configurations, &current.ca_bundle_base64()).await
                {
                    tracing::warn!(
                        error = chain(error),
                        "cannot inject the renewed CA bundle yet"
                    );
                }
                match current.write_key_pair(&cert_file, &key_file) {
                    Ok(()) => {
                        tracing::info!("the self-signed certificate changed; serving the new one");
                        material = current;
                    }
                    Err(error) => {
                        tracing::error!(error = chain(error), "cannot write the new certificate")
                    }
                }
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(
                    error = chain(error),
                    "cannot check the self-signed certificate"
                )
            }
        }
    }
}

/// An error with its causes, for a log field.
fn chain(error: impl std::error::Error + Send + Sync + 'static) -> String {
    format!("{:#}", anyhow::Error::new(error))
}

pub(crate) async fn shutdown_signal() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_certificate_is_on_metrics() {
        let now = SystemTime::now();
        let certs = SelfSigned::generate(["localhost"], now, kerf_certs::DEFAULT_VALIDITY)
            .expect("generate");
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = certs.write_files(dir.path()).expect("write");
        let (resolver, _task) =
            ReloadingCertResolver::watch(&paths.cert, &paths.key, Duration::from_secs(60))
                .expect("watch");
        let mut registry = Registry::default();
        registry.register_collector(Box::new(CertificateMetrics(resolver.clone())));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        let expiry = resolver
            .not_after()
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        for line in [
            "kerf_webhook_certificate_reload_errors_total 0".to_owned(),
            "kerf_webhook_certificate_reloads_total 0".to_owned(),
            format!("kerf_webhook_certificate_expiry_timestamp_seconds {expiry}"),
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn limits_parse_and_refuse_zero() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            limits: LimitArgs,
        }
        let cli = Cli::try_parse_from(["kerf", "--max-in-flight-mib=16", "--idle-timeout=1m"])
            .expect("parse");
        assert_eq!(cli.limits.in_flight_bytes(), 16 << 20);
        assert_eq!(cli.limits.hook_threads, None, "twice the cores unless set");
        let threads = Cli::try_parse_from(["kerf", "--hook-threads=3"]).expect("parse");
        assert_eq!(threads.limits.hook_threads, Some(3));
        assert_eq!(
            cli.limits.connections(),
            ConnectionLimits {
                max_connections: 256,
                header_timeout: Duration::from_secs(5),
                idle_timeout: Duration::from_secs(60),
            }
        );
        for zero in [
            "--header-timeout=0s",
            "--max-connections=0",
            "--max-in-flight-mib=0",
            "--hook-threads=0",
        ] {
            assert!(Cli::try_parse_from(["kerf", zero]).is_err(), "{zero}");
        }
    }
}
