//! What the AMI family changes about an instance type's capacity and overhead (Karpenter's per-family feature
//! flags and default block devices).

use crate::api::ec2nodeclass::AmiFamily;

const GIB: i64 = 1 << 30;

/// The family-dependent inputs of the capacity and overhead formulas.
pub(super) struct FamilyTraits {
    /// kube-reserved memory counts the ENI-limited pods, whatever `maxPods` says (AL2, AL2023, Custom).
    pub eni_limited_memory_overhead: bool,
    /// Without `maxPods`, pods are ENI-limited; Windows uses 110 instead.
    pub eni_limited_pod_density: bool,
    /// `podsPerCore` caps pods (not on Bottlerocket, whose settings have no such knob).
    pub pods_per_core: bool,
    /// The `node.kubernetes.io/windows-build` label value, for Windows families.
    pub windows_build: Option<&'static str>,
    /// The block device holding kubelet's and containerd's data, whose size is the ephemeral storage; a
    /// custom AMI's layout is unknown.
    pub ephemeral_device: Option<&'static str>,
    /// That device's size when the EC2NodeClass does not set one.
    pub default_ephemeral_bytes: i64,
}

impl FamilyTraits {
    pub fn of(family: AmiFamily) -> Self {
        let linux = |ephemeral_device| FamilyTraits {
            eni_limited_memory_overhead: true,
            eni_limited_pod_density: true,
            pods_per_core: true,
            windows_build: None,
            ephemeral_device,
            default_ephemeral_bytes: 20 * GIB,
        };
        let windows = |build| FamilyTraits {
            eni_limited_memory_overhead: false,
            eni_limited_pod_density: false,
            pods_per_core: true,
            windows_build: Some(build),
            ephemeral_device: Some("/dev/sda1"),
            default_ephemeral_bytes: 50 * GIB,
        };
        match family {
            AmiFamily::Al2 | AmiFamily::Al2023 => linux(Some("/dev/xvda")),
            AmiFamily::Custom => linux(None),
            // Bottlerocket keeps the OS on /dev/xvda and data on /dev/xvdb.
            AmiFamily::Bottlerocket => FamilyTraits {
                eni_limited_memory_overhead: false,
                pods_per_core: false,
                ..linux(Some("/dev/xvdb"))
            },
            AmiFamily::Windows2019 => windows("10.0.17763"),
            AmiFamily::Windows2022 => windows("10.0.20348"),
            AmiFamily::Windows2025 => windows("10.0.26100"),
        }
    }
}
