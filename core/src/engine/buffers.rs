//! CapacityBuffers (`CapacityBuffer` feature gate): how many chunks a buffer keeps, the virtual pods that stand for
//! them in every provisioning and consolidation decision, and what its `Provisioning` condition says after a
//! decision. Karpenter v1.14.1 `pkg/controllers/capacitybuffer` (replicas: `computeReplicas`,
//! `calculateLimitReplicas`, `calculatePercentageReplicas`), `pkg/state/virtualpods` (`BuildVirtualPods`,
//! `sanitizeVirtualPodSpec`) and `pkg/controllers/provisioning/buffers.go` (`computeProvisioningCondition`).
//!
//! Virtual pods exist only in memory: they are pending pods to the solve (so headroom is launched and kept), never
//! nominate a node, get no Event or annotation, and on the nodes they were planned onto they count as pods for
//! disruption (a node holding buffer capacity is not empty, and a consolidation must find room for them).

pub use crate::api::capacitybuffer::is_virtual;
use crate::api::capacitybuffer::{CapacityBuffer, CapacityBufferSpec, LocalObjectRef};
use crate::catalog::Resources;
use crate::scheduling::PodInfo;
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodTemplate, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;
use std::collections::BTreeMap;

pub use crate::api::well_known::{BUFFER_NAME, BUFFER_NAMESPACE, FAKE_POD};
/// The buffer's refs resolved and its replicas computed.
pub const READY_FOR_PROVISIONING: &str = "ReadyForProvisioning";
/// The buffer's virtual pods fit the capacity that exists.
pub const PROVISIONING: &str = "Provisioning";
/// The priority of virtual pods: the lowest there is.
pub const VIRTUAL_POD_PRIORITY: i32 = i32::MIN;

/// Why a buffer is not `ReadyForProvisioning`: Karpenter's reason and the error.
pub type NotReady = (&'static str, String);

/// The `apps` workload a buffer's `scalableRef` names, checked: its kind (Deployment, StatefulSet, ReplicaSet) and
/// name; `None` for a buffer with a `podTemplateRef`.
pub fn workload_ref(buffer: &CapacityBuffer) -> Result<Option<(&'static str, &str)>, NotReady> {
    if buffer.spec.pod_template_ref.is_some() {
        return Ok(None);
    }
    let Some(reference) = &buffer.spec.scalable_ref else {
        return Err((
            "ResolutionFailed",
            "Neither podTemplateRef nor scalableRef is set".to_owned(),
        ));
    };
    if !reference.api_group.is_empty() && reference.api_group != "apps" {
        return Err((
            "ResolutionFailed",
            format!(
                "unsupported scalableRef API group \"{}\"",
                reference.api_group
            ),
        ));
    }
    let kind = match reference.kind.as_str() {
        "Deployment" => "Deployment",
        "StatefulSet" => "StatefulSet",
        "ReplicaSet" => "ReplicaSet",
        other => return Err(("ResolutionFailed", format!("unsupported kind \"{other}\""))),
    };
    Ok(Some((kind, reference.name.as_str())))
}

/// What a buffer's ref resolved to.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    pub template: PodTemplateSpec,
    /// The PodTemplate's name and generation, for a `podTemplateRef`.
    pub pod_template: Option<(String, Option<i64>)>,
    /// The workload's replicas, for a `scalableRef`.
    pub scalable: Option<i32>,
}

/// Resolves `buffer` against the PodTemplates of the cluster (or scenario) and, for a `scalableRef`, the workload
/// [`workload_ref`] names as the caller found it (`Ok(None)`: not found; its template and replicas, absent
/// replicas meaning 1).
pub fn resolve<'t>(
    buffer: &CapacityBuffer,
    pod_templates: impl IntoIterator<Item = &'t PodTemplate>,
    workload: Result<Option<(PodTemplateSpec, Option<i32>)>, String>,
) -> Result<Resolved, NotReady> {
    let namespace = buffer.metadata.namespace.as_deref().unwrap_or("default");
    if let Some(LocalObjectRef { name }) = &buffer.spec.pod_template_ref {
        let template = pod_templates.into_iter().find(|t| {
            t.metadata.name.as_deref() == Some(name.as_str())
                && t.metadata.namespace.as_deref().unwrap_or("default") == namespace
        });
        return match template {
            Some(t) => Ok(Resolved {
                template: t.template.clone().unwrap_or_default(),
                pod_template: Some((name.clone(), t.metadata.generation)),
                scalable: None,
            }),
            None => Err((
                "PodTemplateNotFound",
                format!("podtemplates \"{name}\" not found"),
            )),
        };
    }
    let (kind, name) = workload_ref(buffer)?.ok_or_else(|| {
        (
            "ResolutionFailed",
            "Neither podTemplateRef nor scalableRef is set".to_owned(),
        )
    })?;
    match workload {
        Ok(Some((template, replicas))) => Ok(Resolved {
            template,
            pod_template: None,
            scalable: Some(replicas.unwrap_or(1)),
        }),
        Ok(None) => Err((
            "ScalableRefNotFound",
            format!("{}s.apps \"{name}\" not found", kind.to_ascii_lowercase()),
        )),
        Err(error) => Err(("ResolutionFailed", error)),
    }
}

