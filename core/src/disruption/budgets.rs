//! Disruption budgets, exactly as controller-behaviour.md §3.6 describes them: count a pool's nodes, evaluate
//! each budget at `now`, take the minimum over the active budgets that apply to a reason, and subtract the
//! nodes already disrupting.

use super::window::Window;
use crate::api::condition::Condition;
use crate::api::cron::CronError;
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::{Budget, DisruptionReason, NodePool};
use crate::api::validation::grammar::parse_duration;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;
use std::fmt;

/// The reasons budgets distinguish, in the order the disruption methods run.
pub const REASONS: [DisruptionReason; 3] = [
    DisruptionReason::Empty,
    DisruptionReason::Drifted,
    DisruptionReason::Underutilized,
];

/// `nodes` of a budget without one (the CRD default).
const DEFAULT_NODES: &str = "10%";

/// What budgets need to know of one managed node (a NodeClaim and its Node).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeState {
    /// The claim is `Initialized`.
    pub initialized: bool,
    /// The claim has `InstanceTerminating=True`: it no longer counts at all.
    pub instance_terminating: bool,
    /// The Node's `Ready` condition is `True`.
    pub ready: bool,
    /// A deletionTimestamp is set for any reason (expiry, manual, interruption), or disruption queued it.
    pub marked_for_deletion: bool,
}

impl NodeState {
    /// Reads the state off a claim, its Node once registered, and whether disruption has queued it.
    pub fn of(claim: &NodeClaim, node: Option<&Node>, queued: bool) -> Self {
        let claim_condition = |type_: &str| {
            claim
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_deref())
                .is_some_and(|c| is_true(c, type_))
        };
        let ready = node
            .and_then(|n| n.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let deleting = claim.metadata.deletion_timestamp.is_some()
            || node.is_some_and(|n| n.metadata.deletion_timestamp.is_some());
        NodeState {
            initialized: claim_condition("Initialized"),
            instance_terminating: claim_condition("InstanceTerminating"),
            ready,
            marked_for_deletion: deleting || queued,
        }
    }
}

fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// The counts one pool's budgets work on (step 1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounts {
    /// Initialized managed nodes.
    pub total: u64,
    /// Those that are not Ready or are marked for deletion.
    pub disrupting: u64,
}

impl PoolCounts {
    pub fn add(&mut self, node: &NodeState) {
        if !node.initialized || node.instance_terminating {
            return;
        }
        self.total += 1;
        if !node.ready || node.marked_for_deletion {
            self.disrupting += 1;
        }
    }
}

/// Counts the nodes of every pool, given each node's pool name and state.
pub fn count_nodes<'a>(
    nodes: impl IntoIterator<Item = (&'a str, NodeState)>,
) -> BTreeMap<String, PoolCounts> {
    let mut counts: BTreeMap<String, PoolCounts> = BTreeMap::new();
    for (pool, node) in nodes {
        counts.entry(pool.to_owned()).or_default().add(&node);
    }
    counts
}

/// A number of nodes that may be disrupted; `Unlimited` when no active budget applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Allowed {
    Nodes(u64),
    Unlimited,
}

impl Allowed {
    /// `max(self − n, 0)`.
    pub fn minus(self, n: u64) -> Allowed {
        match self {
            Allowed::Nodes(a) => Allowed::Nodes(a.saturating_sub(n)),
            Allowed::Unlimited => Allowed::Unlimited,
        }
    }

    pub fn is_zero(self) -> bool {
        self == Allowed::Nodes(0)
    }

    /// The gauge value: Karpenter reports "unlimited" as the largest int32.
    pub fn metric_value(self) -> i64 {
        match self {
            Allowed::Nodes(n) => i64::try_from(n).unwrap_or(i64::MAX),
            Allowed::Unlimited => i64::from(i32::MAX),
        }
    }
}

impl fmt::Display for Allowed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Allowed::Nodes(n) => write!(f, "{n}"),
            Allowed::Unlimited => f.write_str("unlimited"),
        }
    }
}

/// Why a budget cannot be evaluated. Any such budget blocks every reason of its pool (step 3).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("budgets[{index}]: invalid cron {schedule:?}: {source}")]
    Schedule {
        index: usize,
        schedule: String,
        #[source]
        source: CronError,
    },
    #[error("budgets[{index}]: invalid nodes {nodes:?}: expected a whole number or a percentage")]
    Nodes { index: usize, nodes: String },
    #[error("budgets[{index}]: invalid duration {duration:?}")]
    Duration { index: usize, duration: String },
    #[error("budgets[{index}]: a duration needs a schedule")]
    DurationWithoutSchedule { index: usize },
}

/// A budget's `nodes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Nodes {
    Count(u64),
    Percent(u64),
}

