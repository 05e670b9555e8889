//! Histogram buckets, exactly as Karpenter declares them: a dashboard's `histogram_quantile` and an alert on
//! `le="…"` only keep working when every bound is the same.

use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

/// Karpenter's `metrics.DurationBuckets()` (pkg/metrics/constants.go): controller-runtime's reconcile bounds
/// with longer ones appended for loops that have no timeout.
pub const DURATION: [f64; 45] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0, 120.0, 150.0, 300.0, 450.0, 600.0,
];

/// client_golang's `prometheus.DefBuckets`: what a histogram declared without buckets gets (the EC2NodeClass
/// and deprecated `operator_*` histograms, and the cloud decorator's, which owns the constant).
pub use crate::cloud::metered::DEFAULT_BUCKETS as DEFAULT;

/// `karpenter_nodes_lifetime_duration_seconds` (pkg/controllers/node/termination/metrics.go): 15 minutes to
/// 30 days.
pub const NODE_LIFETIME: [f64; 21] = [
    900.0,
    1_800.0,
    2_700.0,
    3_600.0,
    7_200.0,
    14_400.0,
    21_600.0,
    28_800.0,
    36_000.0,
    43_200.0,
    57_600.0,
    72_000.0,
    86_400.0,
    172_800.0,
    259_200.0,
    432_000.0,
    864_000.0,
    1_296_000.0,
    1_728_000.0,
    2_160_000.0,
    2_592_000.0,
];

/// `karpenter_consolidation_score` (pkg/controllers/disruption/metrics.go).
pub const CONSOLIDATION_SCORE: [f64; 8] = [0.1, 0.25, 0.33, 0.5, 1.0, 2.0, 5.0, 10.0];

/// The AWS provider's batcher `SizeBuckets()` (pkg/batcher/metrics.go).
pub const BATCH_SIZE: [f64; 34] = [
    1.0, 2.0, 4.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0,
    125.0, 150.0, 175.0, 200.0, 225.0, 250.0, 275.0, 300.0, 350.0, 400.0, 450.0, 500.0, 550.0,
    600.0, 700.0, 800.0, 900.0, 1000.0,
];

pub fn duration() -> Histogram {
    Histogram::new(DURATION)
}

pub fn default() -> Histogram {
    Histogram::new(DEFAULT)
}

pub fn node_lifetime() -> Histogram {
    Histogram::new(NODE_LIFETIME)
}

pub fn consolidation_score() -> Histogram {
    Histogram::new(CONSOLIDATION_SCORE)
}

pub fn batch_size() -> Histogram {
    Histogram::new(BATCH_SIZE)
}

/// `prometheus.ExponentialBuckets(0.5, 2, 15)`: 0.5 s to 8192 s, what Karpenter gives the status-condition and
/// termination histograms of NodeClaims, NodePools and Nodes (pkg/controllers/controllers.go).
pub fn condition() -> Histogram {
    Histogram::new(exponential_buckets(0.5, 2.0, 15))
}

/// `prometheus.ExponentialBuckets(1, 2, 12)`: `karpenter_nodeclaims_termination_duration_seconds`.
pub fn nodeclaim_termination() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 12))
}

/// `prometheus.ExponentialBuckets(1, 2, 11)`: `karpenter_nodeclaims_instance_termination_duration_seconds`.
pub fn instance_termination() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 11))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_duration_buckets_are_karpenters_and_sorted() {
        assert_eq!(DURATION.len(), 45);
        assert!(DURATION.windows(2).all(|w| w[0] < w[1]));
        assert_eq!((DURATION[0], DURATION[44]), (0.005, 600.0));
        assert!(NODE_LIFETIME.windows(2).all(|w| w[0] < w[1]));
        assert!(BATCH_SIZE.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(NODE_LIFETIME[20], 30.0 * 86_400.0);
    }
}
