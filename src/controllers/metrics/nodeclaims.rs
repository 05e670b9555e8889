//! The NodeClaim lifecycle and termination families: Karpenter's pkg/metrics/metrics.go counters,
//! pkg/controllers/nodeclaim/lifecycle/metrics.go, pkg/controllers/node/termination/metrics.go and
//! terminator/metrics.go, pkg/controllers/node/health/metrics.go.

use super::buckets;
use super::scheduler::HistogramFamily;
use super::summary::Summary;
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Instant;

/// Instances whose termination is being waited for, at most: a bound on the start times kept.
const MAX_TERMINATING: usize = 10_000;

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UnhealthyLabels {
    pub condition: String,
    pub nodepool: String,
    pub capacity_type: String,
    pub image_id: String,
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
    /// deletes claims (insufficient_capacity, launch_timeout, registration_timeout, instance_terminated), and node
    /// repair's (unhealthy).
    pub disrupted: Family<DisruptedLabels, Counter>,
    /// `karpenter_nodeclaims_unhealthy_disrupted_total{condition,nodepool,capacity_type,image_id}`: claims node
    /// repair deleted (the `node.health` controller).
    pub unhealthy_disrupted: Family<UnhealthyLabels, Counter>,
}

impl LifecycleMetrics {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let metrics = LifecycleMetrics {
            launched: Family::default(),
            launch_failures: Family::default(),
            registered: Family::default(),
            initialized: Family::default(),
            nodes_created: Family::default(),
            disrupted: Family::default(),
            unhealthy_disrupted: Family::default(),
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
            "Nodes registered for a NodeClaim, by NodePool and zone",
            metrics.nodes_created.clone(),
        );
        registry.register(
            "karpenter_nodeclaims_disrupted",
            "NodeClaims deleted by kerf, by reason, NodePool and capacity type",
            metrics.disrupted.clone(),
        );
        registry.register(
            "karpenter_nodeclaims_unhealthy_disrupted",
            "NodeClaims deleted by node repair, by the unhealthy condition, NodePool, capacity type and image",
            metrics.unhealthy_disrupted.clone(),
        );
        metrics
    }
}

/// The termination controller's metrics.
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
    /// `karpenter_nodeclaims_termination_duration_seconds{nodepool}`: deletion to finalizer removal.
    pub nodeclaim_duration: HistogramFamily<NodePoolLabels>,
    /// `karpenter_nodeclaims_instance_termination_duration_seconds{nodepool}`: the first terminate call to the
    /// instance being gone.
    pub instance_duration: HistogramFamily<NodePoolLabels>,
    /// `karpenter_nodes_lifetime_duration_seconds{nodepool}`: creation to finalizer removal.
    pub node_lifetime: HistogramFamily<NodePoolLabels>,
    /// `karpenter_nodes_termination_duration_seconds{nodepool}`, a summary.
    pub node_duration: Summary,
    /// When kerf first asked for each instance's termination, by provider ID.
    terminating: Mutex<HashMap<String, Instant>>,
}

impl TerminationMetrics {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let metrics = TerminationMetrics {
            nodeclaims_terminated: Family::default(),
            nodes_terminated: Family::default(),
            nodes_drained: Family::default(),
            eviction_requests: Family::default(),
            pods_drained: Family::default(),
            nodeclaim_duration: Family::new_with_constructor(buckets::nodeclaim_termination),
            instance_duration: Family::new_with_constructor(buckets::instance_termination),
            node_lifetime: Family::new_with_constructor(buckets::node_lifetime),
            node_duration: Summary::new(
                "karpenter_nodes_termination_duration_seconds",
                "Seconds from a Node's deletion to the removal of its finalizer",
                &["nodepool"],
            ),
            terminating: Mutex::default(),
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
        registry.register(
            "karpenter_nodeclaims_termination_duration_seconds",
            "Seconds from a NodeClaim's deletion to the removal of its finalizer",
            metrics.nodeclaim_duration.clone(),
        );
        registry.register(
            "karpenter_nodeclaims_instance_termination_duration_seconds",
            "Seconds from the first request to terminate a NodeClaim's instance to the instance being gone",
            metrics.instance_duration.clone(),
        );
        registry.register(
            "karpenter_nodes_lifetime_duration_seconds",
            "Seconds from a Node's creation to its removal",
            metrics.node_lifetime.clone(),
        );
        metrics
    }

    /// Notes that the termination of `provider_id` was asked for (the first request counts).
    pub fn instance_terminating(&self, provider_id: &str) {
        let mut terminating = self.lock_terminating();
        if terminating.len() >= MAX_TERMINATING && !terminating.contains_key(provider_id) {
            tracing::warn!(
                provider_id,
                "too many instance terminations tracked; this one is not timed"
            );
            return;
        }
        terminating
            .entry(provider_id.to_owned())
            .or_insert_with(Instant::now);
    }

    /// The instance `provider_id` of a claim of `nodepool` is gone: observes how long that took since
    /// [`TerminationMetrics::instance_terminating`] (nothing when kerf did not see it asked, e.g. across a
    /// restart).
    pub fn instance_gone(&self, provider_id: &str, nodepool: &str) {
        let Some(asked) = self.lock_terminating().remove(provider_id) else {
            return;
        };
        self.instance_duration
            .get_or_create(&NodePoolLabels {
                nodepool: nodepool.to_owned(),
            })
            .observe(asked.elapsed().as_secs_f64());
    }

    /// A claim's finalizer was removed at `now`: `karpenter_nodeclaims_terminated_total` and its termination
    /// duration.
    pub fn claim_terminated(&self, claim: &NodeClaim, now: Timestamp) {
        let claim_labels = claim.metadata.labels.as_ref();
        let nodepool = label(claim_labels, labels::NODEPOOL);
        self.nodeclaims_terminated
            .get_or_create(&TerminatedLabels {
                nodepool: nodepool.clone(),
                capacity_type: label(claim_labels, labels::CAPACITY_TYPE),
                zone: label(claim_labels, labels::ZONE),
            })
            .inc();
        if let Some(deleted) = &claim.metadata.deletion_timestamp {
            self.nodeclaim_duration
                .get_or_create(&NodePoolLabels { nodepool })
                .observe(seconds_between(deleted.0, now));
        }
    }

    /// A Node of `nodepool` had its finalizer removed at `now`: `karpenter_nodes_terminated_total`, its
    /// termination duration (0 when kerf deleted it in the same pass) and its lifetime.
    pub fn node_terminated(&self, node: &Node, nodepool: &str, now: Timestamp) {
        let meta = &node.metadata;
        self.nodes_terminated
            .get_or_create(&NodePoolZoneLabels {
                nodepool: nodepool.to_owned(),
                zone: label(meta.labels.as_ref(), labels::ZONE),
            })
            .inc();
        let deleted = meta.deletion_timestamp.as_ref().map_or(now, |t| t.0);
        self.node_duration
            .observe(&[nodepool], seconds_between(deleted, now));
        if let Some(created) = &meta.creation_timestamp {
            self.node_lifetime
                .get_or_create(&NodePoolLabels {
                    nodepool: nodepool.to_owned(),
                })
                .observe(seconds_between(created.0, now));
        }
    }

    fn lock_terminating(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.terminating
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn label(labels: Option<&BTreeMap<String, String>>, key: &str) -> String {
    labels.and_then(|l| l.get(key)).cloned().unwrap_or_default()
}

/// Seconds from `from` to `to`, never negative (clocks of the apiserver and kerf differ a little).
pub fn seconds_between(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64().max(0.0)
}
