//! The cluster kerf launches for, discovered as Karpenter does when its endpoint is not configured: EKS
//! `DescribeCluster` on the cluster's name gives the API server endpoint nodes join, and where they are not
//! configured either, the cluster CA bundle and the service CIDR the nodes' user data carries.

use aws_config::SdkConfig;
use kerf_core::cloud::CloudError;

use crate::errors::bounded;
use crate::user_data::ClusterInfo;

/// `cluster` with what is missing filled in from EKS: nothing is asked when its endpoint is set. Fails, naming
/// the flags, when EKS does not know the cluster or gives no endpoint.
pub async fn discover(
    config: &SdkConfig,
    mut cluster: ClusterInfo,
    call_timeout: std::time::Duration,
) -> Result<ClusterInfo, CloudError> {
    if !cluster.endpoint.trim().is_empty() {
        return Ok(cluster);
    }
    let eks = aws_sdk_eks::Client::new(config);
    let call = eks.describe_cluster().name(&cluster.name).send();
    let described = bounded("DescribeCluster", call_timeout, call)
        .await
        .map_err(|error| match error {
            CloudError::Api {
                operation,
                code,
                message,
            } => CloudError::Api {
                operation,
                code,
                message: format!(
                    "no --cluster-endpoint (CLUSTER_ENDPOINT) was given, and EKS cannot describe cluster {:?}: {message}",
                    cluster.name
                ),
            },
            other => other,
        })?;
    let Some(found) = described.cluster else {
        return Err(missing(&cluster.name, "no cluster"));
    };
    cluster.endpoint = found.endpoint.filter(|e| !e.is_empty()).ok_or_else(|| {
        missing(
            &cluster.name,
            "no endpoint (is the cluster still being created?)",
        )
    })?;
    if cluster.ca_bundle.is_none() {
        cluster.ca_bundle = found.certificate_authority.and_then(|ca| ca.data);
    }
    if cluster.cidr.is_none() {
        cluster.cidr = found
            .kubernetes_network_config
            .and_then(|n| n.service_ipv4_cidr.or(n.service_ipv6_cidr));
    }
    Ok(cluster)
}

fn missing(name: &str, what: &str) -> CloudError {
    CloudError::InvalidRequest(format!(
        "no --cluster-endpoint (CLUSTER_ENDPOINT) was given, and EKS describes cluster {name:?} with {what}"
    ))
}
