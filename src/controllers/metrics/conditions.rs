//! The status-condition and termination families operatorpkg's status controller publishes for every kind
//! Karpenter watches (awslabs/operatorpkg status/metrics.go and status/controller.go): per object, one gauge
//! per condition and the seconds it has held; per transition, a counter and how long the condition held its
//! previous status; per object being deleted, how long it has been terminating, and once gone, how long that
//! took. NodeClaims, NodePools and EC2NodeClasses also feed the deprecated kind-less `operator_status_condition_*`
//! and `operator_termination_*` families, as Karpenter still emits them (`EmitDeprecatedMetrics`).
//!
//! Transitions are seen by comparing each pass with the previous one ([`ConditionTracker`]): like
//! operatorpkg's, this is lossy when a condition flips back within one pass.

use super::buckets;
use super::gauge_set::{GaugeSet, Labels, Samples};
use super::nodeclaims::seconds_between;
use crate::api::condition::Condition;
use crate::api::labels as keys;
use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::jiff::Timestamp;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, HashMap, HashSet};

type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

/// The kinds whose conditions are published.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    NodeClaim,
    Node,
    NodePool,
    EC2NodeClass,
}

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::NodeClaim,
        Kind::Node,
        Kind::NodePool,
        Kind::EC2NodeClass,
    ];

    /// The kind in lower case, the metric names' infix.
    fn object(self) -> &'static str {
        match self {
            Kind::NodeClaim => "nodeclaim",
            Kind::Node => "node",
            Kind::NodePool => "nodepool",
            Kind::EC2NodeClass => "ec2nodeclass",
        }
    }

    fn group_kind(self) -> (&'static str, &'static str) {
        match self {
            Kind::NodeClaim => ("karpenter.sh", "NodeClaim"),
            Kind::Node => ("", "Node"),
            Kind::NodePool => ("karpenter.sh", "NodePool"),
            Kind::EC2NodeClass => ("karpenter.k8s.aws", "EC2NodeClass"),
        }
    }

    /// The object labels Karpenter adds to this kind's series (`status.WithLabels`), as label key and metric
    /// label name (`/`, `.` and `-` as `_`).
    fn extra_labels(self) -> &'static [(&'static str, &'static str)] {
        const CLAIM: &[(&str, &str)] = &[
            (keys::EC2NODECLASS, "karpenter_k8s_aws_ec2nodeclass"),
            (keys::NODEPOOL, "karpenter_sh_nodepool"),
        ];
        const NODE: &[(&str, &str)] = &[
            (keys::EC2NODECLASS, "karpenter_k8s_aws_ec2nodeclass"),
            (keys::NODEPOOL, "karpenter_sh_nodepool"),
            (keys::NODE_INITIALIZED, "karpenter_sh_initialized"),
        ];
        match self {
            Kind::NodeClaim => CLAIM,
            Kind::Node => NODE,
            Kind::NodePool | Kind::EC2NodeClass => &[],
        }
    }

    /// Whether the kind-less deprecated families get this kind's samples (not Nodes: Karpenter does not ask).
    fn deprecated(self) -> bool {
        self != Kind::Node
    }

    /// Karpenter gives its own kinds `ExponentialBuckets(0.5, 2, 15)`; the AWS provider leaves EC2NodeClass at
    /// the default buckets.
    fn histogram(self) -> fn() -> Histogram {
        match self {
            Kind::EC2NodeClass => buckets::default,
            _ => buckets::condition,
        }
    }
}

/// One condition of an object.
#[derive(Clone, Debug, PartialEq)]
pub struct Cond {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub since: Option<Timestamp>,
}

impl Cond {
    pub fn of(condition: &Condition) -> Cond {
        Cond {
            type_: condition.type_.clone(),
            status: condition.status.clone(),
            reason: condition.reason.clone(),
            since: condition.last_transition_time.parse().ok(),
        }
    }

    pub fn of_node(condition: &NodeCondition) -> Cond {
        Cond {
            type_: condition.type_.clone(),
            status: condition.status.clone(),
            reason: condition.reason.clone().unwrap_or_default(),
            since: condition.last_transition_time.as_ref().map(|t| t.0),
        }
    }
}

/// What a pass reads of one object.
#[derive(Clone, Debug)]
pub struct Object<'a> {
    pub name: &'a str,
    pub labels: Option<&'a BTreeMap<String, String>>,
    pub deletion: Option<Timestamp>,
    pub conditions: Vec<Cond>,
}

