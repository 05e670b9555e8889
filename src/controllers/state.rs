//! The controller's view of the cluster: one reflector per kind it decides on, shared by every controller,
//! so a decision reads a consistent in-memory snapshot instead of listing the apiserver.

use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::scheduling::volumes::VolumeIndex;
use ::kube::runtime::reflector::{self, Store};
use ::kube::runtime::{watcher, WatchStreamExt};
use ::kube::{Api, Client, Resource};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// A reflector stopped before its first list arrived.
#[derive(Debug, thiserror::Error)]
#[error("the cluster state watch stopped before it synced")]
pub struct NotSynced;

/// Reflector stores of every kind the controllers read. Cheap to clone.
#[derive(Clone)]
pub struct ClusterState {
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    pub node_claims: Store<NodeClaim>,
    pub node_pools: Store<NodePool>,
    pub node_classes: Store<EC2NodeClass>,
    pub daemon_sets: Store<DaemonSet>,
    /// Where pending pods' volumes let them go (volume topology) and which claims keep a pod out of the solve.
    pub persistent_volume_claims: Store<PersistentVolumeClaim>,
    pub persistent_volumes: Store<PersistentVolume>,
    pub storage_classes: Store<StorageClass>,
    /// How many volumes each CSI driver may attach to each node.
    pub csi_nodes: Store<CSINode>,
    /// Marked on every watch event of any kind: a controller that re-decides on change clones this receiver
    /// and awaits `changed()` (events while it was busy coalesce into one wake-up).
    pub changed: watch::Receiver<()>,
    /// `Some(true)` once every store holds its first list, `Some(false)` if a reflector stopped before.
    synced: watch::Receiver<Option<bool>>,
}

impl ClusterState {
    /// Starts the reflectors on `tasks` (they run until the set is dropped); the stores fill as the lists arrive,
    /// [`ClusterState::synced`] waits for all of them.
    pub fn start(client: &Client, tasks: &mut JoinSet<()>) -> ClusterState {
        let (changed, changed_rx) = watch::channel(());
        let changed = Arc::new(changed);
        let (synced_tx, synced) = watch::channel(None);
        let state = ClusterState {
            pods: reflect(Api::all(client.clone()), &changed, tasks),
            nodes: reflect(Api::all(client.clone()), &changed, tasks),
            node_claims: reflect(Api::all(client.clone()), &changed, tasks),
            node_pools: reflect(Api::all(client.clone()), &changed, tasks),
            node_classes: reflect(Api::all(client.clone()), &changed, tasks),
            daemon_sets: reflect(Api::all(client.clone()), &changed, tasks),
            persistent_volume_claims: reflect(Api::all(client.clone()), &changed, tasks),
            persistent_volumes: reflect(Api::all(client.clone()), &changed, tasks),
            storage_classes: reflect(Api::all(client.clone()), &changed, tasks),
            csi_nodes: reflect(Api::all(client.clone()), &changed, tasks),
            changed: changed_rx,
            synced,
        };
        // kube-runtime's `Store::wait_until_ready` wakes only its most recent waiter, so the stores are waited on
        // by this one task and everyone else waits on its answer.
        let stores = state.clone();
        tasks.spawn(async move {
            let ready = stores.all_ready().await.is_ok();
            let _ = synced_tx.send(Some(ready));
        });
        state
    }

    /// Waits until every store holds its first list; an error when a reflector stopped before. Any number of
    /// tasks may wait at once.
    pub async fn synced(&self) -> Result<(), NotSynced> {
        let mut synced = self.synced.clone();
        match synced.wait_for(Option::is_some).await.map(|v| *v) {
            Ok(Some(true)) => Ok(()),
            _ => Err(NotSynced),
        }
    }

    async fn all_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.pods.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.node_claims.wait_until_ready().await?;
        self.node_pools.wait_until_ready().await?;
        self.node_classes.wait_until_ready().await?;
        self.daemon_sets.wait_until_ready().await?;
        self.persistent_volume_claims.wait_until_ready().await?;
        self.persistent_volumes.wait_until_ready().await?;
        self.storage_classes.wait_until_ready().await?;
        self.csi_nodes.wait_until_ready().await
    }

    /// The volume index of the claims, volumes, classes and CSINodes in the stores (shared, not copied).
    pub fn volumes(&self) -> VolumeIndex {
        VolumeIndex::from_objects(
            self.persistent_volume_claims.state(),
            self.persistent_volumes.state(),
            self.storage_classes.state(),
        )
        .with_csi_nodes(self.csi_nodes.state())
    }
}

/// A reflector over every `K` of `api`, driven by a task on `tasks`; watch errors are logged and retried with
/// backoff, every event wakes `changed`.
fn reflect<K>(api: Api<K>, changed: &Arc<watch::Sender<()>>, tasks: &mut JoinSet<()>) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(slim),
    );
    let changed = changed.clone();
    tasks.spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => changed.send_replace(()),
                Err(error) => {
                    tracing::warn!(kind = %K::kind(&()), %error, "watch failed; retrying with backoff")
                }
            }
        }
    });
    reader
}

/// kubectl's copy of the object as last applied: a second copy of the spec on every applied object.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what no controller reads but the apiserver sends with every object: `metadata.managedFields` (a tree
/// of field paths per writer, often the largest part of a pod) and kubectl's last-applied configuration. The
/// stores are only read; objects are never written back whole from them, so nothing is lost on the server.
fn slim<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn slim_drops_managed_fields_and_the_last_applied_copy_only() {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": "web", "namespace": "default",
                "labels": {"app": "web"},
                "annotations": {
                    LAST_APPLIED: "{\"apiVersion\":\"v1\",\"kind\":\"Pod\"}",
                    "karpenter.sh/do-not-disrupt": "true"
                },
                "managedFields": [{
                    "manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}
                }]
            },
            "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
        }))
        .expect("a pod");
        let mut expected = pod.clone();
        expected.metadata.managed_fields = None;
        expected.metadata.annotations =
            Some([("karpenter.sh/do-not-disrupt".to_owned(), "true".to_owned())].into());
        slim(&mut pod);
        assert_eq!(pod, expected);

        // An object without either is left as it is (no empty annotations appear).
        let mut bare = expected.clone();
        bare.metadata.annotations = None;
        let unchanged = bare.clone();
        slim(&mut bare);
        assert_eq!(bare, unchanged);
    }
}
