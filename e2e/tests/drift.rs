//! Drift on the real control plane with moto and the stand-in kubelet (issue 6): once the EC2NodeClass selects
//! another AMI, `kerf controller` marks the running claims `Drifted` (`AMIDrift`) and replaces them one at a
//! time: the replacement is launched from the new AMI and Initialized before the old claim is deleted, the
//! pods move to the new node, and the old instance is terminated.
//!
//! The order of events is taken from a watch on NodeClaims started before the change: the apiserver reports
//! the changes of one resource in the order they happened, so the record proves what came first.

use anyhow::{ensure, Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kerf::api::ec2nodeclass::EC2NodeClass;
use kerf::api::nodeclaim::NodeClaim;
use kerf::cloud::{CloudError, CloudProvider};
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

/// A NodePool of c5.large on-demand nodes. Consolidation waits a minute after a node's last pod change, so that
/// it cannot take the replacement while the pods are still moving: this test is about drift alone.
fn pool() -> Value {
    let mut pool = node_pool("general", Value::Null);
    pool["spec"]["template"]["spec"]["requirements"] = json!([
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
    ]);
    pool["spec"]["disruption"] = json!({
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "1m"
    });
    pool
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

/// Applies the pool, runs `replicas` inflate pods and waits until every one is bound to the node of an
/// initialized claim; returns the inflate namespace and the claims.
async fn inflated(bed: &Testbed, pool: Value, replicas: usize) -> Result<(String, Vec<NodeClaim>)> {
    apply_ok(&bed.cluster, &pool).await?;
    let namespace = bed.cluster.create_namespace("inflate").await?;
    create_inflate(&bed.cluster, &namespace, replicas as i32, "300m", "256Mi").await?;
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

#[tokio::test]
async fn a_new_ami_replaces_each_node_launching_first_then_draining() -> Result<()> {
    let Some(bed) = Testbed::start_or_skip("a_new_ami_replaces_each_node").await? else {
        return Ok(());
    };
    let (namespace, old) = inflated(&bed, pool(), 3).await?;
    let old_names: BTreeSet<String> = old.iter().map(name).collect();
    let mut old_provider_ids = Vec::new();
    for claim in &old {
        let instances = bed.instances_of(&name(claim)).await?;
        ensure!(
            instances.len() == 1,
            "one instance per claim: {instances:?}"
        );
        assert_eq!(instances[0].image_id, FIRST_AMI);
        old_provider_ids.push(instances[0].provider_id.clone());
    }

    let record = ClaimRecord::start(Api::all(bed.cluster.client()?));
    let new_ami = register_second_ami(&bed).await?;
    select_ami(&bed, &new_ami).await?;

    // Every old claim goes, and the inflate pods all run on the nodes of their replacements.
    let (cluster, namespace_ref, old_ref) = (&bed.cluster, namespace.as_str(), &old_names);
    let bed_ref = &bed;
    let new = poll(
        "the old claims replaced and the pods moved",
        Duration::from_secs(150),
        || async move {
            let claims = node_claims(cluster).await?;
            if claims.iter().any(|c| old_ref.contains(&name(c))) {
                return Ok(None);
            }
            let nodes: BTreeSet<&str> = claims
                .iter()
                .filter(|c| is_initialized(c))
                .filter_map(|c| c.status.as_ref()?.node_name.as_deref())
                .collect();
            let pods = inflate_pods(bed_ref, namespace_ref).await?;
            let moved = pods.len() == 3
                && pods
                    .iter()
                    .all(|p| node_of(p).is_some_and(|n| nodes.contains(n)));
            Ok(moved.then_some(claims))
        },
    )
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 60)))?;
    let record = record.snapshot();

    // Each old claim was marked Drifted for its AMI before it was deleted, and the k-th old claim deleted had
    // k replacements Initialized before its deletion.
    let mut deletions = Vec::new();
    for old in &old_names {
        let deleted = first(&record, |s| s.claim == *old && s.deleting)
            .with_context(|| format!("{old} seen deleting: {record:#?}"))?;
        let marked = first(&record, |s| {
            s.claim == *old && s.drifted.as_deref() == Some("AMIDrift")
        });
        ensure!(
            marked.is_some_and(|m| m < deleted),
            "{old} was marked Drifted (AMIDrift) before its deletion: {record:#?}"
        );
        deletions.push((deleted, old));
    }
    deletions.sort();
    for (k, (deleted, old)) in deletions.iter().enumerate() {
        let ready_before: BTreeSet<&str> = record[..*deleted]
            .iter()
            .filter(|s| s.initialized && !old_names.contains(&s.claim))
            .map(|s| s.claim.as_str())
            .collect();
        ensure!(
            ready_before.len() > k,
            "{} replacement(s) Initialized before {old} was deleted (event {deleted}), {} needed: {record:#?}",
            ready_before.len(),
            k + 1
        );
    }
    // The old instances are terminated; every new one runs the new AMI.
    for provider_id in &old_provider_ids {
        match bed.cloud.get(provider_id).await {
            Err(CloudError::NotFound { .. }) => {}
            other => anyhow::bail!("old instance {provider_id} still there: {other:?}"),
        }
    }
    ensure!(!new.is_empty(), "replacements exist");
    for claim in &new {
        let instances = bed.instances_of(&name(claim)).await?;
        ensure!(
            instances.len() == 1 && instances[0].image_id == new_ami,
            "replacement {} runs {new_ami}: {instances:?}",
            name(claim)
        );
    }
    let log = bed.log();
    ensure!(
        log.lines()
            .any(|l| l.contains("disrupting node(s)") && l.contains("Drifted")),
        "a Drifted disruption was logged:\n{}",
        tail(&log, 40)
    );
    Ok(())
}
