//! Every metric Karpenter v1.14 documents under `karpenter_*` and `operator_*`
//! (aws/karpenter-provider-aws website/content/en/v1.14/reference/metrics.md), with the type and label names
//! of its definition in kubernetes-sigs/karpenter, the AWS provider and awslabs/operatorpkg; and the test that
//! kerf's `/metrics` text has each with exactly those label names.

use super::conditions::{ConditionTracker, DeprecatedSamples, Kind, Object};
use super::nodes::{node_samples, well_known_label_names};
use super::pods::{pod_step, PodMemory};
use super::*;
use crate::catalog::Catalog;
use crate::cloud::metered::{
    CallLabels, ErrorLabels, LaunchFailureLabels as CloudLaunchLabels, ZoneLabels,
};
use crate::interruption::{BatchReport, Kind as MessageKind};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    Counter,
    Gauge,
    Histogram,
    Summary,
}

/// Labels of the node gauges besides the well-known ones.
const NODE: &str = "@node";
/// The extra labels of a kind's operator families.
const CLAIM_EXTRA: [&str; 2] = ["karpenter_k8s_aws_ec2nodeclass", "karpenter_sh_nodepool"];
const NODE_EXTRA: [&str; 3] = [
    "karpenter_k8s_aws_ec2nodeclass",
    "karpenter_sh_nodepool",
    "karpenter_sh_initialized",
];

/// `(name as documented, type, label names)`; [`NODE`] stands for the node gauges' well-known labels and
/// `node_name`, `phase`, `managed`.
fn documented() -> Vec<(String, Type, Vec<String>)> {
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

fn one_node() -> Arc<k8s_openapi::api::core::v1::Node> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "creationTimestamp": "2026-11-23T10:00:00Z", "labels": {
                "karpenter.sh/nodepool": "general", "topology.kubernetes.io/zone": "us-west-2a"}},
            "spec": {"providerID": "aws:///us-west-2a/i-1"},
            "status": {"capacity": {"cpu": "2"}, "allocatable": {"cpu": "1"},
                       "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-23T10:01:00Z"}]},
        }))
        .expect("a Node"),
    )
}

fn one_pod(phase: &str, scheduled: &str) -> Arc<k8s_openapi::api::core::v1::Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "creationTimestamp": "2026-11-23T10:00:00Z"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c",
                "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1"}}}]},
            "status": {"phase": phase, "conditions": [
                {"type": "PodScheduled", "status": scheduled, "lastTransitionTime": "2026-11-23T10:00:05Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-23T10:00:09Z"}]},
        }))
        .expect("a Pod"),
    )
}

