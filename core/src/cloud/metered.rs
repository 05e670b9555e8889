//! A [`CloudProvider`] that times and counts every call of the one it wraps, as Karpenter's
//! `cloudprovider/metrics` decorator does (pkg/cloudprovider/metrics/cloudprovider.go): a duration histogram
//! and an error counter by controller, method and provider. It also counts what the AWS provider counts at its
//! edge (pkg/providers/instance/metrics.go): each offering a launch found without capacity, and each failed
//! termination.
//!
//! The `controller` label is the name the calling task runs [`within`]; Karpenter passes it in the context.

use super::error::CloudError;
use super::ice::OfferingKey;
use super::instance::Instance;
use super::launch::LaunchRequest;
use super::node_class::NodeClass;
use super::CloudProvider;
use crate::api::ec2nodeclass::EC2NodeClassSpec;
use crate::catalog::InstanceType;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::future::Future;
use std::time::{Instant, SystemTime};

/// client_golang's `prometheus.DefBuckets`, which Karpenter's call histogram uses (it declares none).
pub const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

tokio::task_local! {
    static CONTROLLER: &'static str;
}

/// Runs `work` as controller `name`: the cloud calls it makes are labelled with it.
pub async fn within<F: Future>(name: &'static str, work: F) -> F::Output {
    CONTROLLER.scope(name, work).await
}

/// `work` as the controller the current task runs as, for a task this one spawns: a task-local does not cross
/// `tokio::spawn`, and kube-runtime's `Controller` spawns each reconcile.
pub fn carried<F: Future>(work: F) -> impl Future<Output = F::Output> {
    CONTROLLER.scope(controller(), work)
}

/// The controller the current task runs as; empty outside [`within`].
fn controller() -> &'static str {
    CONTROLLER.try_with(|name| *name).unwrap_or_default()
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub controller: String,
    pub method: String,
    pub provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: String,
    pub method: String,
    pub provider: String,
    /// Karpenter's error type names, or empty for any other error.
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LaunchFailureLabels {
    pub zone: String,
    pub zone_id: String,
    pub capacity_type: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ZoneLabels {
    pub zone: String,
    pub zone_id: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn default_histogram() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}

/// The decorator's families. Clones share them.
#[derive(Clone)]
pub struct CloudMetrics {
    /// `karpenter_cloudprovider_duration_seconds`.
    pub duration: HistogramFamily<CallLabels>,
    /// `karpenter_cloudprovider_errors_total`.
    pub errors: Family<ErrorLabels, Counter>,
    /// `karpenter_cloudprovider_instance_launch_failures_total`: one per offering a launch found without
    /// capacity.
    pub launch_failures: Family<LaunchFailureLabels, Counter>,
    /// `karpenter_cloudprovider_instance_termination_failures_total`.
    pub termination_failures: Family<ZoneLabels, Counter>,
}

impl CloudMetrics {
    pub fn register(registry: &mut Registry) -> CloudMetrics {
        let metrics = CloudMetrics {
            duration: Family::new_with_constructor(default_histogram),
            errors: Family::default(),
            launch_failures: Family::default(),
            termination_failures: Family::default(),
        };
        registry.register(
            "karpenter_cloudprovider_duration_seconds",
            "Seconds each cloud provider call took, by controller, method and provider",
            metrics.duration.clone(),
        );
        registry.register(
            "karpenter_cloudprovider_errors",
            "Cloud provider calls that failed, by controller, method, provider and error type",
            metrics.errors.clone(),
        );
        registry.register(
            "karpenter_cloudprovider_instance_launch_failures",
            "Offerings a launch found without capacity, by zone, zone ID, capacity type and reason",
            metrics.launch_failures.clone(),
        );
        registry.register(
            "karpenter_cloudprovider_instance_termination_failures",
            "Instance terminations that failed, by zone and zone ID",
            metrics.termination_failures.clone(),
        );
        metrics
    }
}

/// Karpenter's `error` label for a cloud error: its three typed errors by name, anything else empty.
pub fn error_type(error: &CloudError) -> &'static str {
    match error {
        CloudError::InsufficientCapacity { .. } => "InsufficientCapacityError",
        CloudError::NotFound { .. } => "NodeClaimNotFoundError",
        CloudError::NodeClassNotReady { .. } => "NodeClassNotReadyError",
        CloudError::InvalidRequest(_)
        | CloudError::Api { .. }
        | CloudError::ZonallyShifted { .. }
        | CloudError::Timeout { .. } => "",
    }
}

/// `inner`, measured into `metrics` under the provider name `provider`.
pub struct Metered<C> {
    inner: C,
    metrics: CloudMetrics,
    provider: &'static str,
}

