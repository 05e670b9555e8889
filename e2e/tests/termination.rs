//! Termination on the real control plane and moto (issue 5, test 3): deleting a NodeClaim taints its Node,
//! evicts its pods through the policy/v1beta1 eviction API, where a PodDisruptionBudget with maxUnavailable 0
//! holds the drain until it is relaxed; then the instance is terminated, the Node deleted and the claim's
//! finalizer removed. Deleting a kerf Node deletes its claim, which goes the same way. A drained Node's
//! VolumeAttachments hold its instance until they are gone or the claim's terminationGracePeriod ends; the
//! claim's `Drained`, `VolumesDetached` and `InstanceTerminating` conditions tell each stage.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kerf::api::nodeclaim::NodeClaim;
use kerf::cloud::{CloudError, CloudProvider};
use kerf_e2e::poll;
use kerf_e2e::testbed::{apply_node_claim, apply_ok, tail, Testbed};
use kerf_e2e::Cluster;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use serde_json::json;

const APP: &str = "held-by-pdb";

/// A ReplicaSet of one pod that tolerates the claim's taint, so that the real scheduler binds it to the
/// claim's Node; and a PDB over it with maxUnavailable 0.
async fn workload(bed: &Testbed, namespace: &str) -> Result<()> {
    apply_ok(
        &bed.cluster,
        &json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": APP, "namespace": namespace},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": APP}},
                "template": {
                    "metadata": {"labels": {"app": APP}},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "e2e",
                                         "effect": "NoSchedule"}],
                        "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.9"}],
                    },
                },
            },
        }),
    )
    .await?;
    apply_ok(
        &bed.cluster,
        &json!({
            "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
            "metadata": {"name": APP, "namespace": namespace},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": APP}}},
        }),
    )
    .await
}

/// There is no kubelet to run the pod: report it Running and Ready as one would (1.20 checks PDBs only for
/// Running pods, and the disruption controller counts only Ready ones).
async fn mark_running(pods: &Api<Pod>, name: &str) -> Result<()> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({"status": {
        "phase": "Running",
        "startTime": now,
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
    }});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await?;
    Ok(())
}

