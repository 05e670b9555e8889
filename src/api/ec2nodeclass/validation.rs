//! EC2NodeClass rule checks (api-rules.md §3): the CEL rules of Karpenter's CRD and kerf's stricter checks
//! (kerf+), with Karpenter's messages at the paths the apiserver reports them. Schema-level checks (types,
//! enums, patterns, bounds, list and map sizes) are done generically from the CRD schema by `api::schema`;
//! these run on the typed object once it parses. Every rule is checked and every error collected.

use super::types::*;
use crate::api::validation::{FieldError, FieldPath, Findings, SchemaType};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// Checks every rule of api-rules.md §3 on `nc`, adding errors and warnings to `findings`.
pub fn validate_ec2nodeclass(nc: &EC2NodeClass, findings: &mut Findings) {
    let spec = &nc.spec;
    let path = FieldPath::new("spec");
    validate_identity(spec, &path, findings);
    if let Some(terms) = &spec.ami_selector_terms {
        validate_ami_selection(terms, spec.ami_family, &path, findings);
    }
    check_terms(
        spec.subnet_selector_terms.as_deref(),
        &SUBNET_TERMS,
        &path,
        findings,
    );
    check_terms(
        spec.security_group_selector_terms.as_deref(),
        &SECURITY_GROUP_TERMS,
        &path,
        findings,
    );
    check_terms(
        spec.capacity_reservation_selector_terms.as_deref(),
        &CAPACITY_RESERVATION_TERMS,
        &path,
        findings,
    );
    if let Some(tags) = &spec.tags {
        validate_tags(tags, &path.child("tags"), findings);
    }
    if let Some(mappings) = &spec.block_device_mappings {
        validate_block_device_mappings(mappings, &path.child("blockDeviceMappings"), findings);
    }
    if let Some(kubelet) = &spec.kubelet {
        validate_kubelet(kubelet, &path.child("kubelet"), findings);
    }
    validate_networking(spec, &path, findings);
}

// ---- api-rules.md §3.2–3.3 and §3.8: which fields of a selector term are present ------------------------------------

