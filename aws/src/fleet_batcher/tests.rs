//! Translations of aws/karpenter-provider-aws `pkg/batcher/createfleet_test.go` ("CreateFleet Batching"), with
//! EC2 answered by `aws-smithy-mocks`. On the real clock (tokio's `test-util` would rebuild the dependency tree
//! for these tests alone): the launches of a burst are spawned together on the test's one thread, so they are
//! queued before the batcher's timers are looked at, and the windows are wide enough for a loaded machine.

use super::*;
use aws_sdk_ec2::operation::create_fleet::CreateFleetInput;
use aws_sdk_ec2::operation::create_tags::{CreateTagsInput, CreateTagsOutput};
use aws_smithy_mocks::{create_mock_http_client, mock, MockResponseInterceptor, Rule, RuleMode};
use std::sync::Mutex;

/// The CreateFleet inputs a rule saw, and the CreateTags ones.
#[derive(Default)]
struct Seen {
    fleets: Mutex<Vec<CreateFleetInput>>,
    tags: Mutex<Vec<CreateTagsInput>>,
}

fn capacity(input: &CreateFleetInput) -> i32 {
    input
        .target_capacity_specification()
        .and_then(|t| t.total_target_capacity())
        .unwrap_or_default()
}

/// CreateFleet that launches as many instances as asked, `limit` at most, and reports `errors`.
fn fleet_rule(seen: &Arc<Seen>, limit: i32, errors: Vec<ec2::CreateFleetError>) -> Rule {
    let seen = seen.clone();
    mock!(aws_sdk_ec2::Client::create_fleet).then_compute_output(move |input| {
        let mut fleets = seen.fleets.lock().unwrap();
        let first = fleets.iter().map(capacity).sum::<i32>();
        fleets.push(input.clone());
        let launched = (first..first + capacity(input).min(limit)).map(|n| format!("i-{n}"));
        CreateFleetOutput::builder()
            .fleet_id("fleet-1")
            .instances(
                ec2::CreateFleetInstance::builder()
                    .set_instance_ids(Some(launched.collect()))
                    .instance_type(ec2::InstanceType::M5Large)
                    .build(),
            )
            .set_errors(Some(errors.clone()))
            .build()
    })
}

fn tags_rule(seen: &Arc<Seen>) -> Rule {
    let seen = seen.clone();
    mock!(aws_sdk_ec2::Client::create_tags).then_compute_output(move |input| {
        seen.tags.lock().unwrap().push(input.clone());
        CreateTagsOutput::builder().build()
    })
}

fn client(rules: &[Rule]) -> aws_sdk_ec2::Client {
    let mut interceptor = MockResponseInterceptor::new().rule_mode(RuleMode::MatchAny);
    for rule in rules {
        interceptor = interceptor.with_rule(rule);
    }
    aws_sdk_ec2::Client::from_conf(
        aws_sdk_ec2::Config::builder()
            .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
            .region(aws_sdk_ec2::config::Region::new("us-west-2"))
            .credentials_provider(aws_sdk_ec2::config::Credentials::new(
                "test", "test", None, None, "test",
            ))
            .http_client(create_mock_http_client())
            .retry_config(aws_sdk_ec2::config::retry::RetryConfig::disabled())
            .interceptor(interceptor)
            .build(),
    )
}

