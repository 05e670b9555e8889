//! One engine (issue 16): the same NodePool, EC2NodeClass and Deployment given to `kerf controller` on the real
//! control plane (with the AWS emulator and its prices) and to `kerf simulate` (the embedded us-west-2 catalog
//! with the same prices) launch the same instance types with the same number of pods on each, and consolidate to
//! the same nodes.

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kerf::api::labels;
use kerf_e2e::aws::{node_class_spec, TEST_PRICES};
use kerf_e2e::controller::{events_with_reason, node_claims, node_pool};
use kerf_e2e::kerf::kerf_binary;
use kerf_e2e::poll;
use kerf_e2e::testbed::{apply_ok, tail, Testbed};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

const REPLICAS: usize = 5;

/// A testbed whose controller batches for 5 s after the last pending pod (1 s by default), so the five pods are
/// one batch however slowly the machine creates them, as they are one solve in `kerf simulate`.
async fn testbed(test: &str) -> Result<Option<Testbed>> {
    Testbed::start_or_skip_with(test, |_| vec!["--batch-idle-duration=5s".to_owned()]).await
}

/// Types whose sizes make the packing a real choice: one 1-CPU pod per c5.large, or three per m5.xlarge.
fn pool() -> Value {
    pool_in(&["us-west-2a"])
}

/// The pool of [`pool`] over `zones` (the testbed's network has a subnet in us-west-2a and one in us-west-2b;
/// `kerf simulate` knows no subnets, so the pool's requirement is what keeps both to the same zones).
fn pool_in(zones: &[&str]) -> Value {
    let mut pool = node_pool("parity", Value::Null);
    pool["spec"]["template"]["spec"]["requirements"] = json!([
        {"key": labels::INSTANCE_TYPE, "operator": "In", "values": ["c5.large", "m5.large", "m5.xlarge"]},
        {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
        {"key": labels::ZONE, "operator": "In", "values": zones}
    ]);
    pool
}

/// The pool of [`pool`], consolidating at once.
fn consolidating_pool() -> Value {
    let mut pool = pool();
    pool["spec"]["disruption"] = json!({
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "0s",
        "budgets": [{"nodes": "100%"}]
    });
    pool
}

/// `(instance type, zone, pods on it)` of every node, sorted.
type Shape = Vec<(String, String, usize)>;

/// The pods of each zone of a [`Shape`].
fn pods_per_zone(shape: &Shape) -> BTreeMap<String, usize> {
    let mut zones = BTreeMap::new();
    for (_, zone, pods) in shape {
        *zones.entry(zone.clone()).or_default() += pods;
    }
    zones
}

/// `kerf simulate` with the emulator's prices, in a directory of its own.
struct Simulate {
    dir: tempfile::TempDir,
    prices: PathBuf,
}

impl Simulate {
    fn new() -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let prices = dir.path().join("prices.json");
        std::fs::write(&prices, TEST_PRICES)?;
        Ok(Simulate { dir, prices })
    }

    /// The JSON report of the scenario `documents`, written to a file first.
    fn documents(&self, documents: &[Value]) -> Result<Value> {
        let text: Vec<String> = documents
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<_, _>>()?;
        let scenario = self.dir.path().join("scenario.yaml");
        std::fs::write(&scenario, text.join("\n---\n"))?;
        self.file(&scenario)
    }

    /// The JSON report of the scenario file `scenario`.
    fn file(&self, scenario: &Path) -> Result<Value> {
        let output = std::process::Command::new(kerf_binary()?)
            .arg("simulate")
            .arg(scenario)
            .args(["--region", "us-west-2", "--pricing-file"])
            .arg(&self.prices)
            .args(["-o", "json"])
            .output()?;
        ensure!(
            output.status.success(),
            "kerf simulate failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(serde_json::from_slice(&output.stdout)?)
    }
}

/// The testbed's EC2NodeClass and the inflate Deployment of `namespace`, its pod spec with `extra` merged in, as
/// scenario documents. The same Deployment is what the cluster runs.
fn class_and_deployment(bed: &Testbed, namespace: &str, extra: &Value) -> Result<[Value; 2]> {
    let class = json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
        "spec": serde_json::to_value(node_class_spec(&bed.name)?)?,
    });
    let mut pod_spec = json!({"terminationGracePeriodSeconds": 0, "containers": [{
        "name": "inflate", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
        "resources": {"requests": {"cpu": "1", "memory": "512Mi"}}}]});
    if let (Some(spec), Some(extra)) = (pod_spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "inflate", "namespace": namespace},
        "spec": {"replicas": REPLICAS, "selector": {"matchLabels": {"app": "inflate"}},
            "template": {"metadata": {"labels": {"app": "inflate"}}, "spec": pod_spec}},
    });
    Ok([class, deployment])
}

