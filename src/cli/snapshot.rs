//! `kerf snapshot`: the cluster as a `kerf simulate` scenario. It reads NodePools, EC2NodeClasses, NodeClaims,
//! Nodes, the pods that are bound or pending, PodDisruptionBudgets and DaemonSets, and writes them after a
//! Simulation document starting now, so "what does kerf do to *this* cluster tonight" is
//! `kerf snapshot --duration 12h > now.yaml && kerf simulate now.yaml`.
//!
//! Pods are written as they are (bound pods stay on their nodes in the timeline). Deployments and StatefulSets
//! are written too, marked `kerf.sh/pods-listed: "true"`: the simulator does not make their pods again from
//! the replicas, and a `scale` event adds or removes pods among those they select.

use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::controllers::kit::pdbs::list_pdbs;
use crate::disruption::parse_go_duration;
use crate::kube::CALL_TIMEOUT;
use crate::simulate::PODS_LISTED;
use ::kube::api::{Api, ListParams};
use ::kube::config::{KubeConfigOptions, Kubeconfig};
use ::kube::{Client, Config, Resource};
use anyhow::Context as _;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use std::fmt::Debug;
use std::io::Write;
use std::path::PathBuf;

/// kubectl's copy of the object as last applied: a second copy of every spec, of no use to a scenario.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

#[derive(clap::Args, Debug)]
pub struct SnapshotArgs {
    /// The kubeconfig to read the cluster with (default: `$KUBECONFIG`, `~/.kube/config`, or in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: its current context).
    #[arg(long)]
    pub context: Option<String>,
    /// Make the scenario a timeline of this long (a Go duration such as `12h`), starting now.
    #[arg(long)]
    pub duration: Option<String>,
}

/// Writes the snapshot to `out`.
pub async fn run(args: &SnapshotArgs, out: &mut impl Write) -> anyhow::Result<()> {
    if let Some(duration) = &args.duration {
        anyhow::ensure!(
            parse_go_duration(duration).is_some_and(|d| d.is_positive()),
            "--duration {duration:?}: not a positive Go duration such as 12h"
        );
    }
    let client = client(args).await?;
    let mut documents: Vec<Value> = Vec::new();
    let start = Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .unwrap_or_else(|_| Timestamp::now());
    let mut spec = json!({"start": start.to_string()});
    if let Some(duration) = &args.duration {
        spec["duration"] = json!(duration);
    }
    documents.push(json!({"apiVersion": "kerf.sh/v1alpha1", "kind": "Simulation", "spec": spec}));
    documents.extend(list::<NodePool>(&client, "NodePools").await?);
    documents.extend(list::<EC2NodeClass>(&client, "EC2NodeClasses").await?);
    documents.extend(list::<NodeClaim>(&client, "NodeClaims").await?);
    documents.extend(list::<Node>(&client, "Nodes").await?);
    documents.extend(list::<DaemonSet>(&client, "DaemonSets").await?);
    for mut workload in list::<Deployment>(&client, "Deployments")
        .await?
        .into_iter()
        .chain(list::<StatefulSet>(&client, "StatefulSets").await?)
    {
        workload["metadata"]["annotations"][PODS_LISTED] = json!("true");
        documents.push(workload);
    }
    let pdbs = list_pdbs(&client)
        .await
        .context("listing PodDisruptionBudgets")?;
    for pdb in pdbs {
        documents.push(document(pdb)?);
    }
    for pod in list::<Pod>(&client, "Pods").await? {
        if is_live(&pod) {
            documents.push(pod);
        }
    }
    for document in &documents {
        writeln!(out, "---")?;
        serde_yaml::to_writer(&mut *out, document).context("writing the snapshot")?;
    }
    Ok(())
}

async fn client(args: &SnapshotArgs) -> anyhow::Result<Client> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading --kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &options).await?
        }
        None if args.context.is_some() => Config::from_kubeconfig(&options).await?,
        None => Config::infer().await?,
    };
    Client::try_from(config).context("connecting to the Kubernetes API")
}

/// Every object of kind `K`, as scenario documents.
async fn list<K>(client: &Client, what: &str) -> anyhow::Result<Vec<Value>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
{
    let api: Api<K> = Api::all(client.clone());
    let listed = tokio::time::timeout(CALL_TIMEOUT, api.list(&ListParams::default()))
        .await
        .with_context(|| format!("listing {what} timed out after {CALL_TIMEOUT:?}"))?
        .with_context(|| format!("listing {what}"))?;
    listed.items.into_iter().map(document).collect()
}

/// `object` as a scenario document: with its kind, without what only the apiserver needs.
fn document<K: Resource<DynamicType = ()> + Serialize>(object: K) -> anyhow::Result<Value> {
    let mut value = serde_json::to_value(&object)?;
    value["apiVersion"] = json!(K::api_version(&()));
    value["kind"] = json!(K::kind(&()));
    if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.remove(LAST_APPLIED);
        }
    }
    Ok(value)
}

/// A pod the cluster still has to place or run: not finished.
fn is_live(pod: &Value) -> bool {
    !matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    )
}
