//! A gauge family that is replaced as a whole: the gauges Karpenter recomputes from its cluster state
//! (`metrics.Store.ReplaceAll`) are recomputed here from the reflector stores, and a series of an object that
//! is gone must disappear with it. Swapping the whole sample list at once also means a scrape never sees a
//! half-written set.

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use std::fmt;
use std::sync::{Arc, RwLock};

/// Label pairs whose names are only known at run time (the node labels follow the well-known label list).
pub type Labels = Vec<(String, String)>;

/// The samples of one gauge family.
pub type Samples = Vec<(Labels, f64)>;

/// Label pairs from `(name, value)` slices.
pub fn labels<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Labels {
    pairs
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// The current samples of one gauge family. Clones share them.
pub struct GaugeSet<L = Labels> {
    samples: Arc<RwLock<Vec<(L, f64)>>>,
}

impl<L> Clone for GaugeSet<L> {
    fn clone(&self) -> Self {
        GaugeSet {
            samples: Arc::clone(&self.samples),
        }
    }
}

impl<L> Default for GaugeSet<L> {
    fn default() -> Self {
        GaugeSet {
            samples: Arc::default(),
        }
    }
}

impl<L> fmt::Debug for GaugeSet<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GaugeSet").finish_non_exhaustive()
    }
}

impl<L> GaugeSet<L> {
    /// Replaces every sample: series not in `samples` are gone from the next scrape.
    pub fn replace(&self, samples: Vec<(L, f64)>) {
        *self
            .samples
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = samples;
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<(L, f64)>> {
        self.samples
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl<L> EncodeMetric for GaugeSet<L>
where
    L: EncodeLabelSet + Send + Sync,
{
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        for (labels, value) in self.read().iter() {
            encoder.encode_family(labels)?.encode_gauge(value)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }

    fn is_empty(&self) -> bool {
        self.read().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;

    #[test]
    fn a_replaced_set_drops_the_series_left_out() {
        let mut registry = Registry::default();
        let set: GaugeSet = GaugeSet::default();
        registry.register("g", "a gauge set", set.clone());
        set.replace(vec![
            (labels([("node", "a")]), 1.0),
            (labels([("node", "b")]), 2.5),
        ]);
        set.replace(vec![(labels([("node", "b")]), 3.0)]);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodable");
        assert!(text.contains("# TYPE g gauge"), "{text}");
        assert!(text.contains(r#"g{node="b"} 3.0"#), "{text}");
        assert!(!text.contains(r#"node="a""#), "{text}");

        // An empty set says nothing at all, as an empty family does.
        set.replace(Vec::new());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodable");
        assert_eq!(text, "# EOF\n");
    }
}
