//! The NodePool status pass ([`write_statuses`]) against a scripted apiserver ([`crate::controllers::testkit`]):
//! what it writes from the cluster state (usage, `DisruptionAllowed`, readiness, registration health and the
//! class generation), that it writes nothing when the status already shows it, and what a 409 does.

use super::*;
use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::nodeclaim::NodeClaim;
use crate::controllers::state::ClusterState;
use crate::controllers::testkit::{self, apiserver, ApiServer, Exchange, Seen};
use serde_json::Value;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

const MERGE_PATCH: &str = "application/merge-patch+json";
/// The clock of every pass, as conditions carry it.
const NOW: &str = "2027-01-15T08:00:00Z";
const EARLIER: &str = "2027-01-01T00:00:00Z";

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn status_path(pool: &str) -> String {
    format!("/apis/karpenter.sh/v1/nodepools/{pool}/status")
}

/// The pool `name` (generation 3, version 42) of class `default`, with `disruption` and `status`.
fn pool_json(name: &str, disruption: Value, status: Value) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name, "uid": format!("{name}-uid"), "generation": 3, "resourceVersion": "42"},
        "spec": {
            "template": {"spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}},
            "disruption": disruption,
        },
        "status": status,
    })
}

fn pool(name: &str, status: Value) -> NodePool {
    serde_json::from_value(pool_json(name, json!({}), status)).expect("a NodePool")
}

/// The class `default` at generation 5, `Ready` as `ready` says.
fn class(ready: bool) -> EC2NodeClass {
    let condition = if ready {
        json!({"type": "Ready", "status": "True", "reason": "Ready", "message": "",
               "lastTransitionTime": EARLIER, "observedGeneration": 5})
    } else {
        json!({"type": "Ready", "status": "False", "reason": "UnhealthyDependents",
               "message": "SubnetsReady=False", "lastTransitionTime": EARLIER, "observedGeneration": 5})
    };
    serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default", "generation": 5},
        "spec": {"role": "R", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                 "subnetSelectorTerms": [{"tags": {"k": "v"}}],
                 "securityGroupSelectorTerms": [{"tags": {"k": "v"}}]},
        "status": {"conditions": [condition]},
    }))
    .expect("an EC2NodeClass")
}

/// An initialized claim of `pool` with 2 CPUs and 4Gi on its Node `node`.
fn claim(name: &str, pool: &str, node: &str) -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool}},
        "spec": {"requirements": [], "nodeClassRef":
            {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
        "status": {"nodeName": node, "capacity": {"cpu": "2", "memory": "4Gi"},
                   "conditions": [{"type": "Initialized", "status": "True", "reason": "Initialized",
                                   "message": "", "lastTransitionTime": EARLIER}]},
    }))
    .expect("a NodeClaim")
}

fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .expect("a Node")
}

/// A context over a scripted apiserver with these pools, classes, claims and nodes.
fn context(
    pools: Vec<NodePool>,
    classes: Vec<EC2NodeClass>,
    claims: Vec<NodeClaim>,
    nodes: Vec<Node>,
) -> (Context<()>, ApiServer) {
    let (client, server) = apiserver();
    let mut state = ClusterState::of(nodes, claims, vec![]);
    state.node_pools = crate::controllers::state::store_of(pools);
    state.node_classes = crate::controllers::state::store_of(classes);
    (testkit::context(client, (), state, t0()), server)
}

/// A condition written at [`NOW`] for the pool's generation.
fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": NOW, "observedGeneration": 3})
}

/// A status write of `pool` whose body is kept in `bodies`, answered with the pool.
fn kept_write(pool: &str, bodies: &Arc<Mutex<Vec<Value>>>) -> Exchange {
    let bodies = bodies.clone();
    let answer = pool_json(pool, json!({}), json!({}));
    Exchange::patch(&status_path(pool))
        .content_type(MERGE_PATCH)
        .check(move |seen: &Seen| bodies.lock().expect("lock").push(seen.body.clone()))
        .answer(200, answer)
}