/// Feeds every family at least one sample, through the pure computations where kerf computes one.
fn feed(metrics: &Metrics) {
    let now: k8s_openapi::jiff::Timestamp = "2026-11-23T10:05:00Z".parse().expect("now");
    let nodes = [one_node()];
    let claim: Arc<crate::api::nodeclaim::NodeClaim> = Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "general-abc", "labels": {
                "karpenter.sh/nodepool": "general", "karpenter.k8s.aws/ec2nodeclass": "default",
                "karpenter.sh/capacity-type": "spot", "topology.kubernetes.io/zone": "us-west-2a",
                "node.kubernetes.io/instance-type": "m5.large"}},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
            "status": {"providerID": "aws:///us-west-2a/i-1", "conditions": [
                {"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": "2026-11-23T10:00:30Z"}]},
        }))
        .expect("a NodeClaim"),
    );
    let pool: Arc<crate::api::nodepool::NodePool> = Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "general"},
            "spec": {"limits": {"cpu": "100"}, "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []}}},
            "status": {"resources": {"cpu": "2"}, "conditions": [
                {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-11-23T10:00:00Z"}]},
        }))
        .expect("a NodePool"),
    );
    let catalog = Arc::new(
        Catalog::from_instance_types_json(
            &json!({"instanceTypes": [{"name": "m5.large", "cpu": "2", "memory": "8Gi", "pods": 29,
                "labels": {"karpenter.k8s.aws/instance-cpu": "2", "karpenter.k8s.aws/instance-memory": "8192"},
                "offerings": [{"zone": "us-west-2a", "capacityType": "spot", "price": 0.04}]}]})
            .to_string(),
        )
        .expect("a catalog"),
    );

    let daemon = {
        let mut pod = (*one_pod("Running", "True")).clone();
        pod.metadata.name = Some("agent".into());
        pod.metadata.owner_references = Some(vec![serde_json::from_value(json!(
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "u"}
        ))
        .expect("an owner")]);
        Arc::new(pod)
    };
    metrics.nodes.publish(node_samples(
        &nodes,
        std::slice::from_ref(&claim),
        &[one_pod("Running", "True"), daemon],
        now,
    ));
    metrics.nodes.synced.set(1);

    // "web" goes from pending to ready (the observations); "waiting" stays pending after kerf found it a place
    // (the unstarted and unbound gauges); "fresh" was seen but not decided on.
    let by_name: HashMap<&str, &k8s_openapi::api::core::v1::Node> =
        [("n1", nodes[0].as_ref())].into();
    let named = |name: &str, phase: &str, scheduled: &str| {
        let mut pod = (*one_pod(phase, scheduled)).clone();
        pod.metadata.name = Some(name.into());
        Arc::new(pod)
    };
    let keys = [
        "default/web".to_owned(),
        "default/waiting".to_owned(),
        "default/fresh".to_owned(),
    ];
    metrics.pods.times.acked(&keys, now);
    metrics.pods.times.decided(&keys[0], true, now);
    metrics.pods.times.decided(&keys[1], true, now);
    let mut memory = PodMemory::default();
    let waiting = named("waiting", "Pending", "False");
    let fresh = named("fresh", "Pending", "False");
    let before = [
        named("web", "Pending", "False"),
        waiting.clone(),
        fresh.clone(),
    ];
    metrics.pods.publish(pod_step(
        &mut memory,
        &before,
        &by_name,
        &metrics.pods.times.snapshot(),
        now,
    ));
    let after = [named("web", "Running", "True"), waiting, fresh];
    metrics.pods.publish(pod_step(
        &mut memory,
        &after,
        &by_name,
        &metrics.pods.times.snapshot(),
        now,
    ));

    metrics.pools.publish(std::slice::from_ref(&pool));
    metrics.offerings.publish(std::slice::from_ref(&catalog));
    let mut unpriced = (*claim).clone();
    unpriced.metadata.name = Some("unpriced".into());
    unpriced.spec.node_class_ref.name = "other".into();
    metrics.cost.publish(super::cost::fleet_cost(
        std::slice::from_ref(&pool),
        &[claim.clone(), Arc::new(unpriced)],
        &[("default".to_owned(), catalog)].into(),
    ));
    metrics.cost.consolidated("delete", "empty", 0.04);

    // "x" flips and goes (a transition, its duration, a finished termination); "y" stays, being deleted.
    let mut deprecated = DeprecatedSamples::default();
    for kind in Kind::ALL {
        let object = |name: &'static str, status: &str| Object {
            name,
            labels: claim.metadata.labels.as_ref(),
            deletion: Some(now),
            conditions: vec![super::conditions::Cond::of(
                &crate::api::condition::Condition {
                    type_: "Ready".into(),
                    status: status.into(),
                    last_transition_time: "2026-11-23T10:00:00Z".into(),
                    reason: "NotReady".into(),
                    message: String::new(),
                    observed_generation: None,
                },
            )],
        };
        let mut tracker = ConditionTracker::default();
        let mut ignored = DeprecatedSamples::default();
        let first = tracker.step(kind, &[object("x", "False"), object("y", "False")], now);
        metrics.conditions.publish(kind, first, &mut ignored);
        let second = tracker.step(kind, &[object("x", "True"), object("y", "False")], now);
        metrics.conditions.publish(kind, second, &mut ignored);
        let third = tracker.step(kind, &[object("y", "False")], now);
        metrics.conditions.publish(kind, third, &mut deprecated);
    }
    metrics.conditions.publish_deprecated(deprecated);

    let provisioning = &metrics.provisioning;
    provisioning
        .nodeclaims_created
        .get_or_create(&CreatedLabels {
            reason: "provisioned".into(),
            nodepool: "general".into(),
            min_values_relaxed: "false".into(),
        })
        .inc();
    provisioning.scheduling_decision.observe(0.5);
    provisioning
        .scheduling_duration
        .get_or_create(&Provisioning::provisioner())
        .observe(0.1);
    provisioning
        .queue_depth
        .get_or_create(&scheduler::SolveLabels {
            controller: "provisioner".into(),
            scheduling_id: "1".into(),
        })
        .set(0);
    provisioning
        .unfinished_work
        .get_or_create(&scheduler::SolveLabels {
            controller: "provisioner".into(),
            scheduling_id: "1".into(),
        })
        .set(0.5);
    provisioning.ignored_pods.set(0);
    provisioning
        .unschedulable_pods
        .get_or_create(&Provisioning::provisioner())
        .set(0);
    provisioning
        .pending_by_zone
        .get_or_create(&scheduler::ZoneLabels {
            controller: "provisioner".into(),
            zone: "us-west-2a".into(),
        })
        .set(1);

    let lifecycle = &metrics.lifecycle;
    lifecycle
        .disrupted
        .get_or_create(&DisruptedLabels {
            reason: "expired".into(),
            nodepool: "general".into(),
            capacity_type: "spot".into(),
        })
        .inc();
    lifecycle
        .nodes_created
        .get_or_create(&NodePoolZoneLabels {
            nodepool: "general".into(),
            zone: "us-west-2a".into(),
        })
        .inc();
    lifecycle
        .unhealthy_disrupted
        .get_or_create(&nodeclaims::UnhealthyLabels {
            condition: "Ready".into(),
            nodepool: "general".into(),
            capacity_type: "spot".into(),
            image_id: "ami-1".into(),
        })
        .inc();

    let termination = &metrics.termination;
    let mut deleted = (*claim).clone();
    deleted.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    termination.claim_terminated(&deleted, now);
    termination.node_terminated(&nodes[0], "general", now);
    termination.instance_terminating("aws:///us-west-2a/i-1");
    termination.instance_gone("aws:///us-west-2a/i-1", "general");
    termination
        .nodes_drained
        .get_or_create(&NodePoolLabels {
            nodepool: "general".into(),
        })
        .inc();
    termination
        .eviction_requests
        .get_or_create(&CodeLabels { code: "200".into() })
        .inc();
    termination
        .pods_drained
        .get_or_create(&ReasonLabels {
            reason: "evicted".into(),
        })
        .inc();

    let disruption = &metrics.disruption;
    use crate::controllers::disruption::metrics as d;
    use crate::disruption::PassObserver;
    let mut timer = disruption.observer();
    timer.started(crate::disruption::Method::Emptiness);
    timer.finished(crate::disruption::Method::Emptiness, 1);
    let decision = d::DecisionLabels {
        decision: "delete".into(),
        reason: "empty".into(),
        consolidation_type: "empty".into(),
    };
    disruption.decisions.get_or_create(&decision).inc();
    disruption.queue_failures.get_or_create(&decision).inc();
    disruption
        .decisions_by_nodepool
        .get_or_create(&d::NodePoolDecisionLabels {
            nodepool: "general".into(),
            decision: "delete".into(),
            reason: "empty".into(),
            consolidation_type: "empty".into(),
        })
        .inc();
    disruption
        .failed_validations
        .get_or_create(&d::ConsolidationTypeLabels {
            consolidation_type: "single".into(),
        })
        .inc();
    let counts: BTreeMap<String, crate::disruption::PoolCounts> = BTreeMap::new();
    disruption.publish_budgets(d::budget_samples(&[(*pool).clone()], &counts, now));
    let balanced = d::BalancedLabels {
        decision: "delete".into(),
        nodepool: "general".into(),
        policy: "Balanced".into(),
    };
    disruption.score.get_or_create(&balanced).observe(1.0);
    disruption.moves.get_or_create(&balanced).inc();

    let mut report = BatchReport::default();
    report.received.insert(MessageKind::SpotInterrupted, 1);
    report.deleted = 1;
    report.queue_latencies = vec![std::time::Duration::from_millis(40)];
    metrics.interruption.observe(&report);
    metrics
        .interruption
        .instance_status_unhealthy
        .get_or_create(&super::super::interruption::Category {
            category: "InstanceStatus".into(),
        })
        .inc();

    let cloud = &metrics.cloud;
    cloud
        .duration
        .get_or_create(&CallLabels {
            controller: "provisioner".into(),
            method: "Create".into(),
            provider: "aws".into(),
        })
        .observe(0.2);
    cloud
        .errors
        .get_or_create(&ErrorLabels {
            controller: "provisioner".into(),
            method: "Create".into(),
            provider: "aws".into(),
            error: "InsufficientCapacityError".into(),
        })
        .inc();
    cloud
        .launch_failures
        .get_or_create(&CloudLaunchLabels {
            zone: "us-west-2a".into(),
            zone_id: "usw2-az1".into(),
            capacity_type: "spot".into(),
            reason: "insufficient_capacity".into(),
        })
        .inc();
    cloud
        .termination_failures
        .get_or_create(&ZoneLabels {
            zone: "us-west-2a".into(),
            zone_id: String::new(),
        })
        .inc();
    let batcher = offerings::BatcherLabels {
        batcher: "none".into(),
    };
    metrics
        .offerings
        .batch_time
        .get_or_create(&batcher)
        .observe(0.1);
    metrics
        .offerings
        .batch_size
        .get_or_create(&batcher)
        .observe(1.0);
}

