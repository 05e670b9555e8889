//! NodePool status: `status.resources` (the summed capacity of the pool's NodeClaims, `nodes` counted) and
//! `status.nodes`, kept current from the cluster state and written only when they change. The limits check
//! the provisioner applies at creation lives in [`usage`].

pub mod usage;

use super::{Context, Error};
use crate::api::nodepool::NodePool;
use crate::cloud::CloudProvider;
use crate::kube::CALL_TIMEOUT;
use ::kube::api::{Patch, PatchParams};
use ::kube::Api;
use serde_json::json;
use std::sync::Arc;
use usage::Usage;

/// Writes every pool's status on each change of the cluster state, until the state watch ends.
pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    let mut changed = ctx.state.changed.clone();
    loop {
        write_statuses(&ctx).await;
        if changed.changed().await.is_err() {
            return Ok(());
        }
    }
}

/// Patches the status of each pool whose usage differs from what it shows. Failures are logged; the next
/// change retries.
async fn write_statuses<C>(ctx: &Context<C>) {
    let claims = ctx.state.node_claims.state();
    let usage = usage::by_pool(claims.iter().map(|c| c.as_ref()));
    let api: Api<NodePool> = Api::all(ctx.client.clone());
    for pool in ctx.state.node_pools.state() {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let pool_usage = usage.get(&name).cloned().unwrap_or_default();
        let Some(patch) = status_patch(&pool, &pool_usage) else {
            continue;
        };
        let params = PatchParams::default();
        let patch = Patch::Merge(&patch);
        match tokio::time::timeout(CALL_TIMEOUT, api.patch_status(&name, &params, &patch)).await {
            Ok(Ok(_)) => tracing::debug!(nodepool = %name, "updated nodepool status"),
            Ok(Err(error)) => {
                tracing::warn!(nodepool = %name, %error, "could not update the nodepool status")
            }
            Err(_) => tracing::warn!(nodepool = %name, "updating the nodepool status timed out"),
        }
    }
}

/// The merge patch that brings `pool`'s status to `usage`, or `None` when it already shows it.
fn status_patch(pool: &NodePool, usage: &Usage) -> Option<serde_json::Value> {
    let resources = usage::status_resources(usage);
    let status = pool.status.as_ref();
    let current_resources = status.and_then(|s| s.resources.as_ref());
    let current_nodes = status.and_then(|s| s.nodes);
    if current_resources == Some(&resources) && current_nodes == Some(usage.nodes) {
        return None;
    }
    // A merge patch merges maps: resources the pool no longer uses are set to null to drop them.
    let mut resources_patch = serde_json::Map::new();
    for name in current_resources.into_iter().flatten().map(|(k, _)| k) {
        resources_patch.insert(name.clone(), serde_json::Value::Null);
    }
    for (name, amount) in resources {
        resources_patch.insert(name, json!(amount));
    }
    Some(json!({"status": {"resources": resources_patch, "nodes": usage.nodes}}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Resources;

    fn pool(status: serde_json::Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "general"},
            "spec": {"template": {"spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"}}}},
            "status": status
        }))
        .expect("a valid NodePool")
    }

    fn usage(cpu: &str, nodes: i64) -> Usage {
        Usage {
            resources: Resources::from_quantities([("cpu", cpu)]).expect("a quantity"),
            nodes,
        }
    }

    #[test]
    fn a_pool_without_status_gets_one() {
        let patch = status_patch(&pool(json!({})), &usage("2", 1)).expect("a patch");
        assert_eq!(
            patch,
            json!({"status": {"resources": {"cpu": "2", "nodes": "1"}, "nodes": 1}})
        );
    }

    #[test]
    fn an_unchanged_status_is_not_written() {
        let current = pool(json!({"resources": {"cpu": "2", "nodes": "1"}, "nodes": 1}));
        assert_eq!(status_patch(&current, &usage("2", 1)), None);
    }

    #[test]
    fn resources_no_longer_used_are_removed() {
        let current =
            pool(json!({"resources": {"cpu": "2", "memory": "4Gi", "nodes": "1"}, "nodes": 1}));
        let patch = status_patch(&current, &Usage::default()).expect("a patch");
        assert_eq!(
            patch,
            json!({"status": {"resources": {"cpu": null, "memory": null, "nodes": "0"}, "nodes": 0}})
        );
    }
}
