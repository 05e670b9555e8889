//! What a launched node is labelled and annotated with, in one place for the controller (which writes it to
//! the NodeClaim and, at registration, to the Node) and `kerf simulate` (which builds its Nodes from it), so
//! that a pod selecting `karpenter.k8s.aws/instance-generation` lands the same way in both, and drift on any
//! instance-type label is seen the same way in both.

use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::catalog::{
    CapacityType, InstanceType, CAPACITY_RESERVATION_ID, CAPACITY_RESERVATION_INTERRUPTIBLE,
    CAPACITY_RESERVATION_TYPE, PLACEMENT_GROUP_ID, PLACEMENT_GROUP_PARTITION,
};
use crate::cloud::InstancePlacement;
use std::collections::BTreeMap;

/// The reservation labels: a type with one reservation has a single-valued `capacity-reservation-id`, yet only
/// a node launched into it may carry the label (an on-demand node of that type must not).
const RESERVATION_LABELS: [&str; 3] = [
    CAPACITY_RESERVATION_ID,
    CAPACITY_RESERVATION_TYPE,
    CAPACITY_RESERVATION_INTERRUPTIBLE,
];

/// The labels a claim gets once its instance is known: every single-valued label of its instance type
/// (architecture, family, generation, size, CPU, memory, region, …) except the reservation ones, then the
/// instance's own type, zone and capacity type. A `reserved` one also gets the reservation its type offers in
/// the zone (the one with the most room, which a launch targets); the controller overwrites it with the
/// reservation EC2 reports for the instance.
pub fn launched_labels(
    instance_type: Option<&InstanceType>,
    name: &str,
    zone: &str,
    capacity_type: CapacityType,
) -> BTreeMap<String, String> {
    let mut out = instance_type
        .map(|t| t.requirements.labels())
        .unwrap_or_default();
    out.retain(|key, _| !RESERVATION_LABELS.contains(&key.as_str()));
    out.insert(labels::INSTANCE_TYPE.into(), name.to_owned());
    out.insert(labels::ZONE.into(), zone.to_owned());
    out.insert(
        labels::CAPACITY_TYPE.into(),
        capacity_type.as_str().to_owned(),
    );
    if capacity_type == CapacityType::Reserved {
        let reservation = instance_type
            .into_iter()
            .flat_map(|t| &t.offerings)
            .filter(|o| o.zone == zone)
            .filter_map(|o| Some((o.available, o.reservation.as_ref()?)))
            .max_by(|(a_ok, a), (b_ok, b)| {
                (a_ok, a.capacity)
                    .cmp(&(b_ok, b.capacity))
                    .then_with(|| b.id.cmp(&a.id))
            })
            .map(|(_, r)| r);
        if let Some(r) = reservation {
            out.extend(reservation_labels(
                &r.id,
                r.reservation_type.as_str(),
                r.interruptible,
            ));
        }
    }
    out
}

/// The labels of a node launched into capacity reservation `id` (Karpenter's): the reservation, its type
/// (`default` or `capacity-block`) and whether EC2 may interrupt it.
pub fn reservation_labels(
    id: &str,
    reservation_type: &str,
    interruptible: bool,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        (CAPACITY_RESERVATION_ID.to_owned(), id.to_owned()),
        (
            CAPACITY_RESERVATION_TYPE.to_owned(),
            reservation_type.to_owned(),
        ),
        (
            CAPACITY_RESERVATION_INTERRUPTIBLE.to_owned(),
            interruptible.to_string(),
        ),
    ])
}

/// The placement-group labels of an instance in `placement`, of a type whose requirements say whether the group
/// is partitioned (Karpenter's `instanceToNodeClaim`): the group, and for a partition group the partition, or ""
/// while EC2 has not said which (registration waits for it, [`PARTITION_PENDING`]).
pub fn placement_labels(
    placement: Option<&InstancePlacement>,
    instance_type: Option<&InstanceType>,
) -> BTreeMap<String, String> {
    let Some(placement) = placement else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::from([(PLACEMENT_GROUP_ID.to_owned(), placement.group_id.clone())]);
    let partitioned =
        instance_type.is_some_and(|t| t.requirements.get(PLACEMENT_GROUP_PARTITION).is_some());
    if partitioned || placement.partition.is_some() {
        out.insert(
            PLACEMENT_GROUP_PARTITION.to_owned(),
            placement
                .partition
                .map_or_else(|| PARTITION_PENDING.to_owned(), |p| p.to_string()),
        );
    }
    out
}

/// The partition label of a node in a partition group whose partition EC2 has not reported yet.
pub const PARTITION_PENDING: &str = "";

/// The labels a kubelet puts on the Node it registers, on an EC2 instance of `instance_type` in `zone`:
/// hostname, type, zone, region, architecture and OS (Linux: kerf launches no Windows AMI families).
pub fn kubelet_labels(
    node_name: &str,
    instance_type: &InstanceType,
    zone: &str,
    region: &str,
) -> BTreeMap<String, String> {
    let arch = instance_type
        .requirements
        .get(labels::ARCH)
        .and_then(|r| r.any())
        .map_or_else(|| labels::ARCH_AMD64.to_owned(), |a| a.into_owned());
    BTreeMap::from([
        (labels::HOSTNAME.to_owned(), node_name.to_owned()),
        (labels::INSTANCE_TYPE.to_owned(), instance_type.name.clone()),
        (labels::ZONE.to_owned(), zone.to_owned()),
        (labels::REGION.to_owned(), region.to_owned()),
        (labels::ARCH.to_owned(), arch),
        (labels::OS.to_owned(), labels::OS_LINUX.to_owned()),
    ])
}

