//! Topology: spread constraints and required/preferred pod (anti-)affinity (controller-behaviour.md §1.3
//! "Topology"), on the hostname or any node label.
//!
//! Constraints are parsed once per pod ([`TopologyConstraint`]). A solve dedups them into groups (same kind,
//! key, namespaces, selector and, for a spread, node filter) that keep a count of matching pods per domain, and
//! precomputes which groups each pod owns and which it matches, so the per-claim checks are map lookups. A
//! label's domain is a label value; a hostname domain is a host: an existing node, or a claim (a new claim is a
//! new hostname with no pods). Hosts are numbered existing nodes first, then claims.
//!
//! As in Karpenter, a spread's skew is measured over every domain the cluster could offer the pod: the values
//! any NodePool's instance types or requirements give the key, and the labels of the nodes its filter counts
//! (its `nodeTaintsPolicy` and `nodeAffinityPolicy`), limited to what the pod's own node selector and required
//! node affinity allow; preferred node affinity does not narrow it.

use super::taints::untolerated;
use crate::api::labels;
use crate::api::nodepool::Taint;
use crate::api::requirements::{AllowUndefined, Requirement, Requirements};
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
    fn admits_taints(&self, taints: &[Taint]) -> bool {
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

/// Matching pods per domain.
#[derive(Clone, Debug, Default)]
struct Counts {
    values: BTreeMap<String, u32>,
    /// By host index, for hostname.
    hosts: Vec<u32>,
    /// How many claims (hosts from [`Topology::first_claim`] on) have a count: when every claim has, a pod
    /// that may not join such a host need not look at the claims one by one.
    claims_counted: usize,
    total: u32,
}

/// Counts a running pod in its node's domain of `key` (nothing when the node lacks the label).
fn count_bound(counts: &mut Counts, key: &TopologyKey, running: &Bound) {
    match key {
        TopologyKey::Hostname => counts.add_host(running.host, false),
        key => {
            if let Some(domain) = single_value(running.node.requirements, key.label()) {
                counts.add_value(domain);
            }
        }
    }
}

/// The single value `requirements` allow for `key`, if exactly one.
pub fn single_value<'r>(requirements: &'r Requirements, key: &str) -> Option<&'r str> {
    requirements
        .get(key)
        .and_then(|r| r.values())
        .filter(|v| v.len() == 1)
        .and_then(|v| v.first())
        .map(String::as_str)
}

impl Counts {
    fn value(&self, domain: &str) -> u32 {
        self.values.get(domain).copied().unwrap_or(0)
    }

    fn host(&self, host: usize) -> u32 {
        self.hosts.get(host).copied().unwrap_or(0)
    }

    fn add_value(&mut self, domain: &str) {
        *self.values.entry(domain.to_owned()).or_default() += 1;
        self.total += 1;
    }

    /// Counts a pod on `host`, a claim when `claim`.
    fn add_host(&mut self, host: usize, claim: bool) {
        if self.hosts.len() <= host {
            self.hosts.resize(host + 1, 0);
        }
        if claim && self.hosts[host] == 0 {
            self.claims_counted += 1;
        }
        self.hosts[host] += 1;
        self.total += 1;
    }
}

/// Constraints shared by pods (same kind, key, namespaces, selector, node filter), with their counts.
#[derive(Debug)]
struct Group {
    kind: ConstraintKind,
    key: TopologyKey,
    namespaces: Option<BTreeSet<String>>,
    selector: Selector,
    /// The nodes whose pods count.
    filter: NodeFilter,
    /// A spread on a label: the domains the cluster could offer, which skew is measured over.
    universe: BTreeSet<String>,
    /// Pods the selector matches.
    matching: Counts,
    /// Anti-affinity only: where the owners are, which matching pods must avoid.
    owners: Counts,
}

/// A constraint a pod owns: its index in the pod's constraints, its group, and whether the pod matches it.
#[derive(Clone, Copy, Debug)]
struct Owned {
    constraint: usize,
    group: usize,
    self_match: bool,
}

/// What makes two constraints one group.
type GroupKey = (
    ConstraintKind,
    TopologyKey,
    Option<BTreeSet<String>>,
    Selector,
    NodeFilter,
);

/// The topology state of one solve.
#[derive(Debug, Default)]
pub struct Topology {
    groups: Vec<Group>,
    owned: Vec<Vec<Owned>>,
    /// Per pod: the groups whose selector matches it.
    matches: Vec<Vec<usize>>,
    /// Per pod: the anti-affinity groups whose selector matches it (the inverse constraint).
    inverse: Vec<Vec<usize>>,
    /// The first host that is a claim: hosts before it are existing nodes.
    first_claim: usize,
}

