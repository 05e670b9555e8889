//! Which pools a pass reports blocked, and what it says of them. The rule is Karpenter v1.14.1's
//! `BuildDisruptionBudgetMapping` (a method with candidates reports every pool with nodes that its reason may not
//! disrupt); the messages are Karpenter's text with kerf's binding budget and reopening after it.

use super::*;
use serde_json::json;

fn pool(name: &str, budgets: serde_json::Value) -> NodePool {
    let mut pool = kerf_testkit::nodepool("p", json!({"disruption": {"budgets": budgets}}));
    pool.metadata.name = Some(name.to_owned());
    pool
}

const FOUR: PoolCounts = PoolCounts {
    total: 4,
    disrupting: 0,
};

fn at(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn checked(reasons: &[Reason]) -> Decision {
    Decision {
        budgets_checked: reasons.to_vec(),
        ..Decision::default()
    }
}

fn counts(pools: &[(&str, PoolCounts)]) -> BTreeMap<String, PoolCounts> {
    pools.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect()
}

fn messages(pool: &NodePool, pool_counts: PoolCounts, now: &str) -> Vec<String> {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let all = checked(&[Reason::Empty, Reason::Drifted, Reason::Underutilized]);
    of(
        &all,
        std::slice::from_ref(pool),
        &counts(&[(&name, pool_counts)]),
        at(now),
    )
    .iter()
    .map(BlockedPool::message)
    .collect()
}

#[test]
fn a_blocked_reason_keeps_karpenters_text_then_names_the_budget_and_when_it_opens() {
    let business_hours = pool(
        "default",
        json!([
            {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h", "reasons": ["Drifted"]},
            {"nodes": "2"}
        ]),
    );
    assert_eq!(
        messages(&business_hours, FOUR, "2026-11-23T10:00:00Z"),
        ["No allowed disruptions for disruption reason Drifted due to blocking budget: budgets[0] active: \
          nodes \"0\", schedule \"0 9 * * mon-fri\" for 8h, reasons [Drifted]; 2 allowed from \
          2026-11-23T17:00:00Z"]
    );
    assert!(messages(&business_hours, FOUR, "2026-11-23T17:00:00Z").is_empty());
}

#[test]
fn a_window_that_hands_over_to_another_zero_says_so() {
    let back_to_back = pool(
        "default",
        json!([
            {"nodes": "0", "schedule": "0 9 * * *", "duration": "1h", "reasons": ["Empty"]},
            {"nodes": "0", "schedule": "0 10 * * *", "duration": "1h", "reasons": ["Empty"]},
            {"nodes": "1"}
        ]),
    );
    assert_eq!(
        messages(&back_to_back, FOUR, "2026-11-23T09:30:00Z"),
        ["No allowed disruptions for disruption reason Empty due to blocking budget: budgets[0] active: \
          nodes \"0\", schedule \"0 9 * * *\" for 1h, reasons [Empty]; the budgets change at \
          2026-11-23T10:00:00Z and still allow 0"]
    );
}

#[test]
fn unscheduled_and_invalid_blocks_say_nothing_will_open_them() {
    let messages_now = messages(
        &pool("default", json!([{"nodes": "0"}])),
        FOUR,
        "2026-11-23T10:00:00Z",
    );
    assert_eq!(messages_now.len(), 3);
    assert!(
        messages_now[0]
            .ends_with("budgets[0] active: nodes \"0\"; no budget window opens or closes ahead"),
        "{}",
        messages_now[0]
    );
    let invalid = pool(
        "default",
        json!([{"nodes": "1", "schedule": "0 0 * * sat-sun", "duration": "1h"}]),
    );
    let messages_now = messages(&invalid, FOUR, "2026-11-23T10:00:00Z");
    assert_eq!(messages_now.len(), 3);
    assert!(
        messages_now[2].ends_with("blocked until the budget is fixed"),
        "{}",
        messages_now[2]
    );
}

#[test]
fn a_pool_without_nodes_is_never_reported_blocked() {
    let blocked = pool("default", json!([{"nodes": "0"}]));
    assert!(messages(&blocked, PoolCounts::default(), "2026-11-23T10:00:00Z").is_empty());
    let all = checked(&[Reason::Empty]);
    assert!(of(
        &all,
        &[blocked],
        &BTreeMap::new(),
        at("2026-11-23T10:00:00Z")
    )
    .is_empty());
}

/// Karpenter works out a method's budgets only when the method has candidates, so a pool is reported blocked
/// for the reasons of the methods that ran with candidates, not for every reason its budgets block.
#[test]
fn only_the_reasons_of_methods_with_candidates_are_reported() {
    let frozen = pool("frozen", json!([{"nodes": "0"}]));
    let now = "2026-11-23T10:00:00Z";
    let reported = |reasons: &[Reason]| -> Vec<(String, Reason)> {
        of(
            &checked(reasons),
            std::slice::from_ref(&frozen),
            &counts(&[("frozen", FOUR)]),
            at(now),
        )
        .into_iter()
        .map(|b| (b.nodepool, b.reason))
        .collect()
    };
    assert!(reported(&[]).is_empty(), "no method had candidates");
    assert_eq!(
        reported(&[Reason::Drifted]),
        [("frozen".to_owned(), Reason::Drifted)]
    );
    assert_eq!(
        reported(&[Reason::Empty, Reason::Underutilized]),
        [
            ("frozen".to_owned(), Reason::Empty),
            ("frozen".to_owned(), Reason::Underutilized)
        ]
    );
}

/// Every pool with nodes is reported for a checked reason, not only the pools of the candidates (Karpenter's
/// mapping goes over all NodePools), and a pool its budgets let disrupt is not.
#[test]
fn every_blocked_pool_with_nodes_is_reported_for_a_checked_reason() {
    let pools = [
        pool("open", json!([{"nodes": "10%"}])),
        pool("frozen", json!([{"nodes": "0"}])),
        pool("empty-frozen", json!([{"nodes": "0"}])),
    ];
    let blocked = of(
        &checked(&[Reason::Underutilized]),
        &pools,
        &counts(&[("open", FOUR), ("frozen", FOUR)]),
        at("2026-11-23T10:00:00Z"),
    );
    let names: Vec<&str> = blocked.iter().map(|b| b.nodepool.as_str()).collect();
    assert_eq!(names, ["frozen"]);
}
