//! The inputs of the capacity and overhead formulas besides the instance type itself: two operator settings
//! (`VM_MEMORY_OVERHEAD_PERCENT`, `RESERVED_ENIS`) and the parts of an EC2NodeClass that change what a node
//! can hold. Quantities are parsed here, once, so building a catalog cannot fail half-way.

use std::collections::BTreeMap;

use super::error::CatalogError;
use super::family::FamilyTraits;
use super::quantity::{parse_quantity, parse_units};
use super::resources::value_from_milli;
use crate::api::ec2nodeclass::{
    AmiFamily, BlockDeviceMapping, EC2NodeClassSpec, InstanceStorePolicy, InterfaceType,
    KubeletConfiguration,
};

/// Karpenter's default `VM_MEMORY_OVERHEAD_PERCENT`: the share of memory the hypervisor keeps.
pub const DEFAULT_VM_MEMORY_OVERHEAD_PERCENT: f64 = 0.075;

/// Everything besides the instance type that decides its capacity, overhead and labels.
#[derive(Clone, Debug, PartialEq)]
pub struct CatalogSettings {
    /// `VM_MEMORY_OVERHEAD_PERCENT`, as a fraction (0.075 is 7.5 %).
    pub vm_memory_overhead_percent: f64,
    /// `RESERVED_ENIS`: network interfaces kept out of the max-pods formula (for other uses of the node).
    pub reserved_enis: i64,
    pub ami_family: AmiFamily,
    pub kubelet: KubeletSettings,
    /// The size in bytes of the volume holding kubelet's and containerd's data, when the EC2NodeClass's
    /// `blockDeviceMappings` say; otherwise the AMI family's default applies.
    pub root_volume_bytes: Option<i64>,
    pub instance_store_policy: Option<InstanceStorePolicy>,
    /// The EC2NodeClass's `networkInterfaces`, when it sets them.
    pub network_interfaces: Option<NetworkInterfaceCounts>,
}

/// The kubelet settings that change capacity or overhead, parsed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KubeletSettings {
    pub max_pods: Option<i64>,
    pub pods_per_core: Option<i64>,
    /// `kubeReserved`, by resource name, in the resource's unit (millicores for `cpu`); each entry replaces
    /// the computed value.
    pub kube_reserved: BTreeMap<String, i64>,
    /// `systemReserved`, like `kube_reserved`; nothing is reserved by default.
    pub system_reserved: BTreeMap<String, i64>,
    /// `evictionHard["memory.available"]`.
    pub eviction_memory_available: Option<EvictionThreshold>,
    /// `evictionHard["nodefs.available"]`.
    pub eviction_nodefs_available: Option<EvictionThreshold>,
}

/// A hard eviction threshold: a share of capacity or an amount.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EvictionThreshold {
    /// Percent of capacity (`10%` is 10.0). `100%` disables the threshold, so it is stored as 0.
    Percent(f64),
    /// Bytes.
    Amount(i64),
}

/// The interfaces an EC2NodeClass attaches, counted the way the formulas need them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetworkInterfaceCounts {
    /// EFA-only interfaces: the `vpc.amazonaws.com/efa` capacity when interfaces are set.
    pub efa_only: i64,
    /// EFA-only interfaces on network card 0, which take ENIs away from pod networking.
    pub efa_only_on_card_0: i64,
}

impl Default for CatalogSettings {
    /// Karpenter's defaults with an `al2023@latest` EC2NodeClass and nothing else set.
    fn default() -> Self {
        CatalogSettings {
            vm_memory_overhead_percent: DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
            reserved_enis: 0,
            ami_family: AmiFamily::Al2023,
            kubelet: KubeletSettings::default(),
            root_volume_bytes: None,
            instance_store_policy: None,
            network_interfaces: None,
        }
    }
}

