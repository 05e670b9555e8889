//! Reserved capacity in the solve, as Karpenter v1.14 decides it: the cases of the "Reserved Instance Types"
//! context of `pkg/controllers/provisioning/scheduling/suite_test.go`, told in kerf's terms (upstream names in
//! each test's comment). Karpenter's rounds (provision, launch, provision again) are separate solves here, the
//! later ones over the catalog the launches leave (a used-up reservation has no capacity left).
//!
//! Not translated: the two cases that give NodePools different instance types for the same EC2NodeClass, which
//! kerf's catalog (one per EC2NodeClass) cannot express.

use kerf::api::nodepool::NodePool;
use kerf::catalog::Catalog;
use kerf::scheduling::{solve, Plan, PodInfo};
use serde_json::{json, Value};

/// Karpenter's test types: large (6 CPU), medium (3) and small (2), spot and on-demand in three zones; medium
/// and small also have a reservation in test-zone-1 with `capacity` instances each, nearly free.
fn catalog(small_capacity: u32, medium_capacity: u32) -> Catalog {
    let it = |name: &str, cpu: u32, capacity: Option<u32>| {
        let price = f64::from(cpu) * 0.1;
        let mut offerings = Vec::new();
        for zone in ["test-zone-1", "test-zone-2", "test-zone-3"] {
            offerings.push(json!({"zone": zone, "capacityType": "spot", "price": price * 0.7}));
            offerings.push(json!({"zone": zone, "capacityType": "on-demand", "price": price}));
        }
        if let Some(capacity) = capacity {
            offerings.push(json!({"zone": "test-zone-1", "capacityType": "reserved",
                "price": price / 100_000.0, "reservationID": format!("r-{name}"),
                "reservationCapacity": capacity, "available": capacity > 0}));
        }
        json!({"name": name, "cpu": cpu.to_string(), "memory": format!("{cpu}Gi"), "pods": 110, "arch": "amd64",
               "os": ["linux"], "labels": {}, "overhead": {}, "offerings": offerings})
    };
    let file = json!({"instanceTypes": [
        it("large-instance-type", 6, None),
        it("medium-instance-type", 3, Some(medium_capacity)),
        it("small-instance-type", 2, Some(small_capacity)),
    ]});
    Catalog::from_instance_types_json(&file.to_string()).expect("catalog")
}

fn pool(name: &str) -> NodePool {
    serde_json::from_value(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "Exists"}]}}}}))
    .expect("nodepool")
}

