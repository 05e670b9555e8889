//! The EC2NodeClass reconcile against a scripted apiserver ([`crate::controllers::testkit`]) and the in-memory
//! cloud ([`crate::controllers::nodeclaim::tests::cloud`]): the finalizer, the status it writes (and when it
//! writes nothing), the deletion path, and what a 404 or a 409 from the apiserver does.

use super::*;
use crate::api::condition::Condition;
use crate::cloud::sim::SimCloud;
use crate::controllers::nodeclaim::tests::{cloud, t0};
use crate::controllers::state::ClusterState;
use crate::controllers::testkit::{self, apiserver, ApiServer, Exchange};
use serde_json::{json, Value};

const CLASS: &str = "/apis/karpenter.k8s.aws/v1/ec2nodeclasses/default";
const STATUS: &str = "/apis/karpenter.k8s.aws/v1/ec2nodeclasses/default/status";
const JSON_PATCH: &str = "application/json-patch+json";
const MERGE_PATCH: &str = "application/merge-patch+json";
/// `t0()` as the conditions carry it.
const NOW: &str = "2027-01-15T08:00:00Z";

/// The class `default` at generation 1, selecting what [`cloud`] holds (or, with `subnets` false, a subnet
/// tag nothing carries), with `metadata` added.
fn class_json(subnets: bool, metadata: Value) -> Value {
    let discovery = if subnets { "lifecycle" } else { "nowhere" };
    let mut class = json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default", "generation": 1, "resourceVersion": "10"},
        "spec": {
            "role": "NodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": discovery}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "lifecycle"}}],
        },
    });
    for (key, value) in metadata.as_object().into_iter().flatten() {
        class["metadata"][key] = value.clone();
    }
    class
}

fn class(subnets: bool, metadata: Value) -> Arc<EC2NodeClass> {
    Arc::new(serde_json::from_value(class_json(subnets, metadata)).expect("an EC2NodeClass"))
}

/// The class with its finalizer and `status`.
fn finalized_class_with(status: Value) -> Arc<EC2NodeClass> {
    let mut class = class_json(true, json!({"finalizers": [FINALIZER]}));
    class["status"] = status;
    Arc::new(serde_json::from_value(class).expect("an EC2NodeClass"))
}

fn claim(name: &str, class: &str) -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name},
        "spec": {"requirements": [], "nodeClassRef":
            {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": class}},
    }))
    .expect("a NodeClaim")
}

/// What the reconciles share, over a scripted apiserver, the in-memory cloud and `claims`.
fn classes(claims: Vec<NodeClaim>) -> (Arc<NodeClasses<SimCloud>>, ApiServer) {
    let (client, server) = apiserver();
    let state = ClusterState::of(vec![], claims, vec![]);
    let mut ctx = testkit::context(client, cloud(), state, t0());
    // The in-memory cloud lists no capacity reservations (as the AWS provider with the gate off): with the gate
    // on, `CapacityReservationsReady` would wait for a listing that never comes.
    ctx.settings.feature_gates.reserved_capacity = false;
    let classes = NodeClasses {
        ctx: Arc::new(ctx),
        checks: Checks::default(),
    };
    (Arc::new(classes), server)
}

/// A condition as the reconcile writes it at [`NOW`] for generation 1.
fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": NOW, "observedGeneration": 1})
}

fn ok(type_: &str) -> Value {
    condition(type_, "True", type_, "")
}

/// The status of the class resolved against [`cloud`] and validated: every condition true.
fn ready_status() -> Value {
    json!({
        "subnets": [{"id": "subnet-a", "zone": "us-west-2a", "zoneID": "usw2-az1"}],
        "securityGroups": [{"id": "sg-1"}],
        "amis": [{"id": "ami-1", "requirements":
            [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}],
        "instanceProfile": "lifecycle_default",
        "conditions": [
            ok(SUBNETS_READY), ok(SECURITY_GROUPS_READY), ok(AMIS_READY), ok(INSTANCE_PROFILE_READY),
            ok(conditions::PLACEMENT_GROUP_READY), ok(VALIDATION_SUCCEEDED), ok(READY),
        ],
    })
}

/// The code of the apiserver's answer that failed the reconcile, if that is what failed it.
fn api_code(result: &Result<Action, Error>) -> Option<u16> {
    match result {
        Err(Error::Call(calls::ReconcileError::Kube(::kube::Error::Api(status)))) => {
            Some(status.code)
        }
        _ => None,
    }
}

/// Karpenter's "should add the finalizer" and the status suites' happy path: a new class first gets the
/// termination finalizer (a JSON patch tested against the empty list read), then one merge patch of its status
/// subresource with what its selectors resolved to and every condition true for its generation; it is resolved
/// again in five minutes.
#[tokio::test]
async fn a_new_class_gets_the_finalizer_then_its_resolved_status() {
    let (classes, mut server) = classes(vec![]);
    let script = vec![
        Exchange::patch(CLASS)
            .content_type(JSON_PATCH)
            .body(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
            ]))
            .answer(200, class_json(true, json!({"finalizers": [FINALIZER]}))),
        Exchange::patch(STATUS)
            .content_type(MERGE_PATCH)
            .body(json!({"status": ready_status()}))
            .answer(200, class_json(true, json!({}))),
    ];
    let action = server
        .serve(script, reconcile(class(true, json!({})), classes.clone()))
        .await
        .expect("reconciled");
    assert_eq!(action, Action::requeue(RESOLVE_INTERVAL));
    assert_eq!(
        classes.ctx.cloud.instance_profiles(),
        ["lifecycle_default"],
        "the profile for spec.role was made"
    );
}

