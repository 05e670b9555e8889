use super::node::delete_at_deadline;
use super::*;
use crate::api::nodeclaim::TERMINATION_TIMESTAMP;
use crate::cloud::sim::SimCloud;
use crate::controllers::metrics::{CodeLabels, ReasonLabels};
use crate::controllers::state::ClusterState;
use crate::controllers::testkit::{self, apiserver, ApiServer, Exchange};
use crate::disruption::DISRUPTED_TAINT;
use crate::kube::eviction::{EvictionVersion, MULTIPLE_PDBS_MESSAGE};
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

const CLAIM: &str = "/apis/karpenter.sh/v1/nodeclaims/c";
const MERGE_PATCH: &str = "application/merge-patch+json";
const PROVIDER_ID: &str = "aws:///us-west-2a/i-0123456789abcdef0";

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// A context over a scripted apiserver, an empty in-memory cloud and these objects.
fn context(
    nodes: Vec<Node>,
    claims: Vec<NodeClaim>,
    pods: Vec<Pod>,
) -> (Context<SimCloud>, ApiServer) {
    let (client, server) = apiserver();
    let state = ClusterState::of(nodes, claims, pods);
    let ctx = testkit::context(client, SimCloud::new("test", Vec::new()), state, t0());
    (ctx, server)
}

fn claim_json(extra_metadata: Value) -> Value {
    let mut claim = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "c", "resourceVersion": "7", "finalizers": [TERMINATION_FINALIZER]},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": [], "terminationGracePeriod": "1h30m"},
        "status": {"providerID": PROVIDER_ID},
    });
    for (key, value) in extra_metadata.as_object().into_iter().flatten() {
        claim["metadata"][key] = value.clone();
    }
    claim
}

fn claim(extra_metadata: Value) -> NodeClaim {
    serde_json::from_value(claim_json(extra_metadata)).expect("a nodeclaim")
}

fn deleting_claim() -> NodeClaim {
    claim(json!({"deletionTimestamp": "2026-11-23T00:00:00Z"}))
}

fn deleting_node() -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "n", "deletionTimestamp": "2026-11-23T00:00:00Z",
                     "finalizers": [TERMINATION_FINALIZER]},
        "spec": {"providerID": PROVIDER_ID},
    }))
    .expect("a node")
}

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
        "spec": {"containers": [], "nodeName": "n", "terminationGracePeriodSeconds": 600},
    }))
    .expect("a pod")
}

/// Karpenter's lifecycle "should annotate the node if the NodeClaim has a terminationGracePeriod": the claim
/// gets its deadline, written only over the version read, and an Event says when the pods will go.
#[tokio::test]
async fn a_claim_with_a_grace_period_is_stamped_with_its_deadline_under_its_version() {
    let (ctx, mut server) = context(vec![], vec![], vec![]);
    let claim = deleting_claim();
    let script = vec![
        Exchange::patch(CLAIM)
            .content_type(MERGE_PATCH)
            .body(json!({"metadata": {
                "resourceVersion": "7",
                "annotations": {TERMINATION_TIMESTAMP: "2026-11-23T01:30:00Z"},
            }}))
            .answer(200, claim_json(json!({}))),
        testkit::event(
            TERMINATION_GRACE_PERIOD_EXPIRING,
            "All pods will be deleted by 2026-11-23T01:30:00Z",
        ),
    ];
    server
        .serve(script, stamp_deadline(&ctx, &claim))
        .await
        .expect("stamped");
}

/// Node repair may stamp an earlier deadline at the same time: its write wins (409), and this one is
/// dropped without an error and without announcing a deadline that is not the claim's. A claim deleted
/// meanwhile (404) is no error either.
#[tokio::test]
async fn a_deadline_stamp_that_loses_a_race_is_dropped_without_an_event() {
    let (ctx, mut server) = context(vec![], vec![], vec![]);
    let claim = deleting_claim();
    let script = vec![
        Exchange::patch(CLAIM).fail(409, "Conflict"),
        Exchange::patch(CLAIM).fail(404, "NotFound"),
    ];
    let (conflict, gone) = server
        .serve(script, async {
            (
                stamp_deadline(&ctx, &claim).await,
                stamp_deadline(&ctx, &claim).await,
            )
        })
        .await;
    conflict.expect("a lost race is not an error");
    gone.expect("a claim gone is not an error");
}

