//! An instance type's well-known labels as requirements (api-rules.md §4), set the way Karpenter's AWS provider
//! sets them.
//!
//! Every key Karpenter defines for an instance type is present: `key In [value]` when the type has the
//! value, and `DoesNotExist` (`In []`) when it does not. The empty ones matter: the scheduler intersects
//! requirements, and a key the type left out would let a pod asking for `instance-gpu-count Gt 0` onto a
//! type without GPUs.

use super::family::FamilyTraits;
use super::info::InstanceTypeInfo;
use super::name::parse_name;
use super::offering::{Offering, Reservation};
use crate::api::labels;
use crate::api::requirements::{Requirement, Requirements};

/// The instance-type labels, defined with the other well-known labels in [`crate::api::labels`].
pub use crate::api::labels::{
    CAPACITY_RESERVATION_ID, CAPACITY_RESERVATION_INTERRUPTIBLE, CAPACITY_RESERVATION_TYPE,
    INSTANCE_ACCELERATOR_COUNT, INSTANCE_ACCELERATOR_MANUFACTURER, INSTANCE_ACCELERATOR_NAME,
    INSTANCE_CAPABILITY_FLEX, INSTANCE_CATEGORY, INSTANCE_CPU, INSTANCE_CPU_MANUFACTURER,
    INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ, INSTANCE_EBS_BANDWIDTH,
    INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED, INSTANCE_FAMILY, INSTANCE_GENERATION,
    INSTANCE_GPU_COUNT, INSTANCE_GPU_MANUFACTURER, INSTANCE_GPU_MEMORY, INSTANCE_GPU_NAME,
    INSTANCE_HYPERVISOR, INSTANCE_LOCAL_NVME, INSTANCE_MEMORY, INSTANCE_NETWORK_BANDWIDTH,
    INSTANCE_SIZE, PLACEMENT_GROUP_ID, PLACEMENT_GROUP_PARTITION,
};

/// The Kubernetes architecture of an EC2 one (`x86_64` → `amd64`); unknown ones pass through unchanged.
pub fn kube_arch(ec2_arch: &str) -> &str {
    match ec2_arch {
        "x86_64" => "amd64",
        other => other,
    }
}

/// The requirements every instance type has, from any source: its name, architecture, operating systems, and
/// the zones and capacity types of its offerings (plus zone ids when the offerings know them).
pub(super) fn identity_requirements<'a>(
    name: &str,
    arch: &str,
    os: impl IntoIterator<Item = &'a str>,
    offerings: &[Offering],
) -> Requirements {
    let zone_ids: Vec<&str> = offerings
        .iter()
        .filter_map(|o| o.zone_id.as_deref())
        .collect();
    let mut requirements: Requirements = [
        Requirement::one_of(labels::INSTANCE_TYPE, [name]),
        Requirement::one_of(labels::ARCH, [arch]),
        Requirement::one_of(labels::OS, os),
        Requirement::one_of(labels::ZONE, offerings.iter().map(|o| o.zone.as_str())),
        Requirement::one_of(
            labels::CAPACITY_TYPE,
            offerings.iter().map(|o| o.capacity_type.as_str()),
        ),
    ]
    .into_iter()
    .collect();
    if !zone_ids.is_empty() {
        requirements.add(Requirement::one_of(labels::ZONE_ID, zone_ids));
    }
    if offerings.iter().any(|o| o.reservation.is_some()) {
        requirements.extend(reservation_requirements(offerings));
    }
    requirements
}

/// The reservation keys of a type, over the capacity reservations its `reserved` offerings launch into: their
/// ids, kinds and interruptibility (`DoesNotExist` for a type without any), as Karpenter's AWS provider sets
/// them on the instance type.
fn reservation_requirements(offerings: &[Offering]) -> [Requirement; 3] {
    let reservations = || offerings.iter().filter_map(|o| o.reservation.as_ref());
    [
        Requirement::one_of(
            CAPACITY_RESERVATION_ID,
            reservations().map(|r| r.id.as_str()),
        ),
        Requirement::one_of(
            CAPACITY_RESERVATION_TYPE,
            reservations().map(|r| r.reservation_type.as_str()),
        ),
        Requirement::one_of(
            CAPACITY_RESERVATION_INTERRUPTIBLE,
            reservations().map(Reservation::interruptible_label),
        ),
    ]
}

