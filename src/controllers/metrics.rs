//! The controller's Prometheus registry: one family set per controller, registered here under Karpenter's
//! metric names (reference §6.1) and served as text on `/metrics`.

use super::garbage::GarbageMetrics;
use super::interruption::InterruptionMetrics;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Every metric the controllers count. Each controller's families live in its own struct, registered in
/// [`Metrics::new`].
pub struct Metrics {
    pub registry: Registry,
    pub garbage: GarbageMetrics,
    pub interruption: InterruptionMetrics,
    pub provisioning: Provisioning,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let provisioning = Provisioning::register(&mut registry);
        Metrics {
            garbage: GarbageMetrics::register(&mut registry),
            interruption: InterruptionMetrics::register(&mut registry),
            registry,
            provisioning,
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Duration buckets from 5 ms to 600 s, as Karpenter's (§6.1).
const DURATION_BUCKETS: [f64; 16] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CreatedLabels {
    pub reason: String,
    pub nodepool: String,
    pub min_values_relaxed: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

/// The provisioner's metrics.
pub struct Provisioning {
    /// `karpenter_nodeclaims_created_total`.
    pub nodeclaims_created: Family<CreatedLabels, Counter>,
    /// `karpenter_pods_scheduling_decision_duration_seconds`: from a pod becoming unschedulable to the decision
    /// about it.
    pub scheduling_decision: Histogram,
    /// `karpenter_scheduler_scheduling_duration_seconds`: one solve.
    pub scheduling_duration: HistogramFamily<ControllerLabels>,
    /// `karpenter_scheduler_queue_depth`: the pods of the batch being solved.
    pub queue_depth: Family<ControllerLabels, Gauge>,
}

impl Provisioning {
    fn register(registry: &mut Registry) -> Provisioning {
        let metrics = Provisioning {
            nodeclaims_created: Family::default(),
            scheduling_decision: duration_histogram(),
            scheduling_duration: Family::new_with_constructor(duration_histogram),
            queue_depth: Family::default(),
        };
        registry.register(
            "karpenter_nodeclaims_created",
            "NodeClaims created, by reason and NodePool",
            metrics.nodeclaims_created.clone(),
        );
        registry.register(
            "karpenter_pods_scheduling_decision_duration_seconds",
            "Time from a pod becoming unschedulable to the provisioner's decision about it",
            metrics.scheduling_decision.clone(),
        );
        registry.register(
            "karpenter_scheduler_scheduling_duration_seconds",
            "Duration of one scheduling simulation",
            metrics.scheduling_duration.clone(),
        );
        registry.register(
            "karpenter_scheduler_queue_depth",
            "Pods in the batch being scheduled",
            metrics.queue_depth.clone(),
        );
        metrics
    }

    /// The label set of the provisioner's scheduler metrics.
    pub fn provisioner() -> ControllerLabels {
        ControllerLabels {
            controller: String::from("provisioner"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_uses_karpenters_names() {
        let metrics = Metrics::new();
        metrics
            .provisioning
            .nodeclaims_created
            .get_or_create(&CreatedLabels {
                reason: "provisioned".into(),
                nodepool: "general".into(),
                min_values_relaxed: "false".into(),
            })
            .inc();
        metrics
            .provisioning
            .queue_depth
            .get_or_create(&Provisioning::provisioner())
            .set(3);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.registry).expect("encodable");
        assert!(text.contains(
            r#"karpenter_nodeclaims_created_total{reason="provisioned",nodepool="general",min_values_relaxed="false"} 1"#
        ), "{text}");
        assert!(
            text.contains(r#"karpenter_scheduler_queue_depth{controller="provisioner"} 3"#),
            "{text}"
        );
        assert!(
            text.contains("karpenter_pods_scheduling_decision_duration_seconds_bucket"),
            "{text}"
        );
    }
}
