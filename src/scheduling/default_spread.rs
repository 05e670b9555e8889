//! The cluster's default topology spread: Karpenter's `--scheduler-config` (`SCHEDULER_CONFIG`), a document
//! `{podTopologySpread: {defaultConstraints: [...]}}` that mirrors kube-scheduler's PodTopologySpread
//! `defaultConstraints`. kube-scheduler gives those constraints to every pod that declares none of its own, so a
//! provisioner that left them out would pack pods onto nodes the kube-scheduler then refuses to use.
//!
//! kube-scheduler forbids a `labelSelector` on a default constraint: it deduces one for each pod (its
//! `helper.DefaultSelector`), and so do we, to count the same pods. The deduced selector is the selectors of the
//! Services of the pod's namespace that select the pod, as equality matches, together with the selector of the
//! pod's controller when that is a ReplicationController (its map, merged over the Services'), a ReplicaSet or a
//! StatefulSet (its requirements, ANDed). A pod none of those select gets no defaults: an empty selector would
//! count every pod of the namespace.
//!
//! Pure: the drivers hand in the Services and owners they have ([`DefaultSpread`]); [`DefaultSpread::apply`]
//! returns the pod the solve should see. The defaults live only on that copy, never on the apiserver's pod.

use crate::api::validation::grammar::qualified_name_problems;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController, Service, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Why a `--scheduler-config` document is refused; the message names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchedulerConfigError {
    /// Not YAML or JSON of the expected shape (an unknown field, a wrong type).
    #[error("decoding the scheduler config: {0}")]
    Decode(String),
    #[error("podTopologySpread.defaultConstraints[{index}].{field}: {problem}")]
    Invalid {
        index: usize,
        field: &'static str,
        problem: String,
    },
    /// kube-scheduler refuses two default constraints on the same key with the same `whenUnsatisfiable`.
    #[error("podTopologySpread.defaultConstraints[{index}] repeats [{earlier}]: topologyKey {key:?} with whenUnsatisfiable {when}")]
    Duplicate {
        index: usize,
        earlier: usize,
        key: String,
        when: String,
    },
}

/// The parsed and validated `--scheduler-config`. Only `podTopologySpread.defaultConstraints` exists today; the
/// document is shaped so that later kube-scheduler settings can join it without another flag.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchedulerConfig {
    /// `podTopologySpread.defaultConstraints`, in written order, none carrying a selector.
    pub default_constraints: Vec<TopologySpreadConstraint>,
}

/// The document as written. Unknown fields are refused at every level, so a typo fails at startup instead of
/// silently configuring nothing.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Document {
    #[serde(default)]
    pod_topology_spread: Option<PodTopologySpread>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PodTopologySpread {
    #[serde(default)]
    default_constraints: Option<Vec<Constraint>>,
}

/// A default constraint as written: the fields of a pod's `topologySpreadConstraints` entry. Missing scalars
/// read as empty so that validation, not the decoder, says what is wrong with them.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Constraint {
    #[serde(default)]
    max_skew: i32,
    #[serde(default)]
    topology_key: String,
    #[serde(default)]
    when_unsatisfiable: String,
    #[serde(default)]
    label_selector: Option<Value>,
    #[serde(default)]
    match_label_keys: Option<Vec<String>>,
    #[serde(default)]
    min_domains: Option<i32>,
    #[serde(default)]
    node_affinity_policy: Option<String>,
    #[serde(default)]
    node_taints_policy: Option<String>,
}

impl SchedulerConfig {
    /// Parses the flag's value, YAML or JSON. Empty (or blank) means no scheduler config: nothing is defaulted.
    pub fn parse(text: &str) -> Result<Self, SchedulerConfigError> {
        if text.trim().is_empty() {
            return Ok(SchedulerConfig::default());
        }
        let document: Document = serde_yaml::from_str(text)
            .map_err(|error| SchedulerConfigError::Decode(error.to_string()))?;
        Self::from_document(document)
    }

    /// Parses the document already read as a value (`kerf simulate`'s `spec.schedulerConfig`); `null` means none.
    pub fn from_value(value: &Value) -> Result<Self, SchedulerConfigError> {
        if value.is_null() {
            return Ok(SchedulerConfig::default());
        }
        let document = Document::deserialize(value)
            .map_err(|error| SchedulerConfigError::Decode(error.to_string()))?;
        Self::from_document(document)
    }

