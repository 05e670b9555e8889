//! A NodePool prepared for scheduling: its requirements (with its labels), taints, remaining limits, and the
//! instance types it may launch, cheapest first.

use super::offerings::cheapest_offering;
use crate::api::labels;
use crate::api::nodepool::{NodePool, Taint};
use crate::api::requirements::{Requirement, RequirementError, RequirementTerm, Requirements};
use crate::catalog::{Catalog, Resources};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A NodePool as the scheduler uses it.
#[derive(Clone, Debug)]
pub struct Template {
    pub nodepool: String,
    pub weight: i32,
    pub requirements: Requirements,
    pub taints: Vec<Taint>,
    /// Indices into the catalog of the types this pool may launch, cheapest compatible offering first.
    pub instance_types: Arc<[usize]>,
    /// Indices of the types the pool would launch but for its limits: still topology domains the pool offers
    /// (Karpenter counts every type of a pool there, limits or not).
    pub over_limits: Vec<usize>,
    /// What is left of `spec.limits` (none when unlimited).
    pub remaining: Option<Limits>,
    /// Why the pool can launch nothing, when `instance_types` is empty.
    pub unusable: Option<String>,
    /// Whether some requirement has `minValues`.
    pub min_values: bool,
}

impl Template {
    pub fn new(
        pool: &NodePool,
        catalog: &Catalog,
        allocatable: &[Resources],
    ) -> Result<Self, RequirementError> {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let tspec = &pool.spec.template.spec;
        let requirements = pool_requirements(pool)?;
        let remaining = pool_limits(pool);
        let mut over_limits = Vec::new();
        let mut instance_types: Vec<(usize, f64)> = catalog
            .instance_types
            .iter()
            .enumerate()
            .filter(|(i, it)| {
                allocatable[*i].pods > 0 && requirements.has_intersection(&it.requirements)
            })
            .filter_map(|(i, it)| {
                cheapest_offering(it, &requirements).map(|o| (i, o.price.unwrap_or(f64::INFINITY)))
            })
            .filter(|(i, _)| {
                let admitted = remaining
                    .as_ref()
                    .is_none_or(|left| left.admits(&catalog.instance_types[*i].capacity));
                if !admitted {
                    over_limits.push(*i);
                }
                admitted
            })
            .collect();
        // Cheapest first; unknown prices last; the name breaks ties so the order is deterministic.
        instance_types.sort_by(|(a, pa), (b, pb)| {
            pa.total_cmp(pb).then_with(|| {
                catalog.instance_types[*a]
                    .name
                    .cmp(&catalog.instance_types[*b].name)
            })
        });
        let unusable = instance_types.is_empty().then(|| {
            if remaining.is_some() {
                format!("all available instance types exceed limits for nodepool {name}")
            } else {
                format!("nodepool requirements filtered out all available instance types for nodepool {name}")
            }
        });
        Ok(Template {
            min_values: super::min_values::any(&requirements),
            nodepool: name,
            weight: pool.spec.weight.unwrap_or(0),
            requirements,
            taints: tspec.taints.clone().unwrap_or_default(),
            instance_types: instance_types.into_iter().map(|(i, _)| i).collect(),
            over_limits,
            remaining,
            unusable,
        })
    }
}

/// The requirements every node of `pool` meets: its template's requirements and labels, its name as
/// `karpenter.sh/nodepool` and its class as Karpenter's class label.
pub fn pool_requirements(pool: &NodePool) -> Result<Requirements, RequirementError> {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let tspec = &pool.spec.template.spec;
    let terms = tspec.requirements.iter().map(|r| RequirementTerm {
        key: r.key.clone(),
        operator: r.operator,
        values: r.values.clone().unwrap_or_default(),
        min_values: r.min_values.and_then(|m| usize::try_from(m).ok()),
    });
    let mut requirements = Requirements::from_terms(terms)?;
    for (key, value) in pool
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref())
        .into_iter()
        .flatten()
    {
        requirements.add(Requirement::one_of(key.clone(), [value.clone()]));
    }
    requirements.add(Requirement::one_of(labels::NODEPOOL, [name]));
    // Karpenter's claim template names the class as a label too, so claims, nodes and the pods that select
    // it agree on it.
    let class = &tspec.node_class_ref;
    requirements.add(Requirement::one_of(
        labels::node_class_label(&class.group, &class.kind),
        [class.name.clone()],
    ));
    Ok(requirements)
}

/// The pool's `spec.limits`, each in the catalog's units (`nodes` is a count); resources it does not name are
/// unlimited.
pub fn pool_limits(pool: &NodePool) -> Option<Limits> {
    let limits = pool.spec.limits.as_ref()?;
    let mut named = BTreeMap::new();
    for (name, value) in limits {
        let text = match value {
            IntOrString::Int(n) => n.to_string(),
            IntOrString::String(s) => s.clone(),
        };
        // Validation admits only quantities here; one that still does not parse limits nothing.
        if let Ok(parsed) = Resources::from_quantities([(name.as_str(), text.as_str())]) {
            named.insert(name.clone(), parsed.get(name));
        }
    }
    Some(Limits(named))
}

/// The `nodes` limit: how many nodes a pool may have.
pub const NODES: &str = "nodes";

/// What is left of a NodePool's limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits(BTreeMap<String, i64>);

impl Limits {
    /// Whether one more node with `capacity` stays within every limit.
    pub fn admits(&self, capacity: &Resources) -> bool {
        self.0.iter().all(|(name, left)| {
            if name == NODES {
                *left >= 1
            } else {
                capacity.get(name) <= *left
            }
        })
    }

    /// Takes one node with `capacity` off what is left.
    pub fn consume(&mut self, capacity: &Resources) {
        for (name, left) in self.0.iter_mut() {
            *left -= if name == NODES { 1 } else { capacity.get(name) };
        }
    }

    /// The first limit already exceeded (less than nothing left): a pool whose usage is strictly above a limit
    /// creates no more NodeClaims (controller-behaviour.md §1.5).
    pub fn overdrawn(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(_, left)| **left < 0)
            .map(|(name, _)| name.as_str())
    }

    /// The limit that has run out first, for the unschedulable reason.
    pub fn exhausted(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(_, left)| **left <= 0)
            .map(|(name, _)| name.as_str())
    }
}
