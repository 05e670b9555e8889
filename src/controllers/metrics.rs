//! The controller's Prometheus registry: one family set per controller, registered here under Karpenter's
//! metric names (reference §6.1) and served as text on `/metrics`.

use super::garbage::GarbageMetrics;
use prometheus_client::registry::Registry;

/// Every metric the controllers count. Each controller's families live in its own struct, registered in
/// [`Metrics::new`].
pub struct Metrics {
    pub registry: Registry,
    pub garbage: GarbageMetrics,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        Metrics {
            garbage: GarbageMetrics::register(&mut registry),
            registry,
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
