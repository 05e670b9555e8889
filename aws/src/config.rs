//! [`AwsSettings`], how kerf talks to AWS, and the SDK configuration every kerf client (EC2, SSM, SQS, EKS, ARC) is
//! built from: region, endpoint, credentials, timeouts and retries as the settings say.

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use kerf_core::cloud::CloudError;

use kerf_core::catalog::Pricing;
use kerf_core::cloud::api_limits::{ApiAttempts, ApiRateLimits};

use crate::fleet_batcher::FleetBatchSettings;
use crate::user_data::ClusterInfo;

/// How long connecting to an endpoint may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How kerf talks to AWS and which cluster it launches for.
#[derive(Clone, Debug)]
pub struct AwsSettings {
    pub cluster: ClusterInfo,
    /// The Kubernetes minor version (`1.30`) that AMI aliases pick EKS-optimized AMIs for.
    pub kubernetes_version: String,
    /// The region; `None` takes it from the standard chain (`AWS_REGION`, profile).
    pub region: Option<String>,
    /// An endpoint for every service (an emulator); `None` uses AWS (or `AWS_ENDPOINT_URL`).
    pub endpoint_url: Option<String>,
    /// Access key and secret for emulators; `None` uses the standard chain (IRSA, Pod Identity, …).
    pub static_credentials: Option<(String, String)>,
    /// The bound on one API call, retries included.
    pub call_timeout: Duration,
    /// Attempts per call (the SDK retries throttling and 5xx answers, with jittered exponential backoff).
    pub max_attempts: u32,
    /// Attempts of the APIs given their own ([`kerf_core::cloud::api_limits::ApiAttempts`]), over `max_attempts`.
    pub api_max_attempts: ApiAttempts,
    /// The longest backoff between two attempts (the SDK's standard retry doubles it from 1 s, with jitter).
    pub retry_max_backoff: Duration,
    /// The client-side rate limit of each API ([`kerf_core::cloud::api_limits`]).
    pub api_rate_limits: ApiRateLimits,
    /// Prices of offerings (on-demand and spot) that AWS's price APIs do not give: by default the shipped
    /// on-demand snapshot (`Pricing::snapshot`), a pricing file over it.
    pub pricing: Pricing,
    /// No route to AWS's public endpoints (Karpenter's `ISOLATED_VPC`): the Price List API is not called and
    /// on-demand prices come from `pricing` only.
    pub isolated_vpc: bool,
    /// The `ReservedCapacity` feature gate: capacity reservations are looked up, offered and targeted. Off, none
    /// is looked up and launch templates say nothing about reservations.
    pub reserved_capacity: bool,
    /// How CreateFleet calls of one instance are gathered into one (docs/cloud.md "CreateFleet batching").
    pub fleet_batch: FleetBatchSettings,
    /// `--enable-zonal-shift`: the cluster's ARC zonal shifts are followed (checked at start).
    pub enable_zonal_shift: bool,
}

impl AwsSettings {
    /// Settings with kerf's defaults: a 30 s call timeout (moto lists every instance type in ~5 s) and 3
    /// attempts.
    pub fn new(cluster: ClusterInfo, kubernetes_version: &str) -> Self {
        AwsSettings {
            cluster,
            kubernetes_version: kubernetes_version.to_owned(),
            region: None,
            endpoint_url: None,
            static_credentials: None,
            call_timeout: Duration::from_secs(30),
            max_attempts: 3,
            retry_max_backoff: Duration::from_secs(20),
            api_max_attempts: ApiAttempts::default(),
            api_rate_limits: ApiRateLimits::default(),
            pricing: Pricing::snapshot(),
            isolated_vpc: false,
            reserved_capacity: true,
            fleet_batch: FleetBatchSettings::default(),
            enable_zonal_shift: false,
        }
    }
}

/// The SDK configuration for `settings` and the region it resolved to. Loading it (the credential and
/// region chains) is bounded by the call timeout; no AWS API is called.
pub async fn load(settings: &AwsSettings) -> Result<(SdkConfig, String), CloudError> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(timeouts(settings.call_timeout))
        .retry_config(retry(settings));
    if let Some(region) = &settings.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(url) = &settings.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    if let Some((key, secret)) = &settings.static_credentials {
        loader = loader.credentials_provider(aws_sdk_ec2::config::Credentials::new(
            key,
            secret,
            None,
            None,
            "kerf-static",
        ));
    }
    let config = tokio::time::timeout(settings.call_timeout, loader.load())
        .await
        .map_err(|_| CloudError::Timeout {
            operation: "LoadAwsConfig",
            after: settings.call_timeout,
        })?;
    let region = config
        .region()
        .map(|r| r.to_string())
        .ok_or_else(|| CloudError::InvalidRequest("no AWS region: set AWS_REGION".into()))?;
    Ok((config, region))
}

/// The SDK's standard retry (exponential backoff with full jitter) with the settings' attempts and backoff cap.
pub fn retry(settings: &AwsSettings) -> RetryConfig {
    RetryConfig::standard()
        .with_max_attempts(settings.max_attempts.max(1))
        .with_max_backoff(settings.retry_max_backoff)
}

/// The SDK's timeouts: connecting, and one operation (retries included) bounded by `operation`.
pub fn timeouts(operation: Duration) -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_timeout(operation)
        .build()
}
