//! The AWS provider's instance-type gauges (pkg/controllers/metrics/metrics.go and
//! pkg/providers/instancetype/metrics.go): each offering's price and availability, each type's vCPUs and
//! memory, from the catalogs kerf's solves use. And the provider's batcher histograms, fed by the AWS provider's
//! CreateFleet batcher through [`OfferingMetrics::observe_batch_window`] and [`OfferingMetrics::observe_batch`].

use super::buckets;
use super::gauge_set::GaugeSet;
use super::scheduler::HistogramFamily;
use crate::catalog::{Catalog, INSTANCE_CPU, INSTANCE_MEMORY};
use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BatcherLabels {
    pub batcher: String,
}

/// An offering's labels. A catalog has some 16,000 offerings and two families label each, so the strings are
/// shared: each type's name and each zone once, the capacity type a constant. Owned label vectors made these
/// gauges about 9 MB of the controller's heap.
#[derive(Clone, Debug, PartialEq)]
pub struct OfferingLabels {
    pub instance_type: Arc<str>,
    pub capacity_type: &'static str,
    pub zone: Arc<str>,
}

impl EncodeLabelSet for OfferingLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), fmt::Error> {
        [
            ("instance_type", &*self.instance_type),
            ("capacity_type", self.capacity_type),
            ("zone", &*self.zone),
        ]
        .encode(encoder)
    }
}

/// An instance type's label.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeLabels {
    pub instance_type: Arc<str>,
}

impl EncodeLabelSet for TypeLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), fmt::Error> {
        [("instance_type", &*self.instance_type)].encode(encoder)
    }
}

pub struct OfferingMetrics {
    pub price: GaugeSet<OfferingLabels>,
    pub available: GaugeSet<OfferingLabels>,
    pub cpu: GaugeSet<TypeLabels>,
    pub memory: GaugeSet<TypeLabels>,
    /// `karpenter_cloudprovider_batcher_batch_time_seconds`: how long each batching window was open.
    pub batch_time: HistogramFamily<BatcherLabels>,
    /// `karpenter_cloudprovider_batcher_batch_size`: requests per batched call.
    pub batch_size: HistogramFamily<BatcherLabels>,
}

impl OfferingMetrics {
    pub(super) fn register(registry: &mut Registry) -> OfferingMetrics {
        let metrics = OfferingMetrics {
            price: GaugeSet::default(),
            available: GaugeSet::default(),
            cpu: GaugeSet::default(),
            memory: GaugeSet::default(),
            batch_time: Family::new_with_constructor(buckets::duration),
            batch_size: Family::new_with_constructor(buckets::batch_size),
        };
        let offerings = [
            ("karpenter_cloudprovider_instance_type_offering_price_estimate", "USD per hour kerf prices each offering at, by instance type, capacity type and zone", &metrics.price),
            ("karpenter_cloudprovider_instance_type_offering_available", "1 when an offering may be launched, 0 while it is out of capacity, by instance type, capacity type and zone", &metrics.available),
        ];
        for (name, help, set) in offerings {
            registry.register(name, help, set.clone());
        }
        let types = [
            (
                "karpenter_cloudprovider_instance_type_cpu_cores",
                "vCPUs of each instance type",
                &metrics.cpu,
            ),
            (
                "karpenter_cloudprovider_instance_type_memory_bytes",
                "Memory of each instance type, in bytes",
                &metrics.memory,
            ),
        ];
        for (name, help, set) in types {
            registry.register(name, help, set.clone());
        }
        registry.register(
            "karpenter_cloudprovider_batcher_batch_time_seconds",
            "Seconds a batching window of cloud requests was held open, by batcher",
            metrics.batch_time.clone(),
        );
        registry.register(
            "karpenter_cloudprovider_batcher_batch_size",
            "Requests carried by one batched cloud call, by batcher",
            metrics.batch_size.clone(),
        );
        metrics
    }

    /// A window of `batcher` closed after being open `open_for`.
    pub fn observe_batch_window(&self, batcher: &str, open_for: Duration) {
        self.batch_time
            .get_or_create(&BatcherLabels {
                batcher: batcher.to_owned(),
            })
            .observe(open_for.as_secs_f64());
    }

    /// One call of `batcher` carried `requests` requests.
    pub fn observe_batch(&self, batcher: &str, requests: usize) {
        self.batch_size
            .get_or_create(&BatcherLabels {
                batcher: batcher.to_owned(),
            })
            .observe(requests as f64);
    }

    pub fn publish(&self, catalogs: &[Arc<Catalog>]) {
        let samples = offering_samples(catalogs);
        self.price.replace(samples.price);
        self.available.replace(samples.available);
        self.cpu.replace(samples.cpu);
        self.memory.replace(samples.memory);
    }
}

