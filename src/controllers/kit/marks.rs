//! Writes a pass's marks ([`crate::engine::marks`]: `Drifted`, `Consolidatable`, a stale `DisruptionReason`
//! removed) on the NodeClaims: each claim's whole conditions list in one patch, with the `resourceVersion` the
//! marks were computed from as a precondition, so a concurrent status write (the lifecycle controller's) makes
//! this one fail rather than be lost. A failed write is tried again on the next pass.

use super::super::Context;
use super::calls::{self, ReconcileError, PARALLEL_WRITES};
use crate::api::nodeclaim::NodeClaim;
use crate::engine::marks::Mark;
use ::kube::api::{Api, Patch, PatchParams};
use futures::StreamExt;
use serde_json::json;

/// Writes `marks`, `PARALLEL_WRITES` at a time. Conflicts and claims gone are left for the next pass; other
/// failures are logged.
pub async fn write<C>(ctx: &Context<C>, marks: Vec<Mark>) {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let writes: Vec<_> = marks
        .into_iter()
        .map(|mark| {
            let api = api.clone();
            let patch = json!({
                "metadata": {"resourceVersion": mark.resource_version},
                "status": {"conditions": mark.conditions},
            });
            async move {
                let (params, patch) = (PatchParams::default(), Patch::Merge(patch));
                let write = api.patch_status(&mark.claim, &params, &patch);
                let result = calls::timed("writing conditions", write).await;
                (mark.claim, mark.changed, result)
            }
        })
        .collect();
    let results: Vec<_> = futures::stream::iter(writes)
        .buffer_unordered(PARALLEL_WRITES)
        .collect()
        .await;
    for (name, changed, result) in results {
        let changed = changed.join(",");
        match result {
            Ok(_) => {
                tracing::debug!(nodeclaim = %name, conditions = %changed, "conditions updated")
            }
            Err(error) if is_conflict(&error) || error.is_not_found() => {
                tracing::debug!(nodeclaim = %name, conditions = %changed, %error, "conditions not written: the claim changed meanwhile")
            }
            Err(error) => {
                tracing::warn!(nodeclaim = %name, conditions = %changed, %error, "writing conditions failed")
            }
        }
    }
}

fn is_conflict(error: &ReconcileError) -> bool {
    matches!(error, ReconcileError::Kube(::kube::Error::Api(s)) if s.code == 409)
}
