//! The apiserver writes the lifecycle and termination controllers share, each bounded by
//! [`CALL_TIMEOUT`], and the error their reconciles end with.

use crate::cloud::CloudError;
use crate::kube::CALL_TIMEOUT;
use ::kube::api::{Api, DeleteParams, Patch, PatchParams};
use ::kube::Resource;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::fmt::Debug;
use std::future::Future;

pub use crate::api::well_known::TERMINATION_FINALIZER;

/// Why a reconcile failed; it is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] ::kube::Error),
    #[error("cloud provider: {0}")]
    Cloud(#[from] CloudError),
    #[error("{0} timed out after {CALL_TIMEOUT:?}")]
    Timeout(&'static str),
    #[error("{0}")]
    Invalid(String),
}

impl ReconcileError {
    /// A 404 from the apiserver: the object is gone.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReconcileError::Kube(::kube::Error::Api(s)) if s.code == 404)
    }
}

/// Runs one apiserver call with [`CALL_TIMEOUT`].
pub async fn timed<T>(
    what: &'static str,
    call: impl Future<Output = Result<T, ::kube::Error>>,
) -> Result<T, ReconcileError> {
    tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .map_err(|_| ReconcileError::Timeout(what))?
        .map_err(ReconcileError::from)
}

/// The JSON patch that adds `finalizer` when it is missing, tested against the list it was computed
/// from (a concurrent change makes it fail and the reconcile retry).
pub fn add_finalizer_patch(finalizers: Option<&[String]>, finalizer: &str) -> Option<Value> {
    match finalizers {
        None | Some([]) => Some(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": finalizers.map(<[String]>::to_vec)},
            {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
        ])),
        Some(list) if list.iter().any(|f| f == finalizer) => None,
        Some(list) => Some(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": list},
            {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
        ])),
    }
}

/// The JSON patch that removes `finalizer` when present, tested like [`add_finalizer_patch`].
pub fn remove_finalizer_patch(finalizers: Option<&[String]>, finalizer: &str) -> Option<Value> {
    let list = finalizers?;
    let index = list.iter().position(|f| f == finalizer)?;
    Some(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": list},
        {"op": "remove", "path": format!("/metadata/finalizers/{index}")},
    ]))
}

/// Applies a JSON patch to `name`.
pub async fn json_patch<K>(
    api: &Api<K>,
    what: &'static str,
    name: &str,
    patch: Value,
) -> Result<(), ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let patch: json_patch::Patch =
        serde_json::from_value(patch).map_err(|e| ReconcileError::Invalid(e.to_string()))?;
    timed(
        what,
        api.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch)),
    )
    .await?;
    Ok(())
}

/// Adds `finalizer` to `object` if it lacks it.
pub async fn add_finalizer<K>(
    api: &Api<K>,
    object: &K,
    finalizer: &str,
) -> Result<(), ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let meta = object.meta();
    match add_finalizer_patch(meta.finalizers.as_deref(), finalizer) {
        Some(patch) => json_patch(api, "adding a finalizer", &name(object)?, patch).await,
        None => Ok(()),
    }
}

/// Removes `finalizer` from `object`; an object already gone is fine.
pub async fn remove_finalizer<K>(
    api: &Api<K>,
    object: &K,
    finalizer: &str,
) -> Result<(), ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let meta = object.meta();
    match remove_finalizer_patch(meta.finalizers.as_deref(), finalizer) {
        Some(patch) => match json_patch(api, "removing a finalizer", &name(object)?, patch).await {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        },
        None => Ok(()),
    }
}

/// Deletes `name`; an object already gone is fine.
pub async fn delete<K>(api: &Api<K>, name: &str) -> Result<(), ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match timed("deleting", api.delete(name, &DeleteParams::default())).await {
        Err(e) if e.is_not_found() => Ok(()),
        other => other.map(|_| ()),
    }
}

/// A merge patch of `name`'s status.
pub async fn patch_status<K>(api: &Api<K>, name: &str, status: Value) -> Result<(), ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    timed(
        "patching the status",
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        ),
    )
    .await?;
    Ok(())
}

/// A merge patch of `name`.
pub async fn merge_patch<K>(api: &Api<K>, name: &str, patch: Value) -> Result<(), ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    timed(
        "patching",
        api.patch(name, &PatchParams::default(), &Patch::Merge(patch)),
    )
    .await?;
    Ok(())
}

pub fn name<K: Resource>(object: &K) -> Result<String, ReconcileError> {
    object
        .meta()
        .name
        .clone()
        .ok_or_else(|| ReconcileError::Invalid("an object without metadata.name".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finalizers_are_added_once_and_removed_by_index_under_a_test() {
        let f = TERMINATION_FINALIZER;
        assert_eq!(
            add_finalizer_patch(None, f),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [f]},
            ]))
        );
        let other = vec!["other".to_owned()];
        assert_eq!(
            add_finalizer_patch(Some(&other), f),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["other"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": f},
            ]))
        );
        let both = vec!["other".to_owned(), f.to_owned()];
        assert_eq!(add_finalizer_patch(Some(&both), f), None);
        assert_eq!(
            remove_finalizer_patch(Some(&both), f),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["other", f]},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ]))
        );
        assert_eq!(remove_finalizer_patch(Some(&other), f), None);
        assert_eq!(remove_finalizer_patch(None, f), None);
    }
}