/// Applies `pool` and `deployment` and waits until every pod (its `replicas`) is bound; returns each pod's node.
async fn inflate_bound(
    bed: &Testbed,
    pool: &Value,
    deployment: &Value,
    namespace: &str,
) -> Result<Vec<String>> {
    let replicas = deployment["spec"]["replicas"]
        .as_u64()
        .context("the Deployment's replicas")? as usize;
    apply_ok(&bed.cluster, pool).await?;
    apply_ok(&bed.cluster, deployment).await?;
    let pods: Api<Pod> = Api::namespaced(bed.cluster.client()?, namespace);
    poll("every inflate pod bound", Duration::from_secs(180), || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default()).await?.items;
            let nodes: Vec<String> = list
                .iter()
                .filter_map(|p| p.spec.as_ref()?.node_name.clone())
                .collect();
            Ok((list.len() == replicas && nodes.len() == replicas).then_some(nodes))
        }
    })
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 40)))
}

/// Runs the inflate pods (their spec with `extra`) on the controller and through `kerf simulate`, and checks
/// that both launch the same instance types in the same zones with the same number of pods on each; returns the
/// simulator.
async fn same_launches(bed: &Testbed, namespace: &str, extra: Value) -> Result<Simulate> {
    let [class, deployment] = class_and_deployment(bed, namespace, &extra)?;
    let launches = launches(bed, namespace, &pool(), class, deployment).await?;
    Ok(launches.simulate)
}

/// What both launched for the same documents, found the same.
struct Launches {
    simulate: Simulate,
    /// The controller's nodes: the claims' launched types and zones, and the pods the scheduler bound to each.
    controller: Shape,
    /// `kerf simulate`'s first solve.
    simulated: Shape,
}

/// Runs `deployment` under `pool` and `class` on the controller and through `kerf simulate`, and checks that both
/// launch the same instance types in the same zones with the same number of pods on each.
async fn launches(
    bed: &Testbed,
    namespace: &str,
    pool: &Value,
    class: Value,
    deployment: Value,
) -> Result<Launches> {
    let pod_spec = &deployment["spec"]["template"]["spec"];

    // The controller: each claim's launched type and zone, and the pods on its node.
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for node in inflate_bound(bed, pool, &deployment, namespace).await? {
        *per_node.entry(node).or_default() += 1;
    }
    let claims = node_claims(&bed.cluster).await?;
    let mut controller: Shape = Vec::new();
    for (node, count) in &per_node {
        let claim = claims
            .iter()
            .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .with_context(|| format!("no NodeClaim for node {node}"))?;
        let instance_type = claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::INSTANCE_TYPE))
            .cloned()
            .context("a launched claim without its instance type")?;
        let zone = claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::ZONE))
            .cloned()
            .context("a launched claim without its zone")?;
        controller.push((instance_type, zone, *count));
    }
    controller.sort();

    // `kerf simulate` on the same objects.
    let simulate = Simulate::new()?;
    let simulation = json!({"apiVersion": "kerf.sh/v1alpha1", "kind": "Simulation", "spec": {}});
    let report = simulate.documents(&[simulation, pool.clone(), class, deployment.clone()])?;
    let simulated = simulated_shape(&report)?;
    eprintln!(
        "figures parity {pod_spec}: kerf controller {controller:?}, kerf simulate {simulated:?}"
    );
    ensure!(
        controller == simulated,
        "pods {pod_spec}: kerf controller launched {controller:?}, kerf simulate planned {simulated:?}"
    );
    Ok(Launches {
        simulate,
        controller,
        simulated,
    })
}