    fn from_document(document: Document) -> Result<Self, SchedulerConfigError> {
        let written = document
            .pod_topology_spread
            .and_then(|spread| spread.default_constraints)
            .unwrap_or_default();
        let mut default_constraints: Vec<TopologySpreadConstraint> =
            Vec::with_capacity(written.len());
        for (index, constraint) in written.into_iter().enumerate() {
            let constraint = validate(index, constraint)?;
            // As kube-scheduler's validateConstraintNotRepeat: one constraint per (key, whenUnsatisfiable).
            if let Some(earlier) = default_constraints.iter().position(|c| {
                c.topology_key == constraint.topology_key
                    && c.when_unsatisfiable == constraint.when_unsatisfiable
            }) {
                return Err(SchedulerConfigError::Duplicate {
                    index,
                    earlier,
                    key: constraint.topology_key,
                    when: constraint.when_unsatisfiable,
                });
            }
            default_constraints.push(constraint);
        }
        Ok(SchedulerConfig {
            default_constraints,
        })
    }
}

/// One written default constraint, checked as kube-scheduler's `ValidatePodTopologySpreadArgs` checks it, plus
/// Karpenter's refusal of `matchLabelKeys` and the pod API's rules for the fields kube-scheduler does not check.
fn validate(index: usize, c: Constraint) -> Result<TopologySpreadConstraint, SchedulerConfigError> {
    let invalid = |field: &'static str, problem: String| SchedulerConfigError::Invalid {
        index,
        field,
        problem,
    };
    if c.max_skew <= 0 {
        return Err(invalid(
            "maxSkew",
            format!("{} must be greater than 0", c.max_skew),
        ));
    }
    if c.topology_key.is_empty() {
        return Err(invalid("topologyKey", "must be set".to_owned()));
    }
    let problems = qualified_name_problems(&c.topology_key);
    if !problems.is_empty() {
        return Err(invalid(
            "topologyKey",
            format!(
                "{:?} is not a valid label key: {}",
                c.topology_key,
                problems.join("; ")
            ),
        ));
    }
    if c.when_unsatisfiable != "DoNotSchedule" && c.when_unsatisfiable != "ScheduleAnyway" {
        return Err(invalid(
            "whenUnsatisfiable",
            format!(
                "{:?} must be DoNotSchedule or ScheduleAnyway",
                c.when_unsatisfiable
            ),
        ));
    }
    // A static selector would count an unrelated set of pods for every workload: each pod's is deduced instead.
    if c.label_selector.as_ref().is_some_and(|s| !s.is_null()) {
        return Err(invalid(
            "labelSelector",
            "must not be set: each pod's selector is deduced from the Services and the controller that select it"
                .to_owned(),
        ));
    }
    // kube-scheduler merges these keys into the selector and then replaces that selector with the deduced one:
    // accepting them would promise something no scheduler does.
    if c.match_label_keys.as_ref().is_some_and(|k| !k.is_empty()) {
        return Err(invalid(
            "matchLabelKeys",
            "must not be set: it has no effect on default constraints".to_owned(),
        ));
    }
    // kube-scheduler leaves the next three unchecked here; a pod may not carry such values, so neither may a
    // default that is stamped onto pods (kerf is stricter than Karpenter in this).
    if let Some(min) = c.min_domains.filter(|m| *m <= 0) {
        return Err(invalid(
            "minDomains",
            format!("{min} must be greater than 0"),
        ));
    }
    for (field, policy) in [
        ("nodeAffinityPolicy", &c.node_affinity_policy),
        ("nodeTaintsPolicy", &c.node_taints_policy),
    ] {
        if let Some(policy) = policy
            .as_deref()
            .filter(|p| !matches!(*p, "Honor" | "Ignore"))
        {
            return Err(invalid(
                field,
                format!("{policy:?} must be Honor or Ignore"),
            ));
        }
    }
    Ok(TopologySpreadConstraint {
        max_skew: c.max_skew,
        topology_key: c.topology_key,
        when_unsatisfiable: c.when_unsatisfiable,
        min_domains: c.min_domains,
        node_affinity_policy: c.node_affinity_policy,
        node_taints_policy: c.node_taints_policy,
        label_selector: None,
        match_label_keys: None,
    })
}

