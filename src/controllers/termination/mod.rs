//! Termination (controller-behaviour.md §4): a NodeClaim being deleted has its Node tainted `karpenter.sh/disrupted`,
//! drained through the eviction API (PDBs honoured, `terminationGracePeriod` enforced), its instance
//! terminated and waited for, the Node deleted, and only then its finalizer removed. A kerf Node deleted by
//! someone else deletes its claim, which then goes the same way.
//!
//! Between the drain and the instance's termination, the VolumeAttachments of the Node are waited for
//! ([`volumes`]); the claim's `Drained`, `VolumesDetached` and `InstanceTerminating` conditions tell how far it
//! got ([`progress`]). What a pass does to the Node (taint, evictions, the volume wait) is [`node`]'s; the claim's
//! termination deadline is [`deadline`]'s.
//!
//! Two kube-runtime `Controller`s: one over NodeClaims, one over Nodes. Both only act on objects being
//! deleted that still carry `karpenter.sh/termination`. VolumeAttachments are watched by a reflector of their
//! own (nothing else reads them).

pub mod drain;
pub mod progress;
pub mod volumes;

mod deadline;
mod node;

use super::kit::backoff::{key_of, TERMINATION};
use super::kit::calls::{self, ReconcileError, TERMINATION_FINALIZER};
use super::metrics::NodePoolLabels;
use super::nodeclaim::registration::node_with_provider_id;
use super::{Context, Error};
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::cloud::metered::carried;
use crate::cloud::{CloudError, CloudProvider, TAG_NODECLAIM};
use crate::engine::repair::rfc3339_seconds;
use crate::kube::eviction::Evictor;
use ::kube::api::Api;
use ::kube::runtime::controller::{Action, Controller};
use ::kube::runtime::reflector::{self, Store};
use ::kube::runtime::{watcher, WatchStreamExt};
use ::kube::Resource;
use deadline::{deadline, stamp_deadline};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::jiff::Timestamp;
use node::{await_volumes, drain_node};
use progress::{Next, Progress};
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Reason of the Event that tells when a claim's pods will be deleted whatever their PDBs say.
const TERMINATION_GRACE_PERIOD_EXPIRING: &str = "TerminationGracePeriodExpiring";

/// While a drain is under way (Karpenter requeues every second).
const DRAIN_RECHECK: Duration = Duration::from_secs(2);
/// While the instance shuts down (Karpenter polls every 5 s).
const INSTANCE_RECHECK: Duration = Duration::from_secs(5);

/// `FailedDraining` and `AwaitingVolumeDetachment` are published at most this often per Node (Karpenter dedupes
/// Events for 2 minutes).
const NODE_EVENT_EVERY: Duration = Duration::from_secs(120);

struct Termination<C> {
    ctx: Arc<Context<C>>,
    evictor: Evictor,
    volume_attachments: Store<VolumeAttachment>,
    /// When each Node last got an Event, by reason and Node name.
    node_events: Mutex<HashMap<(&'static str, String), SystemTime>>,
}

impl<C> Termination<C> {
    /// Whether `node` is due an Event for `reason` at `now` (and notes that it gets one).
    fn node_event_due(&self, reason: &'static str, node: &str, now: SystemTime) -> bool {
        let mut last = self
            .node_events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        last.retain(|_, at| now.duration_since(*at).unwrap_or_default() < NODE_EVENT_EVERY);
        let key = (reason, node.to_owned());
        if last.contains_key(&key) {
            return false;
        }
        last.insert(key, now);
        true
    }
}

pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    let evictor = Evictor::connect()
        .await
        .map_err(|e| Error::Invalid(format!("pod evictions: {e}")))?;
    let (volume_attachments, writer) = reflector::store();
    let attachments = reflector::reflector(
        writer,
        watcher(
            Api::<VolumeAttachment>::all(ctx.client.clone()),
            watcher::Config::default(),
        )
        .default_backoff(),
    )
    .for_each(|event| async move {
        if let Err(error) = event {
            tracing::warn!(%error, "watching VolumeAttachments failed; retrying with backoff");
        }
    });
    let termination = Arc::new(Termination {
        ctx: ctx.clone(),
        evictor,
        volume_attachments,
        node_events: Mutex::new(HashMap::new()),
    });
    let follow = &ctx.state.follow;
    let claims =
        Controller::for_shared_stream(follow.node_claims.objects(), ctx.state.node_claims.clone())
            .run(
                |claim, t| {
                    carried(async move {
                        let key = key_of(TERMINATION, claim.as_ref());
                        t.ctx
                            .backoff
                            .track(&key, terminate_claim(claim, t.clone()))
                            .await
                    })
                },
                error_policy,
                termination.clone(),
            )
            .for_each(|_| async {});
    let nodes = Controller::for_shared_stream(follow.nodes.objects(), ctx.state.nodes.clone())
        .run(
            |node, t| {
                carried(async move {
                    let key = key_of(TERMINATION, node.as_ref());
                    t.ctx.backoff.track(&key, node_deleted(node, &t.ctx)).await
                })
            },
            error_policy,
            termination,
        )
        .for_each(|_| async {});
    futures::join!(claims, nodes, attachments);
    Ok(())
}

