//! CapacityBuffers (`CapacityBuffer` gate), as Karpenter's `capacitybuffer` controller and provisioner keep them:
//! each buffer's pod template is resolved (its PodTemplate from the watch, or the `apps` workload it names, read
//! from the apiserver), its chunk count computed ([`buffers::replicas`]), its status written
//! (`ReadyForProvisioning`, `replicas`, `podTemplateRef`, `podTemplateGeneration`, `provisioningStrategy`), and
//! its virtual pods kept in [`BufferPods`] for provisioning (which launches room for them and sets `Provisioning`)
//! and disruption (which keeps room for them).

use super::kit::calls;
use super::nodeclass::rfc3339;
use super::{Context, Error};
use crate::api::capacitybuffer::{CapacityBuffer, LocalObjectRef};
use crate::api::condition;
use crate::cloud::CloudProvider;
use crate::engine::buffers::{
    self, NotReady, Placed, Resolved, PROVISIONING, READY_FOR_PROVISIONING,
};
use ::kube::api::{Patch, PatchParams};
use ::kube::Api;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Karpenter re-resolves every buffer this often (a workload's template or replicas may change).
const RESYNC_INTERVAL: Duration = Duration::from_secs(30);

/// The virtual pods of every ready buffer, and where the last provisioning decision put them. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct BufferPods(Arc<Mutex<Inner>>);

#[derive(Debug, Default)]
struct Inner {
    /// By buffer (`namespace/name`).
    pods: BTreeMap<String, Vec<Arc<Pod>>>,
    /// Virtual pods the last decision placed on an existing node (by Node name), for disruption.
    on_nodes: BTreeMap<String, Vec<Arc<Pod>>>,
    /// Virtual pods the last decision could only place on new capacity, or nowhere.
    waiting: Vec<Arc<Pod>>,
}

impl BufferPods {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every virtual pod, in buffer order.
    pub fn all(&self) -> Vec<Arc<Pod>> {
        self.lock().pods.values().flatten().cloned().collect()
    }

    fn set(&self, buffer: &str, pods: Vec<Pod>) {
        self.lock()
            .pods
            .insert(buffer.to_owned(), pods.into_iter().map(Arc::new).collect());
    }

    fn retain(&self, buffers: &BTreeSet<String>) {
        self.lock().pods.retain(|key, _| buffers.contains(key));
    }

    /// Records where a decision put the virtual pods: `on_nodes` by Node name, the rest waiting.
    pub fn placed(&self, on_nodes: BTreeMap<String, Vec<Arc<Pod>>>, waiting: Vec<Arc<Pod>>) {
        let mut inner = self.lock();
        inner.on_nodes = on_nodes;
        inner.waiting = waiting;
    }

    /// For disruption: the virtual pods bound (in memory) to the Nodes they were planned onto, and those still
    /// waiting for capacity (pending).
    pub fn for_disruption(&self) -> (Vec<Pod>, Vec<Pod>) {
        let inner = self.lock();
        let bound = inner
            .on_nodes
            .iter()
            .flat_map(|(node, pods)| pods.iter().map(move |p| buffers::held_on(p, node)))
            .collect();
        let waiting = inner.waiting.iter().map(|p| p.as_ref().clone()).collect();
        (bound, waiting)
    }
}

/// Resolves every buffer when a buffer or PodTemplate changes and every [`RESYNC_INTERVAL`] (which picks up
/// workload changes, as Karpenter's requeue does), until the state watch ends. Other cluster changes (pods, nodes)
/// wake the loop too, but cost no workload reads.
pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    if ctx.state.capacity_buffers.is_none() {
        return Ok(());
    }
    let mut changed = ctx.state.changed.clone();
    let mut seen = None;
    let mut resolved_at = tokio::time::Instant::now();
    loop {
        let now = versions(&ctx);
        if seen.as_ref() != Some(&now) || resolved_at.elapsed() >= RESYNC_INTERVAL {
            resolve_all(&ctx).await;
            seen = Some(now);
            resolved_at = tokio::time::Instant::now();
        }
        tokio::select! {
            result = changed.changed() => if result.is_err() {
                return Ok(());
            },
            () = tokio::time::sleep_until(resolved_at + RESYNC_INTERVAL) => {}
        }
    }
}

