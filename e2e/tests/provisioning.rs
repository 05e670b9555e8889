//! Provisioning on the real control plane with moto: the kube-scheduler marks the inflate pods Unschedulable,
//! `kerf controller` (a separate process) turns them into NodeClaims of the right shape, does not repeat them
//! after a crash, and stops at NodePool limits with an Event.

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kerf::api::nodeclaim::NodeClaim;
use kerf::api::nodepool::NodePool;
use kerf_e2e::aws::{AwsEmu, REGION};
use kerf_e2e::controller::{
    self, create_inflate, events_with_reason, node_claims, node_pool, ControllerSetup,
};
use kerf_e2e::figures::{pod_launches, quantile, ControllerLog, Memory, PodLaunch, Unschedulable};
use kerf_e2e::kubelet::{KubeletSettings, StandInKubelet};
use kerf_e2e::{poll, Cluster};
use kube::api::{Api, ListParams};
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// The summed CPU (millicores) of the claims' `resources.requests`.
fn requested_cpu(claims: &[NodeClaim]) -> i64 {
    claims
        .iter()
        .filter_map(|c| {
            c.spec
                .resources
                .as_ref()?
                .requests
                .as_ref()?
                .get("cpu")
                .cloned()
        })
        .map(|q| {
            let text = match q {
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => n.to_string(),
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s,
            };
            kerf::catalog::parse_quantity(&text).unwrap_or(0)
        })
        .sum()
}

fn names(claims: &[NodeClaim]) -> BTreeSet<String> {
    claims
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect()
}

async fn setup(
    test: &str,
    prefix: &str,
) -> Result<Option<(Cluster, std::sync::Arc<AwsEmu>, ControllerSetup)>> {
    let Some(cluster) = Cluster::start_or_skip(test).await? else {
        return Ok(None);
    };
    let Some(emu) = AwsEmu::shared_or_skip(test)? else {
        return Ok(None);
    };
    let setup = controller::prepare(&cluster, &emu, prefix).await?;
    Ok(Some((cluster, emu, setup)))
}

