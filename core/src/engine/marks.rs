//! What disruption writes on NodeClaims so users see what the engine sees, as Karpenter writes it:
//! - `Drifted`: `True` with the drift reason (`AMIDrift`, `NodePoolDrifted`, ...) as reason and message, on every
//!   launched claim judged drifted; removed once it no longer is. It tells which nodes a roll-out will replace.
//! - `Consolidatable`: `True` once `consolidateAfter` has elapsed since the claim's last pod event (or its
//!   initialization), with that instant as its transition time; removed while it has not.
//! - `DisruptionReason`: `True` with the command's reason on every candidate of a command under way; removed when
//!   the command is abandoned (Karpenter's `markDisrupted` and `ClearNodeClaimsCondition`).
//!
//! [`of_pass`] gives one pass's marks, all conditions of a claim in one write; the controller patches them with
//! the claim's `resourceVersion` as a precondition, the simulator sets them on its claims.

use super::conditions::{is_true, with_true_or_absent, LAUNCHED};
use crate::api::condition::Condition;
use crate::api::nodeclaim::NodeClaim;
use crate::disruption::{Decision, NodeInput};
use k8s_openapi::jiff::Timestamp;
use std::borrow::Cow;

pub const DRIFTED: &str = "Drifted";
pub const CONSOLIDATABLE: &str = "Consolidatable";
pub const DISRUPTION_REASON: &str = "DisruptionReason";

/// `claim`'s conditions with `Drifted` brought in line with `drift` (the reason, or `None` when not drifted), or
/// `None` when they already are. A claim that is not `Launched` is never marked drifted.
pub fn drifted(claim: &NodeClaim, drift: Option<&str>, now: Timestamp) -> Option<Vec<Condition>> {
    let drift = drift.filter(|_| is_true(claim, LAUNCHED));
    with_true_or_absent(claim, DRIFTED, drift.map(|r| (r, r)), &now.to_string())
}

/// `claim`'s conditions with `Consolidatable` brought in line with `since` (when it became consolidatable, or
/// `None`), or `None` when they already are.
pub fn consolidatable(claim: &NodeClaim, since: Option<Timestamp>) -> Option<Vec<Condition>> {
    let since = since.map(|t| t.to_string());
    let verdict = since.as_ref().map(|_| (CONSOLIDATABLE, ""));
    with_true_or_absent(
        claim,
        CONSOLIDATABLE,
        verdict,
        since.as_deref().unwrap_or_default(),
    )
}

/// `claim`'s conditions with `DisruptionReason` set to `reason`, or removed for `None`; `None` when that changes
/// nothing.
pub fn disruption_reason(
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

/// A claim's conditions with one condition brought in line, or `None` when it already is.
type Update<'a> = dyn Fn(&NodeClaim) -> Option<Vec<Condition>> + 'a;

/// One claim's conditions after a pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Mark {
    pub claim: String,
    /// The claim's `resourceVersion` the marks were computed from: the write's precondition.
    pub resource_version: Option<String>,
    /// The claim's whole conditions list, as it is to be.
    pub conditions: Vec<Condition>,
    /// Which conditions changed (for the log).
    pub changed: Vec<&'static str>,
}

/// The marks of a pass that decided `decision` on `nodes` at `now`: for every claim not being deleted whose
/// conditions disagree, `Drifted` and `Consolidatable` brought in line with the verdicts, and a
/// `DisruptionReason` left on a claim no command holds (neither tainted for disruption nor being deleted: a
/// command a crash interrupted) removed. Commands are carried out after the pass, so none is under way now.
pub fn of_pass(nodes: &[NodeInput], decision: &Decision, now: Timestamp) -> Vec<Mark> {
    nodes
        .iter()
        .filter(|n| n.claim.metadata.deletion_timestamp.is_none())
        .filter_map(|node| {
            let name = node.claim.metadata.name.as_deref()?;
            let mut claim = Cow::Borrowed(node.claim.as_ref());
            let mut changed = Vec::new();
            let updates: [(&'static str, &Update); 3] = [
                (DRIFTED, &|c| {
                    drifted(c, decision.drifted.get(name).copied(), now)
                }),
                (CONSOLIDATABLE, &|c| {
                    consolidatable(c, decision.consolidatable.get(name).copied())
                }),
                (DISRUPTION_REASON, &|c| {
                    (!node.queued)
                        .then(|| disruption_reason(c, None, now))
                        .flatten()
                }),
            ];
            for (condition, update) in updates {
                if let Some(conditions) = update(&claim) {
                    claim
                        .to_mut()
                        .status
                        .get_or_insert_with(Default::default)
                        .conditions = Some(conditions);
                    changed.push(condition);
                }
            }
            if changed.is_empty() {
                return None;
            }
            Some(Mark {
                claim: name.to_owned(),
                resource_version: node.claim.metadata.resource_version.clone(),
                conditions: claim
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.clone())
                    .unwrap_or_default(),
                changed,
            })
        })
        .collect()
}