/// The controller kinds whose selector joins a pod's deduced selector (kube-scheduler's choice): a pod controlled
/// by anything else (a Job, a DaemonSet, a custom resource) is defaulted only if a Service selects it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum OwnerKind {
    ReplicationController,
    ReplicaSet,
    StatefulSet,
}

impl OwnerKind {
    /// The kind an owner reference names, when it is one of them in the API version kube-scheduler looks for.
    fn of(api_version: &str, kind: &str) -> Option<Self> {
        match (api_version, kind) {
            ("v1", "ReplicationController") => Some(OwnerKind::ReplicationController),
            ("apps/v1", "ReplicaSet") => Some(OwnerKind::ReplicaSet),
            ("apps/v1", "StatefulSet") => Some(OwnerKind::StatefulSet),
            _ => None,
        }
    }
}

/// What a controller adds to its pods' deduced selector, in the way kube-scheduler folds its kind in. The two
/// differ only when a controller's selector disagrees with a Service's on a key.
#[derive(Clone, Debug, PartialEq)]
enum Contribution {
    /// A ReplicationController's selector map: merged over the Services' labels (later keys win).
    Labels(BTreeMap<String, String>),
    /// A ReplicaSet's or StatefulSet's selector as requirements: ANDed with the Services' labels.
    Requirements(Vec<LabelSelectorRequirement>),
}

/// An owner by namespace, kind and name: the pod's owner reference is resolved by name, as Karpenter fetches it.
type OwnerKey = (String, OwnerKind, String);

/// The configured default constraints and what deduces each pod's selector: the Services and the selector-bearing
/// controllers the driver has. [`DefaultSpread::default`] (and [`DefaultSpread::none`]) default nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DefaultSpread {
    constraints: Vec<TopologySpreadConstraint>,
    /// Per namespace, the selector of each Service whose selector is not empty. A Service without a selector
    /// selects no pod, and one with an empty selector adds no label: neither changes a deduction.
    services: BTreeMap<String, Vec<BTreeMap<String, String>>>,
    owners: BTreeMap<OwnerKey, Contribution>,
}

static NONE: DefaultSpread = DefaultSpread {
    constraints: Vec::new(),
    services: BTreeMap::new(),
    owners: BTreeMap::new(),
};

impl DefaultSpread {
    /// The defaults of `config`, with no Services or owners yet.
    pub fn new(config: &SchedulerConfig) -> Self {
        DefaultSpread {
            constraints: config.default_constraints.clone(),
            ..DefaultSpread::default()
        }
    }