impl<C> Metered<C> {
    pub fn new(inner: C, metrics: CloudMetrics, provider: &'static str) -> Self {
        Metered {
            inner,
            metrics,
            provider,
        }
    }

    /// Awaits `call` (method `method`) and records its duration and, if it failed, its error.
    async fn measure<T>(
        &self,
        method: &'static str,
        call: impl Future<Output = Result<T, CloudError>>,
    ) -> Result<T, CloudError> {
        let started = Instant::now();
        let result = call.await;
        let controller = controller().to_owned();
        self.metrics
            .duration
            .get_or_create(&CallLabels {
                controller: controller.clone(),
                method: method.to_owned(),
                provider: self.provider.to_owned(),
            })
            .observe(started.elapsed().as_secs_f64());
        if let Err(error) = &result {
            self.metrics
                .errors
                .get_or_create(&ErrorLabels {
                    controller,
                    method: method.to_owned(),
                    provider: self.provider.to_owned(),
                    error: error_type(error).to_owned(),
                })
                .inc();
        }
        result
    }

    /// One launch failure per offering `offerings` names, with the zone ID the request's offering carries.
    fn count_launch_failures(&self, request: &LaunchRequest<'_>, error: &CloudError) {
        let CloudError::InsufficientCapacity { offerings } = error else {
            return;
        };
        for key in offerings {
            self.metrics
                .launch_failures
                .get_or_create(&LaunchFailureLabels {
                    zone: key.zone.clone(),
                    zone_id: zone_id(request, key).unwrap_or_default(),
                    capacity_type: key.capacity_type.to_string(),
                    reason: error.metric_label().to_owned(),
                })
                .inc();
        }
    }
}

/// The zone ID of the offering `key` among the request's instance types, when known.
fn zone_id(request: &LaunchRequest<'_>, key: &OfferingKey) -> Option<String> {
    request
        .instance_types
        .iter()
        .filter(|it| it.name == key.instance_type)
        .flat_map(|it| &it.offerings)
        .find(|o| o.zone == key.zone && o.capacity_type == key.capacity_type)
        .and_then(|o| o.zone_id.clone())
}

impl<C: CloudProvider> CloudProvider for Metered<C> {
    async fn resolve_node_class(
        &self,
        name: &str,
        spec: &EC2NodeClassSpec,
    ) -> Result<NodeClass, CloudError> {
        self.measure(
            "ResolveNodeClass",
            self.inner.resolve_node_class(name, spec),
        )
        .await
    }

    async fn instance_types(
        &self,
        node_class: &NodeClass,
        now: SystemTime,
    ) -> Result<Vec<InstanceType>, CloudError> {
        self.measure(
            "GetInstanceTypes",
            self.inner.instance_types(node_class, now),
        )
        .await
    }

    async fn create(
        &self,
        request: &LaunchRequest<'_>,
        now: SystemTime,
    ) -> Result<Instance, CloudError> {
        let result = self
            .measure("Create", self.inner.create(request, now))
            .await;
        if let Err(error) = &result {
            self.count_launch_failures(request, error);
        }
        result
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        self.measure("Get", self.inner.get(provider_id)).await
    }

    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        self.measure("List", self.inner.list()).await
    }

    async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
        let result = self.measure("Delete", self.inner.delete(provider_id)).await;
        if let Err(error) = &result {
            // Gone is done, and a zonal shift's refusal is deliberate (Karpenter counts neither).
            if !matches!(
                error,
                CloudError::NotFound { .. } | CloudError::ZonallyShifted { .. }
            ) {
                self.metrics
                    .termination_failures
                    .get_or_create(&ZoneLabels {
                        zone: super::zone_of(provider_id).unwrap_or_default().to_owned(),
                        zone_id: String::new(),
                    })
                    .inc();
            }
        }
        result
    }

    fn mark_unavailable(&self, key: OfferingKey, now: SystemTime) {
        self.inner.mark_unavailable(key, now);
    }

    async fn check_launch(
        &self,
        request: &LaunchRequest<'_>,
        now: SystemTime,
    ) -> Result<Option<super::LaunchRefusal>, CloudError> {
        self.measure("CheckLaunch", self.inner.check_launch(request, now))
            .await
    }

    async fn delete_node_class(
        &self,
        name: &str,
        spec: &EC2NodeClassSpec,
    ) -> Result<(), CloudError> {
        self.measure("DeleteNodeClass", self.inner.delete_node_class(name, spec))
            .await
    }

    async fn collect_garbage(&self, now: SystemTime) -> Result<usize, CloudError> {
        self.measure("CollectGarbage", self.inner.collect_garbage(now))
            .await
    }

    async fn instance_health(&self) -> Result<Vec<super::InstanceHealth>, CloudError> {
        self.measure("InstanceHealth", self.inner.instance_health())
            .await
    }

    /// Not one of Karpenter's cloud provider methods, so not under its method metrics.
    async fn zonal_shifts(
        &self,
        now: SystemTime,
    ) -> Result<std::collections::BTreeSet<String>, CloudError> {
        self.inner.zonal_shifts(now).await
    }
}