#[tokio::test]
async fn deleting_a_nodeclaim_drains_it_past_a_pdb_once_relaxed_and_terminates_its_instance(
) -> Result<()> {
    let Some(bed) = Testbed::start_or_skip("deleting_a_nodeclaim_drains_it").await? else {
        return Ok(());
    };
    apply_node_claim(
        &bed.cluster,
        "drain-a",
        &["c5.large", "m5.large"],
        &["on-demand"],
    )
    .await?;
    let claim = bed
        .wait_for_conditions("drain-a", &["Initialized"], Duration::from_secs(120))
        .await?;
    let status = claim.status.context("status")?;
    let node_name = status.node_name.context("nodeName")?;
    let provider_id = status.provider_id.context("providerID")?;

    let namespace = bed.cluster.create_namespace("drain").await?;
    workload(&bed, &namespace).await?;
    let client = bed.cluster.client()?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let (pods_ref, node_ref) = (&pods, &node_name);
    let pod = poll(
        "the pod to be bound to the claim's Node",
        Duration::from_secs(60),
        || async move {
            let list = pods_ref.list(&ListParams::default()).await?;
            Ok(list
                .items
                .into_iter()
                .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()) == Some(node_ref)))
        },
    )
    .await?;
    let pod_name = pod.metadata.name.clone().context("pod name")?;
    mark_running(&pods, &pod_name).await?;

    let claims: Api<NodeClaim> = Api::all(client.clone());
    claims.delete("drain-a", &DeleteParams::default()).await?;

    // The drain is held: kerf's eviction was refused (FailedDraining on the Node), the pod and the
    // instance are still there, and the Node is cordoned with karpenter.sh/disrupted.
    let events: Api<Event> = Api::all(client.clone());
    let events = &events;
    poll(
        "a FailedDraining Event on the Node",
        Duration::from_secs(60),
        || async move {
            let list = events.list(&ListParams::default()).await?;
            Ok(list
                .items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("FailedDraining")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                            == Some(node_ref.as_str())
                })
                .then_some(()))
        },
    )
    .await
    .with_context(|| tail(&bed.log(), 30))?;
    ensure!(
        pods.get_opt(&pod_name).await?.is_some(),
        "the PDB holds the pod"
    );
    bed.cloud
        .get(&provider_id)
        .await
        .context("the instance still runs")?;
    ensure!(
        claims.get_opt("drain-a").await?.is_some(),
        "the claim waits for the drain"
    );
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes.get(&node_name).await?;
    let tainted = node
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .iter()
        .any(|t| t.key == "karpenter.sh/disrupted" && t.effect == "NoSchedule");
    ensure!(tainted, "the Node has karpenter.sh/disrupted:NoSchedule");
    let held = claims.get("drain-a").await?;
    ensure!(
        condition(&held, "Drained") == Some(("Unknown", "Draining")),
        "the claim is Draining: {:?}",
        held.status
    );

    // Relaxed: the eviction goes through, the instance is terminated, the Node and the claim go.
    let pdbs = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        &namespace,
        &kube::discovery::ApiResource {
            group: "policy".into(),
            version: "v1beta1".into(),
            api_version: "policy/v1beta1".into(),
            kind: "PodDisruptionBudget".into(),
            plural: "poddisruptionbudgets".into(),
        },
    );
    pdbs.patch(
        APP,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"maxUnavailable": 1}})),
    )
    .await?;
    let claims_ref = &claims;
    poll(
        "the NodeClaim to be gone",
        Duration::from_secs(120),
        || async move { Ok(claims_ref.get_opt("drain-a").await?.is_none().then_some(())) },
    )
    .await
    .with_context(|| tail(&bed.log(), 40))?;
    ensure!(
        pods.get_opt(&pod_name).await?.is_none(),
        "the pod was evicted"
    );
    match bed.cloud.get(&provider_id).await {
        Err(CloudError::NotFound { .. }) => {}
        other => anyhow::bail!("the instance should be terminated, got {other:?}"),
    }
    ensure!(
        nodes.get_opt(&node_name).await?.is_none(),
        "the Node is deleted"
    );
    ensure!(
        bed.instances_of("drain-a").await?.is_empty(),
        "nothing left behind"
    );
    let log = bed.log();
    for message in ["drained node", "deleted node", "deleted nodeclaim"] {
        ensure!(
            log.contains(message),
            "log has {message:?}:\n{}",
            tail(&log, 30)
        );
    }
    Ok(())
}

#[tokio::test]
async fn deleting_a_kerf_node_deletes_its_claim_and_terminates_its_instance() -> Result<()> {
    let Some(bed) = Testbed::start_or_skip("deleting_a_kerf_node").await? else {
        return Ok(());
    };
    apply_node_claim(
        &bed.cluster,
        "node-a",
        &["c5.large", "m5.large"],
        &["on-demand"],
    )
    .await?;
    let claim = bed
        .wait_for_conditions("node-a", &["Initialized"], Duration::from_secs(120))
        .await?;
    let status = claim.status.context("status")?;
    let node_name = status.node_name.context("nodeName")?;
    let provider_id = status.provider_id.context("providerID")?;

    let client = bed.cluster.client()?;
    let nodes: Api<Node> = Api::all(client.clone());
    nodes.delete(&node_name, &DeleteParams::default()).await?;
    let claims: Api<NodeClaim> = Api::all(client);
    let (claims, nodes) = (&claims, &nodes);
    let node_ref = &node_name;
    poll(
        "the Node and its NodeClaim to be gone",
        Duration::from_secs(120),
        || async move {
            let claim_gone = claims.get_opt("node-a").await?.is_none();
            let node_gone = nodes.get_opt(node_ref).await?.is_none();
            Ok((claim_gone && node_gone).then_some(()))
        },
    )
    .await
    .with_context(|| tail(&bed.log(), 40))?;
    match bed.cloud.get(&provider_id).await {
        Err(CloudError::NotFound { .. }) => {}
        other => anyhow::bail!("the instance should be terminated, got {other:?}"),
    }
    ensure!(
        bed.log().contains("node deleted; deleting its nodeclaim"),
        "{}",
        tail(&bed.log(), 30)
    );
    Ok(())
}

