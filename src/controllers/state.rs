//! The controller's view of the cluster: one reflector per kind it decides on, shared by every controller,
//! so a decision reads a consistent in-memory snapshot instead of listing the apiserver. The Services and the
//! controllers that select pods are watched only when a default spread is configured ([`SpreadSources`]).

use super::follow::{Fanout, Follow};
use crate::api::capacitybuffer::CapacityBuffer;
use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodeoverlay::NodeOverlay;
use crate::api::nodepool::NodePool;
use crate::scheduling::volumes::VolumeIndex;
use crate::scheduling::{DefaultSpread, SchedulerConfig};
use ::kube::runtime::reflector::{self, Store};
use ::kube::runtime::{watcher, WatchStreamExt};
use ::kube::{Api, Client, Resource};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate, ReplicationController, Service,
};
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
    /// The NodeOverlays; `None` (not watched, so their CRD need not exist) without the `NodeOverlay` gate.
    pub node_overlays: Option<Store<NodeOverlay>>,
    /// The CapacityBuffers and the PodTemplates they may name; `None` (not watched) without the `CapacityBuffer`
    /// gate.
    pub capacity_buffers: Option<Store<CapacityBuffer>>,
    pub pod_templates: Option<Store<PodTemplate>>,
    /// What deduces pods' default spread selectors; `None` (nothing watched) without a default spread.
    pub spread_sources: Option<SpreadSources>,
    /// The watch events of the kinds controllers follow object by object, fanned out from the reflectors above
    /// (one watch per kind, however many controllers follow it).
    pub follow: Follow,
    /// Marked on every watch event of any kind: a controller that re-decides on change clones this receiver
    /// and awaits `changed()` (events while it was busy coalesce into one wake-up).
    pub changed: watch::Receiver<()>,
    /// `Some(true)` once every store holds its first list, `Some(false)` if a reflector stopped before.
    synced: watch::Receiver<Option<bool>>,
}

/// The Services and the ReplicaSets, StatefulSets and ReplicationControllers whose selectors kube-scheduler
/// deduces a pod's default spread selector from. Their pod templates are dropped as they arrive: only the
/// selectors are read, and a cluster keeps many old ReplicaSets.
#[derive(Clone)]
pub struct SpreadSources {
    pub services: Store<Service>,
    pub replica_sets: Store<ReplicaSet>,
    pub stateful_sets: Store<StatefulSet>,
    pub replication_controllers: Store<ReplicationController>,
}

