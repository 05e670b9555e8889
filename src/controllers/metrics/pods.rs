//! The pod families of Karpenter's pkg/controllers/metrics/pod: one `karpenter_pods_state` series per pod, how
//! long pods wait to be bound and to start (from creation, and from the moment kerf first found them a place),
//! and how long the provisioner has seen a pod without deciding on it.
//!
//! The provisioner notes when it first saw each pending pod and when it decided on it ([`PodTimes`]); a pass
//! ([`pod_step`]) turns the stores and those notes into the gauges and observations, remembering which pods it
//! saw pending or unbound ([`PodMemory`]) so that each pod's start and binding is observed once.

use super::buckets;
use super::gauge_set::{labels, GaugeSet, Labels, Samples};
use super::nodeclaims::seconds_between;
use super::summary::Summary;
use crate::api::labels as keys;
pub use crate::engine::provisioning::plan::pod_key as key;
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition};
use k8s_openapi::jiff::Timestamp;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// Pods whose provisioning times are kept, at most (a pod's entry goes when the pod starts or is deleted).
const MAX_TRACKED: usize = 100_000;

/// The pod families.
pub struct PodMetrics {
    pub state: GaugeSet,
    pub unstarted: GaugeSet,
    pub unbound: GaugeSet,
    pub provisioning_unstarted: GaugeSet,
    pub provisioning_unbound: GaugeSet,
    pub undecided: GaugeSet,
    /// `karpenter_pods_startup_duration_seconds`, a summary.
    pub startup: Summary,
    pub bound: Histogram,
    pub provisioning_bound: Histogram,
    pub provisioning_startup: Histogram,
    /// What the provisioner noted.
    pub times: PodTimes,
}

impl PodMetrics {
    pub(super) fn register(registry: &mut Registry) -> PodMetrics {
        let metrics = PodMetrics {
            state: GaugeSet::default(),
            unstarted: GaugeSet::default(),
            unbound: GaugeSet::default(),
            provisioning_unstarted: GaugeSet::default(),
            provisioning_unbound: GaugeSet::default(),
            undecided: GaugeSet::default(),
            startup: Summary::new(
                "karpenter_pods_startup_duration_seconds",
                "Seconds from a pod's creation to it being ready",
                &[],
            ),
            bound: buckets::duration(),
            provisioning_bound: buckets::duration(),
            provisioning_startup: buckets::duration(),
            times: PodTimes::default(),
        };
        let sets = [
            (
                "karpenter_pods_state",
                "1 per pod, labelled with where it runs and in which state",
                &metrics.state,
            ),
            (
                "karpenter_pods_unstarted_time_seconds",
                "Seconds since creation of each pod not running yet",
                &metrics.unstarted,
            ),
            (
                "karpenter_pods_unbound_time_seconds",
                "Seconds since creation of each pod not bound yet",
                &metrics.unbound,
            ),
            (
                "karpenter_pods_provisioning_unstarted_time_seconds",
                "Seconds since kerf found a place for each pod not running yet",
                &metrics.provisioning_unstarted,
            ),
            (
                "karpenter_pods_provisioning_unbound_time_seconds",
                "Seconds since kerf found a place for each pod not bound yet",
                &metrics.provisioning_unbound,
            ),
            (
                "karpenter_pods_provisioning_scheduling_undecided_time_seconds",
                "Seconds kerf has seen each pending pod without deciding on it",
                &metrics.undecided,
            ),
        ];
        for (name, help, set) in sets {
            registry.register(name, help, set.clone());
        }
        registry.register(
            "karpenter_pods_bound_duration_seconds",
            "Seconds from a pod's creation to its binding",
            metrics.bound.clone(),
        );
        registry.register(
            "karpenter_pods_provisioning_bound_duration_seconds",
            "Seconds from kerf finding a place for a pod to its binding",
            metrics.provisioning_bound.clone(),
        );
        registry.register(
            "karpenter_pods_provisioning_startup_duration_seconds",
            "Seconds from kerf finding a place for a pod to it being ready",
            metrics.provisioning_startup.clone(),
        );
        metrics
    }

    /// Publishes one pass.
    pub fn publish(&self, step: PodStep) {
        self.state.replace(step.state);
        self.unstarted.replace(step.unstarted);
        self.unbound.replace(step.unbound);
        self.provisioning_unstarted
            .replace(step.provisioning_unstarted);
        self.provisioning_unbound.replace(step.provisioning_unbound);
        self.undecided.replace(step.undecided);
        for seconds in step.startup {
            self.startup.observe(&[], seconds);
        }
        let observed = [
            (&self.bound, step.bound),
            (&self.provisioning_bound, step.provisioning_bound),
            (&self.provisioning_startup, step.provisioning_startup),
        ];
        for (histogram, values) in observed {
            for seconds in values {
                histogram.observe(seconds);
            }
        }
        self.times.forget(&step.started);
    }
}

