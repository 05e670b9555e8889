//! Provisioning's writes against a scripted apiserver ([`crate::controllers::testkit`]): the NodeClaims of a
//! decision ([`create_claims`]: bodies, AlreadyExists, a failure among others) and what pods and NodePools are
//! told ([`report`]: `Nominated` / `FailedScheduling` Events and the pods' `kerf.sh/provisioning` annotation,
//! NodePool warnings, each once).

use super::{create_claims, report, Batch, Reported};
use crate::admission::advice::PROVISIONING_ANNOTATION;
use crate::api::nodeclaim::NodeClaim;
use crate::api::requirements::{Requirement, Requirements};
use crate::catalog::Resources;
use crate::cloud::sim::SimCloud;
use crate::controllers::nodeclaim::created_here::FirstLaunch;
use crate::controllers::state::ClusterState;
use crate::controllers::testkit::{self, ApiServer, Exchange, Seen};
use crate::controllers::Context;
use crate::engine::provisioning::claim;
use crate::engine::provisioning::plan::{Decisions, NewClaim, PoolWarning, Snapshot};
use crate::scheduling::{PlannedClaim, TypeName, Unschedulable};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

const CLAIMS: &str = "/apis/karpenter.sh/v1/nodeclaims";
const POOL: &str = "general";

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// A claim planned for the pods `ns/<pod>` (UID `uid-<pod>`), made as provisioning makes it.
fn new_claim(pods: &[&str]) -> NewClaim {
    let mut requirements = Requirements::new();
    requirements.add(Requirement::one_of(
        crate::api::labels::NODEPOOL,
        [POOL.to_owned()],
    ));
    let planned = PlannedClaim {
        nodepool: POOL.into(),
        requirements,
        instance_types: vec![TypeName::new("m5.large")].into(),
        pods: pods.iter().map(|p| format!("ns/{p}")).collect(),
        requests: Resources::from_quantities([("cpu", "1"), ("pods", "1")]).expect("quantities"),
        cheapest: None,
    };
    let uids: Vec<String> = pods.iter().map(|p| format!("uid-{p}")).collect();
    let uids: Vec<&str> = uids.iter().map(String::as_str).collect();
    NewClaim::made(
        claim::node_claim(&testkit::node_pool(POOL), &planned, &uids),
        POOL.into(),
        planned.pods.clone(),
        None,
    )
}

