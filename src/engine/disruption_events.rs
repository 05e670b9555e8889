//! The per-node Events a disruption pass leaves, as Karpenter publishes them on the Node and its NodeClaim:
//! `DisruptionBlocked` when the node cannot be a candidate at all (not initialized, nominated, a
//! `do-not-disrupt` annotation, a PodDisruptionBudget, its pods would not fit anywhere for drift), and
//! `Unconsolidatable` when consolidation looked at it and found nothing better (no cheaper replacement, spot-to-spot
//! off, `WhenEmpty` with pods). Karpenter's wording is kept, since users search for it; the skips that say only
//! "not now" (consolidateAfter pending, a budget, a command already under way) leave no node Event.

use crate::disruption::{Method, Skip, Why, SPOT_TO_SPOT_TYPES};
use std::time::Duration;

/// Reason of the Event on a node that cannot be disrupted now.
pub const DISRUPTION_BLOCKED: &str = "DisruptionBlocked";
/// Reason of the Event on a node consolidation cannot improve.
pub const UNCONSOLIDATABLE: &str = "Unconsolidatable";

/// One Event for a node's Node (when it has one) and NodeClaim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEvent {
    pub claim: String,
    pub reason: &'static str,
    pub message: String,
    /// How long the same Event on the same node is not published again (Karpenter: 15 min for
    /// `Unconsolidatable`, its recorder's 2 min otherwise).
    pub dedupe: Duration,
}

/// The node Events of a pass's `skipped`, each (claim, reason, message) once, in the order of the skips.
pub fn of(skipped: &[Skip]) -> Vec<NodeEvent> {
    let mut events: Vec<NodeEvent> = Vec::new();
    for skip in skipped {
        let Some(claim) = &skip.claim else {
            continue;
        };
        let Some((reason, message)) = worded(skip) else {
            continue;
        };
        let event = NodeEvent {
            claim: claim.clone(),
            reason,
            message,
            dedupe: if reason == UNCONSOLIDATABLE {
                Duration::from_secs(15 * 60)
            } else {
                Duration::from_secs(2 * 60)
            },
        };
        if !events.contains(&event) {
            events.push(event);
        }
    }
    events
}

/// The Event of one skip, in Karpenter's words; `None` for skips Karpenter publishes nothing for.
fn worded(skip: &Skip) -> Option<(&'static str, String)> {
    let pool = skip.nodepool.as_deref().unwrap_or_default();
    let consolidating = matches!(
        skip.method,
        Method::MultiNodeConsolidation | Method::SingleNodeConsolidation | Method::Emptiness
    );
    let blocked = |message: String| Some((DISRUPTION_BLOCKED, message));
    let unconsolidatable = |message: String| Some((UNCONSOLIDATABLE, message));
    match &skip.why {
        Why::NotInitialized => blocked("Node isn't initialized".into()),
        Why::NoNode => blocked("Nodeclaim does not have an associated node".into()),
        Why::Deleting => blocked("Node is deleting or marked for deletion".into()),
        Why::Nominated => blocked("Node is nominated for a pending pod".into()),
        Why::NoNodePool(label) => blocked(format!("Node doesn't have required label {label:?}")),
        Why::UnknownNodePool(name) => blocked(format!("NodePool not found (NodePool={name})")),
        Why::Blocked(blocker) => blocked(sentence(&blocker.to_string())),
        Why::PodsDoNotFit { .. } | Why::UninitializedNode { .. } if !consolidating => {
            blocked(sentence(&skip.why.to_string()))
        }
        Why::PodsDoNotFit { .. } | Why::UninitializedNode { .. } => {
            unconsolidatable(sentence(&skip.why.to_string()))
        }
        Why::ConsolidateNever if consolidating => {
            unconsolidatable(format!("NodePool {pool:?} has consolidation disabled"))
        }
        Why::WhenEmptyOnly => unconsolidatable(format!(
            "NodePool {pool:?} has consolidation policy WhenEmpty, but node is not empty"
        )),
        Why::UnknownOffering => unconsolidatable(sentence(&skip.why.to_string())),
        Why::TooManyReplacements(n) => {
            unconsolidatable(format!("Can't remove without creating {n} candidates"))
        }
        Why::NoCheaperReplacement => unconsolidatable("Can't replace with a cheaper node".into()),
        Why::SpotToSpotDisabled => unconsolidatable(
            "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node".into(),
        ),
        Why::TooFewSpotTypes(n) => unconsolidatable(format!(
            "SpotToSpotConsolidation requires {SPOT_TO_SPOT_TYPES} cheaper instance type options than the current candidate to consolidate, got {n}"
        )),
        _ => None,
    }
}

