//! Well-known labels (api-rules.md §4) and the label-domain restrictions on NodePools (§2.3).

pub const NODEPOOL: &str = "karpenter.sh/nodepool";
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const NODE_INITIALIZED: &str = "karpenter.sh/initialized";
pub const NODE_REGISTERED: &str = "karpenter.sh/registered";
pub const EC2NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const ZONE_ID: &str = "topology.k8s.aws/zone-id";
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const ARCH: &str = "kubernetes.io/arch";
pub const OS: &str = "kubernetes.io/os";
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";
pub const INSTANCE_TENANCY: &str = "karpenter.k8s.aws/instance-tenancy";

/// The labels of an instance type's facts, set on the nodes of that type (the catalog gives each type its
/// values: `core/src/catalog/well_known.rs`).
pub const INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
pub const INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
pub const INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
pub const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
pub const INSTANCE_CPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
pub const INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ: &str =
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz";
pub const INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
pub const INSTANCE_HYPERVISOR: &str = "karpenter.k8s.aws/instance-hypervisor";
pub const INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED: &str =
    "karpenter.k8s.aws/instance-encryption-in-transit-supported";
pub const INSTANCE_CAPABILITY_FLEX: &str = "karpenter.k8s.aws/instance-capability-flex";
pub const INSTANCE_LOCAL_NVME: &str = "karpenter.k8s.aws/instance-local-nvme";
pub const INSTANCE_EBS_BANDWIDTH: &str = "karpenter.k8s.aws/instance-ebs-bandwidth";
pub const INSTANCE_NETWORK_BANDWIDTH: &str = "karpenter.k8s.aws/instance-network-bandwidth";
pub const INSTANCE_GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
pub const INSTANCE_GPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
pub const INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
pub const INSTANCE_GPU_MEMORY: &str = "karpenter.k8s.aws/instance-gpu-memory";
pub const INSTANCE_ACCELERATOR_NAME: &str = "karpenter.k8s.aws/instance-accelerator-name";
pub const INSTANCE_ACCELERATOR_MANUFACTURER: &str =
    "karpenter.k8s.aws/instance-accelerator-manufacturer";
pub const INSTANCE_ACCELERATOR_COUNT: &str = "karpenter.k8s.aws/instance-accelerator-count";
pub const CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
pub const CAPACITY_RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";
pub const CAPACITY_RESERVATION_INTERRUPTIBLE: &str =
    "karpenter.k8s.aws/capacity-reservation-interruptible";
/// The placement group a node was launched into, and its partition (only types of a class selecting a group
/// have them).
pub const PLACEMENT_GROUP_ID: &str = "karpenter.k8s.aws/placement-group-id";
pub const PLACEMENT_GROUP_PARTITION: &str = "karpenter.k8s.aws/placement-group-partition";

/// The architecture a kubelet reports when its instance type names none.
pub const ARCH_AMD64: &str = "amd64";
/// The OS of every node kerf launches.
pub const OS_LINUX: &str = "linux";

pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
pub const CAPACITY_TYPE_SPOT: &str = "spot";
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";

/// The AWS provider's `karpenter.k8s.aws/*` keys that NodePools may use (v1.14.1), without the domain.
const AWS_ALLOWED_NAMES: &[&str] = &[
    "instance-category",
    "instance-family",
    "instance-generation",
    "instance-size",
    "instance-hypervisor",
    "instance-encryption-in-transit-supported",
    "instance-capability-flex",
    "instance-local-nvme",
    "instance-tenancy",
    "instance-cpu",
    "instance-cpu-manufacturer",
    "instance-cpu-sustained-clock-speed-mhz",
    "instance-memory",
    "instance-ebs-bandwidth",
    "instance-network-bandwidth",
    "instance-gpu-name",
    "instance-gpu-manufacturer",
    "instance-gpu-count",
    "instance-gpu-memory",
    "instance-accelerator-name",
    "instance-accelerator-manufacturer",
    "instance-accelerator-count",
    "capacity-reservation-id",
    "capacity-reservation-type",
    "capacity-reservation-interruptible",
    "placement-group-id",
    "placement-group-partition",
    "ec2nodeclass",
];

