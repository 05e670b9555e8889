//! What happens to nodes in capacity reservations after launch (Karpenter's AWS provider controllers
//! `capacityreservation/capacitytype` and `capacityreservation/expiration`), as pure decisions:
//!
//! - **Demotion.** A reservation that ends (cancelled, expired) leaves its instances running as plain on-demand
//!   ones: EC2 no longer reports a reservation for them. Their NodeClaim and Node then say `capacity-type:
//!   on-demand`, without the reservation labels, so scheduling, consolidation and budgets see what is paid for.
//!   Only that way round: an on-demand instance is never promoted into a reservation.
//! - **Capacity-block expiry.** EC2 reclaims a capacity block's instances at its end; kerf deletes their
//!   NodeClaims once the block is `expiring` (40 minutes before the end, the state the EC2NodeClass status shows),
//!   so pods are drained gracefully first.

use crate::api::ec2nodeclass::{CapacityReservationState, EC2NodeClass};
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::catalog::{
    CapacityType, CAPACITY_RESERVATION_ID, CAPACITY_RESERVATION_INTERRUPTIBLE,
    CAPACITY_RESERVATION_TYPE,
};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet};

/// The merge patch that demotes an object labelled `labels` from `reserved` to `on-demand`, or `None` when it is
/// not labelled reserved. A Node is demoted only once registered: before that its labels may not be synced yet
/// (the next pass gets it).
pub fn demotion_patch(labels: &BTreeMap<String, String>) -> Option<Value> {
    if labels.get(labels::CAPACITY_TYPE).map(String::as_str) != Some(labels::CAPACITY_TYPE_RESERVED)
    {
        return None;
    }
    let mut changed = Map::new();
    changed.insert(
        labels::CAPACITY_TYPE.to_owned(),
        Value::String(labels::CAPACITY_TYPE_ON_DEMAND.to_owned()),
    );
    for key in [
        CAPACITY_RESERVATION_ID,
        CAPACITY_RESERVATION_TYPE,
        CAPACITY_RESERVATION_INTERRUPTIBLE,
    ] {
        if labels.contains_key(key) {
            changed.insert(key.to_owned(), Value::Null);
        }
    }
    Some(json!({"metadata": {"labels": changed}}))
}

/// Whether a claim launched as `provider_id` runs on-demand now, by the instances' capacity types as EC2 lists
/// them (`instances`: provider ID → capacity type). An instance missing from the list decides nothing (garbage
/// collection owns that case).
pub fn runs_on_demand(
    instances: &HashMap<String, CapacityType>,
    provider_id: Option<&str>,
) -> bool {
    provider_id
        .and_then(|id| instances.get(id))
        .is_some_and(|ct| *ct == CapacityType::OnDemand)
}

/// The claims (by name) to delete because their capacity block is expiring, as the EC2NodeClasses' status lists
/// the reservations. Claims being deleted already are left out.
pub fn expiring(
    claims: &[impl AsRef<NodeClaim>],
    classes: &[impl AsRef<EC2NodeClass>],
) -> Vec<String> {
    let expiring: HashSet<&str> = classes
        .iter()
        .filter_map(|c| c.as_ref().status.as_ref()?.capacity_reservations.as_ref())
        .flatten()
        .filter(|r| r.state == Some(CapacityReservationState::Expiring))
        .map(|r| r.id.as_str())
        .collect();
    claims
        .iter()
        .map(AsRef::as_ref)
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| {
            c.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(CAPACITY_RESERVATION_ID))
                .is_some_and(|id| expiring.contains(id.as_str()))
        })
        .filter_map(|c| c.metadata.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn reserved_objects_are_demoted_with_their_reservation_labels_removed() {
        // Upstream capacitytype suite: "should demote nodeclaims and nodes from reserved to on-demand".
        let reserved = labels(&[
            (labels::CAPACITY_TYPE, "reserved"),
            (CAPACITY_RESERVATION_ID, "cr-foo"),
            (CAPACITY_RESERVATION_TYPE, "default"),
            ("team", "a"),
        ]);
        assert_eq!(
            demotion_patch(&reserved),
            Some(json!({"metadata": {"labels": {
                "karpenter.sh/capacity-type": "on-demand",
                "karpenter.k8s.aws/capacity-reservation-id": null,
                "karpenter.k8s.aws/capacity-reservation-type": null}}}))
        );
        // Already on-demand (a claim demoted earlier, its node now: "...even if their nodeclaim was demoted
        // previously" demotes the node by its own labels), or spot: nothing to do.
        assert_eq!(
            demotion_patch(&labels(&[(labels::CAPACITY_TYPE, "on-demand")])),
            None
        );
        assert_eq!(
            demotion_patch(&labels(&[(labels::CAPACITY_TYPE, "spot")])),
            None
        );
    }

    #[test]
    fn only_an_instance_ec2_lists_as_on_demand_demotes_its_claim() {
        let instances = HashMap::from([
            ("aws:///z/i-1".to_owned(), CapacityType::OnDemand),
            ("aws:///z/i-2".to_owned(), CapacityType::Reserved),
        ]);
        assert!(runs_on_demand(&instances, Some("aws:///z/i-1")));
        assert!(!runs_on_demand(&instances, Some("aws:///z/i-2")));
        assert!(!runs_on_demand(&instances, Some("aws:///z/i-3")));
        assert!(!runs_on_demand(&instances, None));
    }

    #[test]
    fn claims_in_an_expiring_capacity_block_are_deleted() {
        // Upstream expiration suite: claims in an expiring block go, those in an active one or none stay.
        let claim = |name: &str, reservation: Option<&str>, deleting: bool| {
            let mut value = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": name, "labels": {}},
                "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                         "requirements": []}});
            if let Some(id) = reservation {
                value["metadata"]["labels"][CAPACITY_RESERVATION_ID] = json!(id);
            }
            if deleting {
                value["metadata"]["deletionTimestamp"] = json!("2026-11-27T00:00:00Z");
            }
            Arc::new(serde_json::from_value::<NodeClaim>(value).expect("claim"))
        };
        let reservation = |id: &str, state: &str| {
            json!({"availabilityZone": "us-west-2a", "id": id, "instanceMatchCriteria": "targeted",
                   "instanceType": "p5.48xlarge", "ownerID": "012345678901", "reservationType": "capacity-block",
                   "state": state})
        };
        let class: EC2NodeClass = serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
            "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                     "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}]},
            "status": {"capacityReservations": [reservation("cr-ending", "expiring"), reservation("cr-ok", "active")]}
        }))
        .expect("class");
        let claims = [
            claim("in-ending", Some("cr-ending"), false),
            claim("in-ok", Some("cr-ok"), false),
            claim("on-demand", None, false),
            claim("already-going", Some("cr-ending"), true),
        ];
        assert_eq!(expiring(&claims, &[Arc::new(class)]), ["in-ending"]);
    }
}
