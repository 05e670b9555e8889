//! Disruption: every 10 s (on the leader: it runs inside `controllers::run`) a snapshot of the cluster
//! ([`input`], with the cloud facts of drift from [`cloud_drift`]) goes through the pure engine
//! ([`crate::disruption::decide`]); the claims get the conditions that show its verdicts (`Drifted`, `Consolidatable`: [`marks`]); its
//! commands are re-checked after 15 s where the reference asks for it ([`crate::disruption::validate`]) and
//! carried out one at a time ([`execute`]). NodePools whose budgets allow a method that had
//! candidates no disruption get a `DisruptionBlocked` Event ([`crate::engine::blocked_pools`]).

pub mod cloud_drift;
pub mod execute;
#[cfg(test)]
mod execute_tests;
pub mod input;
pub mod reason;

use super::catalogs::Catalogs;
use super::kit::marks;
use super::metrics::disruption as metrics;
use super::{Context, Error};
use crate::cloud::CloudProvider;
use crate::disruption::{
    decide, decide_observed, validate, Command, Decision, DisruptionInput, PassPreparation,
    VALIDATION_DELAY,
};
use crate::engine::disruption_input::pool_counts;
use crate::engine::{blocked_pools, disruption_events};
use input::Snapshot;
use k8s_openapi::jiff::Timestamp;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a pass runs.
pub const PASS_INTERVAL: Duration = Duration::from_secs(10);
/// How often the same `DisruptionBlocked` Event is published again for a pool.
const BLOCKED_EVENT_EVERY: Duration = Duration::from_secs(5 * 60);

/// What the loop remembers between passes.
#[derive(Default)]
struct Memory {
    catalogs: Catalogs,
    /// Replacements disruption launched, and when: no-churn keeps them from being replaced soon after.
    replacements: HashMap<String, Timestamp>,
    /// When each `(pool, message)` DisruptionBlocked Event was last published.
    blocked: HashMap<(String, String), Instant>,
    /// Node Events published (claim, reason, message), with when and for how long they are not repeated.
    node_events: HashMap<(String, &'static str, String), (Instant, Duration)>,
    /// The passes' scheduler preparation, reused while the pools, catalog and DaemonSets are unchanged.
    preparation: PassPreparation,
}

/// Runs a pass every [`PASS_INTERVAL`] until the process stops. Failures are logged; the next pass retries.
pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    let mut memory = Memory {
        catalogs: ctx.catalogs.clone(),
        ..Memory::default()
    };
    loop {
        tokio::time::sleep(PASS_INTERVAL).await;
        pass(&ctx, &mut memory).await;
    }
}

impl Snapshot {
    /// The pass's input, with the preparation `preparation` keeps for the snapshot's pools and catalog.
    fn input<'s>(&'s self, preparation: &'s mut PassPreparation) -> DisruptionInput<'s> {
        let mut input = DisruptionInput {
            nodepools: &self.nodepools,
            nodes: &self.nodes,
            pending: &self.pending,
            pdbs: &self.pdbs,
            daemonsets: &self.daemonsets,
            catalog: &self.catalog,
            volumes: &self.volumes,
            default_spread: &self.default_spread,
            settings: self.settings,
            prepared: None,
        };
        input.prepared = Some(preparation.get(&input, &self.catalog));
        input
    }
}

/// One pass: snapshot, decide, report blocked pools, carry out the commands.
async fn pass<C: CloudProvider>(ctx: &Context<C>, memory: &mut Memory) {
    let Some((snapshot, decision, now)) = decide_now(ctx, memory, true).await else {
        return;
    };
    let counts = pool_counts(&snapshot.nodes);
    ctx.metrics
        .disruption
        .publish_budgets(metrics::budget_samples(&snapshot.nodepools, &counts, now));
    let blocked = blocked_pools::of(&decision, &snapshot.nodepools, &counts, now);
    report_blocked(ctx, &snapshot, blocked, &mut memory.blocked).await;
    marks::write(
        ctx,
        crate::engine::marks::of_pass(&snapshot.nodes, &decision, now),
    )
    .await;
    report_nodes(
        ctx,
        &snapshot,
        disruption_events::of(&decision.skipped),
        &mut memory.node_events,
    )
    .await;
    report_approved(ctx, &snapshot, &decision.consolidation_moves).await;
    let alive: Vec<&str> = snapshot.nodes.iter().map(|n| n.claim_name()).collect();
    memory
        .replacements
        .retain(|name, _| alive.contains(&name.as_str()));
    for command in decision.commands {
        let id = command_id(&command, now);
        let candidates = disruption_events::candidate_events(&command, &id);
        report_nodes(ctx, &snapshot, candidates, &mut memory.node_events).await;
        carry_out(ctx, memory, &snapshot, command, &id).await;
    }
}