impl CatalogSettings {
    /// The settings an EC2NodeClass implies, with the default operator settings (set
    /// `vm_memory_overhead_percent` and `reserved_enis` afterwards from the operator's flags).
    ///
    /// Fails on a quantity or percentage the formulas cannot read; validation normally rejects those first.
    pub fn from_ec2nodeclass(spec: &EC2NodeClassSpec) -> Result<Self, CatalogError> {
        let ami_family = ami_family(spec);
        let traits = FamilyTraits::of(ami_family);
        Ok(CatalogSettings {
            ami_family,
            kubelet: spec
                .kubelet
                .as_ref()
                .map(KubeletSettings::from_configuration)
                .transpose()?
                .unwrap_or_default(),
            root_volume_bytes: root_volume_bytes(
                spec.block_device_mappings.as_deref().unwrap_or_default(),
                &traits,
            )?,
            instance_store_policy: spec.instance_store_policy,
            network_interfaces: spec.network_interfaces.as_ref().map(|interfaces| {
                let efa_only = || {
                    interfaces
                        .iter()
                        .filter(|i| i.interface_type == Some(InterfaceType::EfaOnly))
                };
                NetworkInterfaceCounts {
                    efa_only: count(efa_only()),
                    efa_only_on_card_0: count(
                        efa_only().filter(|i| i.network_card_index == Some(0)),
                    ),
                }
            }),
            ..CatalogSettings::default()
        })
    }
}

impl KubeletSettings {
    fn from_configuration(kubelet: &KubeletConfiguration) -> Result<Self, CatalogError> {
        let eviction = |signal: &str| {
            kubelet
                .eviction_hard
                .as_ref()
                .and_then(|thresholds| thresholds.get(signal))
                .map(|value| EvictionThreshold::parse(signal, value))
                .transpose()
                .map(Option::flatten)
        };
        Ok(KubeletSettings {
            max_pods: kubelet.max_pods.map(i64::from),
            pods_per_core: kubelet.pods_per_core.map(i64::from),
            kube_reserved: reservations("kubeReserved", kubelet.kube_reserved.as_ref())?,
            system_reserved: reservations("systemReserved", kubelet.system_reserved.as_ref())?,
            eviction_memory_available: eviction("memory.available")?,
            eviction_nodefs_available: eviction("nodefs.available")?,
        })
    }
}

impl EvictionThreshold {
    /// Reads `10%` or `500Mi`. An empty value (which the CRD pattern admits) sets no threshold.
    fn parse(signal: &str, value: &str) -> Result<Option<Self>, CatalogError> {
        let error = |reason: String| CatalogError::Setting {
            field: format!("kubelet.evictionHard[{signal}]"),
            value: value.to_owned(),
            reason,
        };
        if value.is_empty() {
            return Ok(None);
        }
        let threshold = match value.strip_suffix('%') {
            Some(percent) => {
                let percent: f64 = percent
                    .parse()
                    .map_err(|_| error("expected a percentage such as 10%".to_owned()))?;
                EvictionThreshold::Percent(if percent == 100.0 { 0.0 } else { percent })
            }
            None => EvictionThreshold::Amount(
                parse_units(value).map_err(|source| error(source.to_string()))?,
            ),
        };
        Ok(Some(threshold))
    }

    /// The amount this threshold keeps back from `capacity` (rounded up, as Karpenter does).
    pub fn of(self, capacity: i64) -> i64 {
        match self {
            EvictionThreshold::Percent(percent) => {
                (capacity as f64 / 100.0 * percent).ceil() as i64
            }
            EvictionThreshold::Amount(amount) => amount,
        }
    }
}

