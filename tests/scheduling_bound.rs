//! The lower bound on a plan's cost (`kerf::scheduling::bound`): exact on cases worked by hand, never above
//! the cost of a plan the solve makes.

mod support;

use kerf::scheduling::bound::{lower_bound, BoundError};
use kerf::scheduling::{PodInfo, Scheduler};
use proptest::prelude::*;
use serde_json::json;
use support::{catalog, hostname_anti_affinity, labelled, nodepool, pods};

/// What the solve's plan for `pods` costs per hour (every pod placed).
fn plan_cost(scheduler: &Scheduler, pods: &[PodInfo]) -> f64 {
    let plan = scheduler.solve(pods);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    support::plan_cost(&plan)
}

#[test]
fn pods_of_one_shape_cost_at_least_their_share_of_the_cheapest_room() {
    let catalog = catalog();
    let pools = [nodepool("default", json!({}))];
    let scheduler = Scheduler::new(&pools, &catalog);
    let web = pods(10, "web", json!({}));
    let bound = lower_bound(&scheduler, &web).expect("bound");
    // One class: the relaxation puts every pod on the kind whose room is cheapest for its requests.
    let expected = scheduler
        .new_nodes_for(&web[0])
        .into_iter()
        .map(|n| {
            let room = scheduler.room(n);
            let share = [
                1000.0 / room.cpu as f64,
                (1u64 << 30) as f64 / room.memory as f64,
                1.0 / room.pods as f64,
            ]
            .into_iter()
            .fold(0.0, f64::max);
            scheduler.price(n).expect("priced") * share * 10.0
        })
        .fold(f64::INFINITY, f64::min);
    assert!(
        (bound.per_hour - expected).abs() < 1e-9 * expected,
        "{bound:?} against {expected}"
    );
    assert_eq!(bound.classes, 1);
    assert!(bound.per_hour <= plan_cost(&scheduler, &web) + 1e-9);
}

/// Pods a required hostname anti-affinity keeps apart need a node each: the bound is a cheapest node per pod,
/// which is what the solve plans (three `small` spot nodes).
#[test]
fn pods_kept_apart_cost_at_least_a_node_each() {
    let catalog = catalog();
    let pools = [nodepool("default", json!({}))];
    let scheduler = Scheduler::new(&pools, &catalog);
    let apart = labelled(3, "db", json!({"app": "db"}), hostname_anti_affinity("db"));
    let bound = lower_bound(&scheduler, &apart).expect("bound");
    assert!((bound.per_hour - 3.0 * 0.04).abs() < 1e-9, "{bound:?}");
    assert!((plan_cost(&scheduler, &apart) - bound.per_hour).abs() < 1e-9);
    // Without the anti-affinity the same pods share a node, and the bound is their share of one.
    let together = labelled(3, "db", json!({"app": "db"}), json!({}));
    assert!(lower_bound(&scheduler, &together).expect("bound").per_hour < 0.6 * bound.per_hour);
}

/// An anti-affinity that does not match the pod itself keeps nothing apart.
#[test]
fn an_anti_affinity_to_other_pods_keeps_a_workload_together() {
    let catalog = catalog();
    let pools = [nodepool("default", json!({}))];
    let scheduler = Scheduler::new(&pools, &catalog);
    let others = labelled(
        3,
        "web",
        json!({"app": "web"}),
        hostname_anti_affinity("db"),
    );
    let together = labelled(3, "web", json!({"app": "web"}), json!({}));
    assert_eq!(
        lower_bound(&scheduler, &others).expect("bound").per_hour,
        lower_bound(&scheduler, &together).expect("bound").per_hour
    );
}

#[test]
fn a_pod_no_node_fits_is_named() {
    let catalog = catalog();
    let pools = [nodepool("default", json!({}))];
    let scheduler = Scheduler::new(&pools, &catalog);
    let huge = pods(
        1,
        "huge",
        json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "100"}}}]}),
    );
    assert_eq!(
        lower_bound(&scheduler, &huge),
        Err(BoundError::Unplaceable {
            pod: "default/huge-0".to_owned()
        })
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Every plan the solve makes is a solution of the relaxation, so no plan costs less than the bound.
    #[test]
    fn no_plan_costs_less_than_the_bound(
        shapes in proptest::collection::vec((0usize..4, 0usize..4, 1usize..6, any::<bool>(), any::<bool>()), 1..5)
    ) {
        let catalog = catalog();
        let pools = [nodepool("default", json!({}))];
        let scheduler = Scheduler::new(&pools, &catalog);
        let cpus = ["100m", "500m", "1", "1500m"];
        let memories = ["128Mi", "512Mi", "1Gi", "3Gi"];
        let mut all = Vec::new();
        for (i, (cpu, memory, count, apart, spot)) in shapes.into_iter().enumerate() {
            let group = format!("g{i}");
            let mut spec = json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": cpus[cpu], "memory": memories[memory]}}}]});
            if apart {
                support::merge(&mut spec, hostname_anti_affinity(&group));
            }
            if spot {
                spec["nodeSelector"] = json!({"karpenter.sh/capacity-type": "on-demand"});
            }
            all.extend(labelled(count, &group, json!({"app": group}), spec));
        }
        let bound = lower_bound(&scheduler, &all).expect("bound");
        let cost = plan_cost(&scheduler, &all);
        prop_assert!(bound.per_hour > 0.0);
        prop_assert!(bound.per_hour <= cost + 1e-9, "bound {} above the plan's {}", bound.per_hour, cost);
    }
}
