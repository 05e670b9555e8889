//! The EC2NodeClass's CEL rules (aws/karpenter-provider-aws `pkg/apis/v1/ec2nodeclass.go`, v1.14.1), in upstream's
//! order.

use super::{CelRule, Crd, Placement};

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

/// Every EC2NodeClass rule.
pub(super) const PLACEMENTS: &[Placement] = &[
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
];
