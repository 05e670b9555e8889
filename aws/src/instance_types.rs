//! EC2's DescribeInstanceTypes / DescribeInstanceTypeOfferings answers as kerf's catalog facts, with the
//! same rules as the embedded snapshot (catalog/generate.py): x86_64 or arm64 HVM types sold on-demand or
//! spot, the default network card's interface count, bandwidth summed over the cards.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types as ec2;
use kerf_core::catalog::{Accelerator, CapacityType, Gpu, InstanceTypeInfo, NeuronDevice};

/// The facts of one type, or `None` for a type kerf does not launch (other architectures, no HVM, neither
/// on-demand nor spot, incomplete data).
pub fn info_from_ec2(t: &ec2::InstanceTypeInfo) -> Option<InstanceTypeInfo> {
    let name = t.instance_type()?.as_str().to_owned();
    let processor = t.processor_info()?;
    let arch = processor
        .supported_architectures()
        .iter()
        .find_map(|a| match a {
            ec2::ArchitectureType::X8664 => Some("x86_64"),
            ec2::ArchitectureType::Arm64 => Some("arm64"),
            _ => None,
        })?;
    if !t
        .supported_virtualization_types()
        .contains(&ec2::VirtualizationType::Hvm)
    {
        return None;
    }
    let capacity_types: Vec<CapacityType> = t
        .supported_usage_classes()
        .iter()
        .filter_map(|u| match u {
            ec2::UsageClassType::OnDemand => Some(CapacityType::OnDemand),
            ec2::UsageClassType::Spot => Some(CapacityType::Spot),
            _ => None,
        })
        .collect();
    if capacity_types.is_empty() {
        return None;
    }
    let network = t.network_info()?;
    let default_card = network.default_network_card_index().unwrap_or(0);
    let enis = network
        .network_cards()
        .iter()
        .find(|c| c.network_card_index() == Some(default_card))
        .and_then(|c| c.maximum_network_interfaces())
        .or(network.maximum_network_interfaces())?;
    let bandwidth_gbps: f64 = network
        .network_cards()
        .iter()
        .filter_map(|c| c.baseline_bandwidth_in_gbps())
        .sum();
    let ebs = t.ebs_info();
    let ebs_mbps = ebs
        .filter(|e| e.ebs_optimized_support() == Some(&ec2::EbsOptimizedSupport::Default))
        .and_then(|e| e.ebs_optimized_info())
        .and_then(|i| i.maximum_bandwidth_in_mbps())
        .map(i64::from);
    let storage = t
        .instance_storage_info()
        .filter(|s| s.total_size_in_gb().unwrap_or(0) > 0);
    Some(InstanceTypeInfo {
        name,
        arch: arch.to_owned(),
        vcpus: i64::from(t.v_cpu_info()?.default_v_cpus()?),
        memory_mib: t.memory_info()?.size_in_mib()?,
        enis: i64::from(enis),
        ipv4_per_eni: i64::from(network.ipv4_addresses_per_interface()?),
        cpu_manufacturer: processor.manufacturer().map(str::to_owned),
        clock_mhz: processor
            .sustained_clock_speed_in_ghz()
            .map(|ghz| (ghz * 1000.0).round() as i64),
        hypervisor: t.hypervisor().map(|h| h.as_str().to_owned()),
        network_mbps: (bandwidth_gbps > 0.0).then(|| (bandwidth_gbps * 1000.0).round() as i64),
        ebs_mbps,
        encryption_in_transit: network.encryption_in_transit_supported().unwrap_or(false),
        efas: network
            .efa_info()
            .and_then(|e| e.maximum_efa_interfaces())
            .map_or(0, i64::from),
        instance_store_gb: storage.and_then(|s| s.total_size_in_gb()),
        instance_store_nvme: storage
            .and_then(|s| s.nvme_support())
            .is_none_or(|n| *n != ec2::EphemeralNvmeSupport::Unsupported),
        gpus: t
            .gpu_info()
            .map(|g| g.gpus())
            .unwrap_or_default()
            .iter()
            .map(|g| Gpu {
                name: g.name().unwrap_or_default().to_owned(),
                manufacturer: g.manufacturer().unwrap_or_default().to_owned(),
                count: g.count().map_or(0, i64::from),
                memory_mib: g
                    .memory_info()
                    .and_then(|m| m.size_in_mib())
                    .map_or(0, i64::from),
            })
            .collect(),
        inference_accelerators: t
            .inference_accelerator_info()
            .map(|i| i.accelerators())
            .unwrap_or_default()
            .iter()
            .map(|a| Accelerator {
                name: a.name().unwrap_or_default().to_owned(),
                manufacturer: a.manufacturer().unwrap_or_default().to_owned(),
                count: a.count().map_or(0, i64::from),
            })
            .collect(),
        neuron_devices: t
            .neuron_info()
            .map(|n| n.neuron_devices())
            .unwrap_or_default()
            .iter()
            .map(|d| NeuronDevice {
                name: d.name().unwrap_or_default().to_owned(),
                count: d.count().map_or(0, i64::from),
                cores_per_device: d.core_info().and_then(|c| c.count()).map_or(0, i64::from),
            })
            .collect(),
        capacity_types,
        placement_group_strategies: t.placement_group_info().map(|p| {
            p.supported_strategies()
                .iter()
                .map(|s| s.as_str().to_owned())
                .collect()
        }),
    })
}

