//! What a timeline reports: every launch, disruption, blocked budget window, interruption and applied change
//! in order, the cost of each hour, and totals.

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::Serialize;
use std::fmt::Write;

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineReport {
    /// When the virtual clock started (RFC 3339).
    pub start: String,
    pub duration: String,
    pub timeline: Vec<Entry>,
    pub cost_by_hour: Vec<CostHour>,
    pub totals: Totals,
}

/// One thing that happened.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// Since the start, e.g. `2h05m`.
    pub at: String,
    /// The virtual clock's time (RFC 3339), which budgets' schedules are read against.
    pub time: String,
    /// `launch`, `disrupt`, `blocked`, `kept`, `interrupt`, `unhealthy`, `repair`, `replicas`, `scale`, `apply`
    /// or `zonal-shift`.
    pub action: &'static str,
    pub detail: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub node_claims: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodepool: Option<String>,
    /// Disruptions and blocks: `Empty`, `Drifted`, `Underutilized` or `Expired`; `kept`: the node Event's reason
    /// (`Unconsolidatable` or `DisruptionBlocked`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The budget that allowed a disruption or blocks one, explained.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    /// Until when a blocking budget holds (RFC 3339), when a schedule changes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replacements: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub savings_per_hour: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price_per_hour: Option<f64>,
    /// Launches: how many pods the claim was launched for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pods: Option<usize>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CostHour {
    /// Hours since the start.
    pub hour: usize,
    /// USD spent on nodes during the hour.
    pub cost: f64,
    /// The most nodes that existed at once during the hour.
    pub nodes: usize,
    /// Some node had no known price, so `cost` is a lower bound.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unknown_prices: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    /// USD over the whole timeline.
    pub cost: f64,
    pub launches: usize,
    pub disruptions: usize,
    pub interruptions: usize,
    pub blocked: usize,
    /// Nodes node repair replaced (the `NodeRepair` gate); left out when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub repairs: usize,
    pub nodes_at_end: usize,
    pub pending_at_end: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Entry {
    pub fn new(
        since_start: SignedDuration,
        time: Timestamp,
        action: &'static str,
        detail: String,
    ) -> Self {
        Entry {
            at: Entry::offset(since_start),
            time: time.to_string(),
            action,
            detail,
            node_claims: Vec::new(),
            nodepool: None,
            reason: None,
            method: None,
            budget: None,
            until: None,
            replacements: Vec::new(),
            savings_per_hour: None,
            price_per_hour: None,
            pods: None,
        }
    }

    /// `2h05m`, the way timelines read.
    pub fn offset(d: SignedDuration) -> String {
        let minutes = d.as_secs() / 60;
        format!("{}h{:02}m", minutes / 60, minutes % 60)
    }
}

impl TimelineReport {
    /// The timeline for a person.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "timeline: {} from {}", self.duration, self.start);
        for e in &self.timeline {
            let _ = writeln!(out, "  {:>7}  {:<11} {}", e.at, e.action, e.detail);
        }
        let _ = writeln!(out, "cost by hour:");
        for h in &self.cost_by_hour {
            let lower = if h.unknown_prices {
                " (some prices unknown)"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "  {:>3}h  ${:.4}  {} nodes{lower}",
                h.hour, h.cost, h.nodes
            );
        }
        let t = &self.totals;
        let _ = writeln!(
            out,
            "total ${:.4}: {} launches, {} disruptions, {} interruptions, {} blocked; {} nodes and {} pending pods at the end",
            t.cost, t.launches, t.disruptions, t.interruptions, t.blocked, t.nodes_at_end, t.pending_at_end
        );
        out
    }
}