/// The label naming a node's class: `<group>/<lowercased kind>` of the NodePool's `nodeClassRef`
/// (`karpenter.k8s.aws/ec2nodeclass` for an EC2NodeClass), as Karpenter's `NodeClassLabelKey` forms it. Every
/// NodeClaim and Node a pool launches carries it with the class's name.
pub fn node_class_label(group: &str, kind: &str) -> String {
    format!("{group}/{}", kind.to_ascii_lowercase())
}

/// Labels that Karpenter (core + AWS) defines and understands, sorted: what a user may constrain on.
pub fn well_known_labels() -> Vec<String> {
    let core = [
        NODEPOOL,
        CAPACITY_TYPE,
        ZONE,
        REGION,
        ZONE_ID,
        INSTANCE_TYPE,
        ARCH,
        OS,
        WINDOWS_BUILD,
    ];
    let mut labels: Vec<String> = core.iter().map(|s| (*s).to_owned()).collect();
    labels.extend(
        AWS_ALLOWED_NAMES
            .iter()
            .filter(|n| **n != "ec2nodeclass")
            .map(|n| format!("karpenter.k8s.aws/{n}")),
    );
    labels.sort();
    labels
}

/// Maps the deprecated beta keys to their stable forms, as Karpenter's runtime checks do before comparing.
pub fn normalize_key(key: &str) -> &str {
    match key {
        "failure-domain.beta.kubernetes.io/zone" => ZONE,
        "failure-domain.beta.kubernetes.io/region" => REGION,
        "beta.kubernetes.io/arch" => ARCH,
        "beta.kubernetes.io/os" => OS,
        "beta.kubernetes.io/instance-type" | "node.kubernetes.io/instance-type" => INSTANCE_TYPE,
        other => other,
    }
}

/// The values Karpenter knows for a well-known key whose `In` requirements it checks (api-rules.md §2.4 RT).
pub fn known_values(key: &str) -> Option<&'static [&'static str]> {
    match normalize_key(key) {
        CAPACITY_TYPE => Some(&[
            CAPACITY_TYPE_ON_DEMAND,
            CAPACITY_TYPE_RESERVED,
            CAPACITY_TYPE_SPOT,
        ]),
        INSTANCE_TENANCY => Some(&["dedicated", "default"]),
        _ => None,
    }
}

/// The domain of a key: the text before its first `/`, or the whole key.
fn domain(key: &str) -> &str {
    key.split_once('/').map_or(key, |(domain, _)| domain)
}

/// Why a NodePool may not use `key` as a template label or requirement key (rules D1–D4), if it may not.
pub fn restriction(key: &str) -> Option<&'static str> {
    let domain = domain(key);
    if key == NODEPOOL {
        Some("label \"karpenter.sh/nodepool\" is restricted")
    } else if domain.ends_with("karpenter.sh") && key != CAPACITY_TYPE {
        Some("label domain \"karpenter.sh\" is restricted")
    } else if key == HOSTNAME {
        Some("label \"kubernetes.io/hostname\" is restricted")
    } else if domain.ends_with("karpenter.k8s.aws")
        && !key
            .strip_prefix("karpenter.k8s.aws/")
            .is_some_and(|name| AWS_ALLOWED_NAMES.contains(&name))
    {
        Some("label domain \"karpenter.k8s.aws\" is restricted")
    } else {
        None
    }
}

/// The `karpenter.k8s.aws` keys Karpenter's NodeOverlay CRD lets a requirement name: the NodePool list without
/// tenancy, capacity reservations and placement groups (the overlay CRD's rule predates them).
const OVERLAY_AWS_EXCLUDED: &[&str] = &[
    "instance-tenancy",
    "capacity-reservation-id",
    "capacity-reservation-type",
    "capacity-reservation-interruptible",
    "placement-group-id",
    "placement-group-partition",
];

