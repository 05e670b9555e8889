//! Disruption decisions, pure: no I/O, no clock (`now` is an argument).
//!
//! The foundations the disruption methods stand on:
//! - `budgets`: how many nodes of a pool may be disrupted for a reason at an instant (controller-behaviour.md §3.6);
//! - `window`: when a scheduled budget is active, and when that next changes;
//! - `explain`: which budget binds and until when, in words users can check their schedules against;
//! - candidate facts (controller-behaviour.md §3.2–3.5): `do_not_disrupt` on pods, nodes and claims, `costs`
//!   (eviction, disruption, reschedule, emptiness), `pdb` blocking, `lifetime` (`consolidateAfter`, expiration), `drift_hash` (static
//!   NodePool drift), and `candidate` putting the blockers together; `pods` and `go_duration` serve them.
//!
//! On them stand the methods (`methods`: expiration, emptiness, drift, multi- and single-node consolidation)
//! and [`decide`], one pass over a [`DisruptionInput`] that returns a [`Decision`]: [`Command`]s and, for what
//! was left alone, [`Skip`]s that say why; [`validate`] re-checks a command before it is carried out.
//! docs/disruption.md explains the rules.

mod budgets;
mod candidate;
mod command;
mod costs;
mod do_not_disrupt;
mod drift_hash;
mod explain;
#[cfg(test)]
mod fixtures;
mod go_duration;
mod input;
mod lifetime;
mod methods;
mod pdb;
mod pods;
mod preparation;
mod window;

pub use budgets::{
    count_nodes, Allowance, Allowed, Binding, BudgetError, Budgets, NodeState, PoolCounts, REASONS,
};
pub use candidate::{blocker, Blocker, NodeView};
pub use command::{
    Command, ConsolidationMove, Decision, Method, MoveScore, Reason, Skip, Target, Why,
    VALIDATION_DELAY,
};
pub use costs::{
    disruption_cost, eviction_cost, is_empty, lifetime_remaining, reschedule_cost,
    POD_DELETION_COST,
};
pub use do_not_disrupt::{
    node_do_not_disrupt, pod_do_not_disrupt, scan_pods, PodDoNotDisrupt, PodsDoNotDisrupt,
    DO_NOT_DISRUPT,
};
pub use drift_hash::{
    ec2nodeclass_hash, hash_annotations, node_class_drift, nodepool_hash, static_drift,
    StaticDrift, EC2NODECLASS_HASH, EC2NODECLASS_HASH_VERSION, HASH_VERSION, NODEPOOL_HASH,
    NODEPOOL_HASH_VERSION,
};
pub use explain::Explanation;
pub use go_duration::parse_go_duration;
pub use input::{
    CloudDrift, DisruptionInput, NodeInput, Settings, DEFAULT_NO_CHURN_WINDOW,
    DEFAULT_REPLACE_MARGIN,
};
pub use lifetime::{
    consolidatable, expire_after, expires_at, is_expired, Consolidatable, LifetimeError,
    DEFAULT_CONSOLIDATE_AFTER, DEFAULT_EXPIRE_AFTER,
};
pub use methods::{
    decide, decide_observed, validate, PassObserver, MAX_CANDIDATES, SPOT_TO_SPOT_TYPES,
};
pub use pdb::{fully_blocked, is_evictable, pdb_block, PdbBlock, DISRUPTED_TAINT};
pub use pods::{is_daemonset_pod, is_mirror_pod, is_reschedulable};
pub use preparation::PassPreparation;
pub use window::{Transition, Window};
