//! Disruption budgets (controller-behaviour.md §3.6): the worked example, rounding, invalid schedules and
//! cron day semantics.

use k8s_openapi::jiff::Timestamp;
use kerf::api::nodepool::{Budget, DisruptionReason, NodePool};
use kerf::disruption::{Allowed, Binding, BudgetError, Budgets, PoolCounts, REASONS};
use DisruptionReason::{Drifted, Empty, Underutilized};

fn at(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn budgets(json: serde_json::Value) -> Budgets {
    let specs: Vec<Budget> = serde_json::from_value(json).expect("budgets");
    Budgets::parse(&specs)
}

fn counts(total: u64, disrupting: u64) -> PoolCounts {
    PoolCounts { total, disrupting }
}

fn worked_example(third_schedule: &str) -> Budgets {
    budgets(serde_json::json!([
        {"nodes": "20%", "reasons": ["Empty", "Drifted"]},
        {"nodes": "5"},
        {"nodes": "0", "schedule": third_schedule, "duration": "10m", "reasons": ["Underutilized"]},
    ]))
}

#[test]
fn worked_example_at_five_past_midnight() {
    let b = worked_example("@daily");
    let now = at("2026-11-23T00:05:00Z");
    let under = b.evaluate(Underutilized, counts(25, 2), now);
    assert_eq!(under.allowed, Allowed::Nodes(0));
    assert_eq!(under.budget, Allowed::Nodes(0));
    assert_eq!(under.binding, Binding::Budget(2));
    assert_eq!(
        under.blocked_message().as_deref(),
        Some("No allowed disruptions for disruption reason Underutilized due to blocking budget")
    );
    assert_eq!(
        b.evaluate(Empty, counts(25, 2), now).blocked_message(),
        None
    );
    // An empty pool is not reported as blocked.
    assert_eq!(
        b.evaluate(Underutilized, counts(0, 0), now)
            .blocked_message(),
        None
    );
    for reason in [Empty, Drifted] {
        let a = b.evaluate(reason, counts(25, 2), now);
        assert_eq!(a.allowed, Allowed::Nodes(5), "{reason:?}");
        assert_eq!(a.disrupting, 2);
        assert_eq!(a.budget, Allowed::Nodes(3), "{reason:?}");
    }
}

#[test]
fn worked_example_at_ten_past_midnight() {
    let b = worked_example("@daily");
    let now = at("2026-11-23T00:10:00Z");
    for reason in REASONS {
        let a = b.evaluate(reason, counts(25, 2), now);
        assert_eq!(a.allowed, Allowed::Nodes(5), "{reason:?}");
        assert_eq!(a.budget, Allowed::Nodes(3), "{reason:?}");
    }
    assert_eq!(
        b.evaluate(Underutilized, counts(25, 2), now).binding,
        Binding::Budget(1)
    );
}

#[test]
fn an_unparseable_schedule_blocks_every_reason_always() {
    for schedule in [
        "0 0 * * sat-sun",
        "0 0 * * 1-7",
        "0 0 * * 7",
        "0 0 0 * * *",
        "@dailyfoo",
    ] {
        let b = worked_example(schedule);
        for now in ["2026-11-23T00:05:00Z", "2026-11-23T12:00:00Z"] {
            for reason in REASONS {
                let a = b.evaluate(reason, counts(25, 0), at(now));
                assert_eq!(a.allowed, Allowed::Nodes(0), "{schedule} {reason:?} {now}");
                assert_eq!(a.budget, Allowed::Nodes(0));
                assert!(
                    matches!(
                        a.binding,
                        Binding::Invalid(BudgetError::Schedule { index: 2, .. })
                    ),
                    "{schedule}: {:?}",
                    a.binding
                );
            }
        }
        assert_eq!(b.errors().len(), 1);
    }
    assert_eq!(
        worked_example("0 0 * * sat-sun").errors()[0].to_string(),
        "budgets[2]: invalid cron \"0 0 * * sat-sun\": beginning of range (6) beyond end of range (0): sat-sun"
    );
}

#[test]
fn percentages_round_up() {
    let ten = budgets(serde_json::json!([{"nodes": "10%"}]));
    let now = at("2026-11-23T00:00:00Z");
    assert_eq!(
        ten.evaluate(Empty, counts(0, 0), now).allowed,
        Allowed::Nodes(0)
    );
    for total in 1..=10 {
        assert_eq!(
            ten.evaluate(Empty, counts(total, 0), now).allowed,
            Allowed::Nodes(1),
            "10% of {total}"
        );
    }
    assert_eq!(
        ten.evaluate(Empty, counts(11, 0), now).allowed,
        Allowed::Nodes(2)
    );
    let twenty = budgets(serde_json::json!([{"nodes": "20%"}]));
    assert_eq!(
        twenty.evaluate(Empty, counts(19, 0), now).allowed,
        Allowed::Nodes(4)
    );
    let all = budgets(serde_json::json!([{"nodes": "100%"}]));
    assert_eq!(
        all.evaluate(Empty, counts(7, 3), now).budget,
        Allowed::Nodes(4)
    );
    let none = budgets(serde_json::json!([{"nodes": "0%"}]));
    assert_eq!(
        none.evaluate(Empty, counts(7, 0), now).allowed,
        Allowed::Nodes(0)
    );
}

#[test]
fn disrupting_nodes_are_subtracted_down_to_zero() {
    let b = budgets(serde_json::json!([{"nodes": "3"}]));
    let a = b.evaluate(Drifted, counts(10, 5), at("2026-11-23T00:00:00Z"));
    assert_eq!(a.allowed, Allowed::Nodes(3));
    assert_eq!(a.budget, Allowed::Nodes(0));
}

#[test]
fn inactive_budgets_do_not_restrict() {
    // A business-hours freeze on weekdays; outside it nothing restricts.
    let b = budgets(serde_json::json!([
        {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}
    ]));
    let monday_noon = at("2026-11-23T12:00:00Z");
    let monday_night = at("2026-11-23T20:00:00Z");
    let sunday_noon = at("2026-11-22T12:00:00Z");
    assert_eq!(
        b.evaluate(Empty, counts(4, 0), monday_noon).allowed,
        Allowed::Nodes(0)
    );
    for now in [monday_night, sunday_noon] {
        let a = b.evaluate(Empty, counts(4, 1), now);
        assert_eq!(a.allowed, Allowed::Unlimited);
        assert_eq!(a.budget, Allowed::Unlimited);
        assert_eq!(a.binding, Binding::Unrestricted);
    }
}

#[test]
fn reasons_select_the_budgets_that_apply() {
    let b = budgets(serde_json::json!([
        {"nodes": "1", "reasons": ["Drifted"]},
        {"nodes": "0", "reasons": []},
    ]));
    let now = at("2026-11-23T00:00:00Z");
    assert_eq!(
        b.evaluate(Drifted, counts(9, 0), now).allowed,
        Allowed::Nodes(1)
    );
    // `reasons: []` applies to no reason (upstream quirk).
    assert_eq!(
        b.evaluate(Empty, counts(9, 0), now).allowed,
        Allowed::Unlimited
    );
}

#[test]
fn schedule_and_duration_alone() {
    let now = at("2026-11-23T00:00:00Z");
    // A schedule without a duration opens only empty windows: never active, even at a hit.
    let schedule_only = budgets(serde_json::json!([{"nodes": "0", "schedule": "@daily"}]));
    assert_eq!(
        schedule_only.evaluate(Empty, counts(3, 0), now).allowed,
        Allowed::Unlimited
    );
    // A duration without a schedule cannot be evaluated (Karpenter fails to parse the empty schedule).
    let duration_only = budgets(serde_json::json!([{"nodes": "5", "duration": "10m"}]));
    assert_eq!(
        duration_only.evaluate(Empty, counts(3, 0), now).allowed,
        Allowed::Nodes(0)
    );
}

#[test]
fn day_of_month_and_day_of_week_or_when_both_restricted() {
    // 2026-11-01 is a Sunday, 2026-11-02 a Monday, 2026-11-03 a Tuesday.
    let b = |schedule: &str| {
        budgets(serde_json::json!([{"nodes": "0", "schedule": schedule, "duration": "1h"}]))
    };
    let blocked = |b: &Budgets, day: &str| {
        b.evaluate(Empty, counts(5, 0), at(&format!("2026-11-{day}T00:30:00Z")))
            .allowed
            == Allowed::Nodes(0)
    };
    let or = b("0 0 1 * mon");
    assert!(blocked(&or, "01") && blocked(&or, "02") && !blocked(&or, "03"));
    let and_dom_star = b("0 0 * * mon");
    assert!(!blocked(&and_dom_star, "01") && blocked(&and_dom_star, "02"));
    let and_dow_star = b("0 0 1 * ?");
    assert!(blocked(&and_dow_star, "01") && !blocked(&and_dow_star, "02"));
    let step_is_restricted = b("0 0 */2 * mon");
    assert!(blocked(&step_is_restricted, "03") && blocked(&step_is_restricted, "02"));
    assert!(!blocked(&step_is_restricted, "04"));
}

#[test]
fn a_never_firing_schedule_is_always_active() {
    let b = budgets(serde_json::json!([
        {"nodes": "0", "schedule": "0 0 30 2 *", "duration": "10m"}
    ]));
    assert_eq!(
        b.evaluate(Empty, counts(5, 0), at("2026-06-15T12:00:00Z"))
            .allowed,
        Allowed::Nodes(0)
    );
}

#[test]
fn a_pool_without_budgets_gets_ten_percent() {
    let pool: NodePool = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
        "spec": {"template": {"spec": {"requirements": [], "nodeClassRef": {
            "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
    }))
    .expect("nodepool");
    let a = Budgets::of(&pool).evaluate(Empty, counts(30, 1), at("2026-11-23T00:00:00Z"));
    assert_eq!(
        (a.allowed, a.budget),
        (Allowed::Nodes(3), Allowed::Nodes(2))
    );
}
