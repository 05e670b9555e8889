//! ARC zonal shifts of the EKS cluster (`--enable-zonal-shift`), asked as Karpenter's AWS provider asks them: at
//! start, EKS `DescribeCluster` gives the cluster's ARN and ARC `GetManagedResource` on it must answer (the cluster
//! is registered with zonal shift), else the controller does not start; then `GetManagedResource` lists the
//! shifts on each poll.

use std::time::{Duration, SystemTime};

use aws_config::SdkConfig;
use aws_sdk_arczonalshift::types::{AppliedStatus, ZonalShiftInResource};
use kerf_core::cloud::zonal_shift::ZonalShift;
use kerf_core::cloud::CloudError;

use crate::errors::bounded;

/// The ARC client and the cluster's ARN the shifts are asked for.
#[derive(Debug)]
pub struct ZonalShiftSource {
    client: aws_sdk_arczonalshift::Client,
    cluster_arn: String,
}

impl ZonalShiftSource {
    /// Finds the cluster `cluster_name` in EKS and checks ARC knows it; the error names what to fix.
    pub async fn connect(
        config: &SdkConfig,
        cluster_name: &str,
        call_timeout: Duration,
    ) -> Result<(Self, Vec<ZonalShift>), CloudError> {
        let eks = aws_sdk_eks::Client::new(config);
        let described = bounded(
            "DescribeCluster",
            call_timeout,
            eks.describe_cluster().name(cluster_name).send(),
        )
        .await
        .map_err(|e| refused(cluster_name, &e))?;
        let cluster_arn = described
            .cluster
            .and_then(|c| c.arn)
            .filter(|arn| !arn.is_empty())
            .ok_or_else(|| {
                refused(
                    cluster_name,
                    &CloudError::InvalidRequest("EKS gives no ARN for it".into()),
                )
            })?;
        let source = ZonalShiftSource {
            client: aws_sdk_arczonalshift::Client::new(config),
            cluster_arn,
        };
        let shifts = source
            .list(call_timeout)
            .await
            .map_err(|e| refused(&source.cluster_arn, &e))?;
        Ok((source, shifts))
    }

    /// The shifts ARC lists on the cluster now.
    pub async fn list(&self, call_timeout: Duration) -> Result<Vec<ZonalShift>, CloudError> {
        let call = self
            .client
            .get_managed_resource()
            .resource_identifier(&self.cluster_arn)
            .send();
        let out = bounded("GetManagedResource", call_timeout, call).await?;
        Ok(out.zonal_shifts().iter().filter_map(shift).collect())
    }
}

/// One listed shift; one without a zone or an expiry is not one kerf can act on.
fn shift(listed: &ZonalShiftInResource) -> Option<ZonalShift> {
    let expiry = SystemTime::try_from(*listed.expiry_time()).ok()?;
    (!listed.away_from().is_empty()).then(|| ZonalShift {
        away_from: listed.away_from().to_owned(),
        expiry,
        applied: *listed.applied_status() == AppliedStatus::Applied,
    })
}

/// Karpenter's start-up refusal when the cluster is not registered with zonal shift.
fn refused(cluster: &str, error: &CloudError) -> CloudError {
    CloudError::InvalidRequest(format!(
        "--enable-zonal-shift (ENABLE_ZONAL_SHIFT): unable to find cluster {cluster} in zonal shift; check that the \
         cluster is enabled for zonal shift and that kerf's role may call eks:DescribeCluster and \
         arc-zonal-shift:GetManagedResource: {error}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_arczonalshift::primitives::DateTime;

    fn listed(away_from: &str, status: AppliedStatus) -> ZonalShiftInResource {
        ZonalShiftInResource::builder()
            .away_from(away_from)
            .applied_status(status)
            .expiry_time(DateTime::from_secs(2_000_000_000))
            .start_time(DateTime::from_secs(1_000_000_000))
            .zonal_shift_id("shift-1")
            .resource_identifier("arn:aws:eks:us-west-2:123456789012:cluster/c")
            .comment("")
            .build()
            .expect("all required fields")
    }

    #[test]
    fn listed_shifts_keep_their_zone_expiry_and_applied_status() {
        let applied = shift(&listed("usw2-az1", AppliedStatus::Applied)).expect("shift");
        assert_eq!(applied.away_from, "usw2-az1");
        assert!(applied.applied);
        assert_eq!(
            applied.expiry,
            SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000)
        );
        let not = shift(&listed("usw2-az2", AppliedStatus::NotApplied)).expect("shift");
        assert!(!not.applied);
        assert_eq!(shift(&listed("", AppliedStatus::Applied)), None);
    }
}
