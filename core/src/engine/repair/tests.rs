use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

const T0: &str = "2026-11-27T00:00:00Z";

/// The fake cloud provider's policy in Karpenter's health suite: `BadNode` `False` for 30 minutes.
const BAD_NODE: [RepairPolicy; 1] = [RepairPolicy {
    condition: "BadNode",
    status: "False",
    toleration: minutes(30),
}];

fn condition(type_: &str, status: &str, since: &str) -> NodeCondition {
    NodeCondition {
        type_: type_.into(),
        status: status.into(),
        last_transition_time: Some(Time(at(since))),
        ..NodeCondition::default()
    }
}

struct Fixture {
    name: String,
    pool: Option<String>,
    conditions: Vec<NodeCondition>,
    claim_pool: Option<String>,
    deleting: bool,
    stamp: Option<String>,
}

fn node(name: &str, pool: Option<&str>, conditions: Vec<NodeCondition>) -> Fixture {
    Fixture {
        name: name.into(),
        pool: pool.map(Into::into),
        conditions,
        claim_pool: pool.map(Into::into),
        deleting: false,
        stamp: None,
    }
}

fn view(fixtures: &[Fixture]) -> Vec<NodeHealth<'_>> {
    fixtures
        .iter()
        .map(|f| NodeHealth {
            name: &f.name,
            pool: f.pool.as_deref(),
            conditions: &f.conditions,
            claim: Some(ClaimHealth {
                name: &f.name,
                pool: f.claim_pool.as_deref(),
                deleting: f.deleting,
                termination_timestamp: f.stamp.as_deref(),
            }),
        })
        .collect()
}

fn verdict_of(fixtures: &[Fixture], policies: &[RepairPolicy], now: &str) -> Option<Verdict> {
    decide(&view(fixtures), policies, at(now))
        .into_iter()
        .find(|r| r.node == fixtures[0].name)
        .map(|r| r.verdict)
}

fn repaired(verdict: &Option<Verdict>) -> bool {
    matches!(verdict, Some(Verdict::Repair { delete: true, .. }))
}

/// Karpenter's node health suite, "Reconciliation": which conditions, statuses and durations delete the
/// claim.
#[test]
fn a_matching_condition_past_its_toleration_replaces_the_node() {
    let cases = [
        // "should delete nodes that are unhealthy by the cloud provider"
        ("BadNode", "False", "2026-11-27T01:00:00Z", true),
        // "should not delete node when unhealthy type does not match cloud provider passed in value"
        ("FakeHealthyNode", "False", "2026-11-27T01:00:00Z", false),
        // "should not delete node when health status does not match cloud provider passed in value"
        ("BadNode", "True", "2026-11-27T01:00:00Z", false),
        // "should not delete node when health duration is not reached"
        ("BadNode", "False", "2026-11-27T00:20:00Z", false),
        // exactly at the end of the toleration (Karpenter: not before it)
        ("BadNode", "False", "2026-11-27T00:30:00Z", true),
    ];
    for (type_, status, now, expected) in cases {
        let nodes = [node("a", Some("pool"), vec![condition(type_, status, T0)])];
        let verdict = verdict_of(&nodes, &BAD_NODE, now);
        assert_eq!(
            repaired(&verdict),
            expected,
            "{type_}={status} at {now}: {verdict:?}"
        );
    }
}

/// "should set annotation termination grace period when force termination is started", "should not respect
/// termination grace period if set on the nodepool", "should not update termination grace period if set
/// before the current time".
#[test]
fn the_termination_timestamp_becomes_now_unless_it_has_passed() {
    let now = "2026-11-27T01:00:00Z";
    let cases = [
        (None, Some(now)),
        (Some("2026-11-27T03:00:00Z"), Some(now)),
        (Some("2026-11-27T00:57:00Z"), None),
        (Some("not a time"), Some(now)),
    ];
    for (current, expected) in cases {
        let mut nodes = [node(
            "a",
            Some("pool"),
            vec![condition("BadNode", "False", T0)],
        )];
        nodes[0].stamp = current.map(Into::into);
        let verdict = verdict_of(&nodes, &BAD_NODE, now);
        let Some(Verdict::Repair { stamp, .. }) = verdict else {
            panic!("{current:?}: {verdict:?}");
        };
        assert_eq!(stamp.as_deref(), expected, "{current:?}");
    }
}

/// "should return the requeue interval for the condition closest to its terminationDuration" and "... for the
/// time between now and when the nodeClaim termination time".
#[test]
fn the_condition_whose_toleration_ends_first_decides_when_to_look_again() {
    let policies = [
        RepairPolicy {
            condition: "BadNode",
            status: "False",
            toleration: minutes(60),
        },
        RepairPolicy {
            condition: "ValidUnhealthyCondition",
            status: "False",
            toleration: minutes(30),
        },
    ];
    let nodes = [node(
        "a",
        Some("pool"),
        vec![
            condition("ValidUnhealthyCondition", "False", T0),
            condition("BadNode", "False", T0),
        ],
    )];
    let now = at("2026-11-27T00:27:00Z");
    let repairs = decide(&view(&nodes), &policies, now);
    assert_eq!(
        next_look(&repairs, now),
        Some(at("2026-11-27T00:30:00Z")),
        "{repairs:?}"
    );
    let single = [node(
        "a",
        Some("pool"),
        vec![condition("BadNode", "False", T0)],
    )];
    let repairs = decide(&view(&single), &BAD_NODE, now);
    assert_eq!(next_look(&repairs, now), Some(at("2026-11-27T00:30:00Z")));
}

