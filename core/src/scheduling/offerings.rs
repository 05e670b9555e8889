//! Which offerings of an instance type a set of requirements allows, and the cheapest of them.

use crate::api::labels;
use crate::api::requirements::Requirements;
use crate::catalog::{CapacityType, Catalog, InstanceType, Offering, OfferingFilter};
use std::collections::BTreeSet;

/// Whether `requirements` allow buying `offering`: an available offering in an allowed zone and capacity type
/// (and capacity reservation, for a reserved one).
pub fn allows(requirements: &Requirements, offering: &Offering) -> bool {
    OfferingFilter::new(requirements).allows(offering)
}

/// The cheapest offering of `instance_type` that `requirements` allow; unknown prices rank last.
pub fn cheapest_offering<'a>(
    instance_type: &'a InstanceType,
    requirements: &Requirements,
) -> Option<&'a Offering> {
    let filter = OfferingFilter::new(requirements);
    instance_type
        .offerings
        .iter()
        .filter(|o| filter.allows(o))
        .min_by(|a, b| {
            let price = |o: &Offering| o.price.unwrap_or(f64::INFINITY);
            price(a)
                .total_cmp(&price(b))
                .then_with(|| a.zone.cmp(&b.zone))
        })
}

/// The capacity types, in their bit order within a zone.
const CAPACITY_TYPES: [CapacityType; 3] = [
    CapacityType::OnDemand,
    CapacityType::Spot,
    CapacityType::Reserved,
];

/// The available offerings of every catalog type as bits (zone × capacity type), so whether requirements allow
/// some offering of a type is one AND instead of string comparisons. Built only for catalogs of at most 21
/// zones (63 bits); larger ones use [`allows`] directly.
#[derive(Clone, Debug)]
pub struct OfferingBits {
    zones: Vec<String>,
    /// Per catalog index.
    offers: Vec<u64>,
}

impl OfferingBits {
    pub fn new(catalog: &Catalog) -> Option<Self> {
        // Each zone is copied once, not once per offering: a catalog has thousands of offerings.
        let zones: Vec<String> = catalog
            .instance_types
            .iter()
            .flat_map(|it| it.offerings.iter().map(|o| o.zone.as_str()))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(str::to_owned)
            .collect();
        if zones.len() * CAPACITY_TYPES.len() > 63 {
            return None;
        }
        let offers = catalog
            .instance_types
            .iter()
            .map(|it| {
                it.offerings
                    .iter()
                    .filter(|o| o.available)
                    .fold(0, |bits, o| {
                        let zone = zones.binary_search(&o.zone).unwrap_or_default();
                        bits | bit(zone, o.capacity_type)
                    })
            })
            .collect();
        Some(OfferingBits { zones, offers })
    }

    /// The offerings `requirements` allow, as bits.
    pub fn allowed(&self, requirements: &Requirements) -> u64 {
        let zone_req = requirements.get(labels::ZONE);
        let ct_req = requirements.get(labels::CAPACITY_TYPE);
        // Only reserved offerings carry reservation labels: a requirement that needs one rules the others out
        // (which reservation is left to the exact check).
        let unreserved = OfferingFilter::new(requirements).allows_unreserved();
        let mut bits = 0;
        for (z, zone) in self.zones.iter().enumerate() {
            if zone_req.is_some_and(|r| !r.has(zone)) {
                continue;
            }
            for ct in CAPACITY_TYPES {
                if !unreserved && ct != CapacityType::Reserved {
                    continue;
                }
                if ct_req.is_none_or(|r| r.has(ct.as_str())) {
                    bits |= bit(z, ct);
                }
            }
        }
        bits
    }

    /// The available offerings of catalog type `i`, as bits.
    pub fn offers(&self, i: usize) -> u64 {
        self.offers[i]
    }
}

fn bit(zone: usize, capacity_type: CapacityType) -> u64 {
    let ct = CAPACITY_TYPES
        .iter()
        .position(|c| *c == capacity_type)
        .unwrap_or_default();
    1 << (zone * CAPACITY_TYPES.len() + ct)
}
