//! Kubernetes Events (events.k8s.io/v1) with Karpenter's reasons. Publishing is best effort: a failed Event
//! is logged and never fails the reconcile that raised it.
//!
//! Events about cluster-scoped objects (NodePools, NodeClaims, Nodes) are written as old-style core/v1 Events
//! (no `eventTime`) in `default`: the apiserver accepts an Event with `eventTime` about a cluster-scoped object
//! only in `kube-system` before Kubernetes 1.22 (so events.k8s.io/v1 cannot write one in `default`), while an
//! old-style Event has always been accepted in `default`, where `kubectl describe` finds it.

use ::kube::api::{Api, PostParams};
use ::kube::runtime::events::{Event, EventType, Recorder, Reporter};
use ::kube::{Client, Resource};
use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use std::time::Duration;

/// How long one Event write may take.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

/// Publishes Events as one reporting controller.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
    client: Client,
    reporter: Reporter,
}

impl Events {
    /// `controller` names the reporter (`karpenter`-style: `kerf`), `instance` the replica (its pod name).
    pub fn new(client: Client, controller: &str, instance: Option<String>) -> Events {
        let reporter = Reporter {
            controller: controller.to_owned(),
            instance,
        };
        Events {
            recorder: Recorder::new(client.clone(), reporter.clone()),
            client,
            reporter,
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
        let publish = async {
            if reference.namespace.is_none() {
                self.publish_core(&event, &reference).await
            } else {
                self.recorder.publish(&event, &reference).await
            }
        };
        match tokio::time::timeout(PUBLISH_TIMEOUT, publish).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(reason, object = ?reference.name, %error, "could not publish an Event")
            }
            Err(_) => {
                tracing::warn!(reason, object = ?reference.name, "publishing an Event timed out")
            }
        }
    }

    /// A core/v1 Event in `default` about the cluster-scoped object `reference`.
    async fn publish_core(
        &self,
        event: &Event,
        reference: &ObjectReference,
    ) -> Result<(), ::kube::Error> {
        let now = Timestamp::now();
        let instance = self
            .reporter
            .instance
            .clone()
            .unwrap_or_else(|| self.reporter.controller.clone());
        let name = reference
            .name
            .as_deref()
            .unwrap_or(&self.reporter.controller);
        let core = CoreEvent {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{:x}", now.as_nanosecond())),
                namespace: Some(String::from("default")),
                ..ObjectMeta::default()
            },
            involved_object: reference.clone(),
            reason: Some(event.reason.clone()),
            message: event.note.clone(),
            type_: Some(match event.type_ {
                EventType::Normal => String::from("Normal"),
                EventType::Warning => String::from("Warning"),
            }),
            action: Some(event.action.clone()),
            count: Some(1),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            reporting_component: Some(self.reporter.controller.clone()),
            reporting_instance: Some(instance.clone()),
            source: Some(EventSource {
                component: Some(self.reporter.controller.clone()),
                host: None,
            }),
            ..CoreEvent::default()
        };
        let api: Api<CoreEvent> = Api::namespaced(self.client.clone(), "default");
        api.create(&PostParams::default(), &core).await.map(|_| ())
    }
}
