//! The controller's Prometheus registry: one family set per controller, registered here under Karpenter's
//! metric names (reference §6.1) and served as text on `/metrics`.

use super::disruption::metrics::DisruptionMetrics;
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
    pub lifecycle: LifecycleMetrics,
    pub termination: TerminationMetrics,
    pub disruption: DisruptionMetrics,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let provisioning = Provisioning::register(&mut registry);
        Metrics {
            garbage: GarbageMetrics::register(&mut registry),
            interruption: InterruptionMetrics::register(&mut registry),
            lifecycle: LifecycleMetrics::register(&mut registry),
            termination: TerminationMetrics::register(&mut registry),
            disruption: DisruptionMetrics::register(&mut registry),
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

pub(super) fn duration_histogram() -> Histogram {
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
    /// `karpenter_scheduler_ignored_pods_count`: pending pods of the last batch refused before the solve
    /// (unreadable requirements, invalid volumes).
    pub ignored_pods: Gauge,
    /// `karpenter_scheduler_unschedulable_pods_count`: pods the last solve could not place (those waiting for
    /// reserved capacity left out, as Karpenter does).
    pub unschedulable_pods: Family<ControllerLabels, Gauge>,
}

impl Provisioning {
    fn register(registry: &mut Registry) -> Provisioning {
        let metrics = Provisioning {
            nodeclaims_created: Family::default(),
            scheduling_decision: duration_histogram(),
            scheduling_duration: Family::new_with_constructor(duration_histogram),
            queue_depth: Family::default(),
            ignored_pods: Gauge::default(),
            unschedulable_pods: Family::default(),
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
        registry.register(
            "karpenter_scheduler_ignored_pods_count",
            "Number of pods ignored during scheduling",
            metrics.ignored_pods.clone(),
        );
        registry.register(
            "karpenter_scheduler_unschedulable_pods_count",
            "The number of unschedulable pods",
            metrics.unschedulable_pods.clone(),
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodePoolLabels {
    pub nodepool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LaunchFailureLabels {
    pub nodepool: String,
    /// The cloud error's label (`insufficient_capacity`, `nodeclass_not_ready`, `api_error`, …).
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DisruptedLabels {
    pub reason: String,
    pub nodepool: String,
    pub capacity_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodePoolZoneLabels {
    pub nodepool: String,
    pub zone: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TerminatedLabels {
    pub nodepool: String,
    pub capacity_type: String,
    pub zone: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabels {
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

/// The NodeClaim lifecycle controller's counters.
pub struct LifecycleMetrics {
    /// `karpenter_nodeclaims_launched_total{nodepool}`: instances launched or adopted for a claim.
    pub launched: Family<NodePoolLabels, Counter>,
    /// `kerf_nodeclaims_launch_failures_total{nodepool,reason}`.
    pub launch_failures: Family<LaunchFailureLabels, Counter>,
    /// `karpenter_nodeclaims_registered_total{nodepool}`.
    pub registered: Family<NodePoolLabels, Counter>,
    /// `karpenter_nodeclaims_initialized_total{nodepool}`.
    pub initialized: Family<NodePoolLabels, Counter>,
    /// `karpenter_nodes_created_total{nodepool,zone}`: Nodes registered for a claim.
    pub nodes_created: Family<NodePoolZoneLabels, Counter>,
    /// `karpenter_nodeclaims_disrupted_total{reason,nodepool,capacity_type}` for the reasons this controller
    /// deletes claims (insufficient_capacity, launch_timeout, registration_timeout, nodeclass_not_ready).
    pub disrupted: Family<DisruptedLabels, Counter>,
}

impl LifecycleMetrics {
    fn register(registry: &mut Registry) -> Self {
        let metrics = LifecycleMetrics {
            launched: Family::default(),
            launch_failures: Family::default(),
            registered: Family::default(),
            initialized: Family::default(),
            nodes_created: Family::default(),
            disrupted: Family::default(),
        };
        registry.register(
            "karpenter_nodeclaims_launched",
            "NodeClaims whose instance was launched",
            metrics.launched.clone(),
        );
        registry.register(
            "kerf_nodeclaims_launch_failures",
            "Failed launches of a NodeClaim's instance, by reason",
            metrics.launch_failures.clone(),
        );
        registry.register(
            "karpenter_nodeclaims_registered",
            "NodeClaims whose Node registered",
            metrics.registered.clone(),
        );
        registry.register(
            "karpenter_nodeclaims_initialized",
            "NodeClaims whose Node was initialized",
            metrics.initialized.clone(),
        );
        registry.register(
            "karpenter_nodes_created",
            "Nodes registered for a NodeClaim",
            metrics.nodes_created.clone(),
        );
        registry.register(
            "karpenter_nodeclaims_disrupted",
            "NodeClaims deleted by kerf, by reason",
            metrics.disrupted.clone(),
        );
        metrics
    }
}

/// The termination controller's counters.
pub struct TerminationMetrics {
    /// `karpenter_nodeclaims_terminated_total{nodepool,capacity_type,zone}`.
    pub nodeclaims_terminated: Family<TerminatedLabels, Counter>,
    /// `karpenter_nodes_terminated_total{nodepool,zone}`.
    pub nodes_terminated: Family<NodePoolZoneLabels, Counter>,
    /// `karpenter_nodes_drained_total{nodepool}`.
    pub nodes_drained: Family<NodePoolLabels, Counter>,
    /// `karpenter_pods_eviction_requests_total{code}`: every eviction request, by answer (0: none).
    pub eviction_requests: Family<CodeLabels, Counter>,
    /// `karpenter_pods_drained_total{reason}`: pods evicted or deleted at the deadline.
    pub pods_drained: Family<ReasonLabels, Counter>,
}

impl TerminationMetrics {
    fn register(registry: &mut Registry) -> Self {
        let metrics = TerminationMetrics {
            nodeclaims_terminated: Family::default(),
            nodes_terminated: Family::default(),
            nodes_drained: Family::default(),
            eviction_requests: Family::default(),
            pods_drained: Family::default(),
        };
        registry.register(
            "karpenter_nodeclaims_terminated",
            "NodeClaims whose instance was terminated and finalizer removed",
            metrics.nodeclaims_terminated.clone(),
        );
        registry.register(
            "karpenter_nodes_terminated",
            "Nodes deleted after their instance was terminated",
            metrics.nodes_terminated.clone(),
        );
        registry.register(
            "karpenter_nodes_drained",
            "Nodes drained before termination",
            metrics.nodes_drained.clone(),
        );
        registry.register(
            "karpenter_pods_eviction_requests",
            "Eviction requests, by the answer's HTTP status (0: none)",
            metrics.eviction_requests.clone(),
        );
        registry.register(
            "karpenter_pods_drained",
            "Pods evicted or deleted while draining a node",
            metrics.pods_drained.clone(),
        );
        metrics
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
        metrics.provisioning.ignored_pods.set(1);
        metrics
            .provisioning
            .unschedulable_pods
            .get_or_create(&Provisioning::provisioner())
            .set(2);
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
        assert!(
            text.contains("karpenter_scheduler_ignored_pods_count 1"),
            "{text}"
        );
        assert!(
            text.contains(
                r#"karpenter_scheduler_unschedulable_pods_count{controller="provisioner"} 2"#
            ),
            "{text}"
        );
    }
}
