//! CreateFleet batching, after Karpenter's `CreateFleetBatcher` (aws/karpenter-provider-aws
//! `pkg/batcher/createfleet.go` on the generic `pkg/batcher/batcher.go`): launches of one instance whose requests
//! are equal in everything (templates, overrides, context, shared tags, capacity type and options) and arrive
//! within one window go out as one CreateFleet whose `TotalTargetCapacity` is their number; its instances are
//! handed back one per caller, in order, and the callers left without one get the call's errors.
//!
//! The window opens with the first request and closes after `idle` without a new one, after `max` in all, or at
//! `max_items` requests (Karpenter: 35 ms, 1 s, 1000). Every request of the window is then sent, grouped by
//! equality, each group in its own task; the calls are bounded by the call timeout, so a caller waits at most
//! `max` plus that.
//!
//! One thing differs from Karpenter: kerf tags each instance with its NodeClaim at launch (adoption after a
//! crash relies on it), and that tag differs per caller. A caller's own tags are therefore kept out of the
//! request: a call of one carries them in its tag specifications as before; a batched call goes out with the
//! shared tags only, and each instance is then tagged with its caller's own by CreateTags — also when that
//! caller went away, so that its next attempt adopts the instance. An instance left untagged (CreateTags failed,
//! or the process died in between) still carries the cluster's tags, and garbage collection terminates it after
//! its grace period.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_ec2::operation::create_fleet::builders::CreateFleetFluentBuilder;
use aws_sdk_ec2::operation::create_fleet::CreateFleetOutput;
use aws_sdk_ec2::types as ec2;
use kerf::cloud::CloudError;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::budget::ApiBudget;
use crate::errors::bounded;

/// The batcher's name in `karpenter_cloudprovider_batcher_*{batcher}`, Karpenter's.
pub const BATCHER: &str = "create_fleet";

