//! NodeOverlays (`NodeOverlay` feature gate): which overlays hold, and what they make of each NodePool's instance
//! types. Karpenter v1.14.1 `pkg/controllers/nodeoverlay` (controller.go, store.go) and `pkg/cloudprovider/types.go`
//! (`AdjustedPrice`, the capacity merge):
//!
//! * overlays are taken by weight, heaviest first (absent = 0), equal weights in reverse name order;
//! * an overlay that fails runtime validation is left out (`RuntimeValidation`);
//! * an overlay applies to a pool's instance type when the type's labels, the pool's name and its template labels
//!   are compatible with its requirements, and to the offerings of that type its zone/capacity-type/reservation
//!   requirements admit;
//! * an overlay conflicts when, on some offering it prices (or some type it adds a resource to, for the same
//!   resource), an overlay of the **same** weight already did; a conflicting overlay applies nowhere (`Conflict`),
//!   and no pool gets part of it;
//! * a heavier overlay's price or resource wins over a lighter one's; resources from different overlays merge.
//!
//! kerf evaluates overlays with every decision (no wait for a separate controller pass, so no NodePool is ever
//! "awaiting nodeoverlay evaluation"), and [`overlaid`] gives each class's catalog with its pools' overlays in
//! it: where pools of one class see a type differently, the type appears once per variant, each restricted to its
//! pools by a `karpenter.sh/nodepool` requirement, so every consumer that reads types by index stays as it is.

use crate::api::labels;
use crate::api::nodeoverlay::{runtime_validation, NodeOverlay};
use crate::api::nodepool::NodePool;
use crate::api::requirements::{AllowUndefined, Requirement, RequirementTerm, Requirements};
use crate::catalog::{CapacityType, Catalog, InstanceType, Offering, OfferingFilter, Resources};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub use crate::api::well_known::{CAPACITY_OVERLAY_APPLIED, PRICE_OVERLAY_APPLIED};

/// What became of one overlay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Valid and without conflict: applied wherever it matches.
    Applied,
    /// Fails runtime validation; the message says why.
    Invalid(String),
    /// Sets the same thing as another overlay of its weight on some instance type.
    Conflict,
}

impl Verdict {
    /// The `ValidationSucceeded` condition: status, reason and message, as Karpenter sets them.
    pub fn condition(&self) -> (bool, &str, &str) {
        match self {
            Verdict::Applied => (true, "ValidationSucceeded", ""),
            Verdict::Invalid(message) => (false, "RuntimeValidation", message),
            Verdict::Conflict => (false, "Conflict", "conflict with another overlay"),
        }
    }
}

/// An offering as overlays address it: its zone, capacity type and reservation.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct OfferingKey {
    zone: String,
    capacity_type: CapacityType,
    reservation: Option<String>,
}

impl OfferingKey {
    fn of(offering: &Offering) -> Self {
        OfferingKey {
            zone: offering.zone.clone(),
            capacity_type: offering.capacity_type,
            reservation: offering.reservation.as_ref().map(|r| r.id.clone()),
        }
    }
}

/// What overlays change of one instance type in one pool.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TypeUpdate {
    /// Per offering: the price change (`price` or `priceAdjustment` text) and the lightest weight that reached it.
    price: BTreeMap<OfferingKey, (String, i32)>,
    /// Extended resources added, in catalog units.
    capacity: BTreeMap<String, i64>,
    /// The lightest weight that added capacity, and the resources it added (the only ones a later overlay of the
    /// same weight may conflict with).
    capacity_floor: Option<(i32, BTreeSet<String>)>,
}

impl TypeUpdate {
    /// Whether two updates change a type the same way (conflict bookkeeping aside).
    fn same_effect(&self, other: &TypeUpdate) -> bool {
        self.capacity == other.capacity
            && self.price.len() == other.price.len()
            && self
                .price
                .iter()
                .zip(&other.price)
                .all(|((ka, (a, _)), (kb, (b, _)))| ka == kb && a == b)
    }
}

/// The outcome of evaluating every overlay against every pool.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Evaluation {
    /// Each overlay's verdict, by name.
    pub verdicts: BTreeMap<String, Verdict>,
    /// Per pool, per instance type name: what the applied overlays change.
    updates: BTreeMap<String, BTreeMap<String, TypeUpdate>>,
}