/// Karpenter's lifecycle "should not change the annotation if the NodeClaim has a terminationGracePeriod and
/// the annotation already exists".
#[tokio::test]
async fn a_claim_that_has_a_deadline_is_not_stamped_again() {
    let (ctx, mut server) = context(vec![], vec![], vec![]);
    let claim = claim(json!({
        "deletionTimestamp": "2026-11-23T00:00:00Z",
        "annotations": {TERMINATION_TIMESTAMP: "2026-11-22T23:00:00Z"},
    }));
    server
        .serve(vec![], stamp_deadline(&ctx, &claim))
        .await
        .expect("nothing to do");
}

/// The termination conditions are written whole over the version read; when the claim moved on (409) or
/// went (404) the pass looks again instead of failing, while any other error is retried with backoff.
#[tokio::test]
async fn conditions_refused_for_a_claim_that_moved_on_mean_look_again() {
    let (ctx, mut server) = context(vec![], vec![], vec![]);
    let claim = deleting_claim();
    let conditions: Vec<crate::api::condition::Condition> = serde_json::from_value(json!([{
        "type": "Drained", "status": "True", "reason": "Drained", "message": "",
        "lastTransitionTime": "2026-11-23T00:00:00Z",
    }]))
    .expect("conditions");
    let written = json!({
        "metadata": {"resourceVersion": "7"},
        "status": {"conditions": conditions},
    });
    let status = format!("{CLAIM}/status");
    let script = vec![
        Exchange::patch(&status)
            .content_type(MERGE_PATCH)
            .body(written)
            .answer(200, claim_json(json!({}))),
        Exchange::patch(&status).fail(409, "Conflict"),
        Exchange::patch(&status).fail(404, "NotFound"),
        Exchange::patch(&status).fail(500, "InternalError"),
    ];
    let outcomes = server
        .serve(script, async {
            let mut outcomes = Vec::new();
            for _ in 0..4 {
                outcomes.push(write_conditions(&ctx, &claim, &conditions).await);
            }
            outcomes
        })
        .await;
    let outcomes: Vec<_> = outcomes.into_iter().map(|o| o.ok()).collect();
    assert_eq!(outcomes, [Some(true), Some(false), Some(false), None]);
}

/// Karpenter's terminator "should delete a pod with less than terminationGracePeriodSeconds remaining before
/// nodeTerminationTime": deleted (not evicted, so PDBs do not hold it) with the grace that is left, counted
/// and reported.
#[tokio::test]
async fn a_pod_out_of_time_is_deleted_with_the_grace_left_and_reported() {
    let (ctx, mut server) = context(vec![], vec![], vec![]);
    let script = vec![
        Exchange::delete("/api/v1/namespaces/ns/pods/p")
            .check(|seen| assert_eq!(seen.body["gracePeriodSeconds"], 540, "{}", seen.body))
            .answer(200, serde_json::to_value(pod()).expect("json")),
        testkit::namespaced_event("ns", "Disrupted"),
    ];
    server
        .serve(script, delete_at_deadline(&ctx, &pod(), 540))
        .await
        .expect("deleted");
    assert_eq!(forced_deletions(&ctx), 1);
}

/// Karpenter's terminator "should succeed with no event when the pod is not found", for the deletion at the
/// deadline: a pod gone already is success, neither counted nor reported.
#[tokio::test]
async fn a_pod_gone_before_its_deadline_deletion_is_neither_counted_nor_reported() {
    let (ctx, mut server) = context(vec![], vec![], vec![]);
    let script = vec![Exchange::delete("/api/v1/namespaces/ns/pods/p").fail(404, "NotFound")];
    server
        .serve(script, delete_at_deadline(&ctx, &pod(), 1))
        .await
        .expect("a pod gone is success");
    assert_eq!(forced_deletions(&ctx), 0);
}

