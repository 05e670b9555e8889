//! A pending pod's live status: the last provisioning decision about it — the NodeClaim or node it was nominated
//! to, or why it still waits (a NodePool limit, no compatible offering, its volumes, ...) — in the pod's
//! `kerf.sh/provisioning` annotation, next to the advice the webhook wrote when the pod was created (which says
//! where the pod could go, not what is happening to it). The text is the one of the pod's `Nominated` or
//! `FailedScheduling` Event, so `kubectl get pod -o yaml` tells what `kubectl describe` does, without Events
//! expiring after an hour.
//!
//! A write happens only when the text differs from what the pod carries (so a restarted controller does not
//! rewrite every pending pod), and writes are paced to [`WRITES_PER_SECOND`]: a batch of thousands of pods must
//! not crowd the apiserver out for the launches.

use crate::admission::advice::PROVISIONING_ANNOTATION;
use crate::controllers::kit::calls;
use ::kube::Api;
use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// The most pod annotation writes per second, across a batch.
pub const WRITES_PER_SECOND: usize = 50;

/// The merge patch that sets `pod`'s status to `note`, or `None` when it says that already.
pub fn patch(pod: &Pod, note: &str) -> Option<Value> {
    let current = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PROVISIONING_ANNOTATION));
    (current.map(String::as_str) != Some(note))
        .then(|| json!({"metadata": {"annotations": {PROVISIONING_ANNOTATION: note}}}))
}

/// Writes each `(pod, note)` whose pod does not say it yet, at most [`WRITES_PER_SECOND`] per second and
/// `parallel` at once. A failed write is logged: the pod is told again when the next decision about it differs.
pub async fn write(client: &::kube::Client, notes: Vec<(Arc<Pod>, String)>, parallel: usize) {
    let writes: Vec<(Arc<Pod>, Value)> = notes
        .into_iter()
        .filter_map(|(pod, note)| Some((pod.clone(), patch(&pod, &note)?)))
        .collect();
    write_patches(client, writes, parallel).await;
}

/// Merge-patches each pod with its patch, at most [`WRITES_PER_SECOND`] per second and `parallel` at once; a
/// failed write is logged.
pub async fn write_patches(
    client: &::kube::Client,
    writes: Vec<(Arc<Pod>, Value)>,
    parallel: usize,
) {
    let paced = writes.len() > WRITES_PER_SECOND;
    let mut writes = writes.into_iter().peekable();
    while writes.peek().is_some() {
        let started = tokio::time::Instant::now();
        let chunk: Vec<_> = writes.by_ref().take(WRITES_PER_SECOND).collect();
        stream::iter(
            chunk
                .into_iter()
                .map(|(pod, patch)| write_one(client.clone(), pod, patch)),
        )
        .buffer_unordered(parallel)
        .collect::<Vec<()>>()
        .await;
        if paced {
            tokio::time::sleep_until(started + Duration::from_secs(1)).await;
        }
    }
}

async fn write_one(client: ::kube::Client, pod: Arc<Pod>, patch: Value) {
    let (Some(namespace), Some(name)) = (
        pod.metadata.namespace.as_deref(),
        pod.metadata.name.as_deref(),
    ) else {
        return;
    };
    let api: Api<Pod> = Api::namespaced(client, namespace);
    if let Err(error) = calls::merge_patch(&api, name, patch).await {
        tracing::debug!(pod = %format!("{namespace}/{name}"), %error, "pod annotations not written");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::testkit::{apiserver, Exchange};

    const NOTE: &str = "Pod should schedule on: nodeclaim/default-abc12";

    fn named(name: &str, annotation: Option<&str>) -> Arc<Pod> {
        let mut pod = pod(annotation);
        pod.metadata.name = Some(name.to_owned());
        pod.metadata.namespace = Some("ns".to_owned());
        Arc::new(pod)
    }

    fn note_written(name: &str) -> Exchange {
        Exchange::patch(&format!("/api/v1/namespaces/ns/pods/{name}"))
            .content_type("application/merge-patch+json")
            .body(json!({"metadata": {"annotations": {PROVISIONING_ANNOTATION: NOTE}}}))
    }

    /// A pod that says it already is not written; a pod deleted meanwhile (404) is passed over and the next
    /// one is still written.
    #[tokio::test]
    async fn only_changed_pods_are_written_and_a_failed_write_stops_nothing() {
        let (client, mut server) = apiserver();
        let notes = vec![
            (named("gone", None), NOTE.to_owned()),
            (named("told", Some(NOTE)), NOTE.to_owned()),
            (
                named("pending", Some("Failed to schedule pod")),
                NOTE.to_owned(),
            ),
        ];
        let answer = serde_json::to_value(named("pending", Some(NOTE)).as_ref()).expect("json");
        let script = vec![
            note_written("gone").fail(404, "NotFound"),
            note_written("pending").answer(200, answer),
        ];
        server.serve(script, write(&client, notes, 1)).await;
    }

    /// A batch larger than [`WRITES_PER_SECOND`] goes a chunk per second: the first chunk at once, the next a
    /// second after the first began.
    #[tokio::test(start_paused = true)]
    async fn writes_beyond_the_rate_wait_for_the_next_second() {
        let (client, mut server) = apiserver();
        let start = tokio::time::Instant::now();
        let notes: Vec<_> = (0..=WRITES_PER_SECOND)
            .map(|i| (named(&format!("p{i}"), None), NOTE.to_owned()))
            .collect();
        let script = (0..=WRITES_PER_SECOND)
            .map(|i| {
                Exchange::patch("/api/v1/namespaces/ns/pods/*").check(move |_| {
                    let at = start.elapsed();
                    if i < WRITES_PER_SECOND {
                        assert!(at < Duration::from_secs(1), "write {i} waited {at:?}");
                    } else {
                        assert!(at >= Duration::from_secs(1), "write {i} came after {at:?}");
                    }
                })
            })
            .collect();
        server.serve(script, write(&client, notes, 8)).await;
    }

    fn pod(annotation: Option<&str>) -> Pod {
        let mut pod = Pod::default();
        if let Some(text) = annotation {
            pod.metadata.annotations = Some(
                [(PROVISIONING_ANNOTATION.to_owned(), text.to_owned())]
                    .into_iter()
                    .collect(),
            );
        }
        pod
    }

    #[test]
    fn a_pod_is_written_only_when_its_status_changes() {
        let note = "Pod should schedule on: nodeclaim/default-abc12";
        assert_eq!(
            patch(&pod(None), note),
            Some(json!({"metadata": {"annotations": {"kerf.sh/provisioning": note}}}))
        );
        assert_eq!(patch(&pod(Some(note)), note), None);
        assert!(patch(&pod(Some("Failed to schedule pod, ...")), note).is_some());
    }
}
