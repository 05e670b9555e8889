//! Interruption: the controller's side of `crate::interruption`. Messages from the interruption queue are
//! matched to NodeClaims by instance ID; a spot interruption keeps its offering out of launches for the ICE
//! TTL, and an interrupted, stopping, terminating or retiring instance's claim gets an Event and is deleted —
//! the graceful termination flow drains it while the provisioner launches replacement capacity for the pods
//! still on it (a node whose claim is being deleted is no capacity, and its pods are solved for at once).
//!
//! [`run_instance_status`] feeds the same handling from EC2's status checks instead of the queue (Karpenter's
//! `interruption.instancestatus`): every minute, each unhealthy category of an instance running a claim becomes a
//! message ([`crate::interruption::instance_status`]); a failed instance or system check terminates the node
//! forcefully (a termination timestamp of now), a scheduled event drains it.

use super::kit::calls;
use super::metrics::interruption::{Category, Disrupted};
use super::metrics::DisruptedLabels;
use super::{Context, Error};
use crate::api::labels;
use crate::api::nodeclaim::{NodeClaim, TERMINATION_TIMESTAMP};
use crate::cloud::{instance_id, CloudProvider};
use crate::engine::repair::rfc3339_seconds;
use crate::interruption::instance_status::{findings, Seen, POLL_EVERY};
use crate::interruption::{self, dispatch, Action, ClaimInfo, Handler, Kind, MessageQueue};
use ::kube::runtime::reflector::ObjectRef;
use ::kube::{Api, ResourceExt};
use std::sync::Arc;

/// Carries out interruption actions on this cluster's NodeClaims.
struct ClaimHandler<C> {
    ctx: Arc<Context<C>>,
}

impl<C: CloudProvider + 'static> Handler for ClaimHandler<C> {
    type Error = Error;

    fn claim_of(&self, instance: &str) -> Option<ClaimInfo> {
        let claims = self.ctx.state.node_claims.state();
        let claim = claims.iter().find(|claim| {
            claim
                .status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .and_then(|id| instance_id(id).ok())
                == Some(instance)
        })?;
        Some(claim_info(claim))
    }

    async fn apply(&self, kind: Kind, action: &Action) -> Result<(), Error> {
        let ctx = &self.ctx;
        match action {
            Action::MarkUnavailable(key) => {
                tracing::info!(offering = %key, kind = kind.as_str(), "offering unavailable after an interruption");
                ctx.cloud.mark_unavailable(key.clone(), ctx.clock.now());
            }
            Action::Claim {
                name,
                instance_id,
                reason,
                delete,
                forceful,
            } => {
                let Some(claim) = ctx.state.node_claims.get(&ObjectRef::new(name)) else {
                    return Ok(()); // gone since the lookup: nothing left to do
                };
                let api: Api<NodeClaim> = Api::all(ctx.client.clone());
                if *forceful && !claim.annotations().contains_key(TERMINATION_TIMESTAMP) {
                    let now = k8s_openapi::jiff::Timestamp::try_from(ctx.clock.now())
                        .map_err(|e| Error::Invalid(format!("the clock is out of range: {e}")))?;
                    let patch = serde_json::json!({"metadata": {"annotations": {
                        TERMINATION_TIMESTAMP: rfc3339_seconds(now)}}});
                    match calls::merge_patch(&api, name, patch).await {
                        Err(e) if e.is_not_found() => return Ok(()),
                        other => other?,
                    }
                }
                // On the Node too (once registered), where users look first, as Karpenter publishes them.
                let node = claim
                    .status
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .and_then(|node| ctx.state.nodes.get(&ObjectRef::new(node)));
                if let Some(node) = &node {
                    ctx.events
                        .warning(&**node, reason.as_str(), reason.message().to_owned())
                        .await;
                }
                ctx.events
                    .warning(&*claim, reason.as_str(), reason.message().to_owned())
                    .await;
                if *delete && claim.metadata.deletion_timestamp.is_none() {
                    calls::delete(&api, name).await?;
                    tracing::info!(nodeclaim = %name, instance_id, kind = kind.as_str(), forceful, "deleting nodeclaim: its instance is interrupted");
                    if let Some(node) = &node {
                        ctx.events
                            .warning(
                                &**node,
                                TERMINATING_ON_INTERRUPTION,
                                "Interruption triggered termination for the Node".to_owned(),
                            )
                            .await;
                    }
                    ctx.events
                        .warning(
                            &*claim,
                            TERMINATING_ON_INTERRUPTION,
                            "Interruption triggered termination for the NodeClaim".to_owned(),
                        )
                        .await;
                    let label = |key: &str| claim.labels().get(key).cloned().unwrap_or_default();
                    ctx.metrics
                        .interruption
                        .disrupted
                        .get_or_create(&Disrupted {
                            reason: kind.as_str(),
                            nodepool: label(labels::NODEPOOL),
                        })
                        .inc();
                    ctx.metrics
                        .lifecycle
                        .disrupted
                        .get_or_create(&DisruptedLabels {
                            reason: kind.as_str().to_owned(),
                            nodepool: label(labels::NODEPOOL),
                            capacity_type: label(labels::CAPACITY_TYPE),
                        })
                        .inc();
                }
            }
        }
        Ok(())
    }
}

