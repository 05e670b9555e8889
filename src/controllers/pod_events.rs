//! Writes `status.lastPodEventTime` on the NodeClaim of a node a pod arrived at or left (the decision is the
//! engine's, [`crate::engine::pod_events`]). Only bound pods are watched (a field selector), so a pod appearing
//! in the watch after the first list is a bind, and one leaving it a departure.
//!
//! kerf also counts a pod deleted outright (force-deleted, or removed by its kubelet without a terminating
//! update in between) as an event; Karpenter only acts on updates and so misses those (docs/differences.md).

use super::kit::calls;
use super::{Context, Error};
use crate::api::nodeclaim::NodeClaim;
use crate::cloud::CloudProvider;
use crate::engine::pod_events::{event_node, stamp_due, PodMark};
use ::kube::runtime::watcher;
use ::kube::Api;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::sync::Arc;

/// What the controller remembers of each bound pod, by UID.
#[derive(Debug, Default)]
pub struct Marks {
    marks: HashMap<String, PodMark>,
    /// UIDs seen in a re-list still under way: the pods not seen again by its end are gone.
    relisting: Option<HashMap<String, PodMark>>,
}

impl Marks {
    /// The node a watch event makes a pod event on, if any, with the marks brought up to date.
    pub fn observe<P: Borrow<Pod>>(&mut self, event: watcher::Event<P>) -> Vec<String> {
        match event {
            watcher::Event::Init => {
                self.relisting = Some(HashMap::new());
                Vec::new()
            }
            watcher::Event::InitApply(pod) => {
                let pod = pod.borrow();
                let (Some(uid), Some(mark)) = (pod.metadata.uid.clone(), PodMark::of(pod)) else {
                    return Vec::new();
                };
                // A pod already known changed while the watch was down; one first seen now is no event (the
                // first list after a start holds every running pod).
                let event = self
                    .marks
                    .get(&uid)
                    .and_then(|old| event_node(Some(old), &mark));
                if let Some(relisting) = self.relisting.as_mut() {
                    relisting.insert(uid, mark);
                }
                event.into_iter().collect()
            }
            watcher::Event::InitDone => {
                let seen = self.relisting.take().unwrap_or_default();
                let gone: Vec<String> = self
                    .marks
                    .iter()
                    .filter(|(uid, _)| !seen.contains_key(*uid))
                    .filter_map(|(_, mark)| departure(mark))
                    .collect();
                self.marks = seen;
                gone
            }
            watcher::Event::Apply(pod) => {
                let pod = pod.borrow();
                let (Some(uid), Some(mark)) = (pod.metadata.uid.clone(), PodMark::of(pod)) else {
                    return Vec::new();
                };
                let event = match self.marks.get(&uid) {
                    Some(old) => event_node(Some(old), &mark),
                    // New to a watch of bound pods: it was just bound.
                    None => event_node(Some(&PodMark::default()), &mark),
                };
                self.marks.insert(uid, mark);
                event.into_iter().collect()
            }
            watcher::Event::Delete(pod) => {
                let Some(uid) = pod.borrow().metadata.uid.as_deref() else {
                    return Vec::new();
                };
                self.marks
                    .remove(uid)
                    .and_then(|mark| departure(&mark))
                    .into_iter()
                    .collect()
            }
        }
    }
}

/// A pod that left without going terminal or terminating first left its node: an event there.
fn departure(mark: &PodMark) -> Option<String> {
    if mark.terminal || mark.terminating {
        return None;
    }
    mark.node.clone()
}

/// Follows the pods (the cluster state's watch) and stamps their claims until the watch ends.
pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    let events = ctx.state.follow.pods.events();
    futures::pin_mut!(events);
    let mut marks = Marks::default();
    while let Some(event) = events.next().await {
        for node in marks.observe(event) {
            stamp(&ctx, &node).await;
        }
    }
    Ok(())
}

/// Stamps the claim of `node` with now, unless it was stamped within the dedupe window.
async fn stamp<C>(ctx: &Context<C>, node: &str) {
    let Ok(now) = Timestamp::try_from(ctx.clock.now()) else {
        return;
    };
    let claims = ctx.state.node_claims.state();
    let Some(claim) = claims
        .iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
    else {
        return;
    };
    let last = claim
        .status
        .as_ref()
        .and_then(|s| s.last_pod_event_time.as_deref());
    if !stamp_due(last, now) {
        return;
    }
    let name = claim.metadata.name.clone().unwrap_or_default();
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let time = now.round(k8s_openapi::jiff::Unit::Second).unwrap_or(now);
    if let Err(error) =
        calls::patch_status(&api, &name, json!({"lastPodEventTime": time.to_string()})).await
    {
        tracing::debug!(claim = %name, %error, "writing lastPodEventTime failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, node: &str, phase: &str, deleting: bool) -> Pod {
        let mut value = json!({
            "metadata": {"name": uid, "namespace": "default", "uid": uid},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase},
        });
        if deleting {
            value["metadata"]["deletionTimestamp"] = json!("2026-11-26T10:00:00Z");
        }
        serde_json::from_value(value).expect("pod")
    }

    #[test]
    fn the_first_list_is_no_event_and_later_binds_terminations_and_departures_are() {
        let mut marks = Marks::default();
        assert!(marks.observe(watcher::Event::<Pod>::Init).is_empty());
        assert!(marks
            .observe(watcher::Event::InitApply(pod("a", "n1", "Running", false)))
            .is_empty());
        assert!(marks.observe(watcher::Event::<Pod>::InitDone).is_empty());
        assert_eq!(
            marks.observe(watcher::Event::Apply(pod("b", "n2", "Pending", false))),
            ["n2"],
            "a pod new to the watch of bound pods was bound"
        );
        assert!(marks
            .observe(watcher::Event::Apply(pod("b", "n2", "Running", false)))
            .is_empty());
        assert_eq!(
            marks.observe(watcher::Event::Apply(pod("b", "n2", "Running", true))),
            ["n2"]
        );
        assert!(
            marks
                .observe(watcher::Event::Delete(pod("b", "n2", "Running", true)))
                .is_empty(),
            "its departure was already the terminating event"
        );
        assert_eq!(
            marks.observe(watcher::Event::Delete(pod("a", "n1", "Running", false))),
            ["n1"],
            "deleted outright"
        );
    }

    #[test]
    fn a_relist_finds_what_changed_while_the_watch_was_down() {
        let mut marks = Marks::default();
        marks.observe(watcher::Event::<Pod>::Init);
        marks.observe(watcher::Event::InitApply(pod("a", "n1", "Running", false)));
        marks.observe(watcher::Event::InitApply(pod("b", "n2", "Running", false)));
        marks.observe(watcher::Event::<Pod>::InitDone);
        marks.observe(watcher::Event::<Pod>::Init);
        assert_eq!(
            marks.observe(watcher::Event::InitApply(pod(
                "a",
                "n1",
                "Succeeded",
                false
            ))),
            ["n1"]
        );
        assert_eq!(
            marks.observe(watcher::Event::<Pod>::InitDone),
            ["n2"],
            "b is gone"
        );
    }
}