fn forced_deletions(ctx: &Context<SimCloud>) -> u64 {
    ctx.metrics
        .termination
        .pods_drained
        .get_or_create(&ReasonLabels {
            reason: "termination_grace_period_elapsed".into(),
        })
        .get()
}

/// Karpenter's node termination "should delete nodeclaims associated with nodes": a kerf Node deleted by
/// someone else has its claim deleted, and waits for the claim's termination to release it.
#[tokio::test]
async fn a_deleted_node_deletes_its_claim_and_waits_for_it() {
    let (ctx, mut server) = context(vec![], vec![claim(json!({}))], vec![]);
    let script = vec![Exchange::delete(CLAIM).answer(
        200,
        claim_json(json!({"deletionTimestamp": "2026-11-23T00:00:00Z"})),
    )];
    let action = server
        .serve(script, node_deleted(Arc::new(deleting_node()), &ctx))
        .await
        .expect("the claim is deleted");
    assert_eq!(action, Action::requeue(INSTANCE_RECHECK));
}

/// Karpenter's node termination "should delete nodes without nodeclaims": with no claim and its instance
/// gone, the Node's finalizer is removed, by index under a test of the list.
#[tokio::test]
async fn a_deleted_node_without_a_claim_or_instance_is_let_go() {
    let (ctx, mut server) = context(vec![], vec![], vec![]);
    let script = vec![Exchange::patch("/api/v1/nodes/n")
        .content_type("application/json-patch+json")
        .body(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": [TERMINATION_FINALIZER]},
            {"op": "remove", "path": "/metadata/finalizers/0"},
        ]))
        .answer(200, json!({"metadata": {"name": "n"}}))];
    let action = server
        .serve(script, node_deleted(Arc::new(deleting_node()), &ctx))
        .await
        .expect("let go");
    assert_eq!(action, Action::await_change());
}

const EVICT_P: &str = "/api/v1/namespaces/ns/pods/p/eviction";
const BUDGET: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// The controller's state around `ctx`, evicting (policy/v1) through the same scripted apiserver.
fn termination(ctx: Context<SimCloud>) -> Termination<SimCloud> {
    Termination {
        evictor: Evictor::new(ctx.client.clone(), EvictionVersion::V1),
        ctx: Arc::new(ctx),
        volume_attachments: reflector::store().0,
        node_events: Mutex::new(HashMap::new()),
    }
}

/// Node `n` of the claim, tainted `karpenter.sh/disrupted` already (the drain evicts at once).
fn tainted_node() -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "n"},
        "spec": {"providerID": PROVIDER_ID,
                 "taints": [{"key": DISRUPTED_TAINT, "effect": "NoSchedule"}]},
    }))
    .expect("a node")
}

/// A claim being deleted without a termination grace period: no deadline, nothing is deleted at one.
fn ungraced_claim() -> NodeClaim {
    let mut claim = deleting_claim();
    claim.spec.termination_grace_period = None;
    claim
}

fn pod_named(name: &str, uid: &str) -> Pod {
    let mut pod = pod();
    pod.metadata.name = Some(name.into());
    pod.metadata.uid = Some(uid.into());
    pod
}

fn now() -> Timestamp {
    Timestamp::try_from(t0()).expect("a timestamp")
}

fn eviction_requests(ctx: &Context<SimCloud>, code: &str) -> u64 {
    ctx.metrics
        .termination
        .eviction_requests
        .get_or_create(&CodeLabels { code: code.into() })
        .get()
}

fn pods_evicted(ctx: &Context<SimCloud>) -> u64 {
    ctx.metrics
        .termination
        .pods_drained
        .get_or_create(&ReasonLabels {
            reason: "evicted".into(),
        })
        .get()
}

fn accepted() -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success", "code": 201})
}

/// A `FailedDraining` Warning on Node `n` whose message contains `message`.
fn failed_draining(message: &'static str) -> Exchange {
    testkit::event("FailedDraining", message).check(|seen| {
        assert_eq!(seen.body["type"], "Warning", "{}", seen.body);
        assert_eq!(seen.body["involvedObject"]["name"], "n", "{}", seen.body);
    })
}

