//! Capacity reservations after launch, every minute (Karpenter's `capacityreservation.capacitytype` and
//! `capacityreservation.expiration` controllers): NodeClaims and Nodes whose reservation ended are demoted to
//! `on-demand`, and NodeClaims in an expiring capacity block are deleted so their pods drain before EC2 reclaims
//! the instances. The decisions are [`crate::engine::reservations`]'; this module reads and writes.

use super::kit::calls;
use super::{Context, Error};
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::cloud::CloudProvider;
use crate::engine::reservations::{demotion_patch, expiring, runs_on_demand};
use ::kube::Api;
use k8s_openapi::api::core::v1::Node;
use std::collections::HashMap;
use std::sync::Arc;

/// Runs both passes every `Settings::reservation_sync_interval` (Karpenter requeues both singletons after a
/// minute) until the task is dropped; a failed pass is logged and retried next time.
pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    let mut ticker = tokio::time::interval(ctx.settings.reservation_sync_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if let Err(error) = demote(&ctx).await {
            tracing::warn!(%error, "capacity-type sync failed; retrying at the next interval");
        }
        delete_expiring(&ctx).await;
    }
}

/// Demotes the claims (and their registered Nodes) whose instances EC2 now lists as on-demand.
async fn demote<C: CloudProvider>(ctx: &Context<C>) -> Result<(), Error> {
    let instances: HashMap<String, _> = ctx
        .cloud
        .list()
        .await?
        .into_iter()
        .map(|i| (i.provider_id, i.capacity_type))
        .collect();
    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let all_nodes = ctx.state.nodes.state();
    for claim in ctx.state.node_claims.state() {
        if claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let provider_id = claim.status.as_ref().and_then(|s| s.provider_id.as_deref());
        if !runs_on_demand(&instances, provider_id) {
            continue;
        }
        let name = claim.metadata.name.clone().unwrap_or_default();
        if let Some(patch) = claim.metadata.labels.as_ref().and_then(demotion_patch) {
            match calls::merge_patch(&claims, &name, patch).await {
                Ok(()) => {
                    tracing::info!(nodeclaim = %name, "demoted from reserved to on-demand: its capacity reservation ended")
                }
                Err(error) => {
                    tracing::warn!(nodeclaim = %name, %error, "could not demote a NodeClaim")
                }
            }
        }
        // Its Nodes (one, unless a user made a duplicate), once registered: before that their labels may not be
        // synced yet, and the next pass gets them.
        for node in all_nodes.iter().filter(|n| {
            n.metadata.deletion_timestamp.is_none()
                && n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == provider_id
        }) {
            let Some(node_labels) = node.metadata.labels.as_ref() else {
                continue;
            };
            if node_labels.get(labels::NODE_REGISTERED).map(String::as_str) != Some("true") {
                continue;
            }
            let Some(patch) = demotion_patch(node_labels) else {
                continue;
            };
            let node_name = node.metadata.name.clone().unwrap_or_default();
            if let Err(error) = calls::merge_patch(&nodes, &node_name, patch).await {
                tracing::warn!(node = %node_name, %error, "could not demote a Node");
            }
        }
    }
    Ok(())
}

/// Deletes the claims in capacity blocks the EC2NodeClasses list as expiring; termination drains them.
async fn delete_expiring<C: CloudProvider>(ctx: &Context<C>) {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let claims = ctx.state.node_claims.state();
    for name in expiring(&claims, &ctx.state.node_classes.state()) {
        let reservation = claims
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name.as_str()))
            .and_then(|c| {
                c.metadata
                    .labels
                    .as_ref()?
                    .get(crate::catalog::CAPACITY_RESERVATION_ID)
                    .cloned()
            });
        match calls::delete(&api, &name).await {
            Ok(()) => {
                tracing::info!(nodeclaim = %name, capacity_reservation_id = ?reservation, "initiating delete for capacity block expiration")
            }
            Err(error) => {
                tracing::warn!(nodeclaim = %name, %error, "could not delete a NodeClaim of an expiring capacity block")
            }
        }
    }
}
