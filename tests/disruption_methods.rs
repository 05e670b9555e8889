//! The disruption methods through `decide` (controller-behaviour.md §3.1–3.5): which nodes a pass takes, in
//! which order, under which budget, and why it leaves the others.

mod disruption_support;

use disruption_support::{disrupted, pod, pool, pool_with, price, World, NOW, T0};
use kerf::disruption::{
    nodepool_hash, CloudDrift, Method, Reason, Why, DO_NOT_DISRUPT, NODEPOOL_HASH,
    NODEPOOL_HASH_VERSION,
};
use serde_json::json;

/// Three 8-CPU nodes with two 1-CPU pods each: any one's pods fit on the others.
fn three_light_nodes(disruption: serde_json::Value) -> World {
    let mut w = World::new(vec![pool("p", disruption)], 1);
    for name in ["n1", "n2", "n3"] {
        w.node(name, "p", "f0-8", "on-demand");
        w.pods(name, 2, "1", json!({}));
    }
    w
}

fn skipped_for<'a>(d: &'a kerf::disruption::Decision, claim: &str, method: Method) -> Vec<&'a Why> {
    d.skipped
        .iter()
        .filter(|s| s.claim.as_deref() == Some(claim) && s.method == method)
        .map(|s| &s.why)
        .collect()
}

#[test]
fn emptiness_deletes_empty_nodes_one_budget_unit_each() {
    let mut w = World::new(vec![pool("p", json!({"budgets": [{"nodes": "2"}]}))], 1);
    for name in ["e1", "e2", "e3"] {
        w.node(name, "p", "f0-8", "on-demand");
    }
    w.node("busy", "p", "f0-8", "on-demand");
    w.pods("busy", 1, "1", json!({}));
    let d = w.decide(NOW);
    assert_eq!(disrupted(&d), [["e1-claim", "e2-claim"]]);
    let c = &d.commands[0];
    assert_eq!((c.method, c.reason), (Method::Emptiness, Reason::Empty));
    assert!(c.is_delete());
    assert!((c.savings - 2.0 * price(0, 8)).abs() < 1e-9);
    assert!(matches!(
        skipped_for(&d, "e3-claim", Method::Emptiness)[..],
        [Why::Budget { .. }]
    ));
}

#[test]
fn emptiness_waits_for_consolidate_after_and_never_disables_it() {
    let mut w = World::new(vec![pool("p", json!({"consolidateAfter": "1h"}))], 1);
    w.node("e", "p", "f0-8", "on-demand")
        .claim_mut()
        .status
        .as_mut()
        .expect("status")
        .last_pod_event_time = Some("2026-11-23T11:30:00Z".to_owned());
    let d = w.decide(NOW);
    assert!(d.commands.is_empty());
    assert_eq!(
        skipped_for(&d, "e-claim", Method::Emptiness),
        [&Why::ConsolidateAfter(disruption_support::at(
            "2026-11-23T12:30:00Z"
        ))]
    );
    assert_eq!(disrupted(&w.decide("2026-11-23T12:30:00Z")), [["e-claim"]]);
    w.pools[0] = pool("p", json!({"consolidateAfter": "Never"}));
    let d = w.decide("2026-11-24T00:00:00Z");
    assert!(d.commands.is_empty());
    assert_eq!(
        skipped_for(&d, "e-claim", Method::Emptiness),
        [&Why::ConsolidateNever]
    );
}

#[test]
fn daemonset_and_finished_pods_leave_a_node_empty() {
    let mut w = World::new(vec![pool("p", json!({}))], 1);
    w.node("e", "p", "f0-8", "on-demand");
    let owner = json!({"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u"}]});
    w.pods("e", 1, "100m", owner);
    let mut done = pod("done", Some("e"), "1", json!({}));
    done.status.as_mut().expect("status").phase = Some("Succeeded".to_owned());
    w.find("e").pods.push(done);
    assert_eq!(disrupted(&w.decide(NOW)), [["e-claim"]]);
}

#[test]
fn consolidation_deletes_a_node_whose_pods_fit_elsewhere() {
    let w = three_light_nodes(json!({}));
    let d = w.decide(NOW);
    // The default budget (10 % of 3 = 1) leaves multi-node one candidate: single-node decides.
    assert_eq!(d.commands.len(), 1);
    let c = &d.commands[0];
    assert_eq!(
        (c.method, c.reason),
        (Method::SingleNodeConsolidation, Reason::Underutilized)
    );
    assert!(c.is_delete());
    assert_eq!(c.budgets.len(), 1);
    assert_eq!(c.budgets[0].budget, kerf::disruption::Allowed::Nodes(1));
}

