//! The workloads of a scenario (Deployments, ReplicaSets, StatefulSets, Jobs): how many pods each runs, the
//! controller its pods name, and the pods it is expanded into.

use crate::api::validation::{ErrorKind, FieldError, FieldPath};
use crate::api::well_known::PODS_LISTED;
use crate::engine::provisioning::replicas::Replicas;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde::Deserialize;
use serde_json::Value;

pub(in crate::simulate) fn pods_listed(workload: &Value) -> bool {
    workload
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(PODS_LISTED))
        .and_then(Value::as_str)
        == Some("true")
}

/// `namespace/name` of a workload, as scale events name it.
pub(super) fn workload_key(workload: &Value) -> String {
    let text = |pointer| workload.pointer(pointer).and_then(Value::as_str);
    format!(
        "{}/{}",
        text("/metadata/namespace").unwrap_or("default"),
        text("/metadata/name").unwrap_or_default()
    )
}

/// How many pods a workload runs: `replicas` (Jobs: `parallelism`), 1 when unset, with the field it is in;
/// the apiserver's error for a count that is negative or not a whole number.
pub(super) fn replicas(workload: &Value, kind: &str) -> Result<(&'static str, u64), FieldError> {
    let field = if kind == "Job" {
        "parallelism"
    } else {
        "replicas"
    };
    let path = FieldPath::new("spec").child(field);
    let count = match workload.get("spec").and_then(|spec| spec.get(field)) {
        None | Some(Value::Null) => 1,
        Some(Value::Number(n)) => match (n.as_u64(), n.as_i64()) {
            (Some(count), _) => count,
            (None, Some(negative)) => {
                return Err(FieldError {
                    path,
                    kind: ErrorKind::Invalid {
                        value: negative.to_string(),
                        quoted: false,
                        detail: "must be greater than or equal to 0".to_owned(),
                    },
                    ratchets: true,
                })
            }
            (None, None) => return Err(not_an_integer(&path, &n.to_string())),
        },
        Some(other) => return Err(not_an_integer(&path, &other.to_string())),
    };
    Ok((field, count))
}

/// The apiserver's type error for a count that is not a whole number.
fn not_an_integer(path: &FieldPath, value: &str) -> FieldError {
    FieldError::invalid(
        path,
        value,
        format!("{path} in body must be of type integer: {value:?}"),
    )
}

/// The controller of a workload's pods, as a cluster's pods name it in their `ownerReferences`.
pub(super) struct Controller {
    api_version: &'static str,
    pub(super) kind: &'static str,
    pub(super) name: String,
}

/// The controller of `workload`'s pods: the workload itself, except for a Deployment, whose pods a ReplicaSet
/// controls. A simulated Deployment has one revision, so that ReplicaSet (named `<deployment>-rs` here, for the
/// hash of its template in a cluster) selects what the Deployment does.
pub(super) fn controller_of(workload: &Value) -> Option<Controller> {
    let name = workload.pointer("/metadata/name").and_then(Value::as_str)?;
    let (group, kind) = crate::manifest::group_kind(workload);
    let (api_version, kind, name) = match (group, kind) {
        ("apps", "Deployment") => ("apps/v1", "ReplicaSet", format!("{name}-rs")),
        ("apps", "ReplicaSet") => ("apps/v1", "ReplicaSet", name.to_owned()),
        ("apps", "StatefulSet") => ("apps/v1", "StatefulSet", name.to_owned()),
        ("batch", "Job") => ("batch/v1", "Job", name.to_owned()),
        _ => return None,
    };
    Some(Controller {
        api_version,
        kind,
        name,
    })
}

/// The pods `indices` of a workload: copies of its template named `<name>-<i>`, with the UID
/// `<namespace>/<name>-<i>`, controlled by the workload ([`controller_of`]) as in a cluster, so that a default
/// spread deduces their selector from it. The template is read once and shared by the replicas.
pub(in crate::simulate) fn expand(
    workload: &Value,
    indices: std::ops::Range<u64>,
) -> Result<Replicas, serde_json::Error> {
    let name = workload
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("workload");
    let namespace = workload
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let mut template = Pod::deserialize(
        workload
            .pointer("/spec/template")
            .unwrap_or(&Value::Object(Default::default())),
    )?;
    let metadata = &mut template.metadata;
    metadata.name = Some(name.to_owned());
    metadata.namespace = Some(namespace.to_owned());
    if let Some(c) = controller_of(workload) {
        metadata.owner_references = Some(vec![OwnerReference {
            api_version: c.api_version.to_owned(),
            kind: c.kind.to_owned(),
            uid: format!("{namespace}/{}", c.name),
            name: c.name,
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
    }
    Ok(Replicas::new(template, indices))
}