#[tokio::test]
async fn pending_pods_become_node_claims_once_even_across_a_restart() -> Result<()> {
    let test = "pending_pods_become_node_claims_once_even_across_a_restart";
    let Some((cluster, _emu, setup)) = setup(test, "prov").await? else {
        return Ok(());
    };
    let (ok, stderr) = cluster.apply(&node_pool("general", json!(null))).await?;
    anyhow::ensure!(ok, "applying the NodePool: {stderr}");
    let pools: Api<NodePool> = Api::all(cluster.client()?);
    let pool_uid = pools.get("general").await?.metadata.uid.context("a uid")?;
    let first = setup.start("kerf-a", &[]).await?;
    let namespace = cluster.create_namespace("inflate").await?;
    create_inflate(&cluster, &namespace, 10, "1", "1536Mi").await?;

    let cluster_ref = &cluster;
    let claims = poll(
        "NodeClaims requesting the CPU of all 10 pods",
        Duration::from_secs(90),
        || async move {
            let claims = node_claims(cluster_ref).await?;
            Ok((requested_cpu(&claims) >= 10_000).then_some(claims))
        },
    )
    .await?;
    for claim in &claims {
        let name = claim.metadata.name.as_deref().unwrap_or_default();
        assert!(name.starts_with("general-"), "{name}");
        let labels = claim.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("karpenter.sh/nodepool").map(String::as_str),
            Some("general")
        );
        assert_eq!(labels.get("team").map(String::as_str), Some("e2e"));
        // Karpenter's claim template names the class too (the operator metrics read it).
        assert_eq!(
            labels
                .get("karpenter.k8s.aws/ec2nodeclass")
                .map(String::as_str),
            Some("default")
        );
        assert_eq!(
            claim.metadata.finalizers.as_deref(),
            Some(&["karpenter.sh/termination".to_owned()][..])
        );
        let owner = &claim
            .metadata
            .owner_references
            .as_ref()
            .context("an owner")?[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("NodePool", pool_uid.as_str())
        );
        assert_eq!(claim.spec.node_class_ref.name, "default");
        assert_eq!(claim.spec.expire_after.as_deref(), Some("720h"));
        let types = claim
            .spec
            .requirements
            .iter()
            .find(|r| r.key == "node.kubernetes.io/instance-type")
            .and_then(|r| r.values.clone())
            .context("an instance-type requirement")?;
        assert!(
            !types.is_empty() && types.len() <= 600,
            "{} types",
            types.len()
        );
        let capacity_types = claim
            .spec
            .requirements
            .iter()
            .find(|r| r.key == "karpenter.sh/capacity-type")
            .and_then(|r| r.values.clone());
        assert_eq!(capacity_types, Some(vec!["on-demand".to_owned()]));
    }
    let metrics = first.metrics().await?;
    assert!(
        metrics.contains(r#"karpenter_nodeclaims_created_total{reason="provisioned",nodepool="general",min_values_relaxed="false"}"#),
        "{metrics}"
    );
    let log = std::fs::read_to_string(&first.log)?;
    assert!(log.contains("created nodeclaim"), "{log}");
    // No --kubernetes-version: the version AMI aliases resolve for is the apiserver's.
    assert!(
        log.lines().any(
            |l| l.contains("discovered the Kubernetes version from the apiserver")
                && l.contains("1.20")
        ),
        "{log}"
    );
    assert!(log.lines().all(|l| l.starts_with('{')), "JSON logs: {log}");
    // The Events follow the launches.
    let cluster_ref = &cluster;
    poll(
        "a Nominated event",
        Duration::from_secs(30),
        || async move {
            let nominated = events_with_reason(cluster_ref, "Nominated").await?;
            Ok((!nominated.is_empty()).then_some(()))
        },
    )
    .await?;
    // Each pending pod's live status names the claim it waits for, as its Event does.
    let pods: Api<Pod> = Api::namespaced(cluster.client()?, &namespace);
    let pods_ref = &pods;
    let claim_names = names(&claims);
    let claim_names = &claim_names;
    poll(
        "every pod's kerf.sh/provisioning annotation to name its NodeClaim",
        Duration::from_secs(30),
        || async move {
            let list = pods_ref.list(&Default::default()).await?;
            let named = list.items.iter().all(|pod| {
                pod.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("kerf.sh/provisioning"))
                    .and_then(|s| s.strip_prefix("Pod should schedule on: nodeclaim/"))
                    .is_some_and(|claim| claim_names.contains(claim))
            });
            Ok((named && list.items.len() == 10).then_some(()))
        },
    )
    .await?;
    let pools_ref = &pools;
    let expected_nodes = i64::try_from(claims.len())?;
    poll(
        "the NodePool status to count the claims",
        Duration::from_secs(30),
        || async move {
            let pool = pools_ref.get("general").await?;
            Ok((pool.status.and_then(|s| s.nodes) == Some(expected_nodes)).then_some(()))
        },
    )
    .await?;

    // A crash and a restart: the same pods are solved again and nothing new is created.
    drop(first);
    let second = setup.start("kerf-a", &[]).await?;
    solves_at_least(&second, 1).await?;
    let after = node_claims(&cluster).await?;
    assert_eq!(
        names(&after),
        names(&claims),
        "the restart created or lost claims"
    );
    Ok(())
}

#[tokio::test]
async fn node_pool_limits_stop_provisioning_with_an_event() -> Result<()> {
    let test = "node_pool_limits_stop_provisioning_with_an_event";
    let Some((cluster, _emu, setup)) = setup(test, "limits").await? else {
        return Ok(());
    };
    let (ok, stderr) = cluster
        .apply(&node_pool("limited", json!({"cpu": "4"})))
        .await?;
    anyhow::ensure!(ok, "applying the NodePool: {stderr}");
    let controller = setup.start("kerf-limits", &[]).await?;
    let namespace = cluster.create_namespace("inflate").await?;
    create_inflate(&cluster, &namespace, 10, "1", "1536Mi").await?;

    let cluster_ref = &cluster;
    let event = poll(
        "the NodePool limit Event",
        Duration::from_secs(90),
        || async move {
            let events = events_with_reason(cluster_ref, "NodePoolLimitReached").await?;
            Ok(events.into_iter().find(|e| {
                e.involved_object.kind.as_deref() == Some("NodePool")
                    && e.involved_object.name.as_deref() == Some("limited")
            }))
        },
    )
    .await?;
    let message = event.message.unwrap_or_default();
    assert!(
        message.contains("cpu"),
        "the Event names the resource: {message}"
    );

    // Past a retrigger period (10 s) the claims are what the limit allowed, and no more.
    let claims = node_claims(&cluster).await?;
    assert!(
        !claims.is_empty(),
        "the limit leaves room for some capacity"
    );
    solves_at_least(&controller, 2).await?;
    let after = node_claims(&cluster).await?;
    assert_eq!(
        names(&after),
        names(&claims),
        "claims created past the limit"
    );
    assert!(
        requested_cpu(&after) <= 4_000,
        "{} millicores requested under a 4 CPU limit",
        requested_cpu(&after)
    );
    Ok(())
}

