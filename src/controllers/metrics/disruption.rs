//! The disruption controller's families (Karpenter's pkg/controllers/disruption/metrics.go; the
//! disrupted-claims counter is the lifecycle controller's, shared: a name is registered once). The budget
//! gauges are computed from each pass's snapshot by [`budget_samples`].

use super::buckets;
use super::gauge_set::{labels, GaugeSet, Samples};
use crate::api::nodepool::{ConsolidationPolicy, NodePool};
use crate::disruption::{Budgets, Method, PassObserver, PoolCounts, REASONS};
use k8s_openapi::jiff::Timestamp;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::time::Instant;

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `delete` or `replace`.
    pub decision: String,
    /// The reason, lower case (`empty`, `drifted`, `underutilized`, `expired`).
    pub reason: String,
    /// `empty`, `single`, `multi`, or empty when the method is no consolidation.
    pub consolidation_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodePoolDecisionLabels {
    pub nodepool: String,
    pub decision: String,
    pub reason: String,
    pub consolidation_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvaluationLabels {
    pub reason: String,
    pub consolidation_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConsolidationTypeLabels {
    pub consolidation_type: String,
}

/// The labels of the consolidation move metrics: the decision, the pool and its consolidation policy.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BalancedLabels {
    pub decision: String,
    pub nodepool: String,
    pub policy: String,
}

pub struct DisruptionMetrics {
    /// `karpenter_voluntary_disruption_decisions_total{decision,reason,consolidation_type}`.
    pub decisions: Family<DecisionLabels, Counter>,
    /// `karpenter_voluntary_disruption_decisions_by_nodepool_total`: one per pool of the command's candidates.
    pub decisions_by_nodepool: Family<NodePoolDecisionLabels, Counter>,
    /// `karpenter_voluntary_disruption_decision_evaluation_duration_seconds{reason,consolidation_type}`.
    pub evaluation: HistogramFamily<EvaluationLabels>,
    /// `karpenter_voluntary_disruption_eligible_nodes{reason}`.
    pub eligible: Family<ReasonLabels, Gauge>,
    /// `karpenter_voluntary_disruption_consolidation_timeouts_total{consolidation_type}`: kerf's consolidation
    /// has no timeout, so it stays at the 0 Karpenter starts it at.
    pub timeouts: Family<ConsolidationTypeLabels, Counter>,
    /// `karpenter_voluntary_disruption_failed_validations_total{consolidation_type}`: candidates of commands
    /// dropped by the re-check after the validation delay.
    pub failed_validations: Family<ConsolidationTypeLabels, Counter>,
    /// `karpenter_voluntary_disruption_queue_failures_total{decision,reason,consolidation_type}`: commands
    /// abandoned while being carried out.
    pub queue_failures: Family<DecisionLabels, Counter>,
    /// `karpenter_nodepools_allowed_disruptions{nodepool,reason}`.
    pub allowed: GaugeSet,
    /// `karpenter_nodepools_nodes_consuming_budgets{nodepool,reason}`.
    pub consuming: GaugeSet,
    /// `karpenter_consolidation_score`: the per-pool scores of moves in `Balanced` pools.
    pub score: HistogramFamily<BalancedLabels>,
    /// `karpenter_consolidation_moves_total`: every consolidation move judged, per pool.
    pub moves: Family<BalancedLabels, Counter>,
}

impl DisruptionMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = DisruptionMetrics {
            decisions: Family::default(),
            decisions_by_nodepool: Family::default(),
            evaluation: Family::new_with_constructor(buckets::duration),
            eligible: Family::default(),
            timeouts: Family::default(),
            failed_validations: Family::default(),
            queue_failures: Family::default(),
            allowed: GaugeSet::default(),
            consuming: GaugeSet::default(),
            score: Family::new_with_constructor(buckets::consolidation_score),
            moves: Family::default(),
        };
        // Karpenter starts both at 0 so that a rate over them exists from the start.
        for consolidation_type in ["multi", "single"] {
            metrics
                .timeouts
                .get_or_create(&ConsolidationTypeLabels {
                    consolidation_type: consolidation_type.to_owned(),
                })
                .inc_by(0);
        }
        registry.register(
            "karpenter_voluntary_disruption_decisions",
            "Disruption commands carried out, by decision, reason and consolidation type",
            metrics.decisions.clone(),
        );
        registry.register(
            "karpenter_voluntary_disruption_decisions_by_nodepool",
            "Disruption commands carried out, by NodePool of their candidates, decision, reason and consolidation type",
            metrics.decisions_by_nodepool.clone(),
        );
        registry.register(
            "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
            "Seconds one disruption method took to decide, by reason and consolidation type",
            metrics.evaluation.clone(),
        );
        registry.register(
            "karpenter_voluntary_disruption_eligible_nodes",
            "Nodes the last run of a disruption method could take before budgets, by reason",
            metrics.eligible.clone(),
        );
        registry.register(
            "karpenter_voluntary_disruption_consolidation_timeouts",
            "Consolidations stopped by their time limit (kerf's have none)",
            metrics.timeouts.clone(),
        );
        registry.register(
            "karpenter_voluntary_disruption_failed_validations",
            "Candidates of disruption commands that no longer held when re-checked, by consolidation type",
            metrics.failed_validations.clone(),
        );
        registry.register(
            "karpenter_voluntary_disruption_queue_failures",
            "Disruption commands abandoned while being carried out",
            metrics.queue_failures.clone(),
        );
        registry.register(
            "karpenter_nodepools_allowed_disruptions",
            "Nodes a NodePool's budgets allow disrupting at once now, by reason (2147483647: no budget applies)",
            metrics.allowed.clone(),
        );
        registry.register(
            "karpenter_nodepools_nodes_consuming_budgets",
            "Nodes of a NodePool being disrupted or not ready, which use up its budgets, by reason",
            metrics.consuming.clone(),
        );
        registry.register(
            "karpenter_consolidation_score",
            "Scores of consolidation moves in Balanced NodePools, per pool",
            metrics.score.clone(),
        );
        registry.register(
            "karpenter_consolidation_moves",
            "Consolidation moves judged, per NodePool, by decision and consolidation policy",
            metrics.moves.clone(),
        );
        metrics
    }

    /// Times the methods of one pass: [`PassObserver`] for [`crate::disruption::decide_observed`].
    pub fn observer(&self) -> MethodTimer<'_> {
        MethodTimer {
            metrics: self,
            started: None,
        }
    }

    /// Counts the consolidation moves a pass judged (`karpenter_consolidation_moves_total`) and observes the
    /// scores of their `Balanced` pools (`karpenter_consolidation_score`), labelled as Karpenter labels them.
    pub fn count_moves(&self, moves: &[crate::disruption::ConsolidationMove]) {
        let decision = |approved: bool| if approved { "approved" } else { "rejected" };
        for judged in moves {
            let policy = match judged.policy {
                ConsolidationPolicy::WhenEmpty => "WhenEmpty",
                ConsolidationPolicy::WhenEmptyOrUnderutilized => "WhenEmptyOrUnderutilized",
                ConsolidationPolicy::Balanced => "Balanced",
            };
            let labels = |approved: bool| BalancedLabels {
                decision: decision(approved).to_owned(),
                nodepool: judged.nodepool.clone(),
                policy: policy.to_owned(),
            };
            self.moves
                .get_or_create(&labels(judged.move_approved))
                .inc();
            if let Some(score) = &judged.score {
                self.score
                    .get_or_create(&labels(score.passed))
                    .observe(score.value);
            }
        }
    }

    /// Publishes the budget gauges of one pass.
    pub fn publish_budgets(&self, (allowed, consuming): (Samples, Samples)) {
        self.allowed.replace(allowed);
        self.consuming.replace(consuming);
    }
}