/// Every well-known label of an EC2 instance type in `region`, for nodes of the given AMI family.
pub(super) fn ec2_requirements(
    info: &InstanceTypeInfo,
    region: &str,
    offerings: &[Offering],
    traits: &FamilyTraits,
) -> Requirements {
    let arch = kube_arch(&info.arch);
    // Windows AMIs exist for amd64 only; an arm64 type then runs no OS at all and never matches.
    let os = match traits.windows_build {
        None => Some("linux"),
        Some(_) => (arch == "amd64").then_some("windows"),
    };
    let mut requirements = identity_requirements(&info.name, arch, os, offerings);
    let name = parse_name(&info.name);
    let gpu = single(&info.gpus);
    let accelerator = accelerator(info);
    let number = |n: i64| n.to_string();
    let set = |key: &str, value: Option<String>| Requirement::one_of(key, value);
    requirements.extend([
        set(labels::REGION, Some(region.to_owned())),
        set(
            labels::WINDOWS_BUILD,
            traits.windows_build.map(str::to_owned),
        ),
        Requirement::one_of(labels::INSTANCE_TENANCY, ["default", "dedicated"]),
        set(INSTANCE_CATEGORY, name.category.map(str::to_owned)),
        set(INSTANCE_FAMILY, name.family.map(str::to_owned)),
        set(INSTANCE_GENERATION, name.generation.map(str::to_owned)),
        set(INSTANCE_SIZE, name.size.map(str::to_owned)),
        set(
            INSTANCE_CAPABILITY_FLEX,
            Some(name.family.is_some_and(|f| f.contains("-flex")).to_string()),
        ),
        set(INSTANCE_CPU, Some(number(info.vcpus))),
        set(
            INSTANCE_CPU_MANUFACTURER,
            info.cpu_manufacturer.as_deref().map(kebab),
        ),
        set(
            INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
            info.clock_mhz.map(number),
        ),
        set(INSTANCE_MEMORY, Some(number(info.memory_mib))),
        set(INSTANCE_HYPERVISOR, info.hypervisor.clone()),
        set(
            INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
            Some(info.encryption_in_transit.to_string()),
        ),
        set(
            INSTANCE_LOCAL_NVME,
            info.instance_store_gb
                .filter(|_| info.instance_store_nvme)
                .map(number),
        ),
        set(INSTANCE_EBS_BANDWIDTH, info.ebs_mbps.map(number)),
        set(INSTANCE_NETWORK_BANDWIDTH, info.network_mbps.map(number)),
        set(INSTANCE_GPU_NAME, gpu.map(|g| kebab(&g.name))),
        set(
            INSTANCE_GPU_MANUFACTURER,
            gpu.map(|g| kebab(&g.manufacturer)),
        ),
        set(INSTANCE_GPU_COUNT, gpu.map(|g| number(g.count))),
        set(INSTANCE_GPU_MEMORY, gpu.map(|g| number(g.memory_mib))),
        set(
            INSTANCE_ACCELERATOR_NAME,
            accelerator.map(|a| kebab(a.name)),
        ),
        set(
            INSTANCE_ACCELERATOR_MANUFACTURER,
            accelerator.map(|a| kebab(a.manufacturer)),
        ),
        set(
            INSTANCE_ACCELERATOR_COUNT,
            accelerator.map(|a| number(a.count)),
        ),
    ]);
    requirements.extend(reservation_requirements(offerings));
    requirements
}

/// What the accelerator labels say.
#[derive(Clone, Copy)]
struct AcceleratorLabels<'a> {
    name: &'a str,
    manufacturer: &'a str,
    count: i64,
}

/// The Neuron device when there is exactly one kind, else the inference accelerator when there is exactly
/// one kind (and no Neuron device).
fn accelerator(info: &InstanceTypeInfo) -> Option<AcceleratorLabels<'_>> {
    if info.neuron_devices.is_empty() {
        single(&info.inference_accelerators).map(|a| AcceleratorLabels {
            name: &a.name,
            manufacturer: &a.manufacturer,
            count: a.count,
        })
    } else {
        single(&info.neuron_devices).map(|d| AcceleratorLabels {
            name: &d.name,
            manufacturer: "aws",
            count: d.count,
        })
    }
}

/// The only element, if there is exactly one: labels cannot describe a mix of GPU kinds.
fn single<T>(items: &[T]) -> Option<&T> {
    match items {
        [only] => Some(only),
        _ => None,
    }
}

/// `NVIDIA` → `nvidia`, `RTX PRO 4500` → `rtx-pro-4500`: label values Karpenter derives from EC2 names.
fn kebab(text: &str) -> String {
    text.to_lowercase().replace(' ', "-")
}