/// Instance type → the zones that offer it, from DescribeInstanceTypeOfferings (location type
/// availability-zone).
pub fn zones_by_type(
    offerings: &[ec2::InstanceTypeOffering],
) -> BTreeMap<String, BTreeSet<String>> {
    let mut zones: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for offering in offerings {
        if let (Some(t), Some(zone)) = (offering.instance_type(), offering.location()) {
            zones
                .entry(t.as_str().to_owned())
                .or_default()
                .insert(zone.to_owned());
        }
    }
    zones
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m5_large() -> ec2::builders::InstanceTypeInfoBuilder {
        ec2::InstanceTypeInfo::builder()
            .instance_type(ec2::InstanceType::M5Large)
            .supported_usage_classes(ec2::UsageClassType::OnDemand)
            .supported_usage_classes(ec2::UsageClassType::Spot)
            .supported_virtualization_types(ec2::VirtualizationType::Hvm)
            .hypervisor(ec2::InstanceTypeHypervisor::Nitro)
            .processor_info(
                ec2::ProcessorInfo::builder()
                    .supported_architectures(ec2::ArchitectureType::I386)
                    .supported_architectures(ec2::ArchitectureType::X8664)
                    .sustained_clock_speed_in_ghz(3.1)
                    .manufacturer("Intel")
                    .build(),
            )
            .v_cpu_info(ec2::VCpuInfo::builder().default_v_cpus(2).build())
            .memory_info(ec2::MemoryInfo::builder().size_in_mib(8192).build())
            .network_info(
                ec2::NetworkInfo::builder()
                    .maximum_network_interfaces(3)
                    .default_network_card_index(0)
                    .ipv4_addresses_per_interface(10)
                    .network_cards(
                        ec2::NetworkCardInfo::builder()
                            .network_card_index(0)
                            .maximum_network_interfaces(3)
                            .baseline_bandwidth_in_gbps(0.75)
                            .build(),
                    )
                    .build(),
            )
            .ebs_info(
                ec2::EbsInfo::builder()
                    .ebs_optimized_support(ec2::EbsOptimizedSupport::Default)
                    .ebs_optimized_info(
                        ec2::EbsOptimizedInfo::builder()
                            .maximum_bandwidth_in_mbps(4750)
                            .build(),
                    )
                    .build(),
            )
    }

    #[test]
    fn an_ec2_answer_becomes_the_facts_the_catalog_reads() {
        let info = info_from_ec2(&m5_large().build()).unwrap();
        assert_eq!(info.name, "m5.large");
        assert_eq!(
            info.arch, "x86_64",
            "i386 is skipped for the first launchable architecture"
        );
        assert_eq!(
            (info.vcpus, info.memory_mib, info.enis, info.ipv4_per_eni),
            (2, 8192, 3, 10)
        );
        assert_eq!(info.clock_mhz, Some(3100));
        assert_eq!(info.network_mbps, Some(750));
        assert_eq!(info.ebs_mbps, Some(4750));
        assert_eq!(info.hypervisor.as_deref(), Some("nitro"));
        assert_eq!(
            info.capacity_types,
            [CapacityType::OnDemand, CapacityType::Spot]
        );
        assert!(info.gpus.is_empty());
    }

    #[test]
    fn types_kerf_does_not_launch_are_left_out() {
        let mac = m5_large()
            .processor_info(
                ec2::ProcessorInfo::builder()
                    .supported_architectures(ec2::ArchitectureType::X8664Mac)
                    .build(),
            )
            .build();
        assert_eq!(info_from_ec2(&mac), None);
        let no_usage = m5_large().set_supported_usage_classes(None).build();
        assert_eq!(info_from_ec2(&no_usage), None);
        let paravirtual = m5_large()
            .set_supported_virtualization_types(Some(vec![ec2::VirtualizationType::Paravirtual]))
            .build();
        assert_eq!(info_from_ec2(&paravirtual), None);
    }

    #[test]
    fn offerings_group_zones_by_type() {
        let offering = |t: ec2::InstanceType, zone: &str| {
            ec2::InstanceTypeOffering::builder()
                .instance_type(t)
                .location(zone)
                .location_type(ec2::LocationType::AvailabilityZone)
                .build()
        };
        let zones = zones_by_type(&[
            offering(ec2::InstanceType::M5Large, "us-west-2b"),
            offering(ec2::InstanceType::M5Large, "us-west-2a"),
            offering(ec2::InstanceType::C5Large, "us-west-2a"),
        ]);
        assert_eq!(
            zones["m5.large"].iter().collect::<Vec<_>>(),
            ["us-west-2a", "us-west-2b"]
        );
        assert_eq!(zones["c5.large"].len(), 1);
    }
}
