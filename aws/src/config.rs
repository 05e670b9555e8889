//! The SDK configuration every kerf client (EC2, SSM, SQS) is built from: region, endpoint, credentials,
//! timeouts and retries as [`AwsSettings`] say.

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use kerf::cloud::CloudError;

use crate::provider::AwsSettings;

/// How long connecting to an endpoint may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

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