    /// A shared value that defaults nothing, for inputs with no scheduler config.
    pub fn none() -> &'static DefaultSpread {
        &NONE
    }

    /// Whether any default is configured: without one a driver need not gather Services or owners.
    pub fn is_active(&self) -> bool {
        !self.constraints.is_empty()
    }

    /// Notes a Service's selector.
    pub fn add_service(&mut self, service: &Service) {
        let Some(selector) = service
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .filter(|s| !s.is_empty())
        else {
            return;
        };
        self.services
            .entry(namespace_of(service.metadata.namespace.as_deref()).to_owned())
            .or_default()
            .push(selector.clone());
    }

    /// Notes a ReplicationController's selector (a map; an empty one adds nothing).
    pub fn add_replication_controller(&mut self, controller: &ReplicationController) {
        let selector = controller
            .spec
            .as_ref()
            .and_then(|s| s.selector.clone())
            .unwrap_or_default();
        self.add_owner(
            OwnerKind::ReplicationController,
            controller.metadata.namespace.as_deref(),
            controller.metadata.name.as_deref(),
            Contribution::Labels(selector),
        );
    }

    /// Notes a ReplicaSet's selector.
    pub fn add_replica_set(&mut self, replica_set: &ReplicaSet) {
        let requirements = requirements(&replica_set.spec.selector);
        self.add_owner(
            OwnerKind::ReplicaSet,
            replica_set.metadata.namespace.as_deref(),
            replica_set.metadata.name.as_deref(),
            Contribution::Requirements(requirements),
        );
    }

    /// Notes a StatefulSet's selector.
    pub fn add_stateful_set(&mut self, stateful_set: &StatefulSet) {
        let requirements = requirements(&stateful_set.spec.selector);
        self.add_owner(
            OwnerKind::StatefulSet,
            stateful_set.metadata.namespace.as_deref(),
            stateful_set.metadata.name.as_deref(),
            Contribution::Requirements(requirements),
        );
    }

    fn add_owner(
        &mut self,
        kind: OwnerKind,
        namespace: Option<&str>,
        name: Option<&str>,
        contribution: Contribution,
    ) {
        let Some(name) = name else {
            return;
        };
        self.owners.insert(
            (namespace_of(namespace).to_owned(), kind, name.to_owned()),
            contribution,
        );
    }

    /// The selector kube-scheduler deduces for `pod`'s default constraints, or `None` when nothing selects it (it
    /// then gets no defaults). An owner the driver does not have contributes nothing, as an owner Karpenter
    /// cannot fetch contributes nothing.
    pub fn selector(&self, pod: &Pod) -> Option<LabelSelector> {
        let namespace = namespace_of(pod.metadata.namespace.as_deref());
        let no_labels = BTreeMap::new();
        let labels = pod.metadata.labels.as_ref().unwrap_or(&no_labels);
        let mut match_labels: BTreeMap<String, String> = BTreeMap::new();
        for selector in self.services.get(namespace).into_iter().flatten() {
            if selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                match_labels.extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        let mut match_expressions = Vec::new();
        let owner = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .and_then(|o| {
                let kind = OwnerKind::of(&o.api_version, &o.kind)?;
                self.owners
                    .get(&(namespace.to_owned(), kind, o.name.clone()))
            });
        match owner {
            Some(Contribution::Labels(selector)) => {
                match_labels.extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            Some(Contribution::Requirements(requirements)) => {
                match_expressions.extend(requirements.iter().cloned());
            }
            None => {}
        }
        if match_labels.is_empty() && match_expressions.is_empty() {
            return None;
        }
        // Absent rather than empty parts: a selector has one spelling, so pods of one workload form one group.
        Some(LabelSelector {
            match_labels: (!match_labels.is_empty()).then_some(match_labels),
            match_expressions: (!match_expressions.is_empty()).then_some(match_expressions),
        })
    }

    /// `pod` as the solve should see it: with the default constraints, each carrying the pod's deduced selector,
    /// when it declares no spread of its own and something selects it; otherwise as it is. A pod's own
    /// constraints, any number of them, replace the defaults entirely (kube-scheduler's all-or-nothing).
    pub fn apply<'p>(&self, pod: &'p Pod) -> Cow<'p, Pod> {
        if self.constraints.is_empty() {
            return Cow::Borrowed(pod);
        }
        let declares_own = pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_ref())
            .is_some_and(|c| !c.is_empty());
        if declares_own {
            return Cow::Borrowed(pod);
        }
        let Some(selector) = self.selector(pod) else {
            return Cow::Borrowed(pod);
        };
        let mut pod = pod.clone();
        let defaults = self
            .constraints
            .iter()
            .map(|c| TopologySpreadConstraint {
                label_selector: Some(selector.clone()),
                ..c.clone()
            })
            .collect();
        pod.spec
            .get_or_insert_with(Default::default)
            .topology_spread_constraints = Some(defaults);
        Cow::Owned(pod)
    }
}

/// An object's namespace, `default` when unset (as the scenario and the solve name pods).
fn namespace_of(namespace: Option<&str>) -> &str {
    namespace.filter(|n| !n.is_empty()).unwrap_or("default")
}

