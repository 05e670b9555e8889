//! The CEL validation rules (`x-kubernetes-validations`) that Karpenter v1.14's CRDs carry, in one table, placed at
//! the same schema paths by `crds::structural`. With them the apiserver (1.25 and newer) refuses the specs Karpenter's
//! CRDs refuse even while kerf's webhook is unavailable; the webhook implements every one of these rules itself (with
//! the same messages) and more, so it stays the stricter layer (docs/admission.md, "CEL rules in the CRDs").
//!
//! Sources, all at tag v1.14.1:
//! * kubernetes-sigs/karpenter `pkg/apis/v1/nodepool.go` and `nodeclaim.go` (`+kubebuilder:validation:XValidation`
//!   markers), and `hack/validation/labels.sh` / `requirements.sh`, which add the `karpenter.sh` label rules;
//! * aws/karpenter-provider-aws `hack/validation/labels.sh` / `requirements.sh` (the `karpenter.k8s.aws` label
//!   rules, added to the karpenter.sh CRDs it ships) and `pkg/apis/v1/ec2nodeclass.go` (every EC2NodeClass rule).
//!
//! The generated result equals `pkg/apis/crds/*.yaml` of aws/karpenter-provider-aws v1.14.1 rule for rule, in
//! upstream's order. The rule and message texts are upstream's, byte for byte: they are API surface (users match on
//! the messages). Upstream uses no `messageExpression`, `reason` or `fieldPath`.

/// The CRD a rule belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crd {
    NodePool,
    NodeClaim,
    EC2NodeClass,
    NodeOverlay,
    CapacityBuffer,
}

impl Crd {
    /// The CRD's `spec.names.kind`.
    pub fn kind(self) -> &'static str {
        match self {
            Crd::NodePool => "NodePool",
            Crd::NodeClaim => "NodeClaim",
            Crd::EC2NodeClass => "EC2NodeClass",
            Crd::NodeOverlay => "NodeOverlay",
            Crd::CapacityBuffer => "CapacityBuffer",
        }
    }
}

/// One `x-kubernetes-validations` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CelRule {
    pub rule: &'static str,
    pub message: &'static str,
}

/// The rules at one schema node. `path` names the node from the schema root: fields separated by `.`, and `[]`
/// after a list field for its items (`spec.template.spec.requirements[].key`).
#[derive(Debug, Clone, Copy)]
pub struct Placement {
    pub crd: Crd,
    pub path: &'static str,
    pub rules: &'static [CelRule],
}

// NodeClassReference (nodeclaim.go): shared by NodePool templates and NodeClaims.
const GROUP_NOT_EMPTY: &[CelRule] = &[CelRule {
    rule: "self != ''",
    message: "group may not be empty",
}];
const KIND_NOT_EMPTY: &[CelRule] = &[CelRule {
    rule: "self != ''",
    message: "kind may not be empty",
}];
const NAME_NOT_EMPTY: &[CelRule] = &[CelRule {
    rule: "self != ''",
    message: "name may not be empty",
}];

// NodeClaimTemplateSpec and NodeClaimSpec requirements (nodepool.go, nodeclaim.go).
const REQUIREMENTS: &[CelRule] = &[
    CelRule {
        rule: "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
        message: "requirements with operator 'In' must have a value defined",
    },
    CelRule {
        rule: "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
        message: "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
    },
    CelRule {
        rule: "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)",
        message: "requirements with 'minValues' must have at least that many values specified in the 'values' field",
    },
];

