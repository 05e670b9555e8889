//! A pod's topology constraints, parsed once per pod: the spread constraints and the required and preferred pod
//! (anti-)affinity terms of its spec, with their keys, label selectors, node filters and relaxation steps.

use super::super::taints::untolerated;
use crate::api::labels;
use crate::api::nodepool::Taint;
use crate::api::requirements::{AllowUndefined, Requirements};
use k8s_openapi::api::core::v1::{
    PodAffinityTerm, PodSpec, Toleration, TopologySpreadConstraint, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A topology key: the hostname (each node its own domain) or any node label, whose values are the domains.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TopologyKey {
    Hostname,
    /// A label key, normalised (`failure-domain.beta.kubernetes.io/zone` reads as `topology.kubernetes.io/zone`).
    Label(Arc<str>),
}

impl TopologyKey {
    /// The key of a constraint; `None` for an empty key, which the apiserver refuses.
    fn parse(key: &str) -> Option<Self> {
        match labels::normalize_key(key) {
            "" => None,
            labels::HOSTNAME => Some(Self::Hostname),
            key => Some(Self::Label(Arc::from(key))),
        }
    }

    /// The key of `label` (normalised).
    pub fn of(label: &str) -> Self {
        Self::parse(label).unwrap_or_else(|| Self::Label(Arc::from("")))
    }

    pub fn label(&self) -> &str {
        match self {
            Self::Hostname => labels::HOSTNAME,
            Self::Label(key) => key,
        }
    }
}

/// Which nodes a spread constraint counts (Kubernetes' `nodeAffinityPolicy` and `nodeTaintsPolicy`): by default
/// the nodes the pod's nodeSelector and required node affinity admit, whatever their taints. Affinity terms
/// count on every node.
#[derive(Clone, Debug, Default)]
pub struct NodeFilter {
    /// `Honor`ed node affinity: the nodeSelector with each required term (any one suffices); `None` when ignored
    /// or when the pod has neither.
    affinity: Option<Vec<Requirements>>,
    /// `Honor`ed taints: the pod's tolerations, which must tolerate every taint of the node.
    tolerations: Option<Vec<Toleration>>,
    /// A canonical text of the two, which groups compare by.
    id: String,
}

impl PartialEq for NodeFilter {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
impl Eq for NodeFilter {}
impl PartialOrd for NodeFilter {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for NodeFilter {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.id.cmp(&other.id)
    }
}

impl NodeFilter {
    /// The filter of a spread constraint with the given policies (`Honor` affinity and `Ignore` taints unless
    /// set), for a pod whose strict node requirements are `strict` (one set per required term).
    fn new(
        affinity_policy: Option<&str>,
        taints_policy: Option<&str>,
        strict: &[Requirements],
        tolerations: &[Toleration],
    ) -> Self {
        let affinity = (affinity_policy != Some("Ignore") && strict.iter().any(|r| !r.is_empty()))
            .then(|| strict.to_vec());
        let tolerations = (taints_policy == Some("Honor")).then(|| tolerations.to_vec());
        let mut id = String::new();
        if let Some(terms) = &affinity {
            for term in terms {
                id.push_str(&format!("[{term}]"));
            }
        }
        if let Some(tolerations) = &tolerations {
            id.push('|');
            id.push_str(&serde_json::to_string(tolerations).unwrap_or_default());
        }
        NodeFilter {
            affinity,
            tolerations,
            id,
        }
    }

    /// Whether a node with `taints` and `requirements` (its labels, or a claim's requirements with the undefined
    /// labels `allow` lets it still get) counts.
    pub fn matches(
        &self,
        taints: &[Taint],
        requirements: &Requirements,
        allow: &AllowUndefined,
    ) -> bool {
        self.affinity.as_ref().is_none_or(|terms| {
            terms
                .iter()
                .any(|term| requirements.is_compatible(term, allow))
        }) && self.admits_taints(taints)
    }

    /// Whether nodes with `taints` (or the domains they offer) count for a pod with this filter.
    pub(super) fn admits_taints(&self, taints: &[Taint]) -> bool {
        self.tolerations
            .as_ref()
            .is_none_or(|tolerations| untolerated(tolerations, taints, true).is_none())
    }
}

/// One `matchExpressions` entry (or `matchLabels` pair) of a label selector.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Expr {
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    DoesNotExist(String),
    /// An operator Kubernetes does not know: matches nothing.
    Never,
}

/// A compiled label selector; `None` inside (a null selector) matches no pod.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Selector(Option<Vec<Expr>>);

impl Selector {
    fn new(selector: Option<&LabelSelector>) -> Self {
        let Some(selector) = selector else {
            return Selector(None);
        };
        let mut exprs: Vec<Expr> = selector
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| Expr::In(k.clone(), BTreeSet::from([v.clone()])))
            .collect();
        for e in selector.match_expressions.iter().flatten() {
            let values = || e.values.iter().flatten().cloned().collect();
            exprs.push(match e.operator.as_str() {
                "In" => Expr::In(e.key.clone(), values()),
                "NotIn" => Expr::NotIn(e.key.clone(), values()),
                "Exists" => Expr::Exists(e.key.clone()),
                "DoesNotExist" => Expr::DoesNotExist(e.key.clone()),
                _ => Expr::Never,
            });
        }
        exprs.sort();
        exprs.dedup();
        Selector(Some(exprs))
    }

    /// Adds `key In [the pod's value]` for each of `keys` the pod has (`matchLabelKeys`).
    fn with_label_keys(mut self, keys: &[String], pod_labels: &BTreeMap<String, String>) -> Self {
        if let Some(exprs) = self.0.as_mut() {
            for key in keys {
                if let Some(value) = pod_labels.get(key) {
                    exprs.push(Expr::In(key.clone(), BTreeSet::from([value.clone()])));
                }
            }
            exprs.sort();
            exprs.dedup();
        }
        self
    }

    pub fn matches(&self, pod_labels: &BTreeMap<String, String>) -> bool {
        let Some(exprs) = &self.0 else {
            return false;
        };
        exprs.iter().all(|e| match e {
            Expr::In(k, vs) => pod_labels.get(k).is_some_and(|v| vs.contains(v)),
            Expr::NotIn(k, vs) => pod_labels.get(k).is_none_or(|v| !vs.contains(v)),
            Expr::Exists(k) => pod_labels.contains_key(k),
            Expr::DoesNotExist(k) => !pod_labels.contains_key(k),
            Expr::Never => false,
        })
    }
}