/// `(status, reason)` of the claim's condition `type_`.
fn condition<'a>(claim: &'a NodeClaim, type_: &str) -> Option<(&'a str, &'a str)> {
    let conditions = claim.status.as_ref()?.conditions.as_deref()?;
    kerf::api::condition::get(conditions, type_).map(|c| (c.status.as_str(), c.reason.as_str()))
}

/// A VolumeAttachment of persistent volume `volume` to Node `node`, as the attach-detach controller makes one.
async fn attach(cluster: &Cluster, name: &str, node: &str, volume: &str) -> Result<()> {
    apply_ok(
        cluster,
        &json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
            "metadata": {"name": name},
            "spec": {"attacher": "ebs.csi.aws.com", "nodeName": node,
                     "source": {"persistentVolumeName": volume}},
        }),
    )
    .await
}

/// A condition as a NodeClaim showed it: `(claim, type, status, reason)`.
type Shown = (String, String, String, String);

/// Every condition the NodeClaims showed while it runs, from a watch: a stage may last only until the next
/// write (an instance moto terminates at once is gone on the next pass), too short for polling to see.
struct Conditions {
    shown: Arc<Mutex<HashSet<Shown>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Conditions {
    fn watch(claims: Api<NodeClaim>) -> Self {
        let shown: Arc<Mutex<HashSet<Shown>>> = Arc::default();
        let record = shown.clone();
        let task = tokio::spawn(async move {
            let stream = kube::runtime::watcher(claims, kube::runtime::watcher::Config::default())
                .default_backoff()
                .applied_objects();
            futures::pin_mut!(stream);
            while let Some(Ok(claim)) = stream.next().await {
                let name = claim.metadata.name.clone().unwrap_or_default();
                let conditions = claim.status.and_then(|s| s.conditions).unwrap_or_default();
                let mut shown = record.lock().unwrap_or_else(|p| p.into_inner());
                for c in conditions {
                    shown.insert((name.clone(), c.type_, c.status, c.reason));
                }
            }
        });
        Conditions { shown, task }
    }

    /// Whether claim `claim` showed `type_` with `status` and `reason`.
    fn showed(&self, claim: &str, type_: &str, status: &str, reason: &str) -> bool {
        let key = (claim.into(), type_.into(), status.into(), reason.into());
        self.shown
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&key)
    }

    /// Waits until claim `claim` has shown each of `expected` (`(type, status, reason)`).
    async fn wait(
        &self,
        bed: &Testbed,
        claim: &str,
        expected: &[(&str, &str, &str)],
    ) -> Result<()> {
        poll(
            &format!("NodeClaim {claim} to show {expected:?}"),
            Duration::from_secs(120),
            || async move {
                Ok(expected
                    .iter()
                    .all(|(t, s, r)| self.showed(claim, t, s, r))
                    .then_some(()))
            },
        )
        .await
        .with_context(|| tail(&bed.log(), 40))
    }
}

impl Drop for Conditions {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Karpenter's termination suite: "should wait for VolumeAttachments", "should only wait for VolumeAttachments
/// until the nodeclaim's terminationGracePeriod has elapsed", and the conditions each stage sets.
#[tokio::test]
async fn a_drained_node_waits_for_its_volume_attachments_unless_its_grace_period_ends() -> Result<()>
{
    let Some(bed) =
        Testbed::start_or_skip("a_drained_node_waits_for_its_volume_attachments").await?
    else {
        return Ok(());
    };
    let client = bed.cluster.client()?;
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let shown = Conditions::watch(claims.clone());
    let types = ["c5.large", "m5.large"];
    apply_node_claim(&bed.cluster, "volumes-a", &types, &["on-demand"]).await?;
    let mut graced = serde_json::to_value(kerf_e2e::aws::node_claim(
        "volumes-b",
        &types,
        &["on-demand"],
    )?)?;
    graced["spec"]["terminationGracePeriod"] = json!("30s");
    apply_ok(&bed.cluster, &graced).await?;
    let mut launched = Vec::new();
    for name in ["volumes-a", "volumes-b"] {
        let claim = bed
            .wait_for_conditions(name, &["Initialized"], Duration::from_secs(120))
            .await?;
        let status = claim.status.context("status")?;
        let node = status.node_name.context("nodeName")?;
        attach(
            &bed.cluster,
            &format!("{name}-va"),
            &node,
            &format!("pv-{name}"),
        )
        .await?;
        launched.push((node, status.provider_id.context("providerID")?));
    }
    for name in ["volumes-a", "volumes-b"] {
        claims.delete(name, &DeleteParams::default()).await?;
    }

    // The drain (Draining for at least 5 s), then the attachment holds the instance.
    let awaiting = ("VolumesDetached", "Unknown", "AwaitingVolumeDetachment");
    let drained = [
        ("Drained", "Unknown", "Draining"),
        ("Drained", "True", "Drained"),
        awaiting,
    ];
    shown.wait(&bed, "volumes-a", &drained).await?;
    let (node_a, instance_a) = &launched[0];
    let events: Api<Event> = Api::all(client.clone());
    let events = &events;
    let note = poll(
        "an AwaitingVolumeDetachment Event on the Node",
        Duration::from_secs(60),
        || async move {
            let list = events.list(&ListParams::default()).await?;
            Ok(list.items.into_iter().find_map(|e| {
                let on_node =
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node_a.as_str());
                (on_node && e.reason.as_deref() == Some("AwaitingVolumeDetachment"))
                    .then_some(e.note)
            }))
        },
    )
    .await?;
    ensure!(
        note.as_deref() == Some("Awaiting deletion of bound volumeattachments (volumes-a-va)"),
        "{note:?}"
    );

