//! `kerf controller` on AWS: the cloud provider built from the flags, then the controllers of the `kerf` crate.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kerf::catalog::Pricing;
use kerf::cli::controller::ControllerArgs;
use kerf::controllers::metrics::Metrics;
use kerf_aws::{AwsCloud, AwsSettings, BatchObserver, ClusterInfo, SqsQueue};

/// Feeds the provider's batcher histograms (`karpenter_cloudprovider_batcher_*`) from the CreateFleet batcher.
struct BatcherMetrics(Arc<Metrics>);

impl std::fmt::Debug for BatcherMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BatcherMetrics")
    }
}

impl BatchObserver for BatcherMetrics {
    fn window_closed(&self, batcher: &'static str, open_for: Duration) {
        self.0.offerings.observe_batch_window(batcher, open_for);
    }

    fn call_made(&self, batcher: &'static str, requests: usize) {
        self.0.offerings.observe_batch(batcher, requests);
    }
}

pub async fn run(args: &ControllerArgs) -> anyhow::Result<()> {
    let cluster = ClusterInfo {
        name: args.cluster_name.clone(),
        endpoint: args.cluster_endpoint.clone().unwrap_or_default(),
        ca_bundle: args.cluster_ca_bundle.clone(),
        cidr: args.cluster_cidr.clone(),
        dns_ip: kerf::kube::kube_dns::discover().await,
    };
    let version = match &args.kubernetes_version {
        Some(version) => version.clone(),
        None => {
            let version = kerf::kube::version::discover()
                .await
                .context("discovering the Kubernetes version (or set --kubernetes-version)")?;
            tracing::info!(%version, "discovered the Kubernetes version from the apiserver");
            version
        }
    };
    let mut settings = AwsSettings::new(cluster, &version);
    settings.region = args.aws_region.clone();
    settings.endpoint_url = args.aws_endpoint_url.clone();
    settings.isolated_vpc = args.isolated_vpc;
    settings.api_rate_limits = args.aws_api_rate_limits.clone();
    settings.max_attempts = args.aws_max_attempts;
    settings.retry_max_backoff = args.aws_retry_max_backoff;
    settings.api_max_attempts = args.aws_api_max_attempts.clone();
    settings.reserved_capacity = args.feature_gates.reserved_capacity;
    settings.enable_zonal_shift = args.enable_zonal_shift;
    let metrics = Arc::new(Metrics::new());
    settings.fleet_batch.observer = Some(Arc::new(BatcherMetrics(metrics.clone())));
    if let Some(path) = &args.pricing_file {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        settings.pricing = Pricing::from_json(&text)
            .with_context(|| format!("reading {}", path.display()))?
            .over(Pricing::snapshot());
    }
    let queue = match &args.interruption_queue {
        Some(name) => Some(
            SqsQueue::connect(&settings, name)
                .await
                .with_context(|| format!("opening the interruption queue {name}"))?,
        ),
        None => None,
    };
    let cloud = AwsCloud::connect(settings)
        .await
        .context("configuring the AWS clients")?;
    kerf::cli::controller::run(args, cloud, queue, metrics).await
}