/// A presence rule over the fields of one selector term.
enum Presence {
    /// At least one of these fields is present.
    AnyOf(&'static [&'static str]),
    /// When the field is present, none of the others is.
    Alone(&'static str, &'static [&'static str]),
}

impl Presence {
    fn broken_by(&self, present: &[&str]) -> bool {
        match self {
            Presence::AnyOf(fields) => !fields.iter().any(|f| present.contains(f)),
            Presence::Alone(field, others) => {
                present.contains(field) && others.iter().any(|o| present.contains(o))
            }
        }
    }
}

/// A presence rule with Karpenter's message for it.
struct PresenceRule {
    presence: Presence,
    message: &'static str,
}

/// The rules of one list of selector terms in the spec.
struct TermList {
    field: &'static str,
    /// Karpenter's message when the list is present but empty, for lists that must not be.
    empty: Option<&'static str>,
    rules: &'static [PresenceRule],
}

const SUBNET_TERMS: TermList = TermList {
    field: "subnetSelectorTerms",
    empty: Some("subnetSelectorTerms cannot be empty"),
    rules: &[
        PresenceRule { presence: Presence::AnyOf(&["tags", "id"]), message: "expected at least one, got none, ['tags', 'id']" },
        PresenceRule {
            presence: Presence::Alone("id", &["tags"]),
            message: "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
        },
    ],
};

const SECURITY_GROUP_TERMS: TermList = TermList {
    field: "securityGroupSelectorTerms",
    empty: Some("securityGroupSelectorTerms cannot be empty"),
    rules: &[
        PresenceRule {
            presence: Presence::AnyOf(&["tags", "id", "name"]),
            message: "expected at least one, got none, ['tags', 'id', 'name']",
        },
        PresenceRule {
            presence: Presence::Alone("id", &["tags", "name"]),
            message: "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
        },
        PresenceRule {
            presence: Presence::Alone("name", &["tags", "id"]),
            message: "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
        },
    ],
};

const CAPACITY_RESERVATION_TERMS: TermList = TermList {
    field: "capacityReservationSelectorTerms",
    // Upstream's `!self.all(…)` mutual-exclusion rule is vacuously true on an empty list, so the list is refused
    // with that rule's message (`ec2nodeclass_validation_cel_test.go`).
    empty: Some(
        "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term",
    ),
    rules: &[
        PresenceRule {
            presence: Presence::AnyOf(&["tags", "id", "instanceMatchCriteria"]),
            message: "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
        },
        PresenceRule {
            presence: Presence::Alone("id", &["tags", "ownerID", "instanceMatchCriteria"]),
            message: "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term",
        },
    ],
};

const AMI_TERMS: TermList = TermList {
    field: "amiSelectorTerms",
    // An empty list fails the schema's minItems instead.
    empty: None,
    rules: &[
        PresenceRule {
            presence: Presence::AnyOf(&["tags", "id", "name", "alias", "ssmParameter"]),
            message: "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
        },
        PresenceRule {
            presence: Presence::Alone("id", &["alias", "tags", "name", "owner"]),
            message: "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
        },
        PresenceRule {
            presence: Presence::Alone("alias", &["id", "tags", "name", "owner"]),
            message: "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
        },
    ],
};

const PLACEMENT_GROUP_RULES: &[PresenceRule] = &[
    PresenceRule {
        presence: Presence::AnyOf(&["name", "id"]),
        message: "expected at least one, got none, ['name', 'id']",
    },
    PresenceRule {
        presence: Presence::Alone("name", &["id"]),
        message: "'name' and 'id' are mutually exclusive",
    },
];

/// A selector term, seen as CEL's `has(x.<field>)` sees it.
trait Term {
    /// The names of the fields that are present, even if empty.
    fn present(&self) -> Vec<&'static str>;
    fn tags(&self) -> Option<&BTreeMap<String, String>>;
}

/// The names of the fields flagged present.
fn present<const N: usize>(fields: [(&'static str, bool); N]) -> Vec<&'static str> {
    fields
        .into_iter()
        .filter(|(_, is_present)| *is_present)
        .map(|(name, _)| name)
        .collect()
}

impl Term for SubnetSelectorTerm {
    fn present(&self) -> Vec<&'static str> {
        present([("tags", self.tags.is_some()), ("id", self.id.is_some())])
    }
    fn tags(&self) -> Option<&BTreeMap<String, String>> {
        self.tags.as_ref()
    }
}

impl Term for SecurityGroupSelectorTerm {
    fn present(&self) -> Vec<&'static str> {
        present([
            ("tags", self.tags.is_some()),
            ("id", self.id.is_some()),
            ("name", self.name.is_some()),
        ])
    }
    fn tags(&self) -> Option<&BTreeMap<String, String>> {
        self.tags.as_ref()
    }
}

impl Term for CapacityReservationSelectorTerm {
    fn present(&self) -> Vec<&'static str> {
        present([
            ("tags", self.tags.is_some()),
            ("id", self.id.is_some()),
            ("ownerID", self.owner_id.is_some()),
            (
                "instanceMatchCriteria",
                self.instance_match_criteria.is_some(),
            ),
        ])
    }
    fn tags(&self) -> Option<&BTreeMap<String, String>> {
        self.tags.as_ref()
    }
}

impl Term for AmiSelectorTerm {
    fn present(&self) -> Vec<&'static str> {
        present([
            ("alias", self.alias.is_some()),
            ("tags", self.tags.is_some()),
            ("id", self.id.is_some()),
            ("name", self.name.is_some()),
            ("owner", self.owner.is_some()),
            ("ssmParameter", self.ssm_parameter.is_some()),
        ])
    }
    fn tags(&self) -> Option<&BTreeMap<String, String>> {
        self.tags.as_ref()
    }
}

/// The list rules of a term list (at the list, type `array`) and each term's tags rules.
///
/// kerf+ (api-rules.md §0.4e): a presence rule fires when **any** term breaks it. Upstream's subnet,
/// security-group and capacity-reservation rules are written `!self.all(…)` and fire only when every term does.
fn check_terms<T: Term>(
    terms: Option<&[T]>,
    list: &TermList,
    spec: &FieldPath,
    findings: &mut Findings,
) {
    let Some(terms) = terms else { return };
    let path = spec.child(list.field);
    if let Some(message) = list.empty.filter(|_| terms.is_empty()) {
        findings.error(FieldError::rule(&path, SchemaType::Array, message));
    }
    let present: Vec<Vec<&str>> = terms.iter().map(Term::present).collect();
    for rule in list.rules {
        if present.iter().any(|fields| rule.presence.broken_by(fields)) {
            findings.error(FieldError::rule(&path, SchemaType::Array, rule.message));
        }
    }
    for (i, term) in terms.iter().enumerate() {
        if let Some(tags) = term.tags() {
            check_selector_tags(tags, &path.index(i).child("tags"), findings);
        }
    }
}