// Requirement keys (core and AWS hack/validation/requirements.sh). NodeClaims lack the nodepool-key rule.
const KEY_KARPENTER_SH_DOMAIN: CelRule = CelRule {
    rule: r#"self in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || !self.find("^([^/]+)").endsWith("karpenter.sh")"#,
    message: r#"label domain "karpenter.sh" is restricted"#,
};
const KEY_NODEPOOL: CelRule = CelRule {
    rule: r#"self != "karpenter.sh/nodepool""#,
    message: r#"label "karpenter.sh/nodepool" is restricted"#,
};
const KEY_HOSTNAME: CelRule = CelRule {
    rule: r#"self != "kubernetes.io/hostname""#,
    message: r#"label "kubernetes.io/hostname" is restricted"#,
};
const KEY_AWS_DOMAIN: CelRule = CelRule {
    rule: r#"self in ["karpenter.k8s.aws/instance-tenancy", "karpenter.k8s.aws/capacity-reservation-type", "karpenter.k8s.aws/capacity-reservation-id", "karpenter.k8s.aws/capacity-reservation-interruptible", "karpenter.k8s.aws/ec2nodeclass", "karpenter.k8s.aws/instance-encryption-in-transit-supported", "karpenter.k8s.aws/instance-category", "karpenter.k8s.aws/instance-hypervisor", "karpenter.k8s.aws/instance-family", "karpenter.k8s.aws/instance-generation", "karpenter.k8s.aws/instance-local-nvme", "karpenter.k8s.aws/instance-size", "karpenter.k8s.aws/instance-cpu", "karpenter.k8s.aws/instance-cpu-manufacturer", "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz", "karpenter.k8s.aws/instance-memory", "karpenter.k8s.aws/instance-ebs-bandwidth", "karpenter.k8s.aws/instance-network-bandwidth", "karpenter.k8s.aws/instance-gpu-name", "karpenter.k8s.aws/instance-gpu-manufacturer", "karpenter.k8s.aws/instance-gpu-count", "karpenter.k8s.aws/instance-gpu-memory", "karpenter.k8s.aws/instance-accelerator-name", "karpenter.k8s.aws/instance-accelerator-manufacturer", "karpenter.k8s.aws/instance-accelerator-count", "karpenter.k8s.aws/instance-capability-flex", "karpenter.k8s.aws/placement-group-id", "karpenter.k8s.aws/placement-group-partition"] || !self.find("^([^/]+)").endsWith("karpenter.k8s.aws")"#,
    message: r#"label domain "karpenter.k8s.aws" is restricted"#,
};
const NODEPOOL_REQUIREMENT_KEY: &[CelRule] = &[
    KEY_KARPENTER_SH_DOMAIN,
    KEY_NODEPOOL,
    KEY_HOSTNAME,
    KEY_AWS_DOMAIN,
];
const NODECLAIM_REQUIREMENT_KEY: &[CelRule] =
    &[KEY_KARPENTER_SH_DOMAIN, KEY_HOSTNAME, KEY_AWS_DOMAIN];

// NodePool template labels (core and AWS hack/validation/labels.sh). Upstream's AWS list names
// capacity-reservation-interruptible twice; it is kept as upstream has it.
const NODEPOOL_LABELS: &[CelRule] = &[
    CelRule {
        rule: r#"self.all(x, x in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || !x.find("^([^/]+)").endsWith("karpenter.sh"))"#,
        message: r#"label domain "karpenter.sh" is restricted"#,
    },
    CelRule {
        rule: r#"self.all(x, x != "karpenter.sh/nodepool")"#,
        message: r#"label "karpenter.sh/nodepool" is restricted"#,
    },
    CelRule {
        rule: r#"self.all(x, x != "kubernetes.io/hostname")"#,
        message: r#"label "kubernetes.io/hostname" is restricted"#,
    },
    CelRule {
        rule: r#"self.all(x, x in ["karpenter.k8s.aws/instance-tenancy", "karpenter.k8s.aws/capacity-reservation-type", "karpenter.k8s.aws/capacity-reservation-id", "karpenter.k8s.aws/capacity-reservation-interruptible", "karpenter.k8s.aws/capacity-reservation-interruptible", "karpenter.k8s.aws/ec2nodeclass", "karpenter.k8s.aws/instance-encryption-in-transit-supported", "karpenter.k8s.aws/instance-category", "karpenter.k8s.aws/instance-hypervisor", "karpenter.k8s.aws/instance-family", "karpenter.k8s.aws/instance-generation", "karpenter.k8s.aws/instance-local-nvme", "karpenter.k8s.aws/instance-size", "karpenter.k8s.aws/instance-cpu", "karpenter.k8s.aws/instance-cpu-manufacturer", "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz", "karpenter.k8s.aws/instance-memory", "karpenter.k8s.aws/instance-ebs-bandwidth", "karpenter.k8s.aws/instance-network-bandwidth", "karpenter.k8s.aws/instance-gpu-name", "karpenter.k8s.aws/instance-gpu-manufacturer", "karpenter.k8s.aws/instance-gpu-count", "karpenter.k8s.aws/instance-gpu-memory", "karpenter.k8s.aws/instance-accelerator-name", "karpenter.k8s.aws/instance-accelerator-manufacturer", "karpenter.k8s.aws/instance-accelerator-count", "karpenter.k8s.aws/instance-capability-flex", "karpenter.k8s.aws/placement-group-id", "karpenter.k8s.aws/placement-group-partition"] || !x.find("^([^/]+)").endsWith("karpenter.k8s.aws"))"#,
        message: r#"label domain "karpenter.k8s.aws" is restricted"#,
    },
];

