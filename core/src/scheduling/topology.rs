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
//!
//! Here: the groups and their counts, built for a solve and updated as pods are placed; [`constraint`] parses a
//! pod's constraints, [`check`] answers where a pod may go.

mod check;
mod constraint;

pub use check::{Domains, Narrowing};
pub use constraint::{
    constraints, ConstraintKind, NodeFilter, Relax, Relaxed, Selector, TopologyConstraint,
    TopologyKey,
};

use super::PodInfo;
use crate::api::nodepool::Taint;
use crate::api::requirements::{AllowUndefined, Requirements};
use constraint::selects;
use std::collections::{BTreeMap, BTreeSet};

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