/// Karpenter's disruption suite: "should not consider candidates that are nominated" (a scheduling pass counted
/// on the node to take pods); the command names the nodes its pods go to, so its driver nominates them.
#[test]
fn nominated_nodes_are_no_candidates_and_commands_name_their_destinations() {
    let mut w = World::new(vec![pool("p", json!({}))], 1);
    w.node("empty", "p", "f0-8", "on-demand").nominated = true;
    let d = w.decide(NOW);
    assert!(d.commands.is_empty(), "{:?}", d.commands);
    assert_eq!(
        skipped_for(&d, "empty-claim", Method::Emptiness),
        [&Why::Nominated]
    );

    let d = three_light_nodes(json!({})).decide(NOW);
    let c = &d.commands[0];
    assert!(c.is_delete());
    let moved: Vec<&str> = c
        .candidates
        .iter()
        .filter_map(|t| t.node.as_deref())
        .collect();
    assert!(!c.destinations.is_empty(), "{c:?}");
    assert!(
        c.destinations.iter().all(|n| !moved.contains(&n.as_str())),
        "{c:?}"
    );
}

#[test]
fn multi_node_takes_the_longest_prefix_the_budget_allows() {
    let mut w = World::new(vec![pool("p", json!({"budgets": [{"nodes": "100%"}]}))], 1);
    for name in ["n1", "n2", "n3", "n4"] {
        w.node(name, "p", "f0-16", "on-demand");
        w.pods(name, 1, "1", json!({}));
    }
    let d = w.decide(NOW);
    let c = &d.commands[0];
    assert_eq!(c.method, Method::MultiNodeConsolidation);
    // All four 16-CPU nodes go; one 4-CPU node takes their four pods.
    assert_eq!(c.candidates.len(), 4);
    assert_eq!(c.replacements.len(), 1);
    let r = &c.replacements[0];
    assert_eq!(r.pods.len(), 4);
    assert!(r.instance_types.iter().all(|t| *t != "f0-16"));
    assert!(c.savings > 3.0 * price(0, 16) - 1e-9);
}

#[test]
fn replace_only_with_a_strictly_cheaper_node() {
    let mut w = World::new(vec![pool("p", json!({}))], 1);
    w.node("big", "p", "f0-16", "on-demand");
    w.pods("big", 1, "1", json!({}));
    let d = w.decide(NOW);
    let c = &d.commands[0];
    assert_eq!(c.method, Method::SingleNodeConsolidation);
    let r = &c.replacements[0];
    let names: Vec<String> = r.instance_types.iter().map(|t| t.to_string()).collect();
    assert_eq!(names, ["f0-2", "f0-4", "f0-8"]);
    assert!((c.savings - (price(0, 16) - price(0, 8))).abs() < 1e-9);
    // The smallest type cannot be replaced by a cheaper one.
    let mut w = World::new(vec![pool("p", json!({}))], 1);
    w.node("small", "p", "f0-2", "on-demand");
    w.pods("small", 1, "1", json!({}));
    let d = w.decide(NOW);
    assert!(d.commands.is_empty());
    assert_eq!(
        skipped_for(&d, "small-claim", Method::SingleNodeConsolidation),
        [&Why::NoCheaperReplacement]
    );
}

#[test]
fn on_demand_is_replaced_by_spot_when_the_pool_allows_both() {
    let mut w = World::new(
        vec![pool_with("p", json!({}), json!(["on-demand", "spot"]))],
        1,
    );
    w.node("od", "p", "f0-8", "on-demand");
    w.pods("od", 1, "1", json!({}));
    let d = w.decide(NOW);
    let r = &d.commands[0].replacements[0];
    let capacity = r
        .requirements
        .get("karpenter.sh/capacity-type")
        .expect("pinned");
    assert!(capacity.has("spot") && !capacity.has("on-demand"));
    assert_eq!(
        r.cheapest.as_ref().map(|c| c.capacity_type.as_str()),
        Some("spot")
    );
}