    // volumes-b: its 30 s grace period ends, the attachment no longer holds it.
    let elapsed = [
        awaiting,
        ("VolumesDetached", "False", "TerminationGracePeriodElapsed"),
        ("InstanceTerminating", "True", "InstanceTerminating"),
    ];
    shown.wait(&bed, "volumes-b", &elapsed).await?;
    let claims_ref = &claims;
    poll(
        "volumes-b to be gone",
        Duration::from_secs(60),
        || async move {
            Ok(claims_ref
                .get_opt("volumes-b")
                .await?
                .is_none()
                .then_some(()))
        },
    )
    .await?;
    // Meanwhile volumes-a, without a grace period, still waits.
    let held = claims.get("volumes-a").await?;
    ensure!(
        condition(&held, "VolumesDetached") == Some(("Unknown", "AwaitingVolumeDetachment"))
            && condition(&held, "InstanceTerminating").is_none(),
        "volumes-a still waits for its attachment: {:?}",
        held.status
    );
    bed.cloud
        .get(instance_a)
        .await
        .context("instance a still runs")?;

    // volumes-a: its attachment goes, then its instance.
    let attachments: Api<k8s_openapi::api::storage::v1::VolumeAttachment> = Api::all(client);
    attachments
        .delete("volumes-a-va", &DeleteParams::default())
        .await?;
    let detached = [
        ("VolumesDetached", "True", "VolumesDetached"),
        ("InstanceTerminating", "True", "InstanceTerminating"),
    ];
    shown.wait(&bed, "volumes-a", &detached).await?;
    poll(
        "volumes-a to be gone",
        Duration::from_secs(60),
        || async move {
            Ok(claims_ref
                .get_opt("volumes-a")
                .await?
                .is_none()
                .then_some(()))
        },
    )
    .await?;
    for (_, instance) in &launched {
        match bed.cloud.get(instance).await {
            Err(CloudError::NotFound { .. }) => {}
            other => anyhow::bail!("the instance should be terminated, got {other:?}"),
        }
    }
    Ok(())
}