/// For each family of the text (its `# TYPE` name), its type and the label names of its samples (`le` and
/// `quantile` aside).
fn families(text: &str) -> BTreeMap<String, (String, BTreeSet<String>)> {
    let mut families: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("a type line");
            let before = families.insert(name.to_owned(), (kind.to_owned(), BTreeSet::new()));
            assert!(before.is_none(), "{name} is registered twice");
            current = Some(name.to_owned());
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let family = current.as_ref().expect("a sample after its TYPE line");
        let Some(open) = line.find('{') else { continue };
        let close = line.rfind('}').expect("closed labels");
        let names: Vec<String> = line[open + 1..close]
            .split("\",")
            .filter_map(|pair| {
                pair.split_once('=')
                    .map(|(n, _)| n.trim_start_matches(',').to_owned())
            })
            .filter(|n| n != "le" && n != "quantile")
            .collect();
        families.get_mut(family).expect("known").1.extend(names);
    }
    families
}

#[test]
fn every_documented_metric_has_karpenters_type_and_label_names() {
    let metrics = Metrics::new();
    feed(&metrics);
    let text = metrics.encode().expect("encodable");
    assert!(text.ends_with("# EOF\n"), "{text}");
    let found = families(&text);
    let node_labels: Vec<String> = well_known_label_names()
        .into_iter()
        .map(|(_, name)| name)
        .chain(["node_name", "phase", "managed"].map(str::to_owned))
        .collect();
    let list = documented();
    assert_eq!(
        list.len(),
        101,
        "the v1.14 page's karpenter_* and operator_* metrics"
    );
    let mut problems = Vec::new();
    for (name, kind, label_names) in list {
        let (family, expected_type) = match kind {
            Type::Counter => (
                name.strip_suffix("_total")
                    .expect("a counter name")
                    .to_owned(),
                "counter",
            ),
            Type::Gauge => (name.clone(), "gauge"),
            Type::Histogram => (name.clone(), "histogram"),
            Type::Summary => (name.clone(), "summary"),
        };
        let expected: BTreeSet<String> = label_names
            .into_iter()
            .flat_map(|n| {
                if n == NODE {
                    node_labels.clone()
                } else {
                    vec![n]
                }
            })
            .collect();
        match found.get(&family) {
            None => problems.push(format!("{name}: missing")),
            Some((t, _)) if t != expected_type => {
                problems.push(format!("{name}: type {t}, not {expected_type}"))
            }
            Some((_, labels)) if *labels != expected => {
                problems.push(format!("{name}: labels {labels:?}, not {expected:?}"))
            }
            Some(_) => {}
        }
    }
    assert!(problems.is_empty(), "{}\n\n{text}", problems.join("\n"));
}