/// A selector's `tags`: no empty key or value. A present but empty map selects by no tag at all, which
/// Karpenter admits; kerf keeps it for parity and warns.
fn check_selector_tags(tags: &BTreeMap<String, String>, path: &FieldPath, findings: &mut Findings) {
    if tags.is_empty() {
        findings.warn(format!(
            "{path}: an empty tags map selects by no tag; remove it or add the tags to match"
        ));
    }
    let message = "empty tag keys or values aren't supported";
    map_rule(
        tags,
        path,
        message,
        |key, value| key.is_empty() || value.is_empty(),
        findings,
    );
}

/// A CEL rule over every entry of a map (`self.all(k, …)`), reported once, at the map (type `object`),
/// when any entry breaks it.
fn map_rule(
    map: &BTreeMap<String, String>,
    path: &FieldPath,
    message: &str,
    broken_by: impl Fn(&str, &str) -> bool,
    findings: &mut Findings,
) {
    if map.iter().any(|(key, value)| broken_by(key, value)) {
        findings.error(FieldError::rule(path, SchemaType::Object, message));
    }
}

// ---- api-rules.md §3.2 AMI selection --------------------------------------------------------------------------------

/// An alias family, the `amiFamily` it implies, and the message when `amiFamily` contradicts it.
struct AliasFamily {
    name: &'static str,
    family: AmiFamily,
    windows: bool,
    mismatch: &'static str,
}

const ALIAS_FAMILIES: [AliasFamily; 6] = [
    AliasFamily {
        name: "al2",
        family: AmiFamily::Al2,
        windows: false,
        mismatch: "if set, amiFamily must be 'AL2' or 'Custom' when using an AL2 alias",
    },
    AliasFamily {
        name: "al2023",
        family: AmiFamily::Al2023,
        windows: false,
        mismatch: "if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias",
    },
    AliasFamily {
        name: "bottlerocket",
        family: AmiFamily::Bottlerocket,
        windows: false,
        mismatch:
            "if set, amiFamily must be 'Bottlerocket' or 'Custom' when using a Bottlerocket alias",
    },
    AliasFamily {
        name: "windows2019",
        family: AmiFamily::Windows2019,
        windows: true,
        mismatch:
            "if set, amiFamily must be 'Windows2019' or 'Custom' when using a Windows2019 alias",
    },
    AliasFamily {
        name: "windows2022",
        family: AmiFamily::Windows2022,
        windows: true,
        mismatch:
            "if set, amiFamily must be 'Windows2022' or 'Custom' when using a Windows2022 alias",
    },
    AliasFamily {
        name: "windows2025",
        family: AmiFamily::Windows2025,
        windows: true,
        mismatch:
            "if set, amiFamily must be 'Windows2025' or 'Custom' when using a Windows2025 alias",
    },
];

const UNSUPPORTED_ALIAS_FAMILY: &str = "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'";

/// The family part of an alias: the text before its first `@` (all of it when there is none).
fn alias_family_name(alias: &str) -> &str {
    alias.split_once('@').map_or(alias, |(family, _)| family)
}

fn alias_family(alias: &str) -> Option<&'static AliasFamily> {
    let name = alias_family_name(alias);
    ALIAS_FAMILIES.iter().find(|family| family.name == name)
}

/// The term rules, the alias rules and the `amiFamily` rules.
fn validate_ami_selection(
    terms: &[AmiSelectorTerm],
    family: Option<AmiFamily>,
    spec: &FieldPath,
    findings: &mut Findings,
) {
    check_terms(Some(terms), &AMI_TERMS, spec, findings);
    let list = spec.child(AMI_TERMS.field);
    if terms.len() > 1 && terms.iter().any(|t| t.alias.is_some()) {
        let message = "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms";
        findings.error(FieldError::rule(&list, SchemaType::Array, message));
    }
    for (i, term) in terms.iter().enumerate() {
        if let Some(alias) = &term.alias {
            validate_alias(alias, &list.index(i).child("alias"), findings);
        }
    }
    validate_ami_family(terms, family, spec, findings);
}

