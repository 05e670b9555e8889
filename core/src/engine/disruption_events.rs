//! The per-node Events a disruption pass leaves, as Karpenter publishes them on the Node and its NodeClaim:
//! `DisruptionBlocked` when the node cannot be a candidate at all (not initialized, nominated, a
//! `do-not-disrupt` annotation, a PodDisruptionBudget, its pods would not fit anywhere for drift), and
//! `Unconsolidatable` when consolidation looked at it and found nothing better (no cheaper replacement, spot-to-spot
//! off, `WhenEmpty` with pods). Karpenter's wording is kept, since users search for it; the skips that say only
//! "not now" (consolidateAfter pending, a budget, a command already under way) leave no node Event.

use crate::disruption::{Command, ConsolidationMove, Method, Skip, Why, SPOT_TO_SPOT_TYPES};
use std::time::Duration;

/// Reason of the Event on a node that cannot be disrupted now.
pub const DISRUPTION_BLOCKED: &str = "DisruptionBlocked";
/// Reason of the Event on a node consolidation cannot improve.
pub const UNCONSOLIDATABLE: &str = "Unconsolidatable";

/// Reason of the Event on each node of a consolidation command when it is decided.
pub const CONSOLIDATION_CANDIDATE: &str = "ConsolidationCandidate";
/// Reason of the Event on each node of a consolidation command the 15 s re-check dropped.
pub const CONSOLIDATION_REJECTED: &str = "ConsolidationRejected";
/// Reason of the Event on a node (single-node move) or its NodePool (multi-node) a `Balanced` score approved.
pub const CONSOLIDATION_APPROVED: &str = "ConsolidationApproved";
/// How long the same Event is not published again, unless it says otherwise (Karpenter's recorder).
const DEDUPE: Duration = Duration::from_secs(2 * 60);

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

/// Whether a skip says something lasting about the node, not only "not yet" of a node on its way in or out (not
/// initialized, no Node, deleting, nominated): what `kerf simulate` reports of the nodes it keeps.
pub fn is_lasting(why: &Why) -> bool {
    !matches!(
        why,
        Why::NotInitialized | Why::NoNode | Why::Deleting | Why::Nominated
    )
}

/// The node Events of a pass's `skipped`, each (claim, reason, message) once, in the order of the skips.
pub fn of<'s>(skipped: impl IntoIterator<Item = &'s Skip>) -> Vec<NodeEvent> {
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
        Why::HasBufferPods(_) => unconsolidatable(skip.why.to_string()),
        Why::SpotToSpotDisabled => unconsolidatable(
            "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node".into(),
        ),
        Why::TooFewSpotTypes(n) => unconsolidatable(format!(
            "SpotToSpotConsolidation requires {SPOT_TO_SPOT_TYPES} cheaper instance type options than the current candidate to consolidate, got {n}"
        )),
        _ => None,
    }
}

/// The `ConsolidationCandidate` Events of a consolidation command, one per candidate (Karpenter v1.14.1
/// `Command.EmitCandidateEvents`); none for the other methods. `id` names the command, as Karpenter's command ID.
pub fn candidate_events(command: &Command, id: &str) -> Vec<NodeEvent> {
    consolidation_events(command, id, |text| {
        (
            CONSOLIDATION_CANDIDATE,
            format!(
                "Consolidation candidate: {text} (savings: ${:.2})",
                command.savings
            ),
        )
    })
}

/// The `ConsolidationRejected` Events of a consolidation command the re-check refused for `why` (Karpenter's
/// `Command.EmitRejectedEvents`, with its reason words `budget`, `scheduling`, `churn`).
pub fn rejected_events(command: &Command, id: &str, why: &Why) -> Vec<NodeEvent> {
    let reason = validation_failure_reason(why);
    consolidation_events(command, id, |text| {
        (
            CONSOLIDATION_REJECTED,
            format!(
                "Consolidation rejected: {text}, reason: {reason} (savings: ${:.2})",
                command.savings
            ),
        )
    })
}