#[cfg(test)]
mod tests {
    use super::super::sim::{Operation, SimCloud};
    use super::*;

    fn text(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).expect("encodable");
        text
    }

    #[tokio::test]
    async fn calls_are_timed_and_errors_named_by_karpenters_types() {
        let mut registry = Registry::default();
        let metrics = CloudMetrics::register(&mut registry);
        let sim = SimCloud::new("test", Vec::new());
        sim.inject_api_error(
            Operation::Delete,
            CloudError::Api {
                operation: "TerminateInstances",
                code: "Unavailable".into(),
                message: "try again".into(),
            },
            1,
        );
        let cloud = Metered::new(sim, metrics, "aws");
        within("nodeclaim.garbagecollection", async {
            assert_eq!(cloud.list().await, Ok(Vec::new()));
            assert!(matches!(
                cloud.get("aws:///us-west-2a/i-0123").await,
                Err(CloudError::NotFound { .. })
            ));
            assert!(matches!(
                cloud.delete("aws:///us-west-2a/i-0123").await,
                Err(CloudError::Api { .. })
            ));
        })
        .await;
        // Outside any controller the label is empty.
        let _ = cloud.get("aws:///us-west-2b/i-0456").await;
        let text = text(&registry);
        for expected in [
            r#"karpenter_cloudprovider_duration_seconds_count{controller="nodeclaim.garbagecollection",method="List",provider="aws"} 1"#,
            r#"karpenter_cloudprovider_duration_seconds_bucket{le="10.0",controller="nodeclaim.garbagecollection",method="Get",provider="aws"} 1"#,
            r#"karpenter_cloudprovider_errors_total{controller="nodeclaim.garbagecollection",method="Get",provider="aws",error="NodeClaimNotFoundError"} 1"#,
            r#"karpenter_cloudprovider_errors_total{controller="nodeclaim.garbagecollection",method="Delete",provider="aws",error=""} 1"#,
            r#"karpenter_cloudprovider_errors_total{controller="",method="Get",provider="aws",error="NodeClaimNotFoundError"} 1"#,
            r#"karpenter_cloudprovider_instance_termination_failures_total{zone="us-west-2a",zone_id=""} 1"#,
        ] {
            assert!(text.contains(expected), "{expected} missing from\n{text}");
        }
        assert!(
            !text
                .contains(r#"errors_total{controller="nodeclaim.garbagecollection",method="List""#),
            "{text}"
        );
    }

    /// Karpenter's provider suite: a termination skipped in a zonally shifted zone is not a termination failure.
    /// kube-runtime's `Controller` spawns each reconcile; the cloud calls made there are still the controller's.
    #[tokio::test]
    async fn the_controller_name_crosses_a_spawn_only_when_carried() {
        let (carried_name, bare_name) = within("nodeclaim.lifecycle", async {
            let carried_name = tokio::spawn(carried(async { controller() })).await;
            let bare_name = tokio::spawn(async { controller() }).await;
            (carried_name, bare_name)
        })
        .await;
        assert_eq!(carried_name.expect("joined"), "nodeclaim.lifecycle");
        assert_eq!(bare_name.expect("joined"), "");
    }

    #[tokio::test]
    async fn a_zonal_shift_refusal_is_not_a_termination_failure() {
        let mut registry = Registry::default();
        let metrics = CloudMetrics::register(&mut registry);
        let sim = SimCloud::new("test", Vec::new());
        sim.inject_api_error(
            Operation::Delete,
            CloudError::ZonallyShifted {
                instance_id: "i-0123".into(),
                zone: "us-west-2a".into(),
                zone_id: "usw2-az1".into(),
            },
            1,
        );
        let cloud = Metered::new(sim, metrics, "aws");
        assert!(matches!(
            cloud.delete("aws:///us-west-2a/i-0123").await,
            Err(CloudError::ZonallyShifted { .. })
        ));
        let text = text(&registry);
        assert!(
            !text.contains("karpenter_cloudprovider_instance_termination_failures_total{"),
            "{text}"
        );
    }
}
