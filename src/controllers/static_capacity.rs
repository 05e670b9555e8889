//! Static capacity (`static.capacity`; Karpenter's `static.provisioning` and `static.deprovisioning`): on each
//! change of the cluster state, and every minute, every NodePool with `spec.replicas` is brought to that many
//! NodeClaims by [`crate::engine::static_capacity::scale`] — claims made from its template, or the surplus
//! deleted. Without the `StaticCapacity` gate nothing is made, and each such pool gets a Warning Event saying its
//! `replicas` does nothing (Karpenter ignores it silently).

use super::kit::calls;
use super::provisioning::create_claims;
use super::{Context, Error};
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::cloud::CloudProvider;
use crate::disruption::{lifetime_remaining, DISRUPTED_TAINT};
use crate::engine::provisioning::plan::{not_ready, NewClaim};
use crate::engine::static_capacity::{
    replicas_of, scale, static_claim, Scale, StaticClaim, RECHECK,
};
use ::kube::Api;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Claims this controller made or deleted that the cluster state does not show yet are counted as the state will
/// show them, for at most this long.
const IN_FLIGHT_FOR: Duration = Duration::from_secs(60);
/// The Event on a pool whose `replicas` the gate leaves unused is published at most this often.
const GATE_OFF_EVERY: Duration = Duration::from_secs(3600);
/// Reason of that Event.
const STATIC_CAPACITY_DISABLED: &str = "StaticCapacityDisabled";

/// Claims made or deleted here and not yet seen so in the cluster state.
#[derive(Default)]
struct InFlight {
    /// Pool → claims created, when.
    created: HashMap<String, Vec<(String, Instant)>>,
    /// Claims deleted, when.
    deleted: HashMap<String, Instant>,
}

impl InFlight {
    fn forget_seen(&mut self, claims: &[Arc<NodeClaim>]) {
        let seen: HashMap<&str, bool> = claims
            .iter()
            .filter_map(|c| {
                Some((
                    c.metadata.name.as_deref()?,
                    c.metadata.deletion_timestamp.is_some(),
                ))
            })
            .collect();
        for list in self.created.values_mut() {
            list.retain(|(name, at)| {
                !seen.contains_key(name.as_str()) && at.elapsed() < IN_FLIGHT_FOR
            });
        }
        self.deleted.retain(|name, at| {
            seen.get(name.as_str()) == Some(&false) && at.elapsed() < IN_FLIGHT_FOR
        });
    }

    fn created_for(&self, pool: &str) -> Vec<String> {
        self.created
            .get(pool)
            .map(|l| l.iter().map(|(n, _)| n.clone()).collect())
            .unwrap_or_default()
    }

    /// Holds `name`'s place in `pool` until the state shows it.
    fn note_created(&mut self, pool: &str, name: &str) {
        self.created
            .entry(pool.to_owned())
            .or_default()
            .push((name.to_owned(), Instant::now()));
    }
}

