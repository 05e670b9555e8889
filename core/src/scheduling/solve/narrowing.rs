//! A pod's narrowings of a claim: the label-key requirements its topology and volumes add, as domain bits per
//! template, and the requirement lists to try.

use super::*;

impl<'s> Solver<'s, '_> {
    /// What pod `p`'s label-key constraints allow on template `t` with requirement set `variant`, or the
    /// constraint that cannot be met. The same for every claim of the template; each claim then keeps the
    /// domains it still allows.
    pub(super) fn narrowings(
        &self,
        p: usize,
        t: usize,
        variant: usize,
        relaxed: Relaxed,
    ) -> Result<Vec<Narrowing<'s>>, String> {
        let domains: &'s SolveDomains = self.domains;
        self.narrowings_over(p, &domains.per_template[t], variant, relaxed)
    }

    /// The domains of template `t` that `narrowings` allow, as [`domain_bits`] per key (all for a key they
    /// leave alone).
    pub(super) fn narrowing_bits(&self, t: usize, narrowings: &[Narrowing]) -> Vec<u64> {
        let domains = self.domains;
        domains
            .keys
            .iter()
            .enumerate()
            .map(|(k, key)| match narrowings.iter().find(|n| n.key == *key) {
                Some(n) => domain_bits(&domains.per_template[t][k], |d| n.allowed.contains(&d)),
                None => u64::MAX,
            })
            .collect()
    }

    /// The domains of template `t` that `requirements` allow, as [`domain_bits`] per key.
    pub(super) fn domain_bits(&self, t: usize, requirements: &Requirements) -> Vec<u64> {
        let domains = self.domains;
        domains
            .keys
            .iter()
            .enumerate()
            .map(|(k, key)| {
                let theirs = requirements.get(key.label());
                domain_bits(&domains.per_template[t][k], |d| {
                    theirs.is_none_or(|r| r.has(d))
                })
            })
            .collect()
    }

    /// The zone pod `p`'s constraints hold it to as the solve starts (Karpenter computes it before scheduling):
    /// its strict zone requirement, its volumes, and the zones its topology constraints on the zone key allow
    /// over every zone the solve knows (Karpenter's `GetTopologyZoneConstraints`).
    pub(super) fn effective_zone(&self, p: usize) -> String {
        let pod = &self.pods[p];
        let zone = TopologyKey::of(labels::ZONE);
        let strict = pod.strict_of(0).and_then(|r| r.get(labels::ZONE));
        let topology = match self.domains.index(&zone) {
            Some(k) if self.topology.touches(p, &zone) => {
                let theirs = pod.variants.first().and_then(|r| r.get(labels::ZONE));
                let domains = Domains {
                    key: &zone,
                    eligible: self.domains.nodes[k]
                        .iter()
                        .map(String::as_str)
                        .filter(|d| theirs.is_none_or(|r| r.has(d)))
                        .collect(),
                    strict,
                };
                match self
                    .topology
                    .narrowing(self.pods, p, Relaxed::default(), &domains)
                {
                    Err(_) => Some(Vec::new()),
                    Ok(None) => None,
                    Ok(Some(n)) => Some(n.allowed),
                }
            }
            _ => None,
        };
        effective_zone(strict, &pod.volume_alternatives, topology.as_deref())
    }

    /// [`Self::narrowings`] over `domains` (per key of the solve).
    pub(super) fn narrowings_over<'d>(
        &self,
        p: usize,
        domains: &'d [Vec<String>],
        variant: usize,
        relaxed: Relaxed,
    ) -> Result<Vec<Narrowing<'d>>, String> {
        let pod = &self.pods[p];
        let requirements = &pod.variants[variant];
        let strict = pod.strict_of(variant);
        let mut out = Vec::new();
        for (key, offered) in self.domains.keys.iter().zip(domains) {
            if !self.topology.touches(p, key) {
                continue;
            }
            let theirs = requirements.get(key.label());
            let domains = Domains {
                key,
                eligible: offered
                    .iter()
                    .map(String::as_str)
                    .filter(|d| theirs.is_none_or(|r| r.has(d)))
                    .collect(),
                strict: strict.and_then(|r| r.get(key.label())),
            };
            if let Some(n) = self.topology.narrowing(self.pods, p, relaxed, &domains)? {
                if n.single || !n.all {
                    out.push(n);
                }
            }
        }
        Ok(out)
    }
}

/// Which of `domains` (a template's zones or capacity types) `allows` takes, bit i for the i-th; every bit set
/// when there are more than 64, so that a test against the bits never rules anything out.
pub(super) fn domain_bits(domains: &[String], allows: impl Fn(&str) -> bool) -> u64 {
    if domains.len() > 64 {
        return u64::MAX;
    }
    domains
        .iter()
        .enumerate()
        .filter(|(_, d)| allows(d))
        .fold(0, |bits, (i, _)| bits | 1 << i)
}

/// The requirement lists to try on a claim: each of `alternatives` (the topology's) with each of the pod's
/// volume alternatives, the volume's outermost (Karpenter tries a pod's volume alternatives in turn on each
/// claim, its topology within each).
pub(super) fn with_volumes(
    alternatives: Vec<Vec<Requirement>>,
    pod: &PodInfo,
) -> Vec<Vec<Requirement>> {
    if pod.volume_alternatives.is_empty() {
        return alternatives;
    }
    pod.volume_alternatives
        .iter()
        .flat_map(|volume| {
            alternatives.iter().map(move |topology| {
                let mut extra = topology.clone();
                extra.extend(volume.iter().cloned());
                extra
            })
        })
        .collect()
}

/// The topology requirements to try on a claim with `requirements`, preferred first: one empty set when nothing
/// narrows, none when the claim allows no domain the constraints do.
pub(super) fn combine(
    narrowings: &[Narrowing],
    requirements: &Requirements,
) -> Vec<Vec<Requirement>> {
    let mut alternatives: Vec<Vec<Requirement>> = vec![Vec::new()];
    for n in narrowings {
        let options = n.alternatives(requirements.get(n.key.label()));
        alternatives = alternatives
            .iter()
            .flat_map(|base| {
                options.iter().map(move |o| {
                    let mut next = base.clone();
                    next.push(o.clone());
                    next
                })
            })
            .collect();
    }
    alternatives
}

/// The zones and the capacity types of the offerings of `types` that `template`'s requirements allow: its
/// topology domains on those two keys.
pub(super) fn offering_domains(
    catalog: &Catalog,
    template: &Template,
    types: &[usize],
) -> [Vec<String>; 2] {
    let mut zones = std::collections::BTreeSet::new();
    let mut capacity_types = std::collections::BTreeSet::new();
    for o in types
        .iter()
        .flat_map(|i| &catalog.instance_types[*i].offerings)
    {
        if allows(&template.requirements, o) {
            zones.insert(o.zone.as_str());
            capacity_types.insert(o.capacity_type.as_str());
        }
    }
    [
        zones.into_iter().map(str::to_owned).collect(),
        capacity_types.into_iter().map(str::to_owned).collect(),
    ]
}
