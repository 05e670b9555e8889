//! Carrying out one command (controller-behaviour.md §3.5): taint the candidates' Nodes
//! `karpenter.sh/disrupted:NoSchedule`, create the replacements, wait until every replacement is
//! `Initialized`, then delete the candidates' NodeClaims (termination drains them). A failure before the
//! deletes undoes what was done: the taints come off and the replacements are deleted.

use super::super::kit::calls::{self, ReconcileError};
use super::super::kit::taints::{disrupted_taint_patch, taints_patch};
use super::super::metrics::disruption::{method_labels, DecisionLabels, NodePoolDecisionLabels};
use super::super::metrics::DisruptedLabels;
use super::super::provisioning::create_claims;
use super::super::Context;
use super::reason;
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::disruption::{Command, NodeInput, NodeState, DISRUPTED_TAINT};
use crate::engine::provisioning::{claim, plan::NewClaim};
use ::kube::Api;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::time::Instant;

/// How long replacements may take to initialize before the command is abandoned (Karpenter's lower bound).
pub const REPLACEMENT_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// How often the replacements' state is looked at while waiting.
const POLL: Duration = Duration::from_secs(1);

/// Why a command was abandoned.
#[derive(Debug, thiserror::Error)]
pub enum ExecuteError {
    #[error("tainting node {node:?}: {error}")]
    Taint { node: String, error: ReconcileError },
    #[error("NodePool {0:?} of a replacement does not exist")]
    UnknownNodePool(String),
    #[error("{0} of {1} replacements could not be created")]
    Create(usize, usize),
    #[error("replacement {0:?} is being deleted")]
    ReplacementDeleted(String),
    #[error("the replacements were not initialized within {0:?}")]
    Timeout(Duration),
    #[error("deleting NodeClaim {claim:?}: {error}")]
    Delete {
        claim: String,
        error: ReconcileError,
    },
}

/// Carries out `command` on the nodes of `nodes` it names; `now` seeds the replacements' names. Returns the
/// names of the replacements launched.
pub async fn execute<C>(
    ctx: &Context<C>,
    command: &Command,
    pools: &[NodePool],
    nodes: &[NodeInput],
    now: Timestamp,
) -> Result<Vec<String>, ExecuteError> {
    let candidates: Vec<&NodeInput> = command
        .candidates
        .iter()
        .filter_map(|t| nodes.iter().find(|n| n.claim_name() == t.claim))
        .collect();
    let node_names: Vec<String> = candidates
        .iter()
        .filter_map(|c| c.node_name().map(str::to_owned))
        .collect();
    if let Err(error) = taint(ctx, &candidates).await {
        untaint(ctx, &node_names).await;
        return Err(error);
    }
    let reason = command.reason.to_string();
    for candidate in &candidates {
        reason::write(ctx, candidate.claim_name(), Some(&reason)).await;
    }
    let claim_names: Vec<String> = candidates
        .iter()
        .map(|c| c.claim_name().to_owned())
        .collect();
    let replacements = match launch(ctx, command, pools, now).await {
        Ok(names) => names,
        Err((error, created)) => {
            abandon(ctx, &node_names, &claim_names, &created).await;
            return Err(error);
        }
    };
    count_decision(ctx, command);
    if !replacements.is_empty() {
        for candidate in &candidates {
            let note = format!("Launching NodeClaim: {}", command.reason);
            ctx.events
                .normal(candidate.claim.as_ref(), "DisruptionLaunching", note)
                .await;
            ctx.events
                .normal(
                    candidate.claim.as_ref(),
                    "DisruptionWaitingReadiness",
                    "Waiting on readiness to continue disruption".into(),
                )
                .await;
        }
        if let Err(error) = wait_initialized(ctx, &replacements).await {
            abandon(ctx, &node_names, &claim_names, &replacements).await;
            return Err(error);
        }
    }
    // The pods' destinations, existing and new, are counted on from now: nothing else disrupts them while the
    // candidates drain (provisioning renews this while the candidates' pods are still to move).
    let now = Timestamp::try_from(ctx.clock.now()).unwrap_or(now);
    ctx.nominations.nominate(
        command
            .destinations
            .iter()
            .chain(&replacements)
            .map(String::as_str),
        now,
        ctx.settings.batch_max,
    );
    for candidate in &candidates {
        delete(ctx, command, candidate).await?;
    }
    Ok(replacements)
}

