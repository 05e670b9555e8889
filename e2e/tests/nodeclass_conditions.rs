//! An EC2NodeClass's conditions on the real control plane and moto, as Karpenter's nodeclass controller sets
//! them: the resolution's (`InstanceProfileReady` among them), `ValidationSucceeded` from dry runs of
//! CreateFleet and RunInstances (EC2's `UnauthorizedOperation` injected by the emulator, for dry runs only) and
//! from the class's tags, and `Ready` summing them up, which a NodePool's `NodeClassReady` repeats.
//!
//! One test, on an emulator of its own: the injected faults are server-wide.

use std::time::Duration;

use anyhow::{Context, Result};
use kerf::api::condition::{self, Condition};
use kerf::api::ec2nodeclass::EC2NodeClass;
use kerf::api::nodepool::NodePool;
use kerf_e2e::poll;
use kerf_e2e::testbed::{apply_ok, tail, Testbed};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{json, Value};

/// `(type, status, reason, message)`; a `None` message is not checked.
type Expected<'a> = (&'a str, &'a str, &'a str, Option<&'a str>);

fn holds(conditions: &[Condition], expected: &[Expected<'_>]) -> bool {
    expected.iter().all(|(type_, status, reason, message)| {
        condition::get(conditions, type_).is_some_and(|c| {
            c.status == *status && c.reason == *reason && message.is_none_or(|m| c.message == m)
        })
    })
}

/// Waits until the class `default` shows `expected`, and the pool `p`'s `NodeClassReady` `pool`.
async fn wait_for(bed: &Testbed, expected: &[Expected<'_>], pool: Expected<'_>) -> Result<()> {
    let client = bed.cluster.client()?;
    let classes: Api<EC2NodeClass> = Api::all(client.clone());
    let pools: Api<NodePool> = Api::all(client);
    let (classes, pools) = (&classes, &pools);
    let shown = std::sync::Mutex::new(String::new());
    let shown_ref = &shown;
    let waited = poll(
        &format!("EC2NodeClass default to show {expected:?}, NodePool p {pool:?}"),
        Duration::from_secs(90),
        || async move {
            let class = classes.get("default").await?;
            let class_conditions = class.status.and_then(|s| s.conditions).unwrap_or_default();
            let pool_conditions = pools
                .get("p")
                .await?
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default();
            *shown_ref.lock().unwrap_or_else(|p| p.into_inner()) =
                format!("{class_conditions:#?}\n{pool_conditions:#?}");
            Ok(
                (holds(&class_conditions, expected) && holds(&pool_conditions, &[pool]))
                    .then_some(()),
            )
        },
    )
    .await;
    let shown = shown.into_inner().unwrap_or_else(|p| p.into_inner());
    waited.with_context(|| format!("shown: {shown}\nlog:\n{}", tail(&bed.log(), 30)))
}

async fn patch_class(bed: &Testbed, spec: Value) -> Result<()> {
    let classes: Api<EC2NodeClass> = Api::all(bed.cluster.client()?);
    classes
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await?;
    Ok(())
}

/// A fault failing the dry runs of `action` as unauthorized, with EC2's `message`.
fn unauthorized(action: &str, message: &str) -> Value {
    json!({"api": [{"action": action, "code": "UnauthorizedOperation", "status": 403,
                    "message": message, "dryRun": true}]})
}

/// Karpenter's validation suite ("NodeClass validation failure conditions", "Tag Validation") and its
/// instanceprofile, subnet and readiness suites, end to end.
#[tokio::test]
async fn an_ec2nodeclass_reports_its_resolution_validation_and_readiness() -> Result<()> {
    // The faults are server-wide: an emulator of its own, or every class of the suite's shared one would fail
    // its dry runs meanwhile.
    let Some(bed) = Testbed::start_in_or_skip(
        "nodeclass-conditions",
        "an_ec2nodeclass_reports_its_conditions",
    )
    .await?
    else {
        return Ok(());
    };
    apply_ok(
        &bed.cluster,
        &json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {"template": {"spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}},
        }),
    )
    .await?;
    let pool_ready = ("NodeClassReady", "True", "NodeClassReady", None);
    wait_for(
        &bed,
        &[
            ("SubnetsReady", "True", "SubnetsReady", None),
            ("SecurityGroupsReady", "True", "SecurityGroupsReady", None),
            ("AMIsReady", "True", "AMIsReady", None),
            ("InstanceProfileReady", "True", "InstanceProfileReady", None),
            (
                "ValidationSucceeded",
                "True",
                "ValidationSucceeded",
                Some(""),
            ),
            ("Ready", "True", "Ready", Some("")),
        ],
        pool_ready,
    )
    .await?;

    // CreateFleet is not authorized: the class is not ready, and its NodePools say why.
    let emu = &bed.emu;
    emu.set_faults(&unauthorized(
        "CreateFleet",
        "You are not authorized to perform this operation.",
    ))
    .await?;
    patch_class(&bed, json!({"tags": {"e2e": "fleet"}})).await?;
    let unhealthy = (
        "Ready",
        "False",
        "UnhealthyDependents",
        Some("ValidationSucceeded=False"),
    );
    wait_for(
        &bed,
        &[
            (
                "ValidationSucceeded",
                "False",
                "CreateFleetAuthCheckFailed",
                Some(
                    "Controller isn't authorized to call ec2:CreateFleet: User is not authorized to perform \
                     this operation because no identity-based policy allows it",
                ),
            ),
            unhealthy,
        ],
        ("NodeClassReady", "False", "UnhealthyDependents", Some("ValidationSucceeded=False")),
    )
    .await?;

    // RunInstances is denied by a service control policy, in every subnet.
    let scp = "You are not authorized to perform this operation with an explicit deny in a service control policy";
    emu.set_faults(&unauthorized("RunInstances", scp)).await?;
    patch_class(&bed, json!({"tags": {"e2e": "run"}})).await?;
    wait_for(
        &bed,
        &[
            (
                "ValidationSucceeded",
                "False",
                "RunInstancesAuthCheckFailed",
                Some(
                    "Controller isn't authorized to call ec2:RunInstances: User is not authorized to perform \
                     this operation due to a service control policy",
                ),
            ),
            unhealthy,
        ],
        ("NodeClassReady", "False", "UnhealthyDependents", None),
    )
    .await?;

    // Authorized again: ready.
    emu.clear_faults().await?;
    patch_class(&bed, json!({"tags": {"e2e": "ok"}})).await?;
    let validated = ("ValidationSucceeded", "True", "ValidationSucceeded", None);
    wait_for(
        &bed,
        &[validated, ("Ready", "True", "Ready", None)],
        pool_ready,
    )
    .await?;

    // A tag kerf sets itself (the 1.20 apiserver ignores the CRD's CEL rule, and no webhook runs here).
    patch_class(&bed, json!({"tags": {"karpenter.sh/nodepool": "mine"}})).await?;
    wait_for(
        &bed,
        &[
            (
                "ValidationSucceeded",
                "False",
                "TagValidationFailed",
                Some("tags failed validation requirements (tags=\"karpenter.sh/nodepool\")"),
            ),
            unhealthy,
        ],
        ("NodeClassReady", "False", "UnhealthyDependents", None),
    )
    .await?;
    patch_class(&bed, json!({"tags": {"karpenter.sh/nodepool": null}})).await?;
    wait_for(&bed, &[validated], pool_ready).await?;

    // A placement group that does not exist: the class says so and is not ready (nothing launches outside the
    // group it asks for); once EC2 has it, the class is ready; without the selector it stays so.
    let group = format!("{}-hpc", bed.name);
    patch_class(&bed, json!({"placementGroupSelector": {"name": group}})).await?;
    let not_found = format!("Placement group {group:?} not found");
    wait_for(
        &bed,
        &[
            (
                "PlacementGroupReady",
                "False",
                "PlacementGroupNotFound",
                Some(not_found.as_str()),
            ),
            ("Ready", "False", "UnhealthyDependents", None),
        ],
        ("NodeClassReady", "False", "UnhealthyDependents", None),
    )
    .await?;
    bed.cloud
        .ec2()
        .create_placement_group()
        .group_name(&group)
        .strategy(aws_sdk_ec2::types::PlacementStrategy::Spread)
        .send()
        .await?;
    let group_ready = [
        ("PlacementGroupReady", "True", "PlacementGroupReady", None),
        ("Ready", "True", "Ready", None),
    ];
    wait_for(&bed, &group_ready, pool_ready).await?;
    patch_class(&bed, json!({"placementGroupSelector": null})).await?;
    wait_for(&bed, &group_ready, pool_ready).await?;

    // An instance profile that does not exist: kerf looks it up, and the validation waits on it.
    patch_class(
        &bed,
        json!({"role": null, "instanceProfile": "no-such-profile"}),
    )
    .await?;
    wait_for(
        &bed,
        &[
            (
                "InstanceProfileReady",
                "False",
                "InstanceProfileNotFound",
                None,
            ),
            (
                "ValidationSucceeded",
                "False",
                "DependenciesNotReady",
                Some("Awaiting AMI, Instance Profile, Security Group, and Subnet resolution"),
            ),
            ("Ready", "False", "UnhealthyDependents", None),
        ],
        ("NodeClassReady", "False", "UnhealthyDependents", None),
    )
    .await?;
    Ok(())
}
