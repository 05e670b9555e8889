//! `EC2NodeClass` (karpenter.k8s.aws/v1): every field of the v1.14 spec and status (api-rules.md §3).
//!
//! Every spec field is optional in Rust so that validation can tell "absent" from "present but empty"
//! (api-rules.md §0, "Present"); fields the CRD requires are marked `#[schemars(required)]` instead. The
//! OpenAPI constraints of the upstream CRD (enums, patterns, bounds, list and map sizes, defaults) are
//! attached here with schemars attributes, so they end up both in `kerf crds` and in the generic schema
//! check; the CEL and runtime rules are in `validation.rs`.

use super::defaults::default_metadata_options;
use super::kubelet::KubeletConfiguration;
use crate::condition::Condition;
use crate::schema::fragments;
use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use kube::CustomResource;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// kerf+ (api-rules.md §0.4d): the whole value is a subnet id. Upstream's `subnet-[0-9a-z]+` is unanchored.
pub const SUBNET_ID_PATTERN: &str = r"^subnet-[0-9a-z]+$";
/// kerf+ (api-rules.md §0.4d): the whole value is a security group id. Upstream's `sg-[0-9a-z]+` is unanchored.
pub const SECURITY_GROUP_ID_PATTERN: &str = r"^sg-[0-9a-z]+$";
/// kerf+ (api-rules.md §0.4d): the whole value is an AMI id. Upstream's `ami-[0-9a-z]+` is unanchored.
pub const AMI_ID_PATTERN: &str = r"^ami-[0-9a-z]+$";
/// A capacity reservation id (upstream, already anchored).
pub const CAPACITY_RESERVATION_ID_PATTERN: &str = r"^cr-[0-9a-z]+$";
/// A placement group id (upstream, already anchored).
pub const PLACEMENT_GROUP_ID_PATTERN: &str = r"^pg-[0-9a-z]+$";
/// An AWS account id: exactly 12 digits (upstream).
pub const ACCOUNT_ID_PATTERN: &str = r"^[0-9]{12}$";
/// An EBS volume size: 1–59000Gi, 1–64000G, 1–64Ti or 1–64T, without leading zeros.
///
/// This is upstream's pattern with two slips fixed (kerf+, api-rules.md §3.6): its empty alternatives let a
/// bare `Ti` or `T` through, which can never be decoded as a size, and its `[1-5][0-7]` rejected 18–19Ti,
/// 28–29Ti, … although EBS allows them.
pub const VOLUME_SIZE_PATTERN: &str = r"^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G|([1-9]|[1-5][0-9]|6[0-3]|64)Ti|([1-9]|[1-5][0-9]|6[0-3]|64)T)$";

/// How kerf launches EC2 instances for a NodePool: AMIs, subnets, security groups, IAM, storage, kubelet.
// Each `printcolumn(…)` repeats `type_ = …`, which clippy takes for a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "karpenter.k8s.aws",
    version = "v1",
    kind = "EC2NodeClass",
    plural = "ec2nodeclasses",
    shortname = "ec2nc",
    shortname = "ec2ncs",
    category = "karpenter",
    status = "EC2NodeClassStatus",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Role",
        type_ = "string",
        json_path = ".spec.role",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassSpec {
    /// Subnets to launch into: a subnet matching any term is used.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(required, length(max = 30))]
    pub subnet_selector_terms: Option<Vec<SubnetSelectorTerm>>,
    /// Security groups attached to the nodes: every group matching any term.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(required, length(max = 30))]
    pub security_group_selector_terms: Option<Vec<SecurityGroupSelectorTerm>>,
    /// Capacity reservations (ODCRs, capacity blocks) the nodes may launch into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 30))]
    pub capacity_reservation_selector_terms: Option<Vec<CapacityReservationSelectorTerm>>,
    /// Whether instances get a public IPv4 address; unset follows the subnet's setting.
    #[serde(
        rename = "associatePublicIPAddress",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub associate_public_ip_address: Option<bool>,
    /// How many IPv4 prefixes EC2 assigns to the primary network interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ip_prefix_count: Option<i32>,
    /// AMIs to launch: an alias (`al2023@latest`), or AMIs matching any term.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(required, length(min = 1, max = 30))]
    pub ami_selector_terms: Option<Vec<AmiSelectorTerm>>,
    /// The user-data format and default block devices; inferred from an alias, required without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<AmiFamily>,
    /// User data merged with what kerf needs to join the node to the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// The IAM role of the nodes; kerf manages an instance profile for it. Excludes `instanceProfile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// An existing instance profile for the nodes. Excludes `role`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// Tags applied to instances, volumes and launch templates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
    /// Kubelet settings for the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    /// Block devices of the nodes; without any, the AMI family's defaults apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50))]
    pub block_device_mappings: Option<Vec<BlockDeviceMapping>>,
    /// What to do with instance-store disks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<InstanceStorePolicy>,
    /// Whether CloudWatch detailed monitoring is enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    /// Instance metadata service (IMDS) settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = default_metadata_options()))]
    pub metadata_options: Option<MetadataOptions>,
    /// The reserved `Context` field of EC2 Fleet requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Network interfaces of the nodes (for EFA); without any, EC2 attaches one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 150))]
    pub network_interfaces: Option<Vec<NetworkInterface>>,
    /// A placement group to launch into, by name or id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group_selector: Option<PlacementGroupSelector>,
    /// Connection tracking timeouts of the network interfaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTracking>,
    /// CPU options of the instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_options: Option<CpuOptions>,
}

