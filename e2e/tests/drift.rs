//! Replacing disruption on the real control plane with moto and the stand-in kubelet (issue 6). Drift: once
//! the EC2NodeClass selects another AMI, `kerf controller` marks the running claims `Drifted` (`AMIDrift`) and
//! replaces them one at a time from the new AMI. Consolidation: a node left underused is replaced by a cheaper
//! one. A changed NodePool template drifts its nodes the same way (`NodePoolDrifted`, through the hash
//! annotations). Either way the replacement is Initialized before the old claim is deleted, the pods move to it, and the
//! old instance is terminated.
//!
//! The order of events is taken from a watch on NodeClaims started before the change: the apiserver reports
//! the changes of one resource in the order they happened, so the record proves what came first.

use anyhow::{ensure, Context, Result};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kerf::api::ec2nodeclass::EC2NodeClass;
use kerf::api::nodeclaim::NodeClaim;
use kerf::api::nodepool::NodePool;
use kerf::cloud::{CloudError, CloudProvider};
use kerf::disruption::{HASH_VERSION, NODEPOOL_HASH, NODEPOOL_HASH_VERSION};
use kerf_e2e::aws::REGION;
use kerf_e2e::controller::{create_inflate, node_claims, node_pool};
use kerf_e2e::poll;
use kerf_e2e::testbed::{apply_ok, tail, Testbed};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Each test runs a control plane, moto and a controller and waits on replacements; taking turns keeps
/// them within their deadlines on a small machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The AMI the EC2NodeClass `default` first resolves to for amd64 (`al2023@latest`, e2e/scripts/aws-emu/).
const FIRST_AMI: &str = "ami-0eks130x86000001";

/// One NodeClaim as a watch event showed it.
#[derive(Clone, Debug)]
struct Seen {
    claim: String,
    initialized: bool,
    deleting: bool,
    /// The reason of a `Drifted=True` condition.
    drifted: Option<String>,
}

impl Seen {
    fn of(claim: &NodeClaim) -> Seen {
        let conditions = claim
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default();
        let is_true = |type_: &str| {
            conditions
                .iter()
                .find(|c| c.type_ == type_ && c.status == "True")
        };
        Seen {
            claim: claim.metadata.name.clone().unwrap_or_default(),
            initialized: is_true("Initialized").is_some(),
            deleting: claim.metadata.deletion_timestamp.is_some(),
            drifted: is_true("Drifted").map(|c| c.reason.clone()),
        }
    }
}

