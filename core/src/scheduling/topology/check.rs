//! The checks of a placement against a solve's counts: whether a pod may join a host as far as hostname
//! constraints go, and which domains of a label key its spreads (skew and `minDomains`), affinities and the
//! anti-affinities of other pods leave it.

use super::{ConstraintKind, Group, Owned, Relaxed, Topology, TopologyKey};
use crate::api::requirements::Requirement;

/// The domains of a label key for a pod on a template (or on the existing nodes).
pub struct Domains<'a, 'b> {
    pub key: &'b TopologyKey,
    /// What the template and the pod allow and the template can offer: the domains the pod may take.
    pub eligible: Vec<&'a str>,
    /// The pod's strict requirement on the key (nodeSelector and the required node-affinity term, no
    /// preferences): a spread's skew is measured over the domains it allows.
    pub strict: Option<&'b Requirement>,
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

impl Topology {
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