/// Issue 5's test 1, end to end: provisioning, launch in moto, registration by the stand-in kubelet, the real
/// kube-scheduler binding every pod, and the NodeClaims Initialized, within 60 seconds.
#[tokio::test]
async fn inflate_is_launched_registered_and_bound_within_60_seconds() -> Result<()> {
    use k8s_openapi::api::core::v1::Pod;
    let test = "inflate_is_launched_registered_and_bound_within_60_seconds";
    let Some((cluster, emu, setup)) = setup(test, "inflate").await? else {
        return Ok(());
    };
    let (ok, stderr) = cluster.apply(&node_pool("general", json!(null))).await?;
    anyhow::ensure!(ok, "applying the NodePool: {stderr}");
    let cloud = emu
        .cloud(&setup.cluster_name, Duration::from_secs(60))
        .await?;
    let mut settings = KubeletSettings::new(&setup.cluster_name, REGION);
    settings.heartbeat_interval = Duration::from_secs(1);
    let _kubelet = StandInKubelet::start(cluster.client()?, cloud.ec2().clone(), settings)?;
    let _controller = setup.start("kerf-inflate", &[]).await?;
    let namespace = cluster.create_namespace("inflate").await?;
    let started = Instant::now();
    create_inflate(&cluster, &namespace, 10, "1", "1536Mi").await?;

    let pods: Api<Pod> = Api::namespaced(cluster.client()?, &namespace);
    let pods = &pods;
    poll(
        "every inflate pod bound",
        Duration::from_secs(60),
        || async move {
            let list = pods.list(&ListParams::default()).await?.items;
            let bound = list
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                .count();
            Ok((list.len() == 10 && bound == 10).then_some(()))
        },
    )
    .await?;
    let cluster_ref = &cluster;
    poll(
        "every NodeClaim Initialized",
        Duration::from_secs(60),
        || async move {
            let claims = node_claims(cluster_ref).await?;
            let initialized = claims.iter().all(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == "Initialized" && c.status == "True")
                    })
            });
            Ok((!claims.is_empty() && initialized).then_some(()))
        },
    )
    .await?;
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
    // One instance per claim: a claim launched twice (a reconcile racing its own launch) shows up here.
    let mut launched: Vec<String> = kerf::cloud::CloudProvider::list(&cloud)
        .await?
        .into_iter()
        .filter_map(|i| i.tags.get(kerf::cloud::TAG_NODECLAIM).cloned())
        .collect();
    launched.sort();
    let mut claims: Vec<String> = node_claims(&cluster)
        .await?
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    claims.sort();
    assert_eq!(launched, claims, "the claims' instances, by claim");
    Ok(())
}

/// A value of the controller's `/metrics` text: the sample whose line starts with `series`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Waits until the controller's metric `series` reaches `at_least`.
async fn metric_at_least(
    controller: &controller::Controller,
    series: &str,
    at_least: f64,
    timeout: Duration,
) -> Result<()> {
    poll(
        &format!("{series} to reach {at_least}"),
        timeout,
        || async move {
            let text = controller.metrics().await?;
            Ok(sample(&text, series)
                .is_some_and(|n| n >= at_least)
                .then_some(()))
        },
    )
    .await
}

/// Waits until the controller has run at least `solves` scheduling simulations.
async fn solves_at_least(controller: &controller::Controller, solves: u32) -> Result<()> {
    let series =
        r#"karpenter_scheduler_scheduling_duration_seconds_count{controller="provisioner"}"#;
    metric_at_least(
        controller,
        series,
        f64::from(solves),
        Duration::from_secs(90),
    )
    .await
}

/// Waits until the controller has decided about `pods` pods in all.
async fn decided(controller: &controller::Controller, pods: u32) -> Result<()> {
    let series = "karpenter_pods_scheduling_decision_duration_seconds_count";
    metric_at_least(
        controller,
        series,
        f64::from(pods),
        Duration::from_secs(300),
    )
    .await
}