/// One overlay, parsed for matching.
struct Parsed<'o> {
    overlay: &'o NodeOverlay,
    requirements: Requirements,
    capacity: BTreeMap<String, i64>,
}

/// The overlays in the order they are applied: heaviest first, equal weights in reverse name order (Karpenter's
/// `OrderByWeight`).
fn ordered(overlays: &[NodeOverlay]) -> Vec<&NodeOverlay> {
    let mut ordered: Vec<&NodeOverlay> = overlays.iter().collect();
    ordered.sort_by(|a, b| {
        b.weight()
            .cmp(&a.weight())
            .then_with(|| b.metadata.name.cmp(&a.metadata.name))
    });
    ordered
}

fn parse(overlay: &NodeOverlay) -> Result<Parsed<'_>, String> {
    runtime_validation(overlay)?;
    let terms = overlay.spec.requirements.iter().map(|r| RequirementTerm {
        key: r.key.clone(),
        operator: r.operator,
        values: r.values.clone().unwrap_or_default(),
        min_values: None,
    });
    let requirements = Requirements::from_terms(terms).map_err(|e| e.to_string())?;
    let quantities = overlay.spec.capacity.iter().flatten().map(|(name, q)| {
        let text = match q {
            IntOrString::Int(n) => n.to_string(),
            IntOrString::String(s) => s.clone(),
        };
        (name.clone(), text)
    });
    let mut capacity = BTreeMap::new();
    for (name, text) in quantities {
        let parsed = Resources::from_quantities([(name.as_str(), text.as_str())])
            .map_err(|e| format!("invalid capacity: {name}, {e}"))?;
        capacity.insert(name.clone(), parsed.get(&name));
    }
    Ok(Parsed {
        overlay,
        requirements,
        capacity,
    })
}

/// The requirements an instance type of `pool` meets as an overlay sees it: the type's labels, the pool's name
/// and the pool's template labels (not its template requirements).
fn type_in_pool(pool: &NodePool, it: &InstanceType) -> Requirements {
    let mut requirements = Requirements::new();
    requirements.add(Requirement::one_of(
        labels::NODEPOOL,
        [pool.metadata.name.clone().unwrap_or_default()],
    ));
    if let Some(template_labels) = pool
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref())
    {
        requirements.add_all(&Requirements::from_labels(template_labels));
    }
    requirements.add_all(&it.requirements);
    requirements
}

/// The offerings of `it` in `pool` that `overlay` selects; empty when it does not select the type.
fn selected<'i>(
    pool: &NodePool,
    it: &'i InstanceType,
    overlay: &Requirements,
) -> Vec<&'i Offering> {
    let none = AllowUndefined::from_keys(std::iter::empty::<&str>());
    if !type_in_pool(pool, it).is_compatible(overlay, &none) {
        return Vec::new();
    }
    let filter = OfferingFilter::new(overlay);
    it.offerings.iter().filter(|o| filter.matches(o)).collect()
}

/// Every overlay's verdict and what the applied ones change, over the pools whose class has a catalog in
/// `catalogs` (by class name). Pure; the order of `overlays` does not matter.
pub fn evaluate(
    overlays: &[NodeOverlay],
    pools: &[NodePool],
    catalogs: &BTreeMap<String, Arc<Catalog>>,
) -> Evaluation {
    let mut evaluation = Evaluation::default();
    let pools: Vec<(&NodePool, &Catalog)> = pools
        .iter()
        .filter_map(|p| {
            let catalog = catalogs.get(&p.spec.template.spec.node_class_ref.name)?;
            Some((p, catalog.as_ref()))
        })
        .collect();
    for overlay in ordered(overlays) {
        let name = overlay.metadata.name.clone().unwrap_or_default();
        let parsed = match parse(overlay) {
            Ok(parsed) => parsed,
            Err(message) => {
                evaluation.verdicts.insert(name, Verdict::Invalid(message));
                continue;
            }
        };
        // Checked against every pool before any is changed: an overlay applies everywhere or nowhere.
        let conflicts = pools
            .iter()
            .any(|(pool, catalog)| evaluation.conflicts(&parsed, pool, catalog));
        if conflicts {
            evaluation.verdicts.insert(name, Verdict::Conflict);
            continue;
        }
        for (pool, catalog) in &pools {
            evaluation.store(&parsed, pool, catalog);
        }
        evaluation.verdicts.insert(name, Verdict::Applied);
    }
    evaluation
}