/// Every NodeClaim state a watch reports, in the apiserver's order, from its start until dropped.
struct ClaimRecord {
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ClaimRecord {
    fn start(api: Api<NodeClaim>) -> ClaimRecord {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let task = tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = events.next().await {
                let claim = match event {
                    Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => c,
                    // A deleted claim was seen deleting first (its finalizer held it); errors are retried by
                    // the watcher itself.
                    _ => continue,
                };
                let mut seen = sink.lock().unwrap_or_else(|p| p.into_inner());
                seen.push(Seen::of(&claim));
            }
        });
        ClaimRecord { seen, task }
    }

    fn snapshot(&self) -> Vec<Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for ClaimRecord {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The position of the first record that `matches`.
fn first(record: &[Seen], matches: impl Fn(&Seen) -> bool) -> Option<usize> {
    record.iter().position(matches)
}

/// The NodePool `general` (amd64, on-demand) of `instance_types`, consolidating `consolidate_after` a node's
/// last pod change.
fn pool(instance_types: &[&str], consolidate_after: &str) -> Result<Value> {
    let mut pool = node_pool("general", Value::Null);
    pool["spec"]["template"]["spec"]["requirements"]
        .as_array_mut()
        .context("node_pool has requirements")?
        .push(json!({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": instance_types}));
    pool["spec"]["disruption"] = json!({
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": consolidate_after
    });
    Ok(pool)
}

/// The inflate pods of `namespace` that are not being deleted.
async fn inflate_pods(bed: &Testbed, namespace: &str) -> Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(bed.cluster.client()?, namespace);
    Ok(pods
        .list(&ListParams::default().labels("app=inflate"))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect())
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

fn name(claim: &NodeClaim) -> String {
    claim.metadata.name.clone().unwrap_or_default()
}

fn is_initialized(claim: &NodeClaim) -> bool {
    Seen::of(claim).initialized
}

fn instance_type(claim: &NodeClaim) -> Option<&str> {
    claim
        .metadata
        .labels
        .as_ref()?
        .get("node.kubernetes.io/instance-type")
        .map(String::as_str)
}

/// Applies the pool, runs `replicas` inflate pods of `cpu` and waits until every one is bound to the node of
/// an initialized claim; returns the inflate namespace and the claims.
async fn inflated(
    bed: &Testbed,
    pool: Value,
    replicas: usize,
    cpu: &str,
) -> Result<(String, Vec<NodeClaim>)> {
    apply_ok(&bed.cluster, &pool).await?;
    let namespace = bed.cluster.create_namespace("inflate").await?;
    create_inflate(&bed.cluster, &namespace, replicas as i32, cpu, "256Mi").await?;
    let (cluster, namespace_ref) = (&bed.cluster, namespace.as_str());
    let claims = poll(
        "the inflate pods on the nodes of initialized claims",
        Duration::from_secs(120),
        || async move {
            let claims = node_claims(cluster).await?;
            let pods = inflate_pods(bed, namespace_ref).await?;
            let nodes: BTreeSet<&str> = claims
                .iter()
                .filter(|c| is_initialized(c))
                .filter_map(|c| c.status.as_ref()?.node_name.as_deref())
                .collect();
            let placed = pods.len() == replicas
                && pods
                    .iter()
                    .all(|p| node_of(p).is_some_and(|n| nodes.contains(n)));
            Ok((placed && claims.iter().all(is_initialized)).then_some(claims))
        },
    )
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 40)))?;
    Ok((namespace, claims))
}

/// A copy of [`FIRST_AMI`] registered in moto under a new ID (same architecture, newer creation date).
async fn register_second_ami(bed: &Testbed) -> Result<String> {
    let copied = bed
        .cloud
        .ec2()
        .copy_image()
        .source_image_id(FIRST_AMI)
        .source_region(REGION)
        .name(format!("{}-drift", bed.name))
        .send()
        .await
        .context("CopyImage")?;
    Ok(copied
        .image_id()
        .context("CopyImage gave no image ID")?
        .to_owned())
}

/// Makes the EC2NodeClass `default` select only `ami`.
async fn select_ami(bed: &Testbed, ami: &str) -> Result<()> {
    let classes: Api<EC2NodeClass> = Api::all(bed.cluster.client()?);
    let patch = json!({"spec": {"amiFamily": "AL2023", "amiSelectorTerms": [{"id": ami}]}});
    classes
        .patch("default", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .context("changing the EC2NodeClass amiSelectorTerms")?;
    Ok(())
}

/// Waits until no claim of `old` is left and the `replicas` inflate pods are all bound to nodes of initialized
/// claims; returns the claims then.
async fn replaced(
    bed: &Testbed,
    namespace: &str,
    old: &BTreeSet<String>,
    replicas: usize,
) -> Result<Vec<NodeClaim>> {
    let cluster = &bed.cluster;
    let waited = poll(
        "the old claims replaced and the pods moved",
        Duration::from_secs(150),
        || async move {
            let claims = node_claims(cluster).await?;
            if claims.iter().any(|c| old.contains(&name(c))) {
                return Ok(None);
            }
            let nodes: BTreeSet<&str> = claims
                .iter()
                .filter(|c| is_initialized(c))
                .filter_map(|c| c.status.as_ref()?.node_name.as_deref())
                .collect();
            let pods = inflate_pods(bed, namespace).await?;
            let moved = pods.len() == replicas
                && pods
                    .iter()
                    .all(|p| node_of(p).is_some_and(|n| nodes.contains(n)));
            Ok(moved.then_some(claims))
        },
    )
    .await;
    match waited {
        Ok(claims) => Ok(claims),
        Err(error) => {
            let claims = describe_claims(cluster).await;
            Err(error.context(format!(
                "claims:\n{claims}\nkerf controller log:\n{}",
                tail(&bed.log(), 60)
            )))
        }
    }
}

/// Each claim's name, Node and conditions, for a failure's message.
async fn describe_claims(cluster: &kerf_e2e::Cluster) -> String {
    match node_claims(cluster).await {
        Ok(claims) => claims
            .iter()
            .map(|c| {
                let status = c.status.as_ref();
                let conditions: Vec<String> = status
                    .and_then(|s| s.conditions.as_ref())
                    .into_iter()
                    .flatten()
                    .map(|c| format!("{}={} {} {}", c.type_, c.status, c.reason, c.message))
                    .collect();
                let node = status.and_then(|s| s.node_name.as_deref()).unwrap_or("-");
                format!("{} node={node} [{}]", name(c), conditions.join("; "))
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Err(error) => format!("(listing the claims failed: {error})"),
    }
}

/// The position of `old`'s first record as deleting.
fn deleted_at(record: &[Seen], old: &str) -> Result<usize> {
    first(record, |s| s.claim == old && s.deleting)
        .with_context(|| format!("{old} seen deleting: {record:#?}"))
}

/// Checks that each claim of `old` was marked `Drifted` with `reason` before it was deleted.
fn marked_drifted_before_deleted(
    record: &[Seen],
    old: &BTreeSet<String>,
    reason: &str,
) -> Result<()> {
    for claim in old {
        let deleted = deleted_at(record, claim)?;
        let marked = first(record, |s| {
            s.claim == *claim && s.drifted.as_deref() == Some(reason)
        });
        ensure!(
            marked.is_some_and(|m| m < deleted),
            "{claim} was marked Drifted ({reason}) before its deletion: {record:#?}"
        );
    }
    Ok(())
}

/// Checks that replacement capacity came first: the k-th claim of `old` to be deleted had k claims not in `old`
/// Initialized before its deletion.
fn launched_before_deleted(record: &[Seen], old: &BTreeSet<String>) -> Result<()> {
    let mut deletions = old
        .iter()
        .map(|o| Ok((deleted_at(record, o)?, o)))
        .collect::<Result<Vec<_>>>()?;
    deletions.sort();
    for (k, (deleted, old_claim)) in deletions.iter().enumerate() {
        let ready_before: BTreeSet<&str> = record[..*deleted]
            .iter()
            .filter(|s| s.initialized && !old.contains(&s.claim))
            .map(|s| s.claim.as_str())
            .collect();
        ensure!(
            ready_before.len() > k,
            "{} replacement(s) Initialized before {old_claim} was deleted (event {deleted}), {} needed: \
             {record:#?}",
            ready_before.len(),
            k + 1
        );
    }
    Ok(())
}

/// The single live instance of each claim of `claims`.
async fn instances(bed: &Testbed, claims: &[NodeClaim]) -> Result<Vec<kerf::cloud::Instance>> {
    let mut found = Vec::new();
    for claim in claims {
        let mut instances = bed.instances_of(&name(claim)).await?;
        ensure!(
            instances.len() == 1,
            "one instance for {}: {instances:?}",
            name(claim)
        );
        found.append(&mut instances);
    }
    Ok(found)
}

/// Checks that every instance of `old` is terminated.
async fn terminated(bed: &Testbed, old: &[kerf::cloud::Instance]) -> Result<()> {
    for instance in old {
        match bed.cloud.get(&instance.provider_id).await {
            Err(CloudError::NotFound { .. }) => {}
            other => anyhow::bail!("old instance {} still there: {other:?}", instance.id),
        }
    }
    Ok(())
}

/// Whether the controller logged a command for `reason` that `decision` (`delete` or `replace`).
fn logged_command(bed: &Testbed, reason: &str, decision: &str) -> Result<()> {
    let log = bed.log();
    let reason = format!("\"reason\":\"{reason}\"");
    let decision = format!("\"decision\":\"{decision}\"");
    ensure!(
        log.lines().any(|l| l.contains("disrupting node(s)")
            && l.contains(&reason)
            && l.contains(&decision)),
        "a {reason} {decision} command was logged:\n{}",
        tail(&log, 40)
    );
    Ok(())
}

#[tokio::test]
async fn a_new_ami_replaces_each_node_launching_first_then_draining() -> Result<()> {
    let _turn = SERIAL.lock().await;
    let Some(bed) = Testbed::start_or_skip("a_new_ami_replaces_each_node").await? else {
        return Ok(());
    };
    // The class selects its first AMI by ID from the start, so that selecting the second changes only the
    // selector terms (dynamic drift), not the class's hash (a new `amiFamily` would be `NodeClassDrift`).
    select_ami(&bed, FIRST_AMI).await?;
    // Consolidation waits a minute after a node's last pod change, so that it cannot take the replacement
    // while the pods are still moving: this test is about drift alone.
    let (namespace, old) = inflated(&bed, pool(&["c5.large"], "1m")?, 3, "300m").await?;
    let old_names: BTreeSet<String> = old.iter().map(name).collect();
    let old_instances = instances(&bed, &old).await?;
    ensure!(old_instances.iter().all(|i| i.image_id == FIRST_AMI));

    let record = ClaimRecord::start(Api::all(bed.cluster.client()?));
    let new_ami = register_second_ami(&bed).await?;
    select_ami(&bed, &new_ami).await?;
    let new = replaced(&bed, &namespace, &old_names, 3).await?;
    let record = record.snapshot();

    // Each old claim was marked Drifted for its AMI before it was deleted; replacements came first.
    marked_drifted_before_deleted(&record, &old_names, "AMIDrift")?;
    launched_before_deleted(&record, &old_names)?;
    terminated(&bed, &old_instances).await?;
    ensure!(!new.is_empty(), "replacements exist");
    for instance in instances(&bed, &new).await? {
        ensure!(
            instance.image_id == new_ami,
            "replacement instance {} runs {new_ami}: {instance:?}",
            instance.id
        );
    }
    logged_command(&bed, "Drifted", "replace")
}

#[tokio::test]
async fn a_changed_pool_template_replaces_its_nodes_as_nodepool_drifted() -> Result<()> {
    let _turn = SERIAL.lock().await;
    let Some(bed) = Testbed::start_or_skip("a_changed_pool_template").await? else {
        return Ok(());
    };
    let (namespace, old) = inflated(&bed, pool(&["c5.large"], "1m")?, 1, "300m").await?;
    let old_names: BTreeSet<String> = old.iter().map(name).collect();
    // The pool carries the hash of its template, and its claims the hash they were made from.
    let pools: Api<NodePool> = Api::all(bed.cluster.client()?);
    let pools = &pools;
    let hash = poll(
        "the pool's hash annotation",
        Duration::from_secs(30),
        || async move {
            let pool = pools.get("general").await?;
            Ok(pool
                .metadata
                .annotations
                .and_then(|a| a.get(NODEPOOL_HASH).cloned()))
        },
    )
    .await?;
    for claim in &old {
        let annotations = claim.metadata.annotations.clone().unwrap_or_default();
        ensure!(
            annotations.get(NODEPOOL_HASH) == Some(&hash)
                && annotations.get(NODEPOOL_HASH_VERSION).map(String::as_str) == Some(HASH_VERSION),
            "claim {} carries the pool's hash {hash}: {annotations:?}",
            name(claim)
        );
    }

    let record = ClaimRecord::start(Api::all(bed.cluster.client()?));
    let label = json!({"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}});
    pools
        .patch("general", &PatchParams::default(), &Patch::Merge(label))
        .await
        .context("labelling the pool's template")?;
    let new = replaced(&bed, &namespace, &old_names, 1).await?;
    let record = record.snapshot();
    marked_drifted_before_deleted(&record, &old_names, "NodePoolDrifted")?;
    launched_before_deleted(&record, &old_names)?;
    for claim in &new {
        let team = claim.metadata.labels.as_ref().and_then(|l| l.get("team"));
        ensure!(
            team.map(String::as_str) == Some("b"),
            "replacement {} has the new label",
            name(claim)
        );
    }
    logged_command(&bed, "Drifted", "replace")
}

#[tokio::test]
async fn an_underused_node_is_replaced_by_a_cheaper_one_launched_first() -> Result<()> {
    let _turn = SERIAL.lock().await;
    let Some(bed) = Testbed::start_or_skip("an_underused_node_is_replaced").await? else {
        return Ok(());
    };
    // Three 1-CPU pods fit only an m5.xlarge (0.192 $/h); one alone fits a c5.large (0.085 $/h).
    let (namespace, old) = inflated(&bed, pool(&["c5.large", "m5.xlarge"], "0s")?, 3, "1").await?;
    let types: Vec<&str> = old.iter().filter_map(instance_type).collect();
    ensure!(
        types == ["m5.xlarge"],
        "one m5.xlarge for three pods: {types:?}"
    );
    let old_names: BTreeSet<String> = old.iter().map(name).collect();
    let old_instances = instances(&bed, &old).await?;

    let record = ClaimRecord::start(Api::all(bed.cluster.client()?));
    let deployments: Api<Deployment> = Api::namespaced(bed.cluster.client()?, &namespace);
    let scale = json!({"spec": {"replicas": 1}});
    deployments
        .patch("inflate", &PatchParams::default(), &Patch::Merge(scale))
        .await
        .context("scaling inflate to 1")?;
    let new = replaced(&bed, &namespace, &old_names, 1).await?;
    let record = record.snapshot();

    let types: Vec<&str> = new.iter().filter_map(instance_type).collect();
    ensure!(types == ["c5.large"], "one cheaper c5.large: {types:?}");
    launched_before_deleted(&record, &old_names)?;
    terminated(&bed, &old_instances).await?;
    logged_command(&bed, "Underutilized", "replace")
}

/// The order check itself (no cluster): it fails when a claim goes before enough replacements are ready.
#[test]
fn the_order_check_fails_when_an_old_claim_goes_first() {
    let seen = |claim: &str, initialized, deleting| Seen {
        claim: claim.to_owned(),
        initialized,
        deleting,
        drifted: None,
    };
    let old: BTreeSet<String> = ["a".to_owned(), "b".to_owned()].into();
    let in_order = [
        seen("a", true, false),
        seen("b", true, false),
        seen("n1", true, false),
        seen("a", true, true),
        seen("n2", false, false),
        seen("n2", true, false),
        seen("b", true, true),
    ];
    assert!(launched_before_deleted(&in_order, &old).is_ok());
    // b goes with only one replacement ready.
    let mut early = in_order.to_vec();
    early.swap(5, 6);
    assert!(launched_before_deleted(&early, &old).is_err());
    // a replacement created but not yet Initialized does not count.
    let not_ready = [
        seen("a", true, false),
        seen("n1", false, false),
        seen("a", true, true),
    ];
    let only_a: BTreeSet<String> = ["a".to_owned()].into();
    assert!(launched_before_deleted(&not_ready, &only_a).is_err());
}
