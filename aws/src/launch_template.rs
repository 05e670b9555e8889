//! Launch templates: one per unique launch configuration (AMI, user data, security groups, instance
//! profile, metadata options, block devices, network interfaces, monitoring, CPU options, tags, and the
//! capacity reservation targeted), named `karpenter.k8s.aws/<hash of the configuration>`, created the first time
//! a launch needs it and reused after.

use std::collections::BTreeMap;

use aws_sdk_ec2::types as ec2;
use base64::Engine;
use kerf_core::api::ec2nodeclass::{
    AmiFamily, EC2NodeClassSpec, HttpTokens, InterfaceType, Toggle,
};
use kerf_core::cloud::InstancePlacement;

use crate::capacity_reservations::ReservedMarket;

/// The name prefix Karpenter uses; kerf's templates are interchangeable with its in naming.
pub const NAME_PREFIX: &str = "karpenter.k8s.aws/";

/// Everything that goes into one launch template.
#[derive(Clone, Debug, PartialEq)]
pub struct TemplateConfig {
    pub image_id: String,
    pub user_data: String,
    /// The class's resolved security groups; they go on the network interface, not the template's top level.
    pub security_group_ids: Vec<String>,
    pub instance_profile: Option<String>,
    pub metadata: Metadata,
    pub tags: BTreeMap<String, String>,
    pub block_devices: Vec<BlockDevice>,
    pub network_interface: NetworkInterface,
    /// `spec.detailedMonitoring` (CloudWatch detailed monitoring), false when unset.
    pub detailed_monitoring: bool,
    /// `spec.cpuOptions.nestedVirtualization`: `Some(true)` enabled, `Some(false)` disabled, `None` unset.
    pub nested_virtualization: Option<bool>,
    /// Whether instances use capacity reservations, and which.
    pub targeting: Targeting,
    /// The placement group (and partition) instances go into.
    pub placement: Option<InstancePlacement>,
}

/// How a template's instances use capacity reservations (Karpenter's launch modes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Targeting {
    /// The `ReservedCapacity` feature gate is off: nothing is said, so EC2 may place an instance into an open
    /// reservation that matches it, as before reservations were targeted.
    Open,
    /// An on-demand or spot launch with the gate on: kept out of open reservations (`none`), so that reserved
    /// capacity is used only where kerf targets it and counts it.
    NoReservation,
    /// Into this reservation only (`capacity-reservations-only`), in the market its kind needs.
    Only { id: String, market: ReservedMarket },
}

/// What a launch adds to its class's spec to make a [`TemplateConfig`]: the resolved image, security groups
/// and instance profile, the rendered user data, the tags, and the cluster's IP family.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    pub image_id: String,
    pub user_data: String,
    pub security_group_ids: Vec<String>,
    pub instance_profile: Option<String>,
    pub tags: BTreeMap<String, String>,
    /// An IPv6 cluster ([`ipv6_cluster`]).
    pub ipv6: bool,
    pub targeting: Targeting,
    /// EFA interfaces to give instances of a class that lists no `networkInterfaces` (a claim requesting EFA:
    /// one per network card of its type); 0 for none.
    pub efa_interfaces: i32,
    /// The class's placement group, with the partition the claim requires ([`LaunchRequest::placement`]).
    ///
    /// [`LaunchRequest::placement`]: kerf_core::cloud::LaunchRequest::placement
    pub placement: Option<InstancePlacement>,
}

/// Whether the cluster is IPv6, read from its service CIDR: Karpenter asks the family of the kube-dns
/// service's address, which lies in that CIDR. An unknown CIDR counts as IPv4, as an unknown DNS address does
/// for Karpenter.
pub fn ipv6_cluster(service_cidr: Option<&str>) -> bool {
    service_cidr.is_some_and(|cidr| cidr.contains(':'))
}

