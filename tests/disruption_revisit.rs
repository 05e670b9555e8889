//! `Decision::revisit_at`: the instant a pass over the same cluster could next decide differently. For each
//! clock-driven fact a pass reads, the revisit is that fact's instant, and passes just before it decide as the
//! first one did (the simulator skips them on that promise). A property test checks the promise over random
//! clusters with every such fact at once.

mod disruption_support;

use disruption_support::{at, disrupted, pool, World, NOW};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kerf::disruption::DO_NOT_DISRUPT;
use serde_json::json;

/// Two 8-CPU nodes with two 1-CPU pods each, whose claims never expire.
fn two_light_nodes(disruption: serde_json::Value) -> World {
    let mut w = World::new(vec![pool("p", disruption)], 1);
    for name in ["n1", "n2"] {
        w.node(name, "p", "f0-8", "on-demand")
            .claim_mut()
            .spec
            .expire_after = Some("Never".into());
        w.pods(name, 2, "1", json!({}));
    }
    w
}

fn before(t: Timestamp) -> String {
    (t - SignedDuration::from_secs(1)).to_string()
}

#[test]
fn nothing_on_the_clock_means_no_revisit() {
    let w = two_light_nodes(json!({"budgets": [{"nodes": "100%"}]}));
    assert_eq!(w.decide(NOW).revisit_at, None);
}

#[test]
fn consolidate_after_elapsing_brings_the_pass_back() {
    let mut w = two_light_nodes(json!({"consolidateAfter": "1h", "budgets": [{"nodes": "100%"}]}));
    for node in &mut w.nodes {
        node.claim_mut()
            .status
            .as_mut()
            .expect("status")
            .last_pod_event_time = Some("2026-11-23T11:30:00Z".into());
    }
    let d = w.decide(NOW);
    assert!(d.commands.is_empty());
    let revisit = d.revisit_at.expect("a revisit");
    assert_eq!(revisit, at("2026-11-23T12:30:00Z"));
    assert!(w.decide(&before(revisit)).commands.is_empty());
    assert_eq!(disrupted(&w.decide(&revisit.to_string())).len(), 1);
}

#[test]
fn a_do_not_disrupt_duration_ending_brings_the_pass_back() {
    // Pods start at T0 (midnight): 13h ends at 13:00, after NOW.
    let mut w = two_light_nodes(json!({"budgets": [{"nodes": "100%"}]}));
    for node in &mut w.nodes {
        for pod in &mut node.pods {
            pod.metadata.annotations = Some([(DO_NOT_DISRUPT.to_owned(), "13h".to_owned())].into());
        }
    }
    let d = w.decide(NOW);
    assert!(d.commands.is_empty());
    let revisit = d.revisit_at.expect("a revisit");
    assert_eq!(revisit, at("2026-11-23T13:00:00Z"));
    assert!(w.decide(&before(revisit)).commands.is_empty());
    assert_eq!(disrupted(&w.decide(&revisit.to_string())).len(), 1);
}

#[test]
fn a_budget_window_closing_brings_the_pass_back() {
    let w = two_light_nodes(
        json!({"budgets": [{"nodes": "0", "schedule": "0 9 * * *", "duration": "8h"}]}),
    );
    let d = w.decide(NOW);
    assert!(d.commands.is_empty());
    let revisit = d.revisit_at.expect("a revisit");
    assert_eq!(revisit, at("2026-11-23T17:00:00Z"));
    assert!(w.decide(&before(revisit)).commands.is_empty());
    assert_eq!(disrupted(&w.decide(&revisit.to_string())).len(), 1);
}

#[test]
fn expiry_and_the_end_of_the_no_churn_window_are_revisits() {
    let mut w = two_light_nodes(json!({"consolidateAfter": "Never"}));
    w.find("n1").claim_mut().spec.expire_after = Some("13h".into());
    assert_eq!(
        w.decide(NOW).revisit_at,
        Some(at("2026-11-23T13:00:00Z")),
        "n1 was created at T0 (midnight)"
    );
    w.find("n1").claim_mut().spec.expire_after = Some("Never".into());
    w.find("n2").launched_as_replacement = Some(at("2026-11-23T11:45:00Z"));
    assert_eq!(
        w.decide(NOW).revisit_at,
        Some(at("2026-11-23T12:45:00Z")),
        "an hour's no-churn window"
    );
}