/// Selects subnets; the fields of one term are ANDed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetSelectorTerm {
    /// Tags the subnet must carry; `*` matches any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "selector_tags")]
    pub tags: Option<BTreeMap<String, String>>,
    /// The subnet id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SUBNET_ID_PATTERN))]
    pub id: Option<String>,
}

/// Selects security groups; the fields of one term are ANDed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroupSelectorTerm {
    /// Tags the group must carry; `*` matches any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "selector_tags")]
    pub tags: Option<BTreeMap<String, String>>,
    /// The security group id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SECURITY_GROUP_ID_PATTERN))]
    pub id: Option<String>,
    /// The security group's name (not its `Name` tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Selects capacity reservations; the fields of one term are ANDed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservationSelectorTerm {
    /// Tags the reservation must carry; `*` matches any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "selector_tags")]
    pub tags: Option<BTreeMap<String, String>>,
    /// The capacity reservation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = CAPACITY_RESERVATION_ID_PATTERN))]
    pub id: Option<String>,
    /// The account that owns the reservation.
    #[serde(rename = "ownerID", default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = ACCOUNT_ID_PATTERN))]
    pub owner_id: Option<String>,
    /// Which launches the reservation accepts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_match_criteria: Option<InstanceMatchCriteria>,
}

/// Selects AMIs; the fields of one term are ANDed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AmiSelectorTerm {
    /// An EKS-optimized AMI as `family@version`, e.g. `al2023@v20240625` or `bottlerocket@latest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 30))]
    pub alias: Option<String>,
    /// Tags the AMI must carry; `*` matches any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "selector_tags")]
    pub tags: Option<BTreeMap<String, String>>,
    /// The AMI id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = AMI_ID_PATTERN))]
    pub id: Option<String>,
    /// The AMI's name (not its `Name` tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The owner: an account id, `self`, `amazon` or `aws-marketplace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The name or ARN of an SSM parameter holding the AMI id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
}

/// The AMI family, which decides the user-data format and default block devices. The declaration order is the
/// CRD's enum order, which the apiserver prints in `Unsupported value` messages.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum AmiFamily {
    #[serde(rename = "AL2")]
    Al2,
    #[serde(rename = "AL2023")]
    Al2023,
    Bottlerocket,
    Custom,
    Windows2019,
    Windows2022,
    Windows2025,
}

/// What to do with instance-store disks.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum InstanceStorePolicy {
    /// Stripe all instance-store NVMe disks into one RAID-0 array for containerd and kubelet.
    #[serde(rename = "RAID0")]
    Raid0,
}

/// Which launches a capacity reservation accepts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InstanceMatchCriteria {
    Open,
    Targeted,
}

impl InstanceMatchCriteria {
    /// The value as EC2 and the CRD spell it: `open` or `targeted`.
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceMatchCriteria::Open => "open",
            InstanceMatchCriteria::Targeted => "targeted",
        }
    }
}

/// One block device of the launched instances.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceMapping {
    /// The device name, e.g. `/dev/xvda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// The EBS volume behind the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
    /// Whether kubelet's root directory lives on this device; at most one mapping may say so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<bool>,
}

/// An EBS volume; EC2 checks the combination of type, size, IOPS and throughput at launch.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDevice {
    /// Whether the volume is deleted when the instance terminates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    /// Whether the volume is encrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// Provisioned IOPS (io1, io2, gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    /// The KMS key (id, alias or ARN) used to encrypt the volume.
    #[serde(rename = "kmsKeyID", default, skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    /// The snapshot the volume is created from.
    #[serde(
        rename = "snapshotID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub snapshot_id: Option<String>,
    /// Throughput in MiB/s (gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    /// MiB/s at which the snapshot is downloaded into the volume; needs `snapshotID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100, max = 300))]
    pub volume_initialization_rate: Option<i32>,
    /// The size, as a string: `20Gi`, `100G`, `1Ti` or `1T`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = VOLUME_SIZE_PATTERN))]
    pub volume_size: Option<String>,
    /// The EBS volume type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<VolumeType>,
}

/// EBS volume types, in the CRD's enum order.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VolumeType {
    Standard,
    Io1,
    Io2,
    Gp2,
    Sc1,
    St1,
    Gp3,
}

