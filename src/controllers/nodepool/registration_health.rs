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

use super::super::nodeclaim::calls::{self, ReconcileError};
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
mod tests {
    use super::*;

    fn outcomes(list: &[bool]) -> Outcomes {
        let mut o = Outcomes::default();
        list.iter().for_each(|r| o.push(*r));
        o
    }

    /// Karpenter's `state/nodepoolhealth` suite: an empty buffer is unknown; half of the buffer size failing
    /// is unhealthy, even before the buffer is full; older outcomes fall out; setting a status rebuilds the
    /// least buffer that gives it.
    #[test]
    fn health_is_judged_on_the_last_four_outcomes() {
        assert_eq!(outcomes(&[]).health(), Health::Unknown);
        assert_eq!(outcomes(&[true]).health(), Health::Healthy);
        assert_eq!(outcomes(&[false]).health(), Health::Healthy);
        assert_eq!(outcomes(&[false, false]).health(), Health::Unhealthy);
        assert_eq!(
            outcomes(&[true, false, true, false]).health(),
            Health::Unhealthy
        );
        assert_eq!(
            outcomes(&[false, false, true, true, true]).health(),
            Health::Healthy
        );
        assert_eq!(
            outcomes(&[true, true, true, true, false]).health(),
            Health::Healthy
        );
        assert_eq!(outcomes(&[false]).health_with(false), Health::Unhealthy);
        for health in [Health::Unknown, Health::Healthy, Health::Unhealthy] {
            assert_eq!(Outcomes::of(health).health(), health);
        }
        // One success after a rebuilt unhealthy buffer is not enough; two are.
        let mut rebuilt = Outcomes::of(Health::Unhealthy);
        assert_eq!(rebuilt.health_with(true), Health::Unhealthy);
        rebuilt.push(true);
        rebuilt.push(true);
        assert_eq!(rebuilt.health_with(true), Health::Healthy);
    }