fn error_policy<K: Resource<DynamicType = ()>, C>(
    object: Arc<K>,
    error: &ReconcileError,
    t: Arc<Termination<C>>,
) -> Action {
    let retry_in = t.ctx.backoff.failed(&key_of(TERMINATION, object.as_ref()));
    tracing::warn!(name = ?object.meta().name, %error, ?retry_in, "termination failed; retrying");
    Action::requeue(retry_in)
}

fn terminating<K: Resource>(object: &K) -> bool {
    let meta = object.meta();
    meta.deletion_timestamp.is_some()
        && meta
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == TERMINATION_FINALIZER)
}

fn label(labels: Option<&std::collections::BTreeMap<String, String>>, key: &str) -> String {
    labels.and_then(|l| l.get(key)).cloned().unwrap_or_default()
}

/// A kerf Node being deleted: its claim is deleted (and terminates it); a Node without a claim has its
/// instance terminated and is let go.
#[tracing::instrument(skip_all, fields(node = node.metadata.name.as_deref()))]
async fn node_deleted<C: CloudProvider>(
    node: Arc<Node>,
    ctx: &Context<C>,
) -> Result<Action, ReconcileError> {
    if !terminating(node.as_ref()) {
        return Ok(Action::await_change());
    }
    let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.clone());
    let claim = provider_id.as_deref().and_then(|id| {
        ctx.state
            .node_claims
            .state()
            .into_iter()
            .find(|c| c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(id))
    });
    match claim {
        Some(claim) if claim.metadata.deletion_timestamp.is_none() => {
            tracing::info!(nodeclaim = ?claim.metadata.name, "node deleted; deleting its nodeclaim");
            let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
            calls::delete(&claims, &calls::name(claim.as_ref())?).await?;
            Ok(Action::requeue(INSTANCE_RECHECK))
        }
        // Its claim's termination releases it.
        Some(_) => Ok(Action::requeue(INSTANCE_RECHECK)),
        None => {
            if let Some(id) = provider_id.as_deref() {
                if terminate_instance(ctx, id).await? == InstanceExit::Requested {
                    return Ok(Action::requeue(INSTANCE_RECHECK));
                }
            }
            let nodes: Api<Node> = Api::all(ctx.client.clone());
            calls::remove_finalizer(&nodes, node.as_ref(), TERMINATION_FINALIZER).await?;
            tracing::info!("deleted node");
            Ok(Action::await_change())
        }
    }
}

/// Where an instance is on its way out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InstanceExit {
    /// Terminated or shutting down (or never there).
    Gone,
    /// It was running: its termination has just been asked for.
    Requested,
}

/// Asks for the instance's termination unless it is gone already.
async fn terminate_instance<C: CloudProvider>(
    ctx: &Context<C>,
    provider_id: &str,
) -> Result<InstanceExit, ReconcileError> {
    match ctx.cloud.get(provider_id).await {
        Err(CloudError::NotFound { .. }) => Ok(InstanceExit::Gone),
        Err(e) => Err(e.into()),
        Ok(_) => match ctx.cloud.delete(provider_id).await {
            Err(CloudError::NotFound { .. }) => Ok(InstanceExit::Gone),
            Err(e) => Err(e.into()),
            Ok(()) => {
                tracing::info!(provider_id, "terminating instance");
                ctx.metrics.termination.instance_terminating(provider_id);
                Ok(InstanceExit::Requested)
            }
        },
    }
}

