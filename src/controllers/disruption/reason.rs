//! The `DisruptionReason` status condition: `True`, with the command's reason (`Underutilized`, `Empty`,
//! `Drifted`, `Expired`) as reason and message, on every candidate of a command being carried out, so
//! `kubectl get nodeclaims` shows which nodes are going and why; taken off again when the command is abandoned
//! (Karpenter's `markDisrupted` and `ClearNodeClaimsCondition`).
//!
//! The conditions list is replaced whole, so each write reads the claim fresh and carries its
//! `resourceVersion`: a concurrent status write makes it fail (and it is tried once more) rather than be lost.

use super::super::nodeclaim::calls;
use super::super::nodeclaim::conditions::with_true_or_absent;
use super::super::Context;
use crate::api::condition::Condition;
use crate::api::nodeclaim::NodeClaim;
use ::kube::api::{Api, Patch, PatchParams};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

pub const DISRUPTION_REASON: &str = "DisruptionReason";

/// `claim`'s conditions with `DisruptionReason` set to `reason`, or removed for `None`; `None` when that
/// changes nothing.
pub fn updated_conditions(
    claim: &NodeClaim,
    reason: Option<&str>,
    now: Timestamp,
) -> Option<Vec<Condition>> {
    with_true_or_absent(
        claim,
        DISRUPTION_REASON,
        reason.map(|r| (r, r)),
        &now.to_string(),
    )
}

/// Brings the claim `name`'s condition in line with `reason`. Failures are logged: the condition informs, the
/// taint is what keeps pods away.
pub async fn write<C>(ctx: &Context<C>, name: &str, reason: Option<&str>) {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for _attempt in 0..2 {
        let claim = match calls::timed("reading the claim", api.get_opt(name)).await {
            Ok(Some(claim)) => claim,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(nodeclaim = %name, %error, "writing DisruptionReason: reading the claim failed");
                return;
            }
        };
        let now = Timestamp::try_from(ctx.clock.now()).unwrap_or(Timestamp::UNIX_EPOCH);
        let Some(conditions) = updated_conditions(&claim, reason, now) else {
            return;
        };
        let patch = json!({
            "metadata": {"resourceVersion": claim.metadata.resource_version},
            "status": {"conditions": conditions},
        });
        let (params, patch) = (PatchParams::default(), Patch::Merge(patch));
        let write = api.patch_status(name, &params, &patch);
        match calls::timed("writing DisruptionReason", write).await {
            Ok(_) => return,
            Err(calls::ReconcileError::Kube(::kube::Error::Api(s))) if s.code == 409 => continue,
            Err(error) => {
                tracing::warn!(nodeclaim = %name, %error, "writing the DisruptionReason condition failed");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::nodeclaim::tests::claim;

    /// Karpenter's disruption suite: candidates get `DisruptionReason` with the command's reason, and an
    /// abandoned command clears it.
    #[test]
    fn the_reason_is_set_once_and_cleared() {
        let t: Timestamp = "2026-11-26T10:00:00Z".parse().expect("time");
        let mut c = claim("a");
        let set = updated_conditions(&c, Some("Underutilized"), t).expect("a change");
        let condition = set
            .iter()
            .find(|c| c.type_ == DISRUPTION_REASON)
            .expect("set");
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("True", "Underutilized")
        );
        c.status = Some(serde_json::from_value(json!({ "conditions": set })).expect("status"));
        assert_eq!(updated_conditions(&c, Some("Underutilized"), t), None);
        let cleared = updated_conditions(&c, None, t).expect("cleared");
        assert!(cleared.iter().all(|c| c.type_ != DISRUPTION_REASON));
    }
}