/// An alias is `family@version`, with a known family, and Windows families only take `latest`.
fn validate_alias(alias: &str, path: &FieldPath, findings: &mut Findings) {
    let version = alias.split_once('@').map(|(_, version)| version);
    let family = alias_family_name(alias);
    // CEL's `self.matches('^[a-zA-Z0-9]+@.+$')`: `.` matches anything but a newline.
    let well_formed = !family.is_empty()
        && family.bytes().all(|b| b.is_ascii_alphanumeric())
        && version.is_some_and(|v| !v.is_empty() && !v.contains('\n'));
    if !well_formed {
        let message = "'alias' is improperly formatted, must match the format 'family@version'";
        findings.error(FieldError::rule(path, SchemaType::String, message));
    }
    match alias_family(alias) {
        None => findings.error(FieldError::rule(
            path,
            SchemaType::String,
            UNSUPPORTED_ALIAS_FAMILY,
        )),
        // 4c: upstream's `self.split('@')[1]` errors generically when there is no `@`; kerf gives the message.
        Some(family)
            if family.windows && version.and_then(|v| v.split('@').next()) != Some("latest") =>
        {
            let message = "windows families may only specify version 'latest'";
            findings.error(FieldError::rule(path, SchemaType::String, message));
        }
        Some(_) => {}
    }
}

/// `amiFamily` (at `spec`, type `object`): required without an alias, and consistent with the alias when set.
fn validate_ami_family(
    terms: &[AmiSelectorTerm],
    family: Option<AmiFamily>,
    spec: &FieldPath,
    findings: &mut Findings,
) {
    let aliases: Vec<&str> = terms.iter().filter_map(|t| t.alias.as_deref()).collect();
    if let Some(family) = family {
        for alias_family in &ALIAS_FAMILIES {
            let used = aliases
                .iter()
                .any(|alias| alias_family_name(alias) == alias_family.name);
            if used && family != alias_family.family && family != AmiFamily::Custom {
                findings.error(FieldError::rule(
                    spec,
                    SchemaType::Object,
                    alias_family.mismatch,
                ));
            }
        }
    } else if aliases.is_empty() {
        let message = "must specify amiFamily if amiSelectorTerms does not contain an alias";
        findings.error(FieldError::rule(spec, SchemaType::Object, message));
    }
}

// ---- api-rules.md §3.4 role and instanceProfile ---------------------------------------------------------------------

/// Exactly one of `role` and `instanceProfile`, and not empty. Both may change on UPDATE (v1.7.0+).
fn validate_identity(spec: &EC2NodeClassSpec, path: &FieldPath, findings: &mut Findings) {
    if spec.role.is_some() == spec.instance_profile.is_some() {
        let message = "must specify exactly one of ['role', 'instanceProfile']";
        findings.error(FieldError::rule(path, SchemaType::Object, message));
    }
    let fields = [
        ("role", &spec.role, "role cannot be empty"),
        (
            "instanceProfile",
            &spec.instance_profile,
            "instanceProfile cannot be empty",
        ),
    ];
    for (field, value, message) in fields {
        if value.as_deref() == Some("") {
            findings.error(FieldError::rule(
                &path.child(field),
                SchemaType::String,
                message,
            ));
        }
    }
}

// ---- api-rules.md §3.5 tags -----------------------------------------------------------------------------------------

/// A rule on the keys of `spec.tags`, with Karpenter's message.
struct TagRule {
    rejects: fn(&str) -> bool,
    message: &'static str,
}

/// The empty key, and the keys Karpenter sets itself to find and own its instances.
const TAG_RULES: [TagRule; 6] = [
    TagRule {
        rejects: str::is_empty,
        message: "empty tag keys aren't supported",
    },
    TagRule {
        rejects: |key| key == "eks:eks-cluster-name",
        message: "tag contains a restricted tag matching eks:eks-cluster-name",
    },
    // A plain prefix test, as upstream's: `kubernetes.io/clusterfoo` is restricted too.
    TagRule {
        rejects: |key| key.starts_with("kubernetes.io/cluster"),
        message: "tag contains a restricted tag matching kubernetes.io/cluster/",
    },
    TagRule {
        rejects: |key| key == "karpenter.sh/nodepool",
        message: "tag contains a restricted tag matching karpenter.sh/nodepool",
    },
    TagRule {
        rejects: |key| key == "karpenter.sh/nodeclaim",
        message: "tag contains a restricted tag matching karpenter.sh/nodeclaim",
    },
    TagRule {
        rejects: |key| key == "karpenter.k8s.aws/ec2nodeclass",
        message: "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass",
    },
];

fn validate_tags(tags: &BTreeMap<String, String>, path: &FieldPath, findings: &mut Findings) {
    for rule in &TAG_RULES {
        map_rule(
            tags,
            path,
            rule.message,
            |key, _| (rule.rejects)(key),
            findings,
        );
    }
}

// ---- api-rules.md §3.6 blockDeviceMappings --------------------------------------------------------------------------