    fn pool(status: serde_json::Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "general", "uid": "pool-uid", "generation": 2},
            "spec": {"template": {"spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}},
            "status": status,
        }))
        .expect("a NodePool")
    }

    fn class(generation: i64) -> EC2NodeClass {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default", "generation": generation},
            "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "R",
                     "subnetSelectorTerms": [{"tags": {"k": "v"}}],
                     "securityGroupSelectorTerms": [{"tags": {"k": "v"}}]},
        }))
        .expect("an EC2NodeClass")
    }

    fn health_condition(status: &str, generation: i64) -> serde_json::Value {
        json!({"type": NODE_REGISTRATION_HEALTHY, "status": status, "reason": "r", "message": "m",
               "lastTransitionTime": "2026-11-20T00:00:00Z", "observedGeneration": generation})
    }

    /// Karpenter's registrationhealth suite.
    #[test]
    fn a_change_of_the_pool_or_its_class_starts_registration_health_over() {
        // "should not set NodeRegistrationHealthy status condition on nodePool when nodeClass does not exist"
        assert_eq!(reset(&pool(json!({})), None, Health::Unknown), None);
        // A pool that never had the condition gets it, Unknown, with the class generation it saw.
        assert_eq!(
            reset(&pool(json!({})), Some(&class(1)), Health::Unknown),
            Some(Reset {
                hydrate: None,
                reset: true,
                class_generation: Some(1)
            })
        );
        // "...as Unknown and reset the NodeRegistrationHealthBuffer if the nodeClass observed generation doesn't
        // match with that on nodePool"
        let unhealthy = pool(json!({"nodeClassObservedGeneration": 1,
                                    "conditions": [health_condition("False", 2)]}));
        let changed_class = reset(&unhealthy, Some(&class(2)), Health::Unhealthy).expect("a pass");
        assert!(changed_class.reset);
        assert_eq!(changed_class.class_generation, Some(2));
        // "...as Unknown if the nodePool is updated"
        let updated = pool(json!({"nodeClassObservedGeneration": 1,
                                  "conditions": [health_condition("False", 1)]}));
        assert!(
            reset(&updated, Some(&class(1)), Health::Unhealthy)
                .expect("a pass")
                .reset
        );
        // "should not set ... as Unknown if it is already set to true / false", and the buffer is rebuilt from
        // the condition after a restart.
        for (status, health) in [("True", Health::Healthy), ("False", Health::Unhealthy)] {
            let settled = pool(json!({"nodeClassObservedGeneration": 1,
                                      "conditions": [health_condition(status, 2)]}));
            assert_eq!(
                reset(&settled, Some(&class(1)), Health::Unknown),
                Some(Reset {
                    hydrate: Some(health),
                    reset: false,
                    class_generation: Some(1)
                })
            );
            // A buffer that has outcomes is not rebuilt.
            let kept = reset(&settled, Some(&class(1)), Health::Healthy).expect("a pass");
            assert_eq!(kept.hydrate, None);
        }
    }

    fn claim(launched: Option<(&str, &str, &str)>) -> NodeClaim {
        let conditions: Vec<serde_json::Value> = launched
            .map(|(status, reason, message)| {
                json!({"type": "Launched", "status": status, "reason": reason, "message": message,
                       "lastTransitionTime": "2026-11-20T00:00:00Z"})
            })
            .into_iter()
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "general-abc", "labels": {"karpenter.sh/nodepool": "general"},
                         "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                                              "name": "general", "uid": "pool-uid"}]},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []},
            "status": {"conditions": conditions},
        }))
        .expect("a NodeClaim")
    }

    fn current(status: &str) -> Condition {
        serde_json::from_value(health_condition(status, 2)).expect("a condition")
    }

    /// Karpenter's lifecycle suites (liveness: "should update NodeRegistrationHealthy status condition to False
    /// if the nodeClaim fails to register / launch"; registration: "should set NodeRegistrationHealthy status
    /// condition to True ..."): the reason of a failure is the claim's launch failure, or a registration failure
    /// when it launched.
    #[test]
    fn outcomes_set_the_condition_only_when_the_buffer_says_so() {
        let launched = claim(Some(("True", "Launched", "")));
        assert_eq!(
            verdict(Outcome::Registered, Health::Healthy, None, &launched),
            Some((TRUE, NODE_REGISTRATION_HEALTHY.to_owned(), String::new()))
        );
        assert_eq!(
            verdict(
                Outcome::Registered,
                Health::Healthy,
                Some(&current("True")),
                &launched
            ),
            None
        );
        assert_eq!(
            verdict(
                Outcome::Registered,
                Health::Unhealthy,
                Some(&current("False")),
                &launched
            ),
            None,
            "one success does not outweigh the failures"
        );
        assert_eq!(
            verdict(Outcome::TimedOut, Health::Healthy, None, &launched),
            None
        );
        assert_eq!(
            verdict(
                Outcome::TimedOut,
                Health::Unhealthy,
                Some(&current("True")),
                &launched
            ),
            Some((
                FALSE,
                "RegistrationFailed".to_owned(),
                "Failed to register node".to_owned()
            ))
        );
        assert_eq!(
            verdict(
                Outcome::TimedOut,
                Health::Unhealthy,
                Some(&current("False")),
                &launched
            ),
            None,
            "the first failure's reason stays"
        );
        let not_launched = claim(Some((
            "False",
            "NodeClassNotReady",
            "class default is not ready",
        )));
        assert_eq!(
            verdict(Outcome::TimedOut, Health::Unhealthy, None, &not_launched),
            Some((
                FALSE,
                "NodeClassNotReady".to_owned(),
                "class default is not ready".to_owned()
            ))
        );
        assert_eq!(
            verdict(Outcome::TimedOut, Health::Unhealthy, None, &claim(None)),
            Some((
                FALSE,
                "AwaitingReconciliation".to_owned(),
                "object is awaiting reconciliation".to_owned()
            ))
        );
    }

    /// "should ignore ... NodePools which aren't managed": only a claim the pool owns counts for it.
    #[test]
    fn only_the_pools_own_claims_count() {
        let owner = pool(json!({}));
        assert_eq!(owned_by(&claim(None), &owner), Some("pool-uid"));
        let mut orphan = claim(None);
        orphan.metadata.owner_references = None;
        assert_eq!(owned_by(&orphan, &owner), None);
    }

    /// The NodePool as the apiserver holds it at `resource_version`.
    fn pool_at(resource_version: &str) -> serde_json::Value {
        let mut pool = serde_json::to_value(pool(json!({}))).expect("json");
        pool["metadata"]["resourceVersion"] = json!(resource_version);
        pool
    }

    fn scripted_context() -> (Context<()>, crate::controllers::testkit::ApiServer) {
        use crate::controllers::{state::ClusterState, testkit};
        let (client, server) = testkit::apiserver();
        let now = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        let state = ClusterState::of(vec![], vec![], vec![]);
        (testkit::context(client, (), state, now), server)
    }

    const POOL: &str = "/apis/karpenter.sh/v1/nodepools/general";

    /// A status write checked against the version it was read from: the healthy verdict is written with
    /// that version.
    fn healthy_write_at(resource_version: &'static str) -> crate::controllers::testkit::Exchange {
        crate::controllers::testkit::Exchange::patch(&format!("{POOL}/status")).check(move |seen| {
            assert_eq!(seen.body["metadata"]["resourceVersion"], resource_version);
            let written = &seen.body["status"]["conditions"][0];
            assert_eq!(written["type"], NODE_REGISTRATION_HEALTHY);
            assert_eq!(written["status"], TRUE);
        })
    }

    /// The write of Karpenter's "should add NodeRegistrationHealthy=true on the nodePool if registration
    /// succeeds", when the pool changed between the read and the write (409): the pool is read again and the
    /// verdict written over the fresh version, and the outcome is counted once.
    #[tokio::test]
    async fn a_health_write_refused_for_a_stale_pool_is_retried_on_a_fresh_read() {
        use crate::controllers::testkit::Exchange;
        let (ctx, mut server) = scripted_context();
        let script = vec![
            Exchange::get(POOL).answer(200, pool_at("1")),
            healthy_write_at("1").fail(409, "Conflict"),
            Exchange::get(POOL).answer(200, pool_at("2")),
            healthy_write_at("2").answer(200, pool_at("3")),
        ];
        server
            .serve(script, record(&ctx, &claim(None), Outcome::Registered))
            .await;
        assert_eq!(ctx.registration_health.health("pool-uid"), Health::Healthy);
        assert_eq!(
            ctx.registration_health
                .health_with("pool-uid", Outcome::TimedOut),
            Health::Healthy,
            "one success was counted, not two"
        );
    }

    /// A pool that changes under every write is given up on after [`WRITE_ATTEMPTS`] refusals (no endless
    /// loop against a busy object), and the outcome is not counted.
    #[tokio::test]
    async fn a_pool_that_keeps_changing_is_given_up_on_after_three_refusals() {
        use crate::controllers::testkit::Exchange;
        let (ctx, mut server) = scripted_context();
        let script = (0..WRITE_ATTEMPTS)
            .flat_map(|_| {
                [
                    Exchange::get(POOL).answer(200, pool_at("1")),
                    healthy_write_at("1").fail(409, "Conflict"),
                ]
            })
            .collect();
        server
            .serve(script, record(&ctx, &claim(None), Outcome::Registered))
            .await;
        assert_eq!(ctx.registration_health.health("pool-uid"), Health::Unknown);
    }

    /// Karpenter's "should not update NodeRegistrationHealthy status condition if nodePool owning the nodeClaim
    /// is deleted": a pool gone is neither written nor counted.
    #[tokio::test]
    async fn the_health_of_a_deleted_pool_is_neither_written_nor_counted() {
        use crate::controllers::testkit::Exchange;
        let (ctx, mut server) = scripted_context();
        let script = vec![Exchange::get(POOL).fail(404, "NotFound")];
        server
            .serve(script, record(&ctx, &claim(None), Outcome::TimedOut))
            .await;
        assert_eq!(ctx.registration_health.health("pool-uid"), Health::Unknown);
    }

    #[test]
    fn the_shared_buffer_counts_per_pool_and_forgets_deleted_pools() {
        let health = RegistrationHealth::default();
        health.add("a", Outcome::TimedOut);
        assert_eq!(health.health("a"), Health::Healthy);
        assert_eq!(
            health.health_with("a", Outcome::TimedOut),
            Health::Unhealthy
        );
        assert_eq!(health.health("b"), Health::Unknown);
        health.add("a", Outcome::TimedOut);
        assert_eq!(health.health("a"), Health::Unhealthy);
        health.retain(&HashSet::from(["b"]));
        assert_eq!(health.health("a"), Health::Unknown);
        health.set("b", Health::Unhealthy);
        assert_eq!(health.health("b"), Health::Unhealthy);
    }
}
