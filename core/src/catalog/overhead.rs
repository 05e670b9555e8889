//! Capacity and overhead of an EC2 instance type: Karpenter's AWS formulas (controller-behaviour.md §1.6).
//!
//! Allocatable = capacity − (kube-reserved + system-reserved + eviction threshold). Floating-point steps
//! are done in the same order as Karpenter's so the results match it to the byte.

use super::family::FamilyTraits;
use super::info::InstanceTypeInfo;
use super::resources::{
    Resources, AMD_GPU, AWS_NEURON, AWS_NEURON_CORE, EFA, HABANA_GAUDI, NVIDIA_GPU,
    PRIVATE_IPV4_ADDRESS,
};
use super::settings::{CatalogSettings, EvictionThreshold};
use super::well_known::kube_arch;
use crate::api::ec2nodeclass::InstanceStorePolicy;

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;
/// Pods per node when neither `maxPods` nor the ENI limit applies (Windows): the kubelet default.
const DEFAULT_MAX_PODS: i64 = 110;
/// Graviton kernels reserve 64 MiB for the contiguous memory allocator.
const ARM64_CMA_MIB: i64 = 64;
/// kube-reserved CPU: a share of each slice of millicores `[start, end)`.
const KUBE_RESERVED_CPU_TIERS: [(i64, i64, f64); 4] = [
    (0, 1_000, 0.06),
    (1_000, 2_000, 0.01),
    (2_000, 4_000, 0.005),
    (4_000, 1 << 31, 0.0025),
];

/// What the node reports as capacity.
pub(super) fn capacity(
    info: &InstanceTypeInfo,
    settings: &CatalogSettings,
    traits: &FamilyTraits,
) -> Resources {
    let mut capacity = Resources {
        cpu: info.vcpus.saturating_mul(1_000),
        memory: memory(info, settings.vm_memory_overhead_percent),
        pods: pods(info, settings, traits),
        ephemeral_storage: ephemeral_storage(info, settings, traits),
        ..Resources::default()
    };
    for gpu in &info.gpus {
        let resource = match gpu.manufacturer.as_str() {
            "NVIDIA" => NVIDIA_GPU,
            "AMD" => AMD_GPU,
            "Habana" => HABANA_GAUDI,
            _ => continue,
        };
        add_extended(&mut capacity, resource, gpu.count);
    }
    for device in &info.neuron_devices {
        add_extended(&mut capacity, AWS_NEURON, device.count);
    }
    if let Some(device) = info.neuron_devices.first() {
        add_extended(
            &mut capacity,
            AWS_NEURON_CORE,
            device.count.saturating_mul(device.cores_per_device),
        );
    }
    // Interfaces set on the EC2NodeClass replace what the type could take.
    let efas = settings
        .network_interfaces
        .map_or(info.efas, |interfaces| interfaces.efa_only);
    add_extended(&mut capacity, EFA, efas);
    if traits.windows_build.is_some() && kube_arch(&info.arch) == "amd64" {
        add_extended(&mut capacity, PRIVATE_IPV4_ADDRESS, info.ipv4_per_eni - 1);
    }
    capacity
}

/// kube-reserved + system-reserved + eviction threshold, for a node with `capacity`.
pub(super) fn overhead(
    info: &InstanceTypeInfo,
    settings: &CatalogSettings,
    traits: &FamilyTraits,
    capacity: &Resources,
) -> Resources {
    let kubelet = &settings.kubelet;
    let memory_pods = if traits.eni_limited_memory_overhead {
        eni_limited_pods(info, 0, efa_only_on_card_0(settings))
    } else {
        capacity.pods
    };
    let mut kube_reserved = Resources {
        cpu: kube_reserved_cpu(capacity.cpu),
        memory: (11 * memory_pods + 255) * MIB,
        ephemeral_storage: GIB,
        ..Resources::default()
    };
    let mut system_reserved = Resources::default();
    for (reserved, overrides) in [
        (&mut kube_reserved, &kubelet.kube_reserved),
        (&mut system_reserved, &kubelet.system_reserved),
    ] {
        for (name, amount) in overrides {
            reserved.set(name, *amount);
        }
    }
    let eviction = Resources {
        memory: kubelet
            .eviction_memory_available
            .map_or(100 * MIB, |threshold| threshold.of(capacity.memory)),
        ephemeral_storage: kubelet
            .eviction_nodefs_available
            .unwrap_or(EvictionThreshold::Percent(10.0))
            .of(capacity.ephemeral_storage),
        ..Resources::default()
    };
    kube_reserved + &system_reserved + &eviction
}

