//! Listing the PodDisruptionBudgets, which provisioning (for the pods of leaving nodes) and each disruption pass
//! read: no controller watches them.

use crate::kube::CALL_TIMEOUT;
use ::kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use ::kube::{Api, Client};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

/// Why the PodDisruptionBudgets could not be listed (a disruption pass then takes no snapshot).
#[derive(Debug, thiserror::Error)]
pub enum PdbListError {
    #[error("listing PodDisruptionBudgets: {0}")]
    Pdbs(#[from] ::kube::Error),
    #[error("listing PodDisruptionBudgets timed out after {0:?}")]
    PdbsTimedOut(std::time::Duration),
}

/// Every PodDisruptionBudget: `policy/v1` where served, else `policy/v1beta1` (Kubernetes before 1.21), read
/// as v1 (the fields the engine reads have the same shape).
pub async fn list_pdbs(client: &Client) -> Result<Vec<PodDisruptionBudget>, PdbListError> {
    let v1: Api<PodDisruptionBudget> = Api::all(client.clone());
    match timed(v1.list(&ListParams::default())).await? {
        Ok(list) => return Ok(list.items),
        Err(::kube::Error::Api(status)) if status.code == 404 => {}
        Err(error) => return Err(error.into()),
    }
    let gvk = GroupVersionKind::gvk("policy", "v1beta1", "PodDisruptionBudget");
    let v1beta1: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
    let list = timed(v1beta1.list(&ListParams::default())).await??;
    Ok(list
        .items
        .into_iter()
        .filter_map(|object| {
            let name = object.metadata.name.clone().unwrap_or_default();
            serde_json::to_value(object)
                .and_then(serde_json::from_value)
                .inspect_err(|error| tracing::warn!(pdb = %name, %error, "unreadable PodDisruptionBudget; ignored"))
                .ok()
        })
        .collect())
}

async fn timed<T>(call: impl std::future::Future<Output = T>) -> Result<T, PdbListError> {
    tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .map_err(|_| PdbListError::PdbsTimedOut(CALL_TIMEOUT))
}
