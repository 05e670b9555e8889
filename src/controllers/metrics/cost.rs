//! What the fleet costs: every launched NodeClaim priced at its offering (instance type, capacity type, zone)
//! in the catalog of its EC2NodeClass, the prices kerf decides with. Feeds Karpenter's
//! `karpenter_nodepools_cost_total` (pkg/state/cost) and kerf's own cost families, which break the cost down
//! by capacity type and zone and add up what executed consolidations saved.

use super::gauge_set::{labels, GaugeSet};
use super::nodeclaims::NodePoolLabels;
use crate::api::labels as keys;
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::catalog::{CapacityType, Catalog};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SavingsLabels {
    /// `delete` or `replace`.
    pub decision: String,
    /// `empty`, `single` or `multi`.
    pub consolidation_type: String,
}

/// The cost families.
pub struct CostMetrics {
    /// `karpenter_nodepools_cost_total{nodepool}`: a gauge, despite the name (Karpenter's).
    pub nodepool_cost: GaugeSet,
    /// `karpenter_nodepools_cost_tracker_errors_total{nodepool}`: launched claims kerf could not price.
    pub tracker_errors: Family<NodePoolLabels, Counter>,
    /// `kerf_fleet_cost_usd_per_hour{nodepool,capacity_type,zone}`.
    pub fleet: GaugeSet,
    /// `kerf_fleet_unpriced_nodeclaims{nodepool}`.
    pub unpriced: GaugeSet,
    /// `kerf_consolidation_savings_usd_per_hour_total{decision,consolidation_type}`.
    pub savings: Family<SavingsLabels, Counter<f64, AtomicU64>>,
    /// Claims already counted in `tracker_errors`: each unpriced claim counts once, as Karpenter's tracker
    /// errors when a claim is added.
    counted: Mutex<HashSet<String>>,
}

impl CostMetrics {
    pub(super) fn register(registry: &mut Registry) -> CostMetrics {
        let metrics = CostMetrics {
            nodepool_cost: GaugeSet::default(),
            tracker_errors: Family::default(),
            fleet: GaugeSet::default(),
            unpriced: GaugeSet::default(),
            savings: Family::default(),
            counted: Mutex::default(),
        };
        registry.register(
            "karpenter_nodepools_cost_total",
            "What each NodePool's launched NodeClaims cost per hour at kerf's prices (not a bill)",
            metrics.nodepool_cost.clone(),
        );
        registry.register(
            "karpenter_nodepools_cost_tracker_errors",
            "Launched NodeClaims kerf could not price (labels missing or no price known), by NodePool",
            metrics.tracker_errors.clone(),
        );
        registry.register(
            "kerf_fleet_cost_usd_per_hour",
            "USD per hour of the launched NodeClaims at their offering's price, by NodePool, capacity type and \
             zone (kerf's catalog and pricing; on-demand prices are list prices, not a bill)",
            metrics.fleet.clone(),
        );
        registry.register(
            "kerf_fleet_unpriced_nodeclaims",
            "Launched NodeClaims left out of kerf_fleet_cost_usd_per_hour because no price is known, by NodePool",
            metrics.unpriced.clone(),
        );
        registry.register(
            "kerf_consolidation_savings_usd_per_hour",
            "Hourly price of the nodes executed consolidations removed minus that of their replacements, summed \
             over consolidations (replacements priced at the dearest offering they may launch with)",
            metrics.savings.clone(),
        );
        metrics
    }

    /// Publishes one pass; counts each newly seen unpriced claim once.
    pub fn publish(&self, cost: FleetCost) {
        self.nodepool_cost.replace(
            cost.by_nodepool
                .iter()
                .map(|(pool, usd)| (labels([("nodepool", pool.as_str())]), *usd))
                .collect(),
        );
        self.fleet.replace(
            cost.by_offering
                .iter()
                .map(|((pool, capacity_type, zone), usd)| {
                    let set = labels([
                        ("nodepool", pool.as_str()),
                        ("capacity_type", capacity_type.as_str()),
                        ("zone", zone.as_str()),
                    ]);
                    (set, *usd)
                })
                .collect(),
        );
        let mut unpriced: BTreeMap<&str, f64> = BTreeMap::new();
        for (_, pool) in &cost.unpriced {
            *unpriced.entry(pool).or_default() += 1.0;
        }
        self.unpriced.replace(
            unpriced
                .into_iter()
                .map(|(pool, n)| (labels([("nodepool", pool)]), n))
                .collect(),
        );
        let mut counted = self
            .counted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        counted.retain(|claim| cost.unpriced.iter().any(|(c, _)| c == claim));
        for (claim, pool) in &cost.unpriced {
            if counted.insert(claim.clone()) {
                self.tracker_errors
                    .get_or_create(&NodePoolLabels {
                        nodepool: pool.clone(),
                    })
                    .inc();
            }
        }
    }

    /// An executed consolidation (`consolidation_type` `empty`, `single` or `multi`) saved `usd_per_hour`.
    pub fn consolidated(&self, decision: &str, consolidation_type: &str, usd_per_hour: f64) {
        if !usd_per_hour.is_finite() {
            return;
        }
        self.savings
            .get_or_create(&SavingsLabels {
                decision: decision.to_owned(),
                consolidation_type: consolidation_type.to_owned(),
            })
            .inc_by(usd_per_hour);
    }
}

/// The cost of the launched fleet at one instant.
#[derive(Debug, Default, PartialEq)]
pub struct FleetCost {
    /// USD per hour by `(nodepool, capacity type, zone)`.
    pub by_offering: BTreeMap<(String, String, String), f64>,
    /// USD per hour by NodePool; every NodePool has an entry (0 without priced claims).
    pub by_nodepool: BTreeMap<String, f64>,
    /// Launched claims without a price: `(claim, nodepool)`.
    pub unpriced: Vec<(String, String)>,
}