/// Karpenter's eviction "should succeed with an evicted event when there are no PDBs" and "should increment
/// PodsDrainedTotal metric when a pod is evicted": the pod's eviction is posted with its UID, counted under
/// 200 and as drained, and an `Evicted` Event goes to the pod; the node is not drained while the pod is bound.
#[tokio::test]
async fn an_accepted_eviction_is_counted_and_reported_on_the_pod() {
    let (ctx, mut server) = context(vec![tainted_node()], vec![], vec![pod()]);
    let t = termination(ctx);
    let script = vec![
        Exchange::post(EVICT_P)
            .body(json!({
                "apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": "p", "namespace": "ns"},
                "deleteOptions": {"preconditions": {"uid": "u-1"}},
            }))
            .answer(201, accepted()),
        testkit::namespaced_event("ns", "Evicted"),
    ];
    let claim = ungraced_claim();
    let drained = server
        .serve(script, drain_node(&t, &claim, &tainted_node(), now()))
        .await
        .expect("a drain pass");
    assert!(!drained, "the pod is bound until it is gone");
    assert_eq!(eviction_requests(&t.ctx, "200"), 1);
    assert_eq!(pods_evicted(&t.ctx), 1);
}

/// Karpenter's eviction "should return a NodeDrainError event when a PDB is blocking": a 429 leaves the pod
/// (not drained, not counted as drained), counts under 429, warns the Node, and the next pass asks again,
/// without a second Warning within the Event window.
#[tokio::test]
async fn a_pdb_refusal_keeps_the_pod_warns_the_node_once_and_is_retried() {
    let (ctx, mut server) = context(vec![tainted_node()], vec![], vec![pod()]);
    let t = termination(ctx);
    let script = vec![
        Exchange::post(EVICT_P).answer(429, testkit::status(429, "TooManyRequests", BUDGET)),
        failed_draining("Failed to drain node, ns/p: Cannot evict pod as it would violate"),
        Exchange::post(EVICT_P).answer(429, testkit::status(429, "TooManyRequests", BUDGET)),
    ];
    let claim = ungraced_claim();
    let node = tainted_node();
    let (first, second) = server
        .serve(script, async {
            (
                drain_node(&t, &claim, &node, now()).await,
                drain_node(&t, &claim, &node, now()).await,
            )
        })
        .await;
    assert!(!first.expect("a blocked eviction is no error"));
    assert!(!second.expect("a blocked eviction is no error"));
    assert_eq!(eviction_requests(&t.ctx, "429"), 2);
    assert_eq!(pods_evicted(&t.ctx), 0);
}

/// What a PDB-blocked drain does to its claim's termination: the claim says `Drained=Unknown` (`Draining`),
/// written over the version read, and the claim is looked at again after the drain's recheck (Karpenter
/// requeues a drain in progress) instead of failing into backoff.
#[tokio::test]
async fn a_blocked_drain_marks_the_claim_draining_and_requeues_it() {
    let (ctx, mut server) = context(vec![tainted_node()], vec![], vec![pod()]);
    let t = Arc::new(termination(ctx));
    let script = vec![
        Exchange::post(EVICT_P).answer(429, testkit::status(429, "TooManyRequests", BUDGET)),
        failed_draining("ns/p"),
        Exchange::patch(&format!("{CLAIM}/status"))
            .content_type(MERGE_PATCH)
            .check(|seen| {
                assert_eq!(seen.body["metadata"]["resourceVersion"], "7");
                let conditions = &seen.body["status"]["conditions"];
                assert_eq!(conditions.as_array().map(Vec::len), Some(1), "{conditions}");
                assert_eq!(conditions[0]["type"], "Drained");
                assert_eq!(conditions[0]["status"], "Unknown");
                assert_eq!(conditions[0]["reason"], "Draining");
            })
            .answer(200, claim_json(json!({}))),
    ];
    let action = server
        .serve(script, terminate_claim(Arc::new(ungraced_claim()), t))
        .await
        .expect("a pass that waits");
    assert_eq!(action, Action::requeue(DRAIN_RECHECK));
}

