//! Node repair (`node.health`, only with the `NodeRepair` feature gate): on each change of the cluster state, and
//! when a toleration ends, [`crate::engine::repair::decide`] judges every Node against the AWS repair policies;
//! a node past its toleration has its NodeClaim stamped with a termination timestamp of now and deleted
//! (termination then deletes its pods instead of evicting them and terminates the instance), and a node held
//! back because too much of its pool is unhealthy gets a `NodeRepairBlocked` Event.

use super::kit::calls;
use super::metrics::{DisruptedLabels, UnhealthyLabels};
use super::{Context, Error};
use crate::api::labels;
use crate::api::nodeclaim::{NodeClaim, TERMINATION_TIMESTAMP};
use crate::cloud::CloudProvider;
use crate::engine::repair::{
    self, decide, next_look, pool_label, ClaimHealth, NodeHealth, Repair, Verdict, AWS_POLICIES,
    NODE_REPAIR_BLOCKED, UNHEALTHY_REASON,
};
use ::kube::Api;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest the controller sleeps without a change of the cluster state.
const IDLE_LOOK: Duration = Duration::from_secs(60);
/// A `NodeRepairBlocked` Event is published at most this often per Node (Karpenter dedupes it for 15 minutes).
const BLOCKED_EVENT_EVERY: Duration = Duration::from_secs(15 * 60);

/// Repairs nodes until the state watch ends.
pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    let mut changed = ctx.state.changed.clone();
    let mut done = Done::default();
    loop {
        let now = now(&ctx)?;
        let repairs = judge(&ctx, now);
        done.forget_gone(&ctx);
        for repair in &repairs {
            carry_out(&ctx, repair, &mut done).await;
        }
        let wait = next_look(&repairs, now)
            .map(|at| Duration::try_from(at.duration_since(now)).unwrap_or_default())
            .map_or(IDLE_LOOK, |d| d.clamp(Duration::from_secs(1), IDLE_LOOK));
        tokio::select! {
            state = changed.changed() => if state.is_err() { return Ok(()) },
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// What earlier passes did, so that a pass working from a cluster state that does not show its writes yet does not
/// repeat them.
#[derive(Default)]
struct Done {
    /// When each Node last got a `NodeRepairBlocked` Event.
    published: HashMap<String, Instant>,
    /// Claims this controller deleted, while they still exist: deleted (and counted) once.
    deleted: HashSet<String>,
}

impl Done {
    fn forget_gone<C>(&mut self, ctx: &Context<C>) {
        let claims: HashSet<String> = ctx
            .state
            .node_claims
            .state()
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        self.deleted.retain(|name| claims.contains(name));
        self.published
            .retain(|_, at| at.elapsed() < BLOCKED_EVENT_EVERY);
    }
}

fn now<C>(ctx: &Context<C>) -> Result<Timestamp, Error> {
    Timestamp::try_from(ctx.clock.now())
        .map_err(|e| Error::Invalid(format!("the clock is out of range: {e}")))
}

/// The verdicts on the Nodes of the cluster state at `now`.
fn judge<C>(ctx: &Context<C>, now: Timestamp) -> Vec<Repair> {
    let nodes = ctx.state.nodes.state();
    let claims = ctx.state.node_claims.state();
    let claim_of: HashMap<&str, &NodeClaim> = claims
        .iter()
        .filter_map(|c| Some((c.status.as_ref()?.provider_id.as_deref()?, c.as_ref())))
        .collect();
    let view: Vec<NodeHealth<'_>> = nodes
        .iter()
        .map(|node| {
            let claim = node
                .spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .and_then(|id| claim_of.get(id))
                .map(|claim| claim_health(claim));
            NodeHealth::of(node, claim)
        })
        .collect();
    decide(&view, &AWS_POLICIES, now)
}

fn claim_health(claim: &NodeClaim) -> ClaimHealth<'_> {
    ClaimHealth {
        name: claim.metadata.name.as_deref().unwrap_or_default(),
        pool: pool_label(claim.metadata.labels.as_ref()),
        deleting: claim.metadata.deletion_timestamp.is_some(),
        termination_timestamp: claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(TERMINATION_TIMESTAMP))
            .map(String::as_str),
    }
}

