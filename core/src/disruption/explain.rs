//! Explanations of budgets, because users misread them (controller-behaviour.md §8, pain points 3–5): budgets
//! only restrict, an inactive one means unlimited, an invalid schedule blocks every reason, and the allowed
//! number is per reason and taken before subtracting the nodes already disrupting.

use super::budgets::{
    Allowance, Allowed, Binding, Budgets, Nodes, ParsedBudget, PoolCounts, Schedule,
};
use super::window::Transition;
use crate::api::nodepool::DisruptionReason;
use k8s_openapi::jiff::Timestamp;
use std::fmt;

/// Why a pool may disrupt as many nodes as it may for one reason, and until when that holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explanation {
    pub allowance: Allowance,
    /// The binding budget as written, percentages resolved:
    /// `nodes "20%" = 5 of 25 nodes, schedule "@daily" for 10m, reasons [Empty, Drifted]`.
    pub binding_budget: Option<String>,
    /// The next instant a scheduled budget that applies to the reason opens or closes, within a bounded search.
    pub until: Option<Timestamp>,
    /// What `allowed` becomes at `until`.
    pub then: Option<Allowed>,
}

impl Budgets {
    /// Explains the allowance of `reason` at `now`.
    pub fn explain(
        &self,
        reason: DisruptionReason,
        counts: PoolCounts,
        now: Timestamp,
    ) -> Explanation {
        let allowance = self.evaluate(reason, counts, now);
        let binding_budget = match allowance.binding {
            Binding::Budget(i) => self.budgets.get(i).map(|b| describe(b, counts.total)),
            Binding::Unrestricted | Binding::Invalid(_) => None,
        };
        // An invalid budget blocks until someone fixes it: no window changes that.
        let until = if self.errors.is_empty() {
            self.next_change(reason, now)
        } else {
            None
        };
        let then = until.map(|t| self.evaluate(reason, counts, t).allowed);
        Explanation {
            allowance,
            binding_budget,
            until,
            then,
        }
    }

    /// Explanations for every reason, in the order the methods run.
    pub fn explain_all(&self, counts: PoolCounts, now: Timestamp) -> Vec<Explanation> {
        super::REASONS
            .iter()
            .map(|r| self.explain(*r, counts, now))
            .collect()
    }

    fn next_change(&self, reason: DisruptionReason, now: Timestamp) -> Option<Timestamp> {
        self.next_transition(now, |b| b.applies_to(reason))
    }

    /// The next instant any scheduled budget opens or closes, within the same bounded search: until then every
    /// budget is as active as it is at `now`.
    pub fn next_window_change(&self, now: Timestamp) -> Option<Timestamp> {
        self.next_transition(now, |_| true)
    }

    fn next_transition(
        &self,
        now: Timestamp,
        counted: impl Fn(&ParsedBudget) -> bool,
    ) -> Option<Timestamp> {
        self.budgets
            .iter()
            .filter(|b| counted(b))
            .filter_map(|b| match &b.window {
                Some(Schedule::Window(w)) => match w.next_transition(now) {
                    Transition::Opens(t) | Transition::Closes(t) => Some(t),
                    Transition::None => None,
                },
                Some(Schedule::Never) | None => None,
            })
            .min()
    }
}

/// A budget as its spec reads, with a percentage resolved against the pool's `total` nodes.
fn describe(budget: &ParsedBudget, total: u64) -> String {
    let spec = &budget.spec;
    let mut text = format!("nodes {:?}", spec.nodes.as_deref().unwrap_or("10%"));
    if let Nodes::Percent(_) = budget.nodes {
        text.push_str(&format!(" = {} of {total} nodes", budget.nodes.of(total)));
    }
    if let Some(schedule) = &spec.schedule {
        text.push_str(&format!(", schedule {schedule:?}"));
        if let Some(duration) = &spec.duration {
            text.push_str(&format!(" for {duration}"));
        }
    }
    if let Some(reasons) = &spec.reasons {
        let names: Vec<String> = reasons.iter().map(|r| format!("{r:?}")).collect();
        text.push_str(&format!(", reasons [{}]", names.join(", ")));
    }
    text
}

impl Explanation {
    /// What decides the allowance, e.g. `budgets[2] active: nodes "0", schedule "@daily" for 10m, reasons
    /// [Underutilized]`, `no active budget applies`, or the invalid budget that blocks every reason.
    pub fn binding(&self) -> String {
        match (&self.allowance.binding, &self.binding_budget) {
            (Binding::Budget(i), Some(text)) => format!("budgets[{i}] active: {text}"),
            (Binding::Budget(i), None) => format!("budgets[{i}]"),
            (Binding::Unrestricted, _) => "no active budget applies".to_owned(),
            (Binding::Invalid(e), _) => {
                format!("{e}: a budget that cannot be evaluated blocks every reason")
            }
        }
    }
}

