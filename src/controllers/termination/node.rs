//! What termination does to the claim's Node: the `karpenter.sh/disrupted` taint, the evictions and deletions of
//! one drain pass (as [`drain`](super::drain) decides them), and the wait for its volumes to detach (as
//! [`volumes`](super::volumes) decides it).

use super::super::kit::calls::{self, ReconcileError};
use super::super::kit::taints::disrupted_taint_patch;
use super::super::metrics::{CodeLabels, ReasonLabels};
use super::super::Context;
use super::deadline::deadline;
use super::progress::{self, Next, Progress};
use super::{drain, volumes, Termination};
use crate::api::nodeclaim::NodeClaim;
use crate::cloud::CloudProvider;
use crate::kube::eviction::{EvictionOutcome, MULTIPLE_PDBS_MESSAGE};
use ::kube::api::{Api, DeleteParams};
use ::kube::runtime::reflector::ObjectRef;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use std::sync::Arc;

/// At most this many evictions are in flight for one node.
const EVICTION_CONCURRENCY: usize = 8;

/// Waits while VolumeAttachments of volumes the drain moved hold `node` (until the claim's termination grace
/// period runs out), publishing `AwaitingVolumeDetachment` on it.
pub(super) async fn await_volumes<C>(
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

/// One drain pass over `node`: taint it, evict or delete what the pass says. True once drained.
pub(super) async fn drain_node<C: CloudProvider>(
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

/// Deletes a pod the termination deadline leaves no time for, bypassing PDBs.
pub(super) async fn delete_at_deadline<C>(
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
