//! A NodePool's `NodeRegistrationHealthy` condition (Karpenter's `nodepool.registrationhealth` controller,
//! the NodeClaim lifecycle's accounting in `lifecycle/{registration,liveness}.go`, and the outcome buffer of
//! `state/nodepoolhealth`): whether launches from the pool come up as Nodes. Each pool keeps its last
//! [`OUTCOMES`] registration outcomes in memory. A NodeClaim of the pool that registers adds a success and,
//! when the buffer with it is healthy, sets the condition `True`; one the lifecycle gives up on (launch or
//! registration timeout) adds a failure and, when the buffer with it is unhealthy (half of [`OUTCOMES`] failed),
//! sets it `False` with why. A change of the pool (its generation) or of its NodeClass (the class generation the
//! status last saw, `status.nodeClassObservedGeneration`) makes the condition `Unknown` and empties the buffer:
//! the fix a user made gets a fresh start. After a restart the buffer starts from the condition as written.
//!
//! The condition is informative: the pool's `Ready` does not depend on it (Karpenter's NodePool readiness
//! aggregates only `ValidationSucceeded` and `NodeClassReady`).

use super::super::kit::calls::{self, ReconcileError};
use super::super::Context;
use crate::api::condition::{self, Condition, FALSE, TRUE, UNKNOWN};
use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::engine::conditions::LAUNCHED;
use ::kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

pub const NODE_REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";
/// How many recent outcomes a pool's health is judged on (Karpenter's `BufferSize`).
pub const OUTCOMES: usize = 4;
/// A pool is unhealthy when this many of its last [`OUTCOMES`] failed (Karpenter: 50 % of the buffer size,
/// counted against the size, not against how many outcomes there are yet).
const UNHEALTHY_FAILURES: usize = OUTCOMES / 2;

/// The reason and message of a condition that is waiting for its first verdict (operatorpkg's `SetUnknown`).
pub const AWAITING_RECONCILIATION: (&str, &str) = (
    "AwaitingReconciliation",
    "object is awaiting reconciliation",
);
/// Why a pool is unhealthy when its last failed claim had launched (Karpenter's reason and message).
pub const REGISTRATION_FAILED: (&str, &str) = ("RegistrationFailed", "Failed to register node");
/// How many times a condition write is tried when the pool changed meanwhile.
const WRITE_ATTEMPTS: usize = 3;

/// What the recent outcomes say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// No outcome since the last reset.
    Unknown,
    Healthy,
    Unhealthy,
}

/// How one NodeClaim of a pool ended its way up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Its Node registered.
    Registered,
    /// The lifecycle gave up on it: not launched or not registered in time.
    TimedOut,
}

/// One pool's last [`OUTCOMES`] outcomes, oldest first (`true`: registered).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Outcomes(VecDeque<bool>);

impl Outcomes {
    fn push(&mut self, registered: bool) {
        if self.0.len() == OUTCOMES {
            self.0.pop_front();
        }
        self.0.push_back(registered);
    }

    fn health(&self) -> Health {
        if self.0.is_empty() {
            return Health::Unknown;
        }
        let failures = self.0.iter().filter(|registered| !**registered).count();
        if failures >= UNHEALTHY_FAILURES {
            Health::Unhealthy
        } else {
            Health::Healthy
        }
    }

    /// The health once `registered` is added, without adding it.
    fn health_with(&self, registered: bool) -> Health {
        let mut next = self.clone();
        next.push(registered);
        next.health()
    }

    /// Outcomes that give `health`: the least evidence of it (how Karpenter rebuilds its buffer after a
    /// restart from the condition).
    fn of(health: Health) -> Self {
        let mut outcomes = Outcomes::default();
        match health {
            Health::Unknown => {}
            Health::Healthy => outcomes.push(true),
            Health::Unhealthy => (0..UNHEALTHY_FAILURES).for_each(|_| outcomes.push(false)),
        }
        outcomes
    }
}

