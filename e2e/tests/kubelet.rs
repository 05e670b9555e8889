//! The stand-in kubelet on the real control plane: an instance kerf-aws launches in moto becomes a Ready
//! Node with the launch template's labels and taints, stays Ready, and goes when the instance terminates.

use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Node;
use kerf::cloud::CloudProvider;
use kerf_e2e::aws::{AwsEmu, REGION};
use kerf_e2e::kubelet::{KubeletSettings, StandInKubelet};
use kerf_e2e::{poll, Cluster};
use kube::api::{Api, ListParams};

fn ready_heartbeat(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .and_then(|c| c.last_heartbeat_time.as_ref())
        .map(|t| t.0.to_string())
}

#[tokio::test]
async fn a_launched_instance_registers_as_a_ready_node_and_goes_with_the_instance() -> Result<()> {
    let test = "a_launched_instance_registers_as_a_ready_node";
    let Some(cluster) = Cluster::start_or_skip(test).await? else {
        return Ok(());
    };
    let Some(emu) = AwsEmu::shared_or_skip(test)? else {
        return Ok(());
    };
    let launchable = emu.launchable("kubelet").await?;
    let (name, cloud) = (&launchable.cluster, &launchable.cloud);
    let request =
        launchable.request("default-kubelet", &["c5.large", "m5.large"], &["on-demand"])?;

    let mut settings = KubeletSettings::new(name, REGION);
    settings.heartbeat_interval = Duration::from_secs(1);
    let _kubelet = StandInKubelet::start(cluster.client()?, cloud.ec2().clone(), settings)?;
    let instance = cloud.create(&request, SystemTime::now()).await?;

    let nodes: Api<Node> = Api::all(cluster.client()?);
    let nodes = &nodes;
    let provider_id = instance.provider_id.clone();
    let node = poll(
        "the instance's Node to be Ready",
        Duration::from_secs(60),
        || {
            let provider_id = provider_id.clone();
            async move {
                let list = nodes.list(&ListParams::default()).await?;
                Ok(list.items.into_iter().find(|n| {
                    n.spec.as_ref().and_then(|s| s.provider_id.as_deref())
                        == Some(provider_id.as_str())
                        && ready_heartbeat(n).is_some()
                }))
            }
        },
    )
    .await?;
    let node_name = node.metadata.name.clone().context("the Node has a name")?;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    for (key, value) in [
        ("team", "e2e"),
        ("karpenter.sh/nodepool", "default"),
        ("karpenter.sh/capacity-type", "on-demand"),
        ("node.kubernetes.io/instance-type", "c5.large"),
        ("topology.kubernetes.io/zone", instance.zone.as_str()),
        ("topology.kubernetes.io/region", REGION),
        ("kubernetes.io/arch", "amd64"),
        ("kubernetes.io/os", "linux"),
    ] {
        assert_eq!(
            labels.get(key).map(String::as_str),
            Some(value),
            "label {key}"
        );
    }
    let taints: Vec<(String, String)> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        // The node-lifecycle controller may add (and later lift) its own `node.kubernetes.io/*` taints
        // while the new Node's first Ready status is on its way.
        .filter(|t| !t.key.starts_with("node.kubernetes.io/"))
        .map(|t| (t.key, t.effect))
        .collect();
    assert_eq!(
        taints,
        [
            ("dedicated".to_string(), "NoSchedule".to_string()),
            (
                "karpenter.sh/unregistered".to_string(),
                "NoExecute".to_string()
            )
        ]
    );
    let status = node.status.clone().context("status")?;
    let capacity = status.capacity.context("capacity")?;
    assert_eq!(capacity["cpu"].0, "2");
    assert!(status
        .allocatable
        .context("allocatable")?
        .contains_key("pods"));

    // The heartbeat keeps coming.
    let first = ready_heartbeat(&node).context("heartbeat")?;
    let name_ref = &node_name;
    poll("a newer heartbeat", Duration::from_secs(30), || {
        let first = first.clone();
        async move {
            let node = nodes.get(name_ref).await?;
            Ok(ready_heartbeat(&node).filter(|t| *t > first).map(|_| ()))
        }
    })
    .await?;

    cloud.delete(&instance.provider_id).await?;
    poll(
        "the Node to be deleted",
        Duration::from_secs(60),
        || async move { Ok(nodes.get_opt(name_ref).await?.is_none().then_some(())) },
    )
    .await?;
    Ok(())
}
