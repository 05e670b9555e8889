//! The `DisruptionReason` status condition: `True`, with the command's reason (`Underutilized`, `Empty`,
//! `Drifted`, `Expired`) as reason and message, on every candidate of a command being carried out, so
//! `kubectl get nodeclaims` shows which nodes are going and why; taken off again when the command is abandoned
//! (Karpenter's `markDisrupted` and `ClearNodeClaimsCondition`).
//!
//! The conditions list is replaced whole, so each write reads the claim fresh and carries its
//! `resourceVersion`: a concurrent status write makes it fail (and it is tried once more) rather than be lost.

use super::super::kit::calls;
use super::super::Context;
use crate::api::nodeclaim::NodeClaim;
use crate::engine::marks::disruption_reason;
use ::kube::api::{Api, Patch, PatchParams};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

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
        let Some(conditions) = disruption_reason(&claim, reason, now) else {
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