/// A class whose status already shows its resolution (and has its finalizer) is not written again: no
/// request at all, transition times included.
#[tokio::test]
async fn a_class_already_showing_its_resolution_is_not_written_again() {
    let (classes, mut server) = classes(vec![]);
    let action = server
        .serve(
            vec![],
            reconcile(finalized_class_with(ready_status()), classes),
        )
        .await
        .expect("reconciled");
    assert_eq!(action, Action::requeue(RESOLVE_INTERVAL));
}

/// A change of the class (a new generation) moves every condition's `observedGeneration` and nothing else:
/// the times stay, as their status did not change.
#[tokio::test]
async fn a_new_generation_is_written_with_the_transition_times_kept() {
    let (classes, mut server) = classes(vec![]);
    const EARLIER: &str = "2027-01-01T00:00:00Z";
    let mut class = class_json(true, json!({"finalizers": [FINALIZER], "generation": 2}));
    class["status"] = ready_status();
    for condition in class["status"]["conditions"]
        .as_array_mut()
        .expect("conditions")
    {
        condition["lastTransitionTime"] = json!(EARLIER);
    }
    let class: Arc<EC2NodeClass> = Arc::new(serde_json::from_value(class).expect("a class"));
    let script = vec![Exchange::patch(STATUS)
        .content_type(MERGE_PATCH)
        .check(|seen| {
            let conditions: Vec<Condition> =
                serde_json::from_value(seen.body["status"]["conditions"].clone())
                    .expect("conditions");
            assert_eq!(conditions.len(), 7, "{conditions:?}");
            for c in &conditions {
                assert_eq!(
                    (c.status.as_str(), c.observed_generation),
                    ("True", Some(2))
                );
                assert_eq!(c.last_transition_time, EARLIER, "{}", c.type_);
            }
        })
        .answer(200, class_json(true, json!({})))];
    server
        .serve(script, reconcile(class, classes))
        .await
        .expect("reconciled");
}

/// Karpenter's "should update status condition when subnets are not found": `SubnetsReady` false with its
/// reason, what was not looked at yet awaiting reconciliation, validation waiting on its dependencies, `Ready`
/// false; nothing resolved is written, and the class is looked at again in 30 s.
#[tokio::test]
async fn a_class_whose_subnets_match_nothing_is_not_ready_and_retried_soon() {
    let (classes, mut server) = classes(vec![]);
    let class = class(false, json!({"finalizers": [FINALIZER]}));
    let awaiting = |type_: &str| {
        condition(
            type_,
            "Unknown",
            "AwaitingReconciliation",
            "object is awaiting reconciliation",
        )
    };
    let expected = json!({"status": {"conditions": [
        condition(SUBNETS_READY, "False", "SubnetsNotFound", "SubnetSelector did not match any Subnets"),
        ok(conditions::PLACEMENT_GROUP_READY),
        condition(VALIDATION_SUCCEEDED, "False", "DependenciesNotReady",
            "Awaiting AMI, Instance Profile, Security Group, and Subnet resolution"),
        awaiting(AMIS_READY), awaiting(SECURITY_GROUPS_READY), awaiting(INSTANCE_PROFILE_READY),
        condition(READY, "False", "UnhealthyDependents",
            "AMIsReady=Unknown, InstanceProfileReady=Unknown, SecurityGroupsReady=Unknown, \
             SubnetsReady=False, ValidationSucceeded=False"),
    ]}});
    let script = vec![Exchange::patch(STATUS)
        .content_type(MERGE_PATCH)
        .body(expected)
        .answer(200, class_json(false, json!({})))];
    let action = server
        .serve(script, reconcile(class, classes))
        .await
        .expect("reconciled");
    assert_eq!(action, Action::requeue(RETRY_INTERVAL));
}

/// Karpenter's termination suite "should not delete the EC2NodeClass until all associated NodeClaims are
/// terminated": the finalizer stays, an Event names the claims that hold it, and the class looks again in 10 s.
#[tokio::test]
async fn a_deleted_class_still_used_by_claims_keeps_its_finalizer() {
    let (classes, mut server) = classes(vec![
        claim("b", "default"),
        claim("other", "gpu"),
        claim("a", "default"),
    ]);
    let class = class(
        true,
        json!({"finalizers": [FINALIZER], "deletionTimestamp": "2027-01-15T07:59:00Z"}),
    );
    let script = vec![testkit::event(
        "WaitingOnNodeClaimTermination",
        "Waiting on NodeClaim termination for a, b",
    )];
    let action = server
        .serve(script, reconcile(class, classes))
        .await
        .expect("reconciled");
    assert_eq!(action, Action::requeue(WAIT_FOR_CLAIMS));
}

