//! Expiration (controller-behaviour.md §3.5): a claim past `creationTimestamp + expireAfter` is deleted
//! directly, with no budget, no replacement launched first and no do-not-disrupt or PDB check; the drain
//! still honours those until `terminationGracePeriod` runs out, and the provisioner replaces the capacity.

use super::super::command::{Command, Method, Why};
use super::Pass;

pub(crate) fn commands(pass: &mut Pass<'_>) -> Vec<Command> {
    pass.facts
        .iter()
        .filter(|f| f.expired && !matches!(f.ineligible, Some(Why::Deleting | Why::Queued)))
        .map(|f| Command {
            method: Method::Expiration,
            reason: Method::Expiration.reason(),
            candidates: vec![f.target.clone()],
            replacements: Vec::new(),
            savings: f.offering.map_or(0.0, |o| o.price),
            budgets: Vec::new(),
            destinations: Vec::new(),
        })
        .collect()
}