/// Karpenter's eviction "should succeed with no event when the pod is not found" and "should succeed with no
/// event when the pod UID conflicts": a pod gone (404) or replaced under its name (409) is success, without an
/// Event and not counted as drained; each answer is counted under its own code.
#[tokio::test]
async fn pods_gone_or_replaced_are_success_without_an_event() {
    let pods = vec![pod_named("p", "u-1"), pod_named("q", "u-2")];
    let (ctx, mut server) = context(vec![tainted_node()], vec![], pods);
    let t = termination(ctx);
    // The two evictions are in flight together: answered by path, in whatever order they come.
    let answer = |seen: &testkit::Seen| match seen.path.as_str() {
        EVICT_P => (
            404,
            testkit::status(404, "NotFound", "pods \"p\" not found"),
        ),
        "/api/v1/namespaces/ns/pods/q/eviction" => {
            assert_eq!(seen.body["deleteOptions"]["preconditions"]["uid"], "u-2");
            (
                409,
                testkit::status(409, "Conflict", "the UID precondition failed"),
            )
        }
        other => panic!("an eviction of {other}"),
    };
    let script = vec![
        Exchange::post("/api/v1/namespaces/ns/pods/*").answer_with(answer),
        Exchange::post("/api/v1/namespaces/ns/pods/*").answer_with(answer),
    ];
    let claim = ungraced_claim();
    let drained = server
        .serve(script, drain_node(&t, &claim, &tainted_node(), now()))
        .await
        .expect("gone pods are no error");
    assert!(!drained, "the next pass sees them gone");
    assert_eq!(eviction_requests(&t.ctx, "404"), 1);
    assert_eq!(eviction_requests(&t.ctx, "409"), 1);
    assert_eq!(pods_evicted(&t.ctx), 0);
}

/// Karpenter's eviction "should return a NodeDrainError event when two PDBs refer to the same pod": the
/// apiserver answers 500 with its message; counted under 500 and reported on the Node like a PDB's refusal.
#[tokio::test]
async fn two_pdbs_on_a_pod_are_reported_as_a_failed_drain() {
    let (ctx, mut server) = context(vec![tainted_node()], vec![], vec![pod()]);
    let t = termination(ctx);
    let script = vec![
        Exchange::post(EVICT_P).answer(
            500,
            testkit::status(500, "InternalError", MULTIPLE_PDBS_MESSAGE),
        ),
        failed_draining("ns/p: eviction does not support multiple PDBs"),
    ];
    let claim = ungraced_claim();
    let drained = server
        .serve(script, drain_node(&t, &claim, &tainted_node(), now()))
        .await
        .expect("a drain pass");
    assert!(!drained);
    assert_eq!(eviction_requests(&t.ctx, "500"), 1);
}

/// Any other failed eviction (a 500) is no error of the pass and no Event (it is logged): the pass waits and
/// the next one asks again, which succeeds.
#[tokio::test]
async fn a_failed_eviction_is_asked_again_on_the_next_pass() {
    let (ctx, mut server) = context(vec![tainted_node()], vec![], vec![pod()]);
    let t = termination(ctx);
    let script = vec![
        Exchange::post(EVICT_P).fail(500, "InternalError"),
        Exchange::post(EVICT_P).answer(201, accepted()),
        testkit::namespaced_event("ns", "Evicted"),
    ];
    let claim = ungraced_claim();
    let node = tainted_node();
    let (first, second) = server
        .serve(script, async {
            (
                drain_node(&t, &claim, &node, now()).await,
                drain_node(&t, &claim, &node, now()).await,
            )
        })
        .await;
    assert!(!first.expect("a failed eviction is no error of the pass"));
    assert!(!second.expect("a drain pass"));
    assert_eq!(eviction_requests(&t.ctx, "500"), 1);
    assert_eq!(eviction_requests(&t.ctx, "200"), 1);
    assert_eq!(pods_evicted(&t.ctx), 1);
}