/// The domains of a label key for a pod on a template (or on the existing nodes).
pub struct Domains<'a, 'b> {
    pub key: &'b TopologyKey,
    /// What the template and the pod allow and the template can offer: the domains the pod may take.
    pub eligible: Vec<&'a str>,
    /// The pod's strict requirement on the key (nodeSelector and the required node-affinity term, no
    /// preferences): a spread's skew is measured over the domains it allows.
    pub strict: Option<&'b Requirement>,
}

/// The domains the cluster could offer, which spread skew is measured over (Karpenter's domain groups).
#[derive(Debug, Default)]
pub struct Universe<'a> {
    /// Per label key: the domains NodePools offer, each with the taints of a pool that offers it.
    pub offered: BTreeMap<TopologyKey, Vec<(&'a str, &'a [Taint])>>,
    /// The existing nodes (not in-flight claims), whose labels a spread counts when its filter admits them.
    pub nodes: Vec<Host<'a>>,
}

/// A node or claim as topology sees it.
#[derive(Clone, Copy, Debug)]
pub struct Host<'a> {
    /// A node's labels, or a claim's requirements.
    pub requirements: &'a Requirements,
    pub taints: &'a [Taint],
    /// The labels it does not define but may still get (an in-flight claim's well-known ones).
    pub allow: &'a AllowUndefined,
}

/// The domains a pod's constraints allow on one key, preferred first.
#[derive(Clone, Debug)]
pub struct Narrowing<'a> {
    pub key: TopologyKey,
    pub allowed: Vec<&'a str>,
    /// Whether the claim must be narrowed to one of them (a spread or an affinity counts the placement).
    pub single: bool,
    /// Whether every eligible domain is allowed (nothing to narrow unless `single`).
    pub all: bool,
}

impl Narrowing<'_> {
    /// Whether a claim whose requirement on the key is `claim` allows one of the domains: [`Self::alternatives`]
    /// is not empty.
    pub fn admits_any(&self, claim: Option<&Requirement>) -> bool {
        claim.is_none_or(|r| self.allowed.iter().any(|d| r.has(d)))
    }

    /// The requirements to try on a claim whose requirement on the key is `claim`, preferred first; empty when
    /// the claim allows none of the domains.
    pub fn alternatives(&self, claim: Option<&Requirement>) -> Vec<Requirement> {
        let allowed = self
            .allowed
            .iter()
            .copied()
            .filter(|d| claim.is_none_or(|r| r.has(d)));
        if self.single {
            allowed
                .map(|d| Requirement::one_of(self.key.label(), [d]))
                .collect()
        } else {
            let allowed: Vec<&str> = allowed.collect();
            if allowed.is_empty() {
                Vec::new()
            } else {
                vec![Requirement::one_of(self.key.label(), allowed)]
            }
        }
    }
}

/// A pod already running on a node, and the node.
pub struct Bound<'a> {
    pub pod: &'a super::PodInfo,
    /// The node's hostname domain (its index among the solve's hosts).
    pub host: usize,
    pub node: Host<'a>,
}

impl Group {
    fn selects(&self, pod: &super::PodInfo) -> bool {
        selects(self.namespaces.as_ref(), &self.selector, pod)
    }
}

/// Whether a constraint over `namespaces` (`None`: all) with `selector` counts `pod`.
fn selects(
    namespaces: Option<&BTreeSet<String>>,
    selector: &Selector,
    pod: &super::PodInfo,
) -> bool {
    namespaces.is_none_or(|ns| ns.contains(&pod.namespace)) && selector.matches(&pod.labels)
}