/// What a constraint asks of its domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConstraintKind {
    Spread { max_skew: i32, min_domains: i32 },
    Affinity,
    AntiAffinity,
}

/// When a constraint is relaxed (controller-behaviour.md §1.4); the rank orders those of one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relax {
    Never,
    /// Step 2: preferred pod affinity, heaviest first.
    PreferredAffinity(usize),
    /// Step 3: preferred pod anti-affinity, heaviest first.
    PreferredAntiAffinity(usize),
    /// Step 5: `ScheduleAnyway` spread, in written order.
    ScheduleAnyway(usize),
}

/// A pod's topology constraint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopologyConstraint {
    pub kind: ConstraintKind,
    pub key: TopologyKey,
    /// The nodes whose pods count (spread only; every node for affinity).
    pub filter: NodeFilter,
    /// The namespaces whose pods count; `None` for all.
    pub namespaces: Option<BTreeSet<String>>,
    pub selector: Selector,
    pub relax: Relax,
}

impl TopologyConstraint {
    /// Whether `other`, running on a node, keeps a pod with this constraint off that node for certain: the
    /// constraint is a required anti-affinity on the hostname that counts `other`.
    pub fn shuts_out_of_host(&self, other: &super::PodInfo) -> bool {
        self.kind == ConstraintKind::AntiAffinity
            && self.relax == Relax::Never
            && self.key == TopologyKey::Hostname
            && selects(self.namespaces.as_ref(), &self.selector, other)
    }

    /// How the constraint reads in an unschedulable reason.
    pub fn describe(&self) -> String {
        let key = self.key.label();
        match (self.kind, self.relax) {
            (ConstraintKind::Spread { max_skew, .. }, relax) => {
                let when = if relax == Relax::Never {
                    "DoNotSchedule"
                } else {
                    "ScheduleAnyway"
                };
                format!("topology spread constraint on {key} (maxSkew {max_skew}, {when})")
            }
            (ConstraintKind::Affinity, Relax::Never) => format!("required pod affinity on {key}"),
            (ConstraintKind::Affinity, _) => format!("preferred pod affinity on {key}"),
            (ConstraintKind::AntiAffinity, Relax::Never) => {
                format!("required pod anti-affinity on {key}")
            }
            (ConstraintKind::AntiAffinity, _) => format!("preferred pod anti-affinity on {key}"),
        }
    }
}

