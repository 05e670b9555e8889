//! The `--instance-types FILE` format: a user-described catalog that replaces the embedded one (for other
//! clouds' shapes, synthetic benchmarks and tests). docs/catalog.md documents it; in short:
//!
//! ```json
//! {"instanceTypes": [{"name": "fake-it-0", "cpu": "1", "memory": "2Gi", "pods": 10,
//!   "arch": "amd64", "os": ["linux"], "labels": {}, "overhead": {"cpu": "100m", "memory": "10Mi"},
//!   "offerings": [{"zone": "test-zone-1", "capacityType": "spot", "price": 0.3, "available": true}]}]}
//! ```
//!
//! Overhead is given, not computed: allocatable = capacity − overhead. Requirements come from the name,
//! `arch`, `os`, `labels` and the offerings.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use super::error::{from_json, CatalogError};
use super::instance_type::InstanceType;
use super::offering::{CapacityType, Offering, Reservation};
use super::pricing::check_price;
use super::quantity::{format_bytes, format_milli};
use super::resources::{Resources, CPU, MEMORY, PODS};
use super::well_known::identity_requirements;
use crate::api::ec2nodeclass::CapacityReservationType;
use crate::api::labels;
use crate::api::requirements::Requirement;

/// The file's name in error messages.
const DOCUMENT: &str = "instance-types file";