/// The family an EC2NodeClass uses: `amiFamily`, else the family of its alias (`al2023@latest`), else
/// Custom (which validation makes unreachable, as in Karpenter).
fn ami_family(spec: &EC2NodeClassSpec) -> AmiFamily {
    let from_alias = || {
        let alias = spec
            .ami_selector_terms
            .iter()
            .flatten()
            .find_map(|term| term.alias.as_deref())?;
        let name = alias.split_once('@').map_or(alias, |(name, _)| name);
        match name.to_ascii_lowercase().as_str() {
            "al2" => Some(AmiFamily::Al2),
            "al2023" => Some(AmiFamily::Al2023),
            "bottlerocket" => Some(AmiFamily::Bottlerocket),
            "windows2019" => Some(AmiFamily::Windows2019),
            "windows2022" => Some(AmiFamily::Windows2022),
            "windows2025" => Some(AmiFamily::Windows2025),
            _ => None,
        }
    };
    spec.ami_family
        .or_else(from_alias)
        .unwrap_or(AmiFamily::Custom)
}

/// The size of the data volume the block device mappings set, as Karpenter picks it: the mapping marked
/// `rootVolume`, else for a custom AMI the last mapping, else the mapping of the family's data device.
fn root_volume_bytes(
    mappings: &[BlockDeviceMapping],
    traits: &FamilyTraits,
) -> Result<Option<i64>, CatalogError> {
    let chosen = mappings
        .iter()
        .find(|mapping| mapping.root_volume == Some(true))
        .and_then(volume_size)
        .or_else(|| match traits.ephemeral_device {
            None => mappings.last().and_then(volume_size),
            Some(device) => mappings
                .iter()
                .find(|mapping| mapping.device_name.as_deref() == Some(device))
                .and_then(volume_size),
        });
    chosen
        .map(|text| {
            parse_units(text).map_err(|source| CatalogError::Setting {
                field: "blockDeviceMappings.ebs.volumeSize".to_owned(),
                value: text.to_owned(),
                reason: source.to_string(),
            })
        })
        .transpose()
}

fn volume_size(mapping: &BlockDeviceMapping) -> Option<&str> {
    mapping.ebs.as_ref()?.volume_size.as_deref()
}

/// `kubeReserved` or `systemReserved` as amounts in each resource's unit.
fn reservations(
    field: &str,
    quantities: Option<&BTreeMap<String, String>>,
) -> Result<BTreeMap<String, i64>, CatalogError> {
    quantities
        .into_iter()
        .flatten()
        .map(|(name, value)| {
            let milli = parse_quantity(value).map_err(|source| CatalogError::Setting {
                field: format!("kubelet.{field}[{name}]"),
                value: value.clone(),
                reason: source.to_string(),
            })?;
            Ok((name.clone(), value_from_milli(name, milli)))
        })
        .collect()
}

