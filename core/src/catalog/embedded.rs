//! The instance-type snapshot shipped in the binary: catalog/<region>.json, generated from the EC2 data in
//! the moto package by catalog/generate.py (catalog/README.md says how to refresh it).

use serde::Deserialize;

use super::error::{from_json, CatalogError};
use super::info::InstanceTypeInfo;
use super::instance_type::InstanceType;
use super::offering::Offering;
use super::pricing::Pricing;
use super::settings::CatalogSettings;

/// Region → snapshot, in the order error messages list them.
const SNAPSHOTS: [(&str, &str); 2] = [
    ("us-east-1", include_str!("../../../catalog/us-east-1.json")),
    ("us-west-2", include_str!("../../../catalog/us-west-2.json")),
];

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Snapshot {
    instance_types: Vec<SnapshotEntry>,
}

#[derive(Deserialize)]
struct SnapshotEntry {
    #[serde(flatten)]
    info: InstanceTypeInfo,
    /// The zones offering the type, as the letters after the region name (`"abcdf"`).
    zones: String,
}

/// The regions with an embedded snapshot.
pub fn embedded_regions() -> Vec<&'static str> {
    SNAPSHOTS.iter().map(|(region, _)| *region).collect()
}

/// Every instance type of `region`'s snapshot, with one available offering per zone and capacity type EC2
/// sells it with, priced from `pricing` (or unpriced).
pub(super) fn instance_types(
    region: &str,
    settings: &CatalogSettings,
    pricing: &Pricing,
) -> Result<Vec<InstanceType>, CatalogError> {
    let (_, text) = SNAPSHOTS
        .iter()
        .find(|(name, _)| *name == region)
        .ok_or_else(|| CatalogError::UnknownRegion {
            region: region.to_owned(),
            embedded: embedded_regions(),
        })?;
    let snapshot: Snapshot = from_json("embedded catalog", text)?;
    Ok(snapshot
        .instance_types
        .into_iter()
        .map(|SnapshotEntry { info, zones }| {
            let name = info.name.as_str();
            let offerings = zones
                .chars()
                .flat_map(|suffix| {
                    let zone = format!("{region}{suffix}");
                    info.capacity_types
                        .iter()
                        .map(move |&capacity_type| Offering {
                            price: pricing.price(region, name, &zone, capacity_type),
                            zone: zone.clone(),
                            zone_id: None,
                            capacity_type,
                            available: true,
                            reservation: None,
                        })
                })
                .collect();
            InstanceType::from_info(&info, region, offerings, settings)
        })
        .collect())
}