#[test]
fn spot_to_spot_needs_the_gate_and_fifteen_cheaper_types() {
    let spot_world = |families: usize, gate: bool| {
        let mut w = World::new(vec![pool_with("p", json!({}), json!(["spot"]))], families);
        w.settings.spot_to_spot = gate;
        w.node("s", "p", "f0-16", "spot");
        w.pods("s", 1, "1", json!({}));
        w
    };
    let d = spot_world(8, false).decide(NOW);
    assert_eq!(
        skipped_for(&d, "s-claim", Method::SingleNodeConsolidation),
        [&Why::SpotToSpotDisabled]
    );
    // Sizes 2, 4 and 8 of 4 families: 12 cheaper spot types.
    let d = spot_world(4, true).decide(NOW);
    assert_eq!(
        skipped_for(&d, "s-claim", Method::SingleNodeConsolidation),
        [&Why::TooFewSpotTypes(12)]
    );
    let d = spot_world(8, true).decide(NOW);
    let r = &d.commands[0].replacements[0];
    assert_eq!(r.instance_types.len(), kerf::disruption::SPOT_TO_SPOT_TYPES);
}

#[test]
fn do_not_disrupt_and_pdbs_keep_nodes() {
    let mut w = three_light_nodes(json!({"budgets": [{"nodes": "100%"}]}));
    w.find("n1").node_mut().expect("node").metadata.annotations =
        Some([(DO_NOT_DISRUPT.to_owned(), "true".to_owned())].into());
    // A duration counts from the pod's start (T0): 24h is still running at NOW, 1h has elapsed.
    w.pods(
        "n2",
        1,
        "1",
        json!({"annotations": {DO_NOT_DISRUPT: "24h"}, "name": "guarded"}),
    );
    w.pods(
        "n3",
        1,
        "1",
        json!({"annotations": {DO_NOT_DISRUPT: "1h"}, "name": "released"}),
    );
    let d = w.decide(NOW);
    assert!(matches!(
        skipped_for(&d, "n1-claim", Method::MultiNodeConsolidation)[..],
        [Why::Blocked(_)]
    ));
    assert!(matches!(
        skipped_for(&d, "n2-claim", Method::MultiNodeConsolidation)[..],
        [Why::Blocked(_)]
    ));
    assert_eq!(disrupted(&d), [["n3-claim"]]);
    // A PDB that allows no disruption blocks every node running a pod it covers.
    w.pdbs.push(
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 7, "desiredHealthy": 7, "expectedPods": 7},
        }))
        .expect("pdb"),
    );
    let d = w.decide(NOW);
    assert!(d.commands.is_empty());
    assert!(matches!(
        skipped_for(&d, "n3-claim", Method::MultiNodeConsolidation)[..],
        [Why::Blocked(_)]
    ));
}

#[test]
fn when_empty_pools_are_not_consolidated() {
    let w = three_light_nodes(json!({"consolidationPolicy": "WhenEmpty"}));
    let d = w.decide(NOW);
    assert!(d.commands.is_empty());
    assert_eq!(
        skipped_for(&d, "n1-claim", Method::MultiNodeConsolidation),
        [&Why::WhenEmptyOnly]
    );
}

#[test]
fn a_scheduled_zero_budget_blocks_until_its_window_closes() {
    let budgets = json!({"budgets": [{"nodes": "0", "schedule": "0 9 * * *", "duration": "8h"}]});
    let w = three_light_nodes(budgets);
    let d = w.decide(NOW);
    assert!(d.commands.is_empty());
    assert!(matches!(
        skipped_for(&d, "n1-claim", Method::SingleNodeConsolidation)[..],
        [Why::Budget { .. }]
    ));
    assert_eq!(w.decide("2026-11-23T17:00:00Z").commands.len(), 1);
}

#[test]
fn drift_replaces_the_oldest_drifted_node_first_and_launches_its_replacement() {
    let p = pool("p", json!({"budgets": [{"nodes": "100%"}]}));
    let hash = nodepool_hash(&p);
    let mut p = p;
    p.metadata.annotations = Some(
        [
            (NODEPOOL_HASH.to_owned(), hash),
            (NODEPOOL_HASH_VERSION.to_owned(), "v3".to_owned()),
        ]
        .into(),
    );
    let mut w = World::new(vec![p], 1);
    for (name, created) in [("young", "2026-11-23T01:00:00Z"), ("old", T0)] {
        let node = w.node(name, "p", "f0-4", "on-demand");
        node.claim_mut().metadata.creation_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(disruption_support::at(created)),
        );
        node.claim_mut().metadata.annotations = Some(
            [
                (NODEPOOL_HASH.to_owned(), "stale".to_owned()),
                (NODEPOOL_HASH_VERSION.to_owned(), "v3".to_owned()),
            ]
            .into(),
        );
        w.pods(name, 1, "3", json!({}));
    }
    let d = w.decide(NOW);
    assert_eq!(disrupted(&d), [["old-claim"]]);
    let c = &d.commands[0];
    assert_eq!((c.method, c.reason), (Method::Drift, Reason::Drifted));
    // Its 3-CPU pod fits on no other node: a replacement is launched first.
    assert_eq!(c.replacements.len(), 1);
    assert_eq!(c.replacements[0].pods, ["shop/old-p0"]);
}

