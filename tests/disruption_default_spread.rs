//! The cluster's default spread (`--scheduler-config`) in the disruption simulation: the pods a consolidation
//! would move get the defaults as provisioning's pending pods do, so a move that kube-scheduler's default spread
//! would refuse is not taken.

mod disruption_support;

use disruption_support::{at, pool, World, NOW};
use kerf::disruption::decide;
use kerf::scheduling::{DefaultSpread, SchedulerConfig};
use serde_json::json;

/// Three 8-CPU nodes, each running one 1-CPU pod of the ReplicaSet `shop/web`: any pod fits on another node.
fn one_web_pod_per_node() -> World {
    let mut w = World::new(vec![pool("p", json!({}))], 1);
    let owner = json!({"ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "web", "controller": true}]});
    for name in ["n1", "n2", "n3"] {
        w.node(name, "p", "f0-8", "on-demand");
        w.pods(name, 1, "1", owner.clone());
    }
    w
}

/// A hostname default (maxSkew 1) with the ReplicaSet that deduces the pods' selector.
fn hostname_default() -> DefaultSpread {
    let config = SchedulerConfig::parse(
        "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}]}",
    )
    .expect("config");
    let mut spread = DefaultSpread::new(&config);
    spread.add_replica_set(
        &serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "shop"},
                                       "spec": {"selector": {"matchLabels": {"app": "web"}}}}))
        .expect("a ReplicaSet"),
    );
    spread
}

#[test]
fn a_move_the_default_spread_forbids_is_not_a_deletion() {
    let w = one_web_pod_per_node();
    // Without defaults the pod of the node taken moves next to another: a plain deletion.
    let plain = w.decide(NOW);
    assert_eq!(plain.commands.len(), 1, "{:?}", plain.commands);
    assert!(plain.commands[0].is_delete(), "{:?}", plain.commands[0]);

    // With one pod per host at most one apart, a second pod on a node (a new host having none) is a skew of 2:
    // the pod can only go to a node of its own: the node is replaced by a smaller one, not deleted.
    let spread = hostname_default();
    let mut input = w.input();
    input.default_spread = &spread;
    let defaulted = decide(&input, at(NOW));
    assert!(!defaulted.commands.is_empty());
    assert!(
        defaulted.commands.iter().all(|c| !c.is_delete()),
        "{:?}",
        defaulted.commands
    );
}