impl fmt::Display for Explanation {
    /// One line, e.g. `Underutilized: 0 allowed until 2026-11-23T00:10:00Z, then 5 (budgets[2] active: nodes "0",
    /// schedule "@daily" for 10m, reasons [Underutilized])`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = &self.allowance;
        write!(f, "{:?}: {} allowed", a.reason, a.allowed)?;
        // Subtraction only matters when something was allowed; "unlimited minus 2" is still unlimited.
        if a.disrupting > 0 && matches!(a.allowed, Allowed::Nodes(n) if n > 0) {
            write!(
                f,
                ", {} already disrupting, so {} more",
                a.disrupting, a.budget
            )?;
        }
        if let Some(until) = self.until {
            write!(f, " until {until}")?;
            if let Some(then) = self.then {
                write!(f, ", then {then}")?;
            }
        }
        write!(f, " ({})", self.binding())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::nodepool::Budget;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn worked_example(third_schedule: &str) -> Budgets {
        let specs: Vec<Budget> = serde_json::from_value(serde_json::json!([
            {"nodes": "20%", "reasons": ["Empty", "Drifted"]},
            {"nodes": "5"},
            {"nodes": "0", "schedule": third_schedule, "duration": "10m", "reasons": ["Underutilized"]},
        ]))
        .expect("budgets");
        Budgets::parse(&specs)
    }

    const POOL: PoolCounts = PoolCounts {
        total: 25,
        disrupting: 2,
    };

    #[test]
    fn names_the_scheduled_budget_that_blocks_and_when_it_lets_go() {
        let e = worked_example("@daily").explain(
            DisruptionReason::Underutilized,
            POOL,
            at("2026-11-23T00:05:00Z"),
        );
        assert_eq!(e.allowance.binding, Binding::Budget(2));
        assert_eq!(e.until, Some(at("2026-11-23T00:10:00Z")));
        assert_eq!(e.then, Some(Allowed::Nodes(5)));
        assert_eq!(
            e.to_string(),
            "Underutilized: 0 allowed until 2026-11-23T00:10:00Z, then 5 (budgets[2] active: nodes \"0\", \
             schedule \"@daily\" for 10m, reasons [Underutilized])"
        );
    }

    #[test]
    fn says_when_the_next_window_opens() {
        let e = worked_example("@daily").explain(
            DisruptionReason::Underutilized,
            POOL,
            at("2026-11-23T00:10:00Z"),
        );
        assert_eq!(e.allowance.binding, Binding::Budget(1));
        assert_eq!(e.until, Some(at("2026-11-24T00:00:00Z")));
        assert_eq!(
            e.to_string(),
            "Underutilized: 5 allowed, 2 already disrupting, so 3 more until 2026-11-24T00:00:00Z, then 0 \
             (budgets[1] active: nodes \"5\")"
        );
    }

    #[test]
    fn unscheduled_budgets_hold_indefinitely_and_show_the_percentage_base() {
        let e = worked_example("@daily").explain(
            DisruptionReason::Empty,
            POOL,
            at("2026-11-23T00:05:00Z"),
        );
        assert_eq!(e.until, None);
        assert_eq!(
            e.to_string(),
            "Empty: 5 allowed, 2 already disrupting, so 3 more (budgets[0] active: nodes \"20%\" = 5 of 25 \
             nodes, reasons [Empty, Drifted])"
        );
    }

    #[test]
    fn an_inactive_budget_is_shown_as_unlimited() {
        let specs: Vec<Budget> = serde_json::from_value(serde_json::json!([
            {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}
        ]))
        .expect("budgets");
        let e = Budgets::parse(&specs).explain(
            DisruptionReason::Drifted,
            POOL,
            at("2026-11-22T12:00:00Z"), // a Sunday
        );
        assert_eq!(
            e.to_string(),
            "Drifted: unlimited allowed until 2026-11-23T09:00:00Z, then 0 (no active budget applies)"
        );
    }

    #[test]
    fn an_invalid_schedule_is_named_as_the_blocker_of_every_reason() {
        let lines: Vec<String> = worked_example("0 0 * * sat-sun")
            .explain_all(POOL, at("2026-11-23T00:05:00Z"))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(lines.len(), 3);
        for line in &lines {
            assert!(line.contains(": 0 allowed (budgets[2]: invalid cron \"0 0 * * sat-sun\": beginning of range (6) beyond end of range (0): sat-sun: a budget that cannot be evaluated blocks every reason)"), "{line}");
        }
        assert!(lines[0].starts_with("Empty:"));
    }
}