impl Evaluation {
    fn update(&self, pool: &str, it: &str) -> Option<&TypeUpdate> {
        self.updates.get(pool)?.get(it)
    }

    /// Whether `overlay` sets something an overlay of its weight already set on a type of `pool`.
    fn conflicts(&self, overlay: &Parsed, pool: &NodePool, catalog: &Catalog) -> bool {
        let pool_name = pool.metadata.name.as_deref().unwrap_or_default();
        let weight = overlay.overlay.weight();
        let prices = overlay.overlay.price_change().is_some();
        catalog.instance_types.iter().any(|it| {
            let offerings = selected(pool, it, &overlay.requirements);
            if offerings.is_empty() {
                return false;
            }
            let Some(update) = self.update(pool_name, &it.name) else {
                return false;
            };
            let price_conflict = prices
                && offerings.iter().any(|o| {
                    update
                        .price
                        .get(&OfferingKey::of(o))
                        .is_some_and(|(_, lightest)| *lightest == weight)
                });
            let capacity_conflict = !overlay.capacity.is_empty()
                && update
                    .capacity_floor
                    .as_ref()
                    .is_some_and(|(lightest, names)| {
                        *lightest == weight && overlay.capacity.keys().any(|n| names.contains(n))
                    });
            price_conflict || capacity_conflict
        })
    }

    /// Records what `overlay` changes of `pool`'s types; heavier overlays recorded before keep what they set.
    fn store(&mut self, overlay: &Parsed, pool: &NodePool, catalog: &Catalog) {
        let pool_name = pool.metadata.name.clone().unwrap_or_default();
        let weight = overlay.overlay.weight();
        let price = overlay.overlay.price_change();
        for it in &catalog.instance_types {
            let offerings = selected(pool, it, &overlay.requirements);
            if offerings.is_empty() || (price.is_none() && overlay.capacity.is_empty()) {
                continue;
            }
            let update = self
                .updates
                .entry(pool_name.clone())
                .or_default()
                .entry(it.name.clone())
                .or_default();
            if let Some(price) = price {
                for offering in offerings {
                    update
                        .price
                        .entry(OfferingKey::of(offering))
                        .and_modify(|(_, lightest)| *lightest = weight)
                        .or_insert_with(|| (price.to_owned(), weight));
                }
            }
            if !overlay.capacity.is_empty() {
                for (name, amount) in &overlay.capacity {
                    update.capacity.entry(name.clone()).or_insert(*amount);
                }
                update.capacity_floor = Some((weight, overlay.capacity.keys().cloned().collect()));
            }
        }
    }

    /// Whether some overlay changes anything of `pool`.
    pub fn touches(&self, pool: &str) -> bool {
        self.updates.get(pool).is_some_and(|u| !u.is_empty())
    }
}

/// `price` after a price change: a plain number replaces it; `+x`/`-x` adds; `+x%`/`-x%` scales; never below
/// zero (Karpenter's `AdjustedPrice`). An unknown price stays unknown under an adjustment.
pub fn adjusted_price(price: Option<f64>, change: &str) -> Option<f64> {
    if !change.starts_with('+') && !change.starts_with('-') {
        return change.parse::<f64>().ok().or(price);
    }
    let price = price?;
    let adjusted = match change.strip_suffix('%') {
        Some(percent) => price * (1.0 + percent.parse::<f64>().ok()? / 100.0),
        None => price + change.parse::<f64>().ok()?,
    };
    Some(adjusted.max(0.0))
}

/// `it` with `update` applied.
fn apply(it: &InstanceType, update: &TypeUpdate) -> InstanceType {
    let mut it = it.clone();
    for offering in &mut it.offerings {
        if let Some((change, _)) = update.price.get(&OfferingKey::of(offering)) {
            offering.price = adjusted_price(offering.price, change);
            it.overlaid.price = true;
        }
    }
    for (name, amount) in &update.capacity {
        it.capacity.set(name, *amount);
        it.overlaid.capacity = true;
    }
    it
}

