//! Filling the room a plan leaves (`scheduling/solve/refill.rs`): pods nothing constrains move from a claim into
//! room other claims' launch types leave, when the claim they leave gets cheaper; nothing else moves.

mod support;

use kerf::scheduling::bound::lower_bound;
use kerf::scheduling::{Plan, PodInfo, Scheduler};
use serde_json::{json, Value};
use support::{catalog, hostname_anti_affinity, labelled, merge, nodepool, plan_cost};

fn types(plan: &Plan) -> Vec<&str> {
    let mut types: Vec<&str> = plan
        .claims
        .iter()
        .map(|c| c.cheapest.as_ref().expect("priced").instance_type.as_str())
        .collect();
    types.sort_unstable();
    types
}

/// Pods of `cpu` each, `spec` merged in.
fn sized(n: usize, prefix: &str, cpu: &str, spec: Value) -> Vec<PodInfo> {
    let mut spec_with = json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]});
    merge(&mut spec_with, spec);
    labelled(n, prefix, json!({"app": prefix}), spec_with)
}

/// Two 1.5-CPU pods come first (largest first) and open a claim; three small pods that a hostname
/// anti-affinity keeps apart follow: the first joins that claim, the others get a `small` node each with most of
/// it empty. Karpenter's queue stops there: a `medium` and two `small` nodes. Moving the big pods into the two
/// small nodes' room lets the first claim launch as `small` too: the same three nodes, each the cheapest, which
/// is the least any plan can cost.
#[test]
fn pods_nothing_constrains_fill_the_room_a_node_per_pod_workload_leaves() {
    let catalog = catalog();
    let pools = [nodepool("default", json!({}))];
    let scheduler = Scheduler::new(&pools, &catalog);
    let mut pods = sized(2, "batch", "1500m", json!({}));
    pods.extend(sized(3, "db", "250m", hostname_anti_affinity("db")));
    let plan = scheduler.solve(&pods);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(types(&plan), ["small", "small", "small"]);
    for claim in &plan.claims {
        let db = claim.pods.iter().filter(|p| p.contains("/db-")).count();
        assert_eq!(db, 1, "one db pod per node: {:?}", claim.pods);
    }
    let bound = lower_bound(&scheduler, &pods).expect("bound");
    assert!(
        (plan_cost(&plan) - bound.per_hour).abs() < 1e-9,
        "{} against {bound:?}",
        plan_cost(&plan)
    );
}

/// A pod with a node requirement of its own (here a `nodeSelector`) stays where the queue put it, as does a pod
/// another pod's topology spread counts: moving either could change what the requirement or the spread allows.
#[test]
fn pods_with_requirements_or_counted_by_a_spread_stay_where_the_queue_put_them() {
    let catalog = catalog();
    let pools = [nodepool("default", json!({}))];
    let scheduler = Scheduler::new(&pools, &catalog);
    let selected = json!({"nodeSelector": {"kubernetes.io/os": "linux"}});
    let mut pods = sized(2, "batch", "1500m", selected);
    pods.extend(sized(3, "db", "250m", hostname_anti_affinity("db")));
    assert_eq!(types(&scheduler.solve(&pods)), ["medium", "small", "small"]);

    let mut pods = sized(2, "batch", "1500m", json!({}));
    pods.extend(sized(3, "db", "250m", hostname_anti_affinity("db")));
    // A spread over the batch pods (its own pods match nothing): they are counted, so they stay.
    pods.extend(sized(
        1,
        "watcher",
        "100m",
        json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "batch"}}}]}),
    ));
    let plan = scheduler.solve(&pods);
    let batch_claims: Vec<usize> = plan
        .claims
        .iter()
        .enumerate()
        .filter(|(_, c)| c.pods.iter().any(|p| p.contains("/batch-")))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(batch_claims.len(), 1, "{:?}", plan.claims);
}

/// A move that would not make the giving claim cheaper is not made: a claim of one 1.5-CPU pod is already the
/// smallest type, so the plan is the queue's.
#[test]
fn no_pod_moves_when_no_claim_gets_cheaper() {
    let catalog = catalog();
    let pools = [nodepool("default", json!({}))];
    let scheduler = Scheduler::new(&pools, &catalog);
    let mut pods = sized(1, "batch", "1500m", json!({}));
    pods.extend(sized(3, "db", "250m", hostname_anti_affinity("db")));
    let plan = scheduler.solve(&pods);
    assert_eq!(types(&plan), ["small", "small", "small"]);
    let batch = plan
        .claims
        .iter()
        .find(|c| c.pods.iter().any(|p| p.contains("/batch-")))
        .expect("placed");
    // Where the queue put it: with the first db pod.
    assert_eq!(
        batch.pods,
        ["default/batch-0".to_owned(), "default/db-0".to_owned()]
    );
}