/// Reason of the Event on a claim (and its Node) an interruption deletes.
const TERMINATING_ON_INTERRUPTION: &str = "TerminatingOnInterruption";

fn claim_info(claim: &NodeClaim) -> ClaimInfo {
    let label = |key: &str| claim.labels().get(key).cloned();
    ClaimInfo {
        name: claim.name_any(),
        instance_type: label(labels::INSTANCE_TYPE),
        zone: label(labels::ZONE),
    }
}

/// Reads `queue` until the task is dropped.
pub async fn run<C, Q>(ctx: Arc<Context<C>>, queue: Q) -> Result<(), Error>
where
    C: CloudProvider + 'static,
    Q: MessageQueue,
{
    let handler = ClaimHandler { ctx: ctx.clone() };
    let metrics = ctx.metrics.interruption.clone();
    interruption::run(
        &queue,
        &handler,
        ctx.clock.as_ref(),
        tokio::time::sleep,
        |result| {
            if let Ok(report) = result {
                metrics.observe(report);
            }
        },
        std::future::pending(),
    )
    .await;
    Ok(())
}

/// Polls EC2's status checks every minute until the task is dropped; a failed poll is logged and the next one
/// tries again.
pub async fn run_instance_status<C: CloudProvider + 'static>(
    ctx: Arc<Context<C>>,
) -> Result<(), Error> {
    let handler = ClaimHandler { ctx: ctx.clone() };
    let mut seen = Seen::default();
    let mut ticker = tokio::time::interval(POLL_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let statuses = match ctx.cloud.instance_health().await {
            Ok(statuses) => statuses,
            Err(error) => {
                tracing::warn!(%error, "listing instance status checks failed; retrying in a minute");
                continue;
            }
        };
        let found = findings(&statuses, ctx.clock.now());
        let mut counted = Vec::new();
        for finding in &found {
            let message = finding.message();
            let actions = dispatch(&message, |id| handler.claim_of(id));
            if actions.is_empty() {
                continue; // no claim of this cluster runs it
            }
            counted.push(finding);
            for action in actions.iter().filter(|a| handler.still_to_do(a)) {
                if let Err(error) = handler.apply(message.kind, action).await {
                    tracing::warn!(instance_id = %finding.instance_id, %error, "acting on an instance status check failed; retrying in a minute");
                }
            }
        }
        for finding in seen.newly(&counted) {
            let category = finding.category.as_str();
            tracing::info!(instance_id = %finding.instance_id, category, "detected unhealthy instance owned by cluster");
            ctx.metrics
                .interruption
                .instance_status_unhealthy
                .get_or_create(&Category {
                    category: category.to_owned(),
                })
                .inc();
        }
    }
}

impl<C> ClaimHandler<C> {
    /// Whether a status check's action still has something to do: a claim being deleted already only needs a
    /// forceful check's termination timestamp (its Events were published when it was deleted).
    fn still_to_do(&self, action: &Action) -> bool {
        let Action::Claim { name, forceful, .. } = action else {
            return true;
        };
        let Some(claim) = self.ctx.state.node_claims.get(&ObjectRef::new(name)) else {
            return false;
        };
        claim.metadata.deletion_timestamp.is_none()
            || (*forceful && !claim.annotations().contains_key(TERMINATION_TIMESTAMP))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_claim_is_described_by_its_instance_type_and_zone_labels() {
        let claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abc", "labels": {
                "node.kubernetes.io/instance-type": "m5.large",
                "topology.kubernetes.io/zone": "us-west-2a"}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []}
        }))
        .unwrap();
        assert_eq!(
            claim_info(&claim),
            ClaimInfo {
                name: "default-abc".into(),
                instance_type: Some("m5.large".into()),
                zone: Some("us-west-2a".into()),
            }
        );
    }
}