#[test]
fn cloud_drift_counts_and_a_zero_drift_budget_blocks_it() {
    let mut w = three_light_nodes(
        json!({"budgets": [{"nodes": "0", "reasons": ["Drifted"]}, {"nodes": "1"}]}),
    );
    w.find("n2").cloud_drift = Some(CloudDrift::Ami);
    let d = w.decide(NOW);
    assert!(matches!(
        skipped_for(&d, "n2-claim", Method::Drift)[..],
        [Why::Budget { .. }]
    ));
    // Consolidation still runs.
    assert_eq!(d.commands[0].method, Method::SingleNodeConsolidation);
    w.pools[0] = pool("p", json!({"budgets": [{"nodes": "1"}]}));
    assert_eq!(disrupted(&w.decide(NOW)), [["n2-claim"]]);
}

#[test]
fn expiration_is_forceful_and_counts_against_budgets() {
    let mut w = three_light_nodes(json!({"budgets": [{"nodes": "1"}]}));
    let n1 = w.find("n1");
    n1.claim_mut().spec.expire_after = Some("6h".to_owned());
    n1.node_mut().expect("node").metadata.annotations =
        Some([(DO_NOT_DISRUPT.to_owned(), "true".to_owned())].into());
    let d = w.decide(NOW);
    assert_eq!(disrupted(&d), [["n1-claim"]]);
    let c = &d.commands[0];
    assert_eq!((c.method, c.reason), (Method::Expiration, Reason::Expired));
    assert!(c.budgets.is_empty());
    // The expiring node used the pool's only budget unit: consolidation waits.
    assert!(matches!(
        skipped_for(&d, "n2-claim", Method::SingleNodeConsolidation)[..],
        [Why::Budget { .. }]
    ));
}

#[test]
fn emptiness_ends_the_pass_before_drift() {
    let mut w = three_light_nodes(json!({"budgets": [{"nodes": "100%"}]}));
    w.node("empty", "p", "f0-8", "on-demand");
    w.find("n2").cloud_drift = Some(CloudDrift::Subnet);
    let d = w.decide(NOW);
    assert_eq!(disrupted(&d), [["empty-claim"]]);
    assert!(d.skipped.iter().all(|s| s.method == Method::Emptiness));
    // The drift is still reported (for the claim's Drifted condition) though no drift command ran.
    assert_eq!(
        d.drifted.iter().collect::<Vec<_>>(),
        [(&"n2-claim".to_owned(), &"SubnetDrift")]
    );
}

#[test]
fn pending_pods_keep_the_room_they_need() {
    // Without the pending pods n1's pods would fit elsewhere.
    let mut w = three_light_nodes(json!({}));
    w.pending
        .extend((0..5).map(|i| pod(&format!("waiting-{i}"), None, "2", json!({}))));
    let d = w.decide(NOW);
    // As in Karpenter, the pending pods are part of the simulation: n1 is not simply deleted, it is replaced
    // by a node that also takes a pod still waiting for room.
    let c = &d.commands[0];
    assert_eq!(c.replacements.len(), 1, "{:?}", disrupted(&d));
    assert!(c.replacements[0]
        .pods
        .iter()
        .any(|p| p.starts_with("shop/waiting-")));
}

#[test]
fn nodes_not_ready_for_disruption_are_explained() {
    let mut w = three_light_nodes(json!({"budgets": [{"nodes": "100%"}]}));
    w.find("n1").queued = true;
    let n2 = w.find("n2");
    n2.claim_mut().status.as_mut().expect("status").conditions = Some(Vec::new());
    let d = w.decide(NOW);
    assert_eq!(
        skipped_for(&d, "n1-claim", Method::MultiNodeConsolidation),
        [&Why::Queued]
    );
    assert_eq!(
        skipped_for(&d, "n2-claim", Method::MultiNodeConsolidation),
        [&Why::NotInitialized]
    );
}

