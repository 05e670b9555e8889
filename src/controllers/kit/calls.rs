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

/// How many apiserver writes (claims, Events, marks) one decision has in flight at once.
pub const PARALLEL_WRITES: usize = 16;

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
    delete_if_present(api, name).await.map(|_| ())
}

/// Deletes `name`: whether this call found it (`false`: it was gone already, which is fine).
pub async fn delete_if_present<K>(api: &Api<K>, name: &str) -> Result<bool, ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match timed("deleting", api.delete(name, &DeleteParams::default())).await {
        Err(e) if e.is_not_found() => Ok(false),
        other => other.map(|_| true),
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
    use crate::api::nodeclaim::NodeClaim;
    use crate::controllers::testkit::{apiserver, Exchange};
    use k8s_openapi::api::core::v1::Node;

    const CLAIM: &str = "/apis/karpenter.sh/v1/nodeclaims/c";
    const JSON_PATCH: &str = "application/json-patch+json";
    const MERGE_PATCH: &str = "application/merge-patch+json";

    fn claim(finalizers: &[&str]) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "finalizers": finalizers},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []},
        }))
        .expect("a nodeclaim")
    }

    fn claims() -> (Api<NodeClaim>, crate::controllers::testkit::ApiServer) {
        let (client, server) = apiserver();
        (Api::all(client), server)
    }

    /// Karpenter's lifecycle "should add the finalizer if it doesn't exist": here as a JSON patch that appends
    /// to the list it was computed from and fails if that list changed meanwhile.
    #[tokio::test]
    async fn adding_a_finalizer_appends_it_under_a_test_of_the_list_read() {
        let (api, mut server) = claims();
        let script = vec![Exchange::patch(CLAIM)
            .content_type(JSON_PATCH)
            .body(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["other"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": TERMINATION_FINALIZER},
            ]))
            .answer(
                200,
                serde_json::to_value(claim(&["other", TERMINATION_FINALIZER])).expect("json"),
            )];
        let added = server
            .serve(
                script,
                add_finalizer(&api, &claim(&["other"]), TERMINATION_FINALIZER),
            )
            .await;
        added.expect("added");
    }

    #[tokio::test]
    async fn a_finalizer_already_there_is_not_written_again() {
        let (api, mut server) = claims();
        let present = claim(&[TERMINATION_FINALIZER]);
        server
            .serve(vec![], add_finalizer(&api, &present, TERMINATION_FINALIZER))
            .await
            .expect("nothing to do");
    }

    /// The last step of a termination: the finalizer goes by its index, and a claim deleted meanwhile is done.
    #[tokio::test]
    async fn removing_the_finalizer_of_an_object_already_gone_succeeds() {
        let (api, mut server) = claims();
        let script = vec![Exchange::patch(CLAIM)
            .content_type(JSON_PATCH)
            .body(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["other", TERMINATION_FINALIZER]},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ]))
            .fail(404, "NotFound")];
        let removed = server
            .serve(
                script,
                remove_finalizer(
                    &api,
                    &claim(&["other", TERMINATION_FINALIZER]),
                    TERMINATION_FINALIZER,
                ),
            )
            .await;
        removed.expect("a claim already gone has no finalizer to remove");
    }

    /// When another writer changed the finalizers since they were read, the patch's test fails (the apiserver
    /// answers 422): that is an error, so the reconcile is retried on the fresh object instead of removing the
    /// wrong index.
    #[tokio::test]
    async fn removing_a_finalizer_from_a_changed_list_fails_for_a_retry() {
        let (api, mut server) = claims();
        let script = vec![Exchange::patch(CLAIM).fail(422, "Invalid")];
        let removed = server
            .serve(
                script,
                remove_finalizer(
                    &api,
                    &claim(&[TERMINATION_FINALIZER]),
                    TERMINATION_FINALIZER,
                ),
            )
            .await;
        let error = removed.expect_err("a failed test op is not success");
        assert!(!error.is_not_found());
        assert!(
            matches!(&error, ReconcileError::Kube(::kube::Error::Api(s)) if s.code == 422),
            "{error}"
        );
    }

    /// Karpenter treats a NotFound on delete as done ("already deleted"); anything else must come back so the
    /// controller retries with backoff.
    #[tokio::test]
    async fn deleting_an_object_already_gone_succeeds_but_a_server_error_does_not() {
        let (client, mut server) = apiserver();
        let nodes: Api<Node> = Api::all(client);
        let script = vec![
            Exchange::delete("/api/v1/nodes/n").fail(404, "NotFound"),
            Exchange::delete("/api/v1/nodes/n").fail(500, "InternalError"),
        ];
        let (gone, failed) = server
            .serve(script, async {
                (delete(&nodes, "n").await, delete(&nodes, "n").await)
            })
            .await;
        gone.expect("404 is success");
        let error = failed.expect_err("500 is an error");
        assert!(
            matches!(&error, ReconcileError::Kube(::kube::Error::Api(s)) if s.code == 500),
            "{error}"
        );
    }

    #[tokio::test]
    async fn status_patches_merge_into_the_status_subresource() {
        let (api, mut server) = claims();
        let script = vec![Exchange::patch(&format!("{CLAIM}/status"))
            .content_type(MERGE_PATCH)
            .body(json!({"status": {"providerID": "aws:///us-west-2a/i-1"}}))
            .answer(200, serde_json::to_value(claim(&[])).expect("json"))];
        server
            .serve(
                script,
                patch_status(&api, "c", json!({"providerID": "aws:///us-west-2a/i-1"})),
            )
            .await
            .expect("patched");
    }

    /// A merge patch carrying a `resourceVersion` is refused with 409 when the object moved on; the caller
    /// decides what a conflict means, so it comes back as an error, not as success.
    #[tokio::test]
    async fn a_conflicting_merge_patch_comes_back_as_a_conflict() {
        let (api, mut server) = claims();
        let patch = json!({"metadata": {"resourceVersion": "7", "labels": {"a": "b"}}});
        let script = vec![Exchange::patch(CLAIM)
            .content_type(MERGE_PATCH)
            .body(patch.clone())
            .fail(409, "Conflict")];
        let patched = server.serve(script, merge_patch(&api, "c", patch)).await;
        assert!(
            matches!(&patched, Err(ReconcileError::Kube(::kube::Error::Api(s))) if s.code == 409),
            "{patched:?}"
        );
    }

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
