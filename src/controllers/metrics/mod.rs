//! The controller's Prometheus registry: every metric Karpenter v1.14 documents under its name, label names
//! and buckets (docs/metrics.md lists them, with what feeds each), kerf's own `kerf_*` families, served as text
//! on `/metrics`.
//!
//! Counters and histograms are fed where things happen (each controller holds its family set); the gauges
//! Karpenter recomputes from its cluster state are recomputed by [`observer`] from the reflector stores, by
//! pure functions of a snapshot (`nodes`, `pods`, `pools`, `cost`, `offerings`, `conditions`). Cloud calls are
//! measured by the decorator in [`crate::cloud::metered`].

pub mod buckets;
pub mod conditions;
pub mod cost;
pub mod disruption;
#[cfg(test)]
mod documented;
pub mod gauge_set;
pub mod interruption;
pub mod nodeclaims;
pub mod nodes;
pub mod observer;
pub mod offerings;
pub mod pods;
pub mod pools;
pub mod resources;
pub mod scheduler;
pub mod summary;

use super::garbage::GarbageMetrics;
use crate::cloud::metered::CloudMetrics;
use conditions::ConditionMetrics;
use cost::CostMetrics;
use disruption::DisruptionMetrics;
use interruption::InterruptionMetrics;
use nodes::NodeMetrics;
use offerings::OfferingMetrics;
use pods::PodMetrics;
use pools::PoolMetrics;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::time::Instant;

pub use nodeclaims::{
    CodeLabels, DisruptedLabels, LaunchFailureLabels, LifecycleMetrics, NodePoolLabels,
    NodePoolZoneLabels, ReasonLabels, TerminatedLabels, TerminationMetrics, UnhealthyLabels,
};
pub use scheduler::{ControllerLabels, CreatedLabels, Provisioning};

/// Every metric the controllers publish. Each concern's families live in their own struct, registered in
/// [`Metrics::new`].
pub struct Metrics {
    pub registry: Registry,
    pub garbage: GarbageMetrics,
    pub interruption: InterruptionMetrics,
    pub provisioning: Provisioning,
    pub lifecycle: LifecycleMetrics,
    pub termination: TerminationMetrics,
    pub disruption: DisruptionMetrics,
    pub cloud: CloudMetrics,
    pub nodes: NodeMetrics,
    pub pods: PodMetrics,
    pub pools: PoolMetrics,
    pub cost: CostMetrics,
    pub offerings: OfferingMetrics,
    pub conditions: ConditionMetrics,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    goversion: &'static str,
    goarch: &'static str,
    commit: &'static str,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        register_build_info(&mut registry);
        Metrics {
            garbage: GarbageMetrics::register(&mut registry),
            interruption: InterruptionMetrics::register(&mut registry),
            provisioning: Provisioning::register(&mut registry),
            lifecycle: LifecycleMetrics::register(&mut registry),
            termination: TerminationMetrics::register(&mut registry),
            disruption: DisruptionMetrics::register(&mut registry),
            cloud: CloudMetrics::register(&mut registry),
            nodes: NodeMetrics::register(&mut registry),
            pods: PodMetrics::register(&mut registry),
            pools: PoolMetrics::register(&mut registry),
            cost: CostMetrics::register(&mut registry),
            offerings: OfferingMetrics::register(&mut registry),
            conditions: ConditionMetrics::register(&mut registry),
            registry,
        }
    }

    /// Every family as OpenMetrics text: the registry's, then the summaries prometheus-client cannot hold.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        use prometheus_client::encoding::text;
        let mut out = String::new();
        text::encode_registry(&mut out, &self.registry)?;
        let now = Instant::now();
        self.termination.node_duration.encode(&mut out, now)?;
        self.pods.startup.encode(&mut out, now)?;
        text::encode_eof(&mut out)?;
        Ok(out)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// `karpenter_build_info`, constant 1. kerf is not built with Go: `goversion` is empty, `goarch` is the
/// architecture in Go's words, `commit` what the build passed in `KERF_COMMIT`.
fn register_build_info(registry: &mut Registry) {
    let family: Family<BuildLabels, Gauge> = Family::default();
    let goarch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    family
        .get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION"),
            goversion: "",
            goarch,
            commit: option_env!("KERF_COMMIT").unwrap_or_default(),
        })
        .set(1);
    registry.register(
        "karpenter_build_info",
        "1, labelled with the version kerf was built from",
        family,
    );
}