/// Sets `conditions` as `claim`'s conditions (the simulator's way of writing a mark).
pub fn apply(claim: &mut NodeClaim, conditions: Vec<Condition>) {
    claim.status.get_or_insert_with(Default::default).conditions = Some(conditions);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn with_conditions(conditions: serde_json::Value) -> NodeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "a", "resourceVersion": "7", "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []},
            "status": {"conditions": conditions},
        }))
        .expect("claim")
    }

    fn launched() -> serde_json::Value {
        json!({"type": "Launched", "status": "True", "reason": "Launched", "message": "",
               "lastTransitionTime": "2026-11-23T00:00:00Z"})
    }

    fn types(conditions: &[Condition]) -> Vec<&str> {
        conditions.iter().map(|c| c.type_.as_str()).collect()
    }

    /// Karpenter's nodeclaim disruption suite (drift): a launched claim judged drifted gets `Drifted` with the
    /// reason, once; another reason is a change; no longer drifted removes it.
    #[test]
    fn a_launched_claim_is_marked_drifted_with_the_reason_once() {
        let claim = with_conditions(json!([launched()]));
        let t1 = at("2026-11-23T01:00:00Z");
        let conditions = drifted(&claim, Some("AMIDrift"), t1).expect("a change");
        let mark = conditions
            .iter()
            .find(|c| c.type_ == DRIFTED)
            .expect("Drifted");
        assert_eq!(
            (
                mark.status.as_str(),
                mark.reason.as_str(),
                mark.message.as_str()
            ),
            ("True", "AMIDrift", "AMIDrift")
        );
        assert_eq!(mark.last_transition_time, t1.to_string());
        assert_eq!(types(&conditions), ["Launched", "Drifted"], "others kept");
        let mut marked = claim.clone();
        apply(&mut marked, conditions);
        assert_eq!(
            drifted(&marked, Some("AMIDrift"), at("2026-11-23T02:00:00Z")),
            None
        );
        assert!(drifted(&marked, Some("SubnetDrift"), t1).is_some());
        let cleared = drifted(&marked, None, t1).expect("a change");
        assert_eq!(types(&cleared), ["Launched"]);
    }

    #[test]
    fn a_claim_not_launched_is_never_marked_drifted_and_a_stale_mark_goes() {
        let t = at("2026-11-23T01:00:00Z");
        let bare = with_conditions(json!([]));
        assert_eq!(drifted(&bare, Some("NodePoolDrifted"), t), None);
        let stale = with_conditions(
            json!([{"type": "Drifted", "status": "True", "reason": "AMIDrift",
            "message": "AMIDrift", "lastTransitionTime": "2026-11-23T00:00:00Z"}]),
        );
        assert_eq!(drifted(&stale, Some("AMIDrift"), t), Some(vec![]));
    }

    /// Karpenter's nodeclaim disruption suite: "should mark NodeClaims as consolidatable" once consolidateAfter
    /// elapsed (the transition time is when it did) and "should remove the status condition" when no longer.
    #[test]
    fn consolidatable_is_set_at_its_instant_and_removed_when_it_no_longer_holds() {
        let since = at("2026-11-26T10:00:30Z");
        let mut c = with_conditions(json!([]));
        let set = consolidatable(&c, Some(since)).expect("a change");
        let condition = set.iter().find(|c| c.type_ == CONSOLIDATABLE).expect("set");
        assert_eq!(condition.status, "True");
        assert_eq!(condition.last_transition_time, "2026-11-26T10:00:30Z");
        apply(&mut c, set);
        assert_eq!(consolidatable(&c, Some(since)), None, "unchanged");
        let removed = consolidatable(&c, None).expect("removed");
        assert!(removed.iter().all(|c| c.type_ != CONSOLIDATABLE));
    }

    /// Karpenter's disruption suite: candidates get `DisruptionReason` with the command's reason, and an abandoned
    /// command clears it.
    #[test]
    fn the_disruption_reason_is_set_once_and_cleared() {
        let t = at("2026-11-26T10:00:00Z");
        let mut c = with_conditions(json!([]));
        let set = disruption_reason(&c, Some("Underutilized"), t).expect("a change");
        let condition = set
            .iter()
            .find(|c| c.type_ == DISRUPTION_REASON)
            .expect("set");
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("True", "Underutilized")
        );
        apply(&mut c, set);
        assert_eq!(disruption_reason(&c, Some("Underutilized"), t), None);
        let cleared = disruption_reason(&c, None, t).expect("cleared");
        assert!(cleared.iter().all(|c| c.type_ != DISRUPTION_REASON));
    }

    /// A pass's marks put every changed condition of a claim into one write carrying its resourceVersion; a
    /// `DisruptionReason` stays on a claim tainted for disruption and goes from one that is not.
    #[test]
    fn a_pass_writes_each_claim_once_with_all_its_changes() {
        let t = at("2026-11-26T10:00:00Z");
        let reason = json!({"type": "DisruptionReason", "status": "True", "reason": "Empty", "message": "Empty",
                            "lastTransitionTime": "2026-11-26T09:00:00Z"});
        let node = |queued: bool| {
            let mut input =
                NodeInput::new(with_conditions(json!([launched(), reason])), None, vec![]);
            input.queued = queued;
            input
        };
        let decision = Decision {
            drifted: BTreeMap::from([("a".to_owned(), "NodePoolDrifted")]),
            consolidatable: BTreeMap::from([("a".to_owned(), at("2026-11-26T09:30:00Z"))]),
            ..Decision::default()
        };
        let marks = of_pass(&[node(false)], &decision, t);
        assert_eq!(marks.len(), 1);
        assert_eq!(marks[0].resource_version.as_deref(), Some("7"));
        assert_eq!(
            marks[0].changed,
            [DRIFTED, CONSOLIDATABLE, DISRUPTION_REASON]
        );
        assert_eq!(
            types(&marks[0].conditions),
            ["Launched", "Drifted", "Consolidatable"]
        );
        let queued = of_pass(&[node(true)], &decision, t);
        assert_eq!(queued[0].changed, [DRIFTED, CONSOLIDATABLE]);
        // Nothing to change, nothing to write.
        let mut settled = node(true);
        apply(settled.claim_mut(), queued[0].conditions.clone());
        assert_eq!(of_pass(&[settled], &decision, t), []);
    }
}
