//! Property tests of `decide` over random clusters: a command never exceeds its pool's budget, never takes a
//! do-not-disrupt node or a node with a do-not-disrupt or PDB-protected pod, a delete leaves every pod of its
//! candidates a place on the remaining nodes, and a replace is cheaper by the margin.

mod disruption_support;

use disruption_support::{at, pod, pool, World, NOW, SIZES};
use kerf::api::nodepool::DisruptionReason;
use kerf::catalog::CapacityType;
use kerf::disruption::{
    count_nodes, Budgets, Command, Method, NodeState, DEFAULT_REPLACE_MARGIN, DO_NOT_DISRUPT,
};
use kerf::scheduling::{solve_cluster, Cluster, PodInfo};
use proptest::prelude::*;
use serde_json::json;

const CPUS: [&str; 4] = ["250m", "500m", "1", "2"];

#[derive(Clone, Debug)]
struct NodeSpec {
    size: usize,
    pods: Vec<usize>,
    node_do_not_disrupt: bool,
    /// Annotate its first pod with do-not-disrupt.
    pod_do_not_disrupt: bool,
    /// Label its first pod as covered by a PDB that allows no disruption.
    guarded: bool,
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (
        0..SIZES.len(),
        prop::collection::vec(0..CPUS.len(), 0..6),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.15),
    )
        .prop_map(
            |(size, pods, node_do_not_disrupt, pod_do_not_disrupt, guarded)| NodeSpec {
                size,
                pods,
                node_do_not_disrupt,
                pod_do_not_disrupt,
                guarded,
            },
        )
}

fn world(nodes: &[NodeSpec], budget: &str) -> World {
    let mut w = World::new(vec![pool("p", json!({"budgets": [{"nodes": budget}]}))], 2);
    w.pdbs.push(
        serde_json::from_value(json!({
            "metadata": {"name": "guarded", "namespace": "shop"},
            "spec": {"selector": {"matchLabels": {"app": "guarded"}}},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1},
        }))
        .expect("pdb"),
    );
    for (i, spec) in nodes.iter().enumerate() {
        let name = format!("n{i}");
        let node = w.node(&name, "p", &format!("f0-{}", SIZES[spec.size]), "on-demand");
        if spec.node_do_not_disrupt {
            node.node_mut().expect("node").metadata.annotations =
                Some([(DO_NOT_DISRUPT.to_owned(), "true".to_owned())].into());
        }
        for (k, &cpu) in spec.pods.iter().enumerate() {
            let mut meta = json!({});
            if k == 0 && spec.pod_do_not_disrupt {
                meta = json!({"annotations": {DO_NOT_DISRUPT: "true"}});
            }
            if k == 0 && spec.guarded {
                meta["labels"] = json!({"app": "guarded"});
            }
            let p = pod(&format!("{name}-p{k}"), Some(&name), CPUS[cpu], meta);
            w.find(&name).pods.push(p);
        }
    }
    w
}

fn budget() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u32..4).prop_map(|n| n.to_string()),
        (1u32..100).prop_map(|p| format!("{p}%")),
    ]
}

/// The budget `reason` allows in pool `p`, worked out from the budgets API alone.
fn allowed(w: &World, reason: DisruptionReason) -> kerf::disruption::Allowed {
    let counts = count_nodes(
        w.nodes
            .iter()
            .map(|n| ("p", NodeState::of(&n.claim, n.node.as_deref(), false))),
    );
    Budgets::of(&w.pools[0])
        .evaluate(reason, counts["p"], at(NOW))
        .budget
}

fn protected(w: &World, claim: &str) -> bool {
    let n = w
        .nodes
        .iter()
        .find(|n| n.claim_name() == claim)
        .expect("claim");
    let annotated = |a: &Option<std::collections::BTreeMap<String, String>>| {
        a.as_ref().is_some_and(|a| a.contains_key(DO_NOT_DISRUPT))
    };
    annotated(&n.node.as_ref().expect("node").metadata.annotations)
        || n.pods.iter().any(|p| {
            annotated(&p.metadata.annotations)
                || p.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.get("app").map(String::as_str) == Some("guarded"))
        })
}

/// Solves the candidates' pods over the other nodes: they must all land on existing nodes.
fn assert_pods_fit_elsewhere(w: &World, c: &Command) {
    let gone = |name: &str| c.candidates.iter().any(|t| t.claim == name);
    let (kept, removed): (Vec<_>, Vec<_>) = w.nodes.iter().partition(|n| !gone(n.claim_name()));
    let nodes: Vec<_> = kept
        .iter()
        .filter_map(|n| n.node.as_deref().cloned())
        .collect();
    let claims: Vec<_> = kept.iter().map(|n| n.claim.as_ref().clone()).collect();
    let pods: Vec<_> = kept.iter().flat_map(|n| n.pods.clone()).collect();
    let cluster = Cluster::from_objects(&nodes, &claims, &[], &pods, &w.catalog).expect("cluster");
    let moving: Vec<PodInfo> = removed
        .iter()
        .flat_map(|n| &n.pods)
        .map(|p| PodInfo::from_pod(p).expect("pod"))
        .collect();
    let plan = solve_cluster(&moving, &w.pools, &w.catalog, &cluster);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert!(
        plan.claims.is_empty(),
        "a delete needed new nodes: {:?}",
        plan.claims
    );
}

fn assert_replace_is_cheaper(w: &World, c: &Command) {
    let total: f64 = c
        .candidates
        .iter()
        .map(|t| {
            let n = w
                .nodes
                .iter()
                .find(|n| n.claim_name() == t.claim)
                .expect("claim");
            let labels = n.claim.metadata.labels.as_ref().expect("labels");
            let it = w
                .catalog
                .get(&labels["node.kubernetes.io/instance-type"])
                .expect("type");
            it.offerings
                .iter()
                .find(|o| o.zone == "zone-a" && o.capacity_type == CapacityType::OnDemand)
                .and_then(|o| o.price)
                .expect("price")
        })
        .sum();
    for name in c.replacements[0].instance_types.iter() {
        let it = w.catalog.get(name).expect("type");
        let worst = it
            .offerings
            .iter()
            .filter(|o| o.capacity_type == CapacityType::OnDemand)
            .filter_map(|o| o.price)
            .fold(0.0, f64::max);
        assert!(
            worst < total * (1.0 - DEFAULT_REPLACE_MARGIN),
            "{name}: {worst} vs {total}"
        );
    }
    assert!(c.savings >= total * DEFAULT_REPLACE_MARGIN - 1e-9);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, .. ProptestConfig::default() })]

    #[test]
    fn commands_respect_budgets_blockers_and_room(
        nodes in prop::collection::vec(node_spec(), 1..9),
        budget in budget(),
    ) {
        let w = world(&nodes, &budget);
        let d = w.decide(NOW);
        // No expirations here: at most one method's commands.
        prop_assert!(d.commands.len() <= 1 || d.commands.iter().all(|c| c.method == Method::Emptiness));
        for c in &d.commands {
            let reason = c.reason.budget_reason().expect("voluntary");
            let allowed = allowed(&w, reason);
            prop_assert!(
                kerf::disruption::Allowed::Nodes(c.candidates.len() as u64) <= allowed,
                "{} candidates, budget {allowed}", c.candidates.len()
            );
            for t in &c.candidates {
                prop_assert!(!protected(&w, &t.claim), "{} is protected", t.claim);
            }
            if c.is_delete() {
                assert_pods_fit_elsewhere(&w, c);
            } else {
                prop_assert_eq!(c.replacements.len(), 1);
                assert_replace_is_cheaper(&w, c);
            }
        }
    }
}