#[test]
fn candidates_swapping_places_as_their_costs_fall_is_a_revisit() {
    // Same type and price, and the same reschedule cost (3: a pod of negative eviction cost adds nothing to it),
    // but n1's pods weigh 2 in its disruption cost and n2's 1. Disruption costs fall with the claims' lifetime
    // (720h): n1, 200h old, costs 2 × 520/720 ≈ 1.44 and falls twice as fast as n2, 1h old, at ≈ 1.0. n2 comes
    // first until 2·(720h − (t − c1))/720h = (720h − (t − c2))/720h, i.e. t = NOW + 321h.
    let mut w = World::new(vec![pool("p", json!({"consolidateAfter": "Never"}))], 1);
    let created = |hours: i64| Some(Time(at(NOW) - SignedDuration::from_hours(hours)));
    w.node("n1", "p", "f0-8", "on-demand")
        .claim_mut()
        .metadata
        .creation_timestamp = created(200);
    w.pods("n1", 2, "1", json!({}));
    w.node("n2", "p", "f0-8", "on-demand")
        .claim_mut()
        .metadata
        .creation_timestamp = created(1);
    w.pods("n2", 2, "1", json!({}));
    // Without consolidation the order is not read: only the expiries are revisits (n1's at NOW + 520h).
    assert_eq!(
        w.decide(NOW).revisit_at,
        Some(at(NOW) + SignedDuration::from_hours(520))
    );
    w.pools[0] = pool("p", json!({"budgets": [{"nodes": "100%"}]}));
    assert_eq!(
        w.decide(NOW).revisit_at,
        Some(at(NOW) + SignedDuration::from_hours(520)),
        "equal weights fall alike: the order never changes"
    );
    w.pods(
        "n2",
        1,
        "1",
        json!({"name": "cheap", "annotations": {"controller.kubernetes.io/pod-deletion-cost": "-268435456"}}),
    );
    let revisit = w.decide(NOW).revisit_at.expect("a revisit");
    let swap = at(NOW) + SignedDuration::from_hours(321);
    assert!(
        revisit <= swap && swap.duration_since(revisit) < SignedDuration::from_secs(3),
        "{revisit} is the swap at {swap}, rounded down"
    );
}

/// One random node: its type, pods (CPU each, and whether the pod's deletion cost is negative), how long ago it
/// was created and its last pod event, its `expireAfter`, and a do-not-disrupt duration on its first pod.
#[derive(Clone, Debug)]
struct Clocked {
    size: usize,
    pods: Vec<(usize, bool)>,
    created_hours_ago: i64,
    event_minutes_ago: Option<i64>,
    expire_after: usize,
    do_not_disrupt_minutes: Option<i64>,
}

fn clocked() -> impl proptest::strategy::Strategy<Value = Clocked> {
    use proptest::prelude::*;
    (
        0..disruption_support::SIZES.len(),
        prop::collection::vec((0..3usize, prop::bool::weighted(0.3)), 0..5),
        0i64..800,
        prop::option::of(0i64..120),
        0..4usize,
        prop::option::of(1i64..1500),
    )
        .prop_map(
            |(size, pods, created_hours_ago, event_minutes_ago, expire_after, dnd)| Clocked {
                size,
                pods,
                created_hours_ago,
                event_minutes_ago,
                expire_after,
                do_not_disrupt_minutes: dnd,
            },
        )
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, .. Default::default() })]

    /// Between a pass and its revisit the same cluster is decided alike: the same commands at any instant before
    /// the revisit (the promise the simulator's skipped minutes rest on).
    #[test]
    fn a_cluster_is_decided_alike_until_the_revisit(
        nodes in proptest::collection::vec(clocked(), 1..7),
        consolidate_after in 0..3usize,
        windowed in proptest::bool::ANY,
        share in 0.0f64..1.0,
    ) {
        let after = ["0s", "10m", "1h"][consolidate_after];
        let budgets = if windowed {
            json!([{"nodes": "0", "schedule": "30 */3 * * *", "duration": "50m"}, {"nodes": "100%"}])
        } else {
            json!([{"nodes": "100%"}])
        };
        let mut w = World::new(
            vec![pool("p", json!({"consolidateAfter": after, "budgets": budgets}))],
            1,
        );
        let now = at(NOW);
        for (i, n) in nodes.iter().enumerate() {
            let name = format!("n{i}");
            let size = disruption_support::SIZES[n.size];
            let node = w.node(&name, "p", &format!("f0-{size}"), "on-demand");
            node.claim_mut().metadata.creation_timestamp =
                Some(Time(now - SignedDuration::from_hours(n.created_hours_ago)));
            node.claim_mut().spec.expire_after =
                Some(["Never", "10h", "100h", "720h"][n.expire_after].to_owned());
            if let Some(minutes) = n.event_minutes_ago {
                node.claim_mut().status.as_mut().expect("status").last_pod_event_time =
                    Some((now - SignedDuration::from_mins(minutes)).to_string());
            }
            for (k, &(cpu, cheap)) in n.pods.iter().enumerate() {
                let mut annotations = serde_json::Map::new();
                if cheap {
                    annotations.insert(
                        "controller.kubernetes.io/pod-deletion-cost".into(),
                        json!("-268435456"),
                    );
                }
                if let (0, Some(minutes)) = (k, n.do_not_disrupt_minutes) {
                    annotations.insert(DO_NOT_DISRUPT.into(), json!(format!("{minutes}m")));
                }
                let cpu = ["250m", "500m", "1"][cpu];
                let p = disruption_support::pod(
                    &format!("{name}-p{k}"),
                    Some(&name),
                    cpu,
                    json!({"annotations": annotations}),
                );
                w.find(&name).pods.push(p);
            }
        }
        let first = w.decide(NOW);
        // Up to the revisit, or a week on if there is none.
        let horizon = first
            .revisit_at
            .unwrap_or(now + SignedDuration::from_hours(168));
        proptest::prop_assert!(horizon > now);
        let span = horizon.duration_since(now).as_secs_f64();
        let later = now + SignedDuration::from_secs((span * share).floor() as i64);
        let later = if later >= horizon { now } else { later };
        let second = w.decide(&later.to_string());
        let methods = |d: &kerf::disruption::Decision| {
            d.commands.iter().map(|c| c.method).collect::<Vec<_>>()
        };
        proptest::prop_assert_eq!(disrupted(&first), disrupted(&second), "at {}", later);
        proptest::prop_assert_eq!(methods(&first), methods(&second));
    }
}