/// The outcomes of every pool, by pool UID; shared by the NodeClaim lifecycle (which adds outcomes) and the
/// NodePool status (which resets them). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct RegistrationHealth(Arc<Mutex<HashMap<String, Outcomes>>>);

impl RegistrationHealth {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Outcomes>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn health(&self, pool_uid: &str) -> Health {
        self.lock()
            .get(pool_uid)
            .map_or(Health::Unknown, Outcomes::health)
    }

    /// The health of `pool_uid` once `outcome` is added, without adding it.
    fn health_with(&self, pool_uid: &str, outcome: Outcome) -> Health {
        let registered = outcome == Outcome::Registered;
        self.lock().get(pool_uid).map_or_else(
            || Outcomes::default().health_with(registered),
            |o| o.health_with(registered),
        )
    }

    fn add(&self, pool_uid: &str, outcome: Outcome) {
        self.lock()
            .entry(pool_uid.to_owned())
            .or_default()
            .push(outcome == Outcome::Registered);
    }

    /// Replaces the outcomes of `pool_uid` by the least that give `health` (`Unknown`: none).
    pub fn set(&self, pool_uid: &str, health: Health) {
        self.lock()
            .insert(pool_uid.to_owned(), Outcomes::of(health));
    }

    /// Forgets the pools not in `live` (deleted pools).
    pub fn retain(&self, live: &HashSet<&str>) {
        self.lock().retain(|uid, _| live.contains(uid.as_str()));
    }
}

/// What the NodePool status pass does about registration health, decided on the pool and its class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reset {
    /// The buffer's health to start from when it is empty (after a restart): the condition as written.
    pub hydrate: Option<Health>,
    /// The pool or its class changed (or the condition is missing): set the condition `Unknown` and empty the
    /// buffer.
    pub reset: bool,
    /// `status.nodeClassObservedGeneration` to write.
    pub class_generation: Option<i64>,
}

/// The registration-health part of `pool`'s status pass, given its NodeClass (`None`: not found, and then
/// nothing is done: the condition is only kept for pools whose class exists) and the buffer's `health`.
pub fn reset(pool: &NodePool, class: Option<&EC2NodeClass>, health: Health) -> Option<Reset> {
    let class_generation = class?.metadata.generation;
    let status = pool.status.as_ref();
    let current = status
        .and_then(|s| s.conditions.as_deref())
        .and_then(|c| condition::get(c, NODE_REGISTRATION_HEALTHY));
    let hydrate = match (health, current.map(|c| c.status.as_str())) {
        (Health::Unknown, Some(TRUE)) => Some(Health::Healthy),
        (Health::Unknown, Some(FALSE)) => Some(Health::Unhealthy),
        _ => None,
    };
    let reset = match current {
        None => true,
        Some(c) => {
            status.and_then(|s| s.node_class_observed_generation) != class_generation
                || c.observed_generation != pool.metadata.generation
        }
    };
    Some(Reset {
        hydrate,
        reset,
        class_generation,
    })
}

/// The condition to write once `outcome` is counted, given the pool's health with it (`with`), the condition
/// as it is, and the claim the outcome is about; `None` when the condition stays as it is. A success makes the
/// pool healthy only when the buffer says so; a failure makes it unhealthy only when the buffer says so and it
/// is not unhealthy already (so the first failure's reason stays).
fn verdict(
    outcome: Outcome,
    with: Health,
    current: Option<&Condition>,
    claim: &NodeClaim,
) -> Option<(&'static str, String, String)> {
    let current_status = current.map(|c| c.status.as_str());
    match outcome {
        Outcome::Registered if with == Health::Healthy && current_status != Some(TRUE) => {
            Some((TRUE, NODE_REGISTRATION_HEALTHY.to_owned(), String::new()))
        }
        Outcome::TimedOut if with == Health::Unhealthy && current_status != Some(FALSE) => {
            let launched = crate::engine::conditions::condition(claim, LAUNCHED);
            let (reason, message) = match launched {
                Some(c) if c.status == TRUE => (
                    REGISTRATION_FAILED.0.to_owned(),
                    REGISTRATION_FAILED.1.to_owned(),
                ),
                Some(c) => (c.reason.clone(), c.message.clone()),
                // Karpenter initializes the claim's Launched to Unknown with these before its first launch.
                None => (
                    AWAITING_RECONCILIATION.0.to_owned(),
                    AWAITING_RECONCILIATION.1.to_owned(),
                ),
            };
            Some((FALSE, reason, message))
        }
        _ => None,
    }
}