/// The nodes of a `kerf simulate` report's first solve, every pod placed.
fn simulated_shape(report: &Value) -> Result<Shape> {
    ensure!(
        report["unschedulable"]
            .as_array()
            .is_some_and(Vec::is_empty),
        "kerf simulate left pods unschedulable: {}",
        report["unschedulable"]
    );
    let mut simulated: Shape = report["nodeClaims"]
        .as_array()
        .context("nodeClaims")?
        .iter()
        .map(|c| {
            (
                c["instanceType"].as_str().unwrap_or_default().to_owned(),
                c["zone"].as_str().unwrap_or_default().to_owned(),
                c["pods"].as_array().map_or(0, Vec::len),
            )
        })
        .collect();
    simulated.sort();
    Ok(simulated)
}

#[tokio::test]
async fn the_controller_and_simulate_launch_the_same_nodes_for_the_same_pods() -> Result<()> {
    let Some(bed) = testbed("parity").await? else {
        return Ok(());
    };
    let namespace = bed.cluster.create_namespace("parity").await?;
    let cluster = &bed.cluster;
    let simulate = same_launches(&bed, &namespace, json!({})).await?;

    // `kerf snapshot` of the same cluster, run as a timeline: the nodes and bound pods are taken over, nothing
    // is launched for pods that already run.
    let output = std::process::Command::new(kerf_binary()?)
        .arg("snapshot")
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .args(["--duration", "5m"])
        .output()?;
    ensure!(
        output.status.success(),
        "kerf snapshot failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let snapshot = simulate.dir.path().join("snapshot.yaml");
    std::fs::write(&snapshot, &output.stdout)?;
    let report = simulate
        .file(&snapshot)
        .context("kerf simulate of the snapshot")?;
    let fresh_launches: Vec<&Value> = report["timeline"]
        .as_array()
        .context("a timeline")?
        .iter()
        .filter(|e| {
            e["action"] == "launch"
                && !e["detail"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("replacing")
        })
        .collect();
    ensure!(
        fresh_launches.is_empty(),
        "the snapshot's running pods were provisioned again: {fresh_launches:?}"
    );
    ensure!(
        report["totals"]["pendingAtEnd"] == 0,
        "pods left pending: {}",
        report["totals"]
    );
    ensure!(
        report["totals"]["nodesAtEnd"].as_u64() >= Some(1),
        "the snapshot's nodes were not taken over: {}",
        report["totals"]
    );
    Ok(())
}

/// The instance types of the nodes a timeline report ends with: launched, less those disrupted or interrupted.
fn nodes_at_end(report: &Value) -> Result<Vec<String>> {
    let mut nodes: BTreeMap<String, String> = BTreeMap::new();
    for entry in report["timeline"].as_array().context("a timeline")? {
        let claims = entry["nodeClaims"].as_array().cloned().unwrap_or_default();
        let detail = entry["detail"].as_str().unwrap_or_default();
        match entry["action"].as_str() {
            Some("launch") => {
                let name = claims.first().and_then(Value::as_str).unwrap_or_default();
                let instance_type = detail.split_whitespace().nth(1).unwrap_or_default();
                nodes.insert(name.to_owned(), instance_type.to_owned());
            }
            Some("disrupt" | "interrupt") => {
                for claim in claims.iter().filter_map(Value::as_str) {
                    nodes.remove(claim);
                }
            }
            _ => {}
        }
    }
    let mut types: Vec<String> = nodes.into_values().collect();
    types.sort();
    Ok(types)
}

/// The instance types of the cluster's claims, sorted.
fn claim_types(claims: &[kerf::api::nodeclaim::NodeClaim]) -> Vec<String> {
    let mut types: Vec<String> = claims
        .iter()
        .filter_map(|c| {
            c.metadata
                .labels
                .as_ref()?
                .get(labels::INSTANCE_TYPE)
                .cloned()
        })
        .collect();
    types.sort();
    types
}

/// Consolidation outcomes: five pods, then one; `kerf simulate`'s timeline says which nodes the cluster ends
/// with, and `kerf controller` on the real control plane must get there (an empty node deleted, the other
/// replaced by a cheaper type).
#[tokio::test]
async fn the_controller_consolidates_to_what_simulate_predicts() -> Result<()> {
    let Some(bed) = testbed("parity_consolidation").await? else {
        return Ok(());
    };
    let namespace = bed.cluster.create_namespace("parity").await?;
    let simulate = Simulate::new()?;
    let [class, deployment] = class_and_deployment(&bed, &namespace, &json!({}))?;
    let simulation = json!({"apiVersion": "kerf.sh/v1alpha1", "kind": "Simulation", "spec": {
        "duration": "40m",
        "events": [{"at": "10m", "scale": {"deployment": "inflate", "namespace": namespace, "replicas": 1}}]}});
    let report =
        simulate.documents(&[simulation, consolidating_pool(), class, deployment.clone()])?;
    let predicted = nodes_at_end(&report)?;
    ensure!(
        report["totals"]["disruptions"].as_u64() >= Some(1),
        "the scenario consolidates nothing: {report}"
    );

    inflate_bound(&bed, &consolidating_pool(), &deployment, &namespace).await?;
    let cluster = &bed.cluster;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client()?, &namespace);
    deployments
        .patch(
            "inflate",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await?;
    let predicted_ref = &predicted;
    let reached = poll(
        "the nodes kerf simulate predicted",
        Duration::from_secs(300),
        || async move {
            let claims = node_claims(cluster).await?;
            let settled = claims
                .iter()
                .all(|c| c.metadata.deletion_timestamp.is_none());
            let types = claim_types(&claims);
            Ok((settled && &types == predicted_ref).then_some(types))
        },
    )
    .await;
    let actual = claim_types(&node_claims(cluster).await?);
    eprintln!(
        "figures parity_consolidation: kerf simulate ends with {predicted:?}, kerf controller {actual:?}"
    );
    reached.with_context(|| {
        format!(
            "kerf controller has {actual:?}, kerf simulate predicted {predicted:?}; log:\n{}",
            tail(&bed.log(), 60)
        )
    })?;
    // A consolidation (not an emptiness) command says so on its nodes, in Karpenter's words.
    let underutilized = report["timeline"].as_array().is_some_and(|entries| {
        entries.iter().any(|e| {
            e["action"] == "disrupt"
                && e["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("Underutilized"))
        })
    });
    eprintln!("figures parity_consolidation: an Underutilized command predicted: {underutilized}");
    if underutilized {
        let candidates = poll(
            "ConsolidationCandidate Events",
            Duration::from_secs(30),
            || async move {
                let events = events_with_reason(cluster, "ConsolidationCandidate").await?;
                Ok((!events.is_empty()).then_some(events))
            },
        )
        .await?;
        ensure!(
            candidates.iter().all(|e| e
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with("Consolidation candidate: Underutilized/")
                    || m.starts_with("Consolidation candidate: replace: [")
                    || m.starts_with("Consolidation candidate: delete: ["))),
            "{candidates:?}"
        );
    }
    Ok(())
}

/// Pods that select labels kerf derives from the catalog (instance generation and vCPUs: only `m5.xlarge` of the
/// pool has both) get the same nodes from both. Such pods once stayed pending in `kerf simulate`, whose nodes
/// lacked most of a launched node's labels, while the controller bound them.
#[tokio::test]
async fn pods_selecting_derived_instance_labels_get_the_same_nodes_from_both() -> Result<()> {
    let Some(bed) = testbed("parity_derived_labels").await? else {
        return Ok(());
    };
    let namespace = bed.cluster.create_namespace("parity").await?;
    let selector = json!({"nodeSelector": {
        "karpenter.k8s.aws/instance-generation": "5",
        "karpenter.k8s.aws/instance-cpu": "4"
    }});
    same_launches(&bed, &namespace, selector).await?;
    let types = claim_types(&node_claims(&bed.cluster).await?);
    ensure!(
        !types.is_empty() && types.iter().all(|t| t == "m5.xlarge"),
        "only m5.xlarge has generation 5 and 4 vCPUs: {types:?}"
    );
    Ok(())
}

/// Pods that keep apart (a required hostname anti-affinity among themselves) get one node each, of the same types
/// from both.
#[tokio::test]
async fn pods_that_keep_apart_get_the_same_nodes_from_both() -> Result<()> {
    let Some(bed) = testbed("parity_apart").await? else {
        return Ok(());
    };
    let namespace = bed.cluster.create_namespace("parity").await?;
    let apart = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": {"matchLabels": {"app": "inflate"}}
    }]}}});
    same_launches(&bed, &namespace, apart).await?;
    let claims = node_claims(&bed.cluster).await?;
    ensure!(
        claims.len() == REPLICAS,
        "one node per pod: {:?}",
        claim_types(&claims)
    );
    Ok(())
}

