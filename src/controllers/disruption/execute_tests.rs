//! Carrying out a disruption command ([`super::execute`]) against a scripted apiserver
//! ([`crate::controllers::testkit`]): the requests and their order for a delete and a replace, and what an
//! abandoned command undoes (a taint refused, a replacement not created, replacements not initialized in time).

use super::super::metrics::disruption::{DecisionLabels, NodePoolDecisionLabels};
use super::execute::{execute, ExecuteError, REPLACEMENT_TIMEOUT};
use crate::api::nodeclaim::NodeClaim;
use crate::api::requirements::{Requirement, Requirements};
use crate::catalog::Resources;
use crate::controllers::metrics::DisruptedLabels;
use crate::controllers::state::ClusterState;
use crate::controllers::testkit::{self, ApiServer, Exchange, Seen};
use crate::controllers::Context;
use crate::disruption::{Command, Method, NodeInput, Target, DISRUPTED_TAINT};
use crate::scheduling::{PlannedClaim, TypeName};
use ::kube::runtime::reflector::{self, store::Writer};
use ::kube::runtime::watcher;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

const CLAIMS: &str = "/apis/karpenter.sh/v1/nodeclaims";
const POOL: &str = "general";

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn now() -> Timestamp {
    Timestamp::try_from(t0()).expect("in range")
}

/// The claim `c-<id>` of the Node `n-<id>`, as the apiserver has it (`conditions` its status conditions).
fn claim_json(id: &str, conditions: Value) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {
            "name": format!("c-{id}"), "uid": format!("uid-{id}"), "resourceVersion": "3",
            "labels": {"karpenter.sh/nodepool": POOL, "karpenter.sh/capacity-type": "spot"},
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [],
        },
        "status": {"nodeName": format!("n-{id}"), "conditions": conditions},
    })
}

fn claim(id: &str) -> NodeClaim {
    serde_json::from_value(claim_json(id, json!([]))).expect("a NodeClaim")
}

/// The taint every test Node carries besides kerf's.
fn other_taint() -> Value {
    json!({"key": "dedicated", "value": "a", "effect": "NoSchedule"})
}

fn disrupted_taint() -> Value {
    json!({"key": DISRUPTED_TAINT, "effect": "NoSchedule"})
}

fn node_json(id: &str, taints: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("n-{id}"), "uid": format!("node-uid-{id}"), "resourceVersion": "5"},
        "spec": {"taints": taints},
    })
}

fn node(id: &str) -> Node {
    serde_json::from_value(node_json(id, json!([other_taint()]))).expect("a Node")
}

fn input(id: &str) -> NodeInput {
    NodeInput::new(claim(id), Some(node(id)), Vec::new())
}

fn target(id: &str) -> Target {
    Target {
        claim: format!("c-{id}"),
        node: Some(format!("n-{id}")),
        nodepool: POOL.into(),
    }
}

fn planned() -> PlannedClaim {
    let mut requirements = Requirements::new();
    requirements.add(Requirement::one_of(
        crate::api::labels::NODEPOOL,
        [POOL.to_owned()],
    ));
    PlannedClaim {
        nodepool: POOL.into(),
        requirements,
        instance_types: vec![TypeName::new("m5.large")].into(),
        pods: vec!["default/a".into()],
        requests: Resources::from_quantities([("cpu", "1"), ("pods", "1")]).expect("quantities"),
        cheapest: None,
    }
}

fn command(method: Method, ids: &[&str], replacements: usize) -> Command {
    Command {
        method,
        reason: method.reason(),
        candidates: ids.iter().map(|id| target(id)).collect(),
        replacements: (0..replacements).map(|_| planned()).collect(),
        savings: 0.1,
        budgets: Vec::new(),
        destinations: vec!["n-destination".into()],
    }
}

/// The writer of a claims store, as the watch writes it: tests show a replacement, then show it initialized.
type ClaimsWriter = Arc<Mutex<Writer<NodeClaim>>>;