/// The network interfaces of a launch template: the one primary interface (device index 0) when the class lists
/// no `networkInterfaces`, else one per listed interface, as Karpenter sends them. The security groups go on the
/// interfaces, so the template has no top-level ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkInterface {
    /// `spec.associatePublicIPAddress`; unset follows the subnet.
    pub associate_public_ip_address: Option<bool>,
    /// `spec.ipPrefixCount`: IPv4 prefixes on an IPv4 cluster, IPv6 prefixes on an IPv6 one.
    pub ip_prefix_count: Option<i32>,
    /// An IPv6 cluster: the interface gets a primary IPv6 address (one IPv6 address).
    pub ipv6: bool,
    /// `spec.connectionTracking`, `None` when it sets no timeout.
    pub connection_tracking: Option<ConnectionTracking>,
    /// `spec.networkInterfaces` in the class's order; empty: the primary interface alone, or the EFA ones.
    pub listed: Vec<ListedInterface>,
    /// Without listed interfaces, this many EFA interfaces instead of the primary one (0: none).
    pub efa_interfaces: i32,
}

/// One interface of `spec.networkInterfaces`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedInterface {
    pub network_card_index: i32,
    pub device_index: i32,
    /// An EFA-only interface has no IP addresses: EC2 refuses prefixes, a public address or connection tracking
    /// on it, so none are sent.
    pub efa_only: bool,
}

/// Connection tracking idle timeouts of the network interface, in seconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionTracking {
    pub tcp_established_timeout: Option<i32>,
    pub udp_stream_timeout: Option<i32>,
    pub udp_timeout: Option<i32>,
}

impl NetworkInterface {
    /// The class's interface settings on a cluster of the given family, with `efa_interfaces` EFA interfaces
    /// when the class lists none.
    pub fn of(spec: &EC2NodeClassSpec, ipv6: bool, efa_interfaces: i32) -> Self {
        let connection_tracking = spec
            .connection_tracking
            .as_ref()
            .map(|c| ConnectionTracking {
                tcp_established_timeout: c.tcp_established_timeout,
                udp_stream_timeout: c.udp_stream_timeout,
                udp_timeout: c.udp_timeout,
            })
            .filter(|c| {
                c.tcp_established_timeout.is_some()
                    || c.udp_stream_timeout.is_some()
                    || c.udp_timeout.is_some()
            });
        let listed: Vec<ListedInterface> = spec
            .network_interfaces
            .iter()
            .flatten()
            .map(|ni| ListedInterface {
                network_card_index: ni.network_card_index.unwrap_or(0),
                device_index: ni.device_index.unwrap_or(0),
                efa_only: ni.interface_type == Some(InterfaceType::EfaOnly),
            })
            .collect();
        NetworkInterface {
            associate_public_ip_address: spec.associate_public_ip_address,
            ip_prefix_count: spec.ip_prefix_count,
            ipv6,
            connection_tracking,
            efa_interfaces: if listed.is_empty() { efa_interfaces } else { 0 },
            listed,
        }
    }
}

/// Instance metadata options (IMDS), with Karpenter's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata {
    pub http_endpoint: bool,
    pub http_protocol_ipv6: bool,
    pub hop_limit: i32,
    pub tokens_required: bool,
}

/// An EBS volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockDevice {
    pub device_name: String,
    pub size_gib: Option<i32>,
    pub volume_type: Option<String>,
    pub encrypted: Option<bool>,
    pub delete_on_termination: bool,
    /// Provisioned IOPS; 0 counts as unset, as in Karpenter.
    pub iops: Option<i32>,
    /// Throughput in MiB/s; 0 counts as unset, as in Karpenter.
    pub throughput: Option<i32>,
    pub kms_key_id: Option<String>,
    pub snapshot_id: Option<String>,
    /// MiB/s at which the snapshot is downloaded into the volume.
    pub volume_initialization_rate: Option<i32>,
}