/// Taints every candidate's Node (claims without a Node have nothing to taint).
async fn taint<C>(ctx: &Context<C>, candidates: &[&NodeInput]) -> Result<(), ExecuteError> {
    let api: Api<Node> = Api::all(ctx.client.clone());
    for node in candidates.iter().filter_map(|c| c.node.as_ref()) {
        let name = node.metadata.name.clone().unwrap_or_default();
        if let Some(patch) = disrupted_taint_patch(node) {
            calls::json_patch(&api, "tainting the node", &name, patch)
                .await
                .map_err(|error| ExecuteError::Taint { node: name, error })?;
        }
    }
    Ok(())
}

/// Creates the command's replacements from their pools' templates, as provisioning creates claims. On a
/// failure, the error and the names of those that were created.
async fn launch<C>(
    ctx: &Context<C>,
    command: &Command,
    pools: &[NodePool],
    now: Timestamp,
) -> Result<Vec<String>, (ExecuteError, Vec<String>)> {
    // The candidates and the instant name the replacements: unique per command, stable within it.
    let seed: Vec<String> = command
        .candidates
        .iter()
        .map(|t| t.claim.clone())
        .chain([now.to_string()])
        .collect();
    let seed: Vec<&str> = seed.iter().map(String::as_str).collect();
    let mut new_claims = Vec::with_capacity(command.replacements.len());
    for (i, planned) in command.replacements.iter().enumerate() {
        let Some(pool) = pools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(&planned.nodepool))
        else {
            return Err((
                ExecuteError::UnknownNodePool(planned.nodepool.clone()),
                Vec::new(),
            ));
        };
        let index = i.to_string();
        let mut claim_seed = seed.clone();
        claim_seed.push(&index);
        new_claims.push(NewClaim::made(
            claim::node_claim(pool, planned, &claim_seed),
            planned.nodepool.clone(),
            planned.pods.clone(),
            planned.cheapest.clone(),
        ));
    }
    let reason = command.reason.to_string().to_lowercase();
    // Replacements launch through the lifecycle controller's watch: they are waited for as a whole anyway.
    let created = create_claims(ctx, &new_claims, &reason, &|_| {}).await;
    let created: Vec<String> = created.into_iter().collect();
    if created.len() < new_claims.len() {
        let failed = new_claims.len() - created.len();
        return Err((ExecuteError::Create(failed, new_claims.len()), created));
    }
    Ok(created)
}