fn scripted(claims: Vec<NodeClaim>) -> (Arc<Context<SimCloud>>, ApiServer) {
    let (client, server) = testkit::apiserver();
    let state = ClusterState::of(Vec::new(), claims, Vec::new());
    let ctx = testkit::context(
        client,
        SimCloud::new("provisioning", Vec::new()),
        state,
        t0(),
    );
    (Arc::new(ctx), server)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A NodeClaim POST, answered by `answer` on the claim's name: `None` creates it (the body echoed with a UID).
fn posted(
    claims: &[&NewClaim],
    answer: impl Fn(&str) -> Option<(u16, &'static str)> + Clone + Send + 'static,
) -> Vec<Exchange> {
    let bodies: Arc<Vec<Value>> = Arc::new(
        claims
            .iter()
            .map(|c| serde_json::to_value(c.node_claim()).expect("json"))
            .collect(),
    );
    (0..claims.len())
        .map(|_| {
            let (bodies, answer) = (bodies.clone(), answer.clone());
            // The creates run in parallel: each request is matched to its claim by name.
            Exchange::post(CLAIMS).answer_with(move |seen: &Seen| {
                let name = seen.body["metadata"]["name"]
                    .as_str()
                    .expect("a name")
                    .to_owned();
                let expected = bodies
                    .iter()
                    .find(|b| b["metadata"]["name"] == name.as_str())
                    .unwrap_or_else(|| panic!("a create of an unplanned claim {name}"));
                assert_eq!(&seen.body, expected, "the body of the create of {name}");
                match answer(&name) {
                    Some((code, reason)) => (code, testkit::status(code, reason, "scripted")),
                    None => {
                        let mut created = seen.body.clone();
                        created["metadata"]["uid"] = json!(format!("uid-of-{name}"));
                        (201, created)
                    }
                }
            })
        })
        .collect()
}

fn first_launch(ctx: &Context<SimCloud>, name: &str) -> bool {
    matches!(
        ctx.created_here
            .first_launch(name, &format!("uid-of-{name}")),
        FirstLaunch::Yes(_)
    )
}

/// Each planned claim is POSTed as the object the plan made (its name from its pods); each created one is
/// handed to `created_now` with the UID the apiserver gave it, noted as created here (its first launch skips
/// the adoption check), counted in `karpenter_nodeclaims_created_total` for the reason, and returned.
#[tokio::test]
async fn every_claim_is_created_launched_and_counted() {
    let (ctx, mut server) = scripted(Vec::new());
    let claims = vec![new_claim(&["a"]), new_claim(&["b", "c"])];
    let names: Vec<String> = claims.iter().map(|c| c.name().to_owned()).collect();
    assert_eq!(names[0], claim::name(POOL, &["uid-a"]));
    assert_ne!(names[0], names[1]);
    let handed = Mutex::new(Vec::new());
    let created_now = |claim: &NodeClaim| {
        lock(&handed).push((
            claim.metadata.name.clone().unwrap_or_default(),
            claim.metadata.uid.clone().unwrap_or_default(),
        ));
    };
    let script = posted(&claims.iter().collect::<Vec<_>>(), |_| None);
    let created = server
        .serve(
            script,
            create_claims(&ctx, &claims, "provisioned", &created_now),
        )
        .await;
    assert_eq!(created, names.iter().cloned().collect::<HashSet<_>>());
    let handed: BTreeSet<(String, String)> = lock(&handed).iter().cloned().collect();
    let expected: BTreeSet<(String, String)> = names
        .iter()
        .map(|n| (n.clone(), format!("uid-of-{n}")))
        .collect();
    assert_eq!(handed, expected);
    assert!(names.iter().all(|n| first_launch(&ctx, n)));
    assert_eq!(testkit::nodeclaims_created(&ctx, POOL, "provisioned"), 2);
}

/// A claim of that name already existing (409 AlreadyExists: the same pods planned before a restart, its name
/// being theirs) counts as made — its pods are told where they go — but it is not counted in
/// `karpenter_nodeclaims_created_total` again, launched by this call, nor taken for one this process created (its launch must look for an instance first). One that the store shows
/// being deleted does not count: its pods are planned again.
#[tokio::test]
async fn an_existing_claim_counts_as_made_unless_it_is_being_deleted() {
    let (exists, deleting) = (new_claim(&["a"]), new_claim(&["b"]));
    let mut going = deleting.node_claim();
    going.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::try_from(t0()).expect("in range"),
    ));
    let (ctx, mut server) = scripted(vec![going]);
    let claims = vec![exists, deleting];
    let handed = Mutex::new(0);
    let created_now = |_: &NodeClaim| *lock(&handed) += 1;
    let script = posted(&claims.iter().collect::<Vec<_>>(), |_| {
        Some((409, "AlreadyExists"))
    });
    let created = server
        .serve(
            script,
            create_claims(&ctx, &claims, "provisioned", &created_now),
        )
        .await;
    assert_eq!(created, HashSet::from([claims[0].name().to_owned()]));
    assert_eq!(*lock(&handed), 0, "no claim was created by this call");
    assert!(!first_launch(&ctx, claims[0].name()));
    assert_eq!(
        testkit::nodeclaims_created(&ctx, POOL, "provisioned"),
        0,
        "a claim made before is not counted again (Karpenter's generated names never meet one)"
    );
}