impl Metadata {
    /// The class's metadata options over the defaults (endpoint enabled, IPv6 off, hop limit 1, tokens
    /// required).
    pub fn of(spec: &EC2NodeClassSpec) -> Self {
        let options = spec.metadata_options.as_ref();
        Metadata {
            http_endpoint: options
                .and_then(|o| o.http_endpoint)
                .is_none_or(|t| t == Toggle::Enabled),
            http_protocol_ipv6: options
                .and_then(|o| o.http_protocol_ipv6)
                .is_some_and(|t| t == Toggle::Enabled),
            hop_limit: options
                .and_then(|o| o.http_put_response_hop_limit)
                .and_then(|h| i32::try_from(h).ok())
                .unwrap_or(1),
            tokens_required: options
                .and_then(|o| o.http_tokens)
                .is_none_or(|t| t == HttpTokens::Required),
        }
    }
}

impl BlockDevice {
    /// The class's block devices; without any, its AMI family's defaults as Karpenter sends them: a 20 GiB gp3
    /// root on `/dev/xvda` (AL2023, AL2, and a class whose family is not known), Bottlerocket's 4 GiB OS volume
    /// on `/dev/xvda` and 20 GiB data volume on `/dev/xvdb`, Windows' 50 GiB `/dev/sda1`, and none for `Custom`
    /// (the AMI's own mappings apply). All encrypted gp3.
    pub fn of(spec: &EC2NodeClassSpec) -> Vec<Self> {
        let Some(mappings) = spec
            .block_device_mappings
            .as_ref()
            .filter(|m| !m.is_empty())
        else {
            let volume = |device: &str, size: i32| BlockDevice {
                device_name: device.into(),
                size_gib: Some(size),
                volume_type: Some("gp3".into()),
                encrypted: Some(true),
                delete_on_termination: true,
                iops: None,
                throughput: None,
                kms_key_id: None,
                snapshot_id: None,
                volume_initialization_rate: None,
            };
            return match crate::user_data::family(spec) {
                Some(AmiFamily::Custom) => Vec::new(),
                Some(AmiFamily::Bottlerocket) => {
                    vec![volume("/dev/xvda", 4), volume("/dev/xvdb", 20)]
                }
                Some(AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025) => {
                    vec![volume("/dev/sda1", 50)]
                }
                Some(AmiFamily::Al2 | AmiFamily::Al2023) | None => vec![volume("/dev/xvda", 20)],
            };
        };
        mappings
            .iter()
            .map(|m| {
                let ebs = m.ebs.as_ref();
                BlockDevice {
                    device_name: m.device_name.clone().unwrap_or_else(|| "/dev/xvda".into()),
                    size_gib: ebs
                        .and_then(|e| e.volume_size.as_deref())
                        .and_then(size_gib),
                    volume_type: ebs
                        .and_then(|e| e.volume_type)
                        .and_then(|t| serde_json::to_value(t).ok())
                        .and_then(|v| v.as_str().map(str::to_owned)),
                    encrypted: ebs.and_then(|e| e.encrypted),
                    delete_on_termination: ebs
                        .and_then(|e| e.delete_on_termination)
                        .unwrap_or(true),
                    iops: ebs.and_then(|e| e.iops).and_then(nonzero_i32),
                    throughput: ebs.and_then(|e| e.throughput).and_then(nonzero_i32),
                    kms_key_id: ebs.and_then(|e| e.kms_key_id.clone()),
                    snapshot_id: ebs.and_then(|e| e.snapshot_id.clone()),
                    volume_initialization_rate: ebs.and_then(|e| e.volume_initialization_rate),
                }
            })
            .collect()
    }
}

/// An IOPS or throughput figure as EC2's 32-bit field, `None` for 0 (Karpenter sends none then). A figure
/// beyond 32 bits is sent as the largest one, for EC2 to refuse, rather than dropped.
fn nonzero_i32(n: i64) -> Option<i32> {
    let n = i32::try_from(n).unwrap_or(if n < 0 { i32::MIN } else { i32::MAX });
    (n != 0).then_some(n)
}

/// `spec.cpuOptions.nestedVirtualization` as enabled (`true`) or disabled (`false`).
fn nested_virtualization(spec: &EC2NodeClassSpec) -> Option<bool> {
    spec.cpu_options
        .as_ref()
        .and_then(|c| c.nested_virtualization)
        .map(|t| t == Toggle::Enabled)
}

