//! NodeOverlay status, as Karpenter's `nodeoverlay.controller` keeps it (`NodeOverlay` gate only): every overlay's
//! `ValidationSucceeded` (false with `RuntimeValidation` and the errors, or `Conflict` when an overlay of the same
//! weight already sets the same thing on some instance type) and `Ready` (its root, `UnhealthyDependents` when
//! validation failed). The verdicts are the engine's ([`crate::engine::overlay::evaluate`]), the same evaluation
//! the decisions apply, taken from the shared catalog cache; written only when they change.

use super::nodeclaim::calls;
use super::nodeclass::rfc3339;
use super::provisioning::{overlaid_class_catalogs, owned};
use super::{Context, Error};
use crate::api::condition;
use crate::api::nodeoverlay::NodeOverlay;
use crate::cloud::CloudProvider;
use crate::engine::overlay::Verdict;
use ::kube::api::{Patch, PatchParams};
use ::kube::Api;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
pub const READY: &str = "Ready";
/// Karpenter re-evaluates every 6 hours besides on changes; instance types change with the catalog's refresh.
const RESYNC_INTERVAL: Duration = Duration::from_secs(60);

/// Writes the overlays' conditions on every cluster change and every minute, until the state watch ends.
pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    if ctx.state.node_overlays.is_none() {
        return Ok(());
    }
    let mut changed = ctx.state.changed.clone();
    loop {
        write_statuses(&ctx).await;
        tokio::select! {
            result = changed.changed() => if result.is_err() {
                return Ok(());
            },
            () = tokio::time::sleep(RESYNC_INTERVAL) => {}
        }
    }
}

async fn write_statuses<C: CloudProvider>(ctx: &Context<C>) {
    let Some(overlays) = ctx.state.overlays() else {
        return;
    };
    let pools = owned(ctx.state.node_pools.state());
    let classes = owned(ctx.state.node_classes.state());
    let mut catalogs = ctx.catalogs.clone();
    let (_, evaluation) = overlaid_class_catalogs(ctx, &mut catalogs, &pools, &classes).await;
    let Some(evaluation) = evaluation else {
        return;
    };
    let now = rfc3339(ctx.clock.now());
    let api: Api<NodeOverlay> = Api::all(ctx.client.clone());
    for overlay in &overlays {
        let Some(name) = overlay.metadata.name.as_deref() else {
            continue;
        };
        let Some(verdict) = evaluation.verdicts.get(name) else {
            continue;
        };
        let Some(patch) = status_patch(overlay, verdict, &now) else {
            continue;
        };
        let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
        let write = api.patch_status(name, &params, &patch);
        match calls::timed("patching the nodeoverlay status", write).await {
            Ok(_) => tracing::debug!(nodeoverlay = %name, ?verdict, "updated nodeoverlay status"),
            Err(calls::ReconcileError::Kube(::kube::Error::Api(status))) if status.code == 409 => {
                tracing::debug!(nodeoverlay = %name, "nodeoverlay changed meanwhile; its status is written on the next pass")
            }
            Err(error) => {
                tracing::warn!(nodeoverlay = %name, %error, "could not update the nodeoverlay status")
            }
        }
    }
}

/// The status patch that brings `overlay`'s conditions to `verdict`, if they differ.
fn status_patch(overlay: &NodeOverlay, verdict: &Verdict, now: &str) -> Option<serde_json::Value> {
    let mut conditions = overlay
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let generation = overlay.metadata.generation;
    let (ok, reason, message) = verdict.condition();
    let mut changed = condition::set(
        &mut conditions,
        VALIDATION_SUCCEEDED,
        ok,
        reason,
        message,
        now,
        generation,
    );
    let (ready_reason, ready_message) = if ok {
        (READY.to_owned(), String::new())
    } else {
        (
            "UnhealthyDependents".to_owned(),
            format!("{VALIDATION_SUCCEEDED}=False"),
        )
    };
    changed |= condition::set(
        &mut conditions,
        READY,
        ok,
        &ready_reason,
        &ready_message,
        now,
        generation,
    );
    // The list is replaced whole: guarded by the resourceVersion, so a concurrent write is not lost.
    changed.then(|| {
        json!({
            "metadata": {"resourceVersion": overlay.metadata.resource_version},
            "status": {"conditions": conditions},
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlay(status: serde_json::Value) -> NodeOverlay {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
            "metadata": {"name": "o", "generation": 2, "resourceVersion": "7"},
            "spec": {"requirements": []}, "status": status
        }))
        .expect("overlay")
    }

    #[test]
    fn conditions_follow_the_verdict_and_are_written_only_on_change() {
        let now = "2026-11-27T00:00:00Z";
        let patch = status_patch(&overlay(json!({})), &Verdict::Conflict, now).expect("a write");
        let conditions = &patch["status"]["conditions"];
        assert_eq!(conditions[0]["type"], "ValidationSucceeded");
        assert_eq!(conditions[0]["status"], "False");
        assert_eq!(conditions[0]["reason"], "Conflict");
        assert_eq!(conditions[0]["message"], "conflict with another overlay");
        assert_eq!(conditions[1]["type"], "Ready");
        assert_eq!(conditions[1]["reason"], "UnhealthyDependents");
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        let written = overlay(json!({"conditions": conditions}));
        assert!(status_patch(&written, &Verdict::Conflict, now).is_none());
        let healed = status_patch(&written, &Verdict::Applied, now).expect("a write");
        assert_eq!(healed["status"]["conditions"][0]["status"], "True");
        assert_eq!(healed["status"]["conditions"][1]["status"], "True");
        assert_eq!(healed["status"]["conditions"][1]["observedGeneration"], 2);
    }
}