impl Topology {
    /// The topology of a solve of the pending `pods`, with the `bound` pods of existing nodes counted: they
    /// count for the pending pods' constraints, and their required anti-affinity keeps matching pods away.
    /// Hosts from `first_claim` on are claims.
    /// `universe` gives the domains a spread's skew is measured over.
    pub fn new(
        pods: &[super::PodInfo],
        bound: &[Bound],
        first_claim: usize,
        universe: &Universe,
    ) -> Self {
        let mut ids: BTreeMap<GroupKey, usize> = BTreeMap::new();
        let mut groups = Vec::new();
        let mut group_of = |c: &TopologyConstraint| {
            *ids.entry((
                c.kind,
                c.key.clone(),
                c.namespaces.clone(),
                c.selector.clone(),
                c.filter.clone(),
            ))
            .or_insert_with(|| {
                groups.push(Group {
                    kind: c.kind,
                    key: c.key.clone(),
                    namespaces: c.namespaces.clone(),
                    selector: c.selector.clone(),
                    filter: c.filter.clone(),
                    universe: BTreeSet::new(),
                    matching: Counts::default(),
                    owners: Counts::default(),
                });
                groups.len() - 1
            })
        };
        let mut owned = Vec::with_capacity(pods.len());
        for pod in pods {
            let mine: Vec<Owned> = pod
                .topology
                .iter()
                .enumerate()
                .map(|(i, c)| Owned {
                    constraint: i,
                    group: group_of(c),
                    self_match: false,
                })
                .collect();
            owned.push(mine);
        }
        // Running pods' required anti-affinity, as (group, pod) pairs.
        let mut bound_owned = Vec::new();
        for (b, running) in bound.iter().enumerate() {
            for c in &running.pod.topology {
                if c.kind == ConstraintKind::AntiAffinity && c.relax == Relax::Never {
                    bound_owned.push((group_of(c), b));
                }
            }
        }
        let mut matches = Vec::with_capacity(pods.len());
        let mut inverse = Vec::with_capacity(pods.len());
        for (p, pod) in pods.iter().enumerate() {
            let matching: Vec<usize> = groups
                .iter()
                .enumerate()
                .filter(|(_, g)| g.selects(pod))
                .map(|(i, _)| i)
                .collect();
            for o in owned[p].iter_mut() {
                o.self_match = matching.contains(&o.group);
            }
            inverse.push(
                matching
                    .iter()
                    .copied()
                    .filter(|g| groups[*g].kind == ConstraintKind::AntiAffinity)
                    .collect(),
            );
            matches.push(matching);
        }
        for g in &mut groups {
            if matches!(g.kind, ConstraintKind::Spread { .. }) && g.key != TopologyKey::Hostname {
                g.universe = spread_universe(&g.key, &g.filter, universe);
            }
        }
        for running in bound {
            let node = &running.node;
            for g in groups.iter_mut().filter(|g| {
                g.selects(running.pod)
                    && g.filter.matches(node.taints, node.requirements, node.allow)
            }) {
                count_bound(&mut g.matching, &g.key, running);
            }
        }
        for (g, b) in bound_owned {
            let g = &mut groups[g];
            count_bound(&mut g.owners, &g.key, &bound[b]);
        }
        Topology {
            groups,
            owned,
            matches,
            inverse,
            first_claim,
        }
    }

    /// Whether pod `p` is outside topology altogether: no constraint of its own, and no constraint of any pod
    /// (pending, or running with a required anti-affinity) counts it. Where it goes changes no other pod's
    /// options.
    pub fn is_free(&self, p: usize) -> bool {
        self.owned[p].is_empty() && self.matches[p].is_empty()
    }

    /// Whether pod `p` has any constraint or inverse constraint on `key`.
    pub fn touches(&self, p: usize, key: &TopologyKey) -> bool {
        self.owned[p]
            .iter()
            .any(|o| self.groups[o.group].key == *key)
            || self.inverse[p].iter().any(|g| self.groups[*g].key == *key)
    }

    /// Whether pod `p` may go onto host `host` (a new claim when it has no pods yet) as far as hostname
    /// constraints go; the error names the constraint.
    pub fn host_allows(
        &self,
        pods: &[super::PodInfo],
        p: usize,
        relaxed: Relaxed,
        host: usize,
    ) -> Result<(), String> {
        if self.host_ok(pods, p, relaxed, host) {
            return Ok(());
        }
        self.host_check(pods, p, relaxed, host)
    }

    /// [`Self::host_allows`] without building the error: the scheduler's hot path over planned claims.
    pub fn host_ok(
        &self,
        pods: &[super::PodInfo],
        p: usize,
        relaxed: Relaxed,
        host: usize,
    ) -> bool {
        self.owned[p].iter().all(|o| {
            let g = &self.groups[o.group];
            g.key != TopologyKey::Hostname
                || !relaxed.keeps(pods[p].topology[o.constraint].relax)
                || Self::host_fits(g, o, host)
        }) && self.inverse[p].iter().all(|g| {
            let g = &self.groups[*g];
            g.key != TopologyKey::Hostname || g.owners.host(host) == 0
        })
    }

