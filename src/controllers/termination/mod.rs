//! Termination (controller-behaviour.md §4): a NodeClaim being deleted has its Node tainted `karpenter.sh/disrupted`,
//! drained through the eviction API (PDBs honoured, `terminationGracePeriod` enforced), its instance
//! terminated and waited for, the Node deleted, and only then its finalizer removed. A kerf Node deleted by
//! someone else deletes its claim, which then goes the same way.
//!
//! Between the drain and the instance's termination, the VolumeAttachments of the Node are waited for
//! ([`volumes`]); the claim's `Drained`, `VolumesDetached` and `InstanceTerminating` conditions tell how far it
//! got ([`progress`]).
//!
//! Two kube-runtime `Controller`s: one over NodeClaims, one over Nodes. Both only act on objects being
//! deleted that still carry `karpenter.sh/termination`. VolumeAttachments are watched by a reflector of their
//! own (nothing else reads them).

pub mod drain;
pub mod progress;
pub mod volumes;

use super::backoff::{key_of, TERMINATION};
use super::metrics::{CodeLabels, NodePoolLabels, ReasonLabels};
use super::nodeclaim::calls::{self, ReconcileError, TERMINATION_FINALIZER};
use super::nodeclaim::registration::node_with_provider_id;
use super::{Context, Error};
use crate::api::labels;
use crate::api::nodeclaim::{NodeClaim, TERMINATION_TIMESTAMP};
use crate::cloud::{CloudError, CloudProvider, TAG_NODECLAIM};
use crate::disruption::{parse_go_duration, DISRUPTED_TAINT};
use crate::engine::repair::rfc3339_seconds;
use crate::kube::eviction::{EvictionOutcome, Evictor, MULTIPLE_PDBS_MESSAGE};
use ::kube::api::{Api, DeleteParams};
use ::kube::runtime::controller::{Action, Controller};
use ::kube::runtime::reflector::{self, ObjectRef, Store};
use ::kube::runtime::{watcher, WatchStreamExt};
use ::kube::Resource;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::jiff::Timestamp;
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
/// At most this many evictions are in flight for one node.
const EVICTION_CONCURRENCY: usize = 8;

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
                |claim, t| async move {
                    let key = key_of(TERMINATION, claim.as_ref());
                    t.ctx
                        .backoff
                        .track(&key, terminate_claim(claim, t.clone()))
                        .await
                },
                error_policy,
                termination.clone(),
            )
            .for_each(|_| async {});
    let nodes = Controller::for_shared_stream(follow.nodes.objects(), ctx.state.nodes.clone())
        .run(
            |node, t| async move {
                let key = key_of(TERMINATION, node.as_ref());
                t.ctx.backoff.track(&key, node_deleted(node, &t.ctx)).await
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

/// The claim's termination deadline: its `karpenter.sh/nodeclaim-termination-timestamp` annotation (node repair
/// sets it to the moment it decided; this controller to the grace deadline), else its deletion time plus
/// `terminationGracePeriod`, if it has one. An annotation that is not a time is passed over (Karpenter fails the
/// termination on it until someone fixes it by hand).
fn deadline(claim: &NodeClaim) -> Option<Timestamp> {
    termination_annotation(claim)
        .and_then(|t| t.parse::<Timestamp>().ok())
        .or_else(|| grace_deadline(claim))
}

fn termination_annotation(claim: &NodeClaim) -> Option<&str> {
    claim
        .metadata
        .annotations
        .as_ref()?
        .get(TERMINATION_TIMESTAMP)
        .map(String::as_str)
}

/// The claim's deletion time plus its `terminationGracePeriod`.
fn grace_deadline(claim: &NodeClaim) -> Option<Timestamp> {
    let deleted = claim.metadata.deletion_timestamp.as_ref()?.0;
    let grace = parse_go_duration(claim.spec.termination_grace_period.as_deref()?)?;
    deleted.checked_add(grace).ok()
}

/// Stamps a claim being deleted that has a `terminationGracePeriod` with its deadline, so users (and node repair,
/// which may bring it forward) see it, and says so in a `TerminationGracePeriodExpiring` Event, as Karpenter's
/// lifecycle controller does. Guarded by the claim's `resourceVersion`: a concurrent stamp (node repair's) wins.
async fn stamp_deadline<C>(ctx: &Context<C>, claim: &NodeClaim) -> Result<(), ReconcileError> {
    if termination_annotation(claim).is_some() {
        return Ok(());
    }
    let Some(deadline) = grace_deadline(claim) else {
        return Ok(());
    };
    let stamp = rfc3339_seconds(deadline);
    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    let patch = json!({"metadata": {
        "resourceVersion": claim.metadata.resource_version,
        "annotations": {TERMINATION_TIMESTAMP: stamp},
    }});
    match calls::merge_patch(&claims, &calls::name(claim)?, patch).await {
        Err(ReconcileError::Kube(::kube::Error::Api(e))) if e.code == 409 || e.code == 404 => {
            return Ok(())
        }
        other => other?,
    }
    tracing::info!(annotation = TERMINATION_TIMESTAMP, value = %stamp, "annotated nodeclaim");
    ctx.events
        .warning(
            claim,
            TERMINATION_GRACE_PERIOD_EXPIRING,
            format!("All pods will be deleted by {stamp}"),
        )
        .await;
    Ok(())
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

/// Waits while VolumeAttachments of volumes the drain moved hold `node` (until the claim's termination grace
/// period runs out), publishing `AwaitingVolumeDetachment` on it.
async fn await_volumes<C>(
    t: &Termination<C>,
    claim: &NodeClaim,
    node: &Node,
    progress: &mut Progress,
    now: Timestamp,
) -> Result<Next, ReconcileError> {
    let ctx = &t.ctx;
    // Until the attachments are listed, none can be ruled out.
    if t.volume_attachments
        .wait_until_ready()
        .now_or_never()
        .is_none()
    {
        tracing::debug!("waiting for the VolumeAttachments to be listed");
        return Ok(Next::Wait(progress::RECHECK));
    }
    let node_name = calls::name(node)?;
    let attachments = t.volume_attachments.state();
    let pods = pods_on(ctx, &node_name);
    let claims = &ctx.state.persistent_volume_claims;
    let claim_of =
        |namespace: &str, name: &str| claims.get(&ObjectRef::new(name).within(namespace));
    let pending = volumes::pending(&node_name, &attachments, &pods, claim_of, now);
    let Some(held) = progress.after_volumes(pending, deadline(claim)) else {
        return Ok(Next::Continue);
    };
    let reason = "AwaitingVolumeDetachment";
    if t.node_event_due(reason, &node_name, ctx.clock.now()) {
        ctx.events
            .normal(node, reason, volumes::awaiting_message(&held))
            .await;
    }
    Ok(Next::Wait(progress::RECHECK))
}

/// The pods bound to Node `node`.
fn pods_on<C>(ctx: &Context<C>, node: &str) -> Vec<Arc<Pod>> {
    ctx.state
        .pods
        .state()
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .collect()
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

/// One drain pass over `node`: taint it, evict or delete what the pass says. True once drained.
async fn drain_node<C: CloudProvider>(
    t: &Termination<C>,
    claim: &NodeClaim,
    node: &Node,
    now: Timestamp,
) -> Result<bool, ReconcileError> {
    let ctx = &t.ctx;
    let node_name = calls::name(node)?;
    if let Some(patch) = disrupted_taint_patch(node) {
        let nodes: Api<Node> = Api::all(ctx.client.clone());
        calls::json_patch(&nodes, "tainting the node", &node_name, patch).await?;
        let note = format!("Disrupting NodeClaim {}: terminating", calls::name(claim)?);
        ctx.events
            .normal(claim, "DisruptionTerminating", note.clone())
            .await;
        ctx.events.normal(node, "DisruptionTerminating", note).await;
        // The next pass drains with the taint in place (no pod lands in between unnoticed).
        return Ok(false);
    }
    let pods = pods_on(ctx, &node_name);
    let pass = drain::drain_pass(&pods, now, deadline(claim));
    if pass.drained() {
        return Ok(true);
    }
    for (pod, grace) in &pass.delete {
        delete_at_deadline(ctx, pod, *grace).await?;
    }
    let outcomes: Vec<(Arc<Pod>, EvictionOutcome)> = futures::stream::iter(pass.evict)
        .map(|pod| async move {
            let meta = &pod.metadata;
            let outcome = t
                .evictor
                .evict(
                    meta.namespace.as_deref().unwrap_or("default"),
                    meta.name.as_deref().unwrap_or_default(),
                    meta.uid.as_deref(),
                )
                .await;
            (pod, outcome)
        })
        .buffer_unordered(EVICTION_CONCURRENCY)
        .collect()
        .await;
    let mut blocked = Vec::new();
    for (pod, outcome) in outcomes {
        let termination = &ctx.metrics.termination;
        termination
            .eviction_requests
            .get_or_create(&CodeLabels {
                code: outcome.code().to_string(),
            })
            .inc();
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        match outcome {
            EvictionOutcome::Evicted => {
                termination
                    .pods_drained
                    .get_or_create(&ReasonLabels {
                        reason: "evicted".into(),
                    })
                    .inc();
                ctx.events
                    .normal(
                        pod.as_ref(),
                        "Evicted",
                        format!("Evicted pod: draining Node {node_name}"),
                    )
                    .await;
            }
            EvictionOutcome::Gone { .. } => {}
            EvictionOutcome::Blocked { message } => blocked.push(format!("{key}: {message}")),
            // As refused as by one PDB, until one of its budgets goes: reported as Karpenter reports it.
            EvictionOutcome::Failed { message, .. } if message == MULTIPLE_PDBS_MESSAGE => {
                blocked.push(format!("{key}: eviction does not support multiple PDBs"))
            }
            EvictionOutcome::Failed { code, message } => {
                tracing::warn!(pod = %key, code, %message, "eviction failed; retrying");
            }
        }
    }
    if !blocked.is_empty() && t.node_event_due("FailedDraining", &node_name, ctx.clock.now()) {
        let note = format!("Failed to drain node, {}", blocked.join("; "));
        ctx.events.warning(node, "FailedDraining", note).await;
    }
    Ok(false)
}

/// The JSON patch setting `node`'s taints to `taints`, tested against the list it was computed from: a
/// concurrent change of the taints fails it instead of being lost, while the kubelet's status heartbeats (which
/// move the resourceVersion every few seconds) do not.
pub(crate) fn taints_patch(
    node: &Node,
    taints: Vec<k8s_openapi::api::core::v1::Taint>,
) -> serde_json::Value {
    let current = node.spec.as_ref().and_then(|s| s.taints.as_ref());
    json!([
        {"op": "test", "path": "/spec/taints", "value": current},
        {"op": "add", "path": "/spec/taints", "value": taints},
    ])
}

/// The patch adding `karpenter.sh/disrupted:NoSchedule` (replacing another effect on that key), or `None`
/// when the Node has it.
pub(crate) fn disrupted_taint_patch(node: &Node) -> Option<serde_json::Value> {
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if taints
        .iter()
        .any(|t| t.key == DISRUPTED_TAINT && t.effect == "NoSchedule")
    {
        return None;
    }
    let mut taints: Vec<_> = taints
        .into_iter()
        .filter(|t| t.key != DISRUPTED_TAINT)
        .collect();
    taints.push(k8s_openapi::api::core::v1::Taint {
        key: DISRUPTED_TAINT.into(),
        effect: "NoSchedule".into(),
        value: None,
        time_added: None,
    });
    Some(taints_patch(node, taints))
}

/// Deletes a pod the termination deadline leaves no time for, bypassing PDBs.
async fn delete_at_deadline<C>(
    ctx: &Context<C>,
    pod: &Pod,
    grace: i64,
) -> Result<(), ReconcileError> {
    let pods: Api<Pod> = Api::namespaced(
        ctx.client.clone(),
        pod.metadata.namespace.as_deref().unwrap_or("default"),
    );
    let name = calls::name(pod)?;
    let params = DeleteParams {
        grace_period_seconds: u32::try_from(grace).ok(),
        ..DeleteParams::default()
    };
    match calls::timed("deleting a pod", pods.delete(&name, &params)).await {
        Err(e) if e.is_not_found() => return Ok(()),
        other => {
            other?;
        }
    }
    ctx.metrics
        .termination
        .pods_drained
        .get_or_create(&ReasonLabels {
            reason: "termination_grace_period_elapsed".into(),
        })
        .inc();
    ctx.events
        .normal(
            pod,
            "Disrupted",
            format!("Deleted pod: the node's terminationGracePeriod ends in {grace}s"),
        )
        .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::sim::SimCloud;
    use crate::controllers::state::ClusterState;
    use crate::controllers::testkit::{self, apiserver, ApiServer, Exchange};
    use crate::kube::eviction::EvictionVersion;
    use serde_json::Value;

    const CLAIM: &str = "/apis/karpenter.sh/v1/nodeclaims/c";
    const MERGE_PATCH: &str = "application/merge-patch+json";
    const PROVIDER_ID: &str = "aws:///us-west-2a/i-0123456789abcdef0";

    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    /// A context over a scripted apiserver, an empty in-memory cloud and these objects.
    fn context(
        nodes: Vec<Node>,
        claims: Vec<NodeClaim>,
        pods: Vec<Pod>,
    ) -> (Context<SimCloud>, ApiServer) {
        let (client, server) = apiserver();
        let state = ClusterState::of(nodes, claims, pods);
        let ctx = testkit::context(client, SimCloud::new("test", Vec::new()), state, t0());
        (ctx, server)
    }

    fn claim_json(extra_metadata: Value) -> Value {
        let mut claim = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "resourceVersion": "7", "finalizers": [TERMINATION_FINALIZER]},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": [], "terminationGracePeriod": "1h30m"},
            "status": {"providerID": PROVIDER_ID},
        });
        for (key, value) in extra_metadata.as_object().into_iter().flatten() {
            claim["metadata"][key] = value.clone();
        }
        claim
    }

    fn claim(extra_metadata: Value) -> NodeClaim {
        serde_json::from_value(claim_json(extra_metadata)).expect("a nodeclaim")
    }

    fn deleting_claim() -> NodeClaim {
        claim(json!({"deletionTimestamp": "2026-11-23T00:00:00Z"}))
    }

    fn deleting_node() -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n", "deletionTimestamp": "2026-11-23T00:00:00Z",
                         "finalizers": [TERMINATION_FINALIZER]},
            "spec": {"providerID": PROVIDER_ID},
        }))
        .expect("a node")
    }

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
            "spec": {"containers": [], "nodeName": "n", "terminationGracePeriodSeconds": 600},
        }))
        .expect("a pod")
    }

    /// Karpenter's lifecycle "should annotate the node if the NodeClaim has a terminationGracePeriod": the claim
    /// gets its deadline, written only over the version read, and an Event says when the pods will go.
    #[tokio::test]
    async fn a_claim_with_a_grace_period_is_stamped_with_its_deadline_under_its_version() {
        let (ctx, mut server) = context(vec![], vec![], vec![]);
        let claim = deleting_claim();
        let script = vec![
            Exchange::patch(CLAIM)
                .content_type(MERGE_PATCH)
                .body(json!({"metadata": {
                    "resourceVersion": "7",
                    "annotations": {TERMINATION_TIMESTAMP: "2026-11-23T01:30:00Z"},
                }}))
                .answer(200, claim_json(json!({}))),
            testkit::event(
                TERMINATION_GRACE_PERIOD_EXPIRING,
                "All pods will be deleted by 2026-11-23T01:30:00Z",
            ),
        ];
        server
            .serve(script, stamp_deadline(&ctx, &claim))
            .await
            .expect("stamped");
    }

    /// Node repair may stamp an earlier deadline at the same time: its write wins (409), and this one is
    /// dropped without an error and without announcing a deadline that is not the claim's. A claim deleted
    /// meanwhile (404) is no error either.
    #[tokio::test]
    async fn a_deadline_stamp_that_loses_a_race_is_dropped_without_an_event() {
        let (ctx, mut server) = context(vec![], vec![], vec![]);
        let claim = deleting_claim();
        let script = vec![
            Exchange::patch(CLAIM).fail(409, "Conflict"),
            Exchange::patch(CLAIM).fail(404, "NotFound"),
        ];
        let (conflict, gone) = server
            .serve(script, async {
                (
                    stamp_deadline(&ctx, &claim).await,
                    stamp_deadline(&ctx, &claim).await,
                )
            })
            .await;
        conflict.expect("a lost race is not an error");
        gone.expect("a claim gone is not an error");
    }

    /// Karpenter's lifecycle "should not change the annotation if the NodeClaim has a terminationGracePeriod and
    /// the annotation already exists".
    #[tokio::test]
    async fn a_claim_that_has_a_deadline_is_not_stamped_again() {
        let (ctx, mut server) = context(vec![], vec![], vec![]);
        let claim = claim(json!({
            "deletionTimestamp": "2026-11-23T00:00:00Z",
            "annotations": {TERMINATION_TIMESTAMP: "2026-11-22T23:00:00Z"},
        }));
        server
            .serve(vec![], stamp_deadline(&ctx, &claim))
            .await
            .expect("nothing to do");
    }

    /// The termination conditions are written whole over the version read; when the claim moved on (409) or
    /// went (404) the pass looks again instead of failing, while any other error is retried with backoff.
    #[tokio::test]
    async fn conditions_refused_for_a_claim_that_moved_on_mean_look_again() {
        let (ctx, mut server) = context(vec![], vec![], vec![]);
        let claim = deleting_claim();
        let conditions: Vec<crate::api::condition::Condition> = serde_json::from_value(json!([{
            "type": "Drained", "status": "True", "reason": "Drained", "message": "",
            "lastTransitionTime": "2026-11-23T00:00:00Z",
        }]))
        .expect("conditions");
        let written = json!({
            "metadata": {"resourceVersion": "7"},
            "status": {"conditions": conditions},
        });
        let status = format!("{CLAIM}/status");
        let script = vec![
            Exchange::patch(&status)
                .content_type(MERGE_PATCH)
                .body(written)
                .answer(200, claim_json(json!({}))),
            Exchange::patch(&status).fail(409, "Conflict"),
            Exchange::patch(&status).fail(404, "NotFound"),
            Exchange::patch(&status).fail(500, "InternalError"),
        ];
        let outcomes = server
            .serve(script, async {
                let mut outcomes = Vec::new();
                for _ in 0..4 {
                    outcomes.push(write_conditions(&ctx, &claim, &conditions).await);
                }
                outcomes
            })
            .await;
        let outcomes: Vec<_> = outcomes.into_iter().map(|o| o.ok()).collect();
        assert_eq!(outcomes, [Some(true), Some(false), Some(false), None]);
    }

    /// Karpenter's terminator "should delete a pod with less than terminationGracePeriodSeconds remaining before
    /// nodeTerminationTime": deleted (not evicted, so PDBs do not hold it) with the grace that is left, counted
    /// and reported.
    #[tokio::test]
    async fn a_pod_out_of_time_is_deleted_with_the_grace_left_and_reported() {
        let (ctx, mut server) = context(vec![], vec![], vec![]);
        let script = vec![
            Exchange::delete("/api/v1/namespaces/ns/pods/p")
                .check(|seen| assert_eq!(seen.body["gracePeriodSeconds"], 540, "{}", seen.body))
                .answer(200, serde_json::to_value(pod()).expect("json")),
            testkit::namespaced_event("ns", "Disrupted"),
        ];
        server
            .serve(script, delete_at_deadline(&ctx, &pod(), 540))
            .await
            .expect("deleted");
        assert_eq!(forced_deletions(&ctx), 1);
    }

    /// Karpenter's terminator "should succeed with no event when the pod is not found", for the deletion at the
    /// deadline: a pod gone already is success, neither counted nor reported.
    #[tokio::test]
    async fn a_pod_gone_before_its_deadline_deletion_is_neither_counted_nor_reported() {
        let (ctx, mut server) = context(vec![], vec![], vec![]);
        let script = vec![Exchange::delete("/api/v1/namespaces/ns/pods/p").fail(404, "NotFound")];
        server
            .serve(script, delete_at_deadline(&ctx, &pod(), 1))
            .await
            .expect("a pod gone is success");
        assert_eq!(forced_deletions(&ctx), 0);
    }

    fn forced_deletions(ctx: &Context<SimCloud>) -> u64 {
        ctx.metrics
            .termination
            .pods_drained
            .get_or_create(&ReasonLabels {
                reason: "termination_grace_period_elapsed".into(),
            })
            .get()
    }

    /// Karpenter's node termination "should delete nodeclaims associated with nodes": a kerf Node deleted by
    /// someone else has its claim deleted, and waits for the claim's termination to release it.
    #[tokio::test]
    async fn a_deleted_node_deletes_its_claim_and_waits_for_it() {
        let (ctx, mut server) = context(vec![], vec![claim(json!({}))], vec![]);
        let script = vec![Exchange::delete(CLAIM).answer(
            200,
            claim_json(json!({"deletionTimestamp": "2026-11-23T00:00:00Z"})),
        )];
        let action = server
            .serve(script, node_deleted(Arc::new(deleting_node()), &ctx))
            .await
            .expect("the claim is deleted");
        assert_eq!(action, Action::requeue(INSTANCE_RECHECK));
    }

    /// Karpenter's node termination "should delete nodes without nodeclaims": with no claim and its instance
    /// gone, the Node's finalizer is removed, by index under a test of the list.
    #[tokio::test]
    async fn a_deleted_node_without_a_claim_or_instance_is_let_go() {
        let (ctx, mut server) = context(vec![], vec![], vec![]);
        let script = vec![Exchange::patch("/api/v1/nodes/n")
            .content_type("application/json-patch+json")
            .body(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": [TERMINATION_FINALIZER]},
                {"op": "remove", "path": "/metadata/finalizers/0"},
            ]))
            .answer(200, json!({"metadata": {"name": "n"}}))];
        let action = server
            .serve(script, node_deleted(Arc::new(deleting_node()), &ctx))
            .await
            .expect("let go");
        assert_eq!(action, Action::await_change());
    }

    const EVICT_P: &str = "/api/v1/namespaces/ns/pods/p/eviction";
    const BUDGET: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

    /// The controller's state around `ctx`, evicting (policy/v1) through the same scripted apiserver.
    fn termination(ctx: Context<SimCloud>) -> Termination<SimCloud> {
        Termination {
            evictor: Evictor::new(ctx.client.clone(), EvictionVersion::V1),
            ctx: Arc::new(ctx),
            volume_attachments: reflector::store().0,
            node_events: Mutex::new(HashMap::new()),
        }
    }

    /// Node `n` of the claim, tainted `karpenter.sh/disrupted` already (the drain evicts at once).
    fn tainted_node() -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "spec": {"providerID": PROVIDER_ID,
                     "taints": [{"key": DISRUPTED_TAINT, "effect": "NoSchedule"}]},
        }))
        .expect("a node")
    }

    /// A claim being deleted without a termination grace period: no deadline, nothing is deleted at one.
    fn ungraced_claim() -> NodeClaim {
        let mut claim = deleting_claim();
        claim.spec.termination_grace_period = None;
        claim
    }

    fn pod_named(name: &str, uid: &str) -> Pod {
        let mut pod = pod();
        pod.metadata.name = Some(name.into());
        pod.metadata.uid = Some(uid.into());
        pod
    }

    fn now() -> Timestamp {
        Timestamp::try_from(t0()).expect("a timestamp")
    }

    fn eviction_requests(ctx: &Context<SimCloud>, code: &str) -> u64 {
        ctx.metrics
            .termination
            .eviction_requests
            .get_or_create(&CodeLabels { code: code.into() })
            .get()
    }

    fn pods_evicted(ctx: &Context<SimCloud>) -> u64 {
        ctx.metrics
            .termination
            .pods_drained
            .get_or_create(&ReasonLabels {
                reason: "evicted".into(),
            })
            .get()
    }

    fn accepted() -> Value {
        json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success", "code": 201})
    }

    /// A `FailedDraining` Warning on Node `n` whose message contains `message`.
    fn failed_draining(message: &'static str) -> Exchange {
        testkit::event("FailedDraining", message).check(|seen| {
            assert_eq!(seen.body["type"], "Warning", "{}", seen.body);
            assert_eq!(seen.body["involvedObject"]["name"], "n", "{}", seen.body);
        })
    }

    /// Karpenter's eviction "should succeed with an evicted event when there are no PDBs" and "should increment
    /// PodsDrainedTotal metric when a pod is evicted": the pod's eviction is posted with its UID, counted under
    /// 200 and as drained, and an `Evicted` Event goes to the pod; the node is not drained while the pod is bound.
    #[tokio::test]
    async fn an_accepted_eviction_is_counted_and_reported_on_the_pod() {
        let (ctx, mut server) = context(vec![tainted_node()], vec![], vec![pod()]);
        let t = termination(ctx);
        let script = vec![
            Exchange::post(EVICT_P)
                .body(json!({
                    "apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": "p", "namespace": "ns"},
                    "deleteOptions": {"preconditions": {"uid": "u-1"}},
                }))
                .answer(201, accepted()),
            testkit::namespaced_event("ns", "Evicted"),
        ];
        let claim = ungraced_claim();
        let drained = server
            .serve(script, drain_node(&t, &claim, &tainted_node(), now()))
            .await
            .expect("a drain pass");
        assert!(!drained, "the pod is bound until it is gone");
        assert_eq!(eviction_requests(&t.ctx, "200"), 1);
        assert_eq!(pods_evicted(&t.ctx), 1);
    }

    /// Karpenter's eviction "should return a NodeDrainError event when a PDB is blocking": a 429 leaves the pod
    /// (not drained, not counted as drained), counts under 429, warns the Node, and the next pass asks again,
    /// without a second Warning within the Event window.
    #[tokio::test]
    async fn a_pdb_refusal_keeps_the_pod_warns_the_node_once_and_is_retried() {
        let (ctx, mut server) = context(vec![tainted_node()], vec![], vec![pod()]);
        let t = termination(ctx);
        let script = vec![
            Exchange::post(EVICT_P).answer(429, testkit::status(429, "TooManyRequests", BUDGET)),
            failed_draining("Failed to drain node, ns/p: Cannot evict pod as it would violate"),
            Exchange::post(EVICT_P).answer(429, testkit::status(429, "TooManyRequests", BUDGET)),
        ];
        let claim = ungraced_claim();
        let node = tainted_node();
        let (first, second) = server
            .serve(script, async {
                (
                    drain_node(&t, &claim, &node, now()).await,
                    drain_node(&t, &claim, &node, now()).await,
                )
            })
            .await;
        assert!(!first.expect("a blocked eviction is no error"));
        assert!(!second.expect("a blocked eviction is no error"));
        assert_eq!(eviction_requests(&t.ctx, "429"), 2);
        assert_eq!(pods_evicted(&t.ctx), 0);
    }

    /// What a PDB-blocked drain does to its claim's termination: the claim says `Drained=Unknown` (`Draining`),
    /// written over the version read, and the claim is looked at again after the drain's recheck (Karpenter
    /// requeues a drain in progress) instead of failing into backoff.
    #[tokio::test]
    async fn a_blocked_drain_marks_the_claim_draining_and_requeues_it() {
        let (ctx, mut server) = context(vec![tainted_node()], vec![], vec![pod()]);
        let t = Arc::new(termination(ctx));
        let script = vec![
            Exchange::post(EVICT_P).answer(429, testkit::status(429, "TooManyRequests", BUDGET)),
            failed_draining("ns/p"),
            Exchange::patch(&format!("{CLAIM}/status"))
                .content_type(MERGE_PATCH)
                .check(|seen| {
                    assert_eq!(seen.body["metadata"]["resourceVersion"], "7");
                    let conditions = &seen.body["status"]["conditions"];
                    assert_eq!(conditions.as_array().map(Vec::len), Some(1), "{conditions}");
                    assert_eq!(conditions[0]["type"], "Drained");
                    assert_eq!(conditions[0]["status"], "Unknown");
                    assert_eq!(conditions[0]["reason"], "Draining");
                })
                .answer(200, claim_json(json!({}))),
        ];
        let action = server
            .serve(script, terminate_claim(Arc::new(ungraced_claim()), t))
            .await
            .expect("a pass that waits");
        assert_eq!(action, Action::requeue(DRAIN_RECHECK));
    }

    /// Karpenter's eviction "should succeed with no event when the pod is not found" and "should succeed with no
    /// event when the pod UID conflicts": a pod gone (404) or replaced under its name (409) is success, without an
    /// Event and not counted as drained; each answer is counted under its own code.
    #[tokio::test]
    async fn pods_gone_or_replaced_are_success_without_an_event() {
        let pods = vec![pod_named("p", "u-1"), pod_named("q", "u-2")];
        let (ctx, mut server) = context(vec![tainted_node()], vec![], pods);
        let t = termination(ctx);
        // The two evictions are in flight together: answered by path, in whatever order they come.
        let answer = |seen: &testkit::Seen| match seen.path.as_str() {
            EVICT_P => (
                404,
                testkit::status(404, "NotFound", "pods \"p\" not found"),
            ),
            "/api/v1/namespaces/ns/pods/q/eviction" => {
                assert_eq!(seen.body["deleteOptions"]["preconditions"]["uid"], "u-2");
                (
                    409,
                    testkit::status(409, "Conflict", "the UID precondition failed"),
                )
            }
            other => panic!("an eviction of {other}"),
        };
        let script = vec![
            Exchange::post("/api/v1/namespaces/ns/pods/*").answer_with(answer),
            Exchange::post("/api/v1/namespaces/ns/pods/*").answer_with(answer),
        ];
        let claim = ungraced_claim();
        let drained = server
            .serve(script, drain_node(&t, &claim, &tainted_node(), now()))
            .await
            .expect("gone pods are no error");
        assert!(!drained, "the next pass sees them gone");
        assert_eq!(eviction_requests(&t.ctx, "404"), 1);
        assert_eq!(eviction_requests(&t.ctx, "409"), 1);
        assert_eq!(pods_evicted(&t.ctx), 0);
    }

    /// Karpenter's eviction "should return a NodeDrainError event when two PDBs refer to the same pod": the
    /// apiserver answers 500 with its message; counted under 500 and reported on the Node like a PDB's refusal.
    #[tokio::test]
    async fn two_pdbs_on_a_pod_are_reported_as_a_failed_drain() {
        let (ctx, mut server) = context(vec![tainted_node()], vec![], vec![pod()]);
        let t = termination(ctx);
        let script = vec![
            Exchange::post(EVICT_P).answer(
                500,
                testkit::status(500, "InternalError", MULTIPLE_PDBS_MESSAGE),
            ),
            failed_draining("ns/p: eviction does not support multiple PDBs"),
        ];
        let claim = ungraced_claim();
        let drained = server
            .serve(script, drain_node(&t, &claim, &tainted_node(), now()))
            .await
            .expect("a drain pass");
        assert!(!drained);
        assert_eq!(eviction_requests(&t.ctx, "500"), 1);
    }

    /// Any other failed eviction (a 500) is no error of the pass and no Event (it is logged): the pass waits and
    /// the next one asks again, which succeeds.
    #[tokio::test]
    async fn a_failed_eviction_is_asked_again_on_the_next_pass() {
        let (ctx, mut server) = context(vec![tainted_node()], vec![], vec![pod()]);
        let t = termination(ctx);
        let script = vec![
            Exchange::post(EVICT_P).fail(500, "InternalError"),
            Exchange::post(EVICT_P).answer(201, accepted()),
            testkit::namespaced_event("ns", "Evicted"),
        ];
        let claim = ungraced_claim();
        let node = tainted_node();
        let (first, second) = server
            .serve(script, async {
                (
                    drain_node(&t, &claim, &node, now()).await,
                    drain_node(&t, &claim, &node, now()).await,
                )
            })
            .await;
        assert!(!first.expect("a failed eviction is no error of the pass"));
        assert!(!second.expect("a drain pass"));
        assert_eq!(eviction_requests(&t.ctx, "500"), 1);
        assert_eq!(eviction_requests(&t.ctx, "200"), 1);
        assert_eq!(pods_evicted(&t.ctx), 1);
    }

    /// The first pass over an untainted Node taints it (tested against the taints read) and evicts nothing: pods
    /// the scheduler places meanwhile are seen by the next pass. A Node with no pod left is drained without a
    /// request.
    #[tokio::test]
    async fn a_node_is_tainted_before_any_eviction_and_drained_once_empty() {
        let untainted: Node = serde_json::from_value(json!({
            "metadata": {"name": "n"}, "spec": {"providerID": PROVIDER_ID},
        }))
        .expect("a node");
        let (ctx, mut server) = context(vec![untainted.clone()], vec![], vec![pod()]);
        let t = termination(ctx);
        let script = vec![
            Exchange::patch("/api/v1/nodes/n")
                .content_type("application/json-patch+json")
                .body(json!([
                    {"op": "test", "path": "/spec/taints", "value": null},
                    {"op": "add", "path": "/spec/taints",
                     "value": [{"key": DISRUPTED_TAINT, "effect": "NoSchedule"}]},
                ]))
                .answer(200, serde_json::to_value(tainted_node()).expect("json")),
            testkit::event(
                "DisruptionTerminating",
                "Disrupting NodeClaim c: terminating",
            ),
            testkit::event(
                "DisruptionTerminating",
                "Disrupting NodeClaim c: terminating",
            ),
        ];
        let claim = ungraced_claim();
        let drained = server
            .serve(script, drain_node(&t, &claim, &untainted, now()))
            .await
            .expect("tainted");
        assert!(!drained);
        assert_eq!(eviction_requests(&t.ctx, "200"), 0);

        let (ctx, mut server) = context(vec![tainted_node()], vec![], vec![]);
        let t = termination(ctx);
        let drained = server
            .serve(vec![], drain_node(&t, &claim, &tainted_node(), now()))
            .await
            .expect("drained");
        assert!(drained);
    }

    #[test]
    fn the_disrupted_taint_replaces_another_effect_and_is_added_once() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n", "resourceVersion": "3"},
            "spec": {"taints": [
                {"key": "karpenter.sh/disrupted", "effect": "NoExecute"},
                {"key": "dedicated", "value": "a", "effect": "NoSchedule"},
            ]},
        }))
        .expect("node");
        let patch = disrupted_taint_patch(&node).expect("a patch");
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/spec/taints", "value": [
                    {"key": "karpenter.sh/disrupted", "effect": "NoExecute"},
                    {"key": "dedicated", "value": "a", "effect": "NoSchedule"},
                ]},
                {"op": "add", "path": "/spec/taints", "value": [
                    {"key": "dedicated", "value": "a", "effect": "NoSchedule"},
                    {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"},
                ]},
            ])
        );
        let untainted: Node =
            serde_json::from_value(json!({"metadata": {"name": "n"}, "spec": {}})).expect("node");
        assert_eq!(
            disrupted_taint_patch(&untainted).expect("a patch")[0],
            json!({"op": "test", "path": "/spec/taints", "value": null}),
            "a Node without taints is tested for having none"
        );
        let tainted: Node = serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]},
        }))
        .expect("node");
        assert_eq!(disrupted_taint_patch(&tainted), None);
    }

    #[test]
    fn the_deadline_is_the_deletion_time_plus_the_grace_period() {
        let claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "deletionTimestamp": "2026-11-23T00:00:00Z"},
            "spec": {"nodeClassRef": {"group": "g", "kind": "k", "name": "n"}, "requirements": [],
                     "terminationGracePeriod": "1h30m"},
        }))
        .expect("claim");
        assert_eq!(
            deadline(&claim),
            Some("2026-11-23T01:30:00Z".parse().expect("timestamp"))
        );
        let mut without = claim.clone();
        without.spec.termination_grace_period = None;
        assert_eq!(deadline(&without), None);
    }

    /// Karpenter's termination reads the deadline from `karpenter.sh/nodeclaim-termination-timestamp` (node repair
    /// sets it to now); a value that is not a time leaves the grace period's deadline.
    #[test]
    fn the_termination_timestamp_annotation_is_the_deadline() {
        let claim = |annotation: Option<&str>, grace: Option<&str>| -> NodeClaim {
            serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": "c", "deletionTimestamp": "2026-11-23T00:00:00Z",
                             "annotations": annotation.map(|a| json!({TERMINATION_TIMESTAMP: a}))},
                "spec": {"nodeClassRef": {"group": "g", "kind": "k", "name": "n"}, "requirements": [],
                         "terminationGracePeriod": grace},
            }))
            .expect("claim")
        };
        let at = |t: &str| Some(t.parse::<Timestamp>().expect("timestamp"));
        let cases = [
            (
                Some("2026-11-22T23:00:00Z"),
                Some("1h"),
                at("2026-11-22T23:00:00Z"),
            ),
            (
                Some("2026-11-22T23:00:00Z"),
                None,
                at("2026-11-22T23:00:00Z"),
            ),
            (Some("tomorrow"), Some("1h"), at("2026-11-23T01:00:00Z")),
            (None, Some("1h"), at("2026-11-23T01:00:00Z")),
            (Some("tomorrow"), None, None),
        ];
        for (annotation, grace, want) in cases {
            assert_eq!(
                deadline(&claim(annotation, grace)),
                want,
                "{annotation:?} {grace:?}"
            );
        }
    }
}
