//! The `Drifted` status condition of NodeClaims, as Karpenter writes it: `True`, with the drift reason as its
//! reason and message, on every launched claim the engine judged drifted, and removed once the claim is no
//! longer drifted. It tells users which nodes a roll-out will replace, and why, before any is disrupted.
//!
//! A claim is written only when its condition changes, with its `resourceVersion` as a precondition: the
//! conditions list is replaced whole, so a concurrent status write (the lifecycle controller's) must make this
//! one fail rather than be lost. A failed write is tried again on the next pass.

use super::super::nodeclaim::calls::{self, ReconcileError};
use super::super::nodeclaim::conditions::{is_true, with_true_or_absent, LAUNCHED};
use super::super::provisioning::PARALLEL_WRITES;
use super::super::Context;
use crate::api::condition::Condition;
use crate::api::nodeclaim::NodeClaim;
use crate::disruption::NodeInput;
use ::kube::api::{Api, Patch, PatchParams};
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use std::collections::BTreeMap;

pub const DRIFTED: &str = "Drifted";

/// `claim`'s conditions with `Drifted` brought in line with `drift` (the reason, or `None` when not
/// drifted), or `None` when they already are. A claim that is not `Launched` is never marked drifted.
pub fn updated_conditions(
    claim: &NodeClaim,
    drift: Option<&str>,
    now: Timestamp,
) -> Option<Vec<Condition>> {
    let drift = drift.filter(|_| is_true(claim, LAUNCHED));
    with_true_or_absent(claim, DRIFTED, drift.map(|r| (r, r)), &now.to_string())
}

/// Writes `Drifted` on every claim of `nodes` (not being deleted) whose condition disagrees with `drifted`,
/// the engine's verdict by claim name. Failures are logged; the next pass tries again.
pub async fn mark<C>(
    ctx: &Context<C>,
    nodes: &[NodeInput],
    drifted: &BTreeMap<String, &'static str>,
    now: Timestamp,
) {
    mirror(ctx, nodes, DRIFTED, |claim, name| {
        updated_conditions(claim, drifted.get(name).copied(), now)
    })
    .await;
}

/// Brings the condition `condition` of every claim of `nodes` (not being deleted) in line with `update`'s
/// answer for it (the new conditions, or `None` when they already agree).
pub(super) async fn mirror<C>(
    ctx: &Context<C>,
    nodes: &[NodeInput],
    condition: &str,
    update: impl Fn(&NodeClaim, &str) -> Option<Vec<Condition>>,
) {
    let updates = nodes
        .iter()
        .map(|n| &n.claim)
        .filter(|claim| claim.metadata.deletion_timestamp.is_none())
        .filter_map(|claim| {
            let name = claim.metadata.name.clone()?;
            let conditions = update(claim, &name)?;
            Some((name, claim.metadata.resource_version.clone(), conditions))
        })
        .collect();
    write_conditions(ctx, condition, updates).await;
}

/// Replaces each named claim's conditions, `PARALLEL_WRITES` at a time, each with the claim's
/// `resourceVersion` as a precondition. Conflicts and claims gone are left for the next pass; other failures
/// are logged.
async fn write_conditions<C>(
    ctx: &Context<C>,
    condition: &str,
    updates: Vec<(String, Option<String>, Vec<Condition>)>,
) {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let writes: Vec<_> = updates
        .into_iter()
        .map(|(name, resource_version, conditions)| {
            let api = api.clone();
            let patch = json!({
                "metadata": {"resourceVersion": resource_version},
                "status": {"conditions": conditions},
            });
            async move {
                let (params, patch) = (PatchParams::default(), Patch::Merge(patch));
                let write = api.patch_status(&name, &params, &patch);
                let result = calls::timed("writing a condition", write).await;
                (name, result)
            }
        })
        .collect();
    let results: Vec<_> = futures::stream::iter(writes)
        .buffer_unordered(PARALLEL_WRITES)
        .collect()
        .await;
    for (name, result) in results {
        match result {
            Ok(_) => tracing::debug!(nodeclaim = %name, condition, "condition updated"),
            Err(error) if is_conflict(&error) || error.is_not_found() => {
                tracing::debug!(nodeclaim = %name, condition, %error, "condition not written: the claim changed meanwhile")
            }
            Err(error) => {
                tracing::warn!(nodeclaim = %name, condition, %error, "writing a condition failed")
            }
        }
    }
}

fn is_conflict(error: &ReconcileError) -> bool {
    matches!(error, ReconcileError::Kube(::kube::Error::Api(s)) if s.code == 409)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::nodeclaim::tests::claim;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn with_conditions(conditions: serde_json::Value) -> NodeClaim {
        let mut claim = claim("a");
        claim.status =
            Some(serde_json::from_value(json!({ "conditions": conditions })).expect("status"));
        claim
    }

    fn launched() -> serde_json::Value {
        json!({"type": "Launched", "status": "True", "reason": "Launched", "message": "",
               "lastTransitionTime": "2026-11-23T00:00:00Z"})
    }

    #[test]
    fn a_launched_claim_is_marked_with_the_reason_once() {
        let claim = with_conditions(json!([launched()]));
        let t1 = at("2026-11-23T01:00:00Z");
        let conditions = updated_conditions(&claim, Some("AMIDrift"), t1).expect("a change");
        let drifted = conditions
            .iter()
            .find(|c| c.type_ == DRIFTED)
            .expect("Drifted");
        assert_eq!(
            (
                drifted.status.as_str(),
                drifted.reason.as_str(),
                drifted.message.as_str()
            ),
            ("True", "AMIDrift", "AMIDrift")
        );
        assert_eq!(drifted.last_transition_time, t1.to_string());
        assert!(
            conditions.iter().any(|c| c.type_ == LAUNCHED),
            "others kept"
        );
        // Written again later, nothing changes.
        let mut marked = claim.clone();
        marked.status.as_mut().expect("status").conditions = Some(conditions);
        assert_eq!(
            updated_conditions(&marked, Some("AMIDrift"), at("2026-11-23T02:00:00Z")),
            None
        );
        // Another reason is a change; no longer drifted removes the condition.
        assert!(updated_conditions(&marked, Some("SubnetDrift"), t1).is_some());
        let cleared = updated_conditions(&marked, None, t1).expect("a change");
        assert!(cleared.iter().all(|c| c.type_ != DRIFTED));
        assert_eq!(cleared.len(), 1);
    }

    #[test]
    fn a_claim_not_launched_is_never_marked() {
        let t = at("2026-11-23T01:00:00Z");
        assert_eq!(
            updated_conditions(&claim("a"), Some("NodePoolDrifted"), t),
            None
        );
        assert_eq!(updated_conditions(&claim("a"), None, t), None);
        // A stale mark on a claim that is not launched is cleared.
        let stale = with_conditions(
            json!([{"type": "Drifted", "status": "True", "reason": "AMIDrift",
                                             "message": "AMIDrift", "lastTransitionTime": "2026-11-23T00:00:00Z"}]),
        );
        assert_eq!(
            updated_conditions(&stale, Some("AMIDrift"), t),
            Some(vec![])
        );
    }
}
