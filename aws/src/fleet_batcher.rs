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
use kerf_core::cloud::CloudError;
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

#[cfg(test)]
mod tests;