/// The labels Karpenter's disruption metrics give a method: its reason in lower case and consolidation type.
pub fn method_labels(method: Method) -> (String, &'static str) {
    let consolidation_type = match method {
        Method::Emptiness => "empty",
        Method::MultiNodeConsolidation => "multi",
        Method::SingleNodeConsolidation => "single",
        Method::Expiration | Method::Drift => "",
    };
    (
        method.reason().to_string().to_lowercase(),
        consolidation_type,
    )
}

/// Observes each method's duration and eligible nodes.
pub struct MethodTimer<'a> {
    metrics: &'a DisruptionMetrics,
    started: Option<Instant>,
}

impl PassObserver for MethodTimer<'_> {
    fn started(&mut self, _method: Method) {
        self.started = Some(Instant::now());
    }

    fn finished(&mut self, method: Method, eligible: usize) {
        let (reason, consolidation_type) = method_labels(method);
        if let Some(started) = self.started.take() {
            self.metrics
                .evaluation
                .get_or_create(&EvaluationLabels {
                    reason: reason.clone(),
                    consolidation_type: consolidation_type.to_owned(),
                })
                .observe(started.elapsed().as_secs_f64());
        }
        self.metrics
            .eligible
            .get_or_create(&ReasonLabels { reason })
            .set(i64::try_from(eligible).unwrap_or(i64::MAX));
    }
}