/// The figures of docs/performance.md ("The controller's provisioning loop") for the binary `KERF_BIN`: the
/// controller's memory (heap and file-backed pages apart) after a warm-up pod and with 1,000 pending pods, and
/// per pod the time from Unschedulable to its NodeClaim's CreateFleet call, split at the close of the batch
/// window. Prints them; run on demand with `--ignored`.
#[tokio::test]
#[ignore = "a measurement for docs/performance.md, not a check"]
async fn figures_for_1000_pending_pods() -> Result<()> {
    let test = "figures_for_1000_pending_pods";
    let Some((cluster, _emu, setup)) = setup(test, "perf").await? else {
        return Ok(());
    };
    let (ok, stderr) = cluster.apply(&node_pool("general", json!(null))).await?;
    anyhow::ensure!(ok, "applying the NodePool: {stderr}");
    let controller = setup.start("kerf-perf", &[]).await?;
    let pid = controller.process.id();
    println!("figures: controller started: {}", Memory::of(pid)?);
    // One pod first: the instance types are listed (moto answers all 1,395 in one page) and the caches filled.
    let warm = cluster.create_namespace("warm").await?;
    create_inflate(&cluster, &warm, 1, "100m", "128Mi").await?;
    decided(&controller, 1).await?;
    println!("figures: after the warm-up pod: {}", Memory::of(pid)?);
    let namespace = cluster.create_namespace("inflate").await?;
    let (unschedulable, watch) =
        Unschedulable::watch(Api::namespaced(cluster.client()?, &namespace));
    create_inflate(&cluster, &namespace, 1000, "100m", "128Mi").await?;
    decided(&controller, 1001).await?;
    println!("figures: with 1,000 pods decided: {}", Memory::of(pid)?);
    watch.abort();

    let nominated = nominated_pods(&cluster, &namespace, 1000).await?;
    let (log, launches) = launches(&controller, &unschedulable, &nominated)?;
    println!(
        "figures: {} NodeClaims, {} CreateFleet calls, {} batch windows; {} of {} pods nominated to a claim made for them",
        node_claims(&cluster).await?.len(),
        log.fleet_calls.len(),
        log.windows_closed.len(),
        launches.len(),
        nominated.len(),
    );
    println!(
        "figures: unschedulable -> CreateFleet: {}",
        ms(launches.iter().map(|l| l.total).collect())
    );
    println!(
        "figures:   of which waiting for the batch window to close: {}",
        ms(launches.iter().map(|l| l.window).collect())
    );
    println!(
        "figures:   of which window closed -> CreateFleet: {}",
        ms(launches.iter().map(|l| l.after_window()).collect())
    );
    println!(
        "figures:     window closed -> NodeClaim created: {}",
        ms(launches.iter().map(|l| l.solve).collect())
    );
    println!(
        "figures:     NodeClaim created -> CreateFleet: {}",
        ms(launches.iter().map(|l| l.launch).collect())
    );
    let text = controller.metrics().await?;
    let solve = |s: &str| {
        sample(
            &text,
            &format!(
                "karpenter_scheduler_scheduling_duration_seconds_{s}{{controller=\"provisioner\"}}"
            ),
        )
        .unwrap_or(0.0)
    };
    let decision = |s: &str| {
        sample(
            &text,
            &format!("karpenter_pods_scheduling_decision_duration_seconds_{s}"),
        )
        .unwrap_or(0.0)
    };
    println!(
        "figures: pending -> decision mean {:.2} s over {} pods; {} solves taking {:.3} s on average",
        decision("sum") / decision("count").max(1.0),
        decision("count"),
        solve("count"),
        solve("sum") / solve("count").max(1.0),
    );
    Ok(())
}

/// The NodeClaim each of `pods` pods in `namespace` was nominated to, from their `Nominated` Events (they follow
/// the launches).
async fn nominated_pods(
    cluster: &Cluster,
    namespace: &str,
    pods: usize,
) -> Result<HashMap<String, String>> {
    poll(
        "a Nominated event for every pod",
        Duration::from_secs(60),
        || async move {
            let nominated: HashMap<String, String> = events_with_reason(cluster, "Nominated")
                .await?
                .into_iter()
                .filter(|e| e.involved_object.namespace.as_deref() == Some(namespace))
                .filter_map(|e| {
                    let claim = e
                        .message?
                        .strip_prefix("Pod should schedule on: nodeclaim/")?
                        .to_owned();
                    Some((e.involved_object.name?, claim))
                })
                .collect();
            Ok((nominated.len() >= pods).then_some(nominated))
        },
    )
    .await
}