/// "Forceful termination": "should ignore unhealthy nodes if more then 20% of the nodes are unhealthy in a
/// nodepool" (3 of 10), "... in a cluster" (the same without a pool), "should consider round up when there is
/// a low number of nodes for a nodepool" (1 of 3).
#[test]
fn repair_holds_back_while_more_than_a_fifth_of_the_scope_is_unhealthy() {
    let now = "2026-11-27T01:00:00Z";
    for pool in [Some("pool"), None] {
        let nodes: Vec<Fixture> = (0..10)
            .map(|i| {
                let conditions = if i < 3 {
                    vec![condition("BadNode", "False", T0)]
                } else {
                    Vec::new()
                };
                node(&format!("n{i}"), pool, conditions)
            })
            .collect();
        let repairs = decide(&view(&nodes), &BAD_NODE, at(now));
        assert_eq!(repairs.len(), 3, "{pool:?}");
        for repair in &repairs {
            let Verdict::Blocked { message, .. } = &repair.verdict else {
                panic!("{pool:?}: {repair:?}");
            };
            let scope = if pool.is_some() {
                "nodepool"
            } else {
                "cluster"
            };
            assert!(
                message.ends_with(&format!("unhealthy in the {scope}")),
                "{message}"
            );
        }
        assert_eq!(
            next_look(&repairs, at(now)),
            Some(at(now) + BLOCKED_RECHECK)
        );
    }
    let few: Vec<Fixture> = (0..3)
        .map(|i| {
            let conditions = if i == 0 {
                vec![condition("BadNode", "False", T0)]
            } else {
                Vec::new()
            };
            node(&format!("n{i}"), Some("pool"), conditions)
        })
        .collect();
    assert!(repaired(&verdict_of(&few, &BAD_NODE, now)));
}

/// The pool's share counts only that pool's Nodes: another pool's broken nodes do not hold it back.
#[test]
fn each_pool_is_its_own_scope() {
    let now = "2026-11-27T01:00:00Z";
    let mut nodes = vec![node(
        "a",
        Some("one"),
        vec![condition("BadNode", "False", T0)],
    )];
    for i in 0..4 {
        nodes.push(node(&format!("one-{i}"), Some("one"), Vec::new()));
        nodes.push(node(
            &format!("two-{i}"),
            Some("two"),
            vec![condition("BadNode", "False", T0)],
        ));
    }
    assert!(repaired(&verdict_of(&nodes, &BAD_NODE, now)));
}

/// "should ignore node disruption budgets", "should ignore do-not-disrupt on a node": neither is an input.
/// A claim being deleted already only has its deadline brought forward.
#[test]
fn a_claim_being_deleted_is_not_deleted_again() {
    let mut nodes = [node(
        "a",
        Some("pool"),
        vec![condition("BadNode", "False", T0)],
    )];
    nodes[0].deleting = true;
    let verdict = verdict_of(&nodes, &BAD_NODE, "2026-11-27T01:00:00Z");
    assert!(
        matches!(
            verdict,
            Some(Verdict::Repair {
                delete: false,
                stamp: Some(_),
                ..
            })
        ),
        "{verdict:?}"
    );
}

#[test]
fn nodes_without_a_claim_are_counted_but_not_repaired() {
    let fixtures = [node("a", None, vec![condition("Ready", "Unknown", T0)])];
    let mut nodes = view(&fixtures);
    nodes[0].claim = None;
    assert!(decide(&nodes, &AWS_POLICIES, at("2026-11-27T01:00:00Z")).is_empty());
}

/// The AWS policies: Ready False or Unknown for 30 minutes, accelerated hardware for 10.
#[test]
fn the_aws_policies_tolerate_what_karpenter_s_do() {
    let cases = [
        ("Ready", "False", "2026-11-27T00:29:59Z", false),
        ("Ready", "False", "2026-11-27T00:30:00Z", true),
        ("Ready", "Unknown", "2026-11-27T00:30:00Z", true),
        ("Ready", "True", "2026-11-27T05:00:00Z", false),
        (
            "AcceleratedHardwareReady",
            "False",
            "2026-11-27T00:10:00Z",
            true,
        ),
        ("KernelReady", "False", "2026-11-27T00:10:00Z", false),
        ("KernelReady", "Unknown", "2026-11-27T05:00:00Z", false),
        (
            "ContainerRuntimeReady",
            "False",
            "2026-11-27T00:30:00Z",
            true,
        ),
    ];
    for (type_, status, now, expected) in cases {
        let nodes = [node("a", Some("pool"), vec![condition(type_, status, T0)])];
        let verdict = verdict_of(&nodes, &AWS_POLICIES, now);
        assert_eq!(
            repaired(&verdict),
            expected,
            "{type_}={status} at {now}: {verdict:?}"
        );
    }
}

#[test]
fn thresholds_round_up() {
    assert!(within_threshold(0, 0));
    assert!(within_threshold(1, 1));
    assert!(within_threshold(1, 5));
    assert!(!within_threshold(2, 5));
    assert!(within_threshold(2, 6));
    assert!(!within_threshold(3, 10));
}

#[test]
fn condition_names_become_metric_labels_as_karpenter_writes_them() {
    for (name, label) in [
        ("Ready", "ready"),
        ("AcceleratedHardwareReady", "accelerated_hardware_ready"),
        ("BadNode", "bad_node"),
        ("ContainerRuntimeReady", "container_runtime_ready"),
    ] {
        assert_eq!(snake_case(name), label);
    }
}

#[test]
fn stamps_are_whole_seconds() {
    assert_eq!(
        rfc3339_seconds(at("2026-11-27T01:02:03.456Z")),
        "2026-11-27T01:02:03Z"
    );
}