#[test]
fn histograms_have_karpenters_buckets() {
    let metrics = Metrics::new();
    feed(&metrics);
    let text = metrics.encode().expect("encodable");
    let bounds = |family: &str| -> Vec<String> {
        let prefix = format!("{family}_bucket{{");
        let mut seen: Vec<String> = Vec::new();
        for line in text.lines().filter(|l| l.starts_with(&prefix)) {
            let le = line
                .split("le=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .expect("le");
            if !seen.iter().any(|s| s == le) {
                seen.push(le.to_owned());
            }
        }
        seen
    };
    let expect = |family: &str, values: &[f64]| {
        let mut expected: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
        expected.push("+Inf".to_owned());
        assert_eq!(bounds(family), expected, "{family}");
    };
    expect(
        "karpenter_scheduler_scheduling_duration_seconds",
        &buckets::DURATION,
    );
    expect("karpenter_pods_bound_duration_seconds", &buckets::DURATION);
    expect(
        "karpenter_interruption_message_queue_duration_seconds",
        &buckets::DURATION,
    );
    expect(
        "karpenter_cloudprovider_duration_seconds",
        &buckets::DEFAULT,
    );
    expect(
        "karpenter_nodes_lifetime_duration_seconds",
        &buckets::NODE_LIFETIME,
    );
    expect(
        "karpenter_consolidation_score",
        &buckets::CONSOLIDATION_SCORE,
    );
    expect(
        "karpenter_cloudprovider_batcher_batch_size",
        &buckets::BATCH_SIZE,
    );
    expect(
        "operator_ec2nodeclass_status_condition_transition_seconds",
        &buckets::DEFAULT,
    );
    expect(
        "operator_status_condition_transition_seconds",
        &buckets::DEFAULT,
    );
    let exponential = |start: f64, n: i32| (0..n).map(|i| start * 2f64.powi(i)).collect::<Vec<_>>();
    expect(
        "karpenter_nodeclaims_termination_duration_seconds",
        &exponential(1.0, 12),
    );
    expect(
        "karpenter_nodeclaims_instance_termination_duration_seconds",
        &exponential(1.0, 11),
    );
    expect(
        "operator_nodeclaim_status_condition_transition_seconds",
        &exponential(0.5, 15),
    );
    expect(
        "operator_node_termination_duration_seconds",
        &exponential(0.5, 15),
    );
}
