//! What a step hands both drivers: the nodes to nominate (real pods only) and where CapacityBuffer virtual pods
//! went, over the fixtures of the decision's own tests.

use super::super::tests::{
    amd64, claim_of, default_catalogs, node, pending_pod, pool, running_pod,
};
use super::*;
use crate::api::well_known::{BUFFER_NAME, BUFFER_NAMESPACE, FAKE_POD};
use serde_json::json;

/// Virtual pod `i` of buffer `default/headroom`.
fn virtual_pod(i: usize) -> Pod {
    let mut pod = pending_pod(100 + i);
    pod.metadata.name = Some(format!("headroom-{i}"));
    pod.metadata.annotations = Some(BTreeMap::from([
        (FAKE_POD.to_owned(), "true".to_owned()),
        (BUFFER_NAMESPACE.to_owned(), "default".to_owned()),
        (BUFFER_NAME.to_owned(), "headroom".to_owned()),
    ]));
    pod
}

fn run(snapshot: &Snapshot) -> Step {
    let to_solve: Vec<&Pod> = snapshot
        .pods
        .iter()
        .map(AsRef::as_ref)
        .filter(|p| super::super::pending::is_provisionable(p) || buffers::is_virtual(p))
        .collect();
    step(
        snapshot,
        &to_solve,
        &default_catalogs(),
        &mut Preparations::default(),
    )
    .expect("a step")
}

/// A registered node `kept` with three of four pods' room taken, and `pods` beside them.
fn one_node(pods: Vec<Pod>) -> Snapshot {
    let mut all: Vec<Arc<Pod>> = (0..3).map(|i| Arc::new(running_pod(i, "kept"))).collect();
    all.extend(pods.into_iter().map(Arc::new));
    Snapshot {
        nodes: vec![Arc::new(node("kept"))],
        node_claims: vec![Arc::new(claim_of("kept", false))],
        node_pools: vec![pool(json!(null), amd64())],
        pods: all,
        ..Snapshot::default()
    }
}

#[test]
fn a_node_real_pods_were_planned_onto_is_nominated_with_those_pods() {
    let step = run(&one_node(vec![pending_pod(10)]));
    assert_eq!(
        step.nominated,
        [("kept".to_owned(), vec!["default/inflate-10".to_owned()])]
    );
    assert_eq!(step.buffers, BufferPlacement::default());
}

/// Karpenter's scheduler does not nominate for virtual pods: a node only they were planned onto stays
/// disruptable, and the buffer counts the pod as placed on existing capacity, on that Node.
#[test]
fn a_node_only_virtual_pods_were_planned_onto_is_not_nominated() {
    let step = run(&one_node(vec![virtual_pod(0)]));
    assert!(step.nominated.is_empty(), "{:?}", step.nominated);
    assert_eq!(
        step.buffers.on_nodes,
        BTreeMap::from([("kept".to_owned(), vec!["default/headroom-0".to_owned()])])
    );
    assert_eq!(
        step.buffers.by_buffer["default/headroom"],
        Placed {
            existing: 1,
            new_capacity: 0,
            failed: 0
        }
    );
    assert!(step.buffers.is_placed("default/headroom-0"));
    assert_eq!(step.buffers.waiting().count(), 0);
}

/// The room on `kept` goes to the real pod (real pods come first in the queue); the virtual pods that do not fit
/// go to a new claim, counted as new capacity and, for disruption, as waiting.
#[test]
fn virtual_pods_on_new_capacity_wait_and_the_real_pod_is_nominated() {
    let step = run(&one_node(vec![
        pending_pod(10),
        virtual_pod(0),
        virtual_pod(1),
    ]));
    assert_eq!(
        step.nominated,
        [("kept".to_owned(), vec!["default/inflate-10".to_owned()])]
    );
    assert!(step.buffers.on_nodes.is_empty(), "{:?}", step.buffers);
    assert_eq!(
        step.buffers.on_claims,
        ["default/headroom-0", "default/headroom-1"]
    );
    assert_eq!(step.buffers.by_buffer["default/headroom"].new_capacity, 2);
    assert_eq!(
        step.buffers.waiting().collect::<Vec<_>>(),
        ["default/headroom-0", "default/headroom-1"]
    );
    let new_pods: Vec<&String> = step.decisions.claims.iter().flat_map(|c| &c.pods).collect();
    assert_eq!(new_pods, ["default/headroom-0", "default/headroom-1"]);
}

/// A virtual pod nothing can hold (no pool allows it) is failed, and pending for disruption.
#[test]
fn a_virtual_pod_that_fits_nowhere_is_failed() {
    let mut huge = virtual_pod(0);
    huge.spec.as_mut().expect("a spec").containers[0].resources =
        serde_json::from_value(json!({"requests": {"cpu": "4000"}})).expect("resources");
    let step = run(&one_node(vec![huge]));
    assert_eq!(step.buffers.nowhere, ["default/headroom-0"]);
    assert_eq!(step.buffers.by_buffer["default/headroom"].failed, 1);
    assert!(!step.buffers.is_placed("default/headroom-0"));
}