/// The pool `claim` counts for: named by its `karpenter.sh/nodepool` label and owning it (a claim that is not
/// the pool's, such as one applied by hand, does not count).
fn owned_by<'a>(claim: &NodeClaim, pool: &'a NodePool) -> Option<&'a str> {
    let uid = pool.metadata.uid.as_deref()?;
    claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "NodePool" && o.uid == uid)
        .then_some(uid)
}

/// Counts `outcome` for the pool of `claim` and writes the pool's condition when that changes it. Failures are
/// logged, not returned: the claim's own lifecycle has moved on (it is registered or deleted), as in Karpenter,
/// where a failed write loses the outcome.
pub async fn record<C>(ctx: &Context<C>, claim: &NodeClaim, outcome: Outcome) {
    let Some(pool_name) = claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::NODEPOOL))
    else {
        return;
    };
    if let Err(error) = try_record(ctx, claim, pool_name, outcome).await {
        tracing::warn!(nodepool = %pool_name, %error, ?outcome, "could not update the nodepool's registration health");
    }
}

async fn try_record<C>(
    ctx: &Context<C>,
    claim: &NodeClaim,
    pool_name: &str,
    outcome: Outcome,
) -> Result<(), ReconcileError> {
    let api: Api<NodePool> = Api::all(ctx.client.clone());
    let health = &ctx.registration_health;
    for _ in 0..WRITE_ATTEMPTS {
        let Some(pool) = calls::timed("reading the nodepool", api.get_opt(pool_name)).await? else {
            return Ok(());
        };
        let Some(uid) = owned_by(claim, &pool) else {
            return Ok(());
        };
        let mut conditions = pool
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let current = condition::get(&conditions, NODE_REGISTRATION_HEALTHY);
        let with = health.health_with(uid, outcome);
        if let Some((status, reason, message)) = verdict(outcome, with, current, claim) {
            let now = super::super::nodeclass::rfc3339(ctx.clock.now());
            condition::set_status(
                &mut conditions,
                NODE_REGISTRATION_HEALTHY,
                status,
                &reason,
                &message,
                &now,
                pool.metadata.generation,
            );
            // The whole list is written back, so the write is tied to the version it was read from.
            let patch = json!({
                "metadata": {"resourceVersion": pool.metadata.resource_version},
                "status": {"conditions": conditions},
            });
            let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
            let write = api.patch_status(pool_name, &params, &patch);
            match calls::timed("patching the nodepool status", write).await {
                Ok(_) => {
                    tracing::info!(nodepool = pool_name, status, %reason, "nodepool registration health changed")
                }
                Err(ReconcileError::Kube(::kube::Error::Api(s))) if s.code == 409 => continue,
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        health.add(uid, outcome);
        return Ok(());
    }
    Err(ReconcileError::Invalid(format!(
        "nodepool {pool_name} kept changing; {WRITE_ATTEMPTS} writes refused"
    )))
}

/// Sets `NodeRegistrationHealthy` `Unknown` in `conditions` as of `now` for generation `generation`.
pub fn set_unknown(conditions: &mut Vec<Condition>, now: &str, generation: Option<i64>) -> bool {
    let (reason, message) = AWAITING_RECONCILIATION;
    condition::set_status(
        conditions,
        NODE_REGISTRATION_HEALTHY,
        UNKNOWN,
        reason,
        message,
        now,
        generation,
    )
}

#[cfg(test)]
mod tests;
