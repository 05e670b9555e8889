//! EC2NodeClass rule checks (api-rules.md §3): the CEL rules of Karpenter's CRD and kerf's stricter checks
//! (kerf+), with Karpenter's messages at the paths the apiserver reports them. Schema-level checks (types,
//! enums, patterns, bounds, list and map sizes) are done generically from the CRD schema by `api::schema`;
//! these run on the typed object once it parses. Every rule is checked and every error collected.

mod ami;
mod kubelet;

use super::types::*;
use crate::validation::{FieldError, FieldPath, Findings, SchemaType};
use ami::validate_ami_selection;
use kubelet::validate_kubelet;
use std::collections::{BTreeMap, HashSet};

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
mod tests;
