//! No churn (controller-behaviour.md §8, pain point 1): a replace is taken only when it saves at least the
//! margin, and a node launched as a replacement is not replaced back while the no-churn window runs, however
//! prices move.

mod disruption_support;

use disruption_support::{at, World};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kerf::api::nodepool::{ConsolidationPolicy, NodePool};
use kerf::disruption::{Method, Why};
use serde_json::json;

/// A pool that may only use `f0-8` and `f1-8`, the same size in two families.
fn eight_cpu_pool() -> NodePool {
    eight_cpu_pool_with("WhenEmptyOrUnderutilized")
}

fn eight_cpu_pool_with(policy: &str) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
        "spec": {"disruption": {"consolidationPolicy": policy}, "template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["f0-8", "f1-8"]}]}}}
    }))
    .expect("nodepool")
}

fn set_price(w: &mut World, instance_type: &str, price: f64) {
    let it = w
        .catalog
        .instance_types
        .iter_mut()
        .find(|it| it.name == instance_type)
        .expect("type");
    for o in &mut it.offerings {
        o.price = Some(price);
    }
}

/// One 8-CPU node on `instance_type` running a 5-CPU pod (it needs an 8-CPU node).
fn world_on(instance_type: &str, launched_as_replacement: Option<Timestamp>) -> World {
    let mut w = World::new(vec![eight_cpu_pool()], 2);
    w.node("n", "p", instance_type, "on-demand")
        .launched_as_replacement = launched_as_replacement;
    w.pods("n", 1, "5", json!({}));
    w
}

/// Runs a pass every `step` for `ticks` passes, with `prices(tick)` giving (f0-8, f1-8); a replace is carried
/// out at once (the node moves to the replacement's cheapest type). Returns the types the node ran on.
fn run(ticks: usize, step: SignedDuration, prices: impl Fn(usize) -> (f64, f64)) -> Vec<String> {
    let mut now = at("2026-11-23T12:00:00Z");
    let mut on = (String::from("f0-8"), None);
    let mut history = vec![on.0.clone()];
    for tick in 0..ticks {
        let mut w = world_on(&on.0, on.1);
        let (a, b) = prices(tick);
        set_price(&mut w, "f0-8", a);
        set_price(&mut w, "f1-8", b);
        let d = kerf::disruption::decide(&w.input(), now);
        if let Some(c) = d.commands.first() {
            assert_eq!(c.method, Method::SingleNodeConsolidation);
            let choice = c.replacements[0].cheapest.as_ref().expect("priced");
            on = (choice.instance_type.clone(), Some(now));
            history.push(on.0.clone());
        }
        now = now.checked_add(step).expect("time");
    }
    history
}

/// The two types swap a 25 % price gap at every tick.
fn swap(tick: usize) -> (f64, f64) {
    if tick.is_multiple_of(2) {
        (0.40, 0.30)
    } else {
        (0.30, 0.40)
    }
}

#[test]
fn swapping_prices_do_not_flip_flop_within_the_window() {
    // Swaps every 10 minutes for 50 minutes.
    let history = run(6, SignedDuration::from_mins(10), swap);
    assert_eq!(history, ["f0-8", "f1-8"]);
}

#[test]
fn after_the_window_a_real_saving_is_taken_again() {
    // Swaps every 70 minutes: each pass is past the one-hour window, so each real saving is taken once.
    let history = run(3, SignedDuration::from_mins(70), swap);
    assert_eq!(history, ["f0-8", "f1-8", "f0-8", "f1-8"]);
}

#[test]
fn savings_under_the_margin_are_never_taken() {
    // ±3 % wobble around the node's price: always under the 5 % margin.
    let wobble = |tick: usize| (0.40, if tick.is_multiple_of(2) { 0.388 } else { 0.412 });
    let history = run(48, SignedDuration::from_mins(30), wobble);
    assert_eq!(history, ["f0-8"]);
}

#[test]
fn a_recent_replacement_says_why_it_stays() {
    let now = at("2026-11-23T12:00:00Z");
    let launched = at("2026-11-23T11:30:00Z");
    let mut w = world_on("f0-8", Some(launched));
    set_price(&mut w, "f1-8", 0.1);
    let d = kerf::disruption::decide(&w.input(), now);
    assert!(d.commands.is_empty());
    let whys: Vec<&Why> = d.skipped.iter().map(|s| &s.why).collect();
    assert_eq!(whys, [&Why::WouldChurn(launched)]);
}

#[test]
fn balanced_refuses_a_saving_too_small_for_its_evictions() {
    // f1-8 costs 1 % more than f0-8; with no margin, moving to f0-8 is a real but tiny saving.
    let decide = |policy: &str| {
        let mut w = world_on("f1-8", None);
        w.pools = vec![eight_cpu_pool_with(policy)];
        w.settings.replace_margin = 0.0;
        kerf::disruption::decide(&w.input(), at("2026-11-23T12:00:00Z"))
    };
    let taken = decide("WhenEmptyOrUnderutilized");
    assert_eq!(taken.commands.len(), 1);
    let d = decide("Balanced");
    assert!(d.commands.is_empty());
    let whys: Vec<&Why> = d.skipped.iter().map(|s| &s.why).collect();
    assert_eq!(whys, [&Why::Unbalanced]);

    // Each judged move is reported per pool, as Karpenter counts karpenter_consolidation_moves_total and
    // observes karpenter_consolidation_score: taken and unscored under another policy, refused with its score
    // under Balanced (one node: the move saves ~1 % of the pool's cost for all of its disruption, far under 1/2).
    let [counted] = &taken.consolidation_moves[..] else {
        panic!("one move: {:?}", taken.consolidation_moves)
    };
    assert!(
        counted.move_approved && counted.score.is_none(),
        "{counted:?}"
    );
    assert_eq!(
        counted.policy,
        ConsolidationPolicy::WhenEmptyOrUnderutilized
    );
    let [refused] = &d.consolidation_moves[..] else {
        panic!("one move: {:?}", d.consolidation_moves)
    };
    assert!(!refused.move_approved, "{refused:?}");
    let score = refused.score.as_ref().expect("a Balanced pool is scored");
    assert!(!score.passed && score.value < 0.5, "{refused:?}");
    assert_eq!((score.k, score.threshold), (2, 0.5));
}