/// A selector as requirements: each `matchLabels` pair as a one-value `In`, then the `matchExpressions`.
fn requirements(selector: &LabelSelector) -> Vec<LabelSelectorRequirement> {
    let labels =
        selector
            .match_labels
            .iter()
            .flatten()
            .map(|(key, value)| LabelSelectorRequirement {
                key: key.clone(),
                operator: "In".to_owned(),
                values: Some(vec![value.clone()]),
            });
    labels
        .chain(selector.match_expressions.iter().flatten().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ZONE: &str = "topology.kubernetes.io/zone";

    fn config(text: &str) -> SchedulerConfig {
        SchedulerConfig::parse(text).expect("a valid scheduler config")
    }

    fn zone_default() -> DefaultSpread {
        DefaultSpread::new(&config(&format!(
            "podTopologySpread: {{defaultConstraints: [{{maxSkew: 1, topologyKey: {ZONE}, whenUnsatisfiable: DoNotSchedule}}]}}"
        )))
    }

    fn pod(metadata: Value, spec: Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c", "image": "pause"}]);
        serde_json::from_value(json!({"metadata": metadata, "spec": spec})).expect("a pod")
    }

    fn owned_by(api_version: &str, kind: &str, name: &str) -> Value {
        json!([{"apiVersion": api_version, "kind": kind, "name": name, "uid": format!("{name}-uid"),
                "controller": true}])
    }

    fn replica_set(name: &str, selector: Value) -> ReplicaSet {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default"},
                                      "spec": {"selector": selector}}))
        .expect("a ReplicaSet")
    }

    fn service(namespace: &str, selector: Value) -> Service {
        serde_json::from_value(json!({"metadata": {"name": "svc", "namespace": namespace},
                                      "spec": {"selector": selector}}))
        .expect("a Service")
    }

    fn spreads(pod: &Pod) -> Vec<TopologySpreadConstraint> {
        pod.spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.clone())
            .unwrap_or_default()
    }

    /// Karpenter's options suite, `SchedulerConfiguration › ParseSchedulerConfiguration`: each document, and
    /// whether it is accepted (`Ok(n)`: with n constraints) or refused (with text of the message).
    #[test]
    fn parse_follows_karpenters_scheduler_configuration_cases() {
        let zone = |extra: &str| {
            format!("podTopologySpread:\n  defaultConstraints:\n  - {{maxSkew: 1, topologyKey: {ZONE}, whenUnsatisfiable: ScheduleAnyway{extra}}}\n")
        };
        let cases: Vec<(&str, String, Result<usize, &str>)> = vec![
            ("should return a nil configuration for an empty value", String::new(), Ok(0)),
            ("(blank, as an unset chart value renders)", "  \n".to_owned(), Ok(0)),
            (
                "should parse a valid podTopologySpread.defaultConstraints document",
                format!("podTopologySpread:\n  defaultConstraints:\n  - maxSkew: 1\n    topologyKey: {ZONE}\n    whenUnsatisfiable: ScheduleAnyway\n  - maxSkew: 3\n    topologyKey: kubernetes.io/hostname\n    whenUnsatisfiable: DoNotSchedule\n"),
                Ok(2),
            ),
            (
                "should parse an equivalent JSON document",
                format!(r#"{{"podTopologySpread":{{"defaultConstraints":[{{"maxSkew":1,"topologyKey":"{ZONE}","whenUnsatisfiable":"ScheduleAnyway"}}]}}}}"#),
                Ok(1),
            ),
            ("should fail fast on an unknown field", format!("{}notARealField: true\n", zone("")), Err("notARealField")),
            ("(an unknown field inside a constraint)", zone(", maxskew: 2"), Err("maxskew")),
            ("should fail on malformed YAML", "podTopologySpread: {".to_owned(), Err("decoding")),
            (
                "should reject a non-positive maxSkew",
                format!("podTopologySpread: {{defaultConstraints: [{{maxSkew: 0, topologyKey: {ZONE}, whenUnsatisfiable: ScheduleAnyway}}]}}"),
                Err("defaultConstraints[0].maxSkew: 0 must be greater than 0"),
            ),
            (
                "should reject a missing topologyKey",
                "podTopologySpread: {defaultConstraints: [{maxSkew: 1, whenUnsatisfiable: ScheduleAnyway}]}".to_owned(),
                Err("defaultConstraints[0].topologyKey: must be set"),
            ),
            ("should reject a labelSelector", zone(", labelSelector: {matchLabels: {app: test}}"), Err("labelSelector: must not be set")),
            ("should reject matchLabelKeys", zone(", matchLabelKeys: [pod-template-hash]"), Err("matchLabelKeys: must not be set")),
            (
                "should reject a topologyKey that isn't a valid label name",
                "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: not a valid label name, whenUnsatisfiable: ScheduleAnyway}]}".to_owned(),
                Err("topologyKey: \"not a valid label name\" is not a valid label key"),
            ),
            (
                "should reject a duplicated topologyKey and whenUnsatisfiable pair",
                format!("podTopologySpread: {{defaultConstraints: [{{maxSkew: 1, topologyKey: {ZONE}, whenUnsatisfiable: ScheduleAnyway}}, {{maxSkew: 3, topologyKey: {ZONE}, whenUnsatisfiable: ScheduleAnyway}}]}}"),
                Err("defaultConstraints[1] repeats [0]"),
            ),
            (
                "should allow the same topologyKey with a different whenUnsatisfiable",
                format!("podTopologySpread: {{defaultConstraints: [{{maxSkew: 1, topologyKey: {ZONE}, whenUnsatisfiable: ScheduleAnyway}}, {{maxSkew: 3, topologyKey: {ZONE}, whenUnsatisfiable: DoNotSchedule}}]}}"),
                Ok(2),
            ),
            (
                "should reject an invalid whenUnsatisfiable",
                format!("podTopologySpread: {{defaultConstraints: [{{maxSkew: 1, topologyKey: {ZONE}, whenUnsatisfiable: Sometimes}}]}}"),
                Err("whenUnsatisfiable: \"Sometimes\" must be DoNotSchedule or ScheduleAnyway"),
            ),
            ("(a null labelSelector is no selector)", zone(", labelSelector: null"), Ok(1)),
            ("(minDomains is carried, with ScheduleAnyway too)", zone(", minDomains: 3"), Ok(1)),
            ("(kerf: minDomains as the pod API allows it)", zone(", minDomains: 0"), Err("minDomains: 0 must be greater than 0")),
            ("(kerf: the node policies as the pod API allows them)", zone(", nodeTaintsPolicy: honor"), Err("nodeTaintsPolicy: \"honor\" must be Honor or Ignore")),
            ("(no podTopologySpread)", "{}".to_owned(), Ok(0)),
        ];
        for (name, text, want) in cases {
            match (SchedulerConfig::parse(&text), want) {
                (Ok(parsed), Ok(n)) => {
                    assert_eq!(parsed.default_constraints.len(), n, "{name}");
                }
                (Err(error), Err(text)) => {
                    assert!(error.to_string().contains(text), "{name}: {error}");
                }
                (got, want) => panic!("{name}: got {got:?}, expected {want:?}"),
            }
        }
        let parsed = config(&format!(
            "podTopologySpread: {{defaultConstraints: [{{maxSkew: 2, topologyKey: {ZONE}, whenUnsatisfiable: DoNotSchedule, minDomains: 3, nodeTaintsPolicy: Honor}}]}}"
        ));
        assert_eq!(
            parsed.default_constraints,
            [TopologySpreadConstraint {
                max_skew: 2,
                topology_key: ZONE.to_owned(),
                when_unsatisfiable: "DoNotSchedule".to_owned(),
                min_domains: Some(3),
                node_taints_policy: Some("Honor".to_owned()),
                ..TopologySpreadConstraint::default()
            }]
        );
        // The same document as a value (a Simulation's spec.schedulerConfig).
        let value = json!({"podTopologySpread": {"defaultConstraints": [
            {"maxSkew": 2, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "minDomains": 3, "nodeTaintsPolicy": "Honor"}]}});
        assert_eq!(SchedulerConfig::from_value(&value), Ok(parsed));
        assert_eq!(
            SchedulerConfig::from_value(&Value::Null),
            Ok(SchedulerConfig::default())
        );
        assert!(
            SchedulerConfig::from_value(&json!({"podTopologySpread": {"defaults": []}})).is_err()
        );
    }

    /// The deduction and the injection, case by case. The cases named after Karpenter's
    /// `topology_test.go › Topology › DefaultConstraints` are the decisions those tests rest on; the conformance
    /// cases (`cmd/tests/conformance/topology/default-constraints-*.yaml`) run them through a whole solve.
    #[test]
    fn the_defaults_go_to_pods_that_declare_none_with_the_selector_kube_scheduler_deduces() {
        let test_labels = json!({"test": "test"});
        let mut spread = zone_default();
        spread.add_replica_set(&replica_set(
            "web",
            json!({"matchLabels": {"test": "test"}}),
        ));
        let rs_selector = |labels: &[(&str, &str)]| LabelSelector {
            match_labels: None,
            match_expressions: Some(
                labels
                    .iter()
                    .map(|(k, v)| LabelSelectorRequirement {
                        key: (*k).to_owned(),
                        operator: "In".to_owned(),
                        values: Some(vec![(*v).to_owned()]),
                    })
                    .collect(),
            ),
        };
        struct Case {
            name: &'static str,
            spread: DefaultSpread,
            pod: Pod,
            /// The selector each default carries; `None`: the pod is left as it is.
            want: Option<LabelSelector>,
        }
        let with_service = {
            let mut s = zone_default();
            s.add_service(&service("default", test_labels.clone()));
            s
        };
        let rc_and_service = {
            let mut s = zone_default();
            s.add_service(&service("default", json!({"app": "web"})));
            s.add_replication_controller(
                &serde_json::from_value(json!({"metadata": {"name": "rc", "namespace": "default"},
                                               "spec": {"selector": {"test": "test"}}}))
                .expect("an RC"),
            );
            s
        };
        let revisions = {
            let mut s = zone_default();
            s.add_replica_set(&replica_set(
                "web-old",
                json!({"matchLabels": {"test": "test", "pod-template-hash": "old"}}),
            ));
            s
        };
        let cases = vec![
            Case {
                name: "should apply default zonal spread to a pod that declares no constraints of its own",
                spread: spread.clone(),
                pod: pod(json!({"name": "p", "labels": test_labels, "ownerReferences": owned_by("apps/v1", "ReplicaSet", "web")}), json!({})),
                want: Some(rs_selector(&[("test", "test")])),
            },
            Case {
                name: "should NOT apply the default to a pod that declares its own constraints",
                spread: spread.clone(),
                pod: pod(
                    json!({"name": "p", "labels": test_labels, "ownerReferences": owned_by("apps/v1", "ReplicaSet", "web")}),
                    json!({"topologySpreadConstraints": [{"maxSkew": 3, "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"test": "test"}}}]}),
                ),
                want: None,
            },
            Case {
                name: "should be a no-op when no default constraints are configured",
                spread: DefaultSpread::default(),
                pod: pod(json!({"name": "p", "labels": test_labels, "ownerReferences": owned_by("apps/v1", "ReplicaSet", "web")}), json!({})),
                want: None,
            },
            Case {
                name: "should not apply the default to a pod with no owner and no matching service",
                spread: spread.clone(),
                pod: pod(json!({"name": "p", "labels": test_labels}), json!({})),
                want: None,
            },
            Case {
                name: "should deduce a selector from a matching service for a pod with no supported owner",
                spread: with_service.clone(),
                pod: pod(json!({"name": "p", "labels": test_labels, "ownerReferences": owned_by("batch/v1", "Job", "job")}), json!({})),
                want: Some(LabelSelector { match_labels: Some([("test".to_owned(), "test".to_owned())].into()), match_expressions: None }),
            },
            Case {
                name: "should spread each Deployment revision independently (the ReplicaSet's pod-template-hash joins the selector)",
                spread: revisions,
                pod: pod(json!({"name": "p", "labels": {"test": "test", "pod-template-hash": "old"},
                                "ownerReferences": owned_by("apps/v1", "ReplicaSet", "web-old")}), json!({})),
                want: Some(rs_selector(&[("pod-template-hash", "old"), ("test", "test")])),
            },
            Case {
                name: "(a Service of another namespace does not select the pod)",
                spread: {
                    let mut s = zone_default();
                    s.add_service(&service("other", test_labels.clone()));
                    s
                },
                pod: pod(json!({"name": "p", "labels": test_labels}), json!({})),
                want: None,
            },
            Case {
                name: "(a Service whose selector the pod does not match adds nothing)",
                spread: with_service.clone(),
                pod: pod(json!({"name": "p", "labels": {"test": "other"}}), json!({})),
                want: None,
            },
            Case {
                name: "(a ReplicationController's map merges with the Services' labels)",
                spread: rc_and_service,
                pod: pod(json!({"name": "p", "labels": {"test": "test", "app": "web"},
                                "ownerReferences": owned_by("v1", "ReplicationController", "rc")}), json!({})),
                want: Some(LabelSelector {
                    match_labels: Some([("app".to_owned(), "web".to_owned()), ("test".to_owned(), "test".to_owned())].into()),
                    match_expressions: None,
                }),
            },
            Case {
                name: "(an owner reference that is not the controller, or of another API version, adds nothing)",
                spread: spread.clone(),
                pod: pod(json!({"name": "p", "labels": test_labels, "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u"},
                    {"apiVersion": "extensions/v1beta1", "kind": "ReplicaSet", "name": "web", "uid": "u", "controller": true}]}), json!({})),
                want: None,
            },
            Case {
                name: "(an owner the driver does not have adds nothing)",
                spread: spread.clone(),
                pod: pod(json!({"name": "p", "labels": test_labels, "ownerReferences": owned_by("apps/v1", "StatefulSet", "web")}), json!({})),
                want: None,
            },
            Case {
                name: "(an empty list of constraints is none: the defaults apply)",
                spread: with_service,
                pod: pod(json!({"name": "p", "labels": test_labels}), json!({"topologySpreadConstraints": []})),
                want: Some(LabelSelector { match_labels: Some([("test".to_owned(), "test".to_owned())].into()), match_expressions: None }),
            },
        ];
        for case in cases {
            let applied = case.spread.apply(&case.pod);
            match case.want {
                None => assert!(matches!(applied, Cow::Borrowed(_)), "{}", case.name),
                Some(selector) => {
                    let got = spreads(&applied);
                    assert_eq!(got.len(), 1, "{}", case.name);
                    assert_eq!(
                        got[0].label_selector.as_ref(),
                        Some(&selector),
                        "{}",
                        case.name
                    );
                    assert_eq!(got[0].topology_key, ZONE, "{}", case.name);
                    assert_eq!(got[0].when_unsatisfiable, "DoNotSchedule", "{}", case.name);
                }
            }
        }
    }

    /// "should spread each workload independently": two ReplicaSets' pods get different selectors, so their
    /// pods form two topology groups; "should carry minDomains through a synthesized default": every field of a
    /// configured default reaches the pod.
    #[test]
    fn each_workload_gets_its_own_selector_and_every_field_of_the_default() {
        let mut spread = DefaultSpread::new(&config(&format!(
            "podTopologySpread: {{defaultConstraints: [{{maxSkew: 1, topologyKey: {ZONE}, whenUnsatisfiable: DoNotSchedule, minDomains: 3}}, {{maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, nodeAffinityPolicy: Ignore}}]}}"
        )));
        spread.add_replica_set(&replica_set("a", json!({"matchLabels": {"app": "a"}})));
        spread.add_replica_set(&replica_set(
            "b",
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["b"]}]}),
        ));
        let a = pod(
            json!({"name": "a-0", "labels": {"app": "a"}, "ownerReferences": owned_by("apps/v1", "ReplicaSet", "a")}),
            json!({}),
        );
        let b = pod(
            json!({"name": "b-0", "labels": {"app": "b"}, "ownerReferences": owned_by("apps/v1", "ReplicaSet", "b")}),
            json!({}),
        );
        let (a, b) = (spreads(&spread.apply(&a)), spreads(&spread.apply(&b)));
        assert_eq!(a.len(), 2);
        assert_ne!(a[0].label_selector, b[0].label_selector);
        assert_eq!(a[0].min_domains, Some(3));
        assert_eq!(a[1].when_unsatisfiable, "ScheduleAnyway");
        assert_eq!(a[1].node_affinity_policy.as_deref(), Some("Ignore"));
        assert_eq!(a[1].label_selector, a[0].label_selector);
        // The shared value defaults nothing.
        assert!(!DefaultSpread::none().is_active());
        assert!(spread.is_active());
    }
}