/// The controller's log so far and each nominated pod's way to its CreateFleet call; an error when a claim was
/// launched twice.
fn launches(
    controller: &controller::Controller,
    unschedulable: &Unschedulable,
    nominated: &HashMap<String, String>,
) -> Result<(ControllerLog, Vec<PodLaunch>)> {
    let log = ControllerLog::parse(&std::fs::read_to_string(&controller.log)?);
    anyhow::ensure!(
        log.repeated_fleet_calls.is_empty(),
        "claims launched more than once: {:?}",
        log.repeated_fleet_calls
    );
    let launches = pod_launches(&unschedulable.times(), nominated, &log);
    Ok((log, launches))
}

/// `values` as p50, p99 and max in milliseconds.
fn ms(values: Vec<Duration>) -> String {
    let q = |p| quantile(&values, p).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0);
    format!(
        "p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        q(0.5),
        q(0.99),
        q(1.0)
    )
}

/// The figures of docs/performance.md ("Bursts") for the binary `KERF_BIN`: bursts of 1, 25 and 100 pods that
/// each need a node of their own (3 vCPU on a pool of 4-vCPU `m5.xlarge`), one after the other on the same
/// controller, and per burst the time from the close of the batch window to each pod's CreateFleet call. Prints
/// them; run on demand with `--ignored`.
#[tokio::test]
#[ignore = "a measurement for docs/performance.md, not a check"]
async fn figures_for_bursts_of_pods_that_each_need_a_node() -> Result<()> {
    let test = "figures_for_bursts_of_pods_that_each_need_a_node";
    let Some((cluster, _emu, setup)) = setup(test, "bursts").await? else {
        return Ok(());
    };
    let mut pool = node_pool("one-per-node", json!(null));
    pool["spec"]["template"]["spec"]["requirements"]
        .as_array_mut()
        .context("requirements")?
        .push(json!({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]}));
    let (ok, stderr) = cluster.apply(&pool).await?;
    anyhow::ensure!(ok, "applying the NodePool: {stderr}");
    let controller = setup.start("kerf-bursts", &[]).await?;
    // A warm-up pod as large as the others, so that its node has no room for the first burst.
    let warm = cluster.create_namespace("warm").await?;
    create_inflate(&cluster, &warm, 1, "3", "4Gi").await?;
    decided(&controller, 1).await?;
    let mut decisions = 1;
    for burst in [1_u32, 25, 100] {
        let namespace = cluster.create_namespace(&format!("burst-{burst}")).await?;
        let (unschedulable, watch) =
            Unschedulable::watch(Api::namespaced(cluster.client()?, &namespace));
        create_inflate(&cluster, &namespace, i32::try_from(burst)?, "3", "4Gi").await?;
        decisions += burst;
        decided(&controller, decisions).await?;
        watch.abort();
        let nominated = nominated_pods(&cluster, &namespace, usize::try_from(burst)?).await?;
        let (log, launches) = launches(&controller, &unschedulable, &nominated)?;
        println!(
            "figures: burst of {burst}: {} pods on a claim made for them, {} CreateFleet calls so far; \
             window closed -> CreateFleet: {}; window closed -> NodeClaim created: {}",
            launches.len(),
            log.fleet_calls.len(),
            ms(launches.iter().map(|l| l.after_window()).collect()),
            ms(launches.iter().map(|l| l.solve).collect()),
        );
    }
    Ok(())
}

/// A pod whose PersistentVolume lives in one zone (a zonal EBS volume's node affinity) gets a NodeClaim that can
/// only launch there: the controller reads the claim, its bound volume and the volume's affinity from the
/// apiserver (Karpenter's volume topology, docs/scheduling.md "Volumes").
#[tokio::test]
async fn a_pod_gets_a_node_in_the_zone_of_its_volume() -> Result<()> {
    let test = "a_pod_gets_a_node_in_the_zone_of_its_volume";
    let Some((cluster, _emu, setup)) = setup(test, "volumes").await? else {
        return Ok(());
    };
    let zone = format!("{REGION}b");
    let namespace = cluster.create_namespace("volumes").await?;
    let objects = [
        node_pool("zonal", Value::Null),
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "e2e-zonal-volume"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0e2e"},
                "claimRef": {"namespace": namespace, "name": "data"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}]}}}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": namespace},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": "e2e-zonal-volume",
                "resources": {"requests": {"storage": "1Gi"}}}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db", "namespace": namespace},
            "spec": {"terminationGracePeriodSeconds": 0,
                "containers": [{"name": "db", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}}),
    ];
    for object in &objects {
        let (ok, stderr) = cluster.apply(object).await?;
        anyhow::ensure!(ok, "applying {}: {stderr}", object["kind"]);
    }
    let _controller = setup.start("kerf-volumes", &[]).await?;

    let cluster_ref = &cluster;
    let claim = poll(
        "a NodeClaim for the pod",
        Duration::from_secs(90),
        || async move { Ok(node_claims(cluster_ref).await?.into_iter().next()) },
    )
    .await?;
    let zones: Vec<String> = claim
        .spec
        .requirements
        .iter()
        .filter(|r| r.key == "topology.kubernetes.io/zone")
        .flat_map(|r| r.values.clone().unwrap_or_default())
        .collect();
    assert_eq!(zones, [zone], "{:?}", claim.spec.requirements);
    Ok(())
}