/// `catalog` (one class's) as `pools` (the pools of that class) see it under `evaluation`; `None` when no overlay
/// changes any type for them. A type every pool sees alike is replaced in place; a type pools see differently
/// appears once per variant, each with a `karpenter.sh/nodepool` requirement naming its pools.
pub fn overlaid(
    catalog: &Catalog,
    pools: &[&NodePool],
    evaluation: &Evaluation,
) -> Option<Catalog> {
    let names: Vec<&str> = pools
        .iter()
        .filter_map(|p| p.metadata.name.as_deref())
        .filter(|name| evaluation.touches(name))
        .collect();
    if names.is_empty() {
        return None;
    }
    let all: Vec<&str> = pools
        .iter()
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    let mut instance_types = Vec::with_capacity(catalog.instance_types.len());
    for it in &catalog.instance_types {
        // The pools of each distinct variant of the type, the unchanged one (`None`) included.
        let mut variants: Vec<(Option<&TypeUpdate>, Vec<&str>)> = Vec::new();
        for pool in &all {
            let update = evaluation.update(pool, &it.name);
            let same = |other: &Option<&TypeUpdate>| match (other, &update) {
                (None, None) => true,
                (Some(a), Some(b)) => a.same_effect(b),
                _ => false,
            };
            match variants.iter_mut().find(|(u, _)| same(u)) {
                Some((_, pools)) => pools.push(pool),
                None => variants.push((update, vec![pool])),
            }
        }
        if let [(update, _)] = variants.as_slice() {
            instance_types.push(update.map_or_else(|| it.clone(), |u| apply(it, u)));
            continue;
        }
        for (update, pools) in variants {
            let mut variant = update.map_or_else(|| it.clone(), |u| apply(it, u));
            variant
                .requirements
                .add(Requirement::one_of(labels::NODEPOOL, pools));
            instance_types.push(variant);
        }
    }
    Some(Catalog { instance_types })
}

/// `types` (the catalog of `pool`'s class) as `pool` sees them under `evaluation`, for a launch of one of its
/// claims; `None` when no overlay changes any type for it.
pub fn for_pool(
    types: &[InstanceType],
    pool: &str,
    evaluation: &Evaluation,
) -> Option<Vec<InstanceType>> {
    let updates = evaluation.updates.get(pool).filter(|u| !u.is_empty())?;
    Some(
        types
            .iter()
            .map(|it| {
                updates
                    .get(&it.name)
                    .map_or_else(|| it.clone(), |u| apply(it, u))
            })
            .collect(),
    )
}

/// Each class's catalog as its pools see it under `overlays`; the catalogs no overlay changes are the same
/// `Arc`s. With no overlays, `catalogs` itself.
pub fn overlaid_catalogs(
    overlays: &[NodeOverlay],
    pools: &[NodePool],
    catalogs: &BTreeMap<String, Arc<Catalog>>,
) -> (BTreeMap<String, Arc<Catalog>>, Evaluation) {
    let evaluation = evaluate(overlays, pools, catalogs);
    let overlaid = catalogs
        .iter()
        .map(|(class, catalog)| {
            let class_pools: Vec<&NodePool> = pools
                .iter()
                .filter(|p| &p.spec.template.spec.node_class_ref.name == class)
                .collect();
            let catalog = overlaid(catalog, &class_pools, &evaluation)
                .map_or_else(|| catalog.clone(), Arc::new);
            (class.clone(), catalog)
        })
        .collect();
    (overlaid, evaluation)
}

/// Karpenter's overlay annotations for a claim of `pool` that may launch `types` (names) from `catalog`.
pub fn claim_annotations<'a>(
    catalog: &Catalog,
    pool: &str,
    types: impl IntoIterator<Item = &'a str>,
) -> Vec<(&'static str, &'static str)> {
    let wanted: BTreeSet<&str> = types.into_iter().collect();
    let (mut price, mut capacity) = (false, false);
    for it in catalog.instance_types.iter().filter(|it| {
        wanted.contains(it.name.as_str())
            && it
                .requirements
                .get(labels::NODEPOOL)
                .is_none_or(|r| r.has(pool))
    }) {
        price |= it.overlaid.price;
        capacity |= it.overlaid.capacity;
    }
    let mut annotations = Vec::new();
    if price {
        annotations.push((PRICE_OVERLAY_APPLIED, "true"));
    }
    if capacity {
        annotations.push((CAPACITY_OVERLAY_APPLIED, "true"));
    }
    annotations
}

#[cfg(test)]
mod tests;