    /// Whether some hostname constraint of pod `p` (its own, or the anti-affinity of pods it matches) rules out
    /// every one of the `claims` claims of the solve because each already holds a pod it counts: then
    /// [`Self::host_ok`] is false for each, and a caller can skip them all at once.
    pub fn excludes_every_claim(
        &self,
        pods: &[super::PodInfo],
        p: usize,
        relaxed: Relaxed,
        claims: usize,
    ) -> bool {
        // Only a constraint that a single counted pod breaks: anti-affinity, or a spread whose skew the pod
        // itself uses up.
        let one_breaks = |g: &Group, o: &Owned| match g.kind {
            ConstraintKind::Spread { max_skew, .. } => {
                i64::from(max_skew) - i64::from(o.self_match) == 0
            }
            ConstraintKind::Affinity => false,
            ConstraintKind::AntiAffinity => true,
        };
        self.owned[p].iter().any(|o| {
            let g = &self.groups[o.group];
            g.key == TopologyKey::Hostname
                && relaxed.keeps(pods[p].topology[o.constraint].relax)
                && one_breaks(g, o)
                && g.matching.claims_counted == claims
        }) || self.inverse[p].iter().any(|g| {
            let g = &self.groups[*g];
            g.key == TopologyKey::Hostname && g.owners.claims_counted == claims
        })
    }

    fn host_fits(g: &Group, o: &Owned, host: usize) -> bool {
        let count = g.matching.host(host);
        match g.kind {
            ConstraintKind::Spread { max_skew, .. } => {
                i64::from(count) + i64::from(o.self_match) <= i64::from(max_skew)
            }
            ConstraintKind::Affinity => count > 0 || (g.matching.total == 0 && o.self_match),
            ConstraintKind::AntiAffinity => count == 0,
        }
    }

    fn host_check(
        &self,
        pods: &[super::PodInfo],
        p: usize,
        relaxed: Relaxed,
        host: usize,
    ) -> Result<(), String> {
        for o in &self.owned[p] {
            let g = &self.groups[o.group];
            let c = &pods[p].topology[o.constraint];
            if g.key != TopologyKey::Hostname || !relaxed.keeps(c.relax) {
                continue;
            }
            if !Self::host_fits(g, o, host) {
                return Err(format!("{} is not satisfied", c.describe()));
            }
        }
        for g in &self.inverse[p] {
            let g = &self.groups[*g];
            if g.key == TopologyKey::Hostname && g.owners.host(host) > 0 {
                return Err(format!(
                    "the pod matches the pod anti-affinity on {} of a pod on that node",
                    g.key.label()
                ));
            }
        }
        Ok(())
    }

