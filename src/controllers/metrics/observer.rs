//! The loop that recomputes the cluster gauges from the reflector stores every [`PERIOD`], as Karpenter
//! recomputes its node gauges every 5 s (pkg/controllers/metrics/node). A series of an object that is gone
//! disappears at the next pass. A fixed period rather than every change: in a busy cluster the stores change
//! all the time, and a pass reads every pod.

use super::conditions::{Cond, ConditionTracker, DeprecatedSamples, Kind, Object};
use super::cost::fleet_cost;
use super::nodes::node_samples;
use super::pods::{key, pod_step, PodMemory};
use super::Metrics;
use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::catalog::Catalog;
use crate::cloud::CloudProvider;
use crate::controllers::{Context, Error};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// The time between two passes.
pub const PERIOD: Duration = Duration::from_secs(5);

/// What passes remember.
#[derive(Default)]
struct Memory {
    pods: PodMemory,
    conditions: HashMap<Kind, ConditionTracker>,
}

/// One snapshot of the stores.
struct Snapshot {
    nodes: Vec<Arc<Node>>,
    claims: Vec<Arc<NodeClaim>>,
    pods: Vec<Arc<Pod>>,
    pools: Vec<Arc<NodePool>>,
    classes: Vec<Arc<EC2NodeClass>>,
    catalogs: HashMap<String, Arc<Catalog>>,
}

/// Runs passes until the task is dropped. The cluster state has synced when this starts (the controllers
/// start after it), so the cluster-state gauges say so.
pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    ctx.metrics.nodes.synced.set(1);
    ctx.metrics.nodes.unsynced_seconds.set(0.0);
    let mut memory = Memory::default();
    let mut ticks = tokio::time::interval(PERIOD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let now = Timestamp::try_from(ctx.clock.now())
            .map_err(|e| Error::Invalid(format!("the clock is out of range: {e}")))?;
        let snapshot = Snapshot {
            nodes: ctx.state.nodes.state(),
            claims: ctx.state.node_claims.state(),
            pods: ctx.state.pods.state(),
            pools: ctx.state.node_pools.state(),
            classes: ctx.state.node_classes.state(),
            catalogs: ctx.catalogs.all().await.into_iter().collect(),
        };
        let metrics = ctx.metrics.clone();
        memory = tokio::task::spawn_blocking(move || {
            pass(&metrics, &mut memory, &snapshot, now);
            memory
        })
        .await
        .map_err(|panic| Error::Invalid(format!("a metrics pass panicked: {panic}")))?;
    }
}

/// One pass: every recomputed family from `snapshot` at `now`.
fn pass(metrics: &Metrics, memory: &mut Memory, snapshot: &Snapshot, now: Timestamp) {
    metrics.nodes.publish(node_samples(
        &snapshot.nodes,
        &snapshot.claims,
        &snapshot.pods,
        now,
    ));

    let by_name: HashMap<&str, &Node> = snapshot
        .nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n.as_ref())))
        .collect();
    let alive: HashSet<String> = snapshot.pods.iter().map(|p| key(p)).collect();
    metrics.pods.times.retain(&alive);
    let marks = metrics.pods.times.snapshot();
    metrics.pods.publish(pod_step(
        &mut memory.pods,
        &snapshot.pods,
        &by_name,
        &marks,
        now,
    ));

    metrics.pools.publish(&snapshot.pools);
    let catalogs: Vec<Arc<Catalog>> = snapshot.catalogs.values().cloned().collect();
    metrics.offerings.publish(&catalogs);
    metrics.cost.publish(fleet_cost(
        &snapshot.pools,
        &snapshot.claims,
        &snapshot.catalogs,
    ));

    let mut deprecated = DeprecatedSamples::default();
    for kind in Kind::ALL {
        let objects = objects(kind, snapshot);
        let step = memory
            .conditions
            .entry(kind)
            .or_default()
            .step(kind, &objects, now);
        metrics.conditions.publish(kind, step, &mut deprecated);
    }
    metrics.conditions.publish_deprecated(deprecated);
}

/// The objects of `kind` as the condition metrics read them.
fn objects(kind: Kind, snapshot: &Snapshot) -> Vec<Object<'_>> {
    fn object<'a>(
        meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        conditions: Vec<Cond>,
    ) -> Object<'a> {
        Object {
            name: meta.name.as_deref().unwrap_or_default(),
            labels: meta.labels.as_ref(),
            deletion: meta.deletion_timestamp.as_ref().map(|t| t.0),
            conditions,
        }
    }
    let of = |conditions: Option<&Vec<crate::api::condition::Condition>>| {
        conditions.into_iter().flatten().map(Cond::of).collect()
    };
    match kind {
        Kind::NodeClaim => snapshot
            .claims
            .iter()
            .map(|c| {
                object(
                    &c.metadata,
                    of(c.status.as_ref().and_then(|s| s.conditions.as_ref())),
                )
            })
            .collect(),
        Kind::NodePool => snapshot
            .pools
            .iter()
            .map(|p| {
                object(
                    &p.metadata,
                    of(p.status.as_ref().and_then(|s| s.conditions.as_ref())),
                )
            })
            .collect(),
        Kind::EC2NodeClass => snapshot
            .classes
            .iter()
            .map(|c| {
                object(
                    &c.metadata,
                    of(c.status.as_ref().and_then(|s| s.conditions.as_ref())),
                )
            })
            .collect(),
        Kind::Node => snapshot
            .nodes
            .iter()
            .map(|n| {
                let conditions = n
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .into_iter()
                    .flatten()
                    .map(Cond::of_node)
                    .collect();
                object(&n.metadata, conditions)
            })
            .collect(),
    }
}
