//! The claim's termination deadline: read from its `karpenter.sh/nodeclaim-termination-timestamp` annotation or
//! its `terminationGracePeriod`, and stamped on the claim so that users and node repair see it.

use super::super::kit::calls::{self, ReconcileError};
use super::super::Context;
use super::TERMINATION_GRACE_PERIOD_EXPIRING;
use crate::api::nodeclaim::{NodeClaim, TERMINATION_TIMESTAMP};
use crate::disruption::parse_go_duration;
use crate::engine::repair::rfc3339_seconds;
use ::kube::api::Api;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

/// The claim's termination deadline: its `karpenter.sh/nodeclaim-termination-timestamp` annotation (node repair
/// sets it to the moment it decided; this controller to the grace deadline), else its deletion time plus
/// `terminationGracePeriod`, if it has one. An annotation that is not a time is passed over (Karpenter fails the
/// termination on it until someone fixes it by hand).
pub(super) fn deadline(claim: &NodeClaim) -> Option<Timestamp> {
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
pub(super) async fn stamp_deadline<C>(
    ctx: &Context<C>,
    claim: &NodeClaim,
) -> Result<(), ReconcileError> {
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