fn pod(name: &str, cpu: &str, spec: Value) -> PodInfo {
    let mut pod = json!({"metadata": {"name": name, "namespace": "default", "uid": name, "labels": {"app": "test"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}});
    if let (Some(target), Value::Object(extra)) = (pod["spec"].as_object_mut(), spec) {
        target.extend(extra);
    }
    PodInfo::from_pod(&serde_json::from_value(pod).expect("pod")).expect("pod info")
}

fn required(terms: Value) -> Value {
    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": terms}]}}})
}

/// The one claim of `plan`: its cheapest offering as `type/capacity-type`, and its reservation requirement.
fn only_claim(plan: &Plan) -> (String, Option<String>) {
    assert_eq!(plan.claims.len(), 1, "{plan:#?}");
    let claim = &plan.claims[0];
    let cheapest = claim.cheapest.as_ref().expect("priced");
    (
        format!(
            "{}/{}",
            cheapest.instance_type,
            cheapest.capacity_type.as_str()
        ),
        claim
            .requirements
            .get("karpenter.k8s.aws/capacity-reservation-id")
            .map(ToString::to_string),
    )
}

#[test]
fn compatible_reserved_capacity_is_waited_for_rather_than_falling_back() {
    // Upstream: "shouldn't fallback to on-demand or spot when compatible reserved offerings are available".
    // Three pods of 1800m: one fits a small or a medium, two fit neither. The first claim may be small or medium, so
    // it holds both reservations; the other pods wait for the next solve rather than go on-demand or spot.
    let pods: Vec<PodInfo> = (0..3)
        .map(|i| pod(&format!("p{i}"), "1800m", json!({})))
        .collect();
    let plan = solve(&pods, &[pool("default")], &catalog(1, 1));
    let (cheapest, reservation) = only_claim(&plan);
    assert_eq!(cheapest, "small-instance-type/reserved");
    assert_eq!(
        reservation.as_deref(),
        Some("karpenter.k8s.aws/capacity-reservation-id In [r-medium-instance-type r-small-instance-type]")
    );
    assert_eq!(plan.claims[0].pods.len(), 1);
    assert_eq!(plan.unschedulable.len(), 2, "{:?}", plan.unschedulable);
    // A deferral, not a failure: no Event, not counted as unschedulable.
    assert!(plan.unschedulable.iter().all(|u| u.deferred));
    assert!(
        plan.unschedulable[0]
            .reason
            .contains("compatible reserved offerings are available, but could not be reserved"),
        "{:?}",
        plan.unschedulable
    );
    // Second round: the small reservation is used up; the medium one takes the next pod.
    let plan = solve(&pods[1..], &[pool("default")], &catalog(0, 1));
    let (cheapest, reservation) = only_claim(&plan);
    assert_eq!(cheapest, "medium-instance-type/reserved");
    assert_eq!(
        reservation.as_deref(),
        Some("karpenter.k8s.aws/capacity-reservation-id In [r-medium-instance-type]")
    );
    assert_eq!(plan.unschedulable.len(), 1);
    // Third round: nothing reserved is left, so the last pod goes on-demand or spot.
    let plan = solve(&pods[2..], &[pool("default")], &catalog(0, 0));
    let (cheapest, reservation) = only_claim(&plan);
    assert_eq!(cheapest, "small-instance-type/spot");
    assert_eq!(reservation, None);
}

#[test]
fn a_reservation_shared_by_two_nodepools_is_counted_once() {
    // Upstream: "should correctly track reservations shared across nodepools".
    let pods: Vec<PodInfo> = (1..=2)
        .map(|i| {
            pod(
                &format!("p{i}"),
                "100m",
                json!({"affinity": {
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "test"}}}]},
                    "nodeAffinity": required(json!([
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["small-instance-type"]},
                        {"key": "karpenter.sh/nodepool", "operator": "In", "values": [format!("np-{i}")]}]))["nodeAffinity"]}}),
            )
        })
        .collect();
    let pools = [pool("np-1"), pool("np-2")];
    let plan = solve(&pods, &pools, &catalog(1, 1));
    let (cheapest, reservation) = only_claim(&plan);
    assert_eq!(cheapest, "small-instance-type/reserved");
    assert_eq!(
        reservation.as_deref(),
        Some("karpenter.k8s.aws/capacity-reservation-id In [r-small-instance-type]")
    );
    assert_eq!(plan.unschedulable.len(), 1, "{plan:#?}");
    // Next round, with the reservation used up: the waiting pod goes on-demand or spot.
    let plan = solve(&pods[1..], &pools, &catalog(0, 1));
    let (cheapest, reservation) = only_claim(&plan);
    assert_eq!(cheapest, "small-instance-type/spot");
    assert_eq!(reservation, None);
}