/// A context whose cluster state holds the candidates' claims and Nodes, and the writer of its claims' store.
fn scripted(ids: &[&str]) -> (Arc<Context<()>>, ApiServer, ClaimsWriter) {
    let (client, server) = testkit::apiserver();
    let mut state = ClusterState::of(
        ids.iter().map(|id| node(id)).collect(),
        ids.iter().map(|id| claim(id)).collect(),
        Vec::new(),
    );
    let (reader, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    for id in ids {
        writer.apply_watcher_event(&watcher::Event::InitApply(claim(id)));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    state.node_claims = reader;
    let ctx = testkit::context(client, (), state, t0());
    (Arc::new(ctx), server, Arc::new(Mutex::new(writer)))
}

/// The JSON patch adding `karpenter.sh/disrupted:NoSchedule` to `n-<id>`, tested against its taints as read.
fn taint(id: &str) -> Exchange {
    Exchange::patch(&format!("/api/v1/nodes/n-{id}"))
        .content_type("application/json-patch+json")
        .body(json!([
            {"op": "test", "path": "/spec/taints", "value": [other_taint()]},
            {"op": "add", "path": "/spec/taints", "value": [other_taint(), disrupted_taint()]},
        ]))
        .answer(
            200,
            node_json(id, json!([other_taint(), disrupted_taint()])),
        )
}

/// The fresh read of `n-<id>` an untaint makes and, when the answer has the taint, the patch taking it off.
fn untaint(id: &str) -> Vec<Exchange> {
    let tainted = json!([other_taint(), disrupted_taint()]);
    vec![
        Exchange::get(&format!("/api/v1/nodes/n-{id}")).answer(200, node_json(id, tainted.clone())),
        Exchange::patch(&format!("/api/v1/nodes/n-{id}"))
            .content_type("application/json-patch+json")
            .body(json!([
                {"op": "test", "path": "/spec/taints", "value": tainted},
                {"op": "add", "path": "/spec/taints", "value": [other_taint()]},
            ]))
            .answer(200, node_json(id, json!([other_taint()]))),
    ]
}

fn disruption_reason(reason: &str) -> Value {
    json!({"type": "DisruptionReason", "status": "True", "reason": reason, "message": reason,
           "lastTransitionTime": "2027-01-15T08:00:00Z"})
}

/// The fresh read of `c-<id>` and the status write that sets its `DisruptionReason` to `reason` (`None`: takes
/// it off), with the `resourceVersion` read as precondition.
fn reason_written(id: &str, reason: Option<&'static str>) -> Vec<Exchange> {
    let path = format!("{CLAIMS}/c-{id}");
    let stored = match reason {
        // Before a command the claim has no DisruptionReason; an abandoned one has it.
        Some(_) => claim_json(id, json!([])),
        None => claim_json(id, json!([disruption_reason("Drifted")])),
    };
    vec![
        Exchange::get(&path).answer(200, stored.clone()),
        Exchange::patch(&format!("{path}/status"))
            .content_type("application/merge-patch+json")
            .check(move |seen| {
                assert_eq!(
                    seen.body["metadata"]["resourceVersion"], "3",
                    "{}",
                    seen.body
                );
                let conditions = seen.body["status"]["conditions"]
                    .as_array()
                    .expect("the whole conditions list");
                let written: Vec<&Value> = conditions
                    .iter()
                    .filter(|c| c["type"] == "DisruptionReason")
                    .collect();
                match reason {
                    Some(reason) => {
                        assert_eq!(written.len(), 1, "{}", seen.body);
                        assert_eq!(written[0]["status"], "True");
                        assert_eq!(written[0]["reason"], reason);
                    }
                    None => assert!(written.is_empty(), "{}", seen.body),
                }
            })
            .answer(200, stored),
    ]
}

/// A core/v1 Event in `default` with `reason` about the `kind` named `name`, whose message contains `message`.
fn event_on(
    kind: &'static str,
    name: String,
    reason: &'static str,
    message: &'static str,
) -> Exchange {
    testkit::event(reason, message).check(move |seen| {
        let about = &seen.body["involvedObject"];
        assert_eq!(
            (about["kind"].as_str(), about["name"].as_str()),
            (Some(kind), Some(name.as_str()))
        );
    })
}

/// The Events on a candidate's claim and Node and the delete of its claim; `check` runs on the delete.
fn deleted(
    id: &str,
    reason: &'static str,
    check: impl FnOnce(&Seen) + Send + 'static,
) -> Vec<Exchange> {
    vec![
        event_on(
            "NodeClaim",
            format!("c-{id}"),
            "DisruptionTerminating",
            reason,
        ),
        event_on("Node", format!("n-{id}"), "DisruptionTerminating", reason),
        Exchange::delete(&format!("{CLAIMS}/c-{id}"))
            .check(check)
            .answer(200, claim_json(id, json!([]))),
    ]
}

/// The create of a replacement: checked and answered with a UID, and shown in the store (not initialized)
/// as the watch would; its name is kept in `names`.
fn replacement_created(writer: &ClaimsWriter, names: &Arc<Mutex<Vec<String>>>) -> Exchange {
    let (writer, names) = (writer.clone(), names.clone());
    Exchange::post(CLAIMS).answer_with(move |seen| {
        let body = &seen.body;
        assert_eq!(
            body["metadata"]["labels"]["karpenter.sh/nodepool"], POOL,
            "{body}"
        );
        assert_eq!(
            body["metadata"]["ownerReferences"][0]["uid"], "pool-uid",
            "{body}"
        );
        let types = body["spec"]["requirements"]
            .as_array()
            .expect("requirements")
            .iter()
            .find(|r| r["key"] == crate::api::labels::INSTANCE_TYPE)
            .expect("an instance-type requirement")
            .clone();
        assert_eq!(types["values"], json!(["m5.large"]));
        let name = body["metadata"]["name"]
            .as_str()
            .expect("a name")
            .to_owned();
        assert!(name.starts_with("general-"), "{name}");
        let mut created = body.clone();
        created["metadata"]["uid"] = json!(format!("uid-{name}"));
        let object: NodeClaim = serde_json::from_value(created.clone()).expect("a NodeClaim");
        lock(&writer).apply_watcher_event(&watcher::Event::Apply(object));
        lock(&names).push(name);
        (201, created)
    })
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn decisions(ctx: &Context<()>, decision: &str, reason: &str, consolidation_type: &str) -> u64 {
    let metrics = &ctx.metrics.disruption;
    let total = metrics
        .decisions
        .get_or_create(&DecisionLabels {
            decision: decision.into(),
            reason: reason.into(),
            consolidation_type: consolidation_type.into(),
        })
        .get();
    let by_pool = metrics
        .decisions_by_nodepool
        .get_or_create(&NodePoolDecisionLabels {
            nodepool: POOL.into(),
            decision: decision.into(),
            reason: reason.into(),
            consolidation_type: consolidation_type.into(),
        })
        .get();
    assert_eq!(total, by_pool, "one pool: the same count by pool");
    total
}

fn disrupted(ctx: &Context<()>, reason: &str) -> u64 {
    ctx.metrics
        .lifecycle
        .disrupted
        .get_or_create(&DisruptedLabels {
            reason: reason.into(),
            nodepool: POOL.into(),
            capacity_type: "spot".into(),
        })
        .get()
}

fn nominated(ctx: &Context<()>, node: &str) -> bool {
    ctx.nominations.with(|n| n.is_nominated(node, now()))
}

/// A delete (emptiness): every candidate's Node is tainted and its claim marked before any claim is deleted;
/// then each claim is deleted after its Events, counted as disrupted; the decision is counted once, and the
/// destinations are nominated.
#[tokio::test]
async fn a_delete_taints_and_marks_every_candidate_then_deletes_them() {
    let (ctx, mut server, _) = scripted(&["a", "b"]);
    let command = command(Method::Emptiness, &["a", "b"], 0);
    let nodes = vec![input("a"), input("b")];
    let mut script = vec![taint("a"), taint("b")];
    script.extend(reason_written("a", Some("Empty")));
    script.extend(reason_written("b", Some("Empty")));
    script.extend(deleted("a", "Disrupting NodeClaim: Empty", |_| {}));
    script.extend(deleted("b", "Disrupting NodeClaim: Empty", |_| {}));
    let launched = server
        .serve(
            script,
            execute(&ctx, &command, &[testkit::node_pool(POOL)], &nodes, now()),
        )
        .await
        .expect("the command is carried out");
    assert!(launched.is_empty());
    assert_eq!(decisions(&ctx, "delete", "empty", "empty"), 1);
    assert_eq!(disrupted(&ctx, "empty"), 2);
    assert!(nominated(&ctx, "n-destination"));
}

/// A replace (drift) launches its replacement, waits while the store shows it not initialized (polling), and
/// deletes the candidate only once it is: the replacement is created from the pool's template, counted as
/// created for the reason, and nominated with the destinations.
#[tokio::test(start_paused = true)]
async fn a_replace_deletes_the_candidate_once_its_replacement_is_initialized() {
    let (ctx, mut server, writer) = scripted(&["a"]);
    let command = command(Method::Drift, &["a"], 1);
    let nodes = vec![input("a")];
    let names = Arc::new(Mutex::new(Vec::new()));
    let initialized = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut script = vec![taint("a")];
    script.extend(reason_written("a", Some("Drifted")));
    script.push(replacement_created(&writer, &names));
    script.push(event_on(
        "NodeClaim",
        "c-a".into(),
        "DisruptionLaunching",
        "Launching NodeClaim: Drifted",
    ));
    script.push(event_on(
        "NodeClaim",
        "c-a".into(),
        "DisruptionWaitingReadiness",
        "Waiting on readiness",
    ));
    let seen_initialized = initialized.clone();
    script.extend(deleted("a", "Disrupting NodeClaim: Drifted", move |_| {
        assert!(
            seen_initialized.load(std::sync::atomic::Ordering::SeqCst),
            "the candidate was deleted before its replacement was initialized"
        );
    }));
    // The lifecycle controller initializes the replacement a few polls after its create.
    let initialize = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let name = lock(&names)
            .first()
            .cloned()
            .expect("a replacement was created");
        let mut object = claim_json(
            "r",
            json!([
                {"type": "Initialized", "status": "True", "reason": "Initialized", "message": "",
                 "lastTransitionTime": "2027-01-15T08:00:00Z"},
            ]),
        );
        object["metadata"]["name"] = json!(name);
        let object: NodeClaim = serde_json::from_value(object).expect("a NodeClaim");
        initialized.store(true, std::sync::atomic::Ordering::SeqCst);
        lock(&writer).apply_watcher_event(&watcher::Event::Apply(object));
    };
    let pools = [testkit::node_pool(POOL)];
    let carried_out = execute(&ctx, &command, &pools, &nodes, now());
    let (launched, ()) = server
        .serve(script, async { tokio::join!(carried_out, initialize) })
        .await;
    let launched = launched.expect("the command is carried out");
    assert_eq!(launched, *lock(&names));
    assert_eq!(testkit::nodeclaims_created(&ctx, POOL, "drifted"), 1);
    assert_eq!(decisions(&ctx, "replace", "drifted", ""), 1);
    assert_eq!(disrupted(&ctx, "drifted"), 1);
    assert!(nominated(&ctx, &launched[0]));
    assert!(nominated(&ctx, "n-destination"));
}

/// A `DisruptionReason` write refused because the claim changed since it was read (409 on its
/// `resourceVersion`) reads the claim again and writes once more; a delete that fails ends the command with the
/// error: the candidate is not counted as disrupted.
#[tokio::test]
async fn a_conflicting_reason_write_is_tried_again_and_a_failed_delete_is_the_error() {
    let (ctx, mut server, _) = scripted(&["a"]);
    let command = command(Method::Expiration, &["a"], 0);
    let nodes = vec![input("a")];
    let mut script = vec![taint("a")];
    let mut conflicting = reason_written("a", Some("Expired"));
    let refused = conflicting.pop().expect("the write").fail(409, "Conflict");
    script.extend(conflicting);
    script.push(refused);
    script.extend(reason_written("a", Some("Expired")));
    let mut deleting = deleted("a", "Disrupting NodeClaim: Expired", |_| {});
    let failing = deleting
        .pop()
        .expect("the delete")
        .fail(500, "InternalError");
    script.extend(deleting);
    script.push(failing);
    let error = server
        .serve(
            script,
            execute(&ctx, &command, &[testkit::node_pool(POOL)], &nodes, now()),
        )
        .await
        .expect_err("the delete failed");
    assert!(
        matches!(&error, ExecuteError::Delete { claim, .. } if claim == "c-a"),
        "{error}"
    );
    assert_eq!(decisions(&ctx, "delete", "expired", ""), 1);
    assert_eq!(disrupted(&ctx, "expired"), 0);
}

/// A taint refused (409: the Node changed since it was read) abandons the command at once: no claim is marked,
/// launched or deleted, nothing is counted, and the taint already put on the other candidate's Node comes off
/// again — read fresh, as the store need not show a taint made a moment ago.
#[tokio::test]
async fn a_refused_taint_abandons_the_command_and_untaints_the_nodes_already_tainted() {
    let (ctx, mut server, _) = scripted(&["a", "b"]);
    let command = command(Method::Drift, &["a", "b"], 1);
    let nodes = vec![input("a"), input("b")];
    let mut script = vec![taint("a"), taint("b").fail(409, "Conflict")];
    script.extend(untaint("a"));
    // The refused Node has no taint to take off.
    script.push(
        Exchange::get("/api/v1/nodes/n-b").answer(200, node_json("b", json!([other_taint()]))),
    );
    let error = server
        .serve(
            script,
            execute(&ctx, &command, &[testkit::node_pool(POOL)], &nodes, now()),
        )
        .await
        .expect_err("the command is abandoned");
    assert!(
        matches!(&error, ExecuteError::Taint { node, .. } if node == "n-b"),
        "{error}"
    );
    assert_eq!(decisions(&ctx, "replace", "drifted", ""), 0);
    assert_eq!(testkit::nodeclaims_created(&ctx, POOL, "drifted"), 0);
    assert!(!nominated(&ctx, "n-destination"));
}

/// A replacement that cannot be created (500) abandons the command: the one that was created is deleted, the
/// candidate is untainted and its `DisruptionReason` taken off; the decision is not counted and nothing is
/// deleted or nominated.
#[tokio::test]
async fn a_replacement_not_created_abandons_the_command() {
    let (ctx, mut server, writer) = scripted(&["a"]);
    let command = command(Method::SingleNodeConsolidation, &["a"], 2);
    let nodes = vec![input("a")];
    let names = Arc::new(Mutex::new(Vec::new()));
    let mut script = vec![taint("a")];
    script.extend(reason_written("a", Some("Underutilized")));
    // The creates run in parallel: whichever comes first is created, the other fails.
    script.push(replacement_created(&writer, &names));
    script.push(Exchange::post(CLAIMS).fail(500, "InternalError"));
    let created_name = names.clone();
    script.push(Exchange::delete(&format!("{CLAIMS}/*")).check(move |seen| {
        let name = lock(&created_name).first().cloned().expect("a replacement");
        assert_eq!(
            seen.path,
            format!("{CLAIMS}/{name}"),
            "only the created replacement is deleted"
        );
    }));
    script.extend(untaint("a"));
    script.extend(reason_written("a", None));
    let error = server
        .serve(
            script,
            execute(&ctx, &command, &[testkit::node_pool(POOL)], &nodes, now()),
        )
        .await
        .expect_err("the command is abandoned");
    assert!(matches!(error, ExecuteError::Create(1, 2)), "{error}");
    assert_eq!(testkit::nodeclaims_created(&ctx, POOL, "underutilized"), 1);
    assert_eq!(decisions(&ctx, "replace", "underutilized", "single"), 0);
    assert_eq!(disrupted(&ctx, "underutilized"), 0);
    assert!(!nominated(&ctx, "n-destination"));
}

/// A replacement still not initialized after [`REPLACEMENT_TIMEOUT`] abandons the command: the replacement is
/// deleted, the candidate untainted and unmarked, and the candidate is not deleted. The decision was counted
/// when the replacement launched.
#[tokio::test(start_paused = true)]
async fn a_replacement_not_initialized_in_time_is_deleted_and_the_command_abandoned() {
    let (ctx, mut server, writer) = scripted(&["a"]);
    let command = command(Method::Drift, &["a"], 1);
    let names = Arc::new(Mutex::new(Vec::new()));
    let mut script = vec![taint("a")];
    script.extend(reason_written("a", Some("Drifted")));
    script.push(replacement_created(&writer, &names));
    script.push(event_on(
        "NodeClaim",
        "c-a".into(),
        "DisruptionLaunching",
        "Launching NodeClaim: Drifted",
    ));
    script.push(event_on(
        "NodeClaim",
        "c-a".into(),
        "DisruptionWaitingReadiness",
        "Waiting on readiness",
    ));
    let running = {
        let ctx = ctx.clone();
        let command = command.clone();
        tokio::spawn(async move {
            execute(
                &ctx,
                &command,
                &[testkit::node_pool(POOL)],
                &[input("a")],
                now(),
            )
            .await
        })
    };
    // The runtime idles (and the paused clock moves) only once the command waits on the store.
    server
        .serve(script, tokio::time::sleep(Duration::from_millis(1)))
        .await;
    assert_eq!(decisions(&ctx, "replace", "drifted", ""), 1);
    tokio::time::advance(REPLACEMENT_TIMEOUT).await;
    let name = lock(&names).first().cloned().expect("a replacement");
    let mut script = vec![Exchange::delete(&format!("{CLAIMS}/{name}"))];
    script.extend(untaint("a"));
    script.extend(reason_written("a", None));
    let error = server
        .serve(script, running)
        .await
        .expect("the command ends")
        .expect_err("the command is abandoned");
    assert!(matches!(error, ExecuteError::Timeout(_)), "{error}");
    assert_eq!(disrupted(&ctx, "drifted"), 0);
    assert!(!nominated(&ctx, &name));
}
