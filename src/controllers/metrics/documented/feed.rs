//! A sample for every documented family, so that the encoded text shows each with its label names: fed
//! through the pure computations where kerf computes one.

use crate::catalog::Catalog;
use crate::cloud::metered::{
    CallLabels, ErrorLabels, LaunchFailureLabels as CloudLaunchLabels, ZoneLabels,
};
use crate::controllers::metrics::conditions::{ConditionTracker, DeprecatedSamples, Kind, Object};
use crate::controllers::metrics::nodes::node_samples;
use crate::controllers::metrics::pods::{pod_step, PodMemory};
use crate::controllers::metrics::*;
use crate::interruption::{BatchReport, Kind as MessageKind};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

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
pub(super) fn feed(metrics: &Metrics) {
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
    metrics.cost.publish(super::super::cost::fleet_cost(
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
            conditions: vec![super::super::conditions::Cond::of(
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
    use crate::controllers::metrics::disruption as d;
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