/// A name for one command in its Events (Karpenter's command ID): a hash of when it was decided and its nodes.
fn command_id(command: &Command, now: Timestamp) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    now.as_nanosecond().hash(&mut hasher);
    for target in &command.candidates {
        target.claim.hash(&mut hasher);
    }
    format!("{:016x}", hasher.finish())
}

/// Publishes Karpenter's `ConsolidationApproved` for the moves a `Balanced` score approved: on the Node and
/// NodeClaim of a single-node move, on the NodePool of a multi-node one.
async fn report_approved<C>(
    ctx: &Context<C>,
    snapshot: &Snapshot,
    moves: &[crate::disruption::ConsolidationMove],
) {
    for (on, message) in disruption_events::approved_events(moves) {
        match on {
            disruption_events::ApprovedOn::Node(claim) => {
                let Some(node) = snapshot.nodes.iter().find(|n| n.claim_name() == claim) else {
                    continue;
                };
                if let Some(object) = &node.node {
                    ctx.events
                        .normal(
                            object.as_ref(),
                            disruption_events::CONSOLIDATION_APPROVED,
                            message.clone(),
                        )
                        .await;
                }
                ctx.events
                    .normal(
                        node.claim.as_ref(),
                        disruption_events::CONSOLIDATION_APPROVED,
                        message,
                    )
                    .await;
            }
            disruption_events::ApprovedOn::NodePool(pool) => {
                let Some(pool) = snapshot
                    .nodepools
                    .iter()
                    .find(|p| p.metadata.name.as_deref() == Some(pool.as_str()))
                else {
                    continue;
                };
                ctx.events
                    .normal(pool, disruption_events::CONSOLIDATION_APPROVED, message)
                    .await;
            }
        }
    }
}

/// A snapshot and the engine's decision on it, at the clock's now; `None` (logged) when either fails. With
/// `timed`, each method's duration and candidates go to the metrics (not for a re-check's decision).
async fn decide_now<C: CloudProvider>(
    ctx: &Context<C>,
    memory: &mut Memory,
    timed: bool,
) -> Option<(Snapshot, Decision, Timestamp)> {
    let snapshot = match input::snapshot(ctx, &mut memory.catalogs, &memory.replacements).await {
        Ok(snapshot) => snapshot,
        Err(error) => {
            tracing::warn!(%error, "no disruption pass: the cluster snapshot failed");
            return None;
        }
    };
    let now = match Timestamp::try_from(ctx.clock.now()) {
        Ok(now) => now,
        Err(error) => {
            tracing::error!(%error, "no disruption pass: the clock is out of range");
            return None;
        }
    };
    let metrics = ctx.metrics.clone();
    // Lent to the blocking task and given back (a pass that panicked loses it: the next one prepares anew).
    let mut preparation = std::mem::take(&mut memory.preparation);
    let decided = tokio::task::spawn_blocking(move || {
        let input = snapshot.input(&mut preparation);
        let decision = if timed {
            decide_observed(&input, now, &mut metrics.disruption.observer())
        } else {
            decide(&input, now)
        };
        metrics
            .disruption
            .count_moves(&decision.consolidation_moves);
        (snapshot, decision, preparation)
    })
    .await;
    match decided {
        Ok((snapshot, decision, preparation)) => {
            memory.preparation = preparation;
            Some((snapshot, decision, now))
        }
        Err(panic) => {
            tracing::error!(%panic, "the disruption pass panicked");
            None
        }
    }
}