impl Nodes {
    fn parse(text: &str) -> Option<Nodes> {
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if let Some(p) = text.strip_suffix('%') {
            // 1–2 digits, or 100 (api-rules.md §2.8).
            let valid = digits(p) && (p.len() <= 2 || p == "100");
            return valid.then(|| Nodes::Percent(p.parse().unwrap_or(0)));
        }
        // A whole number without upper bound: one too large for u64 allows everything anyway.
        digits(text).then(|| Nodes::Count(text.parse().unwrap_or(u64::MAX)))
    }

    /// Rounded up: 10 % of 1–10 nodes is 1, of 0 nodes is 0, 20 % of 19 is 4.
    pub(super) fn of(self, total: u64) -> u64 {
        match self {
            Nodes::Count(n) => n,
            Nodes::Percent(p) => {
                let scaled = u128::from(p) * u128::from(total);
                u64::try_from(scaled.div_ceil(100)).unwrap_or(u64::MAX)
            }
        }
    }
}

/// One budget, parsed.
#[derive(Clone, Debug)]
pub(super) struct ParsedBudget {
    pub(super) spec: Budget,
    pub(super) nodes: Nodes,
    /// `None`: always active.
    pub(super) window: Option<Schedule>,
}

/// When a budget is active.
#[derive(Clone, Debug)]
pub(super) enum Schedule {
    Window(Window),
    /// A schedule without a duration: every window is empty, so the budget is never active.
    Never,
}

impl ParsedBudget {
    fn parse(index: usize, spec: &Budget) -> Result<Self, BudgetError> {
        let text = spec.nodes.as_deref().unwrap_or(DEFAULT_NODES);
        let nodes = Nodes::parse(text).ok_or_else(|| BudgetError::Nodes {
            index,
            nodes: text.to_owned(),
        })?;
        let window = match (&spec.schedule, &spec.duration) {
            (None, None) => None,
            (None, Some(_)) => return Err(BudgetError::DurationWithoutSchedule { index }),
            (Some(schedule), duration) => {
                let invalid = |source| BudgetError::Schedule {
                    index,
                    schedule: schedule.clone(),
                    source,
                };
                match duration {
                    None => {
                        // Karpenter still parses the schedule, so a bad one blocks the pool.
                        Window::new(schedule, std::time::Duration::ZERO).map_err(invalid)?;
                        Some(Schedule::Never)
                    }
                    Some(d) => {
                        let length = parse_duration(d).map_err(|_| BudgetError::Duration {
                            index,
                            duration: d.clone(),
                        })?;
                        Some(Schedule::Window(
                            Window::new(schedule, length).map_err(invalid)?,
                        ))
                    }
                }
            }
        };
        Ok(ParsedBudget {
            spec: spec.clone(),
            nodes,
            window,
        })
    }

    pub(super) fn is_active(&self, now: Timestamp) -> bool {
        match &self.window {
            None => true,
            Some(Schedule::Never) => false,
            Some(Schedule::Window(w)) => w.is_active(now),
        }
    }

    pub(super) fn applies_to(&self, reason: DisruptionReason) -> bool {
        // An explicitly empty list applies to no reason (an upstream quirk kept for parity).
        self.spec
            .reasons
            .as_ref()
            .is_none_or(|r| r.contains(&reason))
    }
}

/// A NodePool's budgets, parsed once and evaluated at any instant.
#[derive(Clone, Debug)]
pub struct Budgets {
    pub(super) budgets: Vec<ParsedBudget>,
    /// Every budget that failed to parse; any one blocks the pool.
    pub(super) errors: Vec<BudgetError>,
}

/// Which budget decides a pool's allowance for a reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Binding {
    /// No active budget applies: nothing restricts.
    Unrestricted,
    /// The budget at this index of `spec.disruption.budgets` gave the minimum (the first one on ties).
    Budget(usize),
    /// A budget cannot be evaluated, so the pool allows nothing for any reason.
    Invalid(BudgetError),
}

/// The budget of one pool for one reason at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowance {
    pub reason: DisruptionReason,
    /// The pool's initialized nodes, the base of percentages.
    pub total: u64,
    /// The minimum over the active budgets, before subtracting the disrupting nodes: what
    /// `karpenter_nodepools_allowed_disruptions` reports.
    pub allowed: Allowed,
    /// Nodes already disrupting (`karpenter_nodepools_nodes_consuming_budgets`).
    pub disrupting: u64,
    /// How many more nodes the method may disrupt now: `max(allowed − disrupting, 0)`.
    pub budget: Allowed,
    pub binding: Binding,
}

impl Allowance {
    /// The message of the NodePool `DisruptionBlocked` event, when the pool has nodes and allows none.
    pub fn blocked_message(&self) -> Option<String> {
        (self.total > 0 && self.allowed.is_zero()).then(|| {
            format!(
                "No allowed disruptions for disruption reason {:?} due to blocking budget",
                self.reason
            )
        })
    }
}

impl Budgets {
    /// The budgets of `pool`; without `disruption.budgets`, the CRD default `[{nodes: "10%"}]`.
    pub fn of(pool: &NodePool) -> Self {
        match pool
            .spec
            .disruption
            .as_ref()
            .and_then(|d| d.budgets.as_deref())
        {
            Some(budgets) => Self::parse(budgets),
            None => Self::parse(&[Budget::default()]),
        }
    }