fn count<T>(items: impl Iterator<Item = T>) -> i64 {
    i64::try_from(items.count()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ec2nodeclass::{AmiSelectorTerm, BlockDevice, NetworkInterface};

    fn mapping(device: &str, size: &str, root: Option<bool>) -> BlockDeviceMapping {
        BlockDeviceMapping {
            device_name: Some(device.to_owned()),
            ebs: Some(BlockDevice {
                volume_size: Some(size.to_owned()),
                ..BlockDevice::default()
            }),
            root_volume: root,
        }
    }

    #[test]
    fn family_comes_from_the_field_then_the_alias() {
        let mut spec = EC2NodeClassSpec {
            ami_selector_terms: Some(vec![AmiSelectorTerm {
                alias: Some("bottlerocket@latest".into()),
                ..AmiSelectorTerm::default()
            }]),
            ..EC2NodeClassSpec::default()
        };
        let settings = CatalogSettings::from_ec2nodeclass(&spec).expect("valid");
        assert_eq!(settings.ami_family, AmiFamily::Bottlerocket);
        spec.ami_family = Some(AmiFamily::Al2);
        assert_eq!(
            CatalogSettings::from_ec2nodeclass(&spec)
                .expect("valid")
                .ami_family,
            AmiFamily::Al2
        );
        assert_eq!(
            CatalogSettings::from_ec2nodeclass(&EC2NodeClassSpec::default())
                .expect("valid")
                .ami_family,
            AmiFamily::Custom
        );
    }

    #[test]
    fn root_volume_follows_karpenters_choice() {
        let al2023 = FamilyTraits::of(AmiFamily::Al2023);
        let bottlerocket = FamilyTraits::of(AmiFamily::Bottlerocket);
        let custom = FamilyTraits::of(AmiFamily::Custom);
        let mappings = [
            mapping("/dev/xvda", "100Gi", None),
            mapping("/dev/xvdb", "200Gi", None),
        ];
        assert_eq!(root_volume_bytes(&mappings, &al2023), Ok(Some(100 << 30)));
        assert_eq!(
            root_volume_bytes(&mappings, &bottlerocket),
            Ok(Some(200 << 30))
        );
        assert_eq!(root_volume_bytes(&mappings, &custom), Ok(Some(200 << 30)));
        let marked = [
            mapping("/dev/xvda", "100Gi", None),
            mapping("/dev/xvdc", "1T", Some(true)),
        ];
        assert_eq!(
            root_volume_bytes(&marked, &al2023),
            Ok(Some(1_000_000_000_000))
        );
        assert_eq!(root_volume_bytes(&[], &al2023), Ok(None));
        assert_eq!(
            root_volume_bytes(&[mapping("/dev/sdz", "5Gi", None)], &al2023),
            Ok(None)
        );
    }

    #[test]
    fn kubelet_settings_are_parsed_once() {
        let spec = EC2NodeClassSpec {
            kubelet: Some(KubeletConfiguration {
                max_pods: Some(20),
                kube_reserved: Some(BTreeMap::from([("cpu".into(), "250m".into())])),
                system_reserved: Some(BTreeMap::from([("memory".into(), "1Gi".into())])),
                eviction_hard: Some(BTreeMap::from([
                    ("memory.available".into(), "5%".into()),
                    ("nodefs.available".into(), "100%".into()),
                    ("imagefs.available".into(), "15%".into()),
                ])),
                ..KubeletConfiguration::default()
            }),
            network_interfaces: Some(vec![
                NetworkInterface {
                    network_card_index: Some(0),
                    device_index: Some(0),
                    interface_type: Some(InterfaceType::Interface),
                },
                NetworkInterface {
                    network_card_index: Some(0),
                    device_index: Some(1),
                    interface_type: Some(InterfaceType::EfaOnly),
                },
                NetworkInterface {
                    network_card_index: Some(1),
                    device_index: Some(0),
                    interface_type: Some(InterfaceType::EfaOnly),
                },
            ]),
            ..EC2NodeClassSpec::default()
        };
        let settings = CatalogSettings::from_ec2nodeclass(&spec).expect("valid");
        let kubelet = &settings.kubelet;
        assert_eq!(kubelet.max_pods, Some(20));
        assert_eq!(kubelet.kube_reserved["cpu"], 250);
        assert_eq!(kubelet.system_reserved["memory"], 1 << 30);
        assert_eq!(
            kubelet.eviction_memory_available,
            Some(EvictionThreshold::Percent(5.0))
        );
        assert_eq!(
            kubelet.eviction_nodefs_available,
            Some(EvictionThreshold::Percent(0.0))
        );
        assert_eq!(
            settings.network_interfaces,
            Some(NetworkInterfaceCounts {
                efa_only: 2,
                efa_only_on_card_0: 1
            })
        );
        assert_eq!(EvictionThreshold::Percent(10.0).of(1_001), 101);
    }

    #[test]
    fn unreadable_values_say_which_field() {
        let spec = EC2NodeClassSpec {
            kubelet: Some(KubeletConfiguration {
                eviction_hard: Some(BTreeMap::from([("memory.available".into(), "ten%".into())])),
                ..KubeletConfiguration::default()
            }),
            ..EC2NodeClassSpec::default()
        };
        let error = CatalogSettings::from_ec2nodeclass(&spec).expect_err("bad percentage");
        assert!(
            error
                .to_string()
                .contains("kubelet.evictionHard[memory.available]"),
            "{error}"
        );
    }
}