/// Waits until every replacement is `Initialized`; fails when one is deleted or the time runs out.
async fn wait_initialized<C>(ctx: &Context<C>, names: &[String]) -> Result<(), ExecuteError> {
    let started = Instant::now();
    loop {
        let claims = ctx.state.node_claims.state();
        let mut ready = 0;
        for name in names {
            let Some(claim) = claims
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(name))
            else {
                continue; // not in the store yet
            };
            if claim.metadata.deletion_timestamp.is_some() {
                return Err(ExecuteError::ReplacementDeleted(name.clone()));
            }
            if NodeState::of(claim, None, false).initialized {
                ready += 1;
            }
        }
        if ready == names.len() {
            return Ok(());
        }
        if started.elapsed() >= REPLACEMENT_TIMEOUT {
            return Err(ExecuteError::Timeout(REPLACEMENT_TIMEOUT));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Deletes one candidate's NodeClaim, with its events and metric.
async fn delete<C>(
    ctx: &Context<C>,
    command: &Command,
    candidate: &NodeInput,
) -> Result<(), ExecuteError> {
    let name = candidate.claim_name().to_owned();
    let note = format!("Disrupting NodeClaim: {}", command.reason);
    ctx.events
        .normal(
            candidate.claim.as_ref(),
            "DisruptionTerminating",
            note.clone(),
        )
        .await;
    if let Some(node) = &candidate.node {
        ctx.events
            .normal(node.as_ref(), "DisruptionTerminating", note)
            .await;
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    calls::delete(&api, &name)
        .await
        .map_err(|error| ExecuteError::Delete {
            claim: name.clone(),
            error,
        })?;
    let label = |key: &str| {
        candidate
            .claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(key).cloned())
            .unwrap_or_default()
    };
    ctx.metrics
        .lifecycle
        .disrupted
        .get_or_create(&DisruptedLabels {
            reason: command.reason.to_string().to_lowercase(),
            nodepool: label(labels::NODEPOOL),
            capacity_type: label(labels::CAPACITY_TYPE),
        })
        .inc();
    Ok(())
}

fn count_decision<C>(ctx: &Context<C>, command: &Command) {
    let (reason, consolidation_type) = method_labels(command.method);
    let decision = decision(command);
    let metrics = &ctx.metrics.disruption;
    metrics
        .decisions
        .get_or_create(&DecisionLabels {
            decision: decision.into(),
            reason: reason.clone(),
            consolidation_type: consolidation_type.into(),
        })
        .inc();
    let pools: BTreeSet<&str> = command
        .candidates
        .iter()
        .map(|t| t.nodepool.as_str())
        .collect();
    for nodepool in pools {
        metrics
            .decisions_by_nodepool
            .get_or_create(&NodePoolDecisionLabels {
                nodepool: nodepool.to_owned(),
                decision: decision.into(),
                reason: reason.clone(),
                consolidation_type: consolidation_type.into(),
            })
            .inc();
    }
}

/// `delete` or `replace`, as Karpenter's disruption metrics label a command.
pub fn decision(command: &Command) -> &'static str {
    if command.is_delete() {
        "delete"
    } else {
        "replace"
    }
}

/// Undoes a command: deletes the replacements created, takes the taint off the candidates' Nodes and their
/// `DisruptionReason` off their claims. Best effort: what fails is logged (a left-over taint is removed by
/// nothing else, so it is said loudly).
async fn abandon<C>(
    ctx: &Context<C>,
    nodes: &[String],
    claims: &[String],
    replacements: &[String],
) {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for name in replacements {
        if let Err(error) = calls::delete(&api, name).await {
            tracing::error!(nodeclaim = %name, %error, "could not delete the replacement of an abandoned disruption");
        }
    }
    untaint(ctx, nodes).await;
    for claim in claims {
        reason::write(ctx, claim, None).await;
    }
}

/// Takes `karpenter.sh/disrupted` off the Nodes named, as the apiserver has them now: the store need not show yet
/// a taint this command put on a moment ago (a taint refused right after another was made).
async fn untaint<C>(ctx: &Context<C>, names: &[String]) {
    let api: Api<Node> = Api::all(ctx.client.clone());
    for name in names {
        let node = match calls::timed("reading the node", api.get_opt(name)).await {
            Ok(Some(node)) => node,
            Ok(None) => continue,
            Err(error) => {
                tracing::error!(node = %name, %error, "could not read a Node to remove the karpenter.sh/disrupted taint of an abandoned disruption");
                continue;
            }
        };
        let Some(patch) = untaint_patch(&node) else {
            continue;
        };
        if let Err(error) = calls::json_patch(&api, "untainting the node", name, patch).await {
            tracing::error!(node = %name, %error, "could not remove the karpenter.sh/disrupted taint of an abandoned disruption");
        }
    }
}

/// The patch removing `karpenter.sh/disrupted`, or `None` when the Node does not have it.
fn untaint_patch(node: &Node) -> Option<serde_json::Value> {
    let taints = node.spec.as_ref()?.taints.clone()?;
    if !taints.iter().any(|t| t.key == DISRUPTED_TAINT) {
        return None;
    }
    let kept: Vec<_> = taints
        .into_iter()
        .filter(|t| t.key != DISRUPTED_TAINT)
        .collect();
    Some(taints_patch(node, kept))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(taints: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n", "resourceVersion": "7"},
            "spec": {"taints": taints},
        }))
        .expect("a Node")
    }

    #[test]
    fn untainting_keeps_the_other_taints() {
        let tainted = node(json!([
            {"key": "dedicated", "value": "a", "effect": "NoSchedule"},
            {"key": DISRUPTED_TAINT, "effect": "NoSchedule"},
        ]));
        assert_eq!(
            untaint_patch(&tainted),
            Some(json!([
                {"op": "test", "path": "/spec/taints", "value": [
                    {"key": "dedicated", "value": "a", "effect": "NoSchedule"},
                    {"key": DISRUPTED_TAINT, "effect": "NoSchedule"},
                ]},
                {"op": "add", "path": "/spec/taints", "value":
                    [{"key": "dedicated", "value": "a", "effect": "NoSchedule"}]},
            ]))
        );
        assert_eq!(
            untaint_patch(&node(json!([{"key": "dedicated", "effect": "NoSchedule"}]))),
            None
        );
    }
}
