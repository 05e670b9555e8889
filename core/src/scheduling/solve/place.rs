//! Placing one pod: on an existing node, on an open claim, or on a new claim, in Karpenter's order, and recording
//! where it went.

use super::*;

impl<'s> Solver<'s, '_> {
    /// Tries pod `index` with the relaxation order of controller-behaviour.md §1.4: required terms in turn,
    /// then preferred pod affinity, pod anti-affinity, node affinity and `ScheduleAnyway` spread dropped one at
    /// a time, then `PreferNoSchedule` taints tolerated.
    pub(super) fn place(&mut self, index: usize) -> Result<(), Miss> {
        let pod = &self.pods[index];
        if pod.variants.is_empty() {
            return Err(Miss::Unfit(String::from("the pod has no requirement set")));
        }
        let count = |f: fn(Relax) -> bool| pod.topology.iter().filter(|c| f(c.relax)).count();
        let affinity = count(|r| matches!(r, Relax::PreferredAffinity(_)));
        let anti = count(|r| matches!(r, Relax::PreferredAntiAffinity(_)));
        let anyway = count(|r| matches!(r, Relax::ScheduleAnyway(_)));
        let terms = pod.required_terms.max(1);
        let last_term = terms - 1;
        let last = pod.variants.len() - 1;
        let mut attempts: Vec<(usize, Relaxed, bool)> = Vec::new();
        let mut relaxed = Relaxed::default();
        attempts.extend((0..terms).map(|v| (v, relaxed, true)));
        for k in 1..=affinity {
            relaxed.affinity = k;
            attempts.push((last_term, relaxed, true));
        }
        for k in 1..=anti {
            relaxed.anti_affinity = k;
            attempts.push((last_term, relaxed, true));
        }
        attempts.extend((terms..pod.variants.len()).map(|v| (v, relaxed, true)));
        for k in 1..=anyway {
            relaxed.schedule_anyway = k;
            attempts.push((last, relaxed, true));
        }
        if self.scheduler.prepared.soft_taints {
            attempts.push((last, relaxed, false));
        }
        let mut reason = String::new();
        for (variant, relaxed, soft) in attempts {
            match self.place_with(index, variant, relaxed, soft) {
                Ok(()) => return Ok(()),
                Err(Miss::Unfit(why)) => reason = why,
                Err(reserved @ Miss::Reserved(_)) => return Err(reserved),
            }
        }
        Err(Miss::Unfit(reason))
    }

    pub(super) fn place_with(
        &mut self,
        index: usize,
        variant: usize,
        relaxed: Relaxed,
        soft: bool,
    ) -> Result<(), Miss> {
        let pod = &self.pods[index];
        let requirements = &pod.variants[variant];
        if let Some(n) = self.existing_fit(index, variant, relaxed, soft) {
            let pods = self.pods;
            let state = &mut self.nodes[n];
            state.room -= &pod.requests;
            state.ports.extend(pod.host_ports.iter().cloned());
            if !state.node.volume_limits.is_empty() {
                state.attached.extend(pod.attached.iter().cloned());
            }
            state.pods.push(index);
            let host = state.host();
            self.topology.record(pods, index, n, &host, |key| {
                single_value(host.requirements, key.label())
                    .into_iter()
                    .collect()
            });
            return Ok(());
        }
        let hosts = self.nodes.len();
        let well_known = &self.scheduler.prepared.allow;
        // Per template, computed on first use.
        let mut narrowings: Vec<Option<TemplateNarrowings<'s>>> = vec![None; self.templates.len()];
        // Claims planned earlier, fewest pods first (then oldest). A hostname-spread or anti-affinity pod that
        // every claim turns away skips the walk.
        let mut placed = None;
        let walk =
            if self
                .topology
                .excludes_every_claim(self.pods, index, relaxed, self.claims.len())
            {
                &[][..]
            } else {
                &self.order[..]
            };
        for &c in walk {
            let claim = &self.claims[c];
            let template = &self.templates[claim.template];
            let Ok((narrowing, allowed)) = narrowings[claim.template]
                .get_or_insert_with(|| {
                    self.narrowings(index, claim.template, variant, relaxed)
                        .map(|n| {
                            let bits = self.narrowing_bits(claim.template, &n);
                            (n, bits)
                        })
                })
                .as_ref()
            else {
                continue;
            };
            // Most claims a zonal-spread pod walks past are in a zone it may not take: one AND rules them out,
            // before the costlier checks.
            if claim
                .domains
                .iter()
                .zip(allowed)
                .any(|(claim, allowed)| claim & allowed == 0)
            {
                continue;
            }
            if untolerated(&pod.tolerations, &template.taints, soft).is_some()
                || ports_clash(&pod.host_ports, &claim.ports)
                || !self.topology.host_ok(self.pods, index, relaxed, hosts + c)
                || !claim.requirements.is_compatible(requirements, well_known)
            {
                continue;
            }
            // Exact where the bits are not (more than 64 domains): rule the claim out before allocating.
            if !narrowing
                .iter()
                .all(|n| n.admits_any(claim.requirements.get(n.key.label())))
            {
                continue;
            }
            let alternatives = if narrowing.is_empty() {
                vec![Vec::new()]
            } else {
                combine(narrowing, &claim.requirements)
            };
            for extra in with_volumes(alternatives, pod) {
                let Ok(fit) = self.scheduler.narrow(claim, pod, requirements, &extra) else {
                    continue;
                };
                // A claim that would break its reservations (or find them all taken) is passed by.
                // The pod leaves the claim's requirements and types as they are where `fit` has none.
                let held = self.reservable(
                    Some(c),
                    fit.0.as_ref().unwrap_or(&claim.requirements),
                    fit.1.as_deref().unwrap_or(&claim.instance_types),
                );
                let Ok(held) = held else {
                    continue;
                };
                placed = Some((c, fit, held));
                break;
            }
            if placed.is_some() {
                break;
            }
        }
        if let Some((c, fit, held)) = placed {
            if let Some(held) = held {
                self.reservations.hold(c, held);
            }
            self.join(c, index, fit);
            self.reorder(c);
            self.record(index, c);
            return Ok(());
        }
        let mut reasons = Vec::new();
        for t in 0..self.templates.len() {
            let outcome = self.open_claim(t, index, variant, relaxed, soft);
            let pool = &self.templates[t].nodepool;
            match outcome {
                Ok(()) => return Ok(()),
                Err(Miss::Unfit(why)) => reasons.push(format!("nodepool {pool}: {why}")),
                // No fallback to a NodePool of lower weight while this one has reserved capacity for the pod.
                Err(Miss::Reserved(why)) => {
                    return Err(Miss::Reserved(format!("nodepool {pool}: {why}")))
                }
            }
        }
        if reasons.is_empty() {
            return Err(Miss::Unfit("no nodepool can launch nodes".to_owned()));
        }
        Err(Miss::Unfit(reasons.join("; ")))
    }

    /// The reservations claim `claim` (`None` for a new one) would hold with `requirements` and `types` after
    /// taking a pod; `None` when the catalog has no reservation.
    pub(super) fn reservable(
        &self,
        claim: Option<usize>,
        requirements: &Requirements,
        types: &[usize],
    ) -> Result<Option<std::collections::BTreeSet<String>>, &'static str> {
        if self.reservations.is_empty() {
            return Ok(None);
        }
        self.reservations
            .reservable(
                self.scheduler.reserved,
                claim,
                self.scheduler.catalog,
                types,
                requirements,
            )
            .map(Some)
    }

    /// Moves claim `c`, which just took a pod, to its place in `order` (fewest pods, then oldest).
    pub(super) fn reorder(&mut self, c: usize) {
        let claims = &self.claims;
        let key = |c: usize| (claims[c].pods.len(), c);
        let before = (claims[c].pods.len() - 1, c);
        let from = self.order.partition_point(|&o| key(o) < before);
        if self.order.get(from) == Some(&c) {
            self.order.remove(from);
        }
        let to = self.order.partition_point(|&o| key(o) < key(c));
        self.order.insert(to, c);
    }

    /// The first existing node that takes pod `index` with `requirements`, checked as Karpenter does: taints,
    /// host ports, resources, labels, then topology.
    pub(super) fn existing_fit(
        &self,
        index: usize,
        variant: usize,
        relaxed: Relaxed,
        soft: bool,
    ) -> Option<usize> {
        let pod = &self.pods[index];
        let requirements = &pod.variants[variant];
        // The label-key narrowings, computed on first use: the same for every node.
        let mut narrowings: Option<Result<Vec<Narrowing>, String>> = None;
        (0..self.nodes.len()).find(|&host| {
            let state = &self.nodes[host];
            let node = state.node;
            if untolerated(&pod.tolerations, &node.taints, soft).is_some()
                || state.exceeds_volume_limits(pod)
                || ports_clash(&pod.host_ports, &state.ports)
                || !pod.requests.fits_in(&state.room)
                || !node.requirements.is_compatible(requirements, state.allow)
                || !pod.volume_alternatives.is_empty()
                    && !pod.volume_alternatives.iter().any(|alternative| {
                        node.requirements.is_compatible(alternative, state.allow)
                    })
            {
                return false;
            }
            if !self.topology.host_ok(self.pods, index, relaxed, host) {
                return false;
            }
            let Ok(narrowings) = narrowings
                .get_or_insert_with(|| {
                    self.narrowings_over(index, &self.domains.nodes, variant, relaxed)
                })
                .as_ref()
            else {
                return false;
            };
            narrowings.iter().all(|n| {
                single_value(&node.requirements, n.key.label())
                    .is_some_and(|v| n.allowed.contains(&v))
            })
        })
    }

    /// Counts pod `p`, just placed on claim `c`, in the topology groups.
    pub(super) fn record(&mut self, p: usize, c: usize) {
        let claim = &self.claims[c];
        let domains = self.domains;
        let per_key = &domains.per_template[claim.template];
        let requirements = &claim.requirements;
        let host = Host {
            requirements,
            taints: &self.templates[claim.template].taints,
            allow: &self.scheduler.prepared.allow,
        };
        let values = |key: &TopologyKey| {
            domains
                .index(key)
                .map(|k| {
                    per_key[k]
                        .iter()
                        .map(String::as_str)
                        .filter(|d| requirements.get(key.label()).is_none_or(|r| r.has(d)))
                        .collect()
                })
                .unwrap_or_default()
        };
        self.topology
            .record(self.pods, p, self.nodes.len() + c, &host, values);
    }

    /// A new claim from template `t` holding the pod, if the pool (and what is left of its limits) can take it.
    pub(super) fn open_claim(
        &mut self,
        t: usize,
        index: usize,
        variant: usize,
        relaxed: Relaxed,
        soft: bool,
    ) -> Result<(), Miss> {
        let scheduler = self.scheduler;
        let pod = &self.pods[index];
        let requirements = &pod.variants[variant];
        let template = &self.templates[t];
        if template.unusable.is_none() {
            self.topology.host_allows(
                self.pods,
                index,
                relaxed,
                self.nodes.len() + self.claims.len(),
            )?;
        }
        let instance_types = match &template.remaining {
            Some(left) if template.unusable.is_none() => {
                if let Some(limit) = left.exhausted() {
                    return Err(Miss::Unfit(format!(
                        "{limit} limit has been exhausted for nodepool {}",
                        template.nodepool
                    )));
                }
                let admitted: Arc<[usize]> = template
                    .instance_types
                    .iter()
                    .copied()
                    .filter(|i| left.admits(&scheduler.catalog.instance_types[*i].capacity))
                    .collect();
                if admitted.is_empty() {
                    return Err(Miss::Unfit(format!(
                        "all available instance types exceed limits for nodepool {}",
                        template.nodepool
                    )));
                }
                admitted
            }
            _ => template.instance_types.clone(),
        };
        let alternatives = if template.unusable.is_none() {
            let narrowing = self.narrowings(index, t, variant, relaxed)?;
            with_volumes(combine(&narrowing, &template.requirements), pod)
        } else {
            vec![Vec::new()]
        };
        let mut result = Err(Miss::Unfit(String::new()));
        let mut held = None;
        for extra in &alternatives {
            result = scheduler
                .fresh_claim(t, instance_types.clone(), pod, requirements, extra, soft)
                .map_err(Miss::Unfit);
            if let Ok(claim) = &result {
                match self.reservable(None, &claim.requirements, &claim.instance_types) {
                    Ok(ids) => {
                        held = ids;
                        break;
                    }
                    Err(why) => result = Err(Miss::Reserved(why.to_owned())),
                }
            }
        }
        let mut claim = result?;
        claim.instance_types = self.lists.share(claim.instance_types);
        claim.domains = self.domain_bits(t, &claim.requirements);
        claim.pods.push(index);
        // A new claim uses up the largest capacity it might launch with: pessimistic, as Karpenter is.
        if let Some(left) = self.templates[t].remaining.as_mut() {
            left.consume(&largest_capacity(scheduler.catalog, &claim.instance_types));
        }
        self.claims.push(claim);
        let c = self.claims.len() - 1;
        if let Some(held) = held {
            self.reservations.hold(c, held);
        }
        self.reorder(c);
        self.record(index, c);
        Ok(())
    }
    /// Pod `index` joins claim `c` with `fit`, what [`Scheduler::narrow`] found for it there.
    pub(super) fn join(&mut self, c: usize, index: usize, fit: Narrowed) {
        let pod = &self.pods[index];
        let (merged, types) = fit;
        let bits = merged
            .as_ref()
            .map(|merged| self.domain_bits(self.claims[c].template, merged));
        let claim = &mut self.claims[c];
        if let (Some(merged), Some(bits)) = (merged, bits) {
            claim.domains = bits;
            claim.requirements = merged;
        }
        if let Some(types) = types {
            claim.floor = self.scheduler.floor(claim.template, &types);
            claim.instance_types = self.lists.share(types.into());
        }
        claim.requests += &pod.requests;
        claim.ports.extend(pod.host_ports.iter().cloned());
        claim.pods.push(index);
    }

    /// Claim `c` as planned: its launch list cut to [`MAX_INSTANCE_TYPES`] cheapest types, and the smallest
    /// DaemonSet overhead of those added to its requests; narrowed to its capacity reservations if it holds any.
    /// Under the Strict minValues policy, a cut that breaks minValues is an error for the claim's pods.
    pub(super) fn finish(
        &self,
        c: usize,
        claim: &Claim,
        pods: &[PodInfo],
        rankings: &mut Rankings,
    ) -> Result<PlannedClaim, String> {
        let scheduler = self.scheduler;
        let template = &self.templates[claim.template];
        let reserved = self.reservations.finish(c, &claim.requirements);
        let requirements = reserved.as_ref().unwrap_or(&claim.requirements);
        let mut ranked = match &scheduler.prepared.offering_bits {
            // A claim launching into its reservations ranks its own types: the shared rankings do not tell
            // reservations apart.
            _ if reserved.is_some() => scheduler.rank(&claim.instance_types, requirements),
            // Claims of one template that allow the same offerings rank their types alike: rank the template's
            // types once and keep the claim's.
            Some(bits) => {
                let all = rankings
                    .ranked
                    .entry((claim.template, bits.allowed(&claim.requirements)))
                    .or_insert_with(|| {
                        scheduler.rank(&template.instance_types, &claim.requirements)
                    });
                let mut member = vec![false; scheduler.catalog.instance_types.len()];
                for i in claim.instance_types.iter() {
                    member[*i] = true;
                }
                all.iter().filter(|(i, _)| member[*i]).copied().collect()
            }
            None => scheduler.ranked(claim),
        };
        if template.min_values && scheduler.min_values == MinValuesPolicy::Strict {
            let types: Vec<usize> = ranked.iter().map(|(i, _)| *i).collect();
            let needed = min_values::shortest_prefix(scheduler.catalog, requirements, &types)
                .map_err(|unmet| format!("nodepool {}: {unmet}", template.nodepool))?;
            if needed > MAX_INSTANCE_TYPES {
                return Err(format!(
                    "nodepool {}: minValues needs the {needed} cheapest instance types, more than the {MAX_INSTANCE_TYPES} a NodeClaim may list",
                    template.nodepool
                ));
            }
        }
        ranked.truncate(MAX_INSTANCE_TYPES);
        let mut requests = claim.requests.clone();
        if let Some(daemons) =
            scheduler.prepared.daemons[claim.template].smallest(ranked.iter().map(|(i, _)| *i))
        {
            requests += &daemons.overhead;
        }
        let indices: Vec<usize> = ranked.iter().map(|(i, _)| *i).collect();
        let instance_types = match rankings.lists.get(&indices) {
            Some(list) => list.clone(),
            None => {
                let list: Arc<[TypeName]> = indices
                    .iter()
                    .map(|i| scheduler.prepared.names[*i].clone())
                    .collect();
                rankings.lists.insert(indices, list.clone());
                list
            }
        };
        Ok(PlannedClaim {
            nodepool: template.nodepool.clone(),
            requirements: requirements.clone(),
            instance_types,
            pods: claim.pods.iter().map(|p| pods[*p].key.clone()).collect(),
            requests,
            cheapest: scheduler.choice(requirements, &ranked),
        })
    }
}