/// An offering by instance type, capacity type and zone.
type OfferingKey = (Arc<str>, &'static str, Arc<str>);

#[derive(Debug, Default, PartialEq)]
pub struct OfferingSamples {
    pub price: Vec<(OfferingLabels, f64)>,
    pub available: Vec<(OfferingLabels, f64)>,
    pub cpu: Vec<(TypeLabels, f64)>,
    pub memory: Vec<(TypeLabels, f64)>,
}

/// The samples of every type and offering of `catalogs` (one per EC2NodeClass): an offering several classes
/// list is available when any lists it available, and priced at the first known price.
pub fn offering_samples(catalogs: &[Arc<Catalog>]) -> OfferingSamples {
    // Each name and zone once, shared by every sample that labels with it.
    let mut names: BTreeMap<&str, Arc<str>> = BTreeMap::new();
    let mut zones: BTreeMap<&str, Arc<str>> = BTreeMap::new();
    // By (type, capacity type, zone): whether any class has it available, and its first known price.
    let mut offerings: BTreeMap<OfferingKey, (bool, Option<f64>)> = BTreeMap::new();
    let mut types: BTreeMap<Arc<str>, (Option<f64>, Option<f64>)> = BTreeMap::new();
    for instance_type in catalogs.iter().flat_map(|c| &c.instance_types) {
        let label =
            |key: &str| -> Option<f64> { instance_type.requirements.get(key)?.any()?.parse().ok() };
        // EC2's vCPUs and memory (MiB), as the AWS provider reports them: the capacity kerf schedules with has
        // the VM overhead taken off. A type without the labels (a user's catalog file) has no series.
        let memory_bytes = label(INSTANCE_MEMORY).map(|mib| mib * 1_048_576.0);
        let cpu = label(INSTANCE_CPU);
        let name = names
            .entry(instance_type.name.as_str())
            .or_insert_with(|| Arc::from(instance_type.name.as_str()))
            .clone();
        types.entry(name.clone()).or_insert((cpu, memory_bytes));
        for offering in &instance_type.offerings {
            let zone = zones
                .entry(offering.zone.as_str())
                .or_insert_with(|| Arc::from(offering.zone.as_str()))
                .clone();
            let key = (name.clone(), offering.capacity_type.as_str(), zone);
            let entry = offerings.entry(key).or_insert((false, None));
            entry.0 |= offering.available;
            entry.1 = entry.1.or(offering.price);
        }
    }
    let mut samples = OfferingSamples::default();
    for ((instance_type, capacity_type, zone), (available, price)) in offerings {
        let set = OfferingLabels {
            instance_type,
            capacity_type,
            zone,
        };
        if let Some(price) = price {
            samples.price.push((set.clone(), price));
        }
        samples
            .available
            .push((set, if available { 1.0 } else { 0.0 }));
    }
    for (instance_type, (cpu, memory)) in types {
        let set = TypeLabels { instance_type };
        if let Some(cpu) = cpu {
            samples.cpu.push((set.clone(), cpu));
        }
        if let Some(memory) = memory {
            samples.memory.push((set, memory));
        }
    }
    samples
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn catalog(available: bool) -> Arc<Catalog> {
        let file = json!({"instanceTypes": [{
            "name": "m5.large", "cpu": "2", "memory": "8Gi", "pods": 29,
            "labels": {"karpenter.k8s.aws/instance-cpu": "2", "karpenter.k8s.aws/instance-memory": "8192"},
            "offerings": [
                {"zone": "us-west-2a", "capacityType": "spot", "price": 0.04, "available": available},
                {"zone": "us-west-2b", "capacityType": "on-demand"}
            ]
        }]});
        Arc::new(Catalog::from_instance_types_json(&file.to_string()).expect("a catalog"))
    }

    #[test]
    fn offerings_are_priced_and_available_when_any_class_has_them() {
        let samples = offering_samples(&[catalog(false), catalog(true)]);
        let spot = OfferingLabels {
            instance_type: Arc::from("m5.large"),
            capacity_type: "spot",
            zone: Arc::from("us-west-2a"),
        };
        assert_eq!(samples.price, vec![(spot.clone(), 0.04)]);
        assert!(samples.available.contains(&(spot, 1.0)));
        assert_eq!(samples.available.len(), 2);
        let m5 = TypeLabels {
            instance_type: Arc::from("m5.large"),
        };
        assert_eq!(samples.cpu, vec![(m5.clone(), 2.0)]);
        assert_eq!(samples.memory, vec![(m5, 8192.0 * 1_048_576.0)]);
        // One copy of each string, whatever the number of samples labelled with it.
        assert!(Arc::ptr_eq(
            &samples.available[0].0.instance_type,
            &samples.available[1].0.instance_type
        ));
    }

    /// The families read as they did with owned label vectors.
    #[test]
    fn offerings_encode_with_karpenters_labels() {
        let mut registry = Registry::default();
        let metrics = OfferingMetrics::register(&mut registry);
        metrics.publish(&[catalog(true)]);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        for sample in [
            "karpenter_cloudprovider_instance_type_offering_price_estimate{instance_type=\"m5.large\",capacity_type=\"spot\",zone=\"us-west-2a\"} 0.04",
            "karpenter_cloudprovider_instance_type_offering_available{instance_type=\"m5.large\",capacity_type=\"on-demand\",zone=\"us-west-2b\"} 1.0",
            "karpenter_cloudprovider_instance_type_cpu_cores{instance_type=\"m5.large\"} 2.0",
        ] {
            assert!(text.contains(sample), "{sample} in {text}");
        }
    }

    #[test]
    fn batcher_observations_land_in_their_histograms() {
        let mut registry = Registry::default();
        let metrics = OfferingMetrics::register(&mut registry);
        metrics.observe_batch_window("create_fleet", Duration::from_millis(40));
        metrics.observe_batch("create_fleet", 5);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        for sample in [
            "karpenter_cloudprovider_batcher_batch_time_seconds_sum{batcher=\"create_fleet\"} 0.04",
            "karpenter_cloudprovider_batcher_batch_size_sum{batcher=\"create_fleet\"} 5.0",
        ] {
            assert!(text.contains(sample), "{sample} in {text}");
        }
    }
}
