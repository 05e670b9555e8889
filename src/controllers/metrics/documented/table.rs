//! The table of the metrics Karpenter v1.14 documents: each family's name, type and label names.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Type {
    Counter,
    Gauge,
    Histogram,
    Summary,
}

/// Labels of the node gauges besides the well-known ones.
pub(super) const NODE: &str = "@node";
/// The extra labels of a kind's operator families.
const CLAIM_EXTRA: [&str; 2] = ["karpenter_k8s_aws_ec2nodeclass", "karpenter_sh_nodepool"];
const NODE_EXTRA: [&str; 3] = [
    "karpenter_k8s_aws_ec2nodeclass",
    "karpenter_sh_nodepool",
    "karpenter_sh_initialized",
];

/// `(name as documented, type, label names)`; [`NODE`] stands for the node gauges' well-known labels and
/// `node_name`, `phase`, `managed`.
pub(super) fn documented() -> Vec<(String, Type, Vec<String>)> {
    use Type::*;
    let s = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
    let mut list: Vec<(String, Type, Vec<String>)> = [
        (
            "karpenter_consolidation_score",
            Histogram,
            s(&["decision", "nodepool", "policy"]),
        ),
        (
            "karpenter_consolidation_moves_total",
            Counter,
            s(&["decision", "nodepool", "policy"]),
        ),
        (
            "karpenter_build_info",
            Gauge,
            s(&["version", "goversion", "goarch", "commit"]),
        ),
        (
            "karpenter_nodeclaims_unhealthy_disrupted_total",
            Counter,
            s(&["condition", "nodepool", "capacity_type", "image_id"]),
        ),
        (
            "karpenter_nodeclaims_termination_duration_seconds",
            Histogram,
            s(&["nodepool"]),
        ),
        (
            "karpenter_nodeclaims_terminated_total",
            Counter,
            s(&["nodepool", "capacity_type", "zone"]),
        ),
        (
            "karpenter_nodeclaims_instance_termination_duration_seconds",
            Histogram,
            s(&["nodepool"]),
        ),
        (
            "karpenter_nodeclaims_disrupted_total",
            Counter,
            s(&["reason", "nodepool", "capacity_type"]),
        ),
        (
            "karpenter_nodeclaims_created_total",
            Counter,
            s(&["reason", "nodepool", "min_values_relaxed"]),
        ),
        (
            "karpenter_nodes_total_pod_requests",
            Gauge,
            s(&[NODE, "resource_type"]),
        ),
        (
            "karpenter_nodes_total_pod_limits",
            Gauge,
            s(&[NODE, "resource_type"]),
        ),
        (
            "karpenter_nodes_total_daemon_requests",
            Gauge,
            s(&[NODE, "resource_type"]),
        ),
        (
            "karpenter_nodes_total_daemon_limits",
            Gauge,
            s(&[NODE, "resource_type"]),
        ),
        (
            "karpenter_nodes_termination_duration_seconds",
            Summary,
            s(&["nodepool"]),
        ),
        (
            "karpenter_nodes_terminated_total",
            Counter,
            s(&["nodepool", "zone"]),
        ),
        (
            "karpenter_nodes_system_overhead",
            Gauge,
            s(&[NODE, "resource_type"]),
        ),
        (
            "karpenter_nodes_lifetime_duration_seconds",
            Histogram,
            s(&["nodepool"]),
        ),
        ("karpenter_nodes_drained_total", Counter, s(&["nodepool"])),
        (
            "karpenter_nodes_current_lifetime_seconds",
            Gauge,
            s(&[NODE]),
        ),
        (
            "karpenter_nodes_created_total",
            Counter,
            s(&["nodepool", "zone"]),
        ),
        (
            "karpenter_nodes_allocatable",
            Gauge,
            s(&[NODE, "resource_type"]),
        ),
        (
            "karpenter_pods_unstarted_time_seconds",
            Gauge,
            s(&["name", "namespace"]),
        ),
        (
            "karpenter_pods_unbound_time_seconds",
            Gauge,
            s(&["name", "namespace"]),
        ),
        (
            "karpenter_pods_state",
            Gauge,
            s(&[
                "name",
                "namespace",
                "owner",
                "node",
                "scheduled",
                "nodepool",
                "zone",
                "arch",
                "capacity_type",
                "instance_type",
                "phase",
                "ready",
                "managed",
            ]),
        ),
        ("karpenter_pods_startup_duration_seconds", Summary, s(&[])),
        (
            "karpenter_pods_scheduling_decision_duration_seconds",
            Histogram,
            s(&[]),
        ),
        (
            "karpenter_pods_provisioning_unstarted_time_seconds",
            Gauge,
            s(&["name", "namespace"]),
        ),
        (
            "karpenter_pods_provisioning_unbound_time_seconds",
            Gauge,
            s(&["name", "namespace"]),
        ),
        (
            "karpenter_pods_provisioning_startup_duration_seconds",
            Histogram,
            s(&[]),
        ),
        (
            "karpenter_pods_provisioning_scheduling_undecided_time_seconds",
            Gauge,
            s(&["name", "namespace"]),
        ),
        (
            "karpenter_pods_provisioning_bound_duration_seconds",
            Histogram,
            s(&[]),
        ),
        (
            "karpenter_pods_eviction_requests_total",
            Counter,
            s(&["code"]),
        ),
        ("karpenter_pods_drained_total", Counter, s(&["reason"])),
        ("karpenter_pods_bound_duration_seconds", Histogram, s(&[])),
        (
            "karpenter_voluntary_disruption_queue_failures_total",
            Counter,
            s(&["decision", "reason", "consolidation_type"]),
        ),
        (
            "karpenter_voluntary_disruption_failed_validations_total",
            Counter,
            s(&["consolidation_type"]),
        ),
        (
            "karpenter_voluntary_disruption_eligible_nodes",
            Gauge,
            s(&["reason"]),
        ),
        (
            "karpenter_voluntary_disruption_decisions_total",
            Counter,
            s(&["decision", "reason", "consolidation_type"]),
        ),
        (
            "karpenter_voluntary_disruption_decisions_by_nodepool_total",
            Counter,
            s(&["nodepool", "decision", "reason", "consolidation_type"]),
        ),
        (
            "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
            Histogram,
            s(&["reason", "consolidation_type"]),
        ),
        (
            "karpenter_voluntary_disruption_consolidation_timeouts_total",
            Counter,
            s(&["consolidation_type"]),
        ),
        (
            "karpenter_scheduler_unschedulable_pods_count",
            Gauge,
            s(&["controller"]),
        ),
        (
            "karpenter_scheduler_unfinished_work_seconds",
            Gauge,
            s(&["controller", "scheduling_id"]),
        ),
        (
            "karpenter_scheduler_scheduling_duration_seconds",
            Histogram,
            s(&["controller"]),
        ),
        (
            "karpenter_scheduler_queue_depth",
            Gauge,
            s(&["controller", "scheduling_id"]),
        ),
        (
            "karpenter_scheduler_pending_pods_by_effective_zone_count",
            Gauge,
            s(&["controller", "zone"]),
        ),
        ("karpenter_scheduler_ignored_pods_count", Gauge, s(&[])),
        (
            "karpenter_nodepools_usage",
            Gauge,
            s(&["resource_type", "nodepool"]),
        ),
        (
            "karpenter_nodepools_nodes_consuming_budgets",
            Gauge,
            s(&["nodepool", "reason"]),
        ),
        (
            "karpenter_nodepools_limit",
            Gauge,
            s(&["resource_type", "nodepool"]),
        ),
        (
            "karpenter_nodepools_cost_tracker_errors_total",
            Counter,
            s(&["nodepool"]),
        ),
        ("karpenter_nodepools_cost_total", Gauge, s(&["nodepool"])),
        (
            "karpenter_nodepools_allowed_disruptions",
            Gauge,
            s(&["nodepool", "reason"]),
        ),
        (
            "karpenter_interruption_received_messages_total",
            Counter,
            s(&["message_type"]),
        ),
        (
            "karpenter_interruption_message_queue_duration_seconds",
            Histogram,
            s(&[]),
        ),
        (
            "karpenter_interruption_instance_status_unhealthy_total",
            Counter,
            s(&["category"]),
        ),
        (
            "karpenter_interruption_deleted_messages_total",
            Counter,
            s(&[]),
        ),
        (
            "karpenter_cluster_utilization_percent",
            Gauge,
            s(&["resource_type"]),
        ),
        (
            "karpenter_cluster_state_unsynced_time_seconds",
            Gauge,
            s(&[]),
        ),
        ("karpenter_cluster_state_synced", Gauge, s(&[])),
        ("karpenter_cluster_state_node_count", Gauge, s(&[])),
        (
            "karpenter_cloudprovider_instance_type_offering_price_estimate",
            Gauge,
            s(&["instance_type", "capacity_type", "zone"]),
        ),
        (
            "karpenter_cloudprovider_instance_type_offering_available",
            Gauge,
            s(&["instance_type", "capacity_type", "zone"]),
        ),
        (
            "karpenter_cloudprovider_instance_type_memory_bytes",
            Gauge,
            s(&["instance_type"]),
        ),
        (
            "karpenter_cloudprovider_instance_type_cpu_cores",
            Gauge,
            s(&["instance_type"]),
        ),
        (
            "karpenter_cloudprovider_instance_termination_failures_total",
            Counter,
            s(&["zone", "zone_id"]),
        ),
        (
            "karpenter_cloudprovider_instance_launch_failures_total",
            Counter,
            s(&["zone", "zone_id", "capacity_type", "reason"]),
        ),
        (
            "karpenter_cloudprovider_errors_total",
            Counter,
            s(&["controller", "method", "provider", "error"]),
        ),
        (
            "karpenter_cloudprovider_duration_seconds",
            Histogram,
            s(&["controller", "method", "provider"]),
        ),
        (
            "karpenter_cloudprovider_batcher_batch_time_seconds",
            Histogram,
            s(&["batcher"]),
        ),
        (
            "karpenter_cloudprovider_batcher_batch_size",
            Histogram,
            s(&["batcher"]),
        ),
        (
            "operator_termination_duration_seconds",
            Histogram,
            s(&["group", "kind"]),
        ),
        (
            "operator_termination_current_time_seconds",
            Gauge,
            s(&["namespace", "name", "group", "kind"]),
        ),
        (
            "operator_status_condition_transitions_total",
            Counter,
            s(&["type", "status", "reason", "group", "kind"]),
        ),
        (
            "operator_status_condition_transition_seconds",
            Histogram,
            s(&["type", "status", "group", "kind"]),
        ),
        (
            "operator_status_condition_current_status_seconds",
            Gauge,
            s(&[
                "namespace",
                "name",
                "type",
                "status",
                "reason",
                "group",
                "kind",
            ]),
        ),
        (
            "operator_status_condition_count",
            Gauge,
            s(&[
                "namespace",
                "name",
                "type",
                "status",
                "reason",
                "group",
                "kind",
            ]),
        ),
    ]
    .into_iter()
    .map(|(name, t, labels)| (name.to_owned(), t, labels))
    .collect();
    for (kind, extra) in [
        ("nodeclaim", &CLAIM_EXTRA[..]),
        ("node", &NODE_EXTRA[..]),
        ("nodepool", &[][..]),
        ("ec2nodeclass", &[][..]),
    ] {
        let with = |base: &[&str]| {
            base.iter()
                .chain(extra)
                .map(|n| (*n).to_owned())
                .collect::<Vec<_>>()
        };
        let object = ["namespace", "name"];
        let condition = ["namespace", "name", "type", "status", "reason"];
        list.extend([
            (
                format!("operator_{kind}_termination_duration_seconds"),
                Histogram,
                with(&[]),
            ),
            (
                format!("operator_{kind}_termination_current_time_seconds"),
                Gauge,
                with(&object),
            ),
            (
                format!("operator_{kind}_status_condition_transitions_total"),
                Counter,
                with(&["type", "status", "reason"]),
            ),
            (
                format!("operator_{kind}_status_condition_transition_seconds"),
                Histogram,
                with(&["type", "status"]),
            ),
            (
                format!("operator_{kind}_status_condition_current_status_seconds"),
                Gauge,
                with(&condition),
            ),
            (
                format!("operator_{kind}_status_condition_count"),
                Gauge,
                with(&condition),
            ),
        ]);
    }
    list
}
