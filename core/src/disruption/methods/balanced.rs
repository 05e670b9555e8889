//! The `Balanced` consolidation policy (Karpenter v1.14, `disruption/balanced.go`): a move in a Balanced pool is
//! taken only when the share of the pool's cost it saves is at least half the share of the pool's disruption
//! it causes. Each Balanced pool of a move is scored on its own: its share of the savings (by its candidates'
//! price) against its total cost, its candidates' reschedule cost against the total over all of its nodes.
//! Every scored move is also reported ([`ConsolidationMove`]), for Karpenter's `karpenter_consolidation_*`
//! metrics.

use super::super::command::{ConsolidationMove, MoveScore};
use super::facts::Facts;
use super::Pass;
use crate::api::nodepool::ConsolidationPolicy;
use std::collections::{BTreeMap, HashMap};

/// Karpenter's `BalancedK`: a move passes when its score is at least `1/K`.
pub const BALANCED_K: u32 = 2;

/// A pool's totals: the price of all of its nodes, and their reschedule (disruption) cost.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PoolTotals {
    pub cost: f64,
    pub disruption: f64,
}

/// A move's score in one pool: the fractions of the pool's cost it saves and of its disruption it causes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Score {
    pub savings_fraction: f64,
    pub disruption_fraction: f64,
}

impl Score {
    /// Savings fraction over disruption fraction: 0 without savings, infinite without disruption.
    pub fn value(&self) -> f64 {
        if self.savings_fraction <= 0.0 {
            0.0
        } else if self.disruption_fraction == 0.0 {
            f64::INFINITY
        } else {
            self.savings_fraction / self.disruption_fraction
        }
    }

    /// Whether the move passes at threshold `1/k`.
    pub fn approved(&self, k: u32) -> bool {
        self.value() >= 1.0 / f64::from(k.max(1))
    }
}

/// The score of a move saving `savings` and causing `disruption` in a pool with `totals` (Karpenter's
/// `ScoreMove`). A pool without cost or disruption to compare against scores 0: the move is refused.
pub fn score_move(savings: f64, disruption: f64, totals: PoolTotals) -> Score {
    if totals.cost <= 0.0 || totals.disruption <= 0.0 {
        return Score {
            savings_fraction: 0.0,
            disruption_fraction: 0.0,
        };
    }
    Score {
        savings_fraction: savings / totals.cost,
        disruption_fraction: disruption / totals.disruption,
    }
}