/// "should succeed to delete the EC2NodeClass when there are no NodeClaims": the instance profile kerf made for
/// the role is deleted, then only this finalizer is removed (by its index, under a test of the list read);
/// claims of other classes do not hold it. No status is written on the way out.
#[tokio::test]
async fn a_deleted_class_no_claim_uses_loses_its_finalizer_and_its_profile() {
    let (classes, mut server) = classes(vec![claim("other", "gpu")]);
    let spec = class(true, json!({})).spec.clone();
    classes
        .ctx
        .cloud
        .resolve_node_class("default", &spec)
        .await
        .expect("resolved");
    assert_eq!(classes.ctx.cloud.instance_profiles(), ["lifecycle_default"]);
    let class = class(
        true,
        json!({"finalizers": ["other", FINALIZER], "deletionTimestamp": "2027-01-15T07:59:00Z"}),
    );
    let script = vec![Exchange::patch(CLASS)
        .content_type(JSON_PATCH)
        .body(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": ["other", FINALIZER]},
            {"op": "remove", "path": "/metadata/finalizers/1"},
        ]))
        .answer(200, class_json(true, json!({"finalizers": ["other"]})))];
    let action = server
        .serve(script, reconcile(class, classes.clone()))
        .await
        .expect("reconciled");
    assert_eq!(action, Action::await_change());
    assert!(classes.ctx.cloud.instance_profiles().is_empty());
}

/// A deleted class without kerf's finalizer (removed already) is left alone: no request, no cloud call.
#[tokio::test]
async fn a_deleted_class_without_the_finalizer_is_left_alone() {
    let (classes, mut server) = classes(vec![]);
    let class = class(
        true,
        json!({"finalizers": ["other"], "deletionTimestamp": "2027-01-15T07:59:00Z"}),
    );
    let action = server
        .serve(vec![], reconcile(class, classes))
        .await
        .expect("reconciled");
    assert_eq!(action, Action::await_change());
}

/// A class deleted before its finalizer could be added (404) is gone: the reconcile ends without an error
/// (nothing to retry, no backoff kept for a name that no longer exists) and writes nothing more.
#[tokio::test]
async fn a_class_gone_before_its_finalizer_is_added_is_done_with() {
    let (classes, mut server) = classes(vec![]);
    let script = vec![Exchange::patch(CLASS).fail(404, "NotFound")];
    let action = server
        .serve(script, reconcile(class(true, json!({})), classes))
        .await
        .expect("a class that is gone is no failure");
    assert_eq!(action, Action::await_change());
}

/// The same when the class goes between the finalizer and the status write.
#[tokio::test]
async fn a_class_gone_before_its_status_is_written_is_done_with() {
    let (classes, mut server) = classes(vec![]);
    let script = vec![Exchange::patch(STATUS).fail(404, "NotFound")];
    let class = class(true, json!({"finalizers": [FINALIZER]}));
    let action = server
        .serve(script, reconcile(class, classes))
        .await
        .expect("a class that is gone is no failure");
    assert_eq!(action, Action::await_change());
}

/// A class whose finalizers changed since the read (409) is not written over: the reconcile fails (retried
/// with backoff on the fresh object) before resolving or writing its status.
#[tokio::test]
async fn a_conflict_on_the_finalizer_fails_the_reconcile_before_the_status() {
    let (classes, mut server) = classes(vec![]);
    let script = vec![Exchange::patch(CLASS).fail(409, "Conflict")];
    let result = server
        .serve(script, reconcile(class(true, json!({})), classes.clone()))
        .await;
    assert_eq!(api_code(&result), Some(409), "{result:?}");
    assert!(
        classes.ctx.cloud.instance_profiles().is_empty(),
        "nothing was resolved"
    );
}

/// A refused status write (409) fails the reconcile so it is retried; the launch check's answer is kept, so the
/// retry writes the same status without asking the cloud again.
#[tokio::test]
async fn a_conflict_on_the_status_fails_the_reconcile_and_the_retry_writes_it() {
    let (classes, mut server) = classes(vec![]);
    let class = class(true, json!({"finalizers": [FINALIZER]}));
    let script = vec![Exchange::patch(STATUS)
        .body(json!({"status": ready_status()}))
        .fail(409, "Conflict")];
    let result = server
        .serve(script, reconcile(class.clone(), classes.clone()))
        .await;
    assert_eq!(api_code(&result), Some(409), "{result:?}");
    classes.ctx.cloud.inject_api_error(
        crate::cloud::sim::Operation::CheckLaunch,
        CloudError::Api {
            operation: "RunInstances",
            code: "Throttling".into(),
            message: "slow down".into(),
        },
        1,
    );
    let script = vec![Exchange::patch(STATUS)
        .body(json!({"status": ready_status()}))
        .answer(200, class_json(true, json!({})))];
    let action = server
        .serve(script, reconcile(class, classes))
        .await
        .expect("reconciled");
    assert_eq!(action, Action::requeue(RESOLVE_INTERVAL));
}