/// The annotations of pod `name` in `namespace`.
async fn pod_annotations(
    pods: &Api<Pod>,
    name: &str,
) -> Result<std::collections::BTreeMap<String, String>> {
    Ok(pods
        .get(name)
        .await?
        .metadata
        .annotations
        .unwrap_or_default())
}

/// Advice the webhook wrote from other NodePools is recomputed by the controller while the pod waits: a pod
/// carrying stale advice (hand-written here, as a webhook of an earlier NodePool spec would have left it) gets
/// the advice of the cluster's pools, and again when a pool's spec changes (a new fingerprint).
#[tokio::test]
async fn stale_pod_advice_is_recomputed_when_a_nodepool_changes() -> Result<()> {
    const INPUTS: &str = "kerf.sh/advice-inputs";
    const SUMMARY: &str = "kerf.sh/instance-summary";
    let test = "stale_pod_advice_is_recomputed_when_a_nodepool_changes";
    let Some((cluster, _emu, setup)) = setup(test, "advice").await? else {
        return Ok(());
    };
    let (ok, stderr) = cluster.apply(&node_pool("advised", json!(null))).await?;
    anyhow::ensure!(ok, "applying the NodePool: {stderr}");
    let _controller = setup.start("kerf-advice", &[]).await?;
    let namespace = cluster.create_namespace("advice").await?;
    let pods: Api<Pod> = Api::namespaced(cluster.client()?, &namespace);
    // An arm64 pod: the amd64 pool never fits it, so it stays pending whatever the pool's other requirements.
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "waiting", "annotations": {
            "kerf.sh/instance-requirements": "{}",
            SUMMARY: "stale",
            INPUTS: "0000000000000000",
        }},
        "spec": {
            "nodeSelector": {"kubernetes.io/arch": "arm64"},
            "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.9"}],
        },
    }))?;
    pods.create(&Default::default(), &pod).await?;

    let pods = &pods;
    let first = poll(
        "the controller to recompute the stale advice",
        Duration::from_secs(60),
        || async move {
            let annotations = pod_annotations(pods, "waiting").await?;
            let inputs = annotations.get(INPUTS).cloned().unwrap_or_default();
            Ok((inputs != "0000000000000000").then_some(annotations))
        },
    )
    .await?;
    let summary = first.get(SUMMARY).map(String::as_str).unwrap_or_default();
    assert!(
        summary.starts_with(
            "no nodepool fits: advised: incompatible requirements, key kubernetes.io/arch"
        ),
        "{summary}"
    );
    let requirements: Value = serde_json::from_str(
        first
            .get("kerf.sh/instance-requirements")
            .map(String::as_str)
            .unwrap_or("{}"),
    )?;
    assert_eq!(requirements["incompatible"][0]["nodePool"], "advised");

    // A new pool spec (another generation) is another fingerprint: the advice is recomputed again.
    let mut changed = node_pool("advised", json!(null));
    changed["spec"]["template"]["spec"]["requirements"]
        .as_array_mut()
        .context("requirements")?
        .push(json!({"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m"]}));
    let (ok, stderr) = cluster.apply(&changed).await?;
    anyhow::ensure!(ok, "changing the NodePool: {stderr}");
    let before = first.get(INPUTS).cloned().unwrap_or_default();
    let before = &before;
    poll(
        "the advice of the changed NodePool",
        Duration::from_secs(60),
        || async move {
            let annotations = pod_annotations(pods, "waiting").await?;
            Ok((annotations.get(INPUTS) != Some(before)).then_some(()))
        },
    )
    .await?;
    Ok(())
}