/// A volume size (`20Gi`, `100G`, `1Ti`, `1T`) in GiB, rounded up; validation admits only these forms.
fn size_gib(size: &str) -> Option<i32> {
    let (digits, unit) = size.split_at(size.find(|c: char| !c.is_ascii_digit())?);
    let n: f64 = digits.parse().ok()?;
    let bytes = match unit {
        "Gi" => n * 1024f64.powi(3),
        "G" => n * 1e9,
        "Ti" => n * 1024f64.powi(4),
        "T" => n * 1e12,
        _ => return None,
    };
    Some((bytes / 1024f64.powi(3)).ceil() as i32)
}

impl TemplateConfig {
    /// The configuration of `launch` for a class with `spec`: everything the spec says about the instance
    /// (metadata options, block devices, network interface, monitoring, CPU options) is read here.
    pub fn new(spec: &EC2NodeClassSpec, launch: Launch) -> Self {
        TemplateConfig {
            image_id: launch.image_id,
            user_data: launch.user_data,
            security_group_ids: launch.security_group_ids,
            instance_profile: launch.instance_profile,
            metadata: Metadata::of(spec),
            tags: launch.tags,
            block_devices: BlockDevice::of(spec),
            network_interface: NetworkInterface::of(spec, launch.ipv6, launch.efa_interfaces),
            detailed_monitoring: spec.detailed_monitoring.unwrap_or(false),
            nested_virtualization: nested_virtualization(spec),
            targeting: launch.targeting,
            placement: launch.placement,
        }
    }

    /// `karpenter.k8s.aws/<16 hex digits>`: the same configuration always gets the same name, from any
    /// kerf version or replica (FNV-1a over a canonical rendering, not a per-process hasher).
    pub fn name(&self) -> String {
        let hash = crate::stable_hash::fnv1a(&format!("{self:?}"));
        format!("{NAME_PREFIX}{hash:016x}")
    }

    /// The template's own tags (the launch's).
    pub fn tag_specification(&self) -> ec2::TagSpecification {
        ec2::TagSpecification::builder()
            .resource_type(ec2::ResourceType::LaunchTemplate)
            .set_tags(Some(self.ec2_tags()))
            .build()
    }

    fn ec2_tags(&self) -> Vec<ec2::Tag> {
        self.tags
            .iter()
            .map(|(k, v)| ec2::Tag::builder().key(k).value(v).build())
            .collect()
    }

