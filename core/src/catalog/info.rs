//! The EC2 facts about an instance type that kerf's labels, capacity and overhead derive from: the subset of a
//! `DescribeInstanceTypes` answer Karpenter reads. The embedded catalog stores exactly these fields (see
//! catalog/README.md); refreshing from EC2 fills the same struct.

use serde::Deserialize;

use super::offering::CapacityType;

/// One instance type as EC2 describes it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceTypeInfo {
    /// `m5.large`.
    pub name: String,
    /// The EC2 architecture kerf launches it as: `x86_64` or `arm64`.
    pub arch: String,
    pub vcpus: i64,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: i64,
    /// The most network interfaces the default network card takes.
    pub enis: i64,
    pub ipv4_per_eni: i64,
    /// `Intel`, `AMD`, `AWS`.
    #[serde(default)]
    pub cpu_manufacturer: Option<String>,
    /// Sustained clock speed, rounded to MHz.
    #[serde(default, rename = "clockMHz")]
    pub clock_mhz: Option<i64>,
    /// `nitro` or `xen`; bare metal has none.
    #[serde(default)]
    pub hypervisor: Option<String>,
    /// Baseline network bandwidth over all network cards.
    #[serde(default)]
    pub network_mbps: Option<i64>,
    /// Maximum EBS bandwidth, for types that are EBS-optimized by default.
    #[serde(default)]
    pub ebs_mbps: Option<i64>,
    #[serde(default)]
    pub encryption_in_transit: bool,
    /// The most EFA interfaces the type takes.
    #[serde(default)]
    pub efas: i64,
    /// Total instance-store size, in GB (10^9 bytes).
    #[serde(default, rename = "instanceStoreGB")]
    pub instance_store_gb: Option<i64>,
    /// Whether the instance store is NVMe (it is on every current type).
    #[serde(default = "yes")]
    pub instance_store_nvme: bool,
    #[serde(default)]
    pub gpus: Vec<Gpu>,
    #[serde(default)]
    pub inference_accelerators: Vec<Accelerator>,
    #[serde(default)]
    pub neuron_devices: Vec<NeuronDevice>,
    /// The purchase options EC2 sells it with; on-demand and spot unless listed.
    #[serde(default = "on_demand_and_spot")]
    pub capacity_types: Vec<CapacityType>,
    /// The placement group strategies the type supports (EC2's `PlacementGroupInfo`: `cluster`, `partition`,
    /// `spread`); `None` when unknown (the embedded snapshot), which does not rule the type out.
    #[serde(default)]
    pub placement_group_strategies: Option<Vec<String>>,
}

/// One kind of GPU in an instance type.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gpu {
    /// `T4`, `A10G`, `H100`.
    pub name: String,
    /// `NVIDIA`, `AMD`, `Habana`.
    pub manufacturer: String,
    pub count: i64,
    /// Memory per GPU.
    #[serde(rename = "memoryMiB")]
    pub memory_mib: i64,
}

/// One kind of inference accelerator (`InferenceAcceleratorInfo`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Accelerator {
    pub name: String,
    pub manufacturer: String,
    pub count: i64,
}

/// One kind of AWS Neuron device (Inferentia, Trainium).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NeuronDevice {
    pub name: String,
    pub count: i64,
    pub cores_per_device: i64,
}

fn yes() -> bool {
    true
}

fn on_demand_and_spot() -> Vec<CapacityType> {
    vec![CapacityType::OnDemand, CapacityType::Spot]
}