#[tracing::instrument(skip_all, fields(nodeclaim = claim.metadata.name.as_deref()))]
async fn terminate_claim<C: CloudProvider>(
    claim: Arc<NodeClaim>,
    t: Arc<Termination<C>>,
) -> Result<Action, ReconcileError> {
    if !terminating(claim.as_ref()) {
        return Ok(Action::await_change());
    }
    let ctx = &t.ctx;
    let now = Timestamp::try_from(ctx.clock.now())
        .map_err(|e| ReconcileError::Invalid(format!("the clock is out of range: {e}")))?;
    stamp_deadline(ctx, &claim).await?;
    let provider_id = claim.status.as_ref().and_then(|s| s.provider_id.clone());
    let node = provider_id
        .as_deref()
        .and_then(|id| node_with_provider_id(&ctx.state.nodes.state(), id));
    if let (Some(node), Some(deadline)) = (&node, deadline(&claim)) {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        if t.node_event_due(TERMINATION_GRACE_PERIOD_EXPIRING, name, ctx.clock.now()) {
            let stamp = rfc3339_seconds(deadline);
            ctx.events
                .warning(
                    node.as_ref(),
                    TERMINATION_GRACE_PERIOD_EXPIRING,
                    format!("All pods will be deleted by {stamp}"),
                )
                .await;
        }
    }
    let pool = label(claim.metadata.labels.as_ref(), labels::NODEPOOL);

    let mut progress = Progress::of(&claim, now);
    let stage = advance(
        &t,
        &claim,
        node.as_deref(),
        provider_id,
        &pool,
        &mut progress,
        now,
    )
    .await;
    // What the pass found is written even when a later step failed (as Karpenter patches before returning).
    if let Some(conditions) = progress.changed() {
        if !write_conditions(ctx, &claim, conditions).await? {
            return Ok(Action::requeue(progress::RECHECK));
        }
        if let (true, Some(node)) = (progress.drained_now(), &node) {
            tracing::info!(node = ?node.metadata.name, "drained node");
            ctx.metrics
                .termination
                .nodes_drained
                .get_or_create(&NodePoolLabels {
                    nodepool: pool.clone(),
                })
                .inc();
        }
    }
    let provider_ids = match stage? {
        Stage::Wait(wait) => return Ok(Action::requeue(wait)),
        Stage::InstancesGone(ids) => ids,
    };
    if let Some(node) = &node {
        let nodes: Api<Node> = Api::all(ctx.client.clone());
        let name = calls::name(node.as_ref())?;
        if node.metadata.deletion_timestamp.is_none() {
            calls::delete(&nodes, &name).await?;
        }
        calls::remove_finalizer(&nodes, node.as_ref(), TERMINATION_FINALIZER).await?;
        tracing::info!(node = %name, "deleted node");
        ctx.metrics.termination.node_terminated(node, &pool, now);
    }
    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    calls::remove_finalizer(&claims, claim.as_ref(), TERMINATION_FINALIZER).await?;
    tracing::info!(provider_id = ?provider_ids.first(), "deleted nodeclaim");
    ctx.metrics.termination.claim_terminated(&claim, now);
    Ok(Action::await_change())
}

/// Where a termination pass stopped.
enum Stage {
    /// Come back after this long.
    Wait(Duration),
    /// Every instance of the claim is gone (these were asked to terminate): the Node and the claim may go.
    InstancesGone(Vec<String>),
}

/// One termination pass up to where it has to wait: the Node (if any) drained and its volumes detached, then
/// the claim's instances terminated. `progress` records how far it got.
async fn advance<C: CloudProvider>(
    t: &Termination<C>,
    claim: &NodeClaim,
    node: Option<&Node>,
    provider_id: Option<String>,
    pool: &str,
    progress: &mut Progress,
    now: Timestamp,
) -> Result<Stage, ReconcileError> {
    let ctx = &t.ctx;
    if let Some(node) = node {
        progress.draining();
        let drained = drain_node(t, claim, node, now).await?;
        if let Next::Wait(wait) = progress.after_drain(drained, DRAIN_RECHECK) {
            return Ok(Stage::Wait(wait));
        }
        if let Next::Wait(wait) = await_volumes(t, claim, node, progress, now).await? {
            return Ok(Stage::Wait(wait));
        }
    }
    // Launched instances: the one in the status, or (a crash before the status write) any tagged for it.
    let provider_ids = match provider_id {
        Some(id) => vec![id],
        None => {
            let name = calls::name(claim)?;
            ctx.cloud
                .list()
                .await?
                .into_iter()
                .filter(|i| i.tags.get(TAG_NODECLAIM) == Some(&name))
                .map(|i| i.provider_id)
                .collect()
        }
    };
    let mut all_gone = true;
    for id in &provider_ids {
        all_gone &= terminate_instance(ctx, id).await? == InstanceExit::Gone;
        progress.instance_terminating();
    }
    if !all_gone {
        return Ok(Stage::Wait(INSTANCE_RECHECK));
    }
    for id in &provider_ids {
        ctx.metrics.termination.instance_gone(id, pool);
    }
    Ok(Stage::InstancesGone(provider_ids))
}

/// Writes the claim's `conditions`, tied to the version they were read from (the list is written whole, and
/// other controllers write conditions of their own). False when the claim changed meanwhile: the next pass
/// looks again.
async fn write_conditions<C>(
    ctx: &Context<C>,
    claim: &NodeClaim,
    conditions: &[crate::api::condition::Condition],
) -> Result<bool, ReconcileError> {
    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    let patch = json!({
        "metadata": {"resourceVersion": claim.metadata.resource_version},
        "status": {"conditions": conditions},
    });
    let (name, params) = (calls::name(claim)?, ::kube::api::PatchParams::default());
    let patch = ::kube::api::Patch::Merge(&patch);
    match calls::timed(
        "patching the status",
        claims.patch_status(&name, &params, &patch),
    )
    .await
    {
        Ok(_) => Ok(true),
        Err(ReconcileError::Kube(::kube::Error::Api(s))) if s.code == 409 => Ok(false),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests;