/// Why a NodeOverlay may not use `key` as a requirement key (its CRD's rules): `karpenter.sh` keys other than the
/// capacity type and the pool name, the hostname, and `karpenter.k8s.aws` keys off the overlay's allow-list.
pub fn overlay_restriction(key: &str) -> Option<&'static str> {
    let domain = domain(key);
    if domain.ends_with("karpenter.sh") && key != CAPACITY_TYPE && key != NODEPOOL {
        Some("label domain \"karpenter.sh\" is restricted")
    } else if key == HOSTNAME {
        Some("label \"kubernetes.io/hostname\" is restricted")
    } else if domain.ends_with("karpenter.k8s.aws")
        && !key.strip_prefix("karpenter.k8s.aws/").is_some_and(|name| {
            AWS_ALLOWED_NAMES.contains(&name) && !OVERLAY_AWS_EXCLUDED.contains(&name)
        })
    {
        Some("label domain \"karpenter.k8s.aws\" is restricted")
    } else {
        None
    }
}

/// D5 (RT): keys on the allow-list that Karpenter's runtime still refuses because it sets them itself.
pub fn is_runtime_restricted(key: &str) -> bool {
    key == EC2NODECLASS
}

/// Karpenter's runtime explanation for a restricted key (`<R>` in api-rules.md §2.6).
pub fn runtime_restriction_message(key: &str) -> String {
    format!(
        "using label {key} is not allowed as it might interfere with the internal provisioning logic; specify a well known label: [{}], or a custom label that does not use a restricted domain: [karpenter.k8s.aws karpenter.sh]",
        well_known_labels().join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restrictions_follow_d1_to_d4() {
        assert_eq!(
            restriction("karpenter.sh/nodepool"),
            Some("label \"karpenter.sh/nodepool\" is restricted")
        );
        for d1 in [
            "karpenter.sh/foo",
            "notkarpenter.sh/x",
            "karpenter.sh",
            "karpenter.sh/initialized",
        ] {
            assert_eq!(
                restriction(d1),
                Some("label domain \"karpenter.sh\" is restricted"),
                "{d1}"
            );
        }
        assert_eq!(
            restriction("kubernetes.io/hostname"),
            Some("label \"kubernetes.io/hostname\" is restricted")
        );
        assert_eq!(
            restriction("karpenter.k8s.aws/instance-pods"),
            Some("label domain \"karpenter.k8s.aws\" is restricted")
        );
        assert_eq!(
            restriction("foo.karpenter.k8s.aws/instance-cpu"),
            Some("label domain \"karpenter.k8s.aws\" is restricted")
        );
        for ok in [
            "karpenter.sh/capacity-type",
            "karpenter.k8s.aws/instance-family",
            "karpenter.k8s.aws/ec2nodeclass",
            "node-role.kubernetes.io/gpu",
            "app.kubernetes.io/managed-by",
            "example.com/team",
            "team",
        ] {
            assert_eq!(restriction(ok), None, "{ok}");
        }
    }

    #[test]
    fn well_known_labels_are_sorted_and_exclude_internal_ones() {
        let labels = well_known_labels();
        assert!(labels.windows(2).all(|w| w[0] < w[1]));
        assert!(labels.contains(&INSTANCE_TYPE.to_owned()));
        assert!(!labels.contains(&EC2NODECLASS.to_owned()));
        assert_eq!(normalize_key("beta.kubernetes.io/arch"), ARCH);
    }

    #[test]
    fn the_class_label_is_the_refs_group_and_lowercased_kind() {
        assert_eq!(
            node_class_label("karpenter.k8s.aws", "EC2NodeClass"),
            EC2NODECLASS
        );
    }
}
