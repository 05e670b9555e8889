//! The CEL validation rules (`x-kubernetes-validations`) that Karpenter v1.14's CRDs carry, as tables (the
//! EC2NodeClass's in [`ec2nodeclass`]), placed at the same schema paths by `crds::structural`. With them the
//! apiserver (1.25 and newer) refuses the specs Karpenter's CRDs refuse even while kerf's webhook is unavailable;
//! the webhook implements every one of these rules itself (with the same messages) and more, so it stays the
//! stricter layer (docs/admission.md, "CEL rules in the CRDs").
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

mod ec2nodeclass;

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

/// Every rule, in upstream's order within each CRD and node.
pub fn placements() -> impl Iterator<Item = &'static Placement> {
    KARPENTER.iter().chain(ec2nodeclass::PLACEMENTS)
}

/// The rules of the karpenter.sh CRDs and of the NodeOverlay and CapacityBuffer CRDs Karpenter ships.
const KARPENTER: &[Placement] = &[
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
