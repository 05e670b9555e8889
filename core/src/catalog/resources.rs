//! Amounts of node resources: what an instance type has (capacity), what the system keeps (overhead), what
//! is left for pods (allocatable) and what pods request.
//!
//! The four core resources are plain fields, in the units the scheduler compares (CPU in millicores, memory
//! and ephemeral storage in bytes, pods as a count), so the hot path adds and compares integers without map
//! lookups. Everything else (GPUs, Neuron devices, EFA interfaces, hugepages, …) lives in `extended`, in
//! whole units; an absent entry means zero.

use std::collections::BTreeMap;
use std::ops::{Add, AddAssign, Sub, SubAssign};

use super::error::CatalogError;
use super::quantity::{format_bytes, format_milli, milli_to_units, parse_quantity};

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";
pub const AMD_GPU: &str = "amd.com/gpu";
pub const HABANA_GAUDI: &str = "habana.ai/gaudi";
pub const AWS_NEURON: &str = "aws.amazon.com/neuron";
pub const AWS_NEURON_CORE: &str = "aws.amazon.com/neuroncore";
pub const EFA: &str = "vpc.amazonaws.com/efa";
/// Secondary IPv4 addresses the VPC resource controller hands to Windows pods.
pub const PRIVATE_IPV4_ADDRESS: &str = "vpc.amazonaws.com/PrivateIPv4Address";

/// Amounts of resources by name; see the module documentation for units.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// Millicores.
    pub cpu: i64,
    /// Bytes.
    pub memory: i64,
    pub pods: i64,
    /// Bytes.
    pub ephemeral_storage: i64,
    /// Other resources in whole units, by resource name.
    pub extended: BTreeMap<String, i64>,
}

impl Resources {
    /// Parses a Kubernetes resource list (`{"cpu": "100m", "memory": "1Gi"}`). CPU keeps milli precision;
    /// every other resource rounds up to whole units, as `Quantity.Value()` does.
    pub fn from_quantities<K, V>(
        quantities: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self, CatalogError>
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut resources = Resources::default();
        for (name, value) in quantities {
            let (name, value) = (name.as_ref(), value.as_ref());
            let milli = parse_quantity(value).map_err(|source| CatalogError::Quantity {
                resource: name.to_owned(),
                value: value.to_owned(),
                source,
            })?;
            resources.set(name, value_from_milli(name, milli));
        }
        Ok(resources)
    }

    /// The resources as a Kubernetes resource list, leaving out zeros: `cpu` as cores or millicores, memory
    /// and storage with the largest exact binary suffix.
    pub fn to_quantities(&self) -> BTreeMap<String, String> {
        let core = [
            (CPU, self.cpu, format_milli(self.cpu)),
            (MEMORY, self.memory, format_bytes(self.memory)),
            (PODS, self.pods, self.pods.to_string()),
            (
                EPHEMERAL_STORAGE,
                self.ephemeral_storage,
                format_bytes(self.ephemeral_storage),
            ),
        ];
        core.into_iter()
            .filter(|(_, amount, _)| *amount != 0)
            .map(|(name, _, text)| (name.to_owned(), text))
            .chain(
                self.extended
                    .iter()
                    .filter(|(_, amount)| **amount != 0)
                    .map(|(name, amount)| (name.clone(), amount.to_string())),
            )
            .collect()
    }

    /// The amount of `name`, in its unit (millicores for `cpu`).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.cpu,
            MEMORY => self.memory,
            PODS => self.pods,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            other => self.extended.get(other).copied().unwrap_or(0),
        }
    }

    /// Sets the amount of `name`, in its unit (millicores for `cpu`).
    pub fn set(&mut self, name: &str, amount: i64) {
        match name {
            CPU => self.cpu = amount,
            MEMORY => self.memory = amount,
            PODS => self.pods = amount,
            EPHEMERAL_STORAGE => self.ephemeral_storage = amount,
            other => {
                self.extended.insert(other.to_owned(), amount);
            }
        }
    }

    /// Whether every amount here is at most the same amount in `available`: a request fits a node.
    pub fn fits_in(&self, available: &Resources) -> bool {
        self.cpu <= available.cpu
            && self.memory <= available.memory
            && self.pods <= available.pods
            && self.ephemeral_storage <= available.ephemeral_storage
            && self
                .extended
                .iter()
                .all(|(name, amount)| *amount <= available.get(name))
    }
}

impl Resources {
    /// The larger of the two amounts of every resource.
    pub fn max(&self, other: &Resources) -> Resources {
        let mut max = Resources {
            cpu: self.cpu.max(other.cpu),
            memory: self.memory.max(other.memory),
            pods: self.pods.max(other.pods),
            ephemeral_storage: self.ephemeral_storage.max(other.ephemeral_storage),
            extended: self.extended.clone(),
        };
        for (name, amount) in &other.extended {
            let entry = max.extended.entry(name.clone()).or_default();
            *entry = (*entry).max(*amount);
        }
        max
    }
}