/// The virtual pods `buffer` keeps, once resolved: [`replicas`] of them.
pub fn pods_of(buffer: &CapacityBuffer, resolved: &Resolved) -> (i32, Vec<Pod>) {
    let count = replicas(
        &buffer.spec,
        resolved
            .template
            .spec
            .as_ref()
            .unwrap_or(&PodSpec::default()),
        resolved.scalable,
    );
    (count, virtual_pods(buffer, &resolved.template, count))
}

/// A buffer's chunk count from its spec, the template's requests and, for a `scalableRef`, the workload's
/// replicas: the larger of `replicas` and the `percentage` share (rounded up, at least 1), capped by what fits in
/// `limits`; with neither, what fits in `limits` (0 without limits).
pub fn replicas(spec: &CapacityBufferSpec, template: &PodSpec, scalable: Option<i32>) -> i32 {
    let mut candidates = Vec::new();
    if let (Some(percentage), Some(workload)) = (spec.percentage, scalable.filter(|r| *r > 0)) {
        candidates.push(percentage_replicas(workload, percentage));
    }
    if let Some(replicas) = spec.replicas {
        candidates.push(replicas);
    }
    let desired = candidates.iter().copied().max();
    let limited = spec
        .limits
        .as_ref()
        .and_then(|limits| limit_replicas(limits, template));
    match (desired, limited) {
        (Some(desired), Some(limited)) => desired.min(limited),
        (None, Some(limited)) => limited,
        (Some(desired), None) => desired,
        (None, None) => 0,
    }
}

/// `ceil(workload × percentage / 100)`, at least 1 when both are positive.
fn percentage_replicas(workload: i32, percentage: i32) -> i32 {
    let share = (f64::from(workload) * f64::from(percentage) / 100.0).ceil();
    let share = share.min(f64::from(i32::MAX)) as i32;
    if share < 1 && percentage > 0 && workload > 0 {
        1
    } else {
        share
    }
}

/// How many chunks fit in `limits`: per resource both name, `floor(limit / request)`, the least of them; `None`
/// when no limited resource is requested (the limits constrain nothing).
fn limit_replicas(limits: &BTreeMap<String, IntOrString>, template: &PodSpec) -> Option<i32> {
    let pod = Pod {
        spec: Some(template.clone()),
        ..Pod::default()
    };
    let requests = PodInfo::from_pod(&pod).ok()?.requests;
    let mut least: Option<i64> = None;
    for (name, limit) in limits {
        let text = match limit {
            IntOrString::Int(n) => n.to_string(),
            IntOrString::String(s) => s.clone(),
        };
        // `pods` is not a request of the template (the solve counts each pod as one).
        let request = if name == crate::catalog::PODS {
            0
        } else {
            requests.get(name)
        };
        if request <= 0 {
            continue;
        }
        let Ok(limit) = Resources::from_quantities([(name.as_str(), text.as_str())]) else {
            continue;
        };
        let fit = limit.get(name).max(0) / request;
        least = Some(least.map_or(fit, |l| l.min(fit)));
    }
    least.map(|n| i32::try_from(n).unwrap_or(i32::MAX))
}

