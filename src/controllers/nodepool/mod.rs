//! NodePool status: `status.resources` (the summed capacity of the pool's NodeClaims, `nodes` counted),
//! `status.nodes`, and the `DisruptionAllowed` condition ([`budget_condition`]: which budget binds and when
//! that changes), the readiness conditions `ValidationSucceeded`, `NodeClassReady` and `Ready`
//! ([`readiness`]), and the reset of `NodeRegistrationHealthy` with `status.nodeClassObservedGeneration` when the
//! pool or its class changes ([`registration_health`]), kept current from the cluster state and written only when
//! they change. The limits check the provisioner applies at creation lives in [`usage`].

pub mod budget_condition;
pub mod readiness;
pub mod registration_health;
#[cfg(test)]
mod status_tests;

use super::kit::calls;
use super::nodeclass::rfc3339;
use super::{Context, Error};
use crate::api::condition;
use crate::api::nodepool::NodePool;
use crate::cloud::CloudProvider;
use crate::engine::usage::{self, Usage};
use ::kube::api::{Patch, PatchParams};
use ::kube::Api;
use budget_condition::{budget_condition, BudgetCondition, DISRUPTION_ALLOWED};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use registration_health::Health;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// The longest the loop waits without a cluster change; failed writes are retried this often.
const RESYNC_INTERVAL: Duration = Duration::from_secs(60);
/// The shortest wait for a budget window change, so a wall clock that disagrees with it cannot spin the loop.
const MIN_WAIT: Duration = Duration::from_secs(1);

/// Writes every pool's status on each change of the cluster state, and again when a budget window opens or
/// closes, until the state watch ends.
pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    let mut changed = ctx.state.changed.clone();
    loop {
        let next_change = write_statuses(&ctx).await;
        let wait = match Timestamp::try_from(ctx.clock.now()) {
            Ok(now) => {
                budget_condition::wait_before_next_pass(now, next_change, RESYNC_INTERVAL, MIN_WAIT)
            }
            Err(_) => RESYNC_INTERVAL,
        };
        tokio::select! {
            result = changed.changed() => if result.is_err() {
                return Ok(());
            },
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Patches the status of each pool whose usage or condition differs from what it shows; returns the next
/// instant a budget window of any pool opens or closes. Failures are logged; the next pass retries.
async fn write_statuses<C>(ctx: &Context<C>) -> Option<Timestamp> {
    let clock = ctx.clock.now();
    let now = match Timestamp::try_from(clock) {
        Ok(now) => now,
        Err(error) => {
            tracing::error!(%error, "no nodepool status pass: the clock is out of range");
            return None;
        }
    };
    let claims = ctx.state.node_claims.state();
    let nodes = ctx.state.nodes.state();
    let usage = usage::by_pool(claims.iter().map(|c| c.as_ref()));
    let nodes: HashMap<&str, &Node> = nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n.as_ref())))
        .collect();
    let counts = budget_condition::pool_counts(claims.iter().map(|c| c.as_ref()), &nodes);
    let classes = ctx.state.node_classes.state();
    let api: Api<NodePool> = Api::all(ctx.client.clone());
    let transition_time = rfc3339(clock);
    let mut next_change: Option<Timestamp> = None;
    let pools = ctx.state.node_pools.state();
    let live: HashSet<&str> = pools
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    ctx.registration_health.retain(&live);
    for pool in &pools {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let pool_usage = usage.get(&name).cloned().unwrap_or_default();
        let condition = budget_condition(pool, counts.get(&name).copied().unwrap_or_default(), now);
        next_change = next_change.into_iter().chain(condition.until).min();
        let class = classes
            .iter()
            .find(|c| {
                c.metadata.name.as_deref()
                    == Some(pool.spec.template.spec.node_class_ref.name.as_str())
            })
            .map(|c| c.as_ref());
        let readiness = readiness::verdicts(pool, class);
        let registration = registration_reset(ctx, pool, class);
        let parts = StatusParts {
            usage: &pool_usage,
            budgets: &condition,
            readiness: &readiness,
            registration: registration.as_ref(),
        };
        let Some(patch) = status_patch(pool, &parts, &transition_time) else {
            continue;
        };
        let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
        let write = api.patch_status(&name, &params, &patch);
        match calls::timed("patching the nodepool status", write).await {
            Ok(_) => tracing::debug!(nodepool = %name, "updated nodepool status"),
            // The pool changed since the store's copy (often: our own last write, not yet seen): its watch
            // event brings another pass.
            Err(calls::ReconcileError::Kube(::kube::Error::Api(status))) if status.code == 409 => {
                tracing::debug!(nodepool = %name, "nodepool changed meanwhile; its status is written on the next pass")
            }
            Err(error) => {
                tracing::warn!(nodepool = %name, %error, "could not update the nodepool status")
            }
        }
    }
    next_change
}