    /// The template data EC2 stores.
    pub fn data(&self) -> ec2::RequestLaunchTemplateData {
        let enabled = |on: bool| {
            if on {
                ec2::LaunchTemplateInstanceMetadataEndpointState::Enabled
            } else {
                ec2::LaunchTemplateInstanceMetadataEndpointState::Disabled
            }
        };
        let metadata = ec2::LaunchTemplateInstanceMetadataOptionsRequest::builder()
            .http_endpoint(enabled(self.metadata.http_endpoint))
            .http_protocol_ipv6(if self.metadata.http_protocol_ipv6 {
                ec2::LaunchTemplateInstanceMetadataProtocolIpv6::Enabled
            } else {
                ec2::LaunchTemplateInstanceMetadataProtocolIpv6::Disabled
            })
            .http_put_response_hop_limit(self.metadata.hop_limit)
            .http_tokens(if self.metadata.tokens_required {
                ec2::LaunchTemplateHttpTokensState::Required
            } else {
                ec2::LaunchTemplateHttpTokensState::Optional
            })
            // Always off, as Karpenter sends it: an account default of instance tags in IMDS would otherwise
            // apply, and tag keys with `:` (kerf's own) are not valid there.
            .instance_metadata_tags(ec2::LaunchTemplateInstanceMetadataTagsState::Disabled)
            .build();
        let mut data = ec2::RequestLaunchTemplateData::builder()
            .image_id(&self.image_id)
            .user_data(base64::engine::general_purpose::STANDARD.encode(&self.user_data))
            .set_network_interfaces(Some(self.network_interfaces_data()))
            .monitoring(
                ec2::LaunchTemplatesMonitoringRequest::builder()
                    .enabled(self.detailed_monitoring)
                    .build(),
            )
            .metadata_options(metadata)
            .tag_specifications(
                ec2::LaunchTemplateTagSpecificationRequest::builder()
                    .resource_type(ec2::ResourceType::NetworkInterface)
                    .set_tags(Some(self.ec2_tags()))
                    .build(),
            );
        for device in &self.block_devices {
            let mut ebs = ec2::LaunchTemplateEbsBlockDeviceRequest::builder()
                .delete_on_termination(device.delete_on_termination)
                .set_volume_size(device.size_gib)
                .set_encrypted(device.encrypted)
                .set_iops(device.iops)
                .set_throughput(device.throughput)
                .set_kms_key_id(device.kms_key_id.clone())
                .set_snapshot_id(device.snapshot_id.clone())
                .set_volume_initialization_rate(device.volume_initialization_rate);
            if let Some(volume_type) = &device.volume_type {
                ebs = ebs.volume_type(ec2::VolumeType::from(volume_type.as_str()));
            }
            data = data.block_device_mappings(
                ec2::LaunchTemplateBlockDeviceMappingRequest::builder()
                    .device_name(&device.device_name)
                    .ebs(ebs.build())
                    .build(),
            );
        }
        if let Some(profile) = &self.instance_profile {
            data = data.iam_instance_profile(
                ec2::LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                    .name(profile)
                    .build(),
            );
        }
        data = self.targeting_data(data);
        if let Some(placement) = &self.placement {
            data = data.placement(
                ec2::LaunchTemplatePlacementRequest::builder()
                    .group_id(&placement.group_id)
                    .set_partition_number(placement.partition.and_then(|p| i32::try_from(p).ok()))
                    .build(),
            );
        }
        if let Some(enabled) = self.nested_virtualization {
            data = data.cpu_options(
                ec2::LaunchTemplateCpuOptionsRequest::builder()
                    .nested_virtualization(if enabled {
                        ec2::NestedVirtualizationSpecification::Enabled
                    } else {
                        ec2::NestedVirtualizationSpecification::Disabled
                    })
                    .build(),
            );
        }
        data.build()
    }

    /// The capacity reservation preference (and target, and market) of [`Targeting`].
    fn targeting_data(
        &self,
        data: ec2::builders::RequestLaunchTemplateDataBuilder,
    ) -> ec2::builders::RequestLaunchTemplateDataBuilder {
        let specification = ec2::LaunchTemplateCapacityReservationSpecificationRequest::builder();
        match &self.targeting {
            Targeting::Open => data,
            Targeting::NoReservation => data.capacity_reservation_specification(
                specification
                    .capacity_reservation_preference(ec2::CapacityReservationPreference::None)
                    .build(),
            ),
            Targeting::Only { id, market } => {
                let data = data.capacity_reservation_specification(
                    specification
                        .capacity_reservation_preference(
                            ec2::CapacityReservationPreference::CapacityReservationsOnly,
                        )
                        .capacity_reservation_target(
                            ec2::CapacityReservationTarget::builder()
                                .capacity_reservation_id(id)
                                .build(),
                        )
                        .build(),
                );
                let market = match market {
                    ReservedMarket::Default => return data,
                    ReservedMarket::CapacityBlock => ec2::MarketType::CapacityBlock,
                    ReservedMarket::Interruptible => {
                        ec2::MarketType::InterruptibleCapacityReservation
                    }
                };
                data.instance_market_options(
                    ec2::LaunchTemplateInstanceMarketOptionsRequest::builder()
                        .market_type(market)
                        .build(),
                )
            }
        }
    }