/// Instance metadata service (IMDS) settings. Absent members get Karpenter's defaults (see `defaults.rs`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    /// Whether IMDS is reachable from the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = default_metadata_options()["httpEndpoint"]))]
    pub http_endpoint: Option<Toggle>,
    /// Whether IMDS is reachable over IPv6.
    #[serde(
        rename = "httpProtocolIPv6",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("default" = default_metadata_options()["httpProtocolIPv6"]))]
    pub http_protocol_ipv6: Option<Toggle>,
    /// How many network hops an IMDS response may travel; 1 keeps it from pods on other network namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64), extend("default" = default_metadata_options()["httpPutResponseHopLimit"]))]
    pub http_put_response_hop_limit: Option<i64>,
    /// Whether IMDSv2 session tokens are required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = default_metadata_options()["httpTokens"]))]
    pub http_tokens: Option<HttpTokens>,
}

/// An EC2 feature switch.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Toggle {
    Enabled,
    Disabled,
}

/// Whether IMDS requests need a session token (IMDSv2).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HttpTokens {
    Required,
    Optional,
}

/// One network interface of the launched instances.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    /// The network card the interface is attached to.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(required, range(min = 0))]
    pub network_card_index: Option<i32>,
    /// The interface's position on its card.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(required, range(min = 0))]
    pub device_index: Option<i32>,
    /// A regular (ENA, optionally with EFA) interface, or an EFA-only one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(required)]
    pub interface_type: Option<InterfaceType>,
}

/// The kind of a network interface.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum InterfaceType {
    Interface,
    EfaOnly,
}

/// A placement group, by name or by id.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementGroupSelector {
    /// The placement group's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub name: Option<String>,
    /// The placement group's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = PLACEMENT_GROUP_ID_PATTERN))]
    pub id: Option<String>,
}

/// Connection tracking idle timeouts, in seconds.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionTracking {
    /// Idle timeout of established TCP connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 432000))]
    pub tcp_established_timeout: Option<i32>,
    /// Idle timeout of UDP flows that have seen traffic both ways more than once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 180))]
    pub udp_stream_timeout: Option<i32>,
    /// Idle timeout of other UDP flows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 60))]
    pub udp_timeout: Option<i32>,
}

/// CPU options of the launched instances.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuOptions {
    /// Whether the instances may run nested virtual machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested_virtualization: Option<Toggle>,
}

/// What the controller resolved the selectors to, and whether the class is ready.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassStatus {
    /// The subnets the subnet selectors resolved to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnets: Option<Vec<Subnet>>,
    /// The security groups the security group selectors resolved to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_groups: Option<Vec<SecurityGroup>>,
    /// The capacity reservations the reservation selectors resolved to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_reservations: Option<Vec<CapacityReservation>>,
    /// The AMIs the AMI selectors resolved to, with the instance types each applies to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amis: Option<Vec<Ami>>,
    /// The instance profile the nodes use (managed for `role`, or the given `instanceProfile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// Readiness and the state of each resolution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// A resolved subnet.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Subnet {
    pub id: String,
    /// The availability zone, e.g. `us-west-2a`.
    pub zone: String,
    /// The availability zone id, e.g. `usw2-az1`.
    #[serde(rename = "zoneID", default, skip_serializing_if = "Option::is_none")]
    pub zone_id: Option<String>,
}

/// A resolved security group.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroup {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A resolved AMI.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Ami {
    pub id: String,
    /// Whether EC2 has deprecated the AMI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The instance types (architecture, GPU, …) the AMI is used for.
    pub requirements: Vec<NodeSelectorRequirement>,
    /// The device name of the root volume, e.g. `/dev/xvda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_device_name: Option<String>,
    /// The snapshot of the root volume.
    #[serde(
        rename = "rootDeviceSnapshotID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub root_device_snapshot_id: Option<String>,
}

/// A resolved capacity reservation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservation {
    pub availability_zone: String,
    /// When the reservation expires; absent for open-ended reservations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "fragments::date_time")]
    pub end_time: Option<String>,
    #[schemars(regex(pattern = CAPACITY_RESERVATION_ID_PATTERN))]
    pub id: String,
    pub instance_match_criteria: InstanceMatchCriteria,
    pub instance_type: String,
    #[serde(rename = "ownerID")]
    #[schemars(regex(pattern = ACCOUNT_ID_PATTERN))]
    pub owner_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "default"))]
    pub reservation_type: Option<CapacityReservationType>,
    /// `expiring` once a capacity block is within EC2's reclaim window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "active"))]
    pub state: Option<CapacityReservationState>,
    /// Whether EC2 may interrupt instances in the reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruptible: Option<bool>,
}

/// The kind of a capacity reservation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CapacityReservationType {
    #[default]
    Default,
    CapacityBlock,
}

impl CapacityReservationType {
    /// The value as EC2, the CRD and the `karpenter.k8s.aws/capacity-reservation-type` label spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityReservationType::Default => "default",
            CapacityReservationType::CapacityBlock => "capacity-block",
        }
    }
}

/// Whether a capacity reservation can still be launched into.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CapacityReservationState {
    Active,
    Expiring,
}

/// A selector term's `tags`: at most 20 entries.
fn selector_tags(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 20})
}
