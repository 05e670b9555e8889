//! One way to keep a kind in memory: a kube-runtime reflector over every object, driven by its own task, with
//! `managedFields` dropped (kerf never reads them, and they are most of a stored object's bytes).

use ::kube::runtime::reflector::{self, store::Writer, Store};
use ::kube::runtime::{watcher, WatchStreamExt};
use ::kube::{Api, Resource};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::hash::Hash;

/// A reflector over every object of `api` (of kind `kind`, for the logs), calling `on_event` after each event
/// it applies. Watch errors are logged and retried with backoff; the store keeps the last known objects
/// meanwhile. The task stops when the returned guard drops.
pub fn reflect_all<K>(
    api: Api<K>,
    dyntype: K::DynamicType,
    kind: String,
    on_event: impl Fn() + Send + 'static,
) -> (Store<K>, AbortOnDrop)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + Hash + Send + Sync,
{
    let writer = Writer::new(dyntype);
    let store = writer.as_reader();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(|object| object.meta_mut().managed_fields = None),
    );
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => on_event(),
                Err(error) => tracing::warn!(
                    %kind,
                    %error,
                    "watch failed; retrying with backoff (using the last known objects)"
                ),
            }
        }
    });
    (store, AbortOnDrop(task))
}

/// Aborts the reflector's task when dropped.
pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