/// Node repair (`--feature-gates=NodeRepair=true`; Karpenter's node health suite, "should delete nodes that are
/// unhealthy by the cloud provider" and its metrics case): the stand-in kubelet reports the inflate pod's Node
/// `Ready=False` since 31 minutes, past the AWS policy's 30; the controller stamps the claim's termination
/// timestamp with now and deletes it, termination deletes the pod without waiting and terminates the instance,
/// and the provisioner gives the new pod a new node. The repair is counted in Karpenter's two metrics.
#[tokio::test]
async fn a_node_not_ready_past_its_toleration_is_replaced_by_node_repair() -> Result<()> {
    let flags = vec!["--feature-gates=NodeRepair=true".to_owned()];
    let Some(bed) = Testbed::start_or_skip_with("node_repair", |_| flags).await? else {
        return Ok(());
    };
    let log = || tail(&bed.log(), 40);
    let mut pool = kerf_e2e::controller::node_pool("general", serde_json::Value::Null);
    pool["spec"]["template"]["spec"]["requirements"] = json!([
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
    ]);
    pool["spec"]["disruption"] = json!({"consolidateAfter": "Never"});
    apply_ok(&bed.cluster, &pool).await?;
    let namespace = bed.cluster.create_namespace("repair").await?;
    kerf_e2e::controller::create_inflate(&bed.cluster, &namespace, 1, "500m", "256Mi").await?;
    let client = bed.cluster.client()?;
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client, &namespace);
    let (claims_ref, pods_ref) = (&claims, &pods);
    // The claim whose Initialized Node the inflate pod is bound to: (claim, Node, provider ID).
    let bound = |not: Option<String>| async move {
        let on_node: Vec<String> = pods_ref
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.spec?.node_name)
            .collect();
        let found = claims_ref
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find_map(|c| {
                let name = c.metadata.name.clone()?;
                let status = c.status.as_ref()?;
                let node = status.node_name.clone()?;
                let initialized = status
                    .conditions
                    .as_deref()
                    .is_some_and(|cs| kerf::api::condition::is_true(cs, "Initialized"));
                (initialized && on_node.contains(&node) && not.as_deref() != Some(name.as_str()))
                    .then(|| (name, node, status.provider_id.clone().unwrap_or_default()))
            });
        Ok(found)
    };
    let (old, old_node, old_instance) = poll(
        "the inflate pod bound to an Initialized node",
        Duration::from_secs(120),
        || bound(None),
    )
    .await
    .with_context(log)?;

    let since =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(31 * 60);
    bed.kubelet.report(
        &old_node,
        k8s_openapi::api::core::v1::NodeCondition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: Some("KubeletNotReady".into()),
            message: Some("container runtime is down".into()),
            last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(since)),
            last_heartbeat_time: None,
        },
    );
    let (new, _, _) = poll(
        "the pod on a new node, the unhealthy one gone",
        Duration::from_secs(180),
        || {
            let (old, old_node) = (old.clone(), old_node.clone());
            let nodes = &nodes;
            async move {
                let gone = claims_ref.get_opt(&old).await?.is_none()
                    && nodes.get_opt(&old_node).await?.is_none();
                Ok(if gone { bound(Some(old)).await? } else { None })
            }
        },
    )
    .await
    .with_context(log)?;
    ensure!(new != old);
    match bed.cloud.get(&old_instance).await {
        Err(CloudError::NotFound { .. }) => {}
        other => anyhow::bail!("the unhealthy instance should be terminated, got {other:?}"),
    }
    let text = bed.log();
    ensure!(
        text.lines()
            .any(|l| l.contains("deleting unhealthy node") && l.contains(&old)),
        "{}",
        log()
    );
    ensure!(
        text.lines().any(|l| l.contains("annotated nodeclaim")
            && l.contains("karpenter.sh/nodeclaim-termination-timestamp")
            && l.contains(&old)),
        "{}",
        log()
    );
    let expiring =
        kerf_e2e::controller::events_with_reason(&bed.cluster, "TerminationGracePeriodExpiring")
            .await?;
    ensure!(
        expiring.iter().any(
            |e| e.involved_object.name.as_deref() == Some(old_node.as_str())
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.starts_with("All pods will be deleted by "))
        ),
        "a TerminationGracePeriodExpiring Event on {old_node}: {expiring:?}"
    );
    let metrics = bed.metrics().await?;
    let counted = |prefix: &str| {
        metrics
            .lines()
            .any(|l| l.starts_with(prefix) && l.ends_with(" 1"))
    };
    ensure!(
        counted(
            "karpenter_nodeclaims_disrupted_total{reason=\"unhealthy\",nodepool=\"general\",capacity_type=\"on-demand\"}"
        ),
        "{metrics}"
    );
    ensure!(
        counted(
            "karpenter_nodeclaims_unhealthy_disrupted_total{condition=\"ready\",nodepool=\"general\",capacity_type=\"on-demand\",image_id=\"ami-"
        ),
        "{metrics}"
    );
    Ok(())
}