/// Karpenter's readiness "should have status condition on nodePool as ready if nodeClass is ready", with usage
/// and registration health: a new pool gets, in one merge patch of its status subresource tied to the version
/// read, what its claims use (claims of other pools not counted), `DisruptionAllowed`, `ValidationSucceeded`,
/// `NodeClassReady` and `Ready` true, `NodeRegistrationHealthy` unknown, and the class generation it saw.
#[tokio::test]
async fn a_new_pool_gets_its_usage_readiness_and_class_generation_in_one_write() {
    let (ctx, mut server) = context(
        vec![pool("general", json!({}))],
        vec![class(true)],
        vec![
            claim("a", "general", "n-a"),
            claim("b", "general", "n-b"),
            claim("c", "batch", "n-c"),
        ],
        vec![node("n-a"), node("n-b"), node("n-c")],
    );
    let script = vec![Exchange::patch(&status_path("general"))
        .content_type(MERGE_PATCH)
        .check(|seen| {
            let allowed = &seen.body["status"]["conditions"][0];
            assert_eq!(
                (&allowed["type"], &allowed["status"], &allowed["reason"]),
                (&json!("DisruptionAllowed"), &json!("True"), &json!("BudgetsAllow")),
                "{allowed}"
            );
            let mut body = seen.body.clone();
            body["status"]["conditions"]
                .as_array_mut()
                .expect("conditions")
                .remove(0);
            assert_eq!(
                body,
                json!({
                    "metadata": {"resourceVersion": "42"},
                    "status": {
                        "resources": {"cpu": "4", "memory": "8Gi", "nodes": "2"},
                        "nodes": 2,
                        "conditions": [
                            condition("ValidationSucceeded", "True", "ValidationSucceeded", ""),
                            condition("NodeClassReady", "True", "NodeClassReady", ""),
                            condition("Ready", "True", "Ready", ""),
                            condition("NodeRegistrationHealthy", "Unknown", "AwaitingReconciliation",
                                "object is awaiting reconciliation"),
                        ],
                        "nodeClassObservedGeneration": 5,
                    },
                })
            );
        })
        .answer(200, pool_json("general", json!({}), json!({})))];
    server.serve(script, write_statuses(&ctx)).await;
}

/// The same pass over the status it wrote writes nothing: no request at all.
#[tokio::test]
async fn a_pool_already_showing_its_status_is_not_written() {
    let claims = || vec![claim("a", "general", "n-a")];
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let (ctx, mut server) = context(
        vec![pool("general", json!({}))],
        vec![class(true)],
        claims(),
        vec![node("n-a")],
    );
    let script = vec![kept_write("general", &bodies)];
    server.serve(script, write_statuses(&ctx)).await;
    let written = bodies.lock().expect("lock")[0]["status"].clone();
    let (ctx, mut server) = context(
        vec![pool("general", written)],
        vec![class(true)],
        claims(),
        vec![node("n-a")],
    );
    server.serve(vec![], write_statuses(&ctx)).await;
}

/// Karpenter's "should have status condition on nodePool as not ready when nodeClass is not ready": a ready
/// pool whose class stops being ready gets `NodeClassReady` false with the class's reason and message and
/// `Ready` false, both at the time of the change, the other conditions as they were; usage that did not change
/// is left out of the patch.
#[tokio::test]
async fn a_pool_whose_class_is_no_longer_ready_turns_not_ready() {
    let shown = |type_: &str| {
        json!({"type": type_, "status": "True", "reason": type_, "message": "",
               "lastTransitionTime": EARLIER, "observedGeneration": 3})
    };
    let status = json!({
        "resources": {"nodes": "0"}, "nodes": 0, "nodeClassObservedGeneration": 5,
        "conditions": [shown("ValidationSucceeded"), shown("NodeClassReady"), shown("Ready"),
                       shown("NodeRegistrationHealthy")],
    });
    let (ctx, mut server) = context(
        vec![pool("general", status)],
        vec![class(false)],
        vec![],
        vec![],
    );
    let script = vec![Exchange::patch(&status_path("general"))
        .content_type(MERGE_PATCH)
        .check(move |seen| {
            assert_eq!(seen.body["metadata"], json!({"resourceVersion": "42"}));
            let status = seen.body["status"].as_object().expect("a status");
            assert_eq!(
                status.keys().collect::<Vec<_>>(),
                ["conditions"],
                "usage and the class generation did not change"
            );
            let conditions = status["conditions"].as_array().expect("conditions");
            assert_eq!(conditions[0], shown("ValidationSucceeded"));
            assert_eq!(
                conditions[1],
                condition(
                    "NodeClassReady",
                    "False",
                    "UnhealthyDependents",
                    "SubnetsReady=False"
                )
            );
            assert_eq!(
                conditions[2],
                condition(
                    "Ready",
                    "False",
                    "UnhealthyDependents",
                    "NodeClassReady=False"
                )
            );
            assert_eq!(conditions[3], shown("NodeRegistrationHealthy"));
            assert_eq!(conditions[4]["type"], "DisruptionAllowed");
        })
        .answer(200, pool_json("general", json!({}), json!({})))];
    server.serve(script, write_statuses(&ctx)).await;
}

/// Karpenter's "should have status condition on nodePool as not ready when nodeClass does not exist": and with no
/// class there is no registration health nor class generation to write.
#[tokio::test]
async fn a_pool_without_its_class_is_not_ready_and_gets_no_class_generation() {
    let (ctx, mut server) = context(vec![pool("general", json!({}))], vec![], vec![], vec![]);
    let script = vec![Exchange::patch(&status_path("general"))
        .check(|seen| {
            let status = &seen.body["status"];
            assert!(
                status.get("nodeClassObservedGeneration").is_none(),
                "{status}"
            );
            let conditions = status["conditions"].as_array().expect("conditions");
            let types: Vec<&str> = conditions
                .iter()
                .filter_map(|c| c["type"].as_str())
                .collect();
            assert_eq!(
                types,
                [
                    "DisruptionAllowed",
                    "ValidationSucceeded",
                    "NodeClassReady",
                    "Ready"
                ]
            );
            assert_eq!(
                conditions[2],
                condition(
                    "NodeClassReady",
                    "False",
                    "NodeClassNotFound",
                    "NodeClass not found on cluster"
                )
            );
            assert_eq!(
                conditions[3],
                condition(
                    "Ready",
                    "False",
                    "UnhealthyDependents",
                    "NodeClassReady=False"
                )
            );
        })
        .answer(200, pool_json("general", json!({}), json!({})))];
    server.serve(script, write_statuses(&ctx)).await;
}

