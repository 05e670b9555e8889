//! Budget explanations for a NodePool as users write it: a business-hours freeze for consolidation, a slow
//! drift roll-out, and the default share otherwise. Each line is what `kerf simulate` and the NodePool status
//! are meant to show.

use k8s_openapi::jiff::Timestamp;
use kerf::api::nodepool::NodePool;
use kerf::disruption::{Budgets, PoolCounts};

const POOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: general
spec:
  template:
    spec:
      requirements: []
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  disruption:
    consolidateAfter: 5m
    budgets:
      - nodes: "10%"
      - nodes: "0"
        schedule: "0 9 * * mon-fri"
        duration: 8h
        reasons: [Empty, Underutilized]
      - nodes: "1"
        reasons: [Drifted]
"#;

fn lines(at: &str, disrupting: u64) -> Vec<String> {
    let pool: NodePool = serde_yaml::from_str(POOL).expect("nodepool");
    let now: Timestamp = at.parse().expect("timestamp");
    let counts = PoolCounts {
        total: 30,
        disrupting,
    };
    Budgets::of(&pool)
        .explain_all(counts, now)
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn during_business_hours_consolidation_waits_and_drift_trickles() {
    assert_eq!(
        lines("2026-11-23T10:00:00Z", 0), // a Monday
        [
            "Empty: 0 allowed until 2026-11-23T17:00:00Z, then 3 (budgets[1] active: nodes \"0\", schedule \
             \"0 9 * * mon-fri\" for 8h, reasons [Empty, Underutilized])",
            "Drifted: 1 allowed (budgets[2] active: nodes \"1\", reasons [Drifted])",
            "Underutilized: 0 allowed until 2026-11-23T17:00:00Z, then 3 (budgets[1] active: nodes \"0\", \
             schedule \"0 9 * * mon-fri\" for 8h, reasons [Empty, Underutilized])",
        ]
    );
}

#[test]
fn after_hours_the_default_share_applies_until_the_next_freeze() {
    assert_eq!(
        lines("2026-11-27T18:00:00Z", 1), // a Friday evening, one node already going
        [
            "Empty: 3 allowed, 1 already disrupting, so 2 more until 2026-11-30T09:00:00Z, then 0 \
             (budgets[0] active: nodes \"10%\" = 3 of 30 nodes)",
            "Drifted: 1 allowed, 1 already disrupting, so 0 more (budgets[2] active: nodes \"1\", reasons \
             [Drifted])",
            "Underutilized: 3 allowed, 1 already disrupting, so 2 more until 2026-11-30T09:00:00Z, then 0 \
             (budgets[0] active: nodes \"10%\" = 3 of 30 nodes)",
        ]
    );
}
