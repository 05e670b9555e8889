//! What a disruption pass decides: commands to carry out, and for everything it left alone, why.

use super::budgets::Allowance;
use super::candidate::Blocker;
use super::lifetime::LifetimeError;
use crate::api::nodepool::DisruptionReason;
use crate::scheduling::PlannedClaim;
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;
use std::fmt;

/// The methods, in the order a pass runs them (expiration first: it is forceful and not a method of the
/// voluntary loop, but one pass reports it too).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Method {
    Expiration,
    Emptiness,
    Drift,
    MultiNodeConsolidation,
    SingleNodeConsolidation,
}

/// How long a command of a method that [`Method::needs_validation`] waits before it is re-checked against the
/// cluster as it is then ([`crate::disruption::validate`]) and carried out: Karpenter's 15 s.
pub const VALIDATION_DELAY: std::time::Duration = std::time::Duration::from_secs(15);

impl Method {
    /// Whether its commands wait [`VALIDATION_DELAY`] and are validated again before they are carried out
    /// (emptiness and consolidation: what they judged may change meanwhile; drift and expiration do not wait).
    pub fn needs_validation(self) -> bool {
        matches!(
            self,
            Method::Emptiness | Method::MultiNodeConsolidation | Method::SingleNodeConsolidation
        )
    }

    pub fn reason(self) -> Reason {
        match self {
            Method::Expiration => Reason::Expired,
            Method::Emptiness => Reason::Empty,
            Method::Drift => Reason::Drifted,
            Method::MultiNodeConsolidation | Method::SingleNodeConsolidation => {
                Reason::Underutilized
            }
        }
    }
}

/// Why nodes are disrupted: the three reasons budgets know, and expiration, which budgets do not limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    Empty,
    Drifted,
    Underutilized,
    Expired,
}