    /// The requirements to try on a label key, preferred first: `None` when the pod has no constraint there; an
    /// error naming the constraint when no eligible domain is allowed.
    pub fn narrowing<'d>(
        &self,
        pods: &[super::PodInfo],
        p: usize,
        relaxed: Relaxed,
        domains: &Domains<'d, '_>,
    ) -> Result<Option<Narrowing<'d>>, String> {
        let key = domains.key;
        let mut allowed: Vec<&'d str> = domains.eligible.clone();
        let mut touched = false;
        // The single domain wanted when a spread or an affinity needs its placement counted.
        let mut single = false;
        let mut spread_counts: Option<usize> = None;
        for o in &self.owned[p] {
            let g = &self.groups[o.group];
            let c = &pods[p].topology[o.constraint];
            if g.key != *key || !relaxed.keeps(c.relax) {
                continue;
            }
            touched = true;
            match g.kind {
                ConstraintKind::Spread {
                    max_skew,
                    min_domains,
                } => {
                    single = true;
                    spread_counts.get_or_insert(o.group);
                    // No domain at all to measure against (the pod requires one nothing offers): Karpenter's
                    // minimum stays unset and every domain passes.
                    if let Some(min) = spread_min(g, min_domains, domains.strict) {
                        allowed.retain(|d| {
                            i64::from(g.matching.value(d)) + i64::from(o.self_match)
                                - i64::from(min)
                                <= i64::from(max_skew)
                        });
                    }
                }
                ConstraintKind::Affinity => {
                    single = true;
                    // A pod that selects itself starts a domain when no pod it matches is in a domain it may
                    // take (none at all, or only where its own requirements rule out), as Karpenter's
                    // `nextDomainAffinity` bootstraps.
                    let bootstrap = o.self_match
                        && !g
                            .matching
                            .values
                            .iter()
                            .any(|(d, n)| *n > 0 && domains.strict.is_none_or(|r| r.has(d)));
                    if !bootstrap {
                        allowed.retain(|d| g.matching.value(d) > 0);
                    }
                }
                ConstraintKind::AntiAffinity => allowed.retain(|d| g.matching.value(d) == 0),
            }
            if allowed.is_empty() {
                return Err(format!(
                    "{} allows none of {} [{}]",
                    c.describe(),
                    key.label(),
                    domains.eligible.join(", ")
                ));
            }
        }
        for g in &self.inverse[p] {
            let g = &self.groups[*g];
            if g.key != *key {
                continue;
            }
            touched = true;
            allowed.retain(|d| g.owners.value(d) == 0);
            if allowed.is_empty() {
                return Err(format!(
                    "the pod matches the pod anti-affinity on {} of pods in every allowed domain",
                    key.label()
                ));
            }
        }
        if !touched {
            return Ok(None);
        }
        if single {
            // Lowest count of the first spread first; then the order of the domains.
            if let Some(g) = spread_counts {
                let counts = &self.groups[g].matching;
                allowed.sort_by_key(|d| counts.value(d));
            }
        }
        Ok(Some(Narrowing {
            key: key.clone(),
            all: allowed.len() == domains.eligible.len(),
            allowed,
            single,
        }))
    }

    /// Counts pod `p`, placed on host `host` (`node`, whose requirements already include the pod's). `values`
    /// gives the domains of a label key the host may still take.
    pub fn record<'d>(
        &mut self,
        pods: &[super::PodInfo],
        p: usize,
        host: usize,
        node: &Host,
        values: impl Fn(&TopologyKey) -> Vec<&'d str>,
    ) {
        for g in &self.matches[p] {
            let g = &mut self.groups[*g];
            if !g.filter.matches(node.taints, node.requirements, node.allow) {
                continue;
            }
            match &g.key {
                TopologyKey::Hostname => g.matching.add_host(host, host >= self.first_claim),
                key => {
                    let domains = values(key);
                    if g.kind == ConstraintKind::AntiAffinity {
                        for d in domains {
                            g.matching.add_value(d);
                        }
                    } else if let [d] = domains.as_slice() {
                        g.matching.add_value(d);
                    } else if let Some(v) = single_value(node.requirements, key.label()) {
                        g.matching.add_value(v);
                    }
                }
            }
        }
        // Only required anti-affinity keeps matching pods away (Karpenter's inverse topology).
        for o in &self.owned[p] {
            if pods[p].topology[o.constraint].relax != Relax::Never {
                continue;
            }
            let g = &mut self.groups[o.group];
            if g.kind != ConstraintKind::AntiAffinity {
                continue;
            }
            match &g.key {
                TopologyKey::Hostname => g.owners.add_host(host, host >= self.first_claim),
                key => {
                    for d in values(key) {
                        g.owners.add_value(d);
                    }
                }
            }
        }
    }
}

/// The domains a spread on label `key` with `filter` measures skew over: those of the NodePools whose taints the
/// filter admits, and the labels of the existing nodes it counts.
fn spread_universe(
    key: &TopologyKey,
    filter: &NodeFilter,
    universe: &Universe,
) -> BTreeSet<String> {
    let mut domains: BTreeSet<String> = universe
        .offered
        .get(key)
        .into_iter()
        .flatten()
        .filter(|(_, taints)| filter.admits_taints(taints))
        .map(|(d, _)| (*d).to_owned())
        .collect();
    for node in &universe.nodes {
        if filter.matches(node.taints, node.requirements, node.allow) {
            if let Some(d) = single_value(node.requirements, key.label()) {
                domains.insert(d.to_owned());
            }
        }
    }
    domains
}

/// The least count of spread group `g` over its domains that the pod's `strict` requirement allows; zero when
/// fewer than `min_domains` are; `None` when there is none at all.
fn spread_min(g: &Group, min_domains: i32, strict: Option<&Requirement>) -> Option<u32> {
    let recorded_elsewhere = g
        .matching
        .values
        .keys()
        .filter(|d| !g.universe.contains(*d));
    let mut domains = 0usize;
    let mut min = u32::MAX;
    for d in g.universe.iter().chain(recorded_elsewhere) {
        if strict.is_none_or(|r| r.has(d)) {
            domains += 1;
            min = min.min(g.matching.value(d));
        }
    }
    if domains == 0 {
        return None;
    }
    Some(if (domains as i64) < i64::from(min_domains) {
        0
    } else {
        min
    })
}