/// Carries out one verdict; a failed write is logged and the next look tries again.
async fn carry_out<C>(ctx: &Context<C>, repair: &Repair, done: &mut Done) {
    match &repair.verdict {
        Verdict::Tolerated(_) => {}
        Verdict::Blocked { message, .. } => {
            if done.published.contains_key(&repair.node) {
                return;
            }
            let Some(node) = ctx
                .state
                .nodes
                .state()
                .into_iter()
                .find(|n| n.metadata.name.as_deref() == Some(repair.node.as_str()))
            else {
                return;
            };
            tracing::info!(node = %repair.node, nodeclaim = %repair.claim, %message, "node repair held back");
            ctx.events
                .warning(node.as_ref(), NODE_REPAIR_BLOCKED, message.clone())
                .await;
            done.published.insert(repair.node.clone(), Instant::now());
        }
        Verdict::Repair {
            condition,
            stamp,
            delete,
        } => {
            // Stamped and deleted by an earlier pass whose writes the state does not show yet: a new stamp
            // would only move the deadline later.
            if done.deleted.contains(&repair.claim) || (stamp.is_none() && !*delete) {
                return;
            }
            match replace(ctx, repair, condition, stamp.as_deref(), *delete).await {
                Ok(()) if *delete => {
                    done.deleted.insert(repair.claim.clone());
                }
                Ok(()) => {}
                Err(error) => {
                    tracing::warn!(node = %repair.node, nodeclaim = %repair.claim, %error, "node repair failed; retrying");
                }
            }
        }
    }
}

async fn replace<C>(
    ctx: &Context<C>,
    repair: &Repair,
    condition: &str,
    stamp: Option<&str>,
    delete: bool,
) -> Result<(), calls::ReconcileError> {
    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    if let Some(stamp) = stamp {
        let patch = json!({"metadata": {"annotations": {TERMINATION_TIMESTAMP: stamp}}});
        match calls::merge_patch(&claims, &repair.claim, patch).await {
            Err(e) if e.is_not_found() => return Ok(()),
            other => other?,
        }
        tracing::info!(nodeclaim = %repair.claim, annotation = TERMINATION_TIMESTAMP, value = stamp, "annotated nodeclaim");
    }
    if !delete {
        return Ok(());
    }
    // A claim gone already was deleted by someone else: not counted as repaired (Karpenter returns on NotFound
    // before its metrics).
    if !calls::delete_if_present(&claims, &repair.claim).await? {
        return Ok(());
    }
    tracing::info!(node = %repair.node, nodeclaim = %repair.claim, condition, "deleting unhealthy node");
    let node = ctx
        .state
        .nodes
        .state()
        .into_iter()
        .find(|n| n.metadata.name.as_deref() == Some(repair.node.as_str()));
    let node_label = |key: &str| -> String {
        node.as_deref()
            .and_then(|n: &Node| n.metadata.labels.as_ref()?.get(key).cloned())
            .unwrap_or_default()
    };
    let image_id = ctx
        .state
        .node_claims
        .state()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(repair.claim.as_str()))
        .and_then(|c| c.status.as_ref()?.image_id.clone())
        .unwrap_or_default();
    let lifecycle = &ctx.metrics.lifecycle;
    lifecycle
        .disrupted
        .get_or_create(&DisruptedLabels {
            reason: UNHEALTHY_REASON.to_owned(),
            nodepool: node_label(labels::NODEPOOL),
            capacity_type: node_label(labels::CAPACITY_TYPE),
        })
        .inc();
    lifecycle
        .unhealthy_disrupted
        .get_or_create(&UnhealthyLabels {
            condition: repair::snake_case(condition),
            nodepool: node_label(labels::NODEPOOL),
            capacity_type: node_label(labels::CAPACITY_TYPE),
            image_id,
        })
        .inc();
    Ok(())
}

#[cfg(test)]
#[path = "node_health_tests.rs"]
mod tests;