/// The conditions of each object seen last pass, and the objects seen terminating, of one kind.
#[derive(Debug, Default)]
pub struct ConditionTracker {
    observed: HashMap<String, Vec<Cond>>,
    terminating: HashMap<String, (Timestamp, Labels)>,
}

/// One pass over one kind. Labels exclude the deprecated families' `group` and `kind`.
#[derive(Debug, Default, PartialEq)]
pub struct ConditionStep {
    pub count: Samples,
    pub current_status: Samples,
    pub terminating: Samples,
    /// Transitions: `{type, status, reason, …}`.
    pub transitions: Vec<Labels>,
    /// How long the previous status held: `{type, status, …}` of the previous status.
    pub durations: Samples,
    /// Objects gone since last pass after terminating, and how long that took: the kind's extra labels only.
    pub terminated: Samples,
}

fn pair(name: &str, value: &str) -> (String, String) {
    (name.to_owned(), value.to_owned())
}

impl ConditionTracker {
    /// One pass over `objects`, all of kind `kind`, at `now`.
    pub fn step(&mut self, kind: Kind, objects: &[Object<'_>], now: Timestamp) -> ConditionStep {
        let mut step = ConditionStep::default();
        let alive: HashSet<&str> = objects.iter().map(|o| o.name).collect();
        let gone: Vec<String> = self
            .terminating
            .keys()
            .filter(|name| !alive.contains(name.as_str()))
            .cloned()
            .collect();
        for name in gone {
            if let Some((deleted, extra)) = self.terminating.remove(&name) {
                step.terminated.push((extra, seconds_between(deleted, now)));
            }
        }
        self.observed
            .retain(|name, _| alive.contains(name.as_str()));
        for object in objects {
            let extra: Labels = kind
                .extra_labels()
                .iter()
                .map(|(key, name)| {
                    let value = object
                        .labels
                        .and_then(|l| l.get(*key))
                        .map_or("", String::as_str);
                    pair(name, value)
                })
                .collect();
            let id = [pair("namespace", ""), pair("name", object.name)];
            if let Some(deleted) = object.deletion {
                let labels: Labels = id.iter().cloned().chain(extra.iter().cloned()).collect();
                step.terminating
                    .push((labels, seconds_between(deleted, now)));
                self.terminating
                    .insert(object.name.to_owned(), (deleted, extra.clone()));
            }
            for condition in &object.conditions {
                let labels: Labels = id
                    .iter()
                    .cloned()
                    .chain([
                        pair("type", &condition.type_),
                        pair("status", &condition.status),
                        pair("reason", &condition.reason),
                    ])
                    .chain(extra.iter().cloned())
                    .collect();
                step.count.push((labels.clone(), 1.0));
                if let Some(since) = condition.since {
                    step.current_status
                        .push((labels, seconds_between(since, now)));
                }
            }
            let previous = self
                .observed
                .insert(object.name.to_owned(), object.conditions.clone())
                .unwrap_or_default();
            for condition in &object.conditions {
                let before = previous.iter().find(|c| c.type_ == condition.type_);
                // A condition never seen counts as Unknown (operatorpkg's nil condition).
                if before.map_or("Unknown", |c| c.status.as_str()) == condition.status {
                    continue;
                }
                step.transitions.push(
                    [
                        pair("type", &condition.type_),
                        pair("status", &condition.status),
                        pair("reason", &condition.reason),
                    ]
                    .into_iter()
                    .chain(extra.iter().cloned())
                    .collect(),
                );
                let Some(before) = before else { continue };
                if let (Some(from), Some(to)) = (before.since, condition.since) {
                    step.durations.push((
                        [pair("type", &before.type_), pair("status", &before.status)]
                            .into_iter()
                            .chain(extra.iter().cloned())
                            .collect(),
                        seconds_between(from, to),
                    ));
                }
            }
        }
        step
    }
}

/// The six families of one kind, or the six deprecated kind-less ones.
struct Families {
    count: GaugeSet,
    current_status: GaugeSet,
    terminating: GaugeSet,
    transitions: Family<Labels, Counter>,
    durations: HistogramFamily,
    terminated: HistogramFamily,
}

impl Families {
    /// Registered under `operator_<infix>…` (`infix` `nodeclaim_`, or empty for the deprecated ones).
    fn register(registry: &mut Registry, infix: &str, histogram: fn() -> Histogram) -> Families {
        let families = Families {
            count: GaugeSet::default(),
            current_status: GaugeSet::default(),
            terminating: GaugeSet::default(),
            transitions: Family::default(),
            durations: Family::new_with_constructor(histogram),
            terminated: Family::new_with_constructor(histogram),
        };
        let deprecated = if infix.is_empty() {
            " (deprecated)"
        } else {
            ""
        };
        registry.register(
            format!("operator_{infix}status_condition_count"),
            format!("1 per condition of each object, by type, status and reason{deprecated}"),
            families.count.clone(),
        );
        registry.register(
            format!("operator_{infix}status_condition_current_status_seconds"),
            format!("Seconds each condition of each object has held its status{deprecated}"),
            families.current_status.clone(),
        );
        registry.register(
            format!("operator_{infix}status_condition_transitions"),
            format!("Condition transitions seen, by type, new status and reason{deprecated}"),
            families.transitions.clone(),
        );
        registry.register(
            format!("operator_{infix}status_condition_transition_seconds"),
            format!("Seconds a condition held its previous status before a transition{deprecated}"),
            families.durations.clone(),
        );
        registry.register(
            format!("operator_{infix}termination_current_time_seconds"),
            format!("Seconds each object being deleted has been terminating{deprecated}"),
            families.terminating.clone(),
        );
        registry.register(
            format!("operator_{infix}termination_duration_seconds"),
            format!("Seconds from an object's deletion to it being gone{deprecated}"),
            families.terminated.clone(),
        );
        families
    }
}

/// Every `operator_*` family.
pub struct ConditionMetrics {
    kinds: Vec<(Kind, Families)>,
    deprecated: Families,
}

/// Accumulates the gauge samples of the deprecated families over the kinds of one pass.
#[derive(Default)]
pub struct DeprecatedSamples {
    count: Samples,
    current_status: Samples,
    terminating: Samples,
}

impl ConditionMetrics {
    pub(super) fn register(registry: &mut Registry) -> ConditionMetrics {
        ConditionMetrics {
            kinds: Kind::ALL
                .into_iter()
                .map(|kind| {
                    let infix = format!("{}_", kind.object());
                    (kind, Families::register(registry, &infix, kind.histogram()))
                })
                .collect(),
            deprecated: Families::register(registry, "", buckets::default),
        }
    }