impl ClusterState {
    /// Starts the reflectors on `tasks` (they run until the set is dropped); the stores fill as the lists arrive,
    /// [`ClusterState::synced`] waits for all of them. `spread_sources`: also watch what deduces pods' default
    /// spread selectors (only when a default spread is configured: no other decision reads them);
    /// `node_overlays`: also watch NodeOverlays (the `NodeOverlay` gate); `capacity_buffers`: also watch
    /// CapacityBuffers and PodTemplates (the `CapacityBuffer` gate).
    pub fn start(
        client: &Client,
        tasks: &mut JoinSet<()>,
        spread_sources: bool,
        node_overlays: bool,
        capacity_buffers: bool,
    ) -> ClusterState {
        let (changed, changed_rx) = watch::channel(());
        let changed = Arc::new(changed);
        let (synced_tx, synced) = watch::channel(None);
        let follow = Follow::default();
        let state = ClusterState {
            pods: reflect_followed(Api::all(client.clone()), &changed, tasks, &follow.pods),
            nodes: reflect_followed(Api::all(client.clone()), &changed, tasks, &follow.nodes),
            node_claims: reflect_followed(
                Api::all(client.clone()),
                &changed,
                tasks,
                &follow.node_claims,
            ),
            node_pools: reflect(Api::all(client.clone()), &changed, tasks),
            node_classes: reflect_followed(
                Api::all(client.clone()),
                &changed,
                tasks,
                &follow.node_classes,
            ),
            daemon_sets: reflect(Api::all(client.clone()), &changed, tasks),
            persistent_volume_claims: reflect(Api::all(client.clone()), &changed, tasks),
            persistent_volumes: reflect(Api::all(client.clone()), &changed, tasks),
            storage_classes: reflect(Api::all(client.clone()), &changed, tasks),
            csi_nodes: reflect(Api::all(client.clone()), &changed, tasks),
            node_overlays: node_overlays
                .then(|| reflect(Api::all(client.clone()), &changed, tasks)),
            capacity_buffers: capacity_buffers
                .then(|| reflect(Api::all(client.clone()), &changed, tasks)),
            pod_templates: capacity_buffers
                .then(|| reflect(Api::all(client.clone()), &changed, tasks)),
            spread_sources: spread_sources.then(|| SpreadSources {
                services: reflect(Api::all(client.clone()), &changed, tasks),
                replica_sets: reflect_with(
                    Api::all(client.clone()),
                    &changed,
                    tasks,
                    |rs: &mut ReplicaSet| {
                        slim(rs);
                        rs.spec.template = None;
                    },
                ),
                stateful_sets: reflect_with(
                    Api::all(client.clone()),
                    &changed,
                    tasks,
                    |ss: &mut StatefulSet| {
                        slim(ss);
                        ss.spec.template = Default::default();
                        ss.spec.volume_claim_templates = None;
                    },
                ),
                replication_controllers: reflect_with(
                    Api::all(client.clone()),
                    &changed,
                    tasks,
                    |rc: &mut ReplicationController| {
                        slim(rc);
                        if let Some(spec) = rc.spec.as_mut() {
                            spec.template = None;
                        }
                    },
                ),
            }),
            follow,
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
        self.csi_nodes.wait_until_ready().await?;
        if let Some(overlays) = &self.node_overlays {
            overlays.wait_until_ready().await?;
        }
        if let (Some(buffers), Some(templates)) = (&self.capacity_buffers, &self.pod_templates) {
            buffers.wait_until_ready().await?;
            templates.wait_until_ready().await?;
        }
        if let Some(sources) = &self.spread_sources {
            sources.services.wait_until_ready().await?;
            sources.replica_sets.wait_until_ready().await?;
            sources.stateful_sets.wait_until_ready().await?;
            sources.replication_controllers.wait_until_ready().await?;
        }
        Ok(())
    }

    /// The NodeOverlays in force: `None` without the `NodeOverlay` gate.
    pub fn overlays(&self) -> Option<Vec<NodeOverlay>> {
        let store = self.node_overlays.as_ref()?;
        Some(store.state().iter().map(|o| o.as_ref().clone()).collect())
    }

    /// `config`'s default spread with the Services and controllers in the stores. Without a default constraint
    /// nothing is read (and the stores do not exist).
    pub fn default_spread(&self, config: &SchedulerConfig) -> DefaultSpread {
        let mut spread = DefaultSpread::new(config);
        let Some(sources) = self.spread_sources.as_ref().filter(|_| spread.is_active()) else {
            return spread;
        };
        for service in sources.services.state() {
            spread.add_service(&service);
        }
        for replica_set in sources.replica_sets.state() {
            spread.add_replica_set(&replica_set);
        }
        for stateful_set in sources.stateful_sets.state() {
            spread.add_stateful_set(&stateful_set);
        }
        for controller in sources.replication_controllers.state() {
            spread.add_replication_controller(&controller);
        }
        spread
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

/// Cluster state for unit tests: the stores hold `nodes`, `node_claims` and `pods`, every other store is empty,
/// and all of them are synced. No reflector runs behind them, so nothing is asked of the apiserver.
#[cfg(test)]
impl ClusterState {
    pub(crate) fn of(
        nodes: Vec<Node>,
        node_claims: Vec<NodeClaim>,
        pods: Vec<Pod>,
    ) -> ClusterState {
        let follow = Follow::default();
        let pods = store_of(pods);
        let nodes = store_of(nodes);
        let node_claims = store_of(node_claims);
        let node_classes = store_of(Vec::new());
        follow.pods.attach(pods.clone());
        follow.nodes.attach(nodes.clone());
        follow.node_claims.attach(node_claims.clone());
        follow.node_classes.attach(node_classes.clone());
        ClusterState {
            pods,
            nodes,
            node_claims,
            node_pools: store_of(Vec::new()),
            node_classes,
            daemon_sets: store_of(Vec::new()),
            persistent_volume_claims: store_of(Vec::new()),
            persistent_volumes: store_of(Vec::new()),
            storage_classes: store_of(Vec::new()),
            csi_nodes: store_of(Vec::new()),
            node_overlays: None,
            capacity_buffers: None,
            pod_templates: None,
            spread_sources: None,
            follow,
            changed: watch::channel(()).1,
            synced: watch::channel(Some(true)).1,
        }
    }
}

/// A listed (synced) store holding `objects`, for the stores [`ClusterState::of`] leaves empty or absent.
#[cfg(test)]
pub(crate) fn store_of<K>(objects: Vec<K>) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let (reader, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    reader
}

/// A reflector over every `K` of `api`, driven by a task on `tasks`; watch errors are logged and retried with
/// backoff, every event wakes `changed`.
fn reflect<K>(api: Api<K>, changed: &Arc<watch::Sender<()>>, tasks: &mut JoinSet<()>) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    reflect_with(api, changed, tasks, slim)
}

/// [`reflect`], with `trim` instead of [`slim`] dropping what no controller reads.
fn reflect_with<K>(
    api: Api<K>,
    changed: &Arc<watch::Sender<()>>,
    tasks: &mut JoinSet<()>,
    trim: fn(&mut K),
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    reflect_fanned(api, changed, tasks, trim, None)
}

/// [`reflect`], its events also sent to the controllers that follow the kind through `fanout`.
fn reflect_followed<K>(
    api: Api<K>,
    changed: &Arc<watch::Sender<()>>,
    tasks: &mut JoinSet<()>,
    fanout: &Fanout<K>,
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    reflect_fanned(api, changed, tasks, slim, Some(fanout))
}

fn reflect_fanned<K>(
    api: Api<K>,
    changed: &Arc<watch::Sender<()>>,
    tasks: &mut JoinSet<()>,
    trim: fn(&mut K),
    fanout: Option<&Fanout<K>>,
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(trim),
    );
    let changed = changed.clone();
    let fanout = fanout.map(|f| f.attach(reader.clone()));
    tasks.spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => {
                    if let Some(fanout) = &fanout {
                        fanout.send(event);
                    }
                    changed.send_replace(());
                }
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

/// A store's objects, as values (the state's stores hand out shared ones).
pub fn owned<K: Clone>(objects: Vec<Arc<K>>) -> Vec<K> {
    objects.into_iter().map(|o| o.as_ref().clone()).collect()
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
