//! What every method needs to know of each node, worked out once per pass (controller-behaviour.md §3.2):
//! whether it may be a candidate at all, its pool, price and costs, and its clock-driven facts.

use super::super::candidate::{blocker, Blocker, NodeView};
use super::super::command::{Target, Why};
use super::super::costs::{disruption_cost, disruption_cost_fall, is_empty, reschedule_cost};
use super::super::drift_hash::{static_drift, StaticDrift};
use super::super::input::{DisruptionInput, NodeInput};
use super::super::lifetime::{consolidatable, is_expired, Consolidatable};
use super::TypesByName;
use crate::api::labels;
use crate::api::nodepool::{ConsolidationPolicy, NodePool};
use crate::api::requirements::{AllowUndefined, Requirements};
use crate::catalog::{CapacityType, InstanceType, Resources};
use crate::scheduling::Template;
use k8s_openapi::jiff::Timestamp;
use std::collections::HashMap;

/// The offering a node runs on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NodeOffering<'a> {
    pub instance_type: &'a str,
    pub capacity_type: CapacityType,
    /// USD per hour.
    pub price: f64,
}

/// A NodePool and the requirements its nodes must meet (its template's, labels and pool name included);
/// `None` when they cannot be read.
struct Pool<'a> {
    spec: &'a NodePool,
    requirements: Option<Requirements>,
}

/// One node's facts at `now`; a pass keeps them in the order of [`DisruptionInput::nodes`].
#[derive(Debug)]
pub(crate) struct Facts<'a> {
    pub input: &'a NodeInput,
    pub target: Target,
    pub pool: Option<&'a NodePool>,
    pub offering: Option<NodeOffering<'a>>,
    /// Why no method may take it (controller-behaviour.md §3.2, pod-level blockers aside).
    pub ineligible: Option<Why>,
    /// A pod's do-not-disrupt or a PDB; drift on a claim with `terminationGracePeriod` ignores it.
    pub pod_blocker: Option<Blocker>,
    pub empty: bool,
    pub disruption_cost: f64,
    /// How fast `disruption_cost` falls as the claim ages, per second.
    pub cost_fall: f64,
    pub reschedule_cost: f64,
    pub created: Option<Timestamp>,
    pub consolidatable: Result<Consolidatable, Why>,
    /// Karpenter's drift reason, if the node drifted.
    pub drift: Option<&'static str>,
    pub expired: bool,
}

