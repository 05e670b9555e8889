//! The controller's `/metrics` on the real control plane with moto (docs/metrics.md): after a pod of the
//! inflate Deployment gets a node (kerf launches it, the stand-in kubelet registers it, kube-scheduler binds
//! the pod), the NodePool, node, pod, NodeClaim, cloud provider, cluster-state and cost families carry samples
//! with Karpenter's label names and the values of that pod, node and pool.
//!
//! Run with `KERF_E2E=1 cargo test --workspace --test e2e -- metrics::` (docs/testing.md).

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kerf_e2e::aws::{AwsEmu, REGION};
use kerf_e2e::controller::{self, create_inflate, node_pool, Controller, ControllerSetup};
use kerf_e2e::kubelet::{KubeletSettings, StandInKubelet};
use kerf_e2e::{poll, Cluster};
use kube::api::{Api, ListParams};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

async fn setup(test: &str) -> Result<Option<(Cluster, std::sync::Arc<AwsEmu>, ControllerSetup)>> {
    let Some(cluster) = Cluster::start_or_skip(test).await? else {
        return Ok(None);
    };
    let Some(emu) = AwsEmu::shared_or_skip(test)? else {
        return Ok(None);
    };
    let setup = controller::prepare(&cluster, &emu, "metrics").await?;
    Ok(Some((cluster, emu, setup)))
}

/// One sample of the text: its labels and value.
#[derive(Debug)]
struct Sample {
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Every sample of series `name` (the full sample name: `…_total`, `…_count`) in the text.
fn samples(text: &str, name: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.strip_suffix('}')?),
                None => (series, ""),
            };
            if series_name != name {
                return None;
            }
            let labels = labels
                .split("\",")
                .filter(|pair| !pair.is_empty())
                .filter_map(|pair| {
                    let (k, v) = pair.split_once("=\"")?;
                    Some((k.to_owned(), v.trim_end_matches('"').to_owned()))
                })
                .collect();
            Some(Sample {
                labels,
                value: value.parse().ok()?,
            })
        })
        .collect()
}

/// The first sample of `name` whose labels include `with`.
fn find<'a>(all: &'a [Sample], with: &[(&str, &str)]) -> Option<&'a Sample> {
    all.iter().find(|s| {
        with.iter()
            .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
    })
}

/// What the test expects of one family: a sample of `name` with the labels `with` (and exactly the label
/// names `names`, when given) whose value passes `check`.
struct Expect<'a> {
    name: &'a str,
    with: Vec<(&'a str, &'a str)>,
    names: Option<&'a [&'a str]>,
    check: fn(f64) -> bool,
}

fn positive(v: f64) -> bool {
    v > 0.0
}

fn one(v: f64) -> bool {
    v == 1.0
}

fn any(v: f64) -> bool {
    v.is_finite()
}

