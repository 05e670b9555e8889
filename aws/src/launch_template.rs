//! Launch templates: one per unique launch configuration (AMI, user data, security groups, instance
//! profile, metadata options, block devices, tags), named `karpenter.k8s.aws/<hash of the configuration>`,
//! created the first time a launch needs it and reused after.

use std::collections::BTreeMap;

use aws_sdk_ec2::types as ec2;
use base64::Engine;
use kerf::api::ec2nodeclass::{EC2NodeClassSpec, HttpTokens, Toggle};

/// The name prefix Karpenter uses; kerf's templates are interchangeable with its in naming.
pub const NAME_PREFIX: &str = "karpenter.k8s.aws/";

/// Everything that goes into one launch template.
#[derive(Clone, Debug, PartialEq)]
pub struct TemplateConfig {
    pub image_id: String,
    pub user_data: String,
    pub security_group_ids: Vec<String>,
    pub instance_profile: Option<String>,
    pub metadata: Metadata,
    pub tags: BTreeMap<String, String>,
    pub block_devices: Vec<BlockDevice>,
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
    /// The class's block devices; AL2023's root volume (20 GiB gp3 on /dev/xvda, encrypted) when it lists none.
    pub fn of(spec: &EC2NodeClassSpec) -> Vec<Self> {
        let Some(mappings) = spec
            .block_device_mappings
            .as_ref()
            .filter(|m| !m.is_empty())
        else {
            return vec![BlockDevice {
                device_name: "/dev/xvda".into(),
                size_gib: Some(20),
                volume_type: Some("gp3".into()),
                encrypted: Some(true),
                delete_on_termination: true,
            }];
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
                }
            })
            .collect()
    }
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
            .build();
        let mut data = ec2::RequestLaunchTemplateData::builder()
            .image_id(&self.image_id)
            .user_data(base64::engine::general_purpose::STANDARD.encode(&self.user_data))
            .set_security_group_ids(Some(self.security_group_ids.clone()))
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
                .set_encrypted(device.encrypted);
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
        data.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> TemplateConfig {
        TemplateConfig {
            image_id: "ami-1".into(),
            user_data: "data".into(),
            security_group_ids: vec!["sg-1".into()],
            instance_profile: None,
            metadata: Metadata::of(&EC2NodeClassSpec::default()),
            tags: BTreeMap::new(),
            block_devices: BlockDevice::of(&EC2NodeClassSpec::default()),
        }
    }

    #[test]
    fn names_are_stable_and_differ_with_the_configuration() {
        let name = config().name();
        assert!(name.starts_with("karpenter.k8s.aws/"));
        assert_eq!(name.len(), "karpenter.k8s.aws/".len() + 16);
        assert_eq!(name, config().name());
        let other = TemplateConfig {
            image_id: "ami-2".into(),
            ..config()
        };
        assert_ne!(name, other.name());
    }

    #[test]
    fn defaults_are_imds_v2_with_hop_limit_one_and_a_20_gib_gp3_root() {
        let c = config();
        assert_eq!(
            c.metadata,
            Metadata {
                http_endpoint: true,
                http_protocol_ipv6: false,
                hop_limit: 1,
                tokens_required: true
            }
        );
        assert_eq!(c.block_devices[0].size_gib, Some(20));
        assert_eq!(c.block_devices[0].volume_type.as_deref(), Some("gp3"));
    }

    #[test]
    fn volume_sizes_convert_to_gib() {
        assert_eq!(size_gib("20Gi"), Some(20));
        assert_eq!(size_gib("100G"), Some(94));
        assert_eq!(size_gib("1Ti"), Some(1024));
        assert_eq!(size_gib("1T"), Some(932));
        assert_eq!(size_gib("20"), None);
        assert_eq!(size_gib("Gi"), None);
    }
}

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