/// A launch of one instance into `zone`, for the NodeClaim `claim`.
fn call(ec2: &aws_sdk_ec2::Client, zone: &str, claim: &str) -> FleetCall {
    let shared = ec2::Tag::builder().key("team").value("e2e").build();
    FleetCall {
        request: ec2
            .create_fleet()
            .r#type(ec2::FleetType::Instant)
            .target_capacity_specification(
                ec2::TargetCapacitySpecificationRequest::builder()
                    .total_target_capacity(1)
                    .default_target_capacity_type(ec2::DefaultTargetCapacityType::OnDemand)
                    .build(),
            )
            .launch_template_configs(
                ec2::FleetLaunchTemplateConfigRequest::builder()
                    .launch_template_specification(
                        ec2::FleetLaunchTemplateSpecificationRequest::builder()
                            .launch_template_name("my-template")
                            .version("$Latest")
                            .build(),
                    )
                    .overrides(
                        ec2::FleetLaunchTemplateOverridesRequest::builder()
                            .availability_zone(zone)
                            .build(),
                    )
                    .build(),
            )
            .tag_specifications(
                ec2::TagSpecification::builder()
                    .resource_type(ec2::ResourceType::Instance)
                    .tags(shared)
                    .build(),
            ),
        own_tags: BTreeMap::from([("karpenter.sh/nodeclaim".to_owned(), claim.to_owned())]),
    }
}

#[derive(Debug, Default)]
struct Recorded {
    windows: Mutex<usize>,
    sizes: Mutex<Vec<usize>>,
}

impl BatchObserver for Recorded {
    fn window_closed(&self, batcher: &'static str, _open_for: Duration) {
        assert_eq!(batcher, BATCHER);
        *self.windows.lock().unwrap() += 1;
    }
    fn call_made(&self, _batcher: &'static str, requests: usize) {
        self.sizes.lock().unwrap().push(requests);
    }
}

/// Karpenter's windows, the idle one wider.
fn settings() -> FleetBatchSettings {
    FleetBatchSettings {
        idle: Duration::from_millis(200),
        ..FleetBatchSettings::default()
    }
}

/// Waits (`polls` × 50 ms at most) until `n` CreateTags calls were seen.
async fn tags_seen(seen: &Seen, n: usize, polls: usize) -> Vec<CreateTagsInput> {
    for _ in 0..polls {
        if seen.tags.lock().unwrap().len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    seen.tags.lock().unwrap().clone()
}

fn batcher(ec2: &aws_sdk_ec2::Client, settings: FleetBatchSettings) -> Arc<FleetBatcher> {
    Arc::new(FleetBatcher::start(
        ec2.clone(),
        settings,
        Duration::from_secs(30),
        Arc::new(ApiBudget::new(Default::default())),
    ))
}

/// Launches `zones.len()` instances at once, the n-th into `zones[n]` for claim `claim-n`.
async fn burst(
    batcher: &Arc<FleetBatcher>,
    ec2: &aws_sdk_ec2::Client,
    zones: &[&str],
) -> Vec<Answer> {
    let mut launches = tokio::task::JoinSet::new();
    for (n, zone) in zones.iter().enumerate() {
        let (batcher, call) = (batcher.clone(), call(ec2, zone, &format!("claim-{n}")));
        launches.spawn(async move { (n, batcher.launch(call).await) });
    }
    let mut answers: Vec<(usize, Answer)> = launches.join_all().await;
    answers.sort_by_key(|(n, _)| *n);
    answers.into_iter().map(|(_, a)| a).collect()
}

fn instance_ids(answers: &[Answer]) -> Vec<Vec<String>> {
    answers
        .iter()
        .map(|a| {
            a.as_ref()
                .unwrap()
                .instances()
                .iter()
                .flat_map(|i| i.instance_ids().to_vec())
                .collect()
        })
        .collect()
}

/// "should batch the same inputs into a single call"; and each instance is tagged with its caller's claim.
#[tokio::test]
async fn same_inputs_are_one_call_for_as_many_instances() {
    let seen = Arc::new(Seen::default());
    let ec2 = client(&[fleet_rule(&seen, i32::MAX, vec![]), tags_rule(&seen)]);
    let observer = Arc::new(Recorded::default());
    let settings = FleetBatchSettings {
        observer: Some(observer.clone()),
        ..settings()
    };
    let answers = burst(&batcher(&ec2, settings), &ec2, &["us-east-1a"; 5]).await;
    let ids = instance_ids(&answers);
    assert!(ids.iter().all(|i| i.len() == 1), "{ids:?}");
    let mut distinct: Vec<_> = ids.concat();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 5);
    let fleets = seen.fleets.lock().unwrap().clone();
    assert_eq!(fleets.len(), 1);
    assert_eq!(capacity(&fleets[0]), 5);
    // The shared tags only: the claims' tags differ.
    let tagged: Vec<_> = fleets[0].tag_specifications()[0]
        .tags()
        .iter()
        .filter_map(|t| t.key())
        .collect();
    assert_eq!(tagged, ["team"]);
    let tags = tags_seen(&seen, 5, 100).await;
    assert_eq!(tags.len(), 5);
    for (n, answer) in answers.iter().enumerate() {
        let id = first_instance(answer.as_ref().unwrap()).unwrap();
        let input = tags.iter().find(|t| t.resources() == [id.clone()]).unwrap();
        assert_eq!(input.tags()[0].value(), Some(format!("claim-{n}").as_str()));
    }
    assert_eq!(*observer.windows.lock().unwrap(), 1);
    assert_eq!(*observer.sizes.lock().unwrap(), [5]);
}