#[test]
fn pods_share_a_reserved_node() {
    // Upstream: "should handle multiple pods on reserved nodes".
    let pods: Vec<PodInfo> = (0..2)
        .map(|i| {
            pod(
                &format!("p{i}"),
                "100m",
                json!({"affinity": {
                    "nodeAffinity": required(json!([
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["small-instance-type"]},
                        {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["np-1"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved"]},
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-1"]}]))["nodeAffinity"],
                    "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "test"}}}]}}}),
            )
        })
        .collect();
    let plan = solve(&pods, &[pool("np-1")], &catalog(1, 1));
    let (cheapest, reservation) = only_claim(&plan);
    assert_eq!(plan.claims[0].pods.len(), 2);
    assert_eq!(cheapest, "small-instance-type/reserved");
    assert_eq!(
        reservation.as_deref(),
        Some("karpenter.k8s.aws/capacity-reservation-id In [r-small-instance-type]")
    );
}

#[test]
fn without_reserved_capacity_nothing_changes() {
    // The same three pods with no reservation at all: plain packing, nothing held back.
    let pods: Vec<PodInfo> = (0..3)
        .map(|i| pod(&format!("p{i}"), "1800m", json!({})))
        .collect();
    let plan = solve(
        &pods,
        &[pool("default")],
        &catalog(1, 1).without_reserved_capacity(),
    );
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert!(plan.claims.iter().all(|c| c
        .requirements
        .get("karpenter.k8s.aws/capacity-reservation-id")
        .is_none()));
}

/// One type with three reservations in test-zone-1: an on-demand reservation (`default`), an interruptible one,
/// and a capacity block, each with room for `capacity` instances, beside spot and on-demand offerings.
fn kinds_catalog() -> Catalog {
    let mut offerings = vec![
        json!({"zone": "test-zone-1", "capacityType": "on-demand", "price": 0.2}),
        json!({"zone": "test-zone-1", "capacityType": "spot", "price": 0.1}),
    ];
    for (id, kind, interruptible) in [
        ("cr-default", "default", false),
        ("cr-interruptible", "default", true),
        ("cr-block", "capacity-block", false),
    ] {
        offerings.push(
            json!({"zone": "test-zone-1", "capacityType": "reserved", "price": 0.000_000_02,
            "reservationID": id, "reservationCapacity": 5, "reservationType": kind,
            "reservationInterruptible": interruptible}),
        );
    }
    let file = json!({"instanceTypes": [{"name": "m5.large", "cpu": "2", "memory": "8Gi", "pods": 29,
        "arch": "amd64", "os": ["linux"], "labels": {}, "overhead": {}, "offerings": offerings}]});
    Catalog::from_instance_types_json(&file.to_string()).expect("catalog")
}

#[test]
fn reservation_type_and_interruptibility_select_offerings() {
    // The AWS provider puts the reservation's id, type and interruptibility on each reserved offering and
    // `DoesNotExist` on spot and on-demand ones (upstream: `ReservedCapacityResolver.ResolveOfferings` and the
    // on-demand/spot offerings of `offering/provider.go`), so a pod can ask for a kind of reservation, or for
    // none at all.
    let cases: [(&str, Value, &str, Option<&str>); 4] = [
        (
            "a capacity block only",
            json!([{"key": "karpenter.k8s.aws/capacity-reservation-type", "operator": "In",
                    "values": ["capacity-block"]}]),
            "m5.large/reserved",
            Some("karpenter.k8s.aws/capacity-reservation-id In [cr-block]"),
        ),
        (
            "an interruptible reservation only",
            json!([{"key": "karpenter.k8s.aws/capacity-reservation-interruptible", "operator": "In",
                    "values": ["true"]}]),
            "m5.large/reserved",
            Some("karpenter.k8s.aws/capacity-reservation-id In [cr-interruptible]"),
        ),
        (
            "an uninterruptible on-demand reservation",
            json!([{"key": "karpenter.k8s.aws/capacity-reservation-type", "operator": "In", "values": ["default"]},
                   {"key": "karpenter.k8s.aws/capacity-reservation-interruptible", "operator": "In",
                    "values": ["false"]}]),
            "m5.large/reserved",
            Some("karpenter.k8s.aws/capacity-reservation-id In [cr-default]"),
        ),
        (
            "anything but a capacity block (absent counts)",
            json!([{"key": "karpenter.k8s.aws/capacity-reservation-type", "operator": "NotIn",
                    "values": ["capacity-block"]}]),
            "m5.large/reserved",
            Some("karpenter.k8s.aws/capacity-reservation-id In [cr-default cr-interruptible]"),
        ),
    ];
    for (name, terms, cheapest, reservation) in cases {
        let pods = [pod("p", "1", json!({"affinity": required(terms)}))];
        let plan = solve(&pods, &[pool("default")], &kinds_catalog());
        assert!(plan.unschedulable.is_empty(), "{name}: {plan:#?}");
        let (got, held) = only_claim(&plan);
        assert_eq!(got, cheapest, "{name}");
        assert_eq!(held.as_deref(), reservation, "{name}");
    }
    // `DoesNotExist` meets the type's own `In [default capacity-block]` and Karpenter's `Requirements.Intersects`
    // refuses that pair, so the type does not fit at all (its spot and on-demand offerings included).
    let terms =
        json!([{"key": "karpenter.k8s.aws/capacity-reservation-type", "operator": "DoesNotExist"}]);
    let plan = solve(
        &[pod("p", "1", json!({"affinity": required(terms)}))],
        &[pool("default")],
        &kinds_catalog(),
    );
    assert!(plan.claims.is_empty(), "{plan:#?}");
    assert!(
        plan.unschedulable[0]
            .reason
            .contains("capacity-reservation-type DoesNotExist"),
        "{plan:#?}"
    );
}

#[test]
fn with_reserved_capacity_off_a_pod_asking_for_a_reservation_fits_nowhere() {
    // With the `ReservedCapacity` gate off the reserved offerings are gone, and so are the type's reservation
    // values: a pod that needs a capacity block stays pending with a reason instead of getting a spot node.
    let pods = [pod(
        "p",
        "1",
        json!({"affinity": required(json!([{"key": "karpenter.k8s.aws/capacity-reservation-type",
                                            "operator": "In", "values": ["capacity-block"]}]))}),
    )];
    let plan = solve(
        &pods,
        &[pool("default")],
        &kinds_catalog().without_reserved_capacity(),
    );
    assert!(plan.claims.is_empty(), "{plan:#?}");
    assert_eq!(plan.unschedulable.len(), 1);
}