/// controller-behaviour.md §3.6, worked example, through a whole pass: 25 initialized nodes, one NotReady and
/// one being deleted (2 disrupting), budgets `20 %` for Empty and Drifted, `5`, and `0` for Underutilized
/// during the 10 minutes after midnight.
fn worked_example(empty: usize) -> World {
    let budgets = json!({"budgets": [
        {"nodes": "20%", "reasons": ["Empty", "Drifted"]},
        {"nodes": "5"},
        {"nodes": "0", "schedule": "@daily", "duration": "10m", "reasons": ["Underutilized"]}]});
    let mut w = World::new(vec![pool("p", budgets)], 1);
    for i in 0..25 {
        let name = format!("n{i:02}");
        w.node(&name, "p", "f0-8", "on-demand");
        if i >= empty {
            w.pods(&name, 1, "1", json!({}));
        }
    }
    let not_ready = w.find("n23").node_mut().expect("node");
    not_ready
        .status
        .as_mut()
        .expect("status")
        .conditions
        .as_mut()
        .expect("conditions")[0]
        .status = "False".to_owned();
    w.find("n24").claim_mut().metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(disruption_support::at(T0)),
    );
    w
}

#[test]
fn worked_example_at_five_past_midnight() {
    // Empty: min(ceil(20 % of 25), 5) − 2 = 3 of the 5 empty nodes.
    let d = worked_example(5).decide("2026-11-24T00:05:00Z");
    assert_eq!(disrupted(&d), [["n00-claim", "n01-claim", "n02-claim"]]);
    // Underutilized: the midnight budget allows 0, so consolidation does nothing until 00:10.
    let w = worked_example(0);
    let d = w.decide("2026-11-24T00:05:00Z");
    assert!(d.commands.is_empty());
    assert!(matches!(
        skipped_for(&d, "n00-claim", Method::SingleNodeConsolidation)[..],
        [Why::Budget { .. }]
    ));
    // At 00:10 the window has closed: min(5) − 2 = 3 nodes for multi-node consolidation.
    let d = w.decide("2026-11-24T00:10:00Z");
    assert_eq!(d.commands.len(), 1);
    assert_eq!(d.commands[0].method, Method::MultiNodeConsolidation);
    assert_eq!(d.commands[0].candidates.len(), 3);
}

#[test]
fn a_node_outside_its_pools_requirements_has_drifted() {
    // The pool asks for on-demand; a spot node left over from an earlier spec no longer matches it.
    let mut w = three_light_nodes(json!({"budgets": [{"nodes": "100%"}]}));
    w.node("s", "p", "f0-8", "spot");
    w.pods("s", 1, "1", json!({}));
    let d = w.decide(NOW);
    assert_eq!(disrupted(&d), [["s-claim"]]);
    assert_eq!(d.commands[0].method, Method::Drift);
}

#[test]
fn a_node_without_its_class_label_has_not_drifted() {
    // Nodes from before kerf labelled them with their EC2NodeClass (an older kerf, Karpenter before v1.1) are
    // hydrated, not replaced: requirement drift reads the pool's requirements, not kerf's own labels.
    let w = three_light_nodes(json!({"budgets": [{"nodes": "100%"}]}));
    let d = w.decide(NOW);
    assert!(
        d.commands.iter().all(|c| c.method != Method::Drift),
        "{:?}",
        d.commands
    );
}

/// Karpenter's emptiness with CapacityBuffers (`emptiness.go`, `HasBufferPods`): a node provisioning planned
/// buffer virtual pods onto is not deleted as empty (their lowest priority makes their eviction cost nothing,
/// so they would not keep it busy), and the skip says so as Karpenter's `Unconsolidatable` Event does.
#[test]
fn a_node_holding_buffer_pods_is_not_empty() {
    let mut w = World::new(vec![pool("p", json!({}))], 1);
    w.node("b", "p", "f0-8", "on-demand");
    let annotations = json!({"annotations": {
        "karpenter.sh/capacity-buffer-fake-pod": "true",
        "karpenter.sh/capacity-buffer-name": "burst",
        "karpenter.sh/capacity-buffer-namespace": "default"}});
    let mut virtual_pod = pod("capacity-buffer-burst-1", Some("b"), "1", annotations);
    virtual_pod.spec.as_mut().expect("spec").priority = Some(i32::MIN);
    w.find("b").pods.push(virtual_pod);
    let d = w.decide(NOW);
    assert!(
        !d.commands.iter().any(|c| c.method == Method::Emptiness),
        "{:?}",
        d.commands
    );
    let why = skipped_for(&d, "b-claim", Method::Emptiness);
    assert!(matches!(why[..], [Why::HasBufferPods(_)]), "{why:?}");
    assert_eq!(why[0].to_string(), "Node \"b\" has buffer pods");
}