/// Keeps static pools at their replicas until the state watch ends.
pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    let mut changed = ctx.state.changed.clone();
    let mut in_flight = InFlight::default();
    let mut warned: HashMap<String, Instant> = HashMap::new();
    let mut made: u64 = 0;
    loop {
        let now = Timestamp::try_from(ctx.clock.now())
            .map_err(|e| Error::Invalid(format!("the clock is out of range: {e}")))?;
        let claims = ctx.state.node_claims.state();
        in_flight.forget_seen(&claims);
        let pools: Vec<Arc<NodePool>> = ctx
            .state
            .node_pools
            .state()
            .into_iter()
            .filter(|p| p.spec.replicas.is_some() && p.metadata.deletion_timestamp.is_none())
            .collect();
        if !pools.is_empty() && !ctx.settings.feature_gates.static_capacity {
            warn_gate_off(&ctx, &pools, &mut warned).await;
        } else if !pools.is_empty() {
            let nodes = ctx.state.nodes.state();
            let pods = ctx.state.pods.state();
            for pool in &pools {
                reconcile(
                    &ctx,
                    pool,
                    &claims,
                    &nodes,
                    &pods,
                    &mut in_flight,
                    &mut made,
                    now,
                )
                .await;
            }
        }
        tokio::select! {
            state = changed.changed() => if state.is_err() { return Ok(()) },
            () = tokio::time::sleep(RECHECK) => {}
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn reconcile<C: CloudProvider>(
    ctx: &Context<C>,
    pool: &NodePool,
    claims: &[Arc<NodeClaim>],
    nodes: &[Arc<Node>],
    pods: &[Arc<Pod>],
    in_flight: &mut InFlight,
    made: &mut u64,
    now: Timestamp,
) {
    let Some((replicas, node_limit)) = replicas_of(pool) else {
        return;
    };
    let pool_name = pool.metadata.name.clone().unwrap_or_default();
    let mine: Vec<&NodeClaim> = claims
        .iter()
        .map(AsRef::as_ref)
        .filter(|c| {
            c.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::NODEPOOL))
                == Some(&pool_name)
        })
        .collect();
    let node_of = |claim: &NodeClaim| -> Option<&Node> {
        let name = claim.status.as_ref()?.node_name.as_deref()?;
        nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
            .map(AsRef::as_ref)
    };
    let bound: HashMap<&str, Vec<Pod>> = {
        let names: HashSet<&str> = mine
            .iter()
            .filter_map(|c| c.status.as_ref()?.node_name.as_deref())
            .collect();
        let mut bound: HashMap<&str, Vec<Pod>> = HashMap::new();
        for pod in pods {
            if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                if let Some(name) = names.get(node) {
                    bound.entry(name).or_default().push((**pod).clone());
                }
            }
        }
        bound
    };
    let empty: Vec<Pod> = Vec::new();
    let created = in_flight.created_for(&pool_name);
    let mut views: Vec<StaticClaim<'_>> = mine
        .iter()
        .map(|claim| {
            let name = claim.metadata.name.as_deref().unwrap_or_default();
            let node_pods = claim
                .status
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .and_then(|n| bound.get(n))
                .unwrap_or(&empty);
            let queued = node_of(claim)
                .and_then(|n| n.spec.as_ref()?.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == DISRUPTED_TAINT));
            StaticClaim {
                name,
                launched: claim
                    .status
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref())
                    .is_some_and(|id| !id.is_empty()),
                deleting: claim.metadata.deletion_timestamp.is_some()
                    || in_flight.deleted.contains_key(name),
                pending_disruption: queued,
                pods: node_pods,
                lifetime_remaining: lifetime_remaining(claim, now).unwrap_or(1.0),
            }
        })
        .collect();
    views.extend(created.iter().map(|name| StaticClaim {
        name,
        launched: false,
        deleting: false,
        pending_disruption: false,
        pods: &empty,
        lifetime_remaining: 1.0,
    }));
    let running = views
        .iter()
        .filter(|v| !v.deleting && !v.pending_disruption)
        .count();
    match scale(replicas, node_limit, &views, now) {
        Scale::Hold => {}
        Scale::AtLimit { wanted } => {
            tracing::info!(nodepool = %pool_name, wanted, "nodepool node limit reached");
        }
        Scale::Up(count) => {
            // Karpenter launches from a pool only while it is Ready.
            if not_ready(pool) {
                return;
            }
            tracing::info!(nodepool = %pool_name, current = running, desired = replicas, provision_count = count,
                "provisioning nodeclaims to satisfy replica count");
            let seed = now.as_nanosecond();
            let new: Vec<NewClaim> = (0..count)
                .filter_map(|_| {
                    *made += 1;
                    let claim = static_claim(pool, &format!("{seed}/{made}"))?;
                    Some(NewClaim::made(claim, pool_name.clone(), Vec::new(), None))
                })
                .collect();
            // Each claim that exists now holds its place until the state shows it: those made here and those
            // of that name there already (409).
            for name in create_claims(ctx, &new, "provisioned", &|_| {}).await {
                in_flight.note_created(&pool_name, &name);
            }
        }
        Scale::Down(names) => {
            tracing::info!(nodepool = %pool_name, current = running, desired = replicas, deprovision_count = names.len(),
                "deprovisioning nodeclaims to satisfy replica count");
            let api: Api<NodeClaim> = Api::all(ctx.client.clone());
            for name in names {
                match calls::delete(&api, &name).await {
                    Ok(()) => {
                        tracing::info!(nodeclaim = %name, nodepool = %pool_name, "deleting nodeclaim");
                        in_flight.deleted.insert(name, Instant::now());
                    }
                    Err(error) => {
                        tracing::warn!(nodeclaim = %name, %error, "deleting a surplus static nodeclaim failed; retrying")
                    }
                }
            }
        }
    }
}

/// A Warning Event on each static pool, at most hourly: the gate is off, so its replicas launch nothing.
async fn warn_gate_off<C>(
    ctx: &Context<C>,
    pools: &[Arc<NodePool>],
    warned: &mut HashMap<String, Instant>,
) {
    warned.retain(|_, at| at.elapsed() < GATE_OFF_EVERY);
    for pool in pools {
        let name = pool.metadata.name.clone().unwrap_or_default();
        if warned.contains_key(&name) {
            continue;
        }
        tracing::warn!(nodepool = %name, "spec.replicas is set but the StaticCapacity feature gate is off");
        ctx.events
            .warning(
                pool.as_ref(),
                STATIC_CAPACITY_DISABLED,
                "spec.replicas is set but the StaticCapacity feature gate is off: this NodePool launches no nodes"
                    .to_owned(),
            )
            .await;
        warned.insert(name, Instant::now());
    }
}

#[cfg(test)]
#[path = "static_capacity_tests.rs"]
mod tests;