/// A create failing (500) leaves that claim out and stops none of the others; it is not counted, and not
/// noted as created here.
#[tokio::test]
async fn a_failed_create_leaves_the_others_created() {
    let (ctx, mut server) = scripted(Vec::new());
    let claims = vec![new_claim(&["a"]), new_claim(&["b"]), new_claim(&["c"])];
    let failing = claims[1].name().to_owned();
    let fails = failing.clone();
    let script = posted(&claims.iter().collect::<Vec<_>>(), move |name| {
        (name == fails).then_some((500, "InternalError"))
    });
    let created = server
        .serve(script, create_claims(&ctx, &claims, "drifted", &|_| {}))
        .await;
    let expected: HashSet<String> = [&claims[0], &claims[2]]
        .iter()
        .map(|c| c.name().to_owned())
        .collect();
    assert_eq!(created, expected);
    assert_eq!(testkit::nodeclaims_created(&ctx, POOL, "drifted"), 2);
    assert!(!first_launch(&ctx, &failing));
    assert!(first_launch(&ctx, claims[0].name()));
}

fn pod(name: &str) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
            "spec": {"containers": [{"name": "app", "image": "app"}]},
        }))
        .expect("a Pod"),
    )
}

/// What the pods were told: `(pod, type, reason, note)` from the Events, `(pod, annotation)` from the patches.
#[derive(Default)]
struct Told {
    events: BTreeSet<(String, String, String, String)>,
    annotations: BTreeSet<(String, String)>,
}

/// `events` pod Events then `patches` annotation writes, in any order among themselves (they are written in
/// parallel), recorded in `told`.
fn pods_told(told: &Arc<Mutex<Told>>, events: usize, patches: usize) -> Vec<Exchange> {
    let mut script = Vec::new();
    for _ in 0..events {
        let told = told.clone();
        script.push(
            Exchange::post("/apis/events.k8s.io/v1/namespaces/ns/events")
                .check(move |seen| {
                    let body = &seen.body;
                    assert_eq!(body["regarding"]["kind"], "Pod", "{body}");
                    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                    lock(&told).events.insert((
                        text(&body["regarding"]["name"]),
                        text(&body["type"]),
                        text(&body["reason"]),
                        text(&body["note"]),
                    ));
                })
                .echo(201),
        );
    }
    for _ in 0..patches {
        let told = told.clone();
        script.push(
            Exchange::patch("/api/v1/namespaces/ns/pods/*")
                .content_type("application/merge-patch+json")
                .check(move |seen| {
                    let pod = seen.path.rsplit('/').next().unwrap_or_default().to_owned();
                    let note = seen.body["metadata"]["annotations"][PROVISIONING_ANNOTATION]
                        .as_str()
                        .expect("the provisioning annotation")
                        .to_owned();
                    lock(&told).annotations.insert((pod, note));
                })
                .answer_with(|seen| {
                    let pod = seen.path.rsplit('/').next().unwrap_or_default();
                    (
                        200,
                        serde_json::to_value(self::pod(pod).as_ref()).expect("json"),
                    )
                }),
        );
    }
    script
}

/// Runs [`report`] and waits for the pod Events it writes in the background.
async fn reported(
    ctx: &Arc<Context<SimCloud>>,
    snapshot: &Snapshot,
    batch: &Batch,
    decisions: &Decisions,
    created: &HashSet<String>,
    reported: &mut Reported,
) {
    report(
        ctx,
        snapshot,
        batch,
        decisions,
        created,
        reported,
        Vec::new(),
    )
    .await;
    if let Some(writing) = reported.writing.take() {
        writing.await.expect("the pod Events are written");
    }
}