/// The cost of every launched claim of `claims` (a provider ID set) at the prices of the catalogs of their
/// classes (`catalogs`, by EC2NodeClass name).
pub fn fleet_cost(
    pools: &[Arc<NodePool>],
    claims: &[Arc<NodeClaim>],
    catalogs: &HashMap<String, Arc<Catalog>>,
) -> FleetCost {
    let mut cost = FleetCost {
        by_nodepool: pools
            .iter()
            .filter_map(|p| Some((p.metadata.name.clone()?, 0.0)))
            .collect(),
        ..FleetCost::default()
    };
    for claim in claims {
        let launched = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .is_some_and(|id| !id.is_empty());
        if !launched {
            continue;
        }
        let label = |key: &str| {
            claim
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(key))
                .cloned()
                .unwrap_or_default()
        };
        let pool = label(keys::NODEPOOL);
        let (instance_type, capacity_type, zone) = (
            label(keys::INSTANCE_TYPE),
            label(keys::CAPACITY_TYPE),
            label(keys::ZONE),
        );
        let price = catalogs
            .get(&claim.spec.node_class_ref.name)
            .and_then(|catalog| price(catalog, &instance_type, &capacity_type, &zone));
        let Some(usd) = price else {
            cost.unpriced
                .push((claim.metadata.name.clone().unwrap_or_default(), pool));
            continue;
        };
        *cost.by_nodepool.entry(pool.clone()).or_default() += usd;
        *cost
            .by_offering
            .entry((pool, capacity_type, zone))
            .or_default() += usd;
    }
    cost
}

/// The price of an offering of `catalog`.
fn price(catalog: &Catalog, instance_type: &str, capacity_type: &str, zone: &str) -> Option<f64> {
    let capacity_type: CapacityType = capacity_type.parse().ok()?;
    catalog
        .get(instance_type)?
        .offerings
        .iter()
        .find(|o| o.zone == zone && o.capacity_type == capacity_type)?
        .price
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn catalog() -> Arc<Catalog> {
        let file = json!({"instanceTypes": [{
            "name": "m5.large", "cpu": "2", "memory": "8Gi", "pods": 29,
            "offerings": [
                {"zone": "us-west-2a", "capacityType": "on-demand", "price": 0.096},
                {"zone": "us-west-2a", "capacityType": "spot", "price": 0.04},
                {"zone": "us-west-2b", "capacityType": "spot"}
            ]
        }]});
        Arc::new(Catalog::from_instance_types_json(&file.to_string()).expect("a catalog"))
    }

    fn claim(
        name: &str,
        pool: &str,
        capacity_type: &str,
        zone: &str,
        launched: bool,
    ) -> Arc<NodeClaim> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {
                    "karpenter.sh/nodepool": pool, "karpenter.sh/capacity-type": capacity_type,
                    "topology.kubernetes.io/zone": zone, "node.kubernetes.io/instance-type": "m5.large"}},
                "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
                "status": {"providerID": if launched { "aws:///z/i-1" } else { "" }},
            }))
            .expect("a NodeClaim"),
        )
    }

    fn pool(name: &str) -> Arc<NodePool> {
        Arc::new(serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": []}}}})).expect("a NodePool"))
    }

    #[test]
    fn launched_claims_are_priced_at_their_offering() {
        let catalogs: HashMap<String, Arc<Catalog>> = [("default".to_owned(), catalog())].into();
        let claims = [
            claim("a", "general", "on-demand", "us-west-2a", true),
            claim("b", "general", "spot", "us-west-2a", true),
            claim("c", "general", "spot", "us-west-2a", true),
            claim("d", "general", "spot", "us-west-2b", true),
            claim("e", "general", "spot", "us-west-2a", false),
        ];
        let cost = fleet_cost(&[pool("general"), pool("idle")], &claims, &catalogs);
        assert_eq!(
            cost.by_offering,
            [
                (
                    ("general".into(), "on-demand".into(), "us-west-2a".into()),
                    0.096
                ),
                (("general".into(), "spot".into(), "us-west-2a".into()), 0.08),
            ]
            .into()
        );
        let general = cost.by_nodepool.get("general").copied().unwrap_or_default();
        assert!((general - 0.176).abs() < 1e-9, "{general}");
        assert_eq!(cost.by_nodepool.get("idle").copied(), Some(0.0));
        assert_eq!(cost.unpriced, vec![("d".to_owned(), "general".to_owned())]);

        let mut registry = Registry::default();
        let metrics = CostMetrics::register(&mut registry);
        metrics.publish(cost);
        let again = fleet_cost(&[pool("general")], &claims, &catalogs);
        metrics.publish(again);
        metrics.consolidated("delete", "empty", 0.096);
        metrics.consolidated("replace", "single", 0.05);
        metrics.consolidated("replace", "single", 0.05);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodable");
        for expected in [
            r#"kerf_fleet_cost_usd_per_hour{nodepool="general",capacity_type="spot",zone="us-west-2a"} 0.08"#,
            r#"karpenter_nodepools_cost_total{nodepool="general"} 0.17"#,
            r#"karpenter_nodepools_cost_tracker_errors_total{nodepool="general"} 1"#,
            r#"kerf_fleet_unpriced_nodeclaims{nodepool="general"} 1.0"#,
            r#"kerf_consolidation_savings_usd_per_hour_total{decision="replace",consolidation_type="single"} 0.1"#,
        ] {
            assert!(text.contains(expected), "{expected} missing from\n{text}");
        }
    }
}
