//! The disruption controller's own families (the disrupted-claims counter is the lifecycle controller's,
//! shared: a name is registered once).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `delete` or `replace`.
    pub decision: String,
    /// The reason, lower case (`empty`, `drifted`, `underutilized`, `expired`).
    pub reason: String,
    /// `empty`, `single`, `multi`, or empty when the method is no consolidation.
    pub consolidation_type: String,
}

pub struct DisruptionMetrics {
    /// `karpenter_voluntary_disruption_decisions_total{decision,reason,consolidation_type}`.
    pub decisions: Family<DecisionLabels, Counter>,
}

impl DisruptionMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = DisruptionMetrics {
            decisions: Family::default(),
        };
        registry.register(
            "karpenter_voluntary_disruption_decisions",
            "Disruption commands carried out, by decision, reason and consolidation type",
            metrics.decisions.clone(),
        );
        metrics
    }
}