/// The totals of every pool, over all of its nodes.
pub(crate) fn pool_totals(facts: &[Facts<'_>]) -> HashMap<String, PoolTotals> {
    let mut totals: HashMap<String, PoolTotals> = HashMap::new();
    for f in facts {
        let pool = totals.entry(f.target.nodepool.clone()).or_default();
        pool.cost += f.offering.map_or(0.0, |o| o.price);
        pool.disruption += f.reschedule_cost;
    }
    totals
}

/// Whether the move of `candidates` saving `savings` passes every Balanced pool it touches, with what each pool
/// of it reports. A move in no Balanced pool always passes.
pub(crate) fn evaluate(
    pass: &Pass<'_>,
    candidates: &[&Facts<'_>],
    savings: f64,
) -> (bool, Vec<ConsolidationMove>) {
    let mut by_pool: BTreeMap<&str, Vec<&Facts<'_>>> = BTreeMap::new();
    for f in candidates {
        by_pool
            .entry(f.target.nodepool.as_str())
            .or_default()
            .push(f);
    }
    let price =
        |fs: &[&Facts<'_>]| -> f64 { fs.iter().map(|f| f.offering.map_or(0.0, |o| o.price)).sum() };
    let total_price = price(candidates);
    let mut approved = true;
    let mut moves = Vec::with_capacity(by_pool.len());
    for (pool, in_pool) in &by_pool {
        let policy = in_pool[0].policy();
        let mut report = ConsolidationMove {
            nodepool: (*pool).to_owned(),
            policy,
            move_approved: true,
            score: None,
            claims: in_pool.iter().map(|f| f.target.claim.clone()).collect(),
        };
        if policy == ConsolidationPolicy::Balanced {
            let share = if total_price > 0.0 && by_pool.len() > 1 {
                savings * (price(in_pool) / total_price)
            } else {
                savings
            };
            let disruption: f64 = in_pool.iter().map(|f| f.reschedule_cost).sum();
            let totals = pass.pool_totals().get(*pool).copied().unwrap_or_default();
            let score = score_move(share, disruption, totals);
            let passed = score.approved(BALANCED_K);
            approved &= passed;
            report.score = Some(MoveScore {
                value: score.value(),
                passed,
                threshold: 1.0 / f64::from(BALANCED_K),
                k: BALANCED_K,
                savings_fraction: score.savings_fraction,
                disruption_fraction: score.disruption_fraction,
            });
        }
        moves.push(report);
    }
    // A move is taken only if every Balanced pool passes it; each pool's count says so.
    for report in &mut moves {
        report.move_approved = approved;
    }
    (approved, moves)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Karpenter's `balanced_test.go` ("ScoreMove"): a pool of 58.08 $/h and 90 units of disruption.
    const POOL: PoolTotals = PoolTotals {
        cost: 58.08,
        disruption: 90.0,
    };

    fn approved(savings: f64, disruption: f64, totals: PoolTotals, k: u32) -> bool {
        score_move(savings, disruption, totals).approved(k)
    }

    #[test]
    fn scores_follow_the_upstream_cases() {
        // (upstream It, savings, disruption, totals, approved at K=2)
        let cases = [
            (
                "should approve an oversized node consolidation",
                7.26,
                4.0,
                POOL,
                true,
            ),
            (
                "should approve a spare capacity delete",
                4.84,
                5.0,
                POOL,
                true,
            ),
            ("should reject a marginal move", 2.42, 9.0, POOL, false),
            (
                "should reject a well-packed node with zero savings",
                0.0,
                11.0,
                POOL,
                false,
            ),
            (
                "should approve a replace in a uniform pool",
                2.42,
                9.0,
                PoolTotals {
                    cost: 48.40,
                    disruption: 90.0,
                },
                true,
            ),
            (
                "should approve low-disruption nodes (A)",
                4.84,
                5.0,
                PoolTotals {
                    cost: 58.08,
                    disruption: 117.0,
                },
                true,
            ),
            (
                "and reject high-disruption nodes (B)",
                4.84,
                32.0,
                PoolTotals {
                    cost: 58.08,
                    disruption: 117.0,
                },
                false,
            ),
            (
                "should approve with +Inf score when move disruption is zero",
                4.84,
                0.0,
                POOL,
                true,
            ),
            (
                "should reject when both savings and disruption are zero",
                0.0,
                0.0,
                POOL,
                false,
            ),
            (
                "should reject when nodepool cost is zero",
                4.84,
                5.0,
                PoolTotals {
                    cost: 0.0,
                    disruption: 90.0,
                },
                false,
            ),
        ];
        for (name, savings, disruption, totals, want) in cases {
            assert_eq!(
                approved(savings, disruption, totals, BALANCED_K),
                want,
                "{name}"
            );
        }
        let oversized = score_move(7.26, 4.0, POOL);
        assert!((oversized.value() - (7.26 / 58.08) / (4.0 / 90.0)).abs() < 1e-9);
        assert!(score_move(4.84, 0.0, POOL).value().is_infinite());
    }

    #[test]
    fn the_threshold_is_one_over_k_and_scores_do_not_depend_on_pool_size() {
        // "consolidation threshold tuning": 2.42 saved for 9 disrupted scores ~0.42.
        assert!(!approved(2.42, 9.0, POOL, 2));
        assert!(approved(2.42, 9.0, POOL, 3));
        assert!(!approved(2.42, 9.0, POOL, 1));
        // "scale invariance" and "cross-NodePool scoring".
        let ten = score_move(7.26, 4.0, POOL).value();
        let hundred = score_move(
            7.26,
            4.0,
            PoolTotals {
                cost: 580.80,
                disruption: 900.0,
            },
        )
        .value();
        assert!((ten - hundred).abs() < 1e-9);
        let on_demand = score_move(
            4.84,
            4.0,
            PoolTotals {
                cost: 48.40,
                disruption: 90.0,
            },
        )
        .value();
        let spot = score_move(
            1.45,
            4.0,
            PoolTotals {
                cost: 14.50,
                disruption: 90.0,
            },
        )
        .value();
        assert!((on_demand - spot).abs() < 0.01);
    }
}