/// "should batch different inputs into multiple calls".
#[tokio::test]
async fn different_inputs_are_separate_calls() {
    let seen = Arc::new(Seen::default());
    let ec2 = client(&[fleet_rule(&seen, i32::MAX, vec![]), tags_rule(&seen)]);
    let zones = [
        "us-east-1a",
        "us-east-1a",
        "us-east-1a",
        "us-east-1b",
        "us-east-1a",
    ];
    let answers = burst(&batcher(&ec2, settings()), &ec2, &zones).await;
    assert!(instance_ids(&answers).iter().all(|i| i.len() == 1));
    let mut calls: Vec<(String, i32)> = seen
        .fleets
        .lock()
        .unwrap()
        .iter()
        .map(|f| {
            let zone = f.launch_template_configs()[0].overrides()[0].availability_zone();
            (zone.unwrap().to_owned(), capacity(f))
        })
        .collect();
    calls.sort();
    assert_eq!(
        calls,
        [("us-east-1a".to_owned(), 4), ("us-east-1b".to_owned(), 1)]
    );
}

/// "should handle partial fulfillment": 3 instances for 5 callers; the last two get the errors alone, and
/// every caller sees them (so the ICE cache learns from each).
#[tokio::test]
async fn callers_past_the_last_instance_get_the_errors() {
    let seen = Arc::new(Seen::default());
    let ice = ec2::CreateFleetError::builder()
        .error_code("InsufficientInstanceCapacity")
        .error_message("no capacity")
        .build();
    let ec2 = client(&[fleet_rule(&seen, 3, vec![ice]), tags_rule(&seen)]);
    let answers = burst(&batcher(&ec2, settings()), &ec2, &["us-east-1a"; 5]).await;
    let launched: Vec<usize> = instance_ids(&answers).iter().map(Vec::len).collect();
    assert_eq!(launched, [1, 1, 1, 0, 0]);
    for answer in &answers {
        let errors = answer.as_ref().unwrap().errors();
        assert_eq!(errors[0].error_code(), Some("InsufficientInstanceCapacity"));
    }
    assert_eq!(seen.fleets.lock().unwrap().len(), 1);
}

/// Too few instances and no error: the callers left over still learn why.
#[test]
fn too_few_instances_without_errors_is_an_error() {
    let output = CreateFleetOutput::builder().build();
    let answers = fan_out(&output, 2);
    assert_eq!(answers.len(), 2);
    assert!(answers.iter().all(|a| a.instances().is_empty()));
    assert_eq!(answers[1].errors()[0].error_code(), Some("TooFewInstances"));
}