    pub fn parse(budgets: &[Budget]) -> Self {
        let mut parsed = Vec::new();
        let mut errors = Vec::new();
        for (index, spec) in budgets.iter().enumerate() {
            match ParsedBudget::parse(index, spec) {
                Ok(b) => parsed.push(b),
                Err(e) => errors.push(e),
            }
        }
        // Indices in `parsed` must match the spec's: keep them aligned by refusing partial lists.
        if !errors.is_empty() {
            parsed.clear();
        }
        Budgets {
            budgets: parsed,
            errors,
        }
    }

    /// The budgets that failed to parse, for a `DisruptionBlocked` event.
    pub fn errors(&self) -> &[BudgetError] {
        &self.errors
    }

    /// Step 2 and 3 for one reason.
    pub fn evaluate(
        &self,
        reason: DisruptionReason,
        counts: PoolCounts,
        now: Timestamp,
    ) -> Allowance {
        let (allowed, binding) = match self.errors.first() {
            Some(e) => (Allowed::Nodes(0), Binding::Invalid(e.clone())),
            None => self
                .budgets
                .iter()
                .enumerate()
                .filter(|(_, b)| b.applies_to(reason) && b.is_active(now))
                .map(|(i, b)| (Allowed::Nodes(b.nodes.of(counts.total)), Binding::Budget(i)))
                .min_by_key(|(allowed, _)| *allowed)
                .unwrap_or((Allowed::Unlimited, Binding::Unrestricted)),
        };
        Allowance {
            reason,
            total: counts.total,
            allowed,
            disrupting: counts.disrupting,
            budget: allowed.minus(counts.disrupting),
            binding,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_parse_as_counts_or_percentages() {
        assert_eq!(Nodes::parse("0"), Some(Nodes::Count(0)));
        assert_eq!(Nodes::parse("007"), Some(Nodes::Count(7)));
        assert_eq!(
            Nodes::parse("99999999999999999999999"),
            Some(Nodes::Count(u64::MAX))
        );
        assert_eq!(Nodes::parse("05%"), Some(Nodes::Percent(5)));
        assert_eq!(Nodes::parse("100%"), Some(Nodes::Percent(100)));
        for bad in ["", "-1", "10.5%", "101%", "5 %", "%", "1000%", "ten"] {
            assert_eq!(Nodes::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn counts_skip_uninitialized_and_terminating_nodes() {
        let ready = NodeState {
            initialized: true,
            ready: true,
            ..NodeState::default()
        };
        let counts = count_nodes([
            ("a", ready),
            (
                "a",
                NodeState {
                    ready: false,
                    ..ready
                },
            ),
            (
                "a",
                NodeState {
                    marked_for_deletion: true,
                    ..ready
                },
            ),
            (
                "a",
                NodeState {
                    initialized: false,
                    ..ready
                },
            ),
            (
                "a",
                NodeState {
                    instance_terminating: true,
                    ..ready
                },
            ),
            ("b", ready),
        ]);
        assert_eq!(
            counts["a"],
            PoolCounts {
                total: 3,
                disrupting: 2
            }
        );
        assert_eq!(
            counts["b"],
            PoolCounts {
                total: 1,
                disrupting: 0
            }
        );
    }

    #[test]
    fn node_state_reads_claim_conditions_node_readiness_and_deletion() {
        let condition = |t: &str| {
            serde_json::json!({"type": t, "status": "True", "lastTransitionTime": "2026-11-22T00:00:00Z",
                "reason": t, "message": ""})
        };
        let claim = |conditions: Vec<serde_json::Value>, deleting: bool| {
            super::super::fixtures::claim(serde_json::json!({
                "metadata": {"deletionTimestamp": deleting.then_some("2026-11-22T00:00:00Z")},
                "status": {"conditions": conditions},
            }))
        };
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .expect("node");
        let live = claim(vec![condition("Initialized")], false);
        assert_eq!(
            NodeState::of(&live, Some(&node), false),
            NodeState {
                initialized: true,
                instance_terminating: false,
                ready: true,
                marked_for_deletion: false
            }
        );
        assert!(!NodeState::of(&live, None, false).ready);
        assert!(NodeState::of(&live, Some(&node), true).marked_for_deletion);
        let deleting = claim(vec![condition("Initialized")], true);
        assert!(NodeState::of(&deleting, Some(&node), false).marked_for_deletion);
        let terminating = claim(
            vec![condition("Initialized"), condition("InstanceTerminating")],
            true,
        );
        assert!(NodeState::of(&terminating, Some(&node), false).instance_terminating);
        assert!(!NodeState::of(&claim(vec![], false), Some(&node), false).initialized);
    }

    #[test]
    fn unlimited_reports_as_the_largest_int32() {
        assert_eq!(Allowed::Unlimited.metric_value(), 2_147_483_647);
        assert_eq!(Allowed::Nodes(3).metric_value(), 3);
    }
}