/// Label keys the other members already set; a label may not contradict them.
const DERIVED_KEYS: [(&str, &str); 6] = [
    (labels::INSTANCE_TYPE, "name"),
    (labels::ARCH, "arch"),
    (labels::OS, "os"),
    (labels::ZONE, "offerings[].zone"),
    (labels::ZONE_ID, "offerings[].zoneID"),
    (labels::CAPACITY_TYPE, "offerings[].capacityType"),
];

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct InstanceTypesFile {
    instance_types: Vec<FileInstanceType>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileInstanceType {
    name: String,
    cpu: QuantityText,
    memory: QuantityText,
    pods: u32,
    #[serde(default = "amd64")]
    arch: String,
    #[serde(default = "linux")]
    os: Vec<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    /// Capacity beyond cpu, memory and pods: `ephemeral-storage`, `nvidia.com/gpu`, …
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    resources: BTreeMap<String, QuantityText>,
    #[serde(default)]
    overhead: BTreeMap<String, QuantityText>,
    offerings: Vec<FileOffering>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileOffering {
    zone: String,
    #[serde(rename = "zoneID", default, skip_serializing_if = "Option::is_none")]
    zone_id: Option<String>,
    capacity_type: CapacityType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    price: Option<f64>,
    #[serde(default = "yes")]
    available: bool,
    /// A `reserved` offering's capacity reservation (`cr-…`) and how many instances it still takes.
    #[serde(
        rename = "reservationID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    reservation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reservation_capacity: Option<u32>,
    /// A reserved offering's kind (`default` or `capacity-block`; `default` when left out) and whether EC2 may
    /// interrupt it (`false` when left out), as its nodes' reservation labels say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reservation_type: Option<CapacityReservationType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reservation_interruptible: Option<bool>,
}

/// A quantity as written: a string (`"1.5Gi"`) or a JSON number (`2`), kept as text until parsed.
#[derive(Serialize)]
#[serde(transparent)]
struct QuantityText(String);

impl<'de> Deserialize<'de> for QuantityText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = QuantityText;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a quantity such as \"1.5Gi\", \"100m\" or 2")
            }

            fn visit_str<E>(self, text: &str) -> Result<QuantityText, E> {
                Ok(QuantityText(text.to_owned()))
            }

            fn visit_u64<E>(self, number: u64) -> Result<QuantityText, E> {
                Ok(QuantityText(number.to_string()))
            }

            fn visit_i64<E>(self, number: i64) -> Result<QuantityText, E> {
                Ok(QuantityText(number.to_string()))
            }

            fn visit_f64<E>(self, number: f64) -> Result<QuantityText, E> {
                Ok(QuantityText(number.to_string()))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

fn amd64() -> String {
    "amd64".to_owned()
}

fn linux() -> Vec<String> {
    vec!["linux".to_owned()]
}

fn yes() -> bool {
    true
}

/// Reads an instance-types file.
pub(super) fn parse(text: &str) -> Result<Vec<InstanceType>, CatalogError> {
    let file: InstanceTypesFile = from_json(DOCUMENT, text)?;
    let mut names = BTreeSet::new();
    // A label some type carries is one the others do not have (`DoesNotExist`), as the embedded catalog says
    // of its GPU labels: a pod selecting it must not land on a type without it.
    let keys: BTreeSet<String> = file
        .instance_types
        .iter()
        .flat_map(|entry| entry.labels.keys().cloned())
        .collect();
    file.instance_types
        .into_iter()
        .map(|entry| {
            if !names.insert(entry.name.clone()) {
                return Err(CatalogError::InstanceType {
                    name: entry.name,
                    reason: "is described twice; instance type names must be unique".to_owned(),
                });
            }
            let absent: Vec<&String> = keys
                .iter()
                .filter(|k| !entry.labels.contains_key(*k))
                .collect();
            let mut it = instance_type(entry)?;
            it.requirements.extend(
                absent
                    .into_iter()
                    .map(|key| Requirement::one_of(key.as_str(), std::iter::empty::<&str>())),
            );
            Ok(it)
        })
        .collect()
}

fn instance_type(entry: FileInstanceType) -> Result<InstanceType, CatalogError> {
    let FileInstanceType {
        name,
        cpu,
        memory,
        pods,
        arch,
        os,
        labels,
        resources,
        overhead,
        offerings,
    } = entry;
    let invalid = |reason: String| CatalogError::InstanceType {
        name: name.clone(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("the name is empty".to_owned()));
    }
    if offerings.is_empty() {
        return Err(invalid(
            "has no offerings; add at least one {\"zone\", \"capacityType\"}".to_owned(),
        ));
    }
    if let Some(key) = [CPU, MEMORY, PODS]
        .into_iter()
        .find(|k| resources.contains_key(*k))
    {
        return Err(invalid(format!(
            "resources.{key}: set {key} with the \"{key}\" member"
        )));
    }
    for key in labels.keys() {
        let normalized = labels::normalize_key(key);
        if let Some((_, member)) = DERIVED_KEYS
            .iter()
            .find(|(derived, _)| *derived == normalized)
        {
            return Err(invalid(format!(
                "labels.{key}: this label comes from {member}; set it there"
            )));
        }
    }
    let quantities = |list: BTreeMap<String, QuantityText>| {
        Resources::from_quantities(list.into_iter().map(|(name, text)| (name, text.0)))
            .map_err(|error| invalid(error.to_string()))
    };
    let mut capacity = quantities(
        [(CPU.to_owned(), cpu), (MEMORY.to_owned(), memory)]
            .into_iter()
            .chain(resources)
            .collect(),
    )?;
    capacity.pods = i64::from(pods);
    let overhead = quantities(overhead)?;
    let offerings = offerings
        .into_iter()
        .enumerate()
        .map(|(index, offering)| {
            if let Some(price) = offering.price {
                check_price(
                    || format!("instance type {name:?} offerings[{index}].price"),
                    price,
                )?;
            }
            let kind = (
                offering.reservation_type,
                offering.reservation_interruptible,
            );
            let reservation = match (
                offering.capacity_type,
                offering.reservation_id,
                offering.reservation_capacity,
            ) {
                (CapacityType::Reserved, Some(id), Some(capacity)) => Some(Reservation {
                    id,
                    capacity,
                    reservation_type: kind.0.unwrap_or(CapacityReservationType::Default),
                    interruptible: kind.1.unwrap_or(false),
                }),
                (CapacityType::Reserved, _, _) => {
                    return Err(invalid(format!(
                        "offerings[{index}]: a reserved offering needs reservationID and reservationCapacity"
                    )))
                }
                (_, None, None) if kind == (None, None) => None,
                (_, _, _) => {
                    return Err(invalid(format!(
                        "offerings[{index}]: reservationID, reservationCapacity, reservationType and reservationInterruptible belong to reserved offerings only"
                    )))
                }
            };
            Ok(Offering {
                zone: offering.zone,
                zone_id: offering.zone_id,
                capacity_type: offering.capacity_type,
                price: offering.price,
                available: offering.available,
                reservation,
            })
        })
        .collect::<Result<Vec<_>, CatalogError>>()?;
    let mut requirements =
        identity_requirements(&name, &arch, os.iter().map(String::as_str), &offerings);
    requirements.extend(
        labels
            .iter()
            .map(|(key, value)| Requirement::one_of(key.as_str(), [value.as_str()])),
    );
    Ok(InstanceType {
        name,
        requirements,
        capacity,
        overhead,
        offerings,
        overlaid: Default::default(),
    })
}

/// Writes instance types in the file format. Labels are the requirements with exactly one value (so an
/// embedded type's `DoesNotExist` requirements are not carried over); overhead is written out in full.
pub(super) fn write(instance_types: &[InstanceType]) -> Result<String, CatalogError> {
    let file = InstanceTypesFile {
        instance_types: instance_types.iter().map(file_entry).collect(),
    };
    serde_json::to_string(&file).map_err(|error| CatalogError::Json {
        document: DOCUMENT,
        path: ".".to_owned(),
        message: error.to_string(),
    })
}

fn file_entry(instance_type: &InstanceType) -> FileInstanceType {
    let requirements = &instance_type.requirements;
    let capacity = &instance_type.capacity;
    let quantities = |resources: &Resources, skip: &[&str]| {
        resources
            .to_quantities()
            .into_iter()
            .filter(|(name, _)| !skip.contains(&name.as_str()))
            .map(|(name, text)| (name, QuantityText(text)))
            .collect()
    };
    let mut labels = requirements.labels();
    labels.retain(|key, _| !DERIVED_KEYS.iter().any(|(derived, _)| derived == key));
    FileInstanceType {
        name: instance_type.name.clone(),
        cpu: QuantityText(format_milli(capacity.cpu)),
        memory: QuantityText(format_bytes(capacity.memory)),
        pods: u32::try_from(capacity.pods.max(0)).unwrap_or(u32::MAX),
        arch: requirements
            .get(labels::ARCH)
            .and_then(|arch| arch.any())
            .map_or_else(amd64, |arch| arch.into_owned()),
        os: requirements
            .get(labels::OS)
            .and_then(|os| os.values())
            .map_or_else(linux, |os| os.iter().cloned().collect()),
        labels,
        resources: quantities(capacity, &[CPU, MEMORY, PODS]),
        overhead: quantities(&instance_type.overhead, &[]),
        offerings: instance_type
            .offerings
            .iter()
            .map(|offering| FileOffering {
                zone: offering.zone.clone(),
                zone_id: offering.zone_id.clone(),
                capacity_type: offering.capacity_type,
                price: offering.price,
                available: offering.available,
                reservation_id: offering.reservation.as_ref().map(|r| r.id.clone()),
                reservation_capacity: offering.reservation.as_ref().map(|r| r.capacity),
                reservation_type: offering.reservation.as_ref().map(|r| r.reservation_type),
                reservation_interruptible: offering.reservation.as_ref().map(|r| r.interruptible),
            })
            .collect(),
    }
}
