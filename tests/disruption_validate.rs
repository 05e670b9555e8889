//! The re-check before acting (controller-behaviour.md §3.4, Validation): a command decided 15 s ago is carried
//! out only if a fresh snapshot still supports it.

mod disruption_support;

use disruption_support::{at, pool, World, NOW};
use kerf::disruption::{validate, Method, Why};
use serde_json::json;

const LATER: &str = "2026-11-23T12:00:15Z";

fn revalidate(
    w: &World,
    command: &kerf::disruption::Command,
) -> Result<kerf::disruption::Command, Why> {
    validate(&w.input(), command, at(LATER))
}

/// Three 8-CPU nodes with two 1-CPU pods each, and a budget of `budget`.
fn light(budget: &str) -> World {
    let mut w = World::new(vec![pool("p", json!({"budgets": [{"nodes": budget}]}))], 1);
    for name in ["n1", "n2", "n3"] {
        w.node(name, "p", "f0-8", "on-demand");
        w.pods(name, 2, "1", json!({}));
    }
    w
}

#[test]
fn an_unchanged_cluster_keeps_the_command() {
    let w = light("1");
    let command = w.decide(NOW).commands.remove(0);
    assert_eq!(command.method, Method::SingleNodeConsolidation);
    assert_eq!(revalidate(&w, &command), Ok(command));
}

#[test]
fn a_move_that_no_longer_fits_is_dropped() {
    let mut w = light("1");
    let command = w.decide(NOW).commands.remove(0);
    let candidate = command.candidates[0].node.clone().expect("node");
    // The other nodes filled up meanwhile: the candidate's pods now need a new node.
    for name in ["n1", "n2", "n3"].into_iter().filter(|n| *n != candidate) {
        w.pods(name, 5, "1", json!({}));
    }
    assert_eq!(revalidate(&w, &command), Err(Why::Changed));
}

#[test]
fn a_closed_budget_or_a_vanished_node_drop_the_command() {
    let mut w = light("1");
    let command = w.decide(NOW).commands.remove(0);
    w.pools[0] = pool("p", json!({"budgets": [{"nodes": "0"}]}));
    assert!(matches!(revalidate(&w, &command), Err(Why::Budget { .. })));
    let claim = &command.candidates[0].claim;
    w.nodes.retain(|n| n.claim_name() != claim);
    assert_eq!(revalidate(&w, &command), Err(Why::Gone(claim.clone())));
}

#[test]
fn emptiness_keeps_the_nodes_still_empty() {
    let mut w = World::new(vec![pool("p", json!({"budgets": [{"nodes": "100%"}]}))], 1);
    for name in ["e1", "e2"] {
        w.node(name, "p", "f0-8", "on-demand");
    }
    let command = w.decide(NOW).commands.remove(0);
    assert_eq!(command.candidates.len(), 2);
    w.pods("e1", 1, "1", json!({}));
    let kept = revalidate(&w, &command).expect("e2 is still empty");
    let names: Vec<&str> = kept.candidates.iter().map(|t| t.claim.as_str()).collect();
    assert_eq!(names, ["e2-claim"]);
    w.pods("e2", 1, "1", json!({}));
    assert_eq!(revalidate(&w, &command), Err(Why::Changed));
}