    /// The template's interfaces: without `networkInterfaces` the primary one (device index 0), or for a claim
    /// requesting EFA one `efa` interface per network card; else each listed one on its card and device with its
    /// type. Every interface carries the security groups; an interface with
    /// addresses (all but EFA-only ones) also the public-address choice, the prefix count of the cluster's family
    /// (and on IPv6 a primary IPv6 address) and the connection tracking timeouts.
    fn network_interfaces_data(
        &self,
    ) -> Vec<ec2::LaunchTemplateInstanceNetworkInterfaceSpecificationRequest> {
        let builder = || {
            ec2::LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                .set_groups(Some(self.security_group_ids.clone()))
        };
        let ni = &self.network_interface;
        if ni.listed.is_empty() && ni.efa_interfaces > 0 {
            // One per network card; device index 0 on the first card only, so that it is the primary one.
            return (0..ni.efa_interfaces)
                .map(|card| {
                    let interface = builder()
                        .network_card_index(card)
                        .device_index(if card == 0 { 0 } else { 1 })
                        .interface_type("efa");
                    self.addressed(interface).build()
                })
                .collect();
        }
        if ni.listed.is_empty() {
            return vec![self.addressed(builder().device_index(0)).build()];
        }
        self.network_interface
            .listed
            .iter()
            .map(|listed| {
                let interface = builder()
                    .network_card_index(listed.network_card_index)
                    .device_index(listed.device_index);
                if listed.efa_only {
                    interface.interface_type("efa-only").build()
                } else {
                    self.addressed(interface.interface_type("interface"))
                        .build()
                }
            })
            .collect()
    }

    /// `interface` with the address settings of an interface that has addresses.
    fn addressed(
        &self,
        interface: ec2::builders::LaunchTemplateInstanceNetworkInterfaceSpecificationRequestBuilder,
    ) -> ec2::builders::LaunchTemplateInstanceNetworkInterfaceSpecificationRequestBuilder {
        let ni = &self.network_interface;
        let mut interface =
            interface.set_associate_public_ip_address(ni.associate_public_ip_address);
        interface = if ni.ipv6 {
            interface
                .set_ipv6_prefix_count(ni.ip_prefix_count)
                .primary_ipv6(true)
                .ipv6_address_count(1)
        } else {
            interface.set_ipv4_prefix_count(ni.ip_prefix_count)
        };
        if let Some(tracking) = &ni.connection_tracking {
            interface = interface.connection_tracking_specification(
                ec2::ConnectionTrackingSpecificationRequest::builder()
                    .set_tcp_established_timeout(tracking.tcp_established_timeout)
                    .set_udp_stream_timeout(tracking.udp_stream_timeout)
                    .set_udp_timeout(tracking.udp_timeout)
                    .build(),
            );
        }
        interface
    }
}

#[cfg(test)]
mod tests;

/// How long a launch template this process has not used is kept after its creation.
pub const MAX_UNUSED_AGE: std::time::Duration = std::time::Duration::from_secs(60 * 60);

/// The templates among `listed` (name, creation time) to delete at `now`: kerf's, not among those this process
/// uses (`in_use`), created at least [`MAX_UNUSED_AGE`] ago. Deleting one that is still wanted costs only its
/// re-creation at the next launch.
pub fn unused_templates<'a>(
    listed: &'a [(String, std::time::SystemTime)],
    in_use: &std::collections::HashSet<String>,
    now: std::time::SystemTime,
) -> Vec<&'a str> {
    listed
        .iter()
        .filter(|(name, _)| name.starts_with(NAME_PREFIX) && !in_use.contains(name))
        .filter(|(_, created)| {
            now.duration_since(*created)
                .is_ok_and(|age| age >= MAX_UNUSED_AGE)
        })
        .map(|(name, _)| name.as_str())
        .collect()
}

#[cfg(test)]
mod unused_tests {
    use super::*;
    use std::collections::HashSet;
    use std::time::{Duration, SystemTime};

    #[test]
    fn only_old_unused_kerf_templates_are_collected() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let hour = Duration::from_secs(3600);
        let listed = vec![
            (format!("{NAME_PREFIX}old"), now - hour),
            (format!("{NAME_PREFIX}young"), now - hour / 2),
            (format!("{NAME_PREFIX}used"), now - hour * 5),
            ("someone-elses".to_owned(), now - hour * 5),
        ];
        let in_use = HashSet::from([format!("{NAME_PREFIX}used")]);
        assert_eq!(
            unused_templates(&listed, &in_use, now),
            [format!("{NAME_PREFIX}old")]
        );
    }
}
