//! One watch per kind, followed by every controller that reconciles object by object: the cluster state's
//! reflector sends each event it applied to a [`Fanout`], and the NodeClaim lifecycle, termination, EC2NodeClass
//! and pod-event controllers follow those instead of watching NodeClaims, Nodes, EC2NodeClasses and pods again
//! (kube-runtime's shared streams: `Controller::for_shared_stream` over the shared store).
//!
//! A follower starts with the objects already in the store, as a watch starts with a list, and one that falls
//! more than [`CAPACITY`] events behind is given the whole store again (a re-list) instead of blocking the
//! reflector: the other controllers never wait for a slow one. While no controller follows a kind (a replica that
//! is not the leader), its events are not kept.

use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::nodeclaim::NodeClaim;
use ::kube::runtime::reflector::{ObjectRef, Store};
use ::kube::runtime::watcher::Event;
use ::kube::Resource;
use futures::{future, stream, Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use std::sync::{Arc, OnceLock};
use tokio::sync::broadcast::{self, error::RecvError};

/// How many events a follower may fall behind before it is given the whole store again.
pub const CAPACITY: usize = 1024;

/// The kinds controllers follow.
#[derive(Clone, Default)]
pub struct Follow {
    pub pods: Fanout<Pod>,
    pub nodes: Fanout<Node>,
    pub node_claims: Fanout<NodeClaim>,
    pub node_classes: Fanout<EC2NodeClass>,
}

/// The events of one kind's reflector, for any number of followers. Cheap to clone.
pub struct Fanout<K: Resource<DynamicType = ()> + Clone + 'static> {
    tx: broadcast::Sender<Event<Arc<K>>>,
    /// The reflector's store, once it runs: the objects sent are the store's own (not copies), and a new or
    /// lagging follower starts from it.
    store: Arc<OnceLock<Store<K>>>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Clone for Fanout<K> {
    fn clone(&self) -> Self {
        Fanout {
            tx: self.tx.clone(),
            store: self.store.clone(),
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Default for Fanout<K> {
    fn default() -> Self {
        Fanout {
            tx: broadcast::channel(CAPACITY).0,
            store: Arc::default(),
        }
    }
}

impl<K> Fanout<K>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    /// Ties the fanout to the store its reflector fills (the first store given stays).
    pub fn attach(&self, store: Store<K>) -> Self {
        let _ = self.store.set(store);
        self.clone()
    }

    /// Sends an event the reflector applied to its store, if anyone follows.
    pub fn send(&self, event: Event<K>) {
        if self.tx.receiver_count() == 0 {
            return;
        }
        let Some(store) = self.store.get() else {
            return;
        };
        let stored = |object: K| {
            store
                .get(&ObjectRef::from_obj(&object))
                .unwrap_or_else(|| Arc::new(object))
        };
        let event = match event {
            Event::Init => Event::Init,
            Event::InitApply(object) => Event::InitApply(stored(object)),
            Event::InitDone => Event::InitDone,
            Event::Apply(object) => Event::Apply(stored(object)),
            Event::Delete(object) => Event::Delete(Arc::new(object)),
        };
        // No receiver left since the check: nothing to do.
        let _ = self.tx.send(event);
    }

    /// The watch events from now on, after a list of the store (`Init`, an `InitApply` per object, `InitDone`),
    /// with such a list again whenever this follower fell behind.
    pub fn events(&self) -> impl Stream<Item = Event<Arc<K>>> + Send + 'static {
        // Subscribed before the store is read: an event in between is seen twice, never missed.
        let rx = self.tx.subscribe();
        let store = self.store.get().cloned();
        let first = listed(store.as_ref());
        let live = stream::unfold((rx, store), |(mut rx, store)| async move {
            let events = match rx.recv().await {
                Ok(event) => vec![event],
                Err(RecvError::Lagged(missed)) => {
                    tracing::debug!(kind = %K::kind(&()), missed, "a follower fell behind; listing the store again");
                    listed(store.as_ref())
                }
                Err(RecvError::Closed) => return None,
            };
            Some((stream::iter(events), (rx, store)))
        })
        .flatten();
        stream::iter(first).chain(live)
    }

    /// The objects as they are applied, starting with every object in the store (for a controller's triggers).
    pub fn objects(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        self.events().filter_map(|event| {
            future::ready(match event {
                Event::Apply(object) | Event::InitApply(object) => Some(object),
                Event::Init | Event::InitDone | Event::Delete(_) => None,
            })
        })
    }
}

/// The store as a list's events.
fn listed<K>(store: Option<&Store<K>>) -> Vec<Event<Arc<K>>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let mut events = vec![Event::Init];
    events.extend(
        store
            .into_iter()
            .flat_map(Store::state)
            .map(Event::InitApply),
    );
    events.push(Event::InitDone);
    events
}

#[cfg(test)]
mod tests;
