//! The simulation's report: what to launch, where each pod goes, what it costs, and what cannot be placed.

use super::timeline_report::TimelineReport;
use crate::catalog::Catalog;
use crate::engine::launch::launched_labels;
use crate::engine::provisioning::plan::Decisions;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The scenario's `Simulation` seed, echoed.
    pub seed: Option<u64>,
    pub summary: Summary,
    pub node_claims: Vec<ClaimReport>,
    /// Existing nodes (and in-flight NodeClaims) that take pending pods.
    pub existing_nodes: Vec<NodeReport>,
    pub unschedulable: Vec<UnschedulableReport>,
    /// With a `duration`: the timeline, `costByHour` and `totals`, beside the first solve's report above.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<TimelineReport>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub pods: usize,
    pub scheduled: usize,
    pub unschedulable: usize,
    pub node_claims: usize,
    /// The sum of the claims' prices; `null` when any price is unknown.
    pub cost_per_hour: Option<f64>,
    /// Wall-clock time of the solve; left out of timeline reports, which are byte-for-byte reproducible.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub solve_seconds: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimReport {
    pub name: String,
    pub node_pool: String,
    pub instance_type: Option<String>,
    pub capacity_type: Option<String>,
    pub zone: Option<String>,
    pub price_per_hour: Option<f64>,
    pub pods: Vec<String>,
    /// The labels the node will carry: the NodeClaim's (its pool's template labels and single-valued
    /// requirements), then the launched instance's (its type's labels, zone, capacity type).
    pub labels: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeReport {
    pub name: String,
    pub pods: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnschedulableReport {
    pub pod: String,
    pub reason: String,
}

impl Report {
    /// The report of a provisioning decision for `pods` pending pods over `catalog`.
    pub fn new(pods: usize, decisions: &Decisions, catalog: &Catalog, solve_seconds: f64) -> Self {
        let node_claims: Vec<ClaimReport> = decisions
            .claims
            .iter()
            .enumerate()
            .map(|(i, claim)| {
                let choice = claim.choice.as_ref();
                let mut labels = claim.labels();
                if let Some(c) = choice {
                    labels.extend(launched_labels(
                        catalog.get(&c.instance_type),
                        &c.instance_type,
                        &c.zone,
                        c.capacity_type,
                    ));
                }
                ClaimReport {
                    name: format!("{}-{}", claim.nodepool, i + 1),
                    node_pool: claim.nodepool.clone(),
                    instance_type: choice.map(|c| c.instance_type.clone()),
                    capacity_type: choice.map(|c| c.capacity_type.as_str().to_owned()),
                    zone: choice.map(|c| c.zone.clone()),
                    price_per_hour: choice.and_then(|c| c.price),
                    pods: claim.pods.clone(),
                    labels,
                }
            })
            .collect();
        let cost_per_hour = node_claims
            .iter()
            .map(|c| c.price_per_hour)
            .sum::<Option<f64>>();
        let unschedulable: Vec<UnschedulableReport> = decisions
            .unschedulable
            .iter()
            .map(|u| UnschedulableReport {
                pod: u.pod.clone(),
                reason: u.reason.clone(),
            })
            .collect();
        let existing_nodes = decisions
            .nominated_nodes()
            .into_iter()
            .map(|(node, pods)| NodeReport {
                name: node.to_owned(),
                pods: pods.into_iter().map(str::to_owned).collect(),
            })
            .collect();
        Report {
            seed: None,
            summary: Summary {
                pods,
                scheduled: pods - unschedulable.len(),
                unschedulable: unschedulable.len(),
                node_claims: node_claims.len(),
                cost_per_hour,
                solve_seconds: Some(solve_seconds),
            },
            node_claims,
            existing_nodes,
            unschedulable,
            timeline: None,
        }
    }

    /// The report for a person.
    pub fn text(&self) -> String {
        let s = &self.summary;
        let mut out = String::new();
        let cost = s.cost_per_hour.map_or_else(
            || "cost unknown (no price for some offerings; see --pricing-file)".to_owned(),
            dollars_per_hour,
        );
        let _ = writeln!(
            out,
            "{} pods: {} scheduled, {} unschedulable",
            s.pods, s.scheduled, s.unschedulable
        );
        let claims = if s.node_claims == 1 {
            "NodeClaim"
        } else {
            "NodeClaims"
        };
        let _ = writeln!(out, "{} {claims} to launch, {cost}", s.node_claims);
        for claim in &self.node_claims {
            let price = claim
                .price_per_hour
                .map_or_else(|| "price unknown".to_owned(), dollars_per_hour);
            let what = [&claim.instance_type, &claim.capacity_type, &claim.zone]
                .iter()
                .map(|v| v.as_deref().unwrap_or("?"))
                .collect::<Vec<_>>()
                .join(" ");
            let _ = writeln!(
                out,
                "  {:<20} {what}  {price}  {} pods: {}",
                claim.name,
                claim.pods.len(),
                abbreviate(&claim.pods)
            );
        }
        if !self.existing_nodes.is_empty() {
            let _ = writeln!(out, "onto existing nodes:");
            for node in &self.existing_nodes {
                let _ = writeln!(
                    out,
                    "  {:<20} {} pods: {}",
                    node.name,
                    node.pods.len(),
                    abbreviate(&node.pods)
                );
            }
        }
        if !self.unschedulable.is_empty() {
            let _ = writeln!(out, "unschedulable:");
            for u in &self.unschedulable {
                let _ = writeln!(out, "  {}: {}", u.pod, u.reason);
            }
        }
        if let Some(seconds) = s.solve_seconds {
            let _ = writeln!(out, "solved in {:.1} ms", seconds * 1000.0);
        }
        if let Some(timeline) = &self.timeline {
            out.push_str(&timeline.text());
        }
        out
    }
}

/// The first few pod names, then a count of the rest.
fn abbreviate(pods: &[String]) -> String {
    const SHOWN: usize = 5;
    let shown = pods
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    match pods.len().saturating_sub(SHOWN) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

/// `$1.2345/h`; a sum that rounds to nothing prints `$0.0000/h`, never `$-0.0000/h`.
fn dollars_per_hour(value: f64) -> String {
    let value = if value.abs() < 0.000_05 { 0.0 } else { value };
    format!("${value:.4}/h")
}

#[cfg(test)]
mod tests {
    use super::dollars_per_hour;

    #[test]
    fn costs_print_without_a_negative_zero() {
        assert_eq!(dollars_per_hour(-0.0), "$0.0000/h");
        assert_eq!(dollars_per_hour(-0.000_01), "$0.0000/h");
        assert_eq!(dollars_per_hour(0.612), "$0.6120/h");
    }
}