// NodeOverlay (kubernetes-sigs/karpenter `pkg/apis/v1alpha1/nodeoverlay.go`; the key rules as the AWS provider's
// `pkg/apis/crds/karpenter.sh_nodeoverlays.yaml` carries them, with the overlay's own AWS list).
const OVERLAY_REQUIREMENTS: &[CelRule] = &[
    CelRule {
        rule: "self.all(x, x.operator == 'NotIn' ? x.values.size() != 0 : true)",
        message: "requirements with operator 'NotIn' must have a value defined",
    },
    CelRule {
        rule: "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
        message: "requirements with operator 'In' must have a value defined",
    },
    CelRule {
        rule: "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
        message: "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
    },
];
const OVERLAY_REQUIREMENT_KEY: &[CelRule] = &[
    KEY_KARPENTER_SH_DOMAIN,
    KEY_HOSTNAME,
    CelRule {
        rule: r#"self in ["karpenter.k8s.aws/ec2nodeclass", "karpenter.k8s.aws/instance-encryption-in-transit-supported", "karpenter.k8s.aws/instance-category", "karpenter.k8s.aws/instance-hypervisor", "karpenter.k8s.aws/instance-family", "karpenter.k8s.aws/instance-generation", "karpenter.k8s.aws/instance-local-nvme", "karpenter.k8s.aws/instance-size", "karpenter.k8s.aws/instance-cpu", "karpenter.k8s.aws/instance-cpu-manufacturer", "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz", "karpenter.k8s.aws/instance-memory", "karpenter.k8s.aws/instance-ebs-bandwidth", "karpenter.k8s.aws/instance-network-bandwidth", "karpenter.k8s.aws/instance-gpu-name", "karpenter.k8s.aws/instance-gpu-manufacturer", "karpenter.k8s.aws/instance-gpu-count", "karpenter.k8s.aws/instance-gpu-memory", "karpenter.k8s.aws/instance-accelerator-name", "karpenter.k8s.aws/instance-accelerator-manufacturer", "karpenter.k8s.aws/instance-accelerator-count", "karpenter.k8s.aws/instance-capability-flex"] || !self.find("^([^/]+)").endsWith("karpenter.k8s.aws")"#,
        message: r#"label domain "karpenter.k8s.aws" is restricted"#,
    },
];

// EC2NodeClass selector terms' tags (ec2nodeclass.go), at four paths.
const SELECTOR_TAGS: CelRule = CelRule {
    rule: "self.all(k, k != '' && self[k] != '')",
    message: "empty tag keys or values aren't supported",
};

// EC2NodeClass kubelet maps (ec2nodeclass.go): the same checks on several maps, each with its own message.
const EVICTION_SIGNAL_KEYS: &str = "self.all(x, x in ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available'])";
const RESERVED_KEYS: &str =
    "self.all(x, x=='cpu' || x=='memory' || x=='ephemeral-storage' || x=='pid')";
const RESERVED_NOT_NEGATIVE: &str = "self.all(x, !self[x].startsWith('-'))";

