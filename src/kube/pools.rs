//! NodePools and EC2NodeClasses, watched with kube-runtime reflectors.

use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::nodepool::NodePool;
use ::kube::runtime::reflector::{self, Store};
use ::kube::runtime::{watcher, WatchStreamExt};
use ::kube::{Api, Client, Resource};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;
use tokio::sync::Notify;

/// Watches every NodePool and EC2NodeClass. Once both lists have synced, and then after every change, calls
/// `changed` with the current objects. Changes that arrive while `changed` runs are coalesced into one more call.
/// Watch errors are logged and retried with backoff; runs until the task is dropped.
pub async fn watch_pools(
    client: Client,
    mut changed: impl FnMut(&[NodePool], &[EC2NodeClass]) + Send,
) {
    let notify = Arc::new(Notify::new());
    let nodepools = reflect::<NodePool>(Api::all(client.clone()), notify.clone());
    let nodeclasses = reflect::<EC2NodeClass>(Api::all(client), notify.clone());
    let synced = tokio::join!(
        nodepools.0.wait_until_ready(),
        nodeclasses.0.wait_until_ready()
    );
    if synced.0.is_err() || synced.1.is_err() {
        // The reflector tasks below are endless; this only happens if they panicked.
        tracing::error!("the NodePool or EC2NodeClass watch stopped before it synced");
        return;
    }
    tracing::info!("NodePools and EC2NodeClasses synced");
    loop {
        let pools: Vec<NodePool> = nodepools.0.state().iter().map(|p| (**p).clone()).collect();
        let classes: Vec<EC2NodeClass> = nodeclasses
            .0
            .state()
            .iter()
            .map(|c| (**c).clone())
            .collect();
        changed(&pools, &classes);
        notify.notified().await;
    }
}

/// A reflector for `api` driven by its own task (aborted when the returned guard drops); every event wakes
/// `notify`.
fn reflect<K>(api: Api<K>, notify: Arc<Notify>) -> (Store<K>, AbortOnDrop)
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    );
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => notify.notify_one(),
                Err(error) => tracing::warn!(
                    kind = %K::kind(&()),
                    %error,
                    "watch failed; retrying with backoff (pod advice uses the last known objects)"
                ),
            }
        }
    });
    (store, AbortOnDrop(task))
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