/// What is missing from `text`, one line per expectation not met.
fn unmet(text: &str, expectations: &[Expect<'_>]) -> Vec<String> {
    let mut problems = Vec::new();
    for e in expectations {
        let all = samples(text, e.name);
        match find(&all, &e.with) {
            None => problems.push(format!(
                "{}{:?}: no sample among {:?}",
                e.name,
                e.with,
                all.iter().take(8).map(|s| &s.labels).collect::<Vec<_>>()
            )),
            Some(sample) if !(e.check)(sample.value) => {
                problems.push(format!("{}{:?}: value {}", e.name, e.with, sample.value))
            }
            Some(sample) => {
                if let Some(names) = e.names {
                    let got: Vec<&str> = sample.labels.keys().map(String::as_str).collect();
                    let mut want: Vec<&str> = names.to_vec();
                    want.sort_unstable();
                    if got != want {
                        problems.push(format!("{}: label names {got:?}, not {want:?}", e.name));
                    }
                }
            }
        }
    }
    problems
}

#[tokio::test]
async fn a_pod_that_got_a_node_shows_in_every_family() -> Result<()> {
    let test = "a_pod_that_got_a_node_shows_in_every_family";
    let Some((cluster, emu, setup)) = setup(test).await? else {
        return Ok(());
    };
    let (ok, stderr) = cluster
        .apply(&node_pool("general", json!({"cpu": "100"})))
        .await?;
    anyhow::ensure!(ok, "applying the NodePool: {stderr}");
    let cloud = emu
        .cloud(&setup.cluster_name, Duration::from_secs(60))
        .await?;
    let mut settings = KubeletSettings::new(&setup.cluster_name, REGION);
    settings.heartbeat_interval = Duration::from_secs(1);
    let _kubelet = StandInKubelet::start(cluster.client()?, cloud.ec2().clone(), settings)?;
    let controller: Controller = setup.start("kerf-metrics", &[]).await?;
    let namespace = cluster.create_namespace("metrics").await?;
    create_inflate(&cluster, &namespace, 1, "1", "1536Mi").await?;

    let pods: Api<Pod> = Api::namespaced(cluster.client()?, &namespace);
    let pods = &pods;
    let pod = poll(
        "the inflate pod bound",
        Duration::from_secs(90),
        || async move {
            let list = pods.list(&ListParams::default()).await?.items;
            Ok(list
                .into_iter()
                .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()))
        },
    )
    .await?;
    let pod_name = pod.metadata.name.clone().context("a pod name")?;
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .context("a node")?;
    let claims = controller::node_claims(&cluster).await?;
    let claim = claims
        .iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()))
        .context("the node's claim")?;
    let claim_name = claim.metadata.name.clone().context("a claim name")?;
    let claim_labels = claim.metadata.labels.clone().unwrap_or_default();
    let zone = claim_labels
        .get("topology.kubernetes.io/zone")
        .cloned()
        .context("a zone label")?;
    let instance_type = claim_labels
        .get("node.kubernetes.io/instance-type")
        .cloned()
        .context("an instance-type label")?;

    let pod_state_names: &[&str] = &[
        "name",
        "namespace",
        "owner",
        "node",
        "scheduled",
        "nodepool",
        "zone",
        "arch",
        "capacity_type",
        "instance_type",
        "phase",
        "ready",
        "managed",
    ];
    let expectations = vec![
        // NodePool
        Expect {
            name: "karpenter_nodepools_usage",
            with: vec![("nodepool", "general"), ("resource_type", "cpu")],
            names: Some(&["nodepool", "resource_type"]),
            check: positive,
        },
        Expect {
            name: "karpenter_nodepools_limit",
            with: vec![("nodepool", "general"), ("resource_type", "cpu")],
            names: None,
            check: |v| v == 100.0,
        },
        Expect {
            name: "karpenter_nodepools_allowed_disruptions",
            with: vec![("nodepool", "general"), ("reason", "Underutilized")],
            names: Some(&["nodepool", "reason"]),
            check: any,
        },
        Expect {
            name: "karpenter_nodepools_nodes_consuming_budgets",
            with: vec![("nodepool", "general"), ("reason", "Drifted")],
            names: None,
            check: any,
        },
        Expect {
            name: "karpenter_nodepools_cost_total",
            with: vec![("nodepool", "general")],
            names: Some(&["nodepool"]),
            check: positive,
        },
        // Node
        Expect {
            name: "karpenter_nodes_allocatable",
            with: vec![
                ("node_name", &node),
                ("nodepool", "general"),
                ("resource_type", "cpu"),
                ("managed", "true"),
                ("zone", &zone),
                ("instance_type", &instance_type),
            ],
            names: None,
            check: positive,
        },
        Expect {
            name: "karpenter_nodes_total_pod_requests",
            with: vec![("node_name", &node), ("resource_type", "cpu")],
            names: None,
            check: |v| v >= 1.0,
        },
        Expect {
            name: "karpenter_nodes_system_overhead",
            with: vec![("node_name", &node), ("resource_type", "memory")],
            names: None,
            check: any,
        },
        Expect {
            name: "karpenter_nodes_current_lifetime_seconds",
            with: vec![("node_name", &node), ("nodepool", "general")],
            names: None,
            check: |v| v >= 0.0,
        },
        Expect {
            name: "karpenter_nodes_created_total",
            with: vec![("nodepool", "general"), ("zone", &zone)],
            names: Some(&["nodepool", "zone"]),
            check: positive,
        },
        Expect {
            name: "karpenter_cluster_utilization_percent",
            with: vec![("resource_type", "cpu")],
            names: Some(&["resource_type"]),
            check: positive,
        },
        // Pod
        Expect {
            name: "karpenter_pods_state",
            with: vec![
                ("name", &pod_name),
                ("namespace", &namespace),
                ("node", &node),
                ("scheduled", "true"),
                ("nodepool", "general"),
                ("zone", &zone),
                ("instance_type", &instance_type),
                ("managed", "true"),
            ],
            names: Some(pod_state_names),
            check: one,
        },
        // The stand-in kubelet runs no containers: the bound pod stays Pending, so it is still unstarted (and
        // its binding, like Karpenter's, is observed only once it leaves Pending).
        Expect {
            name: "karpenter_pods_unstarted_time_seconds",
            with: vec![("name", &pod_name), ("namespace", &namespace)],
            names: Some(&["name", "namespace"]),
            check: positive,
        },
        Expect {
            name: "karpenter_pods_provisioning_unstarted_time_seconds",
            with: vec![("name", &pod_name), ("namespace", &namespace)],
            names: Some(&["name", "namespace"]),
            check: any,
        },
        // NodeClaim
        Expect {
            name: "karpenter_nodeclaims_created_total",
            with: vec![
                ("reason", "provisioned"),
                ("nodepool", "general"),
                ("min_values_relaxed", "false"),
            ],
            names: None,
            check: positive,
        },
        Expect {
            name: "operator_nodeclaim_status_condition_count",
            with: vec![
                ("name", &claim_name),
                ("type", "Initialized"),
                ("status", "True"),
                ("karpenter_sh_nodepool", "general"),
            ],
            names: Some(&[
                "namespace",
                "name",
                "type",
                "status",
                "reason",
                "karpenter_sh_nodepool",
                "karpenter_k8s_aws_ec2nodeclass",
            ]),
            check: one,
        },
        Expect {
            name: "operator_nodeclaim_status_condition_transitions_total",
            with: vec![
                ("type", "Launched"),
                ("status", "True"),
                ("karpenter_sh_nodepool", "general"),
            ],
            names: None,
            check: positive,
        },
        Expect {
            name: "operator_node_status_condition_count",
            with: vec![
                ("name", &node),
                ("type", "Ready"),
                ("status", "True"),
                ("karpenter_sh_initialized", "true"),
            ],
            names: None,
            check: one,
        },
        Expect {
            name: "operator_nodepool_status_condition_count",
            with: vec![("name", "general"), ("type", "Ready")],
            names: None,
            check: one,
        },
        Expect {
            name: "operator_status_condition_count",
            with: vec![
                ("name", &claim_name),
                ("kind", "NodeClaim"),
                ("group", "karpenter.sh"),
            ],
            names: None,
            check: one,
        },
        // Cloud provider
        Expect {
            name: "karpenter_cloudprovider_duration_seconds_count",
            with: vec![
                ("controller", "nodeclaim.lifecycle"),
                ("method", "Create"),
                ("provider", "aws"),
            ],
            names: Some(&["controller", "method", "provider"]),
            check: positive,
        },
        Expect {
            name: "karpenter_cloudprovider_duration_seconds_count",
            with: vec![
                ("controller", "provisioner"),
                ("method", "GetInstanceTypes"),
                ("provider", "aws"),
            ],
            names: None,
            check: positive,
        },
        Expect {
            name: "karpenter_cloudprovider_instance_type_offering_available",
            with: vec![
                ("instance_type", &instance_type),
                ("capacity_type", "on-demand"),
                ("zone", &zone),
            ],
            names: Some(&["instance_type", "capacity_type", "zone"]),
            check: one,
        },
        Expect {
            name: "karpenter_cloudprovider_instance_type_offering_price_estimate",
            with: vec![
                ("instance_type", &instance_type),
                ("capacity_type", "on-demand"),
                ("zone", &zone),
            ],
            names: None,
            check: positive,
        },
        Expect {
            name: "karpenter_cloudprovider_instance_type_cpu_cores",
            with: vec![("instance_type", &instance_type)],
            names: Some(&["instance_type"]),
            check: positive,
        },
        // Cluster state, scheduler, disruption, cost
        Expect {
            name: "karpenter_cluster_state_synced",
            with: vec![],
            names: Some(&[]),
            check: one,
        },
        Expect {
            name: "karpenter_cluster_state_node_count",
            with: vec![],
            names: None,
            check: positive,
        },
        Expect {
            name: "karpenter_scheduler_queue_depth",
            with: vec![("controller", "provisioner")],
            names: Some(&["controller", "scheduling_id"]),
            check: |v| v == 0.0,
        },
        Expect {
            name: "karpenter_voluntary_disruption_eligible_nodes",
            with: vec![("reason", "empty")],
            names: Some(&["reason"]),
            check: any,
        },
        Expect {
            name: "kerf_fleet_cost_usd_per_hour",
            with: vec![
                ("nodepool", "general"),
                ("capacity_type", "on-demand"),
                ("zone", &zone),
            ],
            names: Some(&["nodepool", "capacity_type", "zone"]),
            check: positive,
        },
        Expect {
            name: "karpenter_build_info",
            with: vec![],
            names: Some(&["version", "goversion", "goarch", "commit"]),
            check: one,
        },
    ];
    let controller = &controller;
    let expectations = &expectations;
    let met = poll(
        "every family to carry the pod, its node and pool",
        Duration::from_secs(60),
        || async move {
            let text = controller.metrics().await?;
            let problems = unmet(&text, expectations);
            Ok(problems.is_empty().then_some(text))
        },
    )
    .await;
    if met.is_err() {
        let text = controller.metrics().await?;
        anyhow::bail!("unmet:\n{}", unmet(&text, expectations).join("\n"));
    }
    Ok(())
}