/// `karpenter_nodepools_allowed_disruptions` and `…_nodes_consuming_budgets` of every pool at `now`, for each
/// budget reason (Karpenter labels these two with the reason as the API spells it: `Empty`, `Drifted`,
/// `Underutilized`), given each pool's node counts.
pub fn budget_samples(
    pools: &[NodePool],
    counts: &BTreeMap<String, PoolCounts>,
    now: Timestamp,
) -> (Samples, Samples) {
    let mut allowed = Vec::new();
    let mut consuming = Vec::new();
    for pool in pools {
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        let budgets = Budgets::of(pool);
        let pool_counts = counts.get(name).copied().unwrap_or_default();
        for reason in REASONS {
            let allowance = budgets.evaluate(reason, pool_counts, now);
            let reason = format!("{reason:?}");
            let set = labels([("nodepool", name), ("reason", reason.as_str())]);
            allowed.push((set.clone(), allowance.allowed.metric_value() as f64));
            consuming.push((set, allowance.disrupting as f64));
        }
    }
    (allowed, consuming)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn budgets_give_each_pool_and_reason_its_allowance() {
        let pool = kerf_testkit::nodepool(
            "p",
            json!({"disruption": {"budgets": [
                {"nodes": "50%"},
                {"nodes": "0", "reasons": ["Drifted"]},
            ]}}),
        );
        let name = pool.metadata.name.clone().unwrap_or_default();
        let counts = [(
            name.clone(),
            PoolCounts {
                total: 4,
                disrupting: 1,
            },
        )]
        .into();
        let (allowed, consuming) = budget_samples(
            &[pool],
            &counts,
            "2026-11-23T10:00:00Z".parse().expect("now"),
        );
        let of = |reason: &str| labels([("nodepool", name.as_str()), ("reason", reason)]);
        assert_eq!(
            allowed,
            vec![
                (of("Empty"), 2.0),
                (of("Drifted"), 0.0),
                (of("Underutilized"), 2.0)
            ]
        );
        assert!(consuming.iter().all(|(_, n)| *n == 1.0));
    }

    #[test]
    fn a_timed_pass_observes_each_method_that_ran() {
        let mut registry = Registry::default();
        let metrics = DisruptionMetrics::register(&mut registry);
        let mut timer = metrics.observer();
        timer.started(Method::Emptiness);
        timer.finished(Method::Emptiness, 3);
        timer.started(Method::SingleNodeConsolidation);
        timer.finished(Method::SingleNodeConsolidation, 5);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodable");
        for expected in [
            r#"karpenter_voluntary_disruption_eligible_nodes{reason="empty"} 3"#,
            r#"karpenter_voluntary_disruption_eligible_nodes{reason="underutilized"} 5"#,
            r#"karpenter_voluntary_disruption_decision_evaluation_duration_seconds_count{reason="underutilized",consolidation_type="single"} 1"#,
            r#"karpenter_voluntary_disruption_consolidation_timeouts_total{consolidation_type="multi"} 0"#,
        ] {
            assert!(text.contains(expected), "{expected} missing from\n{text}");
        }
    }

    /// Karpenter's `balancedEvaluator`: every judged move counts with the move's decision; a Balanced pool's
    /// score is observed with the pool's own decision.
    #[test]
    fn judged_moves_are_counted_and_balanced_scores_observed() {
        let mut registry = Registry::default();
        let metrics = DisruptionMetrics::register(&mut registry);
        let judged = |nodepool: &str, policy, move_approved, score: Option<(f64, bool)>| {
            crate::disruption::ConsolidationMove {
                nodepool: nodepool.to_owned(),
                policy,
                move_approved,
                score: score.map(|(value, passed)| crate::disruption::MoveScore {
                    value,
                    passed,
                    threshold: 0.5,
                    k: 2,
                    savings_fraction: 0.1,
                    disruption_fraction: 0.5,
                }),
                claims: vec!["a".into()],
            }
        };
        metrics.count_moves(&[
            judged(
                "general",
                ConsolidationPolicy::WhenEmptyOrUnderutilized,
                true,
                None,
            ),
            judged(
                "batch",
                ConsolidationPolicy::Balanced,
                false,
                Some((0.2, false)),
            ),
        ]);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodable");
        for expected in [
            r#"karpenter_consolidation_moves_total{decision="approved",nodepool="general",policy="WhenEmptyOrUnderutilized"} 1"#,
            r#"karpenter_consolidation_moves_total{decision="rejected",nodepool="batch",policy="Balanced"} 1"#,
            r#"karpenter_consolidation_score_count{decision="rejected",nodepool="batch",policy="Balanced"} 1"#,
        ] {
            assert!(text.contains(expected), "{expected} missing from\n{text}");
        }
        assert!(
            !text.contains(r#"karpenter_consolidation_score_count{decision="approved""#),
            "{text}"
        );
    }
}