/// The topology constraints of a pod spec; `strict` is the pod's nodeSelector with each required node-affinity
/// term (one set per term).
pub fn constraints(
    spec: &PodSpec,
    namespace: &str,
    pod_labels: &BTreeMap<String, String>,
    strict: &[Requirements],
) -> Vec<TopologyConstraint> {
    let mut out = Vec::new();
    let own_namespace = || Some(BTreeSet::from([namespace.to_owned()]));
    let mut anyway = 0;
    for c in spec.topology_spread_constraints.iter().flatten() {
        let TopologySpreadConstraint {
            max_skew,
            min_domains,
            topology_key,
            when_unsatisfiable,
            label_selector,
            match_label_keys,
            node_affinity_policy,
            node_taints_policy,
        } = c;
        let Some(key) = TopologyKey::parse(topology_key) else {
            continue;
        };
        let relax = if when_unsatisfiable == "ScheduleAnyway" {
            anyway += 1;
            Relax::ScheduleAnyway(anyway - 1)
        } else {
            Relax::Never
        };
        out.push(TopologyConstraint {
            kind: ConstraintKind::Spread {
                max_skew: (*max_skew).max(1),
                min_domains: min_domains.unwrap_or(1).max(1),
            },
            key,
            filter: NodeFilter::new(
                node_affinity_policy.as_deref(),
                node_taints_policy.as_deref(),
                strict,
                spec.tolerations.as_deref().unwrap_or_default(),
            ),
            namespaces: own_namespace(),
            selector: Selector::new(label_selector.as_ref())
                .with_label_keys(match_label_keys.as_deref().unwrap_or_default(), pod_labels),
            relax,
        });
    }
    let affinity = spec.affinity.as_ref();
    let term = |t: &PodAffinityTerm, kind, relax| {
        let key = TopologyKey::parse(&t.topology_key)?;
        let namespaces = match (&t.namespaces, &t.namespace_selector) {
            // An empty selector (`{}` or `{matchLabels: {}}`) selects every namespace.
            (_, Some(sel))
                if sel.match_labels.as_ref().is_none_or(|m| m.is_empty())
                    && sel.match_expressions.as_ref().is_none_or(|e| e.is_empty()) =>
            {
                None
            }
            (Some(ns), _) if !ns.is_empty() => Some(ns.iter().cloned().collect()),
            _ => own_namespace(),
        };
        Some(TopologyConstraint {
            kind,
            key,
            filter: NodeFilter::default(),
            namespaces,
            selector: Selector::new(t.label_selector.as_ref()).with_label_keys(
                t.match_label_keys.as_deref().unwrap_or_default(),
                pod_labels,
            ),
            relax,
        })
    };
    // Affinity and anti-affinity terms have the same shape in different types: gather them per kind.
    let pod_affinity = affinity.and_then(|a| a.pod_affinity.as_ref());
    let anti = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
    let groups = [
        AffinityTerms {
            kind: ConstraintKind::Affinity,
            required: pod_affinity.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
            preferred: pod_affinity.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
            relax: Relax::PreferredAffinity,
        },
        AffinityTerms {
            kind: ConstraintKind::AntiAffinity,
            required: anti.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
            preferred: anti.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
            relax: Relax::PreferredAntiAffinity,
        },
    ];
    for AffinityTerms {
        kind,
        required,
        preferred,
        relax,
    } in groups
    {
        for t in required.into_iter().flatten() {
            out.extend(term(t, kind, Relax::Never));
        }
        for (rank, t) in heaviest_first(preferred).iter().enumerate() {
            out.extend(term(&t.pod_affinity_term, kind, relax(rank)));
        }
    }
    out
}

/// A pod's affinity or anti-affinity terms: the same shape in two Kubernetes types.
struct AffinityTerms<'a> {
    kind: ConstraintKind,
    required: Option<&'a Vec<PodAffinityTerm>>,
    preferred: Option<&'a Vec<WeightedPodAffinityTerm>>,
    /// The relaxation step of the preferred terms, by rank.
    relax: fn(usize) -> Relax,
}

fn heaviest_first(terms: Option<&Vec<WeightedPodAffinityTerm>>) -> Vec<&WeightedPodAffinityTerm> {
    let mut terms: Vec<&WeightedPodAffinityTerm> = terms.into_iter().flatten().collect();
    terms.sort_by_key(|t| std::cmp::Reverse(t.weight));
    terms
}

/// How far a pod has been relaxed: how many terms of each step are dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Relaxed {
    pub affinity: usize,
    pub anti_affinity: usize,
    pub schedule_anyway: usize,
}

impl Relaxed {
    pub fn keeps(&self, relax: Relax) -> bool {
        match relax {
            Relax::Never => true,
            Relax::PreferredAffinity(r) => r >= self.affinity,
            Relax::PreferredAntiAffinity(r) => r >= self.anti_affinity,
            Relax::ScheduleAnyway(r) => r >= self.schedule_anyway,
        }
    }
}

/// Whether a constraint over `namespaces` (`None`: all) with `selector` counts `pod`.
pub(super) fn selects(
    namespaces: Option<&BTreeSet<String>>,
    selector: &Selector,
    pod: &super::PodInfo,
) -> bool {
    namespaces.is_none_or(|ns| ns.contains(&pod.namespace)) && selector.matches(&pod.labels)
}
