//! Prometheus metrics of the admission endpoints.

use std::time::Duration;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        histogram::{exponential_buckets, Histogram},
    },
    registry::{Registry, Unit},
};

/// How a request ended, as counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestResult {
    Allowed,
    Denied,
    /// Anything that is not a verdict: bad request, hook panic, timeout.
    Error,
}

impl RequestResult {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Denied => "denied",
            Self::Error => "error",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    path: &'static str,
    kind: String,
    operation: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DurationLabels {
    path: &'static str,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// `kerf_webhook_requests_total`, `kerf_webhook_request_duration_seconds` and
/// `kerf_webhook_denials_total`.
pub(crate) struct Metrics {
    requests: Family<RequestLabels, Counter>,
    duration: HistogramFamily<DurationLabels>,
    denials: Family<KindLabels, Counter>,
}

/// One admission request as metrics see it; `kind` and `operation` are empty when the body
/// could not be read as an AdmissionReview.
pub(crate) struct Observation<'a> {
    pub(crate) path: &'static str,
    pub(crate) kind: &'a str,
    pub(crate) operation: &'static str,
    pub(crate) result: RequestResult,
    pub(crate) elapsed: Duration,
}

impl Metrics {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            requests: Family::default(),
            // 1 ms to ~16 s: the apiserver gives a webhook at most 30 s.
            duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 15))
            }),
            denials: Family::default(),
        };
        let registry = registry.sub_registry_with_prefix("kerf_webhook");
        registry.register(
            "requests",
            "Admission requests by path, kind, operation and result",
            metrics.requests.clone(),
        );
        registry.register_with_unit(
            "request_duration",
            "Time to answer an admission request",
            Unit::Seconds,
            metrics.duration.clone(),
        );
        registry.register(
            "denials",
            "Admission requests denied, by kind",
            metrics.denials.clone(),
        );
        metrics
    }

    pub(crate) fn observe(&self, observation: Observation<'_>) {
        let kind = observation.kind.to_owned();
        self.requests
            .get_or_create(&RequestLabels {
                path: observation.path,
                kind: kind.clone(),
                operation: observation.operation,
                result: observation.result.label(),
            })
            .inc();
        self.duration
            .get_or_create(&DurationLabels {
                path: observation.path,
                kind: kind.clone(),
            })
            .observe(observation.elapsed.as_secs_f64());
        if observation.result == RequestResult::Denied {
            self.denials.get_or_create(&KindLabels { kind }).inc();
        }
    }
}