/// What the provisioner noted about one pod.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PodMarks {
    /// When the provisioner first saw it pending.
    pub acked: Option<Timestamp>,
    /// When a solve first decided on it (placed it, or found it no place).
    pub decided: Option<Timestamp>,
    /// When a solve first found it a place.
    pub schedulable: Option<Timestamp>,
}

/// The provisioner's notes, by pod key (`namespace/name`). Clones share them.
#[derive(Clone, Default)]
pub struct PodTimes(Arc<Mutex<HashMap<String, PodMarks>>>);

impl PodTimes {
    /// The pods of a batch were seen at `now` (the first time counts).
    pub fn acked<'a>(&self, pods: impl IntoIterator<Item = &'a String>, now: Timestamp) {
        let mut marks = self.lock();
        for pod in pods {
            if marks.len() >= MAX_TRACKED && !marks.contains_key(pod) {
                tracing::debug!(
                    pod,
                    "too many pods tracked; its provisioning times are not kept"
                );
                continue;
            }
            marks
                .entry(pod.clone())
                .or_default()
                .acked
                .get_or_insert(now);
        }
    }

    /// A solve decided on `pod` at `now`: it found the pod a place when `placed`.
    pub fn decided(&self, pod: &str, placed: bool, now: Timestamp) {
        let mut marks = self.lock();
        let Some(mark) = marks.get_mut(pod) else {
            return; // never acked (tracking full): nothing to time it from
        };
        mark.decided.get_or_insert(now);
        if placed {
            mark.schedulable.get_or_insert(now);
        }
    }

    /// The notes as they are now.
    pub fn snapshot(&self) -> HashMap<String, PodMarks> {
        self.lock().clone()
    }

    /// Drops the notes of pods that are gone (not in `alive`).
    pub fn retain(&self, alive: &HashSet<String>) {
        self.lock().retain(|pod, _| alive.contains(pod));
    }

    fn forget(&self, pods: &[String]) {
        let mut marks = self.lock();
        for pod in pods {
            marks.remove(pod);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, PodMarks>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What a pass remembers for the next: pods seen pending (not yet started) and seen unbound.
#[derive(Debug, Default)]
pub struct PodMemory {
    pending: HashSet<String>,
    unbound: HashSet<String>,
}

/// One pass's gauges and observations.
#[derive(Debug, Default, PartialEq)]
pub struct PodStep {
    pub state: Samples,
    pub unstarted: Samples,
    pub unbound: Samples,
    pub provisioning_unstarted: Samples,
    pub provisioning_unbound: Samples,
    pub undecided: Samples,
    pub startup: Vec<f64>,
    pub provisioning_startup: Vec<f64>,
    pub bound: Vec<f64>,
    pub provisioning_bound: Vec<f64>,
    /// Pods that started (or ended) this pass: their provisioning notes are no longer needed.
    pub started: Vec<String>,
}

/// One pass over `pods` at `now`, with the Nodes by name and the provisioner's notes.
pub fn pod_step(
    memory: &mut PodMemory,
    pods: &[Arc<Pod>],
    nodes: &HashMap<&str, &Node>,
    marks: &HashMap<String, PodMarks>,
    now: Timestamp,
) -> PodStep {
    let mut step = PodStep::default();
    let alive: HashSet<String> = pods.iter().map(|p| key(p)).collect();
    memory.pending.retain(|k| alive.contains(k));
    memory.unbound.retain(|k| alive.contains(k));
    for pod in pods {
        let key = key(pod);
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let id = labels([("name", name), ("namespace", namespace)]);
        let mark = marks.get(&key).copied().unwrap_or_default();
        step.state.push((state_labels(pod, nodes), 1.0));
        let scheduled = condition(pod, "PodScheduled");
        let scheduled_true = scheduled.is_some_and(|c| c.status == "True");
        if mark.decided.is_none() && !scheduled_true {
            if let Some(acked) = mark.acked {
                step.undecided
                    .push((id.clone(), seconds_between(acked, now)));
            }
        }
        let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let since_created = created.map(|c| seconds_between(c, now));
        let pending = phase(pod) == Some("Pending");
        let ready = condition(pod, "Ready").filter(|c| c.status == "True");
        // Started: Karpenter's recordPodStartupMetric.
        if pending || (memory.pending.contains(&key) && ready.is_none() && !is_terminal(pod)) {
            if let Some(seconds) = since_created {
                step.unstarted.push((id.clone(), seconds));
            }
            if let Some(schedulable) = mark.schedulable {
                step.provisioning_unstarted
                    .push((id.clone(), seconds_between(schedulable, now)));
            }
            memory.pending.insert(key.clone());
        } else if memory.pending.remove(&key) {
            if let (Some(ready), Some(created)) = (ready, created) {
                let became = ready.last_transition_time.as_ref().map(|t| t.0);
                if let Some(became) = became {
                    step.startup.push(seconds_between(created, became));
                    if let Some(schedulable) = mark.schedulable {
                        step.provisioning_startup
                            .push(seconds_between(schedulable, became));
                    }
                }
            }
            step.started.push(key.clone());
        }
        // Bound: Karpenter's recordPodBoundMetric.
        if pending {
            if !scheduled_true {
                if let Some(seconds) = since_created {
                    step.unbound.push((id.clone(), seconds));
                }
                if let Some(schedulable) = mark.schedulable {
                    step.provisioning_unbound
                        .push((id, seconds_between(schedulable, now)));
                }
            }
            memory.unbound.insert(key);
        } else if scheduled_true && memory.unbound.remove(&key) {
            let bound_at = scheduled
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| t.0);
            if let (Some(created), Some(bound_at)) = (created, bound_at) {
                step.bound.push(seconds_between(created, bound_at));
                if let Some(schedulable) = mark.schedulable {
                    step.provisioning_bound
                        .push(seconds_between(schedulable, bound_at));
                }
            }
        }
    }
    step
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(phase(pod), Some("Succeeded" | "Failed"))
}

fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// `karpenter_pods_state`'s labels, in Karpenter's order: the pod, its owner (the first owner reference as a
/// self link), its node and that Node's pool, zone, architecture, capacity and instance type, its phase and
/// readiness, and whether a NodePool owns the node.
fn state_labels(pod: &Pod, nodes: &HashMap<&str, &Node>) -> Labels {
    let meta = &pod.metadata;
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    let owner = meta
        .owner_references
        .as_ref()
        .and_then(|o| o.first())
        .map(|o| {
            format!(
                "/apis/{}/namespaces/{namespace}/{}s/{}",
                o.api_version,
                o.kind.to_lowercase(),
                o.name
            )
        })
        .unwrap_or_default();
    let node_name = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default();
    let node_labels = nodes
        .get(node_name)
        .and_then(|n| n.metadata.labels.as_ref());
    let node_label = |key: &str| {
        node_labels
            .and_then(|l| l.get(key))
            .map_or("", String::as_str)
    };
    let ready = condition(pod, "Ready").is_some_and(|c| c.status == "True");
    let nodepool = node_label(keys::NODEPOOL);
    labels([
        ("name", meta.name.as_deref().unwrap_or_default()),
        ("namespace", namespace),
        ("owner", &owner),
        ("node", node_name),
        (
            "scheduled",
            if node_name.is_empty() {
                "false"
            } else {
                "true"
            },
        ),
        ("nodepool", nodepool),
        ("zone", node_label(keys::ZONE)),
        ("arch", node_label(keys::ARCH)),
        ("capacity_type", node_label(keys::CAPACITY_TYPE)),
        ("instance_type", node_label(keys::INSTANCE_TYPE)),
        ("phase", phase(pod).unwrap_or_default()),
        ("ready", if ready { "true" } else { "false" }),
        (
            "managed",
            if nodepool.is_empty() { "false" } else { "true" },
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("a timestamp")
    }

    fn pod(status: serde_json::Value, node: Option<&str>) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "web", "namespace": "shop", "creationTimestamp": "2026-11-23T10:00:00Z",
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "u"}]},
                "spec": {"nodeName": node, "containers": [{"name": "c"}]},
                "status": status,
            }))
            .expect("a Pod"),
        )
    }

    fn value(samples: &[(Labels, f64)]) -> Option<f64> {
        samples.first().map(|(_, v)| *v)
    }

    #[test]
    fn a_pod_is_timed_from_pending_to_bound_to_started() {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1", "labels": {
            "karpenter.sh/nodepool": "general", "topology.kubernetes.io/zone": "us-west-2a",
            "kubernetes.io/arch": "arm64", "karpenter.sh/capacity-type": "spot",
            "node.kubernetes.io/instance-type": "m7g.large"}}}))
        .expect("a Node");
        let nodes: HashMap<&str, &Node> = [("n1", &node)].into();
        let times = PodTimes::default();
        let mut memory = PodMemory::default();
        let key = "shop/web".to_owned();

        // Pending and unseen by the provisioner.
        let pending = pod(
            json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}),
            None,
        );
        let step = pod_step(
            &mut memory,
            std::slice::from_ref(&pending),
            &nodes,
            &times.snapshot(),
            at("2026-11-23T10:00:10Z"),
        );
        assert_eq!(value(&step.unstarted), Some(10.0));
        assert_eq!(value(&step.unbound), Some(10.0));
        assert!(step.undecided.is_empty() && step.provisioning_unbound.is_empty());

        // Acked at :10, undecided at :15, placed at :20.
        times.acked([&key], at("2026-11-23T10:00:10Z"));
        let step = pod_step(
            &mut memory,
            std::slice::from_ref(&pending),
            &nodes,
            &times.snapshot(),
            at("2026-11-23T10:00:15Z"),
        );
        assert_eq!(value(&step.undecided), Some(5.0));
        times.decided(&key, true, at("2026-11-23T10:00:20Z"));
        let step = pod_step(
            &mut memory,
            &[pending],
            &nodes,
            &times.snapshot(),
            at("2026-11-23T10:00:30Z"),
        );
        assert!(step.undecided.is_empty());
        assert_eq!(value(&step.provisioning_unbound), Some(10.0));
        assert_eq!(value(&step.provisioning_unstarted), Some(10.0));

        // Bound at :50 and running, not ready yet: bound observed once, still unstarted.
        let running = pod(
            json!({"phase": "Running", "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-23T10:00:50Z"},
            {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-23T10:00:50Z"}]}),
            Some("n1"),
        );
        let step = pod_step(
            &mut memory,
            std::slice::from_ref(&running),
            &nodes,
            &times.snapshot(),
            at("2026-11-23T10:01:00Z"),
        );
        assert_eq!(step.bound, vec![50.0]);
        assert_eq!(step.provisioning_bound, vec![30.0]);
        assert_eq!(value(&step.unstarted), Some(60.0));
        assert!(step.unbound.is_empty());
        let again = pod_step(
            &mut memory,
            &[running],
            &nodes,
            &times.snapshot(),
            at("2026-11-23T10:01:05Z"),
        );
        assert!(again.bound.is_empty());

        // Ready at 10:01:10: started once, its notes go.
        let ready = pod(
            json!({"phase": "Running", "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-23T10:00:50Z"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-23T10:01:10Z"}]}),
            Some("n1"),
        );
        let step = pod_step(
            &mut memory,
            std::slice::from_ref(&ready),
            &nodes,
            &times.snapshot(),
            at("2026-11-23T10:01:20Z"),
        );
        assert_eq!(step.startup, vec![70.0]);
        assert_eq!(step.provisioning_startup, vec![50.0]);
        assert_eq!(step.started, vec![key.clone()]);
        assert!(step.unstarted.is_empty());
        let (labels, one) = &step.state[0];
        assert_eq!(*one, 1.0);
        let expected = [
            ("name", "web"),
            ("namespace", "shop"),
            ("owner", "/apis/apps/v1/namespaces/shop/replicasets/web-1"),
            ("node", "n1"),
            ("scheduled", "true"),
            ("nodepool", "general"),
            ("zone", "us-west-2a"),
            ("arch", "arm64"),
            ("capacity_type", "spot"),
            ("instance_type", "m7g.large"),
            ("phase", "Running"),
            ("ready", "true"),
            ("managed", "true"),
        ];
        assert_eq!(labels, &super::labels(expected));
        let after = pod_step(
            &mut memory,
            &[ready],
            &nodes,
            &times.snapshot(),
            at("2026-11-23T10:01:25Z"),
        );
        assert!(after.startup.is_empty());

        // A deleted pod leaves nothing behind.
        let gone = pod_step(
            &mut memory,
            &[],
            &nodes,
            &HashMap::new(),
            at("2026-11-23T10:02:00Z"),
        );
        assert_eq!(gone, PodStep::default());
        assert!(memory.pending.is_empty() && memory.unbound.is_empty());
    }

    #[test]
    fn decisions_without_an_ack_are_not_kept() {
        let times = PodTimes::default();
        times.decided("a/b", true, at("2026-11-23T10:00:00Z"));
        assert!(times.snapshot().is_empty());
        times.acked([&"a/b".to_owned()], at("2026-11-23T10:00:00Z"));
        times.acked([&"a/b".to_owned()], at("2026-11-23T10:00:09Z"));
        assert_eq!(
            times.snapshot()["a/b"].acked,
            Some(at("2026-11-23T10:00:00Z"))
        );
        times.retain(&HashSet::new());
        assert!(times.snapshot().is_empty());
    }
}