/// The first pass over an untainted Node taints it (tested against the taints read) and evicts nothing: pods
/// the scheduler places meanwhile are seen by the next pass. A Node with no pod left is drained without a
/// request.
#[tokio::test]
async fn a_node_is_tainted_before_any_eviction_and_drained_once_empty() {
    let untainted: Node = serde_json::from_value(json!({
        "metadata": {"name": "n"}, "spec": {"providerID": PROVIDER_ID},
    }))
    .expect("a node");
    let (ctx, mut server) = context(vec![untainted.clone()], vec![], vec![pod()]);
    let t = termination(ctx);
    let script = vec![
        Exchange::patch("/api/v1/nodes/n")
            .content_type("application/json-patch+json")
            .body(json!([
                {"op": "test", "path": "/spec/taints", "value": null},
                {"op": "add", "path": "/spec/taints",
                 "value": [{"key": DISRUPTED_TAINT, "effect": "NoSchedule"}]},
            ]))
            .answer(200, serde_json::to_value(tainted_node()).expect("json")),
        testkit::event(
            "DisruptionTerminating",
            "Disrupting NodeClaim c: terminating",
        ),
        testkit::event(
            "DisruptionTerminating",
            "Disrupting NodeClaim c: terminating",
        ),
    ];
    let claim = ungraced_claim();
    let drained = server
        .serve(script, drain_node(&t, &claim, &untainted, now()))
        .await
        .expect("tainted");
    assert!(!drained);
    assert_eq!(eviction_requests(&t.ctx, "200"), 0);

    let (ctx, mut server) = context(vec![tainted_node()], vec![], vec![]);
    let t = termination(ctx);
    let drained = server
        .serve(vec![], drain_node(&t, &claim, &tainted_node(), now()))
        .await
        .expect("drained");
    assert!(drained);
}

#[test]
fn the_deadline_is_the_deletion_time_plus_the_grace_period() {
    let claim: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "c", "deletionTimestamp": "2026-11-23T00:00:00Z"},
        "spec": {"nodeClassRef": {"group": "g", "kind": "k", "name": "n"}, "requirements": [],
                 "terminationGracePeriod": "1h30m"},
    }))
    .expect("claim");
    assert_eq!(
        deadline(&claim),
        Some("2026-11-23T01:30:00Z".parse().expect("timestamp"))
    );
    let mut without = claim.clone();
    without.spec.termination_grace_period = None;
    assert_eq!(deadline(&without), None);
}

/// Karpenter's termination reads the deadline from `karpenter.sh/nodeclaim-termination-timestamp` (node repair
/// sets it to now); a value that is not a time leaves the grace period's deadline.
#[test]
fn the_termination_timestamp_annotation_is_the_deadline() {
    let claim = |annotation: Option<&str>, grace: Option<&str>| -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "deletionTimestamp": "2026-11-23T00:00:00Z",
                         "annotations": annotation.map(|a| json!({TERMINATION_TIMESTAMP: a}))},
            "spec": {"nodeClassRef": {"group": "g", "kind": "k", "name": "n"}, "requirements": [],
                     "terminationGracePeriod": grace},
        }))
        .expect("claim")
    };
    let at = |t: &str| Some(t.parse::<Timestamp>().expect("timestamp"));
    let cases = [
        (
            Some("2026-11-22T23:00:00Z"),
            Some("1h"),
            at("2026-11-22T23:00:00Z"),
        ),
        (
            Some("2026-11-22T23:00:00Z"),
            None,
            at("2026-11-22T23:00:00Z"),
        ),
        (Some("tomorrow"), Some("1h"), at("2026-11-23T01:00:00Z")),
        (None, Some("1h"), at("2026-11-23T01:00:00Z")),
        (Some("tomorrow"), None, None),
    ];
    for (annotation, grace, want) in cases {
        assert_eq!(
            deadline(&claim(annotation, grace)),
            want,
            "{annotation:?} {grace:?}"
        );
    }
}
