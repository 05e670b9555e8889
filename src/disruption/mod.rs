//! Disruption decisions, pure: no I/O, no clock (`now` is an argument).
//!
//! So far this module owns the foundations the disruption methods stand on:
//! - `budgets`: how many nodes of a pool may be disrupted for a reason at an instant (§3.6);
//! - `window`: when a scheduled budget is active, and when that next changes;
//! - `explain`: which budget binds and until when, in words users can check their schedules against.
//!
//! The methods themselves (emptiness, drift, consolidation) and their commands are still to come.

mod budgets;
mod explain;
mod window;

pub use budgets::{
    count_nodes, Allowance, Allowed, Binding, BudgetError, Budgets, NodeState, PoolCounts, REASONS,
};
pub use explain::Explanation;
pub use window::{Transition, Window};
