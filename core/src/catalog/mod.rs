//! The instance-type catalog: every EC2 instance type kerf may launch, with its well-known labels (as
//! requirements), capacity, overhead and offerings (zone × capacity type × price × availability).
//!
//! Sources: a snapshot embedded in the binary ([`Catalog::embedded`], generated from the EC2 data in the
//! moto package), or a user's `--instance-types` file ([`Catalog::from_instance_types_json`]). Prices come
//! from a [`Pricing`] file offline and from AWS in a cluster. Everything here is pure: the only inputs are
//! the `&str` contents callers read. Building the embedded catalog of a region takes about 50 ms (release
//! build), so callers build it once per EC2NodeClass and keep it.
//!
//! docs/catalog.md documents the file formats and the formulas.

mod embedded;
mod error;
mod family;
mod file;
mod info;
mod instance_type;
mod name;
mod offering;
mod overhead;
mod pricing;
mod quantity;
mod resources;
mod settings;
mod well_known;

use crate::api::labels;
use crate::api::requirements::Requirement;
use std::collections::BTreeSet;

pub use embedded::embedded_regions;
pub use error::CatalogError;
pub use info::{Accelerator, Gpu, InstanceTypeInfo, NeuronDevice};
pub use instance_type::{InstanceType, Overlaid};
pub use name::{parse_name, NameParts};
pub use offering::{CapacityType, Offering, OfferingFilter, Reservation};
pub use pricing::{Pricing, RESERVED_PRICE_DIVISOR};
pub use quantity::{format_bytes, format_milli, parse_quantity, parse_units, QuantityError};
pub use resources::*;
pub use settings::{
    CatalogSettings, EvictionThreshold, KubeletSettings, NetworkInterfaceCounts,
    DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
};
pub use well_known::*;

/// A set of instance types, in name order for the embedded snapshot and file order for a file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Catalog {
    pub instance_types: Vec<InstanceType>,
}

impl Catalog {
    /// The catalog without its reserved offerings: what Karpenter offers with the `ReservedCapacity` feature gate
    /// off.
    pub fn without_reserved_capacity(mut self) -> Catalog {
        for it in &mut self.instance_types {
            let before = it.offerings.len();
            it.offerings
                .retain(|o| o.capacity_type != CapacityType::Reserved);
            if it.offerings.len() == before {
                continue;
            }
            // The type's own requirements follow its offerings: no `reserved` capacity type and no reservation
            // to select, so a pod that asks for one is told no type fits rather than planned onto nothing.
            let left: BTreeSet<&str> = it
                .offerings
                .iter()
                .map(|o| o.capacity_type.as_str())
                .collect();
            it.requirements
                .add(Requirement::one_of(labels::CAPACITY_TYPE, left));
            for key in [
                CAPACITY_RESERVATION_ID,
                CAPACITY_RESERVATION_TYPE,
                CAPACITY_RESERVATION_INTERRUPTIBLE,
            ] {
                it.requirements
                    .add(Requirement::one_of(key, std::iter::empty::<&str>()));
            }
        }
        self
    }

    /// The embedded snapshot of `region` (see [`embedded_regions`]), built for nodes with `settings`: one
    /// available offering per zone and capacity type, priced from `pricing` where it knows the price.
    pub fn embedded(
        region: &str,
        settings: &CatalogSettings,
        pricing: &Pricing,
    ) -> Result<Catalog, CatalogError> {
        embedded::instance_types(region, settings, pricing)
            .map(|instance_types| Catalog { instance_types })
    }

    /// A catalog from the contents of an `--instance-types` file.
    pub fn from_instance_types_json(text: &str) -> Result<Catalog, CatalogError> {
        file::parse(text).map(|instance_types| Catalog { instance_types })
    }

    /// The catalog in the `--instance-types` file format: a starting point for a custom catalog.
    pub fn to_instance_types_json(&self) -> Result<String, CatalogError> {
        file::write(&self.instance_types)
    }

    /// The instance type called `name`.
    pub fn get(&self, name: &str) -> Option<&InstanceType> {
        self.instance_types.iter().find(|it| it.name == name)
    }

    /// Every label key some instance type defines. A NodePool need not name them for pods to select them: as
    /// Karpenter's well-known labels, the instance types give their values.
    pub fn label_keys(&self) -> std::collections::BTreeSet<&str> {
        // Every type defines about the same few dozen keys: a hash set drops the repeats without sorting them
        // all first, as collecting into the ordered set would (a few milliseconds for 800 types).
        let keys: std::collections::HashSet<&str> = self
            .instance_types
            .iter()
            .flat_map(|it| it.requirements.iter().map(|r| r.key()))
            .collect();
        keys.into_iter().collect()
    }
}