/// The resource versions of the buffers and PodTemplates: what a resolution depends on in the cluster state.
fn versions<C>(ctx: &Context<C>) -> BTreeSet<(Option<String>, Option<String>)> {
    let buffers = ctx.state.capacity_buffers.iter().flat_map(|s| s.state());
    let templates = ctx.state.pod_templates.iter().flat_map(|s| s.state());
    buffers
        .map(|b| (b.metadata.uid.clone(), b.metadata.resource_version.clone()))
        .chain(templates.map(|t| (t.metadata.uid.clone(), t.metadata.resource_version.clone())))
        .collect()
}

async fn resolve_all<C: CloudProvider>(ctx: &Context<C>) {
    let Some(store) = &ctx.state.capacity_buffers else {
        return;
    };
    let now = rfc3339(ctx.clock.now());
    let mut live = BTreeSet::new();
    for buffer in store.state() {
        let key = key(&buffer);
        live.insert(key.clone());
        let resolved = resolve(ctx, &buffer).await;
        let (ready, replicas) = match &resolved {
            Ok(r) => {
                let (replicas, pods) = buffers::pods_of(&buffer, r);
                ctx.buffer_pods.set(&key, pods);
                (true, replicas)
            }
            Err(_) => {
                ctx.buffer_pods.set(&key, Vec::new());
                (false, 0)
            }
        };
        let Some(patch) = status_patch(&buffer, &resolved, replicas, &now) else {
            continue;
        };
        write_status(ctx, &buffer, &patch).await;
        tracing::debug!(capacitybuffer = %key, ready, replicas, "capacity buffer resolved");
    }
    ctx.buffer_pods.retain(&live);
}