/// The buffer's `replicas` virtual pods shaped like `template`: named `capacity-buffer-<buffer>-<i>` in its
/// namespace, with the template's labels (spread and affinity see them), the lowest priority, no node name and no
/// claim-backed volumes (their claims never exist), and the Unschedulable condition a pending pod has.
pub fn virtual_pods(
    buffer: &CapacityBuffer,
    template: &PodTemplateSpec,
    replicas: i32,
) -> Vec<Pod> {
    let name = buffer.metadata.name.clone().unwrap_or_default();
    let namespace = buffer
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_owned());
    let uid = buffer.metadata.uid.clone().unwrap_or_else(|| name.clone());
    let spec = sanitized(template.spec.clone().unwrap_or_default());
    let labels = template.metadata.as_ref().and_then(|m| m.labels.clone());
    let created = buffer.metadata.creation_timestamp.clone();
    (1..=replicas.max(0))
        .map(|i| Pod {
            metadata: ObjectMeta {
                name: Some(format!("capacity-buffer-{name}-{i}")),
                namespace: Some(namespace.clone()),
                uid: Some(format!("{uid}-{i}")),
                labels: labels.clone(),
                annotations: Some(
                    [
                        (FAKE_POD.to_owned(), "true".to_owned()),
                        (BUFFER_NAME.to_owned(), name.clone()),
                        (BUFFER_NAMESPACE.to_owned(), namespace.clone()),
                    ]
                    .into_iter()
                    .collect(),
                ),
                creation_timestamp: created.clone(),
                ..ObjectMeta::default()
            },
            spec: Some(spec.clone()),
            status: serde_json::from_value(json!({
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
            }))
            .ok(),
        })
        .collect()
}

/// `spec` without what a virtual pod cannot have: a node name, and volumes backed by claims (with their mounts).
fn sanitized(mut spec: PodSpec) -> PodSpec {
    spec.node_name = None;
    spec.priority = Some(VIRTUAL_POD_PRIORITY);
    spec.priority_class_name = None;
    let mut dropped = Vec::new();
    if let Some(volumes) = spec.volumes.as_mut() {
        volumes.retain(|v| {
            let claim_backed = v.persistent_volume_claim.is_some() || v.ephemeral.is_some();
            if claim_backed {
                dropped.push(v.name.clone());
            }
            !claim_backed
        });
    }
    if !dropped.is_empty() {
        for container in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            if let Some(mounts) = container.volume_mounts.as_mut() {
                mounts.retain(|m| !dropped.contains(&m.name));
            }
        }
    }
    spec
}

/// `namespace/name` of the buffer a virtual pod belongs to.
pub fn buffer_of(pod: &Pod) -> Option<String> {
    let annotations = pod.metadata.annotations.as_ref()?;
    if annotations.get(FAKE_POD)? != "true" {
        return None;
    }
    Some(format!(
        "{}/{}",
        annotations.get(BUFFER_NAMESPACE)?,
        annotations.get(BUFFER_NAME)?
    ))
}

/// The virtual pod `pod` as disruption sees it on the Node `node` it was planned onto: bound there and running,
/// so the node is not empty and a consolidation must find room for it.
pub fn held_on(pod: &Pod, node: &str) -> Pod {
    let mut pod = pod.clone();
    pod.spec.get_or_insert_with(Default::default).node_name = Some(node.to_owned());
    if let Some(status) = pod.status.as_mut() {
        status.phase = Some("Running".into());
        status.conditions = None;
    }
    pod
}

/// Where one decision put a buffer's virtual pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Placed {
    /// On nodes or claims that exist.
    pub existing: usize,
    /// On claims the decision creates.
    pub new_capacity: usize,
    /// Nowhere.
    pub failed: usize,
}

/// The `Provisioning` condition after a decision (status, reason, message), or `None` to leave it as it is: not
/// ready or empty buffers say so; a buffer whose pods all fit existing capacity is `True`; one that needed new
/// capacity or failed is `False` with the counts.
pub fn provisioning_condition(
    ready: bool,
    replicas: i32,
    placed: Option<Placed>,
) -> Option<(bool, &'static str, String)> {
    if !ready {
        return Some((
            false,
            "NotReadyForProvisioning",
            "Buffer is not ReadyForProvisioning".to_owned(),
        ));
    }
    if replicas <= 0 {
        return Some((
            false,
            "BufferEmpty",
            "Buffer has zero desired replicas".to_owned(),
        ));
    }
    let placed = placed?;
    if placed.new_capacity > 0 || placed.failed > 0 {
        return Some((
            false,
            "RequiresNewCapacity",
            format!(
                "{}/{replicas} virtual pods required new capacity, {} failed",
                placed.new_capacity, placed.failed
            ),
        ));
    }
    (placed.existing == usize::try_from(replicas).unwrap_or(0)).then(|| {
        (
            true,
            "FitsExistingCapacity",
            format!("All {replicas} virtual pods fit on existing capacity"),
        )
    })
}

#[cfg(test)]
mod tests;