/// Pods spread over zones (`maxSkew: 1` on `topology.kubernetes.io/zone`, `DoNotSchedule`) under a pool of two
/// zones get the same nodes in the same zones from both, and the scheduler's bindings honour the spread. Four pods
/// of 900m: without the spread one m5.xlarge takes all four in one zone; with it each zone gets two, which a
/// c5.large holds. Two per node at most (1,930m allocatable on a c5.large) and two nodes, so the real scheduler's
/// bindings are forced whichever node registers first.
#[tokio::test]
async fn pods_spread_over_zones_get_the_same_nodes_in_the_same_zones_from_both() -> Result<()> {
    const SPREAD_REPLICAS: usize = 4;
    let Some(bed) = testbed("parity_zonal_spread").await? else {
        return Ok(());
    };
    let namespace = bed.cluster.create_namespace("parity").await?;
    let pool = pool_in(&["us-west-2a", "us-west-2b"]);
    let containers = json!([{
        "name": "inflate", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
        "resources": {"requests": {"cpu": "900m", "memory": "512Mi"}}}]);
    let documents = |extra: &Value| -> Result<[Value; 2]> {
        let mut extra = extra.clone();
        extra["containers"] = containers.clone();
        let [class, mut deployment] = class_and_deployment(&bed, &namespace, &extra)?;
        deployment["spec"]["replicas"] = json!(SPREAD_REPLICAS);
        Ok([class, deployment])
    };

    // The spread is what takes the nodes into two zones: without it, `kerf simulate` plans one zone.
    let [class, deployment] = documents(&json!({}))?;
    let simulation = json!({"apiVersion": "kerf.sh/v1alpha1", "kind": "Simulation", "spec": {}});
    let unspread = simulated_shape(&Simulate::new()?.documents(&[
        simulation,
        pool.clone(),
        class,
        deployment,
    ])?)?;
    eprintln!("figures parity_zonal_spread: without the spread kerf simulate plans {unspread:?}");
    ensure!(
        pods_per_zone(&unspread).len() == 1,
        "without a spread the pods should share one zone: {unspread:?}"
    );

    let spread = json!({"topologySpreadConstraints": [{
        "maxSkew": 1,
        "topologyKey": labels::ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "inflate"}}
    }]});
    let [class, deployment] = documents(&spread)?;
    let launched = launches(&bed, &namespace, &pool, class, deployment).await?;

    // Every claim the controller made, those with no pod bound included: the same types in the same zones.
    let mut claimed: Vec<(String, String)> = node_claims(&bed.cluster)
        .await?
        .iter()
        .map(|c| {
            let label = |key| {
                c.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(key))
                    .cloned()
                    .unwrap_or_default()
            };
            (label(labels::INSTANCE_TYPE), label(labels::ZONE))
        })
        .collect();
    claimed.sort();
    let planned: Vec<(String, String)> = launched
        .simulated
        .iter()
        .map(|(t, z, _)| (t.clone(), z.clone()))
        .collect();
    ensure!(
        claimed == planned,
        "kerf controller made {} NodeClaims {claimed:?}, kerf simulate planned {} {planned:?}",
        claimed.len(),
        planned.len()
    );

    // The pods of each zone: as the scheduler bound them, as `kerf simulate` placed them; two zones, skew ≤ 1.
    let bound = pods_per_zone(&launched.controller);
    let planned = pods_per_zone(&launched.simulated);
    eprintln!("figures parity_zonal_spread: pods per zone bound {bound:?}, planned {planned:?}");
    ensure!(
        bound == planned,
        "pods per zone: kerf controller's nodes have {bound:?}, kerf simulate planned {planned:?}"
    );
    ensure!(
        bound.values().sum::<usize>() == SPREAD_REPLICAS,
        "every pod counted once: {bound:?}"
    );
    ensure!(
        bound.len() >= 2 && bound.keys().all(|z| z == "us-west-2a" || z == "us-west-2b"),
        "the spread takes the pods into both of the pool's zones: {bound:?}"
    );
    let (fewest, most) = (bound.values().min(), bound.values().max());
    ensure!(
        most.zip(fewest)
            .is_some_and(|(most, fewest)| most - fewest <= 1),
        "the spread's maxSkew of 1 is broken: {bound:?}"
    );
    Ok(())
}