impl Reason {
    /// The reason budgets are evaluated for; `None` for expiration.
    pub fn budget_reason(self) -> Option<DisruptionReason> {
        match self {
            Reason::Empty => Some(DisruptionReason::Empty),
            Reason::Drifted => Some(DisruptionReason::Drifted),
            Reason::Underutilized => Some(DisruptionReason::Underutilized),
            Reason::Expired => None,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A node to disrupt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub claim: String,
    pub node: Option<String>,
    pub nodepool: String,
}

/// One disruption to carry out: launch `replacements`, wait until they are initialized, then delete the
/// `candidates` (controller-behaviour.md §3.5).
#[derive(Clone, Debug, PartialEq)]
pub struct Command {
    pub method: Method,
    pub reason: Reason,
    pub candidates: Vec<Target>,
    /// Claims to launch first; empty for a delete.
    pub replacements: Vec<PlannedClaim>,
    /// USD per hour saved: the candidates' price minus the replacements' (at their dearest allowed offering for
    /// a consolidation replace, their cheapest for drift). Negative when drift replaces with dearer capacity.
    pub savings: f64,
    /// The budget of each pool involved, as evaluated at the start of the pass; empty for expiration.
    pub budgets: Vec<Allowance>,
    /// Existing nodes (Node names, or claim names of nodes not registered yet) the candidates' pods were planned
    /// onto: the driver nominates them, so nothing disrupts them while the pods are on their way.
    pub destinations: Vec<String>,
}

impl Command {
    pub fn is_delete(&self) -> bool {
        self.replacements.is_empty()
    }
}

/// The outcome of one pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// Expiration's deletes (forceful, one per claim), then the commands of the first method that had any.
    pub commands: Vec<Command>,
    /// What the methods that ran left alone, and why.
    pub skipped: Vec<Skip>,
    /// Every claim judged drifted, by name, with Karpenter's reason (`AMIDrift`, `NodePoolDrifted`, …), whether
    /// or not a command takes it this pass: the controller mirrors it in the claim's `Drifted` condition.
    pub drifted: BTreeMap<String, &'static str>,
    /// Every claim whose `consolidateAfter` has elapsed, by name, with since when: the controller mirrors it in
    /// the claim's `Consolidatable` condition.
    pub consolidatable: BTreeMap<String, Timestamp>,
    /// The consolidation moves the pass judged, per pool, as Karpenter counts them: every move single-node
    /// consolidation found, and multi-node's chosen (or last refused) one.
    pub consolidation_moves: Vec<ConsolidationMove>,
    /// The reasons of the voluntary methods that ran with candidates, in the order they ran: Karpenter works out
    /// their budgets (and says which pools they block) only then.
    pub budgets_checked: Vec<Reason>,
    /// The earliest instant after the pass at which a pass over the same cluster could decide differently (a
    /// node becoming consolidatable or expiring, a budget window turning, …); `None` if none ever could. A
    /// driver that changes nothing before then may skip the passes between.
    pub revisit_at: Option<Timestamp>,
}

/// A consolidation move in one pool of its candidates: whether the move was taken and, in a `Balanced` pool,
/// the pool's score and whether it passed (Karpenter's `karpenter_consolidation_moves_total` and
/// `karpenter_consolidation_score`).
#[derive(Clone, Debug, PartialEq)]
pub struct ConsolidationMove {
    pub nodepool: String,
    pub policy: crate::api::nodepool::ConsolidationPolicy,
    pub move_approved: bool,
    /// The score in this pool, for a `Balanced` pool.
    pub score: Option<MoveScore>,
    /// The move's candidates in this pool, by claim name.
    pub claims: Vec<String>,
}

/// A `Balanced` pool's score of one move, with what Karpenter's `ConsolidationApproved` Event says of it.
#[derive(Clone, Debug, PartialEq)]
pub struct MoveScore {
    /// Savings fraction over disruption fraction (infinite without disruption).
    pub value: f64,
    /// Whether `value` reaches `threshold`.
    pub passed: bool,
    /// `1/k`.
    pub threshold: f64,
    pub k: u32,
    /// The share of the pool's cost the move saves.
    pub savings_fraction: f64,
    /// The share of the pool's disruption cost the move causes.
    pub disruption_fraction: f64,
}

/// Something a method considered and left alone.
#[derive(Clone, Debug, PartialEq)]
pub struct Skip {
    pub method: Method,
    pub nodepool: Option<String>,
    /// The claim, when the skip is about one node (else about the pool).
    pub claim: Option<String>,
    pub why: Why,
}

/// Why a node (or a pool) was not disrupted, worded for an event.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Why {
    #[error("the node is not initialized")]
    NotInitialized,
    #[error("the node is being deleted")]
    Deleting,
    #[error("a disruption of the node is already in progress")]
    Queued,
    #[error("the node cannot be simulated: {0}")]
    Unreadable(String),
    #[error("the claim has no Node yet")]
    NoNode,
    #[error("node is nominated for a pending pod")]
    Nominated,
    #[error("the claim has no {0:?} label")]
    NoNodePool(&'static str),
    #[error("NodePool {0:?} does not exist")]
    UnknownNodePool(String),
    #[error("NodePool {0:?} is static: consolidation does not resize it")]
    StaticNodePool(String),
    #[error("the node's instance type, zone, capacity type or price is unknown")]
    UnknownOffering,
    #[error(transparent)]
    Blocked(Blocker),
    #[error("consolidateAfter has not elapsed: consolidatable from {0}")]
    ConsolidateAfter(Timestamp),
    #[error("the node has had no pod event nor initialization yet")]
    NoConsolidationClock,
    #[error("consolidateAfter is Never")]
    ConsolidateNever,
    #[error("consolidationPolicy is WhenEmpty")]
    WhenEmptyOnly,
    #[error("{0}")]
    Lifetime(LifetimeError),
    #[error("{message}")]
    Budget { message: String },
    #[error("pod {pod:?} would not fit elsewhere: {reason}")]
    PodsDoNotFit { pod: String, reason: String },
    #[error("pod {pod:?} would land on node {node:?}, which is not initialized")]
    UninitializedNode { pod: String, node: String },
    #[error("its pods would need {0} new nodes")]
    TooManyReplacements(usize),
    #[error("Can't replace with a cheaper node")]
    NoCheaperReplacement,
    #[error("spot nodes are only deleted: SpotToSpotConsolidation is off")]
    SpotToSpotDisabled,
    #[error("only {0} cheaper spot instance types, 15 are needed")]
    TooFewSpotTypes(usize),
    #[error("the node was launched as a replacement at {0}: replacing it again would churn")]
    WouldChurn(Timestamp),
    #[error("the savings do not justify the evictions (Balanced)")]
    Unbalanced,
    #[error("NodeClaim {0:?} is gone")]
    Gone(String),
    /// A drifted node of a static pool waits: the pool is above its replicas, at its node limit, or its template
    /// does not parse.
    #[error("{0}")]
    StaticPoolBusy(String),
    #[error("the cluster changed since the command was decided")]
    Changed,
    /// Provisioning planned CapacityBuffer virtual pods onto the node: it holds headroom on purpose.
    #[error("Node {0:?} has buffer pods")]
    HasBufferPods(String),
}