fn validate_block_device_mappings(
    mappings: &[BlockDeviceMapping],
    path: &FieldPath,
    findings: &mut Findings,
) {
    if mappings
        .iter()
        .filter(|m| m.root_volume == Some(true))
        .count()
        > 1
    {
        let message = "must have only one blockDeviceMappings with rootVolume";
        findings.error(FieldError::rule(path, SchemaType::Array, message));
    }
    for (i, mapping) in mappings.iter().enumerate() {
        if let Some(ebs) = &mapping.ebs {
            validate_ebs(ebs, &path.index(i).child("ebs"), findings);
        }
    }
}

fn validate_ebs(ebs: &BlockDevice, path: &FieldPath, findings: &mut Findings) {
    if ebs.snapshot_id.is_none() && ebs.volume_size.is_none() {
        findings.error(FieldError::rule(
            path,
            SchemaType::Object,
            "snapshotID or volumeSize must be defined",
        ));
    }
    if ebs.volume_initialization_rate.is_some()
        && ebs.snapshot_id.as_deref().is_none_or(str::is_empty)
    {
        let message = "snapshotID must be set when volumeInitializationRate is set";
        findings.error(FieldError::rule(path, SchemaType::Object, message));
    }
}

// ---- api-rules.md §3.7 kubelet --------------------------------------------------------------------------------------

const RESERVED_RESOURCES: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pid"];
const EVICTION_SIGNALS: [&str; 6] = [
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];

/// A list the way Karpenter's messages print it: `['a','b']`.
fn quoted_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|item| format!("'{item}'")).collect();
    format!("[{}]", quoted.join(","))
}

fn validate_kubelet(kubelet: &KubeletConfiguration, path: &FieldPath, findings: &mut Findings) {
    let reserved = [
        ("systemReserved", &kubelet.system_reserved),
        ("kubeReserved", &kubelet.kube_reserved),
    ];
    for (field, map) in reserved {
        let Some(map) = map else { continue };
        let map_path = path.child(field);
        let keys = format!(
            "valid keys for {field} are {}",
            quoted_list(&RESERVED_RESOURCES)
        );
        map_rule(
            map,
            &map_path,
            &keys,
            |key, _| !RESERVED_RESOURCES.contains(&key),
            findings,
        );
        let negative = format!("{field} value cannot be a negative resource quantity");
        map_rule(
            map,
            &map_path,
            &negative,
            |_, value| value.starts_with('-'),
            findings,
        );
    }
    let eviction = [
        ("evictionHard", &kubelet.eviction_hard),
        ("evictionSoft", &kubelet.eviction_soft),
        (
            "evictionSoftGracePeriod",
            &kubelet.eviction_soft_grace_period,
        ),
    ];
    for (field, map) in eviction {
        let Some(map) = map else { continue };
        let keys = format!(
            "valid keys for {field} are {}",
            quoted_list(&EVICTION_SIGNALS)
        );
        map_rule(
            map,
            &path.child(field),
            &keys,
            |key, _| !EVICTION_SIGNALS.contains(&key),
            findings,
        );
    }
    validate_soft_eviction_pairs(kubelet, path, findings);
    if let (Some(high), Some(low)) = (
        kubelet.image_gc_high_threshold_percent,
        kubelet.image_gc_low_threshold_percent,
    ) {
        if high <= low {
            let message =
                "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent";
            findings.error(FieldError::rule(path, SchemaType::Object, message));
        }
    }
}

/// Every soft threshold has a grace period and every grace period a soft threshold. 4c: when one of the two maps
/// is absent, upstream's CEL errors generically; kerf treats the absent map as empty and gives the messages.
fn validate_soft_eviction_pairs(
    kubelet: &KubeletConfiguration,
    path: &FieldPath,
    findings: &mut Findings,
) {
    let keys = |map: &Option<BTreeMap<String, String>>| -> BTreeSet<String> {
        map.iter().flat_map(BTreeMap::keys).cloned().collect()
    };
    let (soft, grace) = (
        keys(&kubelet.eviction_soft),
        keys(&kubelet.eviction_soft_grace_period),
    );
    if !soft.is_subset(&grace) {
        let message = "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod";
        findings.error(FieldError::rule(path, SchemaType::Object, message));
    }
    if !grace.is_subset(&soft) {
        let message = "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft";
        findings.error(FieldError::rule(path, SchemaType::Object, message));
    }
}

// ---- api-rules.md §3.8 networking extras ----------------------------------------------------------------------------