    /// Publishes `step` of `kind`; its deprecated gauge samples go into `deprecated`, published by
    /// [`ConditionMetrics::publish_deprecated`] once every kind is in.
    pub fn publish(&self, kind: Kind, step: ConditionStep, deprecated: &mut DeprecatedSamples) {
        let Some((_, families)) = self.kinds.iter().find(|(k, _)| *k == kind) else {
            return;
        };
        for labels in &step.transitions {
            families.transitions.get_or_create(labels).inc();
        }
        for (labels, seconds) in &step.durations {
            families.durations.get_or_create(labels).observe(*seconds);
        }
        for (labels, seconds) in &step.terminated {
            families.terminated.get_or_create(labels).observe(*seconds);
        }
        if kind.deprecated() {
            let (group, kind_name) = kind.group_kind();
            // The deprecated families carry only the base labels, plus the object's group and kind.
            let base = |labels: &Labels, keep: usize| -> Labels {
                labels
                    .iter()
                    .take(keep)
                    .cloned()
                    .chain([pair("group", group), pair("kind", kind_name)])
                    .collect()
            };
            for labels in &step.transitions {
                self.deprecated
                    .transitions
                    .get_or_create(&base(labels, 3))
                    .inc();
            }
            for (labels, seconds) in &step.durations {
                self.deprecated
                    .durations
                    .get_or_create(&base(labels, 2))
                    .observe(*seconds);
            }
            for (labels, seconds) in &step.terminated {
                self.deprecated
                    .terminated
                    .get_or_create(&base(labels, 0))
                    .observe(*seconds);
            }
            let gauges = [
                (&mut deprecated.count, &step.count, 5),
                (&mut deprecated.current_status, &step.current_status, 5),
                (&mut deprecated.terminating, &step.terminating, 2),
            ];
            for (into, samples, keep) in gauges {
                into.extend(samples.iter().map(|(l, v)| (base(l, keep), *v)));
            }
        }
        families.count.replace(step.count);
        families.current_status.replace(step.current_status);
        families.terminating.replace(step.terminating);
    }

    pub fn publish_deprecated(&self, samples: DeprecatedSamples) {
        self.deprecated.count.replace(samples.count);
        self.deprecated
            .current_status
            .replace(samples.current_status);
        self.deprecated.terminating.replace(samples.terminating);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("a timestamp")
    }