/// A pod on a claim that was created is told `Nominated` to it, a pod on an existing node to that node, a pod
/// nothing fits `FailedScheduling` (a Warning) with the reason, each also in its `kerf.sh/provisioning`
/// annotation. A pod whose claim was not created, one deferred for reserved capacity and one still running on a
/// node being deleted are told nothing. The same decision the next batch is not told again.
#[tokio::test]
async fn pods_are_told_their_decision_once() {
    let (ctx, mut server) = scripted(Vec::new());
    let names = ["a", "b", "c", "d", "e", "f"];
    let snapshot = Snapshot {
        pods: names.iter().map(|n| pod(n)).collect(),
        node_pools: vec![testkit::node_pool(POOL)],
        ..Snapshot::default()
    };
    let batch = Batch {
        pods: names.iter().map(|n| format!("ns/{n}")).collect(),
        reschedulable: HashSet::from(["ns/f".to_owned()]),
    };
    let (made, failed) = (new_claim(&["a"]), new_claim(&["b"]));
    let made_name = made.name().to_owned();
    let created = HashSet::from([made_name.clone()]);
    let mut deferred = Unschedulable::new("ns/e", "waiting for reserved capacity");
    deferred.deferred = true;
    let decisions = Decisions {
        claims: vec![made, failed],
        nominated: vec![("ns/c".into(), "node/n-1".into())],
        unschedulable: vec![
            Unschedulable::new("ns/d", "incompatible with nodepool \"general\""),
            deferred,
            Unschedulable::new("ns/f", "no capacity"),
        ],
        ..Decisions::default()
    };
    let told = Arc::new(Mutex::new(Told::default()));
    let mut memory = Reported::default();
    server
        .serve(
            pods_told(&told, 3, 3),
            reported(&ctx, &snapshot, &batch, &decisions, &created, &mut memory),
        )
        .await;
    let on_claim = format!("Pod should schedule on: nodeclaim/{made_name}");
    let on_node = "Pod should schedule on: node/n-1".to_owned();
    let failing = "Failed to schedule pod, incompatible with nodepool \"general\"".to_owned();
    let told = std::mem::take(&mut *lock(&told));
    let event = |pod: &str, type_: &str, reason: &str, note: &str| {
        (pod.into(), type_.into(), reason.into(), note.to_owned())
    };
    assert_eq!(
        told.events,
        BTreeSet::from([
            event("a", "Normal", "Nominated", &on_claim),
            event("c", "Normal", "Nominated", &on_node),
            event("d", "Warning", "FailedScheduling", &failing),
        ])
    );
    assert_eq!(
        told.annotations,
        BTreeSet::from([
            ("a".to_owned(), on_claim),
            ("c".to_owned(), on_node),
            ("d".to_owned(), failing),
        ])
    );
    // The next batch decides the same: nothing is written.
    server
        .serve(
            Vec::new(),
            reported(&ctx, &snapshot, &batch, &decisions, &created, &mut memory),
        )
        .await;
}

/// A NodePool that cannot provision gets a Warning Event on it once while the warning holds, and again once
/// it held no longer and holds again.
#[tokio::test]
async fn a_pool_warning_is_published_once_while_it_holds() {
    let (ctx, mut server) = scripted(Vec::new());
    let snapshot = Snapshot {
        node_pools: vec![testkit::node_pool(POOL)],
        ..Snapshot::default()
    };
    let batch = Batch {
        pods: HashSet::new(),
        reschedulable: HashSet::new(),
    };
    let warned = || Decisions {
        pool_warnings: vec![PoolWarning {
            nodepool: POOL.into(),
            reason: "NodePoolLimitReached",
            message: "limits exceeded".into(),
        }],
        ..Decisions::default()
    };
    let on_pool = || {
        testkit::event("NodePoolLimitReached", "limits exceeded").check(|seen| {
            let about = &seen.body["involvedObject"];
            assert_eq!(about["kind"], "NodePool", "{}", seen.body);
            assert_eq!(about["name"], POOL, "{}", seen.body);
            assert_eq!(seen.body["type"], "Warning", "{}", seen.body);
        })
    };
    let none = HashSet::new();
    let mut memory = Reported::default();
    let passes = [
        (warned(), vec![on_pool()]),
        (warned(), vec![]),
        (Decisions::default(), vec![]),
        (warned(), vec![on_pool()]),
    ];
    for (decisions, script) in passes {
        server
            .serve(
                script,
                reported(&ctx, &snapshot, &batch, &decisions, &none, &mut memory),
            )
            .await;
    }
}
