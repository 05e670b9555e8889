//! The provisioner's writes of the NodeClaims a decision made (also used for static pools and disruption
//! replacements): all at once, each counted and logged as its create returns, and its launch started then.

use super::super::metrics::CreatedLabels;
use super::super::Context;
use crate::api::nodeclaim::NodeClaim;
use crate::engine::provisioning::plan::NewClaim;
use crate::kube::CALL_TIMEOUT;
use ::kube::api::PostParams;
use ::kube::runtime::reflector::ObjectRef;
use ::kube::Api;
use futures::future;
use std::collections::HashSet;

/// Creates the claims in parallel, counted as created for `reason` (`provisioned`, or the disruption reason of
/// a replacement), handing each claim this call created to `created_now` at once; the names of those that
/// exist now (created, or created before a restart).
pub(crate) async fn create_claims<C>(
    ctx: &Context<C>,
    claims: &[NewClaim],
    reason: &str,
    created_now: &(dyn Fn(&NodeClaim) + Sync),
) -> HashSet<String> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let writes: Vec<_> = claims
        .iter()
        .map(|new| {
            let api = api.clone();
            async move {
                let params = PostParams::default();
                let name = new.name();
                let node_claim = new.node_claim();
                ctx.created_here.creating(name);
                let create = api.create(&params, &node_claim);
                let outcome = tokio::time::timeout(CALL_TIMEOUT, create).await;
                match &outcome {
                    Ok(Ok(created)) => {
                        let uid = created.metadata.uid.as_deref().unwrap_or_default();
                        ctx.created_here.created(name, uid);
                        created_now(created);
                    }
                    // An existing claim of that name, or an unknown outcome: its launch must look first.
                    _ => ctx.created_here.forget(name),
                }
                // Ok(true): created by this call; Ok(false): it was there already.
                let result = match outcome {
                    Ok(Ok(_)) => Ok(true),
                    // Same pods, same name: a claim made before a restart, already counted in flight —
                    // unless it is on its way out (its pods are planned again, under a new name or once it
                    // is gone).
                    Ok(Err(::kube::Error::Api(status))) if status.code == 409 => {
                        if being_deleted(ctx, name) {
                            Err(String::from("a NodeClaim of that name is being deleted"))
                        } else {
                            Ok(false)
                        }
                    }
                    Ok(Err(error)) => Err(error.to_string()),
                    Err(_) => Err(format!("timed out after {CALL_TIMEOUT:?}")),
                };
                // Logged and counted as it returns, so that the log says when each claim was made.
                record(ctx, new, &node_claim, reason, result)
            }
        })
        .collect();
    // All at once, as Karpenter does: the client multiplexes them over its one HTTP/2 connection
    // (`kube::client`), under the `--kube-client-qps` / `--kube-client-burst` bound. Each claim's launch starts as
    // its create returns.
    future::join_all(writes)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// Counts and logs the outcome of `new`'s create (`Ok(true)`: created by this call; `Ok(false)`: it was there
/// already); the claim's name when it exists now.
fn record<C>(
    ctx: &Context<C>,
    new: &NewClaim,
    node_claim: &NodeClaim,
    reason: &str,
    result: Result<bool, String>,
) -> Option<String> {
    let name = new.name().to_owned();
    match result {
        // Made before (the same pods planned the same claim before a restart): counted and logged then.
        Ok(false) => {
            tracing::debug!(nodeclaim = %name, nodepool = %new.nodepool, "the nodeclaim exists already");
            Some(name)
        }
        Ok(true) => {
            ctx.metrics
                .provisioning
                .nodeclaims_created
                .get_or_create(&CreatedLabels {
                    reason: reason.to_owned(),
                    nodepool: new.nodepool.clone(),
                    min_values_relaxed: String::from("false"),
                })
                .inc();
            let requests = node_claim
                .spec
                .resources
                .as_ref()
                .and_then(|r| serde_json::to_string(&r.requests).ok())
                .unwrap_or_default();
            tracing::info!(
                nodeclaim = %name,
                nodepool = %new.nodepool,
                pods = new.pods.len(),
                requests = %requests,
                instance_types = instance_type_count(node_claim),
                cheapest = new.choice.as_ref().map_or("", |c| c.instance_type.as_str()),
                "created nodeclaim"
            );
            Some(name)
        }
        Err(error) => {
            tracing::error!(nodeclaim = %name, nodepool = %new.nodepool, %error, "could not create the nodeclaim");
            None
        }
    }
}

/// Whether the claim named like `claim` is being deleted, as far as the watch cache knows.
fn being_deleted<C>(ctx: &Context<C>, name: &str) -> bool {
    ctx.state
        .node_claims
        .get(&ObjectRef::new(name))
        .is_some_and(|c| c.metadata.deletion_timestamp.is_some())
}

fn instance_type_count(claim: &NodeClaim) -> usize {
    claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == crate::api::labels::INSTANCE_TYPE)
        .and_then(|r| r.values.as_ref())
        .map_or(0, Vec::len)
}
