//! NodePools and EC2NodeClasses, watched with kube-runtime reflectors.

use super::reflect::{reflect_all, AbortOnDrop};
use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::nodepool::NodePool;
use ::kube::api::{ApiResource, DynamicObject};
use ::kube::runtime::reflector::Store;
use ::kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use std::sync::Arc;
use tokio::sync::Notify;

/// Watches every NodePool and EC2NodeClass. Once both lists have synced, and then after every change, calls
/// `changed` with the current objects. Changes that arrive while `changed` runs are coalesced into one more call.
/// Watch errors are logged and retried with backoff; runs until the task is dropped.
///
/// The objects are watched untyped and parsed one by one, so one object kerf cannot read (stored before its
/// webhook existed, or by a newer API version) is left out with a warning instead of failing the whole list.
pub async fn watch_pools(
    client: Client,
    mut changed: impl FnMut(&[NodePool], &[EC2NodeClass]) + Send,
) {
    let notify = Arc::new(Notify::new());
    let (nodepools, _nodepools_task) = reflect::<NodePool>(client.clone(), notify.clone());
    let (nodeclasses, _nodeclasses_task) = reflect::<EC2NodeClass>(client, notify.clone());
    let synced = tokio::join!(nodepools.wait_until_ready(), nodeclasses.wait_until_ready());
    if synced.0.is_err() || synced.1.is_err() {
        // The reflector tasks are endless; this only happens if one panicked.
        tracing::error!("the NodePool or EC2NodeClass watch stopped before it synced");
        return;
    }
    tracing::info!("NodePools and EC2NodeClasses synced");
    loop {
        changed(&parsed(&nodepools), &parsed(&nodeclasses));
        notify.notified().await;
    }
}

/// The objects of `store` that parse as `K`.
fn parsed<K>(store: &Store<DynamicObject>) -> Vec<K>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    store
        .state()
        .iter()
        .filter_map(|object| match (**object).clone().try_parse::<K>() {
            Ok(parsed) => Some(parsed),
            Err(error) => {
                tracing::warn!(kind = %K::kind(&()), name = ?object.metadata.name, %error, "left out of pod advice: cannot read it");
                None
            }
        })
        .collect()
}

/// A reflector over every `K`, watched untyped (see [`watch_pools`]).
fn reflect<K>(client: Client, notify: Arc<Notify>) -> (Store<DynamicObject>, AbortOnDrop)
where
    K: Resource<DynamicType = ()>,
{
    let resource = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let kind = K::kind(&()).into_owned();
    reflect_all(api, resource, kind, move || notify.notify_one())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::kube::runtime::reflector::store::Writer;
    use ::kube::runtime::watcher;
    use serde_json::json;

    #[test]
    fn objects_that_do_not_parse_are_left_out() {
        let resource = ApiResource::erase::<NodePool>(&());
        let mut writer = Writer::new(resource.clone());
        let spec = |weight: serde_json::Value| {
            json!({"spec": {"weight": weight, "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []}}}})
        };
        for (name, weight) in [("good", json!(10)), ("bad", json!("heavy"))] {
            let object = DynamicObject::new(name, &resource).data(spec(weight));
            writer.apply_watcher_event(&watcher::Event::Apply(object));
        }
        let pools: Vec<NodePool> = parsed(&writer.as_reader());
        let names: Vec<Option<String>> = pools.into_iter().map(|p| p.metadata.name).collect();
        assert_eq!(names, [Some("good".to_owned())]);
    }
}