/// Validates `command` after the delay where it needs it, then executes it.
async fn carry_out<C: CloudProvider>(
    ctx: &Context<C>,
    memory: &mut Memory,
    decided_on: &Snapshot,
    command: Command,
    id: &str,
) {
    let needs_validation = command.method.needs_validation();
    let fresh;
    let (command, snapshot) = if needs_validation {
        tokio::time::sleep(VALIDATION_DELAY).await;
        let Some((snapshot, _, now)) = decide_now(ctx, memory, false).await else {
            return;
        };
        match validate(&snapshot.input(&mut memory.preparation), &command, now) {
            Ok(valid) => {
                fresh = snapshot;
                (valid, &fresh)
            }
            Err(why) => {
                let (_, consolidation_type) = metrics::method_labels(command.method);
                ctx.metrics
                    .disruption
                    .failed_validations
                    .get_or_create(&metrics::ConsolidationTypeLabels {
                        consolidation_type: consolidation_type.to_owned(),
                    })
                    .inc_by(u64::try_from(command.candidates.len()).unwrap_or(u64::MAX));
                tracing::info!(reason = %command.reason, nodes = %names(&command), %why, "disruption command no longer valid; dropped");
                let rejected = disruption_events::rejected_events(&command, id, &why);
                report_nodes(ctx, &snapshot, rejected, &mut memory.node_events).await;
                return;
            }
        }
    } else {
        (command, decided_on)
    };
    let budgets: Vec<String> = command
        .budgets
        .iter()
        .map(|a| format!("{:?} allowed, {} disrupting", a.allowed, a.disrupting))
        .collect();
    tracing::info!(
        reason = %command.reason,
        method = ?command.method,
        decision = if command.is_delete() { "delete" } else { "replace" },
        nodes = %names(&command),
        replacements = command.replacements.len(),
        savings = command.savings,
        budget = %budgets.join("; "),
        "disrupting node(s)"
    );
    let now = Timestamp::try_from(ctx.clock.now()).unwrap_or(Timestamp::UNIX_EPOCH);
    match execute::execute(ctx, &command, &snapshot.nodepools, &snapshot.nodes, now).await {
        Ok(replacements) => {
            for name in replacements {
                memory.replacements.insert(name, now);
            }
            let (_, consolidation_type) = metrics::method_labels(command.method);
            if !consolidation_type.is_empty() {
                let decision = execute::decision(&command);
                ctx.metrics
                    .cost
                    .consolidated(decision, consolidation_type, command.savings);
            }
        }
        Err(error) => {
            tracing::warn!(reason = %command.reason, nodes = %names(&command), %error, "disruption command abandoned");
            // Karpenter labels this counter's consolidation type with the decision (queue.go); kept for its
            // dashboards.
            let decision = execute::decision(&command);
            ctx.metrics
                .disruption
                .queue_failures
                .get_or_create(&metrics::DecisionLabels {
                    decision: decision.to_owned(),
                    reason: metrics::method_labels(command.method).0,
                    consolidation_type: decision.to_owned(),
                })
                .inc();
        }
    }
}

fn names(command: &Command) -> String {
    let names: Vec<&str> = command
        .candidates
        .iter()
        .map(|t| t.node.as_deref().unwrap_or(&t.claim))
        .collect();
    names.join(",")
}

/// Publishes a `DisruptionBlocked` Event on each NodePool the pass found blocked ([`blocked_pools::of`]), unless
/// the same message was published within [`BLOCKED_EVENT_EVERY`].
async fn report_blocked<C>(
    ctx: &Context<C>,
    snapshot: &Snapshot,
    blocked: Vec<blocked_pools::BlockedPool>,
    published: &mut HashMap<(String, String), Instant>,
) {
    published.retain(|_, at| at.elapsed() < BLOCKED_EVENT_EVERY);
    for blocked in blocked {
        let Some(pool) = snapshot
            .nodepools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(blocked.nodepool.as_str()))
        else {
            continue;
        };
        let message = blocked.message();
        let key = (blocked.nodepool, message.clone());
        if published.contains_key(&key) {
            continue;
        }
        tracing::info!(nodepool = %key.0, %message, "disruption blocked by a budget");
        ctx.events
            .normal(pool, blocked_pools::DISRUPTION_BLOCKED, message)
            .await;
        published.insert(key, Instant::now());
    }
}

/// Publishes node Events (the pass's `DisruptionBlocked` and `Unconsolidatable` from [`disruption_events::of`], a
/// command's `ConsolidationCandidate` or `ConsolidationRejected`) on the node's Node and NodeClaim, unless the same
/// one was published within its dedupe window.
async fn report_nodes<C>(
    ctx: &Context<C>,
    snapshot: &Snapshot,
    events: Vec<disruption_events::NodeEvent>,
    published: &mut HashMap<(String, &'static str, String), (Instant, Duration)>,
) {
    published.retain(|_, (at, window)| at.elapsed() < *window);
    for event in events {
        let key = (event.claim.clone(), event.reason, event.message.clone());
        if published.contains_key(&key) {
            continue;
        }
        let Some(node) = snapshot
            .nodes
            .iter()
            .find(|n| n.claim_name() == event.claim)
        else {
            continue;
        };
        if let Some(object) = &node.node {
            ctx.events
                .normal(object.as_ref(), event.reason, event.message.clone())
                .await;
        }
        ctx.events
            .normal(node.claim.as_ref(), event.reason, event.message)
            .await;
        published.insert(key, (Instant::now(), event.dedupe));
    }
}
