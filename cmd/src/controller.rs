//! `kerf controller` on AWS: the cloud provider built from the flags, then the controllers of the `kerf` crate.

use anyhow::Context;
use kerf::catalog::Pricing;
use kerf::cli::controller::ControllerArgs;
use kerf_aws::{AwsCloud, AwsSettings, ClusterInfo, SqsQueue};

pub async fn run(args: &ControllerArgs) -> anyhow::Result<()> {
    let cluster = ClusterInfo {
        name: args.cluster_name.clone(),
        endpoint: args.cluster_endpoint.clone().unwrap_or_default(),
        ca_bundle: args.cluster_ca_bundle.clone(),
        cidr: args.cluster_cidr.clone(),
        dns_ip: kerf::kube::kube_dns::discover().await,
    };
    let mut settings = AwsSettings::new(cluster, &args.kubernetes_version);
    settings.region = args.aws_region.clone();
    settings.endpoint_url = args.aws_endpoint_url.clone();
    settings.isolated_vpc = args.isolated_vpc;
    settings.reserved_capacity = args.feature_gates.reserved_capacity;
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
    kerf::cli::controller::run(args, cloud, queue).await
}