impl<'a> Facts<'a> {
    /// The facts of every node of `input`.
    pub fn all(
        input: &DisruptionInput<'a>,
        types: &TypesByName<'a>,
        now: Timestamp,
    ) -> Vec<Facts<'a>> {
        let allocatable: Vec<Resources> = input
            .catalog
            .instance_types
            .iter()
            .map(InstanceType::allocatable)
            .collect();
        let pools: HashMap<&str, Pool<'a>> = input
            .nodepools
            .iter()
            .filter_map(|p| {
                let requirements = Template::new(p, input.catalog, &allocatable).ok().map(|t| {
                    let mut requirements = t.requirements;
                    // The class label is kerf's own bookkeeping, as in Karpenter (whose requirement drift
                    // reads only `spec.requirements`): a node from before it was set is hydrated, not
                    // drifted.
                    let class = &p.spec.template.spec.node_class_ref;
                    requirements.remove(&labels::node_class_label(&class.group, &class.kind));
                    requirements
                });
                Some((
                    p.metadata.name.as_deref()?,
                    Pool {
                        spec: p,
                        requirements,
                    },
                ))
            })
            .collect();
        input
            .nodes
            .iter()
            .map(|node| Facts::of(node, input, &pools, types, now))
            .collect()
    }

    fn of(
        node: &'a NodeInput,
        input: &DisruptionInput<'a>,
        pools: &HashMap<&str, Pool<'a>>,
        types: &TypesByName<'a>,
        now: Timestamp,
    ) -> Facts<'a> {
        let claim = &node.claim;
        let label = |key: &str| -> Option<&'a str> {
            let from = |labels: Option<&'a std::collections::BTreeMap<String, String>>| {
                labels.and_then(|l| l.get(key)).map(String::as_str)
            };
            node.node
                .as_ref()
                .and_then(|n| from(n.metadata.labels.as_ref()))
                .or_else(|| from(claim.metadata.labels.as_ref()))
        };
        let pool_name = label(labels::NODEPOOL);
        let pool_facts = pool_name.and_then(|name| pools.get(name));
        let pool = pool_facts.map(|p| p.spec);
        let target = Target {
            claim: node.claim_name().to_owned(),
            node: node.node_name().map(str::to_owned),
            nodepool: pool_name.unwrap_or_default().to_owned(),
        };
        let offering = (|| {
            let instance_type =
                types.get(label(labels::INSTANCE_TYPE)?, pool_name.unwrap_or_default())?;
            let zone = label(labels::ZONE)?;
            let capacity_type: CapacityType = label(labels::CAPACITY_TYPE)?.parse().ok()?;
            let price = instance_type
                .offerings
                .iter()
                .find(|o| o.zone == zone && o.capacity_type == capacity_type)?
                .price?;
            Some(NodeOffering {
                instance_type: instance_type.name.as_str(),
                capacity_type,
                price,
            })
        })();
        let view = NodeView {
            node: node.node.as_deref(),
            claim: Some(claim),
            pods: &node.pods,
        };
        let initialized = claim
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Initialized" && c.status == "True")
            });
        let deleting = claim.metadata.deletion_timestamp.is_some()
            || node
                .node
                .as_ref()
                .is_some_and(|n| n.metadata.deletion_timestamp.is_some());
        let node_blocked = blocker(view, &[], now, false);
        let ineligible = if deleting {
            Some(Why::Deleting)
        } else if node.queued {
            Some(Why::Queued)
        } else if node.node.is_none() {
            Some(Why::NoNode)
        } else if !initialized {
            Some(Why::NotInitialized)
        } else if node.nominated {
            Some(Why::Nominated)
        } else if let Some(b) = node_blocked {
            Some(Why::Blocked(b))
        } else if pool_name.is_none() {
            Some(Why::NoNodePool(labels::NODEPOOL))
        } else if pool.is_none() {
            Some(Why::UnknownNodePool(target.nodepool.clone()))
        } else {
            None
        };
        let consolidatable = match pool {
            Some(pool) => consolidatable(pool, claim, now).map_err(Why::Lifetime),
            None => Ok(Consolidatable::NotInitialized),
        };
        let static_drift = pool.map(|p| static_drift(p, claim));
        // The first match wins, in Karpenter's order (controller-behaviour.md §3.3).
        let requirements_drifted = || {
            let node_labels = node
                .node
                .as_ref()
                .and_then(|n| n.metadata.labels.as_ref())
                .or(claim.metadata.labels.as_ref());
            let (Some(node_labels), Some(required)) = (
                node_labels,
                pool_facts.and_then(|p| p.requirements.as_ref()),
            ) else {
                return false;
            };
            !Requirements::from_labels_on(node_labels, required)
                .is_compatible(required, AllowUndefined::well_known_labels())
        };
        let drift = if static_drift == Some(StaticDrift::Drifted) {
            Some("NodePoolDrifted")
        } else if requirements_drifted() {
            Some("RequirementsDrifted")
        } else {
            node.cloud_drift.map(|d| d.as_str())
        };
        Facts {
            input: node,
            target,
            pool,
            offering,
            ineligible,
            pod_blocker: blocker(view, input.pdbs, now, true),
            empty: is_empty(&node.pods),
            disruption_cost: disruption_cost(&node.pods, claim, now).unwrap_or(0.0),
            cost_fall: disruption_cost_fall(&node.pods, claim, now).unwrap_or(0.0),
            reschedule_cost: reschedule_cost(&node.pods),
            created: claim.metadata.creation_timestamp.as_ref().map(|t| t.0),
            consolidatable,
            drift,
            expired: is_expired(claim, now).unwrap_or(false),
        }
    }

    /// The pool's consolidation policy (the CRD default when absent).
    pub fn policy(&self) -> ConsolidationPolicy {
        self.pool
            .and_then(|p| p.spec.disruption.as_ref())
            .and_then(|d| d.consolidation_policy)
            .unwrap_or(ConsolidationPolicy::WhenEmptyOrUnderutilized)
    }

    /// Why `consolidateAfter` keeps emptiness and consolidation away from the node, if it does.
    pub fn not_consolidatable(&self) -> Option<Why> {
        match &self.consolidatable {
            Ok(Consolidatable::Since(_)) => None,
            Ok(Consolidatable::From(t)) => Some(Why::ConsolidateAfter(*t)),
            Ok(Consolidatable::Never) => Some(Why::ConsolidateNever),
            Ok(Consolidatable::NotInitialized) => Some(Why::NoConsolidationClock),
            Err(why) => Some(why.clone()),
        }
    }

    /// Whether the claim has a `terminationGracePeriod`, which lets drift ignore pod-level blockers.
    pub fn has_grace_period(&self) -> bool {
        self.input.claim.spec.termination_grace_period.is_some()
    }
}
