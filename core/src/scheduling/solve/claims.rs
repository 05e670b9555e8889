//! A new claim's instance types: which a template's types a pod narrows them to, their ranking, the cheapest
//! choice, and the resource floor a claim's types all hold.

use super::*;

impl Scheduler<'_> {
    /// A new claim from template `t` (restricted to `instance_types`) holding `pod`, or why it cannot.
    pub(super) fn fresh_claim(
        &self,
        t: usize,
        instance_types: Arc<[usize]>,
        pod: &PodInfo,
        requirements: &Requirements,
        extra: &[Requirement],
        soft: bool,
    ) -> Result<Claim, String> {
        let template = &self.prepared.templates[t];
        if let Some(why) = &template.unusable {
            return Err(why.clone());
        }
        if let Some(taint) = untolerated(&pod.tolerations, &template.taints, soft) {
            return Err(format!("did not tolerate taint {}", describe(taint)));
        }
        let empty = Claim {
            template: t,
            requirements: template.requirements.clone(),
            admitted: instance_types.clone(),
            instance_types,
            requests: Resources::default(),
            pods: Vec::new(),
            ports: Vec::new(),
            floor: Floor::default(),
            domains: Vec::new(),
        };
        let (requirements, instance_types) = self.narrow(&empty, pod, requirements, extra)?;
        let instance_types = instance_types.map_or_else(|| empty.instance_types.clone(), Arc::from);
        let requirements = requirements.unwrap_or(empty.requirements);
        Ok(Claim {
            requirements,
            admitted: empty.instance_types.clone(),
            floor: self.floor(t, &instance_types),
            instance_types,
            requests: pod.requests.clone(),
            ports: pod.host_ports.clone(),
            ..empty
        })
    }

    /// The domains template `t` offers on label `key`: for a zone or capacity type those of the offerings it
    /// allows; for another label the values its requirements list and those its instance types have that its
    /// requirements allow (as Karpenter builds its topology domains).
    pub(super) fn template_domains(&self, t: usize, key: &TopologyKey) -> Vec<String> {
        match key.label() {
            labels::ZONE => return self.prepared.domains[t][0].clone(),
            labels::CAPACITY_TYPE => return self.prepared.domains[t][1].clone(),
            _ => {}
        }
        let template = &self.prepared.templates[t];
        self.types_domains(template, &template.instance_types, key)
    }

    /// The values `template` with the catalog `types` offers on `key`.
    pub(super) fn types_domains(
        &self,
        template: &Template,
        types: &[usize],
        key: &TopologyKey,
    ) -> Vec<String> {
        if matches!(key.label(), labels::ZONE | labels::CAPACITY_TYPE) {
            let [zones, capacity_types] = offering_domains(self.catalog, template, types);
            return if key.label() == labels::ZONE {
                zones
            } else {
                capacity_types
            };
        }
        let theirs = template.requirements.get(key.label());
        let mut values: std::collections::BTreeSet<&str> = theirs
            .and_then(|r| r.values())
            .into_iter()
            .flat_map(|v| v.iter().map(String::as_str))
            .collect();
        for i in types {
            let it = &self.catalog.instance_types[*i];
            for v in it
                .requirements
                .get(key.label())
                .and_then(|r| r.values())
                .into_iter()
                .flatten()
            {
                if theirs.is_none_or(|r| r.has(v)) {
                    values.insert(v);
                }
            }
        }
        values.into_iter().map(str::to_owned).collect()
    }

    /// The least room among `types` on template `t`.
    pub(super) fn floor(&self, t: usize, types: &[usize]) -> Floor {
        Floor::of(types.iter().map(|i| &self.prepared.daemons[t].room[*i]))
    }

    /// The claim's requirements and instance types with the pod and the topology narrowing `extra` added (each
    /// `None` when unchanged: the claim then keeps sharing its list), or why the pod does not fit.
    pub(super) fn narrow(
        &self,
        claim: &Claim,
        pod: &PodInfo,
        requirements: &Requirements,
        extra: &[Requirement],
    ) -> Result<Narrowed, String> {
        let narrowed = !requirements.is_empty() || !extra.is_empty();
        if !narrowed
            && pod.host_ports.is_empty()
            && claim.floor.holds(&(claim.requests.clone() + &pod.requests))
        {
            return Ok((None, None));
        }
        let merged = if narrowed {
            claim
                .requirements
                .compatible(requirements, &self.prepared.allow)
                .map_err(|why| format!("incompatible requirements, {why}"))?;
            // A volume's topology may name a key nothing defines (a CSI driver's own zone label): no node this
            // pool launches would carry it, as Karpenter's volume-alternative compatibility check says.
            if let Some(r) = extra.iter().find(|r| {
                !r.allows_absent()
                    && claim.requirements.get(r.key()).is_none()
                    && requirements.get(r.key()).is_none()
                    && !self.prepared.allow.allows(r.key())
            }) {
                return Err(format!(
                    "incompatible requirements, label {:?} does not have known values",
                    r.key()
                ));
            }
            let mut merged = claim.requirements.clone();
            merged.add_all(requirements);
            for r in extra {
                merged.add(r.clone());
            }
            Some(merged)
        } else {
            None
        };
        // The claim's types already meet its requirements: only the keys the pod and `extra` add can rule a
        // type out, and only a zone or capacity type can rule out its offerings. An allowed offering implies the
        // type's zone and capacity type meet the requirements, so with offering bits those keys are left to them.
        let mut offers_touched = false;
        let touched: Option<Requirements> = merged.as_ref().map(|merged| {
            requirements
                .iter()
                .map(Requirement::key)
                .chain(extra.iter().map(Requirement::key))
                .filter(|key| {
                    let offering_key = *key == labels::ZONE || *key == labels::CAPACITY_TYPE;
                    offers_touched |= offering_key;
                    !(offering_key && self.prepared.offering_bits.is_some())
                })
                .filter_map(|key| merged.get(key).cloned())
                .collect()
        });
        let offers = match &merged {
            Some(merged) if offers_touched => Some(match &self.prepared.offering_bits {
                Some(bits) => Offers::Bits(bits, bits.allowed(merged)),
                None => Offers::Slow(merged),
            }),
            _ => None,
        };
        let total = claim.requests.clone() + &pod.requests;
        let daemons = &self.prepared.daemons[claim.template];
        let types: Vec<usize> = claim
            .instance_types
            .iter()
            .copied()
            .filter(|i| total.fits_in(&daemons.room[*i]))
            .filter(|i| {
                pod.host_ports.is_empty()
                    || !ports_clash(&pod.host_ports, &daemons.groups[daemons.group[*i]].ports)
            })
            .filter(|i| {
                let it = &self.catalog.instance_types[*i];
                touched
                    .as_ref()
                    .is_none_or(|t| t.is_empty() || t.has_intersection(&it.requirements))
                    && offers.as_ref().is_none_or(|o| match o {
                        Offers::Bits(bits, allowed) => bits.offers(*i) & allowed != 0,
                        Offers::Slow(merged) => cheapest_offering(it, merged).is_some(),
                    })
            })
            .collect();
        if types.is_empty() {
            return Err(format!(
                "no instance type fits requests {} with the requirements {}",
                describe_requests(&total),
                merged.as_ref().unwrap_or(&claim.requirements)
            ));
        }
        if self.prepared.templates[claim.template].min_values
            && self.min_values == MinValuesPolicy::Strict
        {
            let requirements = merged.as_ref().unwrap_or(&claim.requirements);
            min_values::shortest_prefix(self.catalog, requirements, &types)
                .map_err(|unmet| unmet.to_string())?;
        }
        // The filters only remove: a list as long as the claim's is the claim's.
        let types = (types.len() != claim.instance_types.len()).then_some(types);
        Ok((merged, types))
    }

    /// The claim's instance types with their cheapest allowed price, cheapest first.
    pub(super) fn ranked(&self, claim: &Claim) -> Vec<(usize, f64)> {
        self.rank(&claim.instance_types, &claim.requirements)
    }

    /// `types` with their cheapest price `requirements` allow, cheapest first; types with no allowed offering
    /// left out.
    pub(super) fn rank(&self, types: &[usize], requirements: &Requirements) -> Vec<(usize, f64)> {
        let mut ranked: Vec<(usize, f64)> = types
            .iter()
            .filter_map(|i| {
                let it = &self.catalog.instance_types[*i];
                cheapest_offering(it, requirements).map(|o| (*i, o.price.unwrap_or(f64::INFINITY)))
            })
            .collect();
        ranked
            .sort_by(|(a, pa), (b, pb)| pa.total_cmp(pb).then_with(|| self.smaller_first(*a, *b)));
        ranked
    }

    /// How many of the claim's types have an allowed offering, and the first of them in [`Self::rank`]'s order,
    /// in one pass without sorting: all pod advice needs, on the admission path.
    pub(super) fn count_and_cheapest(&self, claim: &Claim) -> (usize, Option<Choice>) {
        let (count, best) = self.cheapest_of(&claim.instance_types, &claim.requirements);
        (
            count,
            best.and_then(|b| self.choice(&claim.requirements, &[b])),
        )
    }

    /// How many of `types` have an offering `requirements` allow, and the first of them in [`Self::rank`]'s
    /// order with its price (infinite when unknown).
    pub(super) fn cheapest_of(
        &self,
        types: &[usize],
        requirements: &Requirements,
    ) -> (usize, Option<(usize, f64)>) {
        let mut count = 0;
        let mut best: Option<(usize, f64)> = None;
        for &i in types {
            let it = &self.catalog.instance_types[i];
            let Some(offering) = cheapest_offering(it, requirements) else {
                continue;
            };
            count += 1;
            let price = offering.price.unwrap_or(f64::INFINITY);
            let better = best.is_none_or(|(b, pb)| {
                price
                    .total_cmp(&pb)
                    .then_with(|| self.smaller_first(i, b))
                    .is_lt()
            });
            if better {
                best = Some((i, price));
            }
        }
        (count, best)
    }

    /// Among equal prices (unknown ones included), the smaller type first, then the catalog order.
    pub(super) fn smaller_first(&self, a: usize, b: usize) -> std::cmp::Ordering {
        let size = |i: usize| {
            let capacity = &self.catalog.instance_types[i].capacity;
            (capacity.cpu, capacity.memory)
        };
        size(a).cmp(&size(b)).then(a.cmp(&b))
    }

    pub(super) fn choice(
        &self,
        requirements: &Requirements,
        ranked: &[(usize, f64)],
    ) -> Option<Choice> {
        let it = &self.catalog.instance_types[ranked.first()?.0];
        Choice::cheapest(it, requirements)
    }
}
