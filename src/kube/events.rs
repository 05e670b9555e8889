//! Kubernetes Events (events.k8s.io/v1) with Karpenter's reasons. Publishing is best effort: a failed Event
//! is logged and never fails the reconcile that raised it.

use ::kube::runtime::events::{Event, EventType, Recorder, Reporter};
use ::kube::{Client, Resource};
use std::time::Duration;

/// How long one Event write may take.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

/// Publishes Events as one reporting controller.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl Events {
    /// `controller` names the reporter (`karpenter`-style: `kerf`), `instance` the replica (its pod name).
    pub fn new(client: Client, controller: &str, instance: Option<String>) -> Events {
        let reporter = Reporter {
            controller: controller.to_owned(),
            instance,
        };
        Events {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// A Normal Event on `object`.
    pub async fn normal<K>(&self, object: &K, reason: &str, note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(object, EventType::Normal, reason, note).await;
    }

    /// A Warning Event on `object`.
    pub async fn warning<K>(&self, object: &K, reason: &str, note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(object, EventType::Warning, reason, note).await;
    }

    async fn publish<K>(&self, object: &K, type_: EventType, reason: &str, note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: reason.to_owned(),
            secondary: None,
        };
        let reference = object.object_ref(&());
        match tokio::time::timeout(PUBLISH_TIMEOUT, self.recorder.publish(&event, &reference)).await
        {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(reason, object = ?reference.name, %error, "could not publish an Event")
            }
            Err(_) => {
                tracing::warn!(reason, object = ?reference.name, "publishing an Event timed out")
            }
        }
    }
}