/// `text` with its first letter capitalized (Karpenter's `pretty.Sentence`).
fn sentence(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disruption::Blocker;

    fn skip(method: Method, why: Why) -> Skip {
        Skip {
            method,
            nodepool: Some("default".into()),
            claim: Some("default-a".into()),
            why,
        }
    }

    /// The Event's reason and message a skip should give, if any.
    type Expected = Option<(&'static str, &'static str)>;

    fn event(method: Method, why: Why) -> Option<(&'static str, String)> {
        of(&[skip(method, why)])
            .into_iter()
            .next()
            .map(|e| (e.reason, e.message))
    }

    /// Karpenter's messages, for the skips it publishes them for (disruption `types.go` NewCandidate,
    /// `consolidation.go`, `drift.go`), and none for the "not now" skips.
    #[test]
    fn skips_become_karpenters_node_events() {
        let single = Method::SingleNodeConsolidation;
        let table: Vec<(Method, Why, Expected)> = vec![
            (single, Why::NotInitialized, Some((DISRUPTION_BLOCKED, "Node isn't initialized"))),
            (single, Why::Nominated, Some((DISRUPTION_BLOCKED, "Node is nominated for a pending pod"))),
            (
                Method::Drift,
                Why::Blocked(Blocker::NodeDoNotDisrupt),
                Some((
                    DISRUPTION_BLOCKED,
                    "Disruption is blocked through the \"karpenter.sh/do-not-disrupt\" annotation",
                )),
            ),
            (single, Why::NoCheaperReplacement, Some((UNCONSOLIDATABLE, "Can't replace with a cheaper node"))),
            (
                single,
                Why::SpotToSpotDisabled,
                Some((
                    UNCONSOLIDATABLE,
                    "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node",
                )),
            ),
            (
                single,
                Why::TooFewSpotTypes(4),
                Some((
                    UNCONSOLIDATABLE,
                    "SpotToSpotConsolidation requires 15 cheaper instance type options than the current candidate to consolidate, got 4",
                )),
            ),
            (
                single,
                Why::WhenEmptyOnly,
                Some((
                    UNCONSOLIDATABLE,
                    "NodePool \"default\" has consolidation policy WhenEmpty, but node is not empty",
                )),
            ),
            (Method::Emptiness, Why::ConsolidateNever, Some((UNCONSOLIDATABLE, "NodePool \"default\" has consolidation disabled"))),
            (
                Method::Drift,
                Why::PodsDoNotFit { pod: "default/p".into(), reason: "no instance type fits".into() },
                Some((DISRUPTION_BLOCKED, "Pod \"default/p\" would not fit elsewhere: no instance type fits")),
            ),
            (single, Why::Queued, None),
            (single, Why::ConsolidateAfter("2026-11-26T10:00:00Z".parse().expect("time")), None),
            (single, Why::Budget { message: "budget".into() }, None),
        ];
        for (method, why, want) in table {
            let label = format!("{method:?} {why:?}");
            let got = event(method, why);
            assert_eq!(got.as_ref().map(|(r, m)| (*r, m.as_str())), want, "{label}");
        }
    }

    #[test]
    fn each_event_is_listed_once_with_its_dedupe_window() {
        let skips = [
            skip(Method::SingleNodeConsolidation, Why::NoCheaperReplacement),
            skip(Method::MultiNodeConsolidation, Why::NoCheaperReplacement),
            skip(Method::Drift, Why::Nominated),
            Skip {
                claim: None,
                ..skip(Method::Drift, Why::Nominated)
            },
        ];
        let events = of(&skips);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].dedupe, Duration::from_secs(900));
        assert_eq!(events[1].dedupe, Duration::from_secs(120));
    }
}