/// "should return any errors to callers": a failed call fails every caller of its batch.
#[tokio::test]
async fn a_failed_call_fails_every_caller() {
    let refused = mock!(aws_sdk_ec2::Client::create_fleet)
        .sequence()
        .http_status(503, Some("<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>slow down</Message></Error></Errors></Response>".into()))
        .repeatedly()
        .build();
    let ec2 = client(std::slice::from_ref(&refused));
    let answers = burst(&batcher(&ec2, settings()), &ec2, &["us-east-1a"; 3]).await;
    for answer in answers {
        let error = answer.unwrap_err();
        assert!(
            matches!(
                error,
                CloudError::Api {
                    operation: "CreateFleet",
                    ..
                }
            ),
            "{error}"
        );
    }
}

/// A window closes at `max_items` requests: the rest go into the next.
#[tokio::test]
async fn max_items_splits_a_burst() {
    let seen = Arc::new(Seen::default());
    let ec2 = client(&[fleet_rule(&seen, i32::MAX, vec![]), tags_rule(&seen)]);
    let settings = FleetBatchSettings {
        max_items: 3,
        ..settings()
    };
    let answers = burst(&batcher(&ec2, settings), &ec2, &["us-east-1a"; 7]).await;
    assert!(instance_ids(&answers).iter().all(|i| i.len() == 1));
    let mut sizes: Vec<i32> = seen.fleets.lock().unwrap().iter().map(capacity).collect();
    sizes.sort();
    assert_eq!(sizes, [1, 3, 3]);
}

/// A window closes `max` after it opened even while requests keep coming.
#[tokio::test]
async fn a_busy_window_closes_at_its_max() {
    let seen = Arc::new(Seen::default());
    let ec2 = client(&[fleet_rule(&seen, i32::MAX, vec![]), tags_rule(&seen)]);
    // The idle window never closes one here.
    let settings = FleetBatchSettings {
        idle: Duration::from_secs(10),
        max: Duration::from_millis(300),
        ..FleetBatchSettings::default()
    };
    let batcher = batcher(&ec2, settings);
    let mut launches = tokio::task::JoinSet::new();
    // One request every 10 ms for 60 requests: 0.6 s or more.
    for n in 0..60 {
        let (batcher, call) = (
            batcher.clone(),
            call(&ec2, "us-east-1a", &format!("claim-{n}")),
        );
        launches.spawn(async move { batcher.launch(call).await });
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(launches.join_all().await.iter().all(Result::is_ok));
    let sizes: Vec<i32> = seen.fleets.lock().unwrap().iter().map(capacity).collect();
    assert!(sizes.len() >= 2, "{sizes:?}");
    assert_eq!(sizes.iter().sum::<i32>(), 60);
}

/// A launch alone is the request it was, its own tags included, and needs no CreateTags.
#[tokio::test]
async fn a_lone_launch_carries_its_own_tags() {
    let seen = Arc::new(Seen::default());
    let ec2 = client(&[fleet_rule(&seen, i32::MAX, vec![]), tags_rule(&seen)]);
    let answers = burst(&batcher(&ec2, settings()), &ec2, &["us-east-1a"]).await;
    assert_eq!(instance_ids(&answers), [["i-0"]]);
    let fleets = seen.fleets.lock().unwrap().clone();
    assert_eq!(capacity(&fleets[0]), 1);
    let tagged: Vec<_> = fleets[0].tag_specifications()[0]
        .tags()
        .iter()
        .filter_map(|t| t.key())
        .collect();
    assert_eq!(tagged, ["team", "karpenter.sh/nodeclaim"]);
    assert!(tags_seen(&seen, 1, 4).await.is_empty());
}

/// Karpenter refuses a batched request for more than one instance; so does kerf.
#[tokio::test]
async fn a_request_for_more_than_one_instance_is_refused() {
    let ec2 = client(&[]);
    let mut call = call(&ec2, "us-east-1a", "claim-0");
    call.request = with_capacity(call.request, 2);
    let error = batcher(&ec2, settings()).launch(call).await.unwrap_err();
    assert!(matches!(error, CloudError::InvalidRequest(_)), "{error}");
}
