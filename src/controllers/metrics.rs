//! The controller's Prometheus registry: one family set per controller, registered here under Karpenter's
//! metric names (reference §6.1) and served as text on `/metrics`.

use super::garbage::GarbageMetrics;
use super::interruption::InterruptionMetrics;
use prometheus_client::registry::Registry;

/// Every metric the controllers count. Each controller's families live in its own struct, registered in
/// [`Metrics::new`].
pub struct Metrics {
    pub registry: Registry,
    pub garbage: GarbageMetrics,
    pub interruption: InterruptionMetrics,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        Metrics {
            garbage: GarbageMetrics::register(&mut registry),
            interruption: InterruptionMetrics::register(&mut registry),
            registry,
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
