//! The controller's view of the cluster: one reflector per kind it decides on, shared by every controller,
//! so a decision reads a consistent in-memory snapshot instead of listing the apiserver.

use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use ::kube::runtime::reflector::{self, Store};
use ::kube::runtime::{watcher, WatchStreamExt};
use ::kube::{Api, Client, Resource};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Reflector stores of every kind the controllers read. Cheap to clone.
#[derive(Clone)]
pub struct ClusterState {
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    pub node_claims: Store<NodeClaim>,
    pub node_pools: Store<NodePool>,
    pub node_classes: Store<EC2NodeClass>,
    pub daemon_sets: Store<DaemonSet>,
    /// Marked on every watch event of any kind: a controller that re-decides on change clones this receiver
    /// and awaits `changed()` (events while it was busy coalesce into one wake-up).
    pub changed: watch::Receiver<()>,
    /// `Some(true)` once every store holds its first list, `Some(false)` when a reflector stopped before.
    synced: watch::Receiver<Option<bool>>,
}

/// A reflector stopped before its first list arrived.
#[derive(Debug, thiserror::Error)]
#[error("a watch stopped before its first list arrived")]
pub struct NotSynced;

impl ClusterState {
    /// Starts the reflectors on `tasks` (they run until the set is dropped); the stores fill as the lists arrive,
    /// [`ClusterState::synced`] waits for all of them.
    pub fn start(client: &Client, tasks: &mut JoinSet<()>) -> ClusterState {
        let (changed, changed_rx) = watch::channel(());
        let changed = Arc::new(changed);
        let (synced, synced_rx) = watch::channel(None);
        let state = ClusterState {
            pods: reflect(Api::all(client.clone()), &changed, tasks),
            nodes: reflect(Api::all(client.clone()), &changed, tasks),
            node_claims: reflect(Api::all(client.clone()), &changed, tasks),
            node_pools: reflect(Api::all(client.clone()), &changed, tasks),
            node_classes: reflect(Api::all(client.clone()), &changed, tasks),
            daemon_sets: reflect(Api::all(client.clone()), &changed, tasks),
            changed: changed_rx,
            synced: synced_rx,
        };
        // One task waits on the stores and tells every caller of `synced`: a store's readiness, awaited by
        // two tasks at once, can leave one of them waiting forever.
        let stores = state.clone();
        tasks.spawn(async move {
            let ready = stores.wait_until_ready().await.is_ok();
            synced.send_replace(Some(ready));
        });
        state
    }

    /// Waits until every store holds its first list; an error when a reflector stopped before.
    pub async fn synced(&self) -> Result<(), NotSynced> {
        let mut synced = self.synced.clone();
        let ready = synced
            .wait_for(Option::is_some)
            .await
            .is_ok_and(|ready| *ready == Some(true));
        if ready {
            Ok(())
        } else {
            Err(NotSynced)
        }
    }

    async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.pods.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.node_claims.wait_until_ready().await?;
        self.node_pools.wait_until_ready().await?;
        self.node_classes.wait_until_ready().await?;
        self.daemon_sets.wait_until_ready().await
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
        watcher(api, watcher::Config::default()).default_backoff(),
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
