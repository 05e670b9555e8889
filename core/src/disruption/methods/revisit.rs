//! When a pass over the same input could next decide differently. A pass reads the clock only through a few
//! facts, and each changes at an instant known in advance: a node becoming consolidatable (`consolidateAfter`
//! after its last pod event), a claim expiring or being created, a pod's do-not-disrupt duration ending, a
//! replacement leaving the no-churn window, a scheduled budget opening or closing, and two consolidation
//! candidates swapping places as their disruption costs fall with age (the only fact that moves
//! continuously). Until the earliest of them, a pass over an unchanged cluster finds what this one found, so
//! a driver that changes nothing meanwhile (the simulator's quiet minutes) need not run the passes between.

use super::super::budgets::Budgets;
use super::super::do_not_disrupt::{pod_do_not_disrupt, PodDoNotDisrupt};
use super::super::lifetime::{expires_at, Consolidatable};
use super::consolidation::{candidate, order, value};
use super::facts::Facts;
use super::Pass;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::cmp::Ordering;

/// The earliest instant after the pass's `now` at which one of its clock-driven facts changes; `None` if none
/// ever does.
pub(super) fn revisit_at(pass: &Pass<'_>) -> Option<Timestamp> {
    let now = pass.now;
    let later = |t: Timestamp| (t > now).then_some(t);
    let no_churn = SignedDuration::try_from(pass.input.settings.no_churn_window).ok();
    let mut at: Vec<Timestamp> = Vec::new();
    for f in &pass.facts {
        if let Ok(Consolidatable::From(t)) = f.consolidatable {
            at.push(t);
        }
        if let Ok(Some(t)) = expires_at(&f.input.claim) {
            at.extend(later(t));
        }
        // Before its creation a claim's lifetime share is held at 1, so its cost starts falling then.
        at.extend(f.created.and_then(later));
        let replaced = f.input.launched_as_replacement;
        at.extend(
            replaced
                .zip(no_churn)
                .and_then(|(t, window)| t.checked_add(window).ok())
                .and_then(later),
        );
        at.extend(
            f.input
                .pods
                .iter()
                .filter_map(|p| match pod_do_not_disrupt(p, now) {
                    PodDoNotDisrupt::Active { until } => until,
                    PodDoNotDisrupt::Inactive | PodDoNotDisrupt::Invalid { .. } => None,
                }),
        );
    }
    at.extend(
        pass.input
            .nodepools
            .iter()
            .filter_map(|p| Budgets::of(p).next_window_change(now)),
    );
    at.extend(order_change(pass));
    at.into_iter().min()
}

/// When the consolidation order of this pass's candidates can first change, at the latest: two neighbours in
/// the order with the same price per reschedule cost, the later one's disruption cost falling faster, meet
/// then (a change of the whole order starts with neighbours). Rounded down to the second, so never late.
fn order_change(pass: &Pass<'_>) -> Option<Timestamp> {
    let mut candidates: Vec<&Facts<'_>> = pass
        .facts
        .iter()
        .filter(|f| candidate(f) == Ok(true))
        .collect();
    candidates.sort_by(|a, b| order(a, b));
    candidates
        .windows(2)
        .filter_map(|pair| {
            let (first, second) = (pair[0], pair[1]);
            if value(first).total_cmp(&value(second)) != Ordering::Equal {
                return None;
            }
            let closing = second.cost_fall - first.cost_fall;
            if closing <= 0.0 {
                return None;
            }
            let gap = (second.disruption_cost - first.disruption_cost).max(0.0);
            // Beyond a century is never, for a simulation.
            let seconds = (gap / closing).floor().min(3.2e9);
            pass.now
                .checked_add(
                    SignedDuration::from_secs(seconds as i64).max(SignedDuration::from_secs(1)),
                )
                .ok()
        })
        .min()
}
