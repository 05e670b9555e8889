//! Prometheus metrics of the admission endpoints.

use std::{collections::HashSet, time::Duration};

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
    /// Turned away for lack of budget (429 with Retry-After), before the body was read.
    Shed,
    /// Anything that is not a verdict: bad request, hook panic, timeout.
    Error,
}

impl RequestResult {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Denied => "denied",
            Self::Shed => "shed",
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

/// The `kind` label of a request whose kind has no hook: the kind comes from the request, and a label taking any
/// value a client sends would grow a new series per value, for ever.
pub(crate) const OTHER_KIND: &str = "other";

/// `kerf_webhook_requests_total`, `kerf_webhook_request_duration_seconds` and
/// `kerf_webhook_denials_total`.
pub(crate) struct Metrics {
    requests: Family<RequestLabels, Counter>,
    duration: HistogramFamily<DurationLabels>,
    denials: Family<KindLabels, Counter>,
    /// The kinds with a hook: the only `kind` label values besides `""` (unparsed) and [`OTHER_KIND`].
    known_kinds: HashSet<String>,
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
    pub(crate) fn register(registry: &mut Registry, known_kinds: HashSet<String>) -> Self {
        let metrics = Self {
            requests: Family::default(),
            // 1 ms to ~16 s: the apiserver gives a webhook at most 30 s.
            duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 15))
            }),
            denials: Family::default(),
            known_kinds,
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
        let kind = self.kind_label(observation.kind).to_owned();
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

    /// `kind` when it has a hook or is empty (the body was not a review), [`OTHER_KIND`] otherwise.
    fn kind_label<'a>(&self, kind: &'a str) -> &'a str {
        if kind.is_empty() || self.known_kinds.contains(kind) {
            kind
        } else {
            OTHER_KIND
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observe(metrics: &Metrics, kind: &str, result: RequestResult) {
        metrics.observe(Observation {
            path: "/validate",
            kind,
            operation: "CREATE",
            result,
            elapsed: Duration::from_millis(1),
        });
    }

    #[test]
    fn kinds_without_a_hook_share_one_series() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry, HashSet::from(["Widget".to_owned()]));
        for n in 0..1000 {
            observe(&metrics, &format!("Kind{n}"), RequestResult::Denied);
        }
        observe(&metrics, "Widget", RequestResult::Allowed);
        observe(&metrics, "", RequestResult::Error);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        let series = |name: &str| text.lines().filter(|l| l.starts_with(name)).count();
        assert_eq!(series("kerf_webhook_requests_total{"), 3, "{text}");
        assert_eq!(series("kerf_webhook_denials_total{"), 1, "{text}");
        assert!(
            text.contains(r#"kerf_webhook_denials_total{kind="other"} 1000"#),
            "{text}"
        );
        assert_eq!(
            series("kerf_webhook_request_duration_seconds_count{"),
            3,
            "{text}"
        );
    }
}