/// One `web` pod per node, kept apart by a required hostname anti-affinity (the pod's own label), plus a node
/// running something else: `web` pods may go only where no `web` pod stays.
fn web_pods_apart(nodes: &[&str]) -> World {
    let mut w = World::new(vec![pool("p", json!({"budgets": [{"nodes": "100%"}]}))], 1);
    let apart = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}]}});
    for name in nodes {
        w.node(name, "p", "f0-2", "on-demand");
        let mut web = pod(&format!("{name}-web"), Some(name), "1", json!({}));
        web.spec.as_mut().expect("spec").affinity =
            Some(serde_json::from_value(apart.clone()).expect("affinity"));
        w.find(name).pods.push(web);
    }
    w
}

/// Karpenter's consolidation suite: "won't delete node if it would violate pod anti-affinity" (no pod may join
/// another's node, and no new node is cheaper), and the same pods moving once a
/// node without a `web` pod has room: the anti-affinity check ahead of the solve never refuses a move the
/// solve would take.
#[test]
fn hostname_anti_affinity_keeps_one_pod_per_node_and_lets_it_move_where_allowed() {
    let w = web_pods_apart(&["n1", "n2", "n3"]);
    let d = w.decide(NOW);
    assert!(d.commands.is_empty(), "{:?}", disrupted(&d));
    for claim in ["n1-claim", "n2-claim", "n3-claim"] {
        assert_eq!(
            skipped_for(&d, claim, Method::SingleNodeConsolidation),
            [&Why::NoCheaperReplacement],
            "{claim}"
        );
    }
    let mut w = web_pods_apart(&["n1", "n2"]);
    w.node("other", "p", "f0-2", "on-demand");
    w.pods("other", 1, "500m", json!({"labels": {"app": "db"}}));
    let d = w.decide(NOW);
    assert_eq!(d.commands.len(), 1, "a web pod joins the db pod's node");
    assert!(d.commands[0].is_delete());
    let moved = &d.commands[0].candidates[0].claim;
    assert!(moved == "n1-claim" || moved == "n2-claim", "{moved}");
}

/// Karpenter's consolidation suite: "won't delete node if it would require pods to schedule on an uninitialized
/// node". The only room for n1's pods is on a node still launching: no command, however cheap the move looks,
/// until that node is initialized.
#[test]
fn a_move_onto_a_node_still_launching_waits_for_it() {
    let mut w = World::new(vec![pool("p", json!({"budgets": [{"nodes": "100%"}]}))], 1);
    w.node("n1", "p", "f0-2", "on-demand");
    w.pods("n1", 1, "1", json!({}));
    w.node("new", "p", "f0-2", "on-demand");
    let launching = |w: &mut World| {
        let new = w.find("new");
        new.claim_mut().status.as_mut().expect("status").conditions = Some(Vec::new());
        new.claim_mut()
            .metadata
            .labels
            .as_mut()
            .expect("labels")
            .remove("karpenter.sh/initialized");
        if let Some(labels) = new.node_mut().and_then(|n| n.metadata.labels.as_mut()) {
            labels.remove("karpenter.sh/initialized");
        }
    };
    launching(&mut w);
    let d = w.decide(NOW);
    assert!(
        d.commands
            .iter()
            .all(|c| c.candidates[0].claim != "n1-claim"),
        "{:?}",
        disrupted(&d)
    );
    assert!(
        !skipped_for(&d, "n1-claim", Method::SingleNodeConsolidation).is_empty(),
        "n1 was considered and left"
    );
    // Initialized, the same node takes the pod and n1 goes.
    let mut w = World::new(vec![pool("p", json!({"budgets": [{"nodes": "100%"}]}))], 1);
    w.node("n1", "p", "f0-2", "on-demand");
    w.pods("n1", 1, "1", json!({}));
    w.node("new", "p", "f0-2", "on-demand");
    w.pods("new", 1, "100m", json!({}));
    assert_eq!(disrupted(&w.decide(NOW)), [["n1-claim"]]);
}