/// Memory in bytes: MiB, less 64 MiB on arm64, less `ceil(that × overhead percent)` MiB for the hypervisor.
fn memory(info: &InstanceTypeInfo, overhead_percent: f64) -> i64 {
    let arm64 = if info.arch == "arm64" {
        ARM64_CMA_MIB
    } else {
        0
    };
    let bytes = (info.memory_mib - arm64) * MIB;
    let overhead_mib = (bytes as f64 * overhead_percent / 1024.0 / 1024.0).ceil() as i64;
    bytes - overhead_mib * MIB
}

/// `maxPods`, else the ENI limit (110 on Windows), then capped at `podsPerCore × vCPUs` where supported.
fn pods(info: &InstanceTypeInfo, settings: &CatalogSettings, traits: &FamilyTraits) -> i64 {
    let kubelet = &settings.kubelet;
    let pods = match kubelet.max_pods {
        Some(max_pods) => max_pods,
        None if traits.eni_limited_pod_density => {
            eni_limited_pods(info, settings.reserved_enis, efa_only_on_card_0(settings))
        }
        None => DEFAULT_MAX_PODS,
    };
    match kubelet.pods_per_core {
        Some(per_core) if per_core > 0 && traits.pods_per_core => {
            pods.min(per_core.saturating_mul(info.vcpus))
        }
        _ => pods,
    }
}

/// The VPC CNI limit: usable ENIs × (IPv4 addresses per ENI − 1) + 2, where the first address of each ENI is
/// the ENI's own and the 2 are host-network pods (aws-node, kube-proxy). Only the default network card
/// counts; reserved and EFA-only interfaces on it are not usable.
fn eni_limited_pods(info: &InstanceTypeInfo, reserved_enis: i64, efa_only: i64) -> i64 {
    let usable = (info.enis - reserved_enis - efa_only).max(0);
    if usable == 0 {
        0
    } else {
        usable * (info.ipv4_per_eni - 1) + 2
    }
}

fn efa_only_on_card_0(settings: &CatalogSettings) -> i64 {
    settings
        .network_interfaces
        .map_or(0, |interfaces| interfaces.efa_only_on_card_0)
}

/// 6 % of the first core, 1 % of the second, 0.5 % of the third and fourth, 0.25 % of the rest; each
/// slice truncated to whole millicores.
fn kube_reserved_cpu(millicores: i64) -> i64 {
    KUBE_RESERVED_CPU_TIERS
        .iter()
        .filter(|(start, _, _)| millicores >= *start)
        .map(|(start, end, share)| ((millicores.min(*end) - start) as f64 * share) as i64)
        .sum()
}

/// The instance store striped as RAID0 when the policy says so, else the data volume.
fn ephemeral_storage(
    info: &InstanceTypeInfo,
    settings: &CatalogSettings,
    traits: &FamilyTraits,
) -> i64 {
    let raid0 = settings.instance_store_policy == Some(InstanceStorePolicy::Raid0);
    match info.instance_store_gb.filter(|_| raid0) {
        Some(gb) => gb.saturating_mul(1_000_000_000),
        None => settings
            .root_volume_bytes
            .unwrap_or(traits.default_ephemeral_bytes),
    }
}

fn add_extended(resources: &mut Resources, name: &str, amount: i64) {
    if amount > 0 {
        let entry = resources.extended.entry(name.to_owned()).or_insert(0);
        *entry = entry.saturating_add(amount);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_reserved_cpu_follows_the_tiers() {
        assert_eq!(kube_reserved_cpu(1_000), 60);
        assert_eq!(kube_reserved_cpu(2_000), 70);
        assert_eq!(kube_reserved_cpu(4_000), 80);
        // 60 + 10 + 10 + 0.0025 × 4000 = 90
        assert_eq!(kube_reserved_cpu(8_000), 90);
        // 80 + 0.0025 × 92000 = 310
        assert_eq!(kube_reserved_cpu(96_000), 310);
        // a fraction of a core: 6 % of 500m = 30m
        assert_eq!(kube_reserved_cpu(500), 30);
    }
}
