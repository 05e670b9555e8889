//! kerf-aws against moto's injected faults: an insufficient-capacity answer for the cheapest type, API
//! errors and slow calls. Faults are server-wide, so these tests take turns (and run in their own process,
//! hence on their own emulator).

use std::time::{Duration, SystemTime};

use anyhow::Result;
use kerf::catalog::CapacityType;
use kerf::cloud::{CloudError, CloudProvider, LaunchRequest};
use kerf_e2e::aws::{node_claim, unique_cluster_name, AwsEmu};
use serde_json::json;

/// One test at a time may have faults set.
static FAULTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn an_ice_on_the_cheapest_type_launches_the_next_and_the_retry_avoids_it() -> Result<()> {
    let Some(emu) = AwsEmu::shared_in_or_skip("faults", "an_ice_on_the_cheapest_type")? else {
        return Ok(());
    };
    let _turn = FAULTS.lock().await;
    let launchable = emu.launchable("ice").await?;
    let (cloud, class) = (&launchable.cloud, &launchable.class);
    let now = SystemTime::now();
    let request = launchable.request("ice-a", &["c6i.large", "m6i.large"], &["on-demand"])?;
    assert_eq!(
        request.instance_types[0].name, "c6i.large",
        "the cheapest comes first"
    );

    emu.set_faults(&json!({"capacity": [{"instanceType": "c6i.large"}]}))
        .await?;
    let first = cloud.create(&request, now).await;
    emu.clear_faults().await?;
    let first = first?;
    assert_eq!(
        first.instance_type, "m6i.large",
        "CreateFleet fell through to the next type"
    );
    // The ICE'd offerings read unavailable now, and a retry (with capacity back) avoids them for 3 min.
    let types = cloud.instance_types(class, now).await?;
    let c6i = types
        .iter()
        .find(|t| t.name == "c6i.large")
        .expect("c6i.large is offered");
    assert!(c6i
        .offerings
        .iter()
        .filter(|o| o.capacity_type == CapacityType::OnDemand)
        .all(|o| !o.available));
    let request = LaunchRequest::from_node_claim(
        &node_claim("ice-b", &["c6i.large", "m6i.large"], &["on-demand"])?,
        class.clone(),
        &types,
    )?;
    let retry = cloud
        .create(&request, now + Duration::from_secs(60))
        .await?;
    assert_eq!(retry.instance_type, "m6i.large");
    // Three minutes on, a fresh listing offers the cheapest type again.
    let later_now = now + Duration::from_secs(181);
    let types = cloud.instance_types(class, later_now).await?;
    let claim = node_claim("ice-c", &["c6i.large", "m6i.large"], &["on-demand"])?;
    let request = LaunchRequest::from_node_claim(&claim, class.clone(), &types)?;
    let later = cloud.create(&request, later_now).await?;
    assert_eq!(
        later.instance_type, "c6i.large",
        "after 3 minutes the cheapest is tried again"
    );

    // No capacity anywhere: insufficient capacity, naming the pools tried.
    emu.set_faults(&json!({"capacity": [{"instanceType": "*"}]}))
        .await?;
    let none = cloud.create(&request, now + Duration::from_secs(400)).await;
    emu.clear_faults().await?;
    match none {
        Err(CloudError::InsufficientCapacity { offerings }) => {
            let mut tried: Vec<_> = offerings.iter().map(ToString::to_string).collect();
            tried.sort();
            assert_eq!(
                tried,
                [
                    "on-demand:c6i.large:us-west-2a",
                    "on-demand:c6i.large:us-west-2b",
                    "on-demand:m6i.large:us-west-2a",
                    "on-demand:m6i.large:us-west-2b",
                ]
            );
        }
        other => panic!("expected insufficient capacity, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn api_errors_and_slow_calls_become_cloud_errors() -> Result<()> {
    let Some(emu) = AwsEmu::shared_in_or_skip("faults", "api_errors_and_slow_calls")? else {
        return Ok(());
    };
    let _turn = FAULTS.lock().await;
    let cloud = emu
        .cloud(&unique_cluster_name("api"), Duration::from_secs(2))
        .await?;

    emu.set_faults(
        &json!({"api": [{"action": "DescribeInstances", "code": "RequestLimitExceeded",
                                    "status": 503, "count": 1}]}),
    )
    .await?;
    let throttled = cloud.list().await;
    emu.set_faults(&json!({"api": [{"action": "DescribeInstances", "delayMs": 4000, "count": 1}]}))
        .await?;
    let slow = cloud.list().await;
    emu.clear_faults().await?;
    match throttled {
        Err(CloudError::Api {
            operation, code, ..
        }) => {
            assert_eq!(
                (operation, code.as_str()),
                ("DescribeInstances", "RequestLimitExceeded")
            );
        }
        other => panic!("expected an API error, got {other:?}"),
    }
    match slow {
        Err(CloudError::Timeout { operation, after }) => {
            assert_eq!(
                (operation, after),
                ("DescribeInstances", Duration::from_secs(2))
            );
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(
        cloud.list().await?.is_empty(),
        "calls work again once the faults are gone"
    );
    Ok(())
}

/// Attempts per API: with one attempt for every call but three for DescribeInstances, two throttled answers of
/// DescribeInstances are retried through (with the SDK's backoff) while one of DescribeSubnets fails the
/// resolution at once.
#[tokio::test]
async fn an_api_given_its_own_attempts_retries_through_throttling_and_others_do_not() -> Result<()>
{
    let Some(emu) = AwsEmu::shared_in_or_skip("faults", "an_api_given_its_own_attempts")? else {
        return Ok(());
    };
    let _turn = FAULTS.lock().await;
    let launchable = emu.launchable("attempts").await?;
    let instance = launchable
        .cloud
        .create(
            &launchable.request("attempts-a", &["m5.large"], &["on-demand"])?,
            SystemTime::now(),
        )
        .await?;
    let mut settings = emu.settings(&launchable.cluster, Duration::from_secs(30))?;
    assert_eq!(settings.max_attempts, 1);
    settings.api_max_attempts = kerf::cloud::api_limits::ApiAttempts::parse("DescribeInstances=3")
        .map_err(anyhow::Error::msg)?;
    let cloud = kerf_aws::AwsCloud::connect(settings).await?;
    let throttled = |action: &str, count: u32| json!({"api": [{"action": action, "code": "RequestLimitExceeded", "status": 503, "count": count}]});

    emu.set_faults(&throttled("DescribeInstances", 2)).await?;
    let got = cloud.get(&instance.provider_id).await;
    emu.clear_faults().await?;
    assert_eq!(got?.id, instance.id, "the third attempt is answered");

    emu.set_faults(&throttled("DescribeSubnets", 1)).await?;
    let resolved = cloud
        .resolve_node_class(
            "default",
            &kerf_e2e::aws::node_class_spec(&launchable.cluster)?,
        )
        .await;
    emu.clear_faults().await?;
    match resolved {
        Err(CloudError::Api { code, .. }) => assert_eq!(code, "RequestLimitExceeded"),
        other => anyhow::bail!("one attempt for DescribeSubnets, got {other:?}"),
    }
    Ok(())
}

/// Upstream nodeclass placement group suite ("should set PlacementGroupReady to false when resolution fails"):
/// DescribePlacementGroups failing leaves the class not ready with `PLACEMENT_GROUP_UNRESOLVED` and EC2's error
/// (the status says `PlacementGroupResolutionFailed`), distinct from a group that does not exist.
#[tokio::test]
async fn a_placement_group_ec2_cannot_look_up_leaves_the_class_not_ready() -> Result<()> {
    let Some(emu) = AwsEmu::shared_in_or_skip("faults", "a_placement_group_ec2_cannot_look_up")?
    else {
        return Ok(());
    };
    let _turn = FAULTS.lock().await;
    let cluster = unique_cluster_name("pg-fault");
    let cloud = emu.cloud(&cluster, Duration::from_secs(30)).await?;
    emu.create_network(cloud.ec2(), &cluster).await?;
    let mut spec = kerf_e2e::aws::node_class_spec(&cluster)?;
    spec.placement_group_selector = Some(serde_json::from_value(json!({"name": "hpc"}))?);
    let reason = |resolved: Result<kerf::cloud::NodeClass, CloudError>| match resolved {
        Err(CloudError::NodeClassNotReady { reason, .. }) => Ok(reason),
        other => Err(anyhow::anyhow!("expected not ready, got {other:?}")),
    };
    emu.set_faults(&json!({"api": [{"action": "DescribePlacementGroups",
        "code": "RequestLimitExceeded", "status": 503, "count": -1}]}))
        .await?;
    let failed = cloud.resolve_node_class("default", &spec).await;
    emu.clear_faults().await?;
    let failed = reason(failed)?;
    assert!(
        failed.starts_with(kerf::cloud::PLACEMENT_GROUP_UNRESOLVED)
            && failed.contains("RequestLimitExceeded"),
        "{failed}"
    );
    let missing = reason(cloud.resolve_node_class("default", &spec).await)?;
    assert!(
        missing.starts_with(kerf::cloud::NO_PLACEMENT_GROUP),
        "{missing}"
    );
    Ok(())
}
