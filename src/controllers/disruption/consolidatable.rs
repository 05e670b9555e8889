//! The `Consolidatable` status condition of NodeClaims, as Karpenter writes it: `True` once the claim's
//! `consolidateAfter` has elapsed since its last pod event (or its initialization), with that instant as its
//! transition time; removed while it has not, and under `consolidateAfter: Never`. Users see which nodes
//! consolidation may now look at.

use super::super::nodeclaim::conditions::with_true_or_absent;
use super::super::Context;
use super::drifted::mirror;
use crate::api::condition::Condition;
use crate::api::nodeclaim::NodeClaim;
use crate::disruption::NodeInput;
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;

pub const CONSOLIDATABLE: &str = "Consolidatable";

/// `claim`'s conditions with `Consolidatable` brought in line with `since` (when it became consolidatable, or
/// `None`), or `None` when they already are.
pub fn updated_conditions(claim: &NodeClaim, since: Option<Timestamp>) -> Option<Vec<Condition>> {
    let since = since.map(|t| t.to_string());
    let verdict = since.as_ref().map(|_| (CONSOLIDATABLE, ""));
    with_true_or_absent(
        claim,
        CONSOLIDATABLE,
        verdict,
        since.as_deref().unwrap_or_default(),
    )
}

/// Writes `Consolidatable` on every claim of `nodes` (not being deleted) whose condition disagrees with
/// `consolidatable`, the engine's verdict by claim name. Failures are logged; the next pass tries again.
pub async fn mark<C>(
    ctx: &Context<C>,
    nodes: &[NodeInput],
    consolidatable: &BTreeMap<String, Timestamp>,
) {
    mirror(ctx, nodes, CONSOLIDATABLE, |claim, name| {
        updated_conditions(claim, consolidatable.get(name).copied())
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::nodeclaim::tests::claim;
    use serde_json::json;

    /// Karpenter's nodeclaim disruption suite: "should mark NodeClaims as consolidatable" once consolidateAfter
    /// elapsed (the transition time is when it did) and "should remove the status condition" when no longer.
    #[test]
    fn consolidatable_is_set_at_its_instant_and_removed_when_it_no_longer_holds() {
        let since: Timestamp = "2026-11-26T10:00:30Z".parse().expect("time");
        let mut c = claim("a");
        let set = updated_conditions(&c, Some(since)).expect("a change");
        let condition = set.iter().find(|c| c.type_ == CONSOLIDATABLE).expect("set");
        assert_eq!(condition.status, "True");
        assert_eq!(condition.last_transition_time, "2026-11-26T10:00:30Z");
        c.status = Some(serde_json::from_value(json!({ "conditions": set })).expect("status"));
        assert_eq!(updated_conditions(&c, Some(since)), None, "unchanged");
        let removed = updated_conditions(&c, None).expect("removed");
        assert!(removed.iter().all(|c| c.type_ != CONSOLIDATABLE));
    }
}