/// After a restart the registration health is rebuilt from the condition the pool shows (for its generation and
/// its class's): no write, and the shared buffer says healthy.
#[tokio::test]
async fn a_restart_rebuilds_the_registration_health_from_the_status_without_a_write() {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let (ctx, mut server) = context(
        vec![pool("general", json!({}))],
        vec![class(true)],
        vec![],
        vec![],
    );
    server
        .serve(vec![kept_write("general", &bodies)], write_statuses(&ctx))
        .await;
    let mut written = bodies.lock().expect("lock")[0]["status"].clone();
    for c in written["conditions"].as_array_mut().expect("conditions") {
        if c["type"] == "NodeRegistrationHealthy" {
            c["status"] = json!("True");
            c["reason"] = json!("NodeRegistrationHealthy");
            c["message"] = json!("");
        }
    }
    let (ctx, mut server) = context(
        vec![pool("general", written)],
        vec![class(true)],
        vec![],
        vec![],
    );
    server.serve(vec![], write_statuses(&ctx)).await;
    assert_eq!(
        ctx.registration_health.health("general-uid"),
        registration_health::Health::Healthy
    );
}

/// Karpenter's budget suite through the status: a budget of no nodes in force blocks disruption (`False`,
/// `BlockedByBudget`), and the pass returns when the budget window next changes, so the loop wakes for it.
#[tokio::test]
async fn a_blocking_budget_is_written_and_its_window_end_returned() {
    // t0 is Friday 2027-01-15 08:00 UTC: inside the 07:00–09:00 window.
    let disruption =
        json!({"budgets": [{"nodes": "0", "schedule": "0 7 * * *", "duration": "2h"}]});
    let pool: NodePool =
        serde_json::from_value(pool_json("general", disruption, json!({}))).expect("a NodePool");
    let (ctx, mut server) = context(
        vec![pool],
        vec![class(true)],
        vec![claim("a", "general", "n-a")],
        vec![node("n-a")],
    );
    let script = vec![Exchange::patch(&status_path("general"))
        .check(|seen| {
            let allowed = &seen.body["status"]["conditions"][0];
            assert_eq!(allowed["type"], "DisruptionAllowed");
            assert_eq!(allowed["status"], "False");
            assert_eq!(allowed["reason"], "BlockedByBudget");
            let message = allowed["message"].as_str().unwrap_or_default();
            assert!(message.contains("until 2027-01-15T09:00:00Z"), "{message}");
        })
        .answer(200, pool_json("general", json!({}), json!({})))];
    let next_change = server.serve(script, write_statuses(&ctx)).await;
    assert_eq!(
        next_change,
        Some("2027-01-15T09:00:00Z".parse().expect("a time"))
    );
}

/// A pool changed since the store's copy (409) is not retried in the pass (its watch event brings another);
/// the next pool is still written, and the next pass writes the refused status again, unchanged.
#[tokio::test]
async fn a_conflict_is_left_for_the_next_pass_and_does_not_stop_the_other_pools() {
    let (ctx, mut server) = context(
        vec![pool("a", json!({})), pool("b", json!({}))],
        vec![class(true)],
        vec![],
        vec![],
    );
    let bodies = Arc::new(Mutex::new(Vec::new()));
    // The store's order is not fixed: the answer goes by the path.
    let write = |bodies: Arc<Mutex<Vec<(String, Value)>>>| {
        Exchange::patch("/apis/karpenter.sh/v1/nodepools/*").answer_with(move |seen| {
            bodies
                .lock()
                .expect("lock")
                .push((seen.path.clone(), seen.body.clone()));
            if seen.path == status_path("a") {
                (
                    409,
                    testkit::status(409, "Conflict", "the object has been modified"),
                )
            } else {
                (200, pool_json("b", json!({}), json!({})))
            }
        })
    };
    let script = vec![write(bodies.clone()), write(bodies.clone())];
    server.serve(script, write_statuses(&ctx)).await;
    let first = std::mem::take(&mut *bodies.lock().expect("lock"));
    let mut paths: Vec<&str> = first.iter().map(|(path, _)| path.as_str()).collect();
    paths.sort();
    assert_eq!(paths, [status_path("a"), status_path("b")]);
    let script = vec![write(bodies.clone()), write(bodies.clone())];
    server.serve(script, write_statuses(&ctx)).await;
    let refused = |writes: &[(String, Value)]| {
        writes
            .iter()
            .find(|(path, _)| *path == status_path("a"))
            .map(|(_, body)| body.clone())
    };
    let again = bodies.lock().expect("lock").clone();
    assert!(refused(&first).is_some());
    assert_eq!(refused(&again), refused(&first));
}