/// Every rule, in upstream's order within each CRD and node.
pub const PLACEMENTS: &[Placement] = &[
    // NodePoolSpec (nodepool.go): static pools.
    Placement {
        crd: Crd::NodePool,
        path: "spec",
        rules: &[
            CelRule {
                rule: "has(self.replicas) == has(oldSelf.replicas)",
                message: "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
            },
            CelRule {
                rule: "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits))",
                message: "only 'limits.nodes' is supported on static NodePools",
            },
            CelRule {
                rule: "!has(self.replicas) || !has(self.weight)",
                message: "'weight' is not supported on static NodePools",
            },
        ],
    },
    Placement {
        crd: Crd::NodePool,
        path: "spec.disruption.budgets",
        rules: &[CelRule {
            rule: "self.all(x, has(x.schedule) == has(x.duration))",
            message: "'schedule' must be set with 'duration'",
        }],
    },
    Placement {
        crd: Crd::NodePool,
        path: "spec.template.metadata.labels",
        rules: NODEPOOL_LABELS,
    },
    Placement {
        crd: Crd::NodePool,
        path: "spec.template.spec.nodeClassRef",
        rules: &[
            CelRule {
                rule: "self.group == oldSelf.group",
                message: "nodeClassRef.group is immutable",
            },
            CelRule {
                rule: "self.kind == oldSelf.kind",
                message: "nodeClassRef.kind is immutable",
            },
        ],
    },
    Placement {
        crd: Crd::NodePool,
        path: "spec.template.spec.nodeClassRef.group",
        rules: GROUP_NOT_EMPTY,
    },
    Placement {
        crd: Crd::NodePool,
        path: "spec.template.spec.nodeClassRef.kind",
        rules: KIND_NOT_EMPTY,
    },
    Placement {
        crd: Crd::NodePool,
        path: "spec.template.spec.nodeClassRef.name",
        rules: NAME_NOT_EMPTY,
    },
    Placement {
        crd: Crd::NodePool,
        path: "spec.template.spec.requirements",
        rules: REQUIREMENTS,
    },
    Placement {
        crd: Crd::NodePool,
        path: "spec.template.spec.requirements[].key",
        rules: NODEPOOL_REQUIREMENT_KEY,
    },
    // NodeClaimSpec (nodeclaim.go): a NodeClaim's spec never changes once created.
    Placement {
        crd: Crd::NodeClaim,
        path: "spec",
        rules: &[CelRule {
            rule: "self == oldSelf",
            message: "spec is immutable",
        }],
    },
    Placement {
        crd: Crd::NodeClaim,
        path: "spec.nodeClassRef.group",
        rules: GROUP_NOT_EMPTY,
    },
    Placement {
        crd: Crd::NodeClaim,
        path: "spec.nodeClassRef.kind",
        rules: KIND_NOT_EMPTY,
    },
    Placement {
        crd: Crd::NodeClaim,
        path: "spec.nodeClassRef.name",
        rules: NAME_NOT_EMPTY,
    },
    Placement {
        crd: Crd::NodeClaim,
        path: "spec.requirements",
        rules: REQUIREMENTS,
    },
    Placement {
        crd: Crd::NodeClaim,
        path: "spec.requirements[].key",
        rules: NODECLAIM_REQUIREMENT_KEY,
    },
    // EC2NodeClassSpec (ec2nodeclass.go).
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec",
        rules: &[
            CelRule {
                rule: "(has(self.role) && !has(self.instanceProfile)) || (!has(self.role) && has(self.instanceProfile))",
                message: "must specify exactly one of ['role', 'instanceProfile']",
            },
            CelRule {
                rule: "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'al2') ? (self.amiFamily == 'Custom' || self.amiFamily == 'AL2') : true)",
                message: "if set, amiFamily must be 'AL2' or 'Custom' when using an AL2 alias",
            },
            CelRule {
                rule: "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'al2023') ? (self.amiFamily == 'Custom' || self.amiFamily == 'AL2023') : true)",
                message: "if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias",
            },
            CelRule {
                rule: "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'bottlerocket') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Bottlerocket') : true)",
                message: "if set, amiFamily must be 'Bottlerocket' or 'Custom' when using a Bottlerocket alias",
            },
            CelRule {
                rule: "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'windows2019') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Windows2019') : true)",
                message: "if set, amiFamily must be 'Windows2019' or 'Custom' when using a Windows2019 alias",
            },
            CelRule {
                rule: "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'windows2022') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Windows2022') : true)",
                message: "if set, amiFamily must be 'Windows2022' or 'Custom' when using a Windows2022 alias",
            },
            CelRule {
                rule: "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'windows2025') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Windows2025') : true)",
                message: "if set, amiFamily must be 'Windows2025' or 'Custom' when using a Windows2025 alias",
            },
            CelRule {
                rule: "self.amiSelectorTerms.exists(x, has(x.alias)) ? true : has(self.amiFamily)",
                message: "must specify amiFamily if amiSelectorTerms does not contain an alias",
            },
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.amiSelectorTerms",
        rules: &[
            CelRule {
                rule: "self.all(x, has(x.tags) || has(x.id) || has(x.name) || has(x.alias) || has(x.ssmParameter))",
                message: "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
            },
            CelRule {
                rule: "!self.exists(x, has(x.id) && (has(x.alias) || has(x.tags) || has(x.name) || has(x.owner)))",
                message: "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
            },
            CelRule {
                rule: "!self.exists(x, has(x.alias) && (has(x.id) || has(x.tags) || has(x.name) || has(x.owner)))",
                message: "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
            },
            CelRule {
                rule: "!(self.exists(x, has(x.alias)) && self.size() != 1)",
                message: "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
            },
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.amiSelectorTerms[].alias",
        rules: &[
            CelRule {
                rule: "self.matches('^[a-zA-Z0-9]+@.+$')",
                message: "'alias' is improperly formatted, must match the format 'family@version'",
            },
            CelRule {
                rule: "self.split('@')[0] in ['al2','al2023','bottlerocket','windows2019','windows2022','windows2025']",
                message: "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'",
            },
            CelRule {
                rule: "self.split('@')[0] in ['windows2019','windows2022','windows2025'] ? self.split('@')[1] == 'latest' : true",
                message: "windows families may only specify version 'latest'",
            },
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.amiSelectorTerms[].tags",
        rules: &[
            SELECTOR_TAGS,
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.blockDeviceMappings",
        rules: &[
            CelRule {
                rule: "self.filter(x, has(x.rootVolume)?x.rootVolume==true:false).size() <= 1",
                message: "must have only one blockDeviceMappings with rootVolume",
            },
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.blockDeviceMappings[].ebs",
        rules: &[
            CelRule {
                rule: "has(self.snapshotID) || has(self.volumeSize)",
                message: "snapshotID or volumeSize must be defined",
            },
            CelRule {
                rule: "!has(self.volumeInitializationRate) || (has(self.snapshotID) && self.snapshotID != '')",
                message: "snapshotID must be set when volumeInitializationRate is set",
            },
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.capacityReservationSelectorTerms",
        rules: &[
            CelRule {
                rule: "self.all(x, has(x.tags) || has(x.id) || has(x.instanceMatchCriteria))",
                message: "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
            },
            CelRule {
                rule: "!self.all(x, has(x.id) && (has(x.tags) || has(x.ownerID) || has(x.instanceMatchCriteria)))",
                message: "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term",
            },
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.capacityReservationSelectorTerms[].tags",
        rules: &[
            SELECTOR_TAGS,
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.connectionTracking",
        rules: &[
            CelRule {
                rule: "has(self.tcpEstablishedTimeout) || has(self.udpStreamTimeout) || has(self.udpTimeout)",
                message: "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set",
            },
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.instanceProfile",
        rules: &[
            CelRule {
                rule: "self != ''",
                message: "instanceProfile cannot be empty",
            },
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.kubelet",
        rules: &[
            CelRule {
                rule: "has(self.imageGCHighThresholdPercent) && has(self.imageGCLowThresholdPercent) ?  self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent  : true",
                message: "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
            },
            CelRule {
                rule: "has(self.evictionSoft) ? self.evictionSoft.all(e, (e in self.evictionSoftGracePeriod)):true",
                message: "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
            },
            CelRule {
                rule: "has(self.evictionSoftGracePeriod) ? self.evictionSoftGracePeriod.all(e, (e in self.evictionSoft)):true",
                message: "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
            },
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.kubelet.evictionHard",
        rules: &[
            CelRule {
                rule: EVICTION_SIGNAL_KEYS,
                message: "valid keys for evictionHard are ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']",
            },
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.kubelet.evictionSoft",
        rules: &[
            CelRule {
                rule: EVICTION_SIGNAL_KEYS,
                message: "valid keys for evictionSoft are ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']",
            },
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.kubelet.evictionSoftGracePeriod",
        rules: &[
            CelRule {
                rule: EVICTION_SIGNAL_KEYS,
                message: "valid keys for evictionSoftGracePeriod are ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']",
            },
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.kubelet.kubeReserved",
        rules: &[
            CelRule {
                rule: RESERVED_KEYS,
                message: "valid keys for kubeReserved are ['cpu','memory','ephemeral-storage','pid']",
            },
            CelRule {
                rule: RESERVED_NOT_NEGATIVE,
                message: "kubeReserved value cannot be a negative resource quantity",
            },
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.kubelet.systemReserved",
        rules: &[
            CelRule {
                rule: RESERVED_KEYS,
                message: "valid keys for systemReserved are ['cpu','memory','ephemeral-storage','pid']",
            },
            CelRule {
                rule: RESERVED_NOT_NEGATIVE,
                message: "systemReserved value cannot be a negative resource quantity",
            },
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.networkInterfaces",
        rules: &[
            CelRule {
                rule: "self.size() == 0 || self.exists(x, x.deviceIndex == 0 && x.networkCardIndex == 0 && x.interfaceType == 'interface')",
                message: "networkInterfaces must include a primary interface with interfaceType='interface'",
            },
            CelRule {
                rule: "self.all(x, self.filter(y, x.networkCardIndex == y.networkCardIndex && x.deviceIndex == y.deviceIndex).size() == 1 && (x.interfaceType != 'efa-only' || self.filter(y, x.networkCardIndex == y.networkCardIndex && y.interfaceType == 'efa-only').size() == 1))",
                message: "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card",
            },
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.placementGroupSelector",
        rules: &[
            CelRule {
                rule: "has(self.name) || has(self.id)",
                message: "expected at least one, got none, ['name', 'id']",
            },
            CelRule {
                rule: "!(has(self.name) && has(self.id))",
                message: "'name' and 'id' are mutually exclusive",
            },
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.role",
        rules: &[
            CelRule {
                rule: "self != ''",
                message: "role cannot be empty",
            },
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.securityGroupSelectorTerms",
        rules: &[
            CelRule {
                rule: "self.size() != 0",
                message: "securityGroupSelectorTerms cannot be empty",
            },
            CelRule {
                rule: "self.all(x, has(x.tags) || has(x.id) || has(x.name))",
                message: "expected at least one, got none, ['tags', 'id', 'name']",
            },
            CelRule {
                rule: "!self.all(x, has(x.id) && (has(x.tags) || has(x.name)))",
                message: "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
            },
            CelRule {
                rule: "!self.all(x, has(x.name) && (has(x.tags) || has(x.id)))",
                message: "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
            },
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.securityGroupSelectorTerms[].tags",
        rules: &[
            SELECTOR_TAGS,
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.subnetSelectorTerms",
        rules: &[
            CelRule {
                rule: "self.size() != 0",
                message: "subnetSelectorTerms cannot be empty",
            },
            CelRule {
                rule: "self.all(x, has(x.tags) || has(x.id))",
                message: "expected at least one, got none, ['tags', 'id']",
            },
            CelRule {
                rule: "!self.all(x, has(x.id) && has(x.tags))",
                message: "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
            },
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.subnetSelectorTerms[].tags",
        rules: &[
            SELECTOR_TAGS,
        ],
    },
    Placement {
        crd: Crd::EC2NodeClass,
        path: "spec.tags",
        rules: &[
            CelRule {
                rule: "self.all(k, k != '')",
                message: "empty tag keys aren't supported",
            },
            CelRule {
                rule: "self.all(k, k !='eks:eks-cluster-name')",
                message: "tag contains a restricted tag matching eks:eks-cluster-name",
            },
            CelRule {
                rule: "self.all(k, !k.startsWith('kubernetes.io/cluster') )",
                message: "tag contains a restricted tag matching kubernetes.io/cluster/",
            },
            CelRule {
                rule: "self.all(k, k != 'karpenter.sh/nodepool')",
                message: "tag contains a restricted tag matching karpenter.sh/nodepool",
            },
            CelRule {
                rule: "self.all(k, k !='karpenter.sh/nodeclaim')",
                message: "tag contains a restricted tag matching karpenter.sh/nodeclaim",
            },
            CelRule {
                rule: "self.all(k, k !='karpenter.k8s.aws/ec2nodeclass')",
                message: "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass",
            },
        ],
    },
    // CapacityBufferSpec (the CRD Karpenter v1.14.1 ships, `autoscaling.x-k8s.io_capacitybuffers.yaml`).
    Placement {
        crd: Crd::CapacityBuffer,
        path: "spec",
        rules: &[
            CelRule {
                rule: "!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)",
                message: "If podTemplateRef is set, replicas or limits must also be set",
            },
            CelRule {
                rule: "!(has(self.podTemplateRef) && has(self.scalableRef))",
                message: "You must define either PodTemplateRef or ScalableRef, but not both",
            },
        ],
    },
    // NodeOverlaySpec (nodeoverlay.go).
    Placement {
        crd: Crd::NodeOverlay,
        path: "spec",
        rules: &[CelRule {
            rule: "!has(self.price) || !has(self.priceAdjustment)",
            message: "cannot set both 'price' and 'priceAdjustment'",
        }],
    },
    Placement {
        crd: Crd::NodeOverlay,
        path: "spec.capacity",
        rules: &[CelRule {
            rule: "self.all(x, !(x in ['cpu', 'memory', 'ephemeral-storage', 'pods']))",
            message: "invalid resource restricted",
        }],
    },
    Placement {
        crd: Crd::NodeOverlay,
        path: "spec.requirements",
        rules: OVERLAY_REQUIREMENTS,
    },
    Placement {
        crd: Crd::NodeOverlay,
        path: "spec.requirements[].key",
        rules: OVERLAY_REQUIREMENT_KEY,
    },
];