    fn cond(type_: &str, status: &str, reason: &str, since: &str) -> Cond {
        Cond {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            since: Some(at(since)),
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().map(|(n, v)| pair(n, v)).collect()
    }

    #[test]
    fn gauges_transitions_and_terminations_of_a_claim() {
        let object_labels: BTreeMap<String, String> = [
            ("karpenter.sh/nodepool".to_owned(), "general".to_owned()),
            (
                "karpenter.k8s.aws/ec2nodeclass".to_owned(),
                "default".to_owned(),
            ),
        ]
        .into();
        let mut tracker = ConditionTracker::default();
        let first = Object {
            name: "c1",
            labels: Some(&object_labels),
            deletion: None,
            conditions: vec![
                cond("Launched", "Unknown", "Pending", "2026-11-23T10:00:00Z"),
                cond("Ready", "False", "NotLaunched", "2026-11-23T10:00:00Z"),
            ],
        };
        let step = tracker.step(Kind::NodeClaim, &[first], at("2026-11-23T10:00:30Z"));
        let extra = [
            ("karpenter_k8s_aws_ec2nodeclass", "default"),
            ("karpenter_sh_nodepool", "general"),
        ];
        let launched = labels(&[
            ("namespace", ""),
            ("name", "c1"),
            ("type", "Launched"),
            ("status", "Unknown"),
            ("reason", "Pending"),
            extra[0],
            extra[1],
        ]);
        assert!(step.count.contains(&(launched.clone(), 1.0)));
        assert!(step.current_status.contains(&(launched, 30.0)));
        // A first Unknown is no transition; a first False is.
        assert_eq!(
            step.transitions,
            vec![labels(&[
                ("type", "Ready"),
                ("status", "False"),
                ("reason", "NotLaunched"),
                extra[0],
                extra[1]
            ])]
        );
        assert!(step.durations.is_empty());

        let second = Object {
            name: "c1",
            labels: Some(&object_labels),
            deletion: Some(at("2026-11-23T10:02:00Z")),
            conditions: vec![
                cond("Launched", "True", "Launched", "2026-11-23T10:01:00Z"),
                cond("Ready", "False", "NotLaunched", "2026-11-23T10:00:00Z"),
            ],
        };
        let step = tracker.step(Kind::NodeClaim, &[second], at("2026-11-23T10:02:30Z"));
        assert_eq!(
            step.transitions,
            vec![labels(&[
                ("type", "Launched"),
                ("status", "True"),
                ("reason", "Launched"),
                extra[0],
                extra[1]
            ])]
        );
        assert_eq!(
            step.durations,
            vec![(
                labels(&[
                    ("type", "Launched"),
                    ("status", "Unknown"),
                    extra[0],
                    extra[1]
                ]),
                60.0
            )]
        );
        assert_eq!(
            step.terminating,
            vec![(
                labels(&[("namespace", ""), ("name", "c1"), extra[0], extra[1]]),
                30.0
            )]
        );

        let step = tracker.step(Kind::NodeClaim, &[], at("2026-11-23T10:03:00Z"));
        assert_eq!(step.terminated, vec![(labels(&extra), 60.0)]);
        assert_eq!(step.count, Vec::new());
        assert!(tracker.observed.is_empty() && tracker.terminating.is_empty());
    }

    #[test]
    fn published_steps_reach_the_kind_and_deprecated_families() {
        let mut registry = Registry::default();
        let metrics = ConditionMetrics::register(&mut registry);
        let mut tracker = ConditionTracker::default();
        let pool = Object {
            name: "general",
            labels: None,
            deletion: None,
            conditions: vec![cond("Ready", "True", "Ready", "2026-11-23T10:00:00Z")],
        };
        let step = tracker.step(Kind::NodePool, &[pool], at("2026-11-23T10:00:10Z"));
        let mut deprecated = DeprecatedSamples::default();
        metrics.publish(Kind::NodePool, step, &mut deprecated);
        metrics.publish_deprecated(deprecated);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodable");
        for expected in [
            r#"operator_nodepool_status_condition_count{namespace="",name="general",type="Ready",status="True",reason="Ready"} 1.0"#,
            r#"operator_nodepool_status_condition_transitions_total{type="Ready",status="True",reason="Ready"} 1"#,
            r#"operator_status_condition_count{namespace="",name="general",type="Ready",status="True",reason="Ready",group="karpenter.sh",kind="NodePool"} 1.0"#,
            r#"operator_status_condition_transitions_total{type="Ready",status="True",reason="Ready",group="karpenter.sh",kind="NodePool"} 1"#,
            r#"operator_status_condition_current_status_seconds{namespace="",name="general",type="Ready",status="True",reason="Ready",group="karpenter.sh",kind="NodePool"} 10.0"#,
        ] {
            assert!(text.contains(expected), "{expected} missing from\n{text}");
        }
    }
}
