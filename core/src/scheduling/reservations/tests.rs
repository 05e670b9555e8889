//! The reservation manager alone; whole solves with reserved capacity are in tests/scheduling_reserved.rs.

use super::*;
use serde_json::json;

/// `small` with reservation `cr-small` (capacity 1) in zone a; `medium` with `cr-medium` (capacity 2).
fn catalog() -> Catalog {
    let it = |name: &str, cpu: &str, reservation: &str, capacity: u32| {
        json!({"name": name, "cpu": cpu, "memory": "4Gi", "pods": 10, "arch": "amd64", "os": ["linux"],
               "labels": {}, "overhead": {},
               "offerings": [
                   {"zone": "a", "capacityType": "on-demand", "price": 1.0},
                   {"zone": "a", "capacityType": "reserved", "price": 0.0000001,
                    "reservationID": reservation, "reservationCapacity": capacity}]})
    };
    let file = json!({"instanceTypes": [it("small", "2", "cr-small", 1), it("medium", "4", "cr-medium", 2)]});
    Catalog::from_instance_types_json(&file.to_string()).expect("catalog")
}

fn ids(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn a_claim_holds_every_reservation_its_types_could_use_and_gives_back_what_it_drops() {
    let catalog = catalog();
    let mut r = Reservations::new(&catalog);
    let any = Requirements::new();
    // A new claim that may be either type holds both reservations (Karpenter's pessimistic reservation).
    let both = r
        .reservable(ReservedMode::Strict, None, &catalog, &[0, 1], &any)
        .expect("room");
    assert_eq!(both, ids(&["cr-medium", "cr-small"]));
    r.hold(0, both);
    // cr-small is full now: a second claim that can only be small finds it taken.
    assert_eq!(
        r.reservable(ReservedMode::Strict, None, &catalog, &[0], &any),
        Err(ALL_RESERVED)
    );
    // In fallback mode it gets nothing reserved instead.
    assert_eq!(
        r.reservable(ReservedMode::Fallback, None, &catalog, &[0], &any),
        Ok(BTreeSet::new())
    );
    // The first claim keeps what it holds even though nothing is left.
    assert_eq!(
        r.reservable(ReservedMode::Strict, Some(0), &catalog, &[0], &any),
        Ok(ids(&["cr-small"]))
    );
    // Narrowed to medium, it gives cr-small back; a small-only claim can then take it.
    r.hold(0, ids(&["cr-medium"]));
    assert_eq!(
        r.reservable(ReservedMode::Strict, None, &catalog, &[0], &any),
        Ok(ids(&["cr-small"]))
    );
}

#[test]
fn a_claim_may_not_lose_its_reservations_in_strict_mode() {
    let catalog = catalog();
    let mut r = Reservations::new(&catalog);
    r.hold(0, ids(&["cr-small"]));
    let on_demand = Requirements::from_labels(
        &[(labels::CAPACITY_TYPE.to_owned(), "on-demand".to_owned())].into(),
    );
    assert_eq!(
        r.reservable(ReservedMode::Strict, Some(0), &catalog, &[0], &on_demand),
        Err(WOULD_LOSE_RESERVATIONS)
    );
    assert_eq!(
        r.reservable(ReservedMode::Fallback, Some(0), &catalog, &[0], &on_demand),
        Ok(BTreeSet::new())
    );
}

#[test]
fn a_finished_claim_launches_into_its_reservations_only() {
    let catalog = catalog();
    let mut r = Reservations::new(&catalog);
    assert!(r.finish(0, &Requirements::new()).is_none());
    r.hold(0, ids(&["cr-small"]));
    let finished = r.finish(0, &Requirements::new()).expect("held");
    assert_eq!(
        finished.to_string(),
        "karpenter.k8s.aws/capacity-reservation-id In [cr-small], karpenter.sh/capacity-type In [reserved]"
    );
}
