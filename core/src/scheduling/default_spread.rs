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
mod tests;
