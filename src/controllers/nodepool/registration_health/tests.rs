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