/// The registration-health part of `pool`'s pass, with its effect on the shared outcome buffer applied: rebuilt
/// from the condition after a restart, emptied when the pool or its class changed.
fn registration_reset<C>(
    ctx: &Context<C>,
    pool: &NodePool,
    class: Option<&crate::api::ec2nodeclass::EC2NodeClass>,
) -> Option<registration_health::Reset> {
    let uid = pool.metadata.uid.as_deref()?;
    let health = &ctx.registration_health;
    let reset = registration_health::reset(pool, class, health.health(uid))?;
    if let Some(hydrate) = reset.hydrate {
        health.set(uid, hydrate);
    }
    if reset.reset {
        health.set(uid, Health::Unknown);
    }
    Some(reset)
}

/// What one pool's status should show.
struct StatusParts<'a> {
    usage: &'a Usage,
    budgets: &'a BudgetCondition,
    readiness: &'a [readiness::Verdict],
    registration: Option<&'a registration_health::Reset>,
}

/// The merge patch that brings `pool`'s status to `parts`, or `None` when it already shows them. `now` (RFC
/// 3339) becomes a condition's `lastTransitionTime` when its status changes.
fn status_patch(pool: &NodePool, parts: &StatusParts<'_>, now: &str) -> Option<serde_json::Value> {
    let StatusParts {
        usage,
        budgets,
        readiness,
        registration,
    } = parts;
    let mut status = serde_json::Map::new();
    let mut patch = serde_json::Map::new();
    let current = pool.status.as_ref();
    let resources = usage::status_resources(usage);
    let current_resources = current.and_then(|s| s.resources.as_ref());
    if current_resources != Some(&resources) || current.and_then(|s| s.nodes) != Some(usage.nodes) {
        // A merge patch merges maps: resources the pool no longer uses are set to null to drop them.
        let mut resources_patch = serde_json::Map::new();
        for name in current_resources.into_iter().flatten().map(|(k, _)| k) {
            resources_patch.insert(name.clone(), serde_json::Value::Null);
        }
        for (name, amount) in resources {
            resources_patch.insert(name, json!(amount));
        }
        status.insert("resources".into(), resources_patch.into());
        status.insert("nodes".into(), usage.nodes.into());
    }
    let mut conditions = current
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut condition_changed = condition::set(
        &mut conditions,
        DISRUPTION_ALLOWED,
        budgets.allowed,
        budgets.reason,
        &budgets.message,
        now,
        pool.metadata.generation,
    );
    for verdict in readiness.iter() {
        condition_changed |= condition::set(
            &mut conditions,
            verdict.type_,
            verdict.ok,
            &verdict.reason,
            &verdict.message,
            now,
            pool.metadata.generation,
        );
    }
    if let Some(registration) = registration {
        if registration.reset {
            condition_changed |=
                registration_health::set_unknown(&mut conditions, now, pool.metadata.generation);
        }
        let observed = current.and_then(|s| s.node_class_observed_generation);
        if observed != registration.class_generation {
            status.insert(
                "nodeClassObservedGeneration".into(),
                json!(registration.class_generation),
            );
        }
    }
    if condition_changed {
        // A merge patch replaces a list whole, so the other conditions are written back as read. The
        // resourceVersion makes the write fail (409) if anyone changed the pool since, instead of undoing
        // their change.
        status.insert("conditions".into(), json!(conditions));
        patch.insert(
            "metadata".into(),
            json!({"resourceVersion": pool.metadata.resource_version}),
        );
    }
    if status.is_empty() {
        return None;
    }
    patch.insert("status".into(), status.into());
    Some(patch.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Resources;
    use budget_condition::{BLOCKED_BY_BUDGET, BUDGETS_ALLOW};

    /// A Karpenter condition another writer owns; it must survive every patch.
    fn ready() -> serde_json::Value {
        json!({"type": "Ready", "status": "True", "reason": "Ready", "message": "",
               "lastTransitionTime": "2026-11-20T00:00:00Z"})
    }

    fn allowed_condition(message: &str) -> serde_json::Value {
        json!({"type": "DisruptionAllowed", "status": "True", "reason": "BudgetsAllow", "message": message,
               "lastTransitionTime": "2026-11-22T00:00:00Z", "observedGeneration": 3})
    }

    fn pool(status: serde_json::Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "general", "generation": 3, "resourceVersion": "42"},
            "spec": {"template": {"spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"}}}},
            "status": status
        }))
        .expect("a valid NodePool")
    }

    fn usage(cpu: &str, nodes: i64) -> Usage {
        Usage {
            resources: Resources::from_quantities([("cpu", cpu)]).expect("a quantity"),
            nodes,
        }
    }

    fn budgets(allowed: bool, message: &str) -> BudgetCondition {
        BudgetCondition {
            allowed,
            reason: if allowed {
                BUDGETS_ALLOW
            } else {
                BLOCKED_BY_BUDGET
            },
            message: message.to_owned(),
            until: None,
        }
    }

    const NOW: &str = "2026-11-23T10:00:00Z";

    /// The patch of `pool` for `usage` and `budgets`, with no readiness verdicts nor registration health.
    fn plain_patch(
        pool: &NodePool,
        usage: &Usage,
        budgets: &BudgetCondition,
    ) -> Option<serde_json::Value> {
        let parts = StatusParts {
            usage,
            budgets,
            readiness: &[],
            registration: None,
        };
        status_patch(pool, &parts, NOW)
    }

    /// The patch over a status that shows 2 CPUs on one node, Karpenter's Ready, and DisruptionAllowed True
    /// with the message `shown`.
    fn patch_over(
        shown: &str,
        usage: Usage,
        budgets: BudgetCondition,
    ) -> Option<serde_json::Value> {
        let current = pool(json!({"resources": {"cpu": "2", "nodes": "1"}, "nodes": 1,
                                  "conditions": [ready(), allowed_condition(shown)]}));
        plain_patch(&current, &usage, &budgets)
    }

    #[test]
    fn a_pool_without_status_gets_usage_and_the_condition() {
        let patch = plain_patch(&pool(json!({})), &usage("2", 1), &budgets(true, "m"));
        assert_eq!(
            patch,
            Some(json!({
                "metadata": {"resourceVersion": "42"},
                "status": {"resources": {"cpu": "2", "nodes": "1"}, "nodes": 1, "conditions": [
                    {"type": "DisruptionAllowed", "status": "True", "reason": "BudgetsAllow", "message": "m",
                     "lastTransitionTime": NOW, "observedGeneration": 3}
                ]}
            }))
        );
    }

    #[test]
    fn an_unchanged_status_is_not_written() {
        assert_eq!(patch_over("m", usage("2", 1), budgets(true, "m")), None);
    }

    #[test]
    fn a_usage_change_alone_leaves_the_conditions_out() {
        assert_eq!(
            patch_over("m", usage("4", 2), budgets(true, "m")),
            Some(json!({"status": {"resources": {"cpu": "4", "nodes": "2"}, "nodes": 2}}))
        );
    }

    #[test]
    fn resources_no_longer_used_are_removed() {
        let current = pool(
            json!({"resources": {"cpu": "2", "memory": "4Gi", "nodes": "1"}, "nodes": 1,
                                  "conditions": [allowed_condition("m")]}),
        );
        let patch = plain_patch(&current, &Usage::default(), &budgets(true, "m")).expect("a patch");
        assert_eq!(
            patch,
            json!({"status": {"resources": {"cpu": null, "memory": null, "nodes": "0"}, "nodes": 0}})
        );
    }

    #[test]
    fn a_new_message_keeps_the_transition_time_and_the_other_conditions() {
        assert_eq!(
            patch_over("old", usage("2", 1), budgets(true, "new")),
            Some(json!({"metadata": {"resourceVersion": "42"},
                        "status": {"conditions": [ready(), allowed_condition("new")]}}))
        );
    }

    #[test]
    fn a_status_flip_moves_the_transition_time() {
        assert_eq!(
            patch_over("m", usage("2", 1), budgets(false, "blocked")),
            Some(json!({"metadata": {"resourceVersion": "42"},
                        "status": {"conditions": [ready(),
                            {"type": "DisruptionAllowed", "status": "False", "reason": "BlockedByBudget",
                             "message": "blocked", "lastTransitionTime": NOW, "observedGeneration": 3}]}}))
        );
    }

    /// A pool whose class changed gets `NodeRegistrationHealthy` Unknown and the class generation it saw, in
    /// one write tied to the version read; the same pass over the written status writes nothing.
    #[test]
    fn a_registration_reset_writes_unknown_and_the_class_generation() {
        let current = pool(json!({"resources": {"cpu": "2", "nodes": "1"}, "nodes": 1,
                                  "nodeClassObservedGeneration": 4,
                                  "conditions": [allowed_condition("m")]}));
        let reset = registration_health::Reset {
            hydrate: None,
            reset: true,
            class_generation: Some(5),
        };
        let parts = StatusParts {
            usage: &usage("2", 1),
            budgets: &budgets(true, "m"),
            readiness: &[],
            registration: Some(&reset),
        };
        let patch = status_patch(&current, &parts, NOW).expect("a patch");
        assert_eq!(
            patch,
            json!({"metadata": {"resourceVersion": "42"},
                   "status": {"nodeClassObservedGeneration": 5, "conditions": [allowed_condition("m"),
                       {"type": "NodeRegistrationHealthy", "status": "Unknown",
                        "reason": "AwaitingReconciliation", "message": "object is awaiting reconciliation",
                        "lastTransitionTime": NOW, "observedGeneration": 3}]}})
        );
        let written: NodePool = {
            let mut p = current.clone();
            let status = p.status.get_or_insert_with(Default::default);
            status.node_class_observed_generation = Some(5);
            status.conditions =
                serde_json::from_value(patch["status"]["conditions"].clone()).expect("conditions");
            p
        };
        let settled = registration_health::Reset {
            reset: false,
            ..reset
        };
        let parts = StatusParts {
            registration: Some(&settled),
            ..parts
        };
        assert_eq!(status_patch(&written, &parts, NOW), None);
    }
}