/// What registration writes onto the claim's Node: the claim's labels with `karpenter.sh/registered`, and the
/// claim's annotations (the NodePool template's, such as `karpenter.sh/do-not-disrupt`, and the hashes), each
/// over what the Node already has (Karpenter's `syncNode`).
pub fn registered_metadata(
    claim: &NodeClaim,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut node_labels = claim.metadata.labels.clone().unwrap_or_default();
    node_labels.insert(labels::NODE_REGISTERED.into(), "true".into());
    let annotations = claim.metadata.annotations.clone().unwrap_or_default();
    (node_labels, annotations)
}

/// The class label a claim made before kerf set it lacks: `(key, class name)` when it is missing or wrong
/// (Karpenter's `nodeclaim.hydration` and `node.hydration` add it to such claims and their Nodes on upgrade).
pub fn missing_class_label(claim: &NodeClaim) -> Option<(String, String)> {
    let class = &claim.spec.node_class_ref;
    let key = labels::node_class_label(&class.group, &class.kind);
    let current = claim.metadata.labels.as_ref().and_then(|l| l.get(&key));
    (current != Some(&class.name)).then(|| (key, class.name.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    /// m5.large with on-demand offerings in two zones and reservations in the first: a roomy one, a small one
    /// and a full one.
    fn m5_large() -> InstanceType {
        let offering = |capacity_type: &str, extra: serde_json::Value| {
            let mut o = serde_json::json!({"zone": "us-east-1a", "capacityType": capacity_type, "price": 0.096});
            o.as_object_mut()
                .expect("an object")
                .extend(extra.as_object().expect("an object").clone());
            o
        };
        let reserved = |id: &str, capacity: u32| {
            offering(
                "reserved",
                serde_json::json!({"price": 1e-8, "reservationID": id, "reservationCapacity": capacity}),
            )
        };
        let file = serde_json::json!({"instanceTypes": [{
            "name": "m5.large", "cpu": "2", "memory": "8Gi", "pods": 29, "arch": "amd64", "os": ["linux"],
            "offerings": [
                offering("on-demand", serde_json::json!({})),
                offering("on-demand", serde_json::json!({"zone": "us-east-1b"})),
                reserved("cr-small", 1),
                reserved("cr-big", 4),
                reserved("cr-full", 9),
            ]
        }]});
        let mut catalog =
            Catalog::from_instance_types_json(&file.to_string()).expect("a catalog file");
        // A full reservation is unavailable, however much room EC2 said it had.
        for o in &mut catalog.instance_types[0].offerings {
            if o.reservation.as_ref().is_some_and(|r| r.id == "cr-full") {
                o.available = false;
            }
        }
        catalog.instance_types.remove(0)
    }

    #[test]
    fn only_a_reserved_node_carries_a_reservation_label() {
        let it = m5_large();
        let on_demand =
            launched_labels(Some(&it), "m5.large", "us-east-1a", CapacityType::OnDemand);
        assert!(
            on_demand
                .keys()
                .all(|k| !RESERVATION_LABELS.contains(&k.as_str())),
            "{on_demand:?}"
        );
        assert_eq!(on_demand[labels::CAPACITY_TYPE], "on-demand");
        assert_eq!(on_demand[labels::INSTANCE_TYPE], "m5.large");

        let reserved = launched_labels(Some(&it), "m5.large", "us-east-1a", CapacityType::Reserved);
        assert_eq!(reserved[labels::CAPACITY_TYPE], "reserved");
        // The available reservation with the most room, as the launch plan picks it.
        assert_eq!(reserved[CAPACITY_RESERVATION_ID], "cr-big");
        // None in the other zone: no guess.
        let elsewhere =
            launched_labels(Some(&it), "m5.large", "us-east-1b", CapacityType::Reserved);
        assert!(!elsewhere.contains_key(CAPACITY_RESERVATION_ID));
    }

    /// Upstream: `nodeclaim/hydration/suite_test.go` "should hydrate missing metadata onto the NodeClaim" (and
    /// `node/hydration` for its Node).
    #[test]
    fn a_claim_without_its_class_label_gets_it_once() {
        let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "labels": {"karpenter.sh/nodepool": "p"}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []}
        }))
        .expect("a claim");
        let (key, value) = missing_class_label(&claim).expect("missing");
        assert_eq!(
            (key.as_str(), value.as_str()),
            (labels::EC2NODECLASS, "default")
        );
        claim
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key, value);
        assert_eq!(missing_class_label(&claim), None);
    }

    #[test]
    fn a_reservation_labels_its_node_with_id_type_and_interruptibility() {
        assert_eq!(
            reservation_labels("cr-1", "capacity-block", false),
            BTreeMap::from([
                (CAPACITY_RESERVATION_ID.to_owned(), "cr-1".to_owned()),
                (
                    CAPACITY_RESERVATION_TYPE.to_owned(),
                    "capacity-block".to_owned()
                ),
                (
                    CAPACITY_RESERVATION_INTERRUPTIBLE.to_owned(),
                    "false".to_owned()
                ),
            ])
        );
    }
}
