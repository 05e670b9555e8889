//! Which offerings of an instance type a set of requirements allows, and the cheapest of them.

use crate::api::labels;
use crate::api::requirements::Requirements;
use crate::catalog::{InstanceType, Offering};

/// Whether `requirements` allow buying `offering`: an available offering in an allowed zone and capacity type.
pub fn allows(requirements: &Requirements, offering: &Offering) -> bool {
    offering.available
        && requirements
            .get(labels::ZONE)
            .is_none_or(|zone| zone.has(&offering.zone))
        && requirements
            .get(labels::CAPACITY_TYPE)
            .is_none_or(|ct| ct.has(offering.capacity_type.as_str()))
}

/// The cheapest offering of `instance_type` that `requirements` allow; unknown prices rank last.
pub fn cheapest_offering<'a>(
    instance_type: &'a InstanceType,
    requirements: &Requirements,
) -> Option<&'a Offering> {
    instance_type
        .offerings
        .iter()
        .filter(|o| allows(requirements, o))
        .min_by(|a, b| {
            let price = |o: &Offering| o.price.unwrap_or(f64::INFINITY);
            price(a)
                .total_cmp(&price(b))
                .then_with(|| a.zone.cmp(&b.zone))
        })
}
