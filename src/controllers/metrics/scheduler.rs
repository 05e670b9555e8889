//! The provisioner's families (Karpenter's pkg/controllers/provisioning/scheduling/metrics.go and the
//! NodeClaim creation counter of pkg/metrics/metrics.go).

use super::buckets;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(super) type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// The `controller` label of the provisioner's scheduler metrics (Karpenter's controller name).
pub const PROVISIONER: &str = "provisioner";

/// How often a solve in progress refreshes `karpenter_scheduler_unfinished_work_seconds` and the queue depth.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

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

/// One solve: Karpenter names each scheduler by a UUID; kerf numbers its solves.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SolveLabels {
    pub controller: String,
    pub scheduling_id: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ZoneLabels {
    pub controller: String,
    pub zone: String,
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
    /// `karpenter_scheduler_queue_depth`: the pods of the solve under way, 0 once it is done (as Karpenter's
    /// queue ends empty).
    pub queue_depth: Family<SolveLabels, Gauge>,
    /// `karpenter_scheduler_unfinished_work_seconds`: how long the solve under way has run.
    pub unfinished_work: Family<SolveLabels, Gauge<f64, AtomicU64>>,
    /// `karpenter_scheduler_ignored_pods_count`: pending pods of the last batch refused before the solve
    /// (unreadable requirements, invalid volumes).
    pub ignored_pods: Gauge,
    /// `karpenter_scheduler_unschedulable_pods_count`: pods the last solve could not place (those waiting for
    /// reserved capacity left out, as Karpenter does).
    pub unschedulable_pods: Family<ControllerLabels, Gauge>,
    /// `karpenter_scheduler_pending_pods_by_effective_zone_count`: the pending pods of the last solve by the zone
    /// their constraints hold them to (a zone, `flexible` or `none`); the zones of the solve before are dropped.
    pub pending_by_zone: Family<ZoneLabels, Gauge>,
    solves: Arc<AtomicU64>,
}

impl Provisioning {
    pub(super) fn register(registry: &mut Registry) -> Provisioning {
        let metrics = Provisioning {
            nodeclaims_created: Family::default(),
            scheduling_decision: buckets::duration(),
            scheduling_duration: Family::new_with_constructor(buckets::duration),
            queue_depth: Family::default(),
            unfinished_work: Family::default(),
            ignored_pods: Gauge::default(),
            unschedulable_pods: Family::default(),
            pending_by_zone: Family::default(),
            solves: Arc::default(),
        };
        registry.register(
            "karpenter_nodeclaims_created",
            "NodeClaims created, by reason, NodePool and whether minValues was relaxed",
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
            "Pods the scheduling simulation under way still has to place",
            metrics.queue_depth.clone(),
        );
        registry.register(
            "karpenter_scheduler_unfinished_work_seconds",
            "Seconds the scheduling simulation under way has been running",
            metrics.unfinished_work.clone(),
        );
        registry.register(
            "karpenter_scheduler_ignored_pods_count",
            "Pending pods left out of the last scheduling simulation",
            metrics.ignored_pods.clone(),
        );
        registry.register(
            "karpenter_scheduler_unschedulable_pods_count",
            "Pods the last scheduling simulation could not place",
            metrics.unschedulable_pods.clone(),
        );
        registry.register(
            "karpenter_scheduler_pending_pods_by_effective_zone_count",
            "Pending pods by the zone their constraints leave them: a zone, flexible (several) or none",
            metrics.pending_by_zone.clone(),
        );
        metrics
    }

    /// Sets the pending pods by effective zone to `counts`, dropping the zones of the solve before.
    pub fn set_pending_by_zone(&self, counts: &std::collections::BTreeMap<String, usize>) {
        self.pending_by_zone.clear();
        for (zone, count) in counts {
            self.pending_by_zone
                .get_or_create(&ZoneLabels {
                    controller: PROVISIONER.to_owned(),
                    zone: zone.clone(),
                })
                .set(i64::try_from(*count).unwrap_or(i64::MAX));
        }
    }

    /// The label set of the provisioner's scheduler metrics.
    pub fn provisioner() -> ControllerLabels {
        ControllerLabels {
            controller: PROVISIONER.to_owned(),
        }
    }

    /// A new solve of the provisioner: the solve stores its batch size in [`Solve::queue`] when it knows it.
    pub fn solve(&self) -> Solve {
        let id = self.solves.fetch_add(1, Ordering::Relaxed) + 1;
        Solve {
            labels: SolveLabels {
                controller: PROVISIONER.to_owned(),
                scheduling_id: id.to_string(),
            },
            queue: Arc::default(),
        }
    }

    /// Awaits `solving`, the solve `solve` names, refreshing its queue depth and unfinished work every second
    /// as Karpenter's scheduler loop does; the previous solve's series are dropped first, and once done the
    /// queue reads 0 and the unfinished work is gone. Returns what `solving` returns.
    pub async fn track<F: Future>(&self, solve: &Solve, solving: F) -> F::Output {
        self.queue_depth.clear();
        // tokio's clock: a paused test clock moves it.
        let started = tokio::time::Instant::now();
        tokio::pin!(solving);
        let mut progress = tokio::time::interval(PROGRESS_EVERY);
        let output = loop {
            tokio::select! {
                output = &mut solving => break output,
                _ = progress.tick() => self.progress(solve, started.elapsed()),
            }
        };
        self.unfinished_work.remove(&solve.labels);
        self.queue_depth.get_or_create(&solve.labels).set(0);
        output
    }

    fn progress(&self, solve: &Solve, elapsed: Duration) {
        self.unfinished_work
            .get_or_create(&solve.labels)
            .set(elapsed.as_secs_f64());
        let queued = solve.queue.load(Ordering::Relaxed);
        self.queue_depth
            .get_or_create(&solve.labels)
            .set(i64::try_from(queued).unwrap_or(i64::MAX));
    }
}

/// One solve being tracked.
pub struct Solve {
    labels: SolveLabels,
    /// The pods of the batch; set from inside the solve.
    pub queue: Arc<AtomicUsize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_solve_reports_its_progress_then_an_empty_queue() {
        let mut registry = Registry::default();
        let metrics = Provisioning::register(&mut registry);
        let solve = metrics.solve();
        solve.queue.store(7, Ordering::Relaxed);
        let probe = || {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodable");
            text
        };
        let during = metrics
            .track(&solve, async {
                tokio::time::sleep(Duration::from_millis(2500)).await;
                probe()
            })
            .await;
        assert!(
            during.contains(
                r#"karpenter_scheduler_queue_depth{controller="provisioner",scheduling_id="1"} 7"#
            ),
            "{during}"
        );
        assert!(
            during.contains(r#"karpenter_scheduler_unfinished_work_seconds{controller="provisioner",scheduling_id="1"} 2.0"#),
            "{during}"
        );
        let after = probe();
        assert!(
            after.contains(
                r#"karpenter_scheduler_queue_depth{controller="provisioner",scheduling_id="1"} 0"#
            ),
            "{after}"
        );
        assert!(!after.contains("unfinished_work_seconds{"), "{after}");
    }
}
