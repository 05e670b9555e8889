//! Karpenter's interruption metrics, which the interruption controller counts: messages received and deleted,
//! their time in the queue, NodeClaims deleted for a message, and unhealthy instance status checks.

use crate::interruption::BatchReport;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Karpenter's interruption metrics (controller-behaviour.md §5).
#[derive(Clone)]
pub struct InterruptionMetrics {
    received: Family<MessageType, Counter>,
    deleted: Counter,
    queue_duration: Histogram,
    pub(crate) disrupted: Family<Disrupted, Counter>,
    /// `karpenter_interruption_instance_status_unhealthy_total{category}`: each instance running a claim and
    /// category EC2's status checks report unhealthy, once while it lasts.
    pub instance_status_unhealthy: Family<Category, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Category {
    pub category: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MessageType {
    message_type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Disrupted {
    pub reason: &'static str,
    pub nodepool: String,
}

impl InterruptionMetrics {
    pub fn register(registry: &mut Registry) -> InterruptionMetrics {
        let metrics = InterruptionMetrics {
            received: Family::default(),
            deleted: Counter::default(),
            queue_duration: super::buckets::duration(),
            disrupted: Family::default(),
            instance_status_unhealthy: Family::default(),
        };
        registry.register(
            "karpenter_interruption_received_messages",
            "Interruption messages received, by kind",
            metrics.received.clone(),
        );
        registry.register(
            "karpenter_interruption_deleted_messages",
            "Interruption messages deleted from the queue",
            metrics.deleted.clone(),
        );
        registry.register(
            "karpenter_interruption_message_queue_duration_seconds",
            "Time from an interruption event to kerf reading it",
            metrics.queue_duration.clone(),
        );
        registry.register(
            "karpenter_interruption_instance_status_unhealthy",
            "Unhealthy instance status checks found, by category (kerf does not poll instance status)",
            metrics.instance_status_unhealthy.clone(),
        );
        registry.register(
            "kerf_interruption_nodeclaims_deleted",
            "NodeClaims deleted because of an interruption message, by kind and NodePool",
            metrics.disrupted.clone(),
        );
        metrics
    }

    pub fn observe(&self, report: &BatchReport) {
        for (kind, count) in &report.received {
            self.received
                .get_or_create(&MessageType {
                    message_type: kind.as_str(),
                })
                .inc_by(u64::from(*count));
        }
        self.deleted.inc_by(u64::from(report.deleted));
        for latency in &report.queue_latencies {
            self.queue_duration.observe(latency.as_secs_f64());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interruption::Kind;

    #[test]
    fn batch_reports_become_karpenters_metrics() {
        let mut registry = Registry::default();
        let metrics = InterruptionMetrics::register(&mut registry);
        let mut report = BatchReport::default();
        report.received.insert(Kind::SpotInterrupted, 2);
        report.deleted = 2;
        report.queue_latencies = vec![std::time::Duration::from_millis(40)];
        metrics.observe(&report);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(
                "karpenter_interruption_received_messages_total{message_type=\"spot_interrupted\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains("karpenter_interruption_deleted_messages_total 2"),
            "{text}"
        );
        assert!(text.contains("karpenter_interruption_message_queue_duration_seconds_count 1"));
    }
}
