//! The controller's Prometheus registry: one family set per controller, registered here under Karpenter's
//! metric names (reference §6.1) and served as text on `/metrics`.

use prometheus_client::registry::Registry;

/// Every metric the controllers count. Each controller's families live in its own struct, registered in
/// [`Metrics::new`].
pub struct Metrics {
    pub registry: Registry,
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::default();
        Metrics { registry }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