fn key(buffer: &CapacityBuffer) -> String {
    format!(
        "{}/{}",
        buffer.metadata.namespace.as_deref().unwrap_or("default"),
        buffer.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The buffer's pod template ([`buffers::resolve`]), its `scalableRef` workload read from the apiserver.
async fn resolve<C: CloudProvider>(
    ctx: &Context<C>,
    buffer: &CapacityBuffer,
) -> Result<Resolved, NotReady> {
    let namespace = buffer.metadata.namespace.as_deref().unwrap_or("default");
    let workload = match buffers::workload_ref(buffer)? {
        None => Ok(None),
        Some((kind, name)) => read_workload(ctx, kind, name, namespace).await,
    };
    let templates = ctx
        .state
        .pod_templates
        .as_ref()
        .map(|store| store.state())
        .unwrap_or_default();
    buffers::resolve(buffer, templates.iter().map(AsRef::as_ref), workload)
}

/// The pod template and replicas of the `apps` workload `kind`/`name`; `Ok(None)` when it does not exist.
async fn read_workload<C>(
    ctx: &Context<C>,
    kind: &str,
    name: &str,
    namespace: &str,
) -> Result<Option<(PodTemplateSpec, Option<i32>)>, String> {
    let client = ctx.client.clone();
    let read = match kind {
        "Deployment" => {
            let api: Api<Deployment> = Api::namespaced(client, namespace);
            calls::timed("reading the buffer's Deployment", api.get_opt(name))
                .await
                .map(|d| d.map(|d| (d.spec.template, d.spec.replicas)))
        }
        "StatefulSet" => {
            let api: Api<StatefulSet> = Api::namespaced(client, namespace);
            calls::timed("reading the buffer's StatefulSet", api.get_opt(name))
                .await
                .map(|d| d.map(|d| (d.spec.template, d.spec.replicas)))
        }
        _ => {
            let api: Api<ReplicaSet> = Api::namespaced(client, namespace);
            calls::timed("reading the buffer's ReplicaSet", api.get_opt(name))
                .await
                .map(|d| d.map(|d| (d.spec.template.unwrap_or_default(), d.spec.replicas)))
        }
    };
    read.map_err(|e| e.to_string())
}

/// The status patch bringing `buffer` to what was resolved, if anything differs.
fn status_patch(
    buffer: &CapacityBuffer,
    resolved: &Result<Resolved, NotReady>,
    replicas: i32,
    now: &str,
) -> Option<serde_json::Value> {
    let status = buffer.status.clone().unwrap_or_default();
    let mut conditions = status.conditions.clone().unwrap_or_default();
    let (ok, reason, message) = match resolved {
        Ok(_) => (true, "Resolved", "Pod template resolved successfully"),
        Err((reason, message)) => (false, *reason, message.as_str()),
    };
    let generation = buffer.metadata.generation;
    let mut changed = condition::set(
        &mut conditions,
        READY_FOR_PROVISIONING,
        ok,
        reason,
        message,
        now,
        generation,
    );
    let (template_ref, template_generation) = match resolved {
        Ok(Resolved {
            pod_template: Some((name, generation)),
            ..
        }) => (Some(LocalObjectRef { name: name.clone() }), *generation),
        _ => (None, None),
    };
    let replicas = ok.then_some(replicas).or(status.replicas);
    changed |= status.replicas != replicas
        || status.pod_template_ref != template_ref
        || status.pod_template_generation != template_generation
        || status.provisioning_strategy != buffer.spec.provisioning_strategy;
    changed.then(|| {
        json!({
            "metadata": {"resourceVersion": buffer.metadata.resource_version},
            "status": {
                "conditions": conditions,
                "replicas": replicas,
                "podTemplateRef": template_ref,
                "podTemplateGeneration": template_generation,
                "provisioningStrategy": buffer.spec.provisioning_strategy,
            }
        })
    })
}

async fn write_status<C>(ctx: &Context<C>, buffer: &CapacityBuffer, patch: &serde_json::Value) {
    let namespace = buffer.metadata.namespace.as_deref().unwrap_or("default");
    let name = buffer.metadata.name.as_deref().unwrap_or_default();
    let api: Api<CapacityBuffer> = Api::namespaced(ctx.client.clone(), namespace);
    let (params, patch) = (PatchParams::default(), Patch::Merge(patch));
    match calls::timed(
        "patching the capacitybuffer status",
        api.patch_status(name, &params, &patch),
    )
    .await
    {
        Ok(_) => {}
        Err(calls::ReconcileError::Kube(::kube::Error::Api(status))) if status.code == 409 => {
            tracing::debug!(capacitybuffer = %name, "capacitybuffer changed meanwhile; its status is written on the next pass")
        }
        Err(error) => {
            tracing::warn!(capacitybuffer = %name, %error, "could not update the capacitybuffer status")
        }
    }
}

/// After a provisioning decision: each buffer's `Provisioning` condition from where its virtual pods went
/// (`placed` by buffer key), written where it changes.
pub async fn write_provisioning<C>(ctx: &Context<C>, placed: &BTreeMap<String, Placed>) {
    let Some(store) = &ctx.state.capacity_buffers else {
        return;
    };
    let now = rfc3339(ctx.clock.now());
    for buffer in store.state() {
        let status = buffer.status.clone().unwrap_or_default();
        let conditions = status.conditions.clone().unwrap_or_default();
        let ready = condition::is_true(&conditions, READY_FOR_PROVISIONING);
        let replicas = status.replicas.unwrap_or(0);
        let Some((ok, reason, message)) =
            buffers::provisioning_condition(ready, replicas, placed.get(&key(&buffer)).copied())
        else {
            continue;
        };
        let mut updated = conditions.clone();
        let changed = condition::set(
            &mut updated,
            PROVISIONING,
            ok,
            reason,
            &message,
            &now,
            buffer.metadata.generation,
        );
        if changed {
            let patch = json!({
                "metadata": {"resourceVersion": buffer.metadata.resource_version},
                "status": {"conditions": updated},
            });
            write_status(ctx, &buffer, &patch).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::sim::SimCloud;
    use crate::controllers::state::ClusterState;
    use crate::controllers::testkit::{self, apiserver, ApiServer, Exchange};
    use k8s_openapi::api::core::v1::PodTemplate;
    use serde_json::Value;
    use std::time::{Duration, SystemTime};

    const MERGE_PATCH: &str = "application/merge-patch+json";
    const STATUS: &str =
        "/apis/autoscaling.x-k8s.io/v1beta1/namespaces/ns/capacitybuffers/web/status";
    const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/ns/deployments/web";
    /// The clock of every pass, as conditions carry it.
    const NOW: &str = "2027-01-15T08:00:00Z";

    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    /// The buffer `ns/web` (generation 4, version 9) with `spec` and `status`.
    fn buffer_json(spec: Value, status: Value) -> Value {
        json!({
            "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
            "metadata": {"name": "web", "namespace": "ns", "uid": "buffer-uid", "generation": 4,
                         "resourceVersion": "9"},
            "spec": spec, "status": status,
        })
    }

    fn buffer(spec: Value, status: Value) -> CapacityBuffer {
        serde_json::from_value(buffer_json(spec, status)).expect("a CapacityBuffer")
    }

    fn of_template(replicas: i32) -> Value {
        json!({"podTemplateRef": {"name": "tpl"}, "replicas": replicas})
    }

    fn pod_spec() -> Value {
        json!({"containers": [{"name": "app", "image": "app",
                               "resources": {"requests": {"cpu": "500m"}}}]})
    }

    /// The PodTemplate `ns/tpl` at generation 6.
    fn template() -> PodTemplate {
        serde_json::from_value(json!({
            "metadata": {"name": "tpl", "namespace": "ns", "generation": 6},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod_spec()},
        }))
        .expect("a PodTemplate")
    }

    fn deployment(replicas: i32) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod_spec()}},
        })
    }

    /// A context over a scripted apiserver with the `CapacityBuffer` gate's stores holding `buffers` and the
    /// PodTemplate `ns/tpl`.
    fn context(buffers: Vec<CapacityBuffer>) -> (Context<SimCloud>, ApiServer) {
        let (client, server) = apiserver();
        let mut state = ClusterState::of(vec![], vec![], vec![]);
        state.capacity_buffers = Some(crate::controllers::state::store_of(buffers));
        state.pod_templates = Some(crate::controllers::state::store_of(vec![template()]));
        let cloud = SimCloud::new("test", Vec::new());
        (testkit::context(client, cloud, state, t0()), server)
    }

    fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": NOW, "observedGeneration": 4})
    }

    /// What a buffer of the PodTemplate keeping 3 chunks shows once resolved.
    fn resolved_status() -> Value {
        json!({
            "conditions": [condition(READY_FOR_PROVISIONING, "True", "Resolved",
                                     "Pod template resolved successfully")],
            "replicas": 3, "podTemplateRef": {"name": "tpl"}, "podTemplateGeneration": 6,
            "provisioningStrategy": "buffer.x-k8s.io/active-capacity",
        })
    }

    /// Karpenter's "should resolve a podTemplateRef": the buffer is `ReadyForProvisioning` with its replicas,
    /// template and strategy, written in one merge patch of its status tied to the version read, and its virtual
    /// pods are kept for provisioning.
    #[tokio::test]
    async fn a_buffer_of_a_pod_template_is_ready_with_its_replicas_and_template() {
        let (ctx, mut server) = context(vec![buffer(of_template(3), json!({}))]);
        let script = vec![Exchange::patch(STATUS)
            .content_type(MERGE_PATCH)
            .body(json!({"metadata": {"resourceVersion": "9"}, "status": resolved_status()}))
            .answer(200, buffer_json(of_template(3), json!({})))];
        server.serve(script, resolve_all(&ctx)).await;
        let pods = ctx.buffer_pods.all();
        assert_eq!(pods.len(), 3);
        assert!(pods
            .iter()
            .all(|p| p.metadata.namespace.as_deref() == Some("ns")));
    }

    /// A buffer whose status shows what it resolves to is not written again: no request at all.
    #[tokio::test]
    async fn a_buffer_showing_its_resolution_is_not_written_again() {
        let (ctx, mut server) = context(vec![buffer(of_template(3), resolved_status())]);
        server.serve(vec![], resolve_all(&ctx)).await;
        assert_eq!(
            ctx.buffer_pods.all().len(),
            3,
            "its pods are kept all the same"
        );
    }

    /// Karpenter's "should resolve a scalableRef" with a percentage: the Deployment is read from the apiserver and
    /// 20 % of its 10 replicas kept; no PodTemplate is named in the status.
    #[tokio::test]
    async fn a_buffer_of_a_deployment_reads_it_and_keeps_a_share_of_its_replicas() {
        let spec = json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "web"},
                          "percentage": 20});
        let (ctx, mut server) = context(vec![buffer(spec.clone(), json!({}))]);
        let script = vec![
            Exchange::get(DEPLOYMENT).answer(200, deployment(10)),
            Exchange::patch(STATUS)
                .content_type(MERGE_PATCH)
                .body(json!({"metadata": {"resourceVersion": "9"}, "status": {
                    "conditions": [condition(READY_FOR_PROVISIONING, "True", "Resolved",
                                             "Pod template resolved successfully")],
                    "replicas": 2, "podTemplateRef": null, "podTemplateGeneration": null,
                    "provisioningStrategy": "buffer.x-k8s.io/active-capacity",
                }}))
                .answer(200, buffer_json(spec, json!({}))),
        ];
        server.serve(script, resolve_all(&ctx)).await;
        assert_eq!(ctx.buffer_pods.all().len(), 2);
    }

    /// "should set ReadyForProvisioning to false when the scalableRef does not exist": a Deployment that is gone
    /// (404) makes the buffer not ready with Karpenter's reason, and it keeps no virtual pods.
    #[tokio::test]
    async fn a_buffer_whose_deployment_is_gone_is_not_ready_and_keeps_no_pods() {
        let spec = json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "web"},
                          "replicas": 2});
        let (ctx, mut server) = context(vec![buffer(spec.clone(), json!({}))]);
        let script = vec![
            Exchange::get(DEPLOYMENT).fail(404, "NotFound"),
            Exchange::patch(STATUS)
                .body(json!({"metadata": {"resourceVersion": "9"}, "status": {
                    "conditions": [condition(READY_FOR_PROVISIONING, "False", "ScalableRefNotFound",
                                             "deployments.apps \"web\" not found")],
                    "replicas": null, "podTemplateRef": null, "podTemplateGeneration": null,
                    "provisioningStrategy": "buffer.x-k8s.io/active-capacity",
                }}))
                .answer(200, buffer_json(spec, json!({}))),
        ];
        server.serve(script, resolve_all(&ctx)).await;
        assert!(ctx.buffer_pods.all().is_empty());
    }

    /// A refused write (409: the buffer changed since it was read) still keeps the buffer's pods for
    /// provisioning, and the next pass writes the status again.
    #[tokio::test]
    async fn a_conflict_keeps_the_pods_and_the_next_pass_writes_again() {
        let (ctx, mut server) = context(vec![buffer(of_template(3), json!({}))]);
        let expected = json!({"metadata": {"resourceVersion": "9"}, "status": resolved_status()});
        let script = vec![Exchange::patch(STATUS)
            .body(expected.clone())
            .fail(409, "Conflict")];
        server.serve(script, resolve_all(&ctx)).await;
        assert_eq!(ctx.buffer_pods.all().len(), 3);
        let script = vec![Exchange::patch(STATUS)
            .body(expected)
            .answer(200, buffer_json(of_template(3), json!({})))];
        server.serve(script, resolve_all(&ctx)).await;
    }

    /// Karpenter's provisioner buffers suite: after a decision that put the buffer's pods on new capacity, its
    /// `Provisioning` is false with the counts, the other conditions kept, under the version read; a buffer
    /// whose condition already says so, or with no placement in the decision, is not written.
    #[tokio::test]
    async fn provisioning_is_written_after_a_decision_only_when_it_changes() {
        let ready = resolved_status();
        let (ctx, mut server) = context(vec![buffer(of_template(3), ready.clone())]);
        let placed = BTreeMap::from([(
            "ns/web".to_owned(),
            Placed {
                existing: 1,
                new_capacity: 2,
                failed: 0,
            },
        )]);
        let provisioning = condition(
            PROVISIONING,
            "False",
            "RequiresNewCapacity",
            "2/3 virtual pods required new capacity, 0 failed",
        );
        let script = vec![Exchange::patch(STATUS)
            .content_type(MERGE_PATCH)
            .body(
                json!({"metadata": {"resourceVersion": "9"}, "status": {"conditions": [
                    ready["conditions"][0].clone(), provisioning.clone(),
                ]}}),
            )
            .answer(200, buffer_json(of_template(3), json!({})))];
        server
            .serve(script, write_provisioning(&ctx, &placed))
            .await;
        let mut shown = ready;
        shown["conditions"] = json!([shown["conditions"][0].clone(), provisioning]);
        let (ctx, mut server) = context(vec![buffer(of_template(3), shown)]);
        server
            .serve(vec![], write_provisioning(&ctx, &placed))
            .await;
        server
            .serve(vec![], write_provisioning(&ctx, &BTreeMap::new()))
            .await;
    }
}