/// Sees each window and each call of the batcher: how `karpenter_cloudprovider_batcher_batch_time_seconds`
/// and `karpenter_cloudprovider_batcher_batch_size` are fed without this crate knowing the metrics registry.
pub trait BatchObserver: Send + Sync + Debug {
    /// A window closed after being open `open_for` (from its first request).
    fn window_closed(&self, batcher: &'static str, open_for: Duration);
    /// One call carried `requests` requests.
    fn call_made(&self, batcher: &'static str, requests: usize);
}

/// How long requests are gathered before they are sent.
#[derive(Clone, Debug)]
pub struct FleetBatchSettings {
    /// The window closes once no request came for this long.
    pub idle: Duration,
    /// The window closes this long after it opened, however busy.
    pub max: Duration,
    /// The window closes at this many requests (at least 1).
    pub max_items: usize,
    pub observer: Option<Arc<dyn BatchObserver>>,
}

impl Default for FleetBatchSettings {
    /// Karpenter's `NewCreateFleetBatcher` options.
    fn default() -> Self {
        FleetBatchSettings {
            idle: Duration::from_millis(35),
            max: Duration::from_secs(1),
            max_items: 1_000,
            observer: None,
        }
    }
}

/// One caller's launch of one instance.
pub struct FleetCall {
    /// The request, with `TotalTargetCapacity` 1 and the tags every instance of a batch may share.
    pub request: CreateFleetFluentBuilder,
    /// The tags of this caller's instance alone (its NodeClaim).
    pub own_tags: BTreeMap<String, String>,
}

type Answer = Result<CreateFleetOutput, CloudError>;

struct Waiting {
    call: FleetCall,
    reply: oneshot::Sender<Answer>,
}

/// Gathers launches into CreateFleet calls; see the module's documentation.
pub struct FleetBatcher {
    queue: mpsc::Sender<Waiting>,
    /// How long a caller may wait for its answer: a full window ahead of its own (the queue holds one window's
    /// requests), its own, and the call's bound.
    longest_wait: Duration,
}

impl FleetBatcher {
    /// Starts the task that gathers and sends; it ends when the batcher is dropped.
    pub fn start(
        ec2: aws_sdk_ec2::Client,
        settings: FleetBatchSettings,
        call_timeout: Duration,
        budget: Arc<ApiBudget>,
    ) -> FleetBatcher {
        let max_items = settings.max_items.max(1);
        let (queue, requests) = mpsc::channel(max_items);
        let longest_wait = settings.max * 2 + call_timeout;
        tokio::spawn(gather(
            requests,
            Sender {
                ec2,
                call_timeout,
                observer: settings.observer.clone(),
                budget,
            },
            FleetBatchSettings {
                max_items,
                ..settings
            },
        ));
        FleetBatcher {
            queue,
            longest_wait,
        }
    }

    /// Launches one instance with the next batch: EC2's answer reduced to this caller's instance (or none) and
    /// the call's errors.
    pub async fn launch(&self, call: FleetCall) -> Answer {
        let capacity = call
            .request
            .as_input()
            .get_target_capacity_specification()
            .as_ref()
            .map(|t| t.total_target_capacity());
        if capacity != Some(Some(1)) {
            return Err(CloudError::InvalidRequest(format!(
                "a batched CreateFleet launches one instance, not {capacity:?}"
            )));
        }
        let (reply, answer) = oneshot::channel();
        let stopped = || CloudError::Api {
            operation: "CreateFleet",
            code: "BatcherStopped".into(),
            message: "the CreateFleet batcher is not running".into(),
        };
        let queued = async {
            self.queue
                .send(Waiting { call, reply })
                .await
                .map_err(|_| stopped())?;
            answer.await.map_err(|_| stopped())?
        };
        match tokio::time::timeout(self.longest_wait, queued).await {
            Ok(answer) => answer,
            Err(_) => Err(CloudError::Timeout {
                operation: "CreateFleet",
                after: self.longest_wait,
            }),
        }
    }
}

/// What a group's task needs to send it.
#[derive(Clone)]
struct Sender {
    ec2: aws_sdk_ec2::Client,
    call_timeout: Duration,
    observer: Option<Arc<dyn BatchObserver>>,
    budget: Arc<ApiBudget>,
}

/// Gathers windows of requests until every [`FleetBatcher`] handle is gone, and sends each group.
async fn gather(
    mut requests: mpsc::Receiver<Waiting>,
    sender: Sender,
    settings: FleetBatchSettings,
) {
    while let Some(first) = requests.recv().await {
        let opened = Instant::now();
        let closes = opened + settings.max;
        let mut window = vec![first];
        while window.len() < settings.max_items {
            let deadline = closes.min(Instant::now() + settings.idle);
            match tokio::time::timeout_at(deadline, requests.recv()).await {
                Ok(Some(next)) => window.push(next),
                Ok(None) | Err(_) => break,
            }
        }
        if let Some(observer) = &sender.observer {
            observer.window_closed(BATCHER, opened.elapsed());
        }
        for group in groups(window) {
            tokio::spawn(sender.clone().send(group));
        }
    }
}

/// The window's requests grouped by equal input, each group and its members in arrival order.
fn groups(window: Vec<Waiting>) -> Vec<Vec<Waiting>> {
    let mut groups: Vec<Vec<Waiting>> = Vec::new();
    for waiting in window {
        let input = waiting.call.request.as_input();
        match groups
            .iter_mut()
            .find(|g| g[0].call.request.as_input() == input)
        {
            Some(group) => group.push(waiting),
            None => groups.push(vec![waiting]),
        }
    }
    groups
}

impl Sender {
    /// One CreateFleet for the group, its answer handed out, then (for a batch) each instance tagged with its
    /// caller's own tags.
    async fn send(self, group: Vec<Waiting>) {
        if let Some(observer) = &self.observer {
            observer.call_made(BATCHER, group.len());
        }
        let request = match group.as_slice() {
            [alone] => with_tags(alone.call.request.clone(), &alone.call.own_tags),
            _ => with_capacity(group[0].call.request.clone(), group.len()),
        };
        let budgeted = Box::pin(async {
            self.budget.acquire("CreateFleet").await;
            request.send().await
        });
        let answer = bounded("CreateFleet", self.call_timeout, budgeted).await;
        let output = match answer {
            Ok(output) => output,
            Err(error) => {
                for waiting in group {
                    // A caller gone away launched nothing: there is nobody to tell.
                    let _ = waiting.reply.send(Err(error.clone()));
                }
                return;
            }
        };
        let batched = group.len() > 1;
        let answers = fan_out(&output, group.len());
        let mut to_tag = Vec::new();
        for (waiting, answer) in group.into_iter().zip(answers) {
            let instance = first_instance(&answer);
            if let (Err(_), Some(id)) = (waiting.reply.send(Ok(answer)), &instance) {
                tracing::warn!(instance = %id, tags = ?waiting.call.own_tags,
                    "the launch that asked for this instance went away: it is tagged for adoption, and \
                     garbage collection terminates it if no NodeClaim takes it");
            }
            if batched {
                to_tag.extend(instance.map(|id| (id, waiting.call.own_tags)));
            }
        }
        // One at a time: CreateTags shares EC2's mutating-call rate limit with CreateFleet.
        for (id, tags) in to_tag {
            let tag = self
                .ec2
                .create_tags()
                .resources(&id)
                .set_tags(Some(ec2_tags(&tags)));
            let budgeted = Box::pin(async {
                self.budget.acquire("CreateTags").await;
                tag.send().await
            });
            if let Err(error) = bounded("CreateTags", self.call_timeout, budgeted).await {
                tracing::warn!(instance = %id, %error,
                    "could not tag a batched instance with its NodeClaim: garbage collection terminates it \
                     unless the claim records it");
            }
        }
    }
}

/// The first instance ID of an answer.
fn first_instance(answer: &CreateFleetOutput) -> Option<String> {
    answer
        .instances()
        .iter()
        .find_map(|i| i.instance_ids().first().cloned())
}

/// EC2's answer to a call for `callers` instances, one per caller: the n-th instance ID (with its pool) and the
/// call's errors; callers past the last instance get the errors alone (createfleet.go's partial fulfilment).
fn fan_out(output: &CreateFleetOutput, callers: usize) -> Vec<CreateFleetOutput> {
    let mut errors = output.errors().to_vec();
    let launched: Vec<ec2::CreateFleetInstance> = output
        .instances()
        .iter()
        .flat_map(|pool| {
            pool.instance_ids().iter().map(|id| {
                ec2::CreateFleetInstance::builder()
                    .instance_ids(id)
                    .set_instance_type(pool.instance_type().cloned())
                    .set_launch_template_and_overrides(
                        pool.launch_template_and_overrides().cloned(),
                    )
                    .set_lifecycle(pool.lifecycle().cloned())
                    .set_platform(pool.platform().cloned())
                    .build()
            })
        })
        .collect();
    if launched.len() > callers {
        let extra: Vec<_> = launched[callers..]
            .iter()
            .filter_map(|i| i.instance_ids().first())
            .collect();
        tracing::warn!(
            ?extra,
            "CreateFleet launched more instances than asked: garbage collection terminates them"
        );
    }
    if launched.len() < callers && errors.is_empty() {
        errors.push(
            ec2::CreateFleetError::builder()
                .error_code("TooFewInstances")
                .error_message(format!(
                    "CreateFleet launched {} of {callers} instances and gave no error",
                    launched.len()
                ))
                .build(),
        );
    }
    let mut launched = launched.into_iter();
    (0..callers)
        .map(|_| {
            CreateFleetOutput::builder()
                .set_fleet_id(output.fleet_id().map(str::to_owned))
                .set_errors(Some(errors.clone()))
                .set_instances(launched.next().map(|i| vec![i]))
                .build()
        })
        .collect()
}

/// The request for `count` instances.
fn with_capacity(request: CreateFleetFluentBuilder, count: usize) -> CreateFleetFluentBuilder {
    let Some(target) = request
        .as_input()
        .get_target_capacity_specification()
        .clone()
    else {
        return request;
    };
    let count = i32::try_from(count).unwrap_or(i32::MAX);
    request.target_capacity_specification(
        ec2::TargetCapacitySpecificationRequest::builder()
            .total_target_capacity(count)
            .set_on_demand_target_capacity(target.on_demand_target_capacity())
            .set_spot_target_capacity(target.spot_target_capacity())
            .set_default_target_capacity_type(target.default_target_capacity_type().cloned())
            .set_target_capacity_unit_type(target.target_capacity_unit_type().cloned())
            .build(),
    )
}

/// The request with `own` added to each of its tag specifications.
fn with_tags(
    request: CreateFleetFluentBuilder,
    own: &BTreeMap<String, String>,
) -> CreateFleetFluentBuilder {
    if own.is_empty() {
        return request;
    }
    let specifications = request
        .as_input()
        .get_tag_specifications()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|spec| {
            let mut tags = spec.tags().to_vec();
            tags.extend(ec2_tags(own));
            ec2::TagSpecification::builder()
                .set_resource_type(spec.resource_type().cloned())
                .set_tags(Some(tags))
                .build()
        })
        .collect();
    request.set_tag_specifications(Some(specifications))
}

fn ec2_tags(tags: &BTreeMap<String, String>) -> Vec<ec2::Tag> {
    tags.iter()
        .map(|(k, v)| ec2::Tag::builder().key(k).value(v).build())
        .collect()
}

/// Translations of aws/karpenter-provider-aws `pkg/batcher/createfleet_test.go` ("CreateFleet Batching"), with
/// EC2 answered by `aws-smithy-mocks`. On the real clock (tokio's `test-util` would rebuild the dependency tree
/// for these tests alone): the launches of a burst are spawned together on the test's one thread, so they are
/// queued before the batcher's timers are looked at, and the windows are wide enough for a loaded machine.
#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::operation::create_fleet::CreateFleetInput;
    use aws_sdk_ec2::operation::create_tags::{CreateTagsInput, CreateTagsOutput};
    use aws_smithy_mocks::{
        create_mock_http_client, mock, MockResponseInterceptor, Rule, RuleMode,
    };
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
}
