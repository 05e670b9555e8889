//! The re-check before acting (controller-behaviour.md §3.4, Validation): the controller waits 15 s after an
//! emptiness or consolidation command, takes a fresh snapshot (the command's nodes not yet queued) and asks
//! whether the command still holds. Drift and expiration are not re-checked.

use super::super::command::{Command, Method, Why};
use super::super::input::DisruptionInput;
use super::consolidation::{candidate, consolidate};
use super::emptiness;
use super::Pass;
use k8s_openapi::jiff::Timestamp;

/// The command to carry out now: `command` itself, or for emptiness its candidates that are still empty
/// and within budget; or why it no longer holds (a candidate is gone or no longer a candidate, the budget
/// ran out, or the move now needs other replacements).
pub fn validate(
    input: &DisruptionInput<'_>,
    command: &Command,
    now: Timestamp,
) -> Result<Command, Why> {
    let mut pass = Pass::new(*input, now);
    let mut indices = Vec::with_capacity(command.candidates.len());
    for target in &command.candidates {
        let index = pass
            .facts
            .iter()
            .position(|f| f.target.claim == target.claim)
            .ok_or_else(|| Why::Gone(target.claim.clone()))?;
        indices.push(index);
    }
    let Some(reason) = command.reason.budget_reason() else {
        return Ok(command.clone());
    };
    let mut budgets = pass.ledger.for_reason(reason);
    match command.method {
        Method::Expiration | Method::Drift => Ok(command.clone()),
        Method::Emptiness => {
            let mut survivors = Vec::new();
            let mut first_why = None;
            for &index in &indices {
                let f = &pass.facts[index];
                let taken = if f.empty {
                    emptiness::take(f, &mut budgets)
                } else {
                    Err(Why::Changed)
                };
                match taken {
                    Ok(()) => survivors.push(index),
                    Err(why) => {
                        first_why.get_or_insert(why);
                    }
                }
            }
            emptiness::command(&pass, &survivors, &budgets)
                .ok_or_else(|| first_why.unwrap_or(Why::Changed))
        }
        Method::MultiNodeConsolidation | Method::SingleNodeConsolidation => {
            for &index in &indices {
                let f = &pass.facts[index];
                if !candidate(f)? {
                    return Err(Why::Changed);
                }
                budgets.take(&f.target.nodepool)?;
            }
            let single = command.method == Method::SingleNodeConsolidation;
            let found = consolidate(&mut pass, &indices, single)?;
            let same = match (command.replacements.first(), found.replacements.first()) {
                (None, None) => true,
                (Some(before), Some(now)) => before
                    .instance_types
                    .iter()
                    .all(|t| now.instance_types.contains(t)),
                _ => false,
            };
            if same {
                Ok(command.clone())
            } else {
                Err(Why::Changed)
            }
        }
    }
}