/// The amount in `name`'s unit from milli-units: CPU stays in millicores, everything else rounds up.
pub(super) fn value_from_milli(name: &str, milli: i64) -> i64 {
    if name == CPU {
        milli
    } else {
        milli_to_units(milli)
    }
}

/// Adds amount by amount, saturating instead of overflowing.
impl AddAssign<&Resources> for Resources {
    fn add_assign(&mut self, other: &Resources) {
        self.cpu = self.cpu.saturating_add(other.cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.pods = self.pods.saturating_add(other.pods);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
        for (name, amount) in &other.extended {
            let entry = self.extended.entry(name.clone()).or_insert(0);
            *entry = entry.saturating_add(*amount);
        }
    }
}

/// Subtracts amount by amount, saturating instead of overflowing; results may be negative (an overcommitted
/// node), which [`Resources::fits_in`] then rejects.
impl SubAssign<&Resources> for Resources {
    fn sub_assign(&mut self, other: &Resources) {
        self.cpu = self.cpu.saturating_sub(other.cpu);
        self.memory = self.memory.saturating_sub(other.memory);
        self.pods = self.pods.saturating_sub(other.pods);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_sub(other.ephemeral_storage);
        for (name, amount) in &other.extended {
            let entry = self.extended.entry(name.clone()).or_insert(0);
            *entry = entry.saturating_sub(*amount);
        }
    }
}

impl Add<&Resources> for Resources {
    type Output = Resources;

    fn add(mut self, other: &Resources) -> Resources {
        self += other;
        self
    }
}

impl Sub<&Resources> for Resources {
    type Output = Resources;

    fn sub(mut self, other: &Resources) -> Resources {
        self -= other;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resources(pairs: &[(&str, &str)]) -> Resources {
        Resources::from_quantities(pairs.iter().copied()).expect("valid quantities")
    }

    #[test]
    fn parses_and_formats_resource_lists() {
        let r = resources(&[
            ("cpu", "1.5"),
            ("memory", "2Gi"),
            ("pods", "10"),
            ("ephemeral-storage", "20Gi"),
            ("nvidia.com/gpu", "1"),
            ("hugepages-2Mi", "0.5Ki"),
        ]);
        assert_eq!(r.cpu, 1_500);
        assert_eq!(r.memory, 2 << 30);
        assert_eq!(r.pods, 10);
        assert_eq!(r.ephemeral_storage, 20 << 30);
        assert_eq!(r.get(NVIDIA_GPU), 1);
        assert_eq!(r.get("hugepages-2Mi"), 512);
        assert_eq!(r.get("example.com/absent"), 0);
        let text = r.to_quantities();
        assert_eq!(text["cpu"], "1500m");
        assert_eq!(text["memory"], "2Gi");
        assert_eq!(Resources::from_quantities(&text), Ok(r));
    }

    #[test]
    fn bad_quantities_name_the_resource() {
        let err = Resources::from_quantities([("memory", "2GB")]).expect_err("bad suffix");
        let message = err.to_string();
        assert!(
            message.contains("memory") && message.contains("2GB"),
            "{message}"
        );
    }

    #[test]
    fn arithmetic_saturates_and_merges_extended_resources() {
        let a = resources(&[("cpu", "1"), ("nvidia.com/gpu", "2")]);
        let b = resources(&[("cpu", "250m"), ("aws.amazon.com/neuron", "1")]);
        let sum = a.clone() + &b;
        assert_eq!(sum.cpu, 1_250);
        assert_eq!(sum.get(NVIDIA_GPU), 2);
        assert_eq!(sum.get(AWS_NEURON), 1);
        let difference = sum - &b;
        assert_eq!(difference.cpu, 1_000);
        assert_eq!(difference.get(AWS_NEURON), 0);
        let mut huge = Resources {
            memory: i64::MAX,
            ..Resources::default()
        };
        huge += &resources(&[("memory", "1")]);
        assert_eq!(huge.memory, i64::MAX);
    }

    #[test]
    fn fits_in_compares_every_resource() {
        let node = resources(&[
            ("cpu", "2"),
            ("memory", "4Gi"),
            ("pods", "10"),
            ("nvidia.com/gpu", "1"),
        ]);
        assert!(resources(&[("cpu", "2"), ("memory", "4Gi")]).fits_in(&node));
        assert!(resources(&[("nvidia.com/gpu", "1")]).fits_in(&node));
        assert!(!resources(&[("cpu", "2001m")]).fits_in(&node));
        assert!(!resources(&[("nvidia.com/gpu", "2")]).fits_in(&node));
        assert!(!resources(&[("amd.com/gpu", "1")]).fits_in(&node));
        assert!(Resources::default().fits_in(&node));
    }
}
