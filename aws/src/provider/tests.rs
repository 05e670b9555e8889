use super::testing::{self, ec2_error_body};
use super::*;
use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::operation::describe_instances::DescribeInstancesOutput;
use aws_smithy_mocks::mock;
use kerf_core::cloud::api_limits::ApiAttempts;
use std::time::Duration;

/// kerf's retry configuration (the SDK's standard retry, `max_attempts` 3) with `attempts` per API over it, as
/// [`AwsCloud::connect`] builds it; its backoff starts at a millisecond so that the test does not wait.
fn kerf_retries(attempts: &str) -> (RetryConfig, AttemptsPerApi) {
    let base =
        crate::config::retry(&testing::settings()).with_initial_backoff(Duration::from_millis(1));
    let per_api = AttemptsPerApi {
        attempts: ApiAttempts::parse(attempts).expect("attempts"),
        base: base.clone(),
    };
    (base, per_api)
}

/// Throttling (`RequestLimitExceeded`, HTTP 503) is retried by the SDK with backoff up to the attempts
/// configured, then fails the call with EC2's code: a read that is let through on its third attempt
/// succeeds; an API given one attempt (`--aws-api-max-attempts TerminateInstances=1`) fails on its first
/// throttle; a listing throttled on every attempt fails after the default three.
#[tokio::test]
async fn throttled_calls_are_retried_up_to_their_attempts_then_fail_with_the_code() {
    let throttled = || Some(ec2_error_body("RequestLimitExceeded"));
    let instance = ec2::Instance::builder()
        .instance_id("i-1")
        .instance_type(ec2::InstanceType::C5Large)
        .placement(
            ec2::Placement::builder()
                .availability_zone("us-west-2a")
                .build(),
        )
        .state(
            ec2::InstanceState::builder()
                .name(ec2::InstanceStateName::Running)
                .build(),
        )
        .build();
    let describe = mock!(aws_sdk_ec2::Client::describe_instances)
        .sequence()
        .http_status(503, throttled())
        .times(2)
        .output(move || {
            DescribeInstancesOutput::builder()
                .reservations(
                    ec2::Reservation::builder()
                        .instances(instance.clone())
                        .build(),
                )
                .build()
        })
        .build();
    let terminate = mock!(aws_sdk_ec2::Client::terminate_instances)
        .sequence()
        .http_status(503, throttled())
        .repeatedly()
        .build();
    let subnets = mock!(aws_sdk_ec2::Client::describe_subnets)
        .sequence()
        .http_status(503, throttled())
        .repeatedly()
        .build();
    let (retry, per_api) = kerf_retries("TerminateInstances=1");
    let ec2 = testing::ec2_with(&[&describe, &terminate, &subnets], retry, Some(per_api));
    let cloud = testing::cloud(ec2);
    let provider_id = "aws:///us-west-2a/i-1";

    let found = cloud
        .get(provider_id)
        .await
        .expect("found on the third attempt");
    assert_eq!(found.instance_type, "c5.large");
    assert_eq!(describe.num_calls(), 3);

    let refused = cloud.delete(provider_id).await.unwrap_err();
    assert!(
        matches!(&refused, CloudError::Api { operation: "TerminateInstances", code, .. }
                if code == "RequestLimitExceeded"),
        "{refused}"
    );
    assert_eq!(
        terminate.num_calls(),
        1,
        "TerminateInstances has one attempt"
    );

    let refused = cloud.subnets(&testing::spec()).await.unwrap_err();
    assert!(
        matches!(&refused, CloudError::Api { operation: "DescribeSubnets", code, .. }
                if code == "RequestLimitExceeded"),
        "{refused}"
    );
    assert_eq!(subnets.num_calls(), 3, "the default three attempts");
}