fn validate_networking(spec: &EC2NodeClassSpec, path: &FieldPath, findings: &mut Findings) {
    if let Some(interfaces) = &spec.network_interfaces {
        validate_network_interfaces(interfaces, &path.child("networkInterfaces"), findings);
    }
    if let Some(tracking) = &spec.connection_tracking {
        let set = [
            tracking.tcp_established_timeout,
            tracking.udp_stream_timeout,
            tracking.udp_timeout,
        ];
        if set.iter().all(Option::is_none) {
            let message = "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set";
            findings.error(FieldError::rule(
                &path.child("connectionTracking"),
                SchemaType::Object,
                message,
            ));
        }
    }
    if let Some(selector) = &spec.placement_group_selector {
        let fields = present([
            ("name", selector.name.is_some()),
            ("id", selector.id.is_some()),
        ]);
        for rule in PLACEMENT_GROUP_RULES
            .iter()
            .filter(|rule| rule.presence.broken_by(&fields))
        {
            findings.error(FieldError::rule(
                &path.child("placementGroupSelector"),
                SchemaType::Object,
                rule.message,
            ));
        }
    }
}

/// A non-empty list has a primary ENA interface (card 0, device 0), no (card, device) pair twice, and at most
/// one EFA-only interface per card.
fn validate_network_interfaces(
    interfaces: &[NetworkInterface],
    path: &FieldPath,
    findings: &mut Findings,
) {
    if interfaces.is_empty() {
        return;
    }
    let is_primary = |ni: &NetworkInterface| {
        ni.network_card_index == Some(0)
            && ni.device_index == Some(0)
            && ni.interface_type == Some(InterfaceType::Interface)
    };
    if !interfaces.iter().any(is_primary) {
        let message =
            "networkInterfaces must include a primary interface with interfaceType='interface'";
        findings.error(FieldError::rule(path, SchemaType::Array, message));
    }
    let mut slots = HashSet::new();
    let mut efa_cards = HashSet::new();
    let clash = interfaces.iter().any(|ni| {
        let efa_only = ni.interface_type == Some(InterfaceType::EfaOnly);
        !slots.insert((ni.network_card_index, ni.device_index))
            || (efa_only && !efa_cards.insert(ni.network_card_index))
    });
    if clash {
        let message = "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card";
        findings.error(FieldError::rule(path, SchemaType::Array, message));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alias_errors(alias: &str) -> Vec<String> {
        let mut findings = Findings::default();
        validate_alias(alias, &FieldPath::new("alias"), &mut findings);
        findings.errors.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn presence_rules() {
        let any = Presence::AnyOf(&["tags", "id"]);
        assert!(any.broken_by(&[]));
        assert!(any.broken_by(&["ownerID"]));
        assert!(!any.broken_by(&["id"]));
        let alone = Presence::Alone("id", &["tags", "name"]);
        assert!(alone.broken_by(&["id", "name"]));
        assert!(!alone.broken_by(&["id"]));
        assert!(!alone.broken_by(&["tags", "name"]));
    }

    #[test]
    fn aliases() {
        for ok in [
            "al2023@latest",
            "al2@v20240625",
            "bottlerocket@v1.10.0",
            "windows2025@latest",
            "windows2022@latest@x",
        ] {
            assert_eq!(alias_errors(ok), Vec::<String>::new(), "{ok}");
        }
        let malformed = r#"alias: Invalid value: "string": 'alias' is improperly formatted, must match the format 'family@version'"#;
        let unsupported = format!(r#"alias: Invalid value: "string": {UNSUPPORTED_ALIAS_FAMILY}"#);
        let windows =
            r#"alias: Invalid value: "string": windows families may only specify version 'latest'"#;
        assert_eq!(alias_errors("al2023@"), vec![malformed]);
        assert_eq!(alias_errors("al2023"), vec![malformed]);
        assert_eq!(alias_errors("al2023@v1\n"), vec![malformed]);
        assert_eq!(
            alias_errors("@latest"),
            vec![malformed.to_owned(), unsupported.clone()]
        );
        assert_eq!(alias_errors("ubuntu@latest"), vec![unsupported]);
        assert_eq!(alias_errors("windows2019@v1"), vec![windows]);
        assert_eq!(alias_errors("windows2019"), vec![malformed, windows]);
    }

    #[test]
    fn lists_print_like_karpenter() {
        assert_eq!(
            quoted_list(&RESERVED_RESOURCES),
            "['cpu','memory','ephemeral-storage','pid']"
        );
    }
}
