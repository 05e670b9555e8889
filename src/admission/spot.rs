//! Warnings that need the instance-type catalog: a spot-only NodePool with too few instance types never gets
//! spot-to-spot consolidation (Karpenter needs at least 15 cheaper candidates), which users rarely expect.

use crate::api::labels;
use crate::api::nodepool::NodePool;
use crate::api::operator::Operator;
use crate::catalog::Catalog;
use crate::scheduling::Scheduler;
use serde::Deserialize;
use serde_json::Value;

/// Spot-to-spot consolidation needs this many candidate instance types.
pub const SPOT_TO_SPOT_MIN_TYPES: usize = 15;

/// The catalog-dependent warnings for a (defaulted, valid) NodePool object; none for other objects.
pub fn catalog_warnings(object: &Value, catalog: &Catalog) -> Vec<String> {
    let Ok(pool) = NodePool::deserialize(object) else {
        return Vec::new();
    };
    // Counting instance types walks the catalog; only spot-only pools need it.
    let capacity_types = pool
        .spec
        .template
        .spec
        .requirements
        .iter()
        .filter(|r| r.key == labels::CAPACITY_TYPE);
    let mentions_spot_only = capacity_types.clone().any(|r| r.operator == Operator::In)
        && capacity_types
            .flat_map(|r| r.values.iter().flatten())
            .all(|v| v == labels::CAPACITY_TYPE_SPOT);
    if !mentions_spot_only {
        return Vec::new();
    }
    let scheduler = Scheduler::new(std::slice::from_ref(&pool), catalog);
    let Some(template) = scheduler.templates().first() else {
        return Vec::new();
    };
    let capacity_types = template.requirements.get(labels::CAPACITY_TYPE);
    let spot_only = capacity_types.is_some_and(|ct| {
        ct.has(labels::CAPACITY_TYPE_SPOT)
            && !ct.has(labels::CAPACITY_TYPE_ON_DEMAND)
            && !ct.has(labels::CAPACITY_TYPE_RESERVED)
    });
    let count = template.instance_types.len();
    if spot_only && count < SPOT_TO_SPOT_MIN_TYPES {
        return vec![format!(
            "spec.template.spec.requirements: this spot-only NodePool allows {count} instance types; spot-to-spot consolidation needs at least {SPOT_TO_SPOT_MIN_TYPES}, so its nodes will never be replaced by cheaper spot nodes. Widen the requirements (more families, sizes or generations)"
        )];
    }
    Vec::new()
}