/// Karpenter's word for why validation refused a command: `budget` (a candidate was nominated or the budget ran
/// out), `scheduling` (the simulation now needs other replacements, or none), `churn` (a candidate is no longer
/// one).
pub fn validation_failure_reason(why: &Why) -> &'static str {
    match why {
        Why::Nominated | Why::Budget { .. } => "budget",
        Why::Changed
        | Why::PodsDoNotFit { .. }
        | Why::UninitializedNode { .. }
        | Why::TooManyReplacements(_)
        | Why::NoCheaperReplacement
        | Why::SpotToSpotDisabled
        | Why::TooFewSpotTypes(_)
        | Why::Unbalanced
        | Why::UnknownOffering => "scheduling",
        _ => "churn",
    }
}

fn consolidation_events(
    command: &Command,
    id: &str,
    worded: impl Fn(&str) -> (&'static str, String),
) -> Vec<NodeEvent> {
    if !matches!(
        command.method,
        Method::SingleNodeConsolidation | Method::MultiNodeConsolidation
    ) {
        return Vec::new();
    }
    command
        .candidates
        .iter()
        .map(|target| {
            let (reason, message) = worded(&command_text(command, id, target));
            NodeEvent {
                claim: target.claim.clone(),
                reason,
                message,
                dedupe: DEDUPE,
            }
        })
        .collect()
}

/// Karpenter's `Command.StringForNode`: the whole command for a single-node one, the node in its context for a
/// multi-node one.
fn command_text(command: &Command, id: &str, target: &crate::disruption::Target) -> String {
    let name = |t: &crate::disruption::Target| t.node.clone().unwrap_or_else(|| t.claim.clone());
    let decision = if command.is_delete() {
        "delete"
    } else {
        "replace"
    };
    if command.candidates.len() > 1 {
        return format!(
            "{decision}: [{}] (part of {}-node consolidation)",
            name(target),
            command.candidates.len()
        );
    }
    let mut pools: Vec<&str> = Vec::new();
    for t in &command.candidates {
        if !pools.contains(&t.nodepool.as_str()) {
            pools.push(&t.nodepool);
        }
    }
    let sources: Vec<String> = command.candidates.iter().map(name).collect();
    let head = format!(
        "{}/{id}: {decision}: nodepools=[{}]: [{}]",
        command.reason,
        pools.join(","),
        sources.join(", ")
    );
    let savings = format!("(savings: ${:.2})", command.savings);
    match command.replacements.len() {
        0 => format!("{head} {savings}"),
        1 => format!("{head} -> [1 replacement] {savings}"),
        n => format!("{head} -> [{n} replacements] {savings}"),
    }
}

/// Where a `ConsolidationApproved` Event goes: the node of a single-node move, or the NodePool of a multi-node
/// one.
#[derive(Clone, Debug, PartialEq)]
pub enum ApprovedOn {
    Node(String),
    NodePool(String),
}

/// The `ConsolidationApproved` Events of the moves a `Balanced` score approved (Karpenter's balanced evaluator):
/// "score S >= threshold T (k: K, savings X%, disruption Y%)".
pub fn approved_events(moves: &[ConsolidationMove]) -> Vec<(ApprovedOn, String)> {
    moves
        .iter()
        .filter_map(|m| {
            let score = m.score.as_ref().filter(|s| s.passed)?;
            let on = match m.claims.as_slice() {
                [claim] => ApprovedOn::Node(claim.clone()),
                _ => ApprovedOn::NodePool(m.nodepool.clone()),
            };
            let message = format!(
                "score {} >= threshold {:.2} (k: {}, savings {:.1}%, disruption {:.1}%)",
                go_float(score.value),
                score.threshold,
                score.k,
                score.savings_fraction * 100.0,
                score.disruption_fraction * 100.0
            );
            Some((on, message))
        })
        .collect()
}

/// `%.2f` as Go prints it, `+Inf` included.
fn go_float(value: f64) -> String {
    if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        format!("{value:.2}")
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

    fn target(claim: &str, node: &str) -> crate::disruption::Target {
        crate::disruption::Target {
            claim: claim.into(),
            node: Some(node.into()),
            nodepool: "default".into(),
        }
    }

    fn command(
        method: Method,
        candidates: Vec<crate::disruption::Target>,
        replace: bool,
    ) -> Command {
        let replacement = crate::scheduling::PlannedClaim {
            nodepool: "default".into(),
            requirements: crate::api::requirements::Requirements::new(),
            instance_types: Default::default(),
            pods: Vec::new(),
            requests: crate::catalog::Resources::default(),
            cheapest: None,
        };
        Command {
            method,
            reason: crate::disruption::Reason::Underutilized,
            candidates,
            replacements: if replace {
                vec![replacement]
            } else {
                Vec::new()
            },
            savings: 0.1234,
            budgets: Vec::new(),
            destinations: Vec::new(),
        }
    }

    /// Karpenter v1.14.1 `disruption/events/events.go` (`ConsolidationCandidate`, `ConsolidationRejected`) and
    /// `types.go` (`Command.String`, `StringForNode`, `getValidationFailureReason`).
    #[test]
    fn consolidation_commands_say_what_they_do_in_karpenters_words() {
        let single = command(
            Method::SingleNodeConsolidation,
            vec![target("default-a", "node-a")],
            true,
        );
        let events = candidate_events(&single, "c0ffee");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].reason, CONSOLIDATION_CANDIDATE);
        assert_eq!(
            events[0].message,
            "Consolidation candidate: Underutilized/c0ffee: replace: nodepools=[default]: [node-a] -> [1 replacement] (savings: $0.12) (savings: $0.12)"
        );
        let multi = command(
            Method::MultiNodeConsolidation,
            vec![target("default-a", "node-a"), target("default-b", "node-b")],
            false,
        );
        let rejected = rejected_events(&multi, "c0ffee", &Why::Changed);
        assert_eq!(
            rejected.iter().map(|e| (e.claim.as_str(), e.message.as_str())).collect::<Vec<_>>(),
            [
                ("default-a", "Consolidation rejected: delete: [node-a] (part of 2-node consolidation), reason: scheduling (savings: $0.12)"),
                ("default-b", "Consolidation rejected: delete: [node-b] (part of 2-node consolidation), reason: scheduling (savings: $0.12)"),
            ]
        );
        for (why, reason) in [
            (Why::Nominated, "budget"),
            (
                Why::Budget {
                    message: "b".into(),
                },
                "budget",
            ),
            (Why::Gone("default-a".into()), "churn"),
            (Why::Deleting, "churn"),
            (Why::NoCheaperReplacement, "scheduling"),
        ] {
            assert_eq!(validation_failure_reason(&why), reason, "{why:?}");
        }
        // Other methods leave no consolidation Events.
        assert!(candidate_events(
            &command(Method::Emptiness, vec![target("a", "n")], false),
            "x"
        )
        .is_empty());
        assert!(
            candidate_events(&command(Method::Drift, vec![target("a", "n")], true), "x").is_empty()
        );
    }

    /// Karpenter's balanced evaluator: a single-node move's approval goes on the node, a multi-node move's on the
    /// pool; rejections publish nothing.
    #[test]
    fn balanced_approvals_are_events_with_the_score() {
        let scored = |claims: &[&str], value: f64, passed: bool| ConsolidationMove {
            nodepool: "default".into(),
            policy: crate::api::nodepool::ConsolidationPolicy::Balanced,
            move_approved: passed,
            score: Some(crate::disruption::MoveScore {
                value,
                passed,
                threshold: 0.5,
                k: 2,
                savings_fraction: 0.05,
                disruption_fraction: 0.02,
            }),
            claims: claims.iter().map(|c| (*c).to_owned()).collect(),
        };
        let events = approved_events(&[
            scored(&["default-a"], 2.5, true),
            scored(&["default-a", "default-b"], f64::INFINITY, true),
            scored(&["default-c"], 0.1, false),
        ]);
        assert_eq!(
            events,
            [
                (
                    ApprovedOn::Node("default-a".into()),
                    "score 2.50 >= threshold 0.50 (k: 2, savings 5.0%, disruption 2.0%)".to_owned()
                ),
                (
                    ApprovedOn::NodePool("default".into()),
                    "score +Inf >= threshold 0.50 (k: 2, savings 5.0%, disruption 2.0%)".to_owned()
                ),
            ]
        );
    }
}
