//! Provisioning: pods the kube-scheduler marked Unschedulable ([`pending`]) and the pods still running on nodes
//! being deleted ([`deleting`]), batched ([`batcher`]), solved with the existing nodes and in-flight NodeClaims
//! counted ([`plan`], over the catalogs of [`catalogs`]), turned into NodeClaims ([`claim`]). This module is
//! the loop and its writes: NodeClaims ([`create`]), Events, metrics.

pub mod advice_refresh;
pub mod batcher;
mod create;
pub mod pod_status;
#[cfg(test)]
mod tests;

use super::capacity_buffer;
use super::catalogs::{class_catalogs, Catalogs};
use super::kit::calls::PARALLEL_WRITES;
use super::metrics::Provisioning;
use super::state::owned;
use super::{nodeclaim, Context, Error};
use crate::api::nodeclaim::NodeClaim;
use crate::cloud::metered::within;
use crate::cloud::CloudProvider;
use crate::engine::buffers;
use crate::engine::provisioning::leaving::Leaving;
use crate::engine::provisioning::plan;
use crate::engine::provisioning::step::{self, BufferPlacement};
use batcher::{Batcher, RETRIGGER};
pub(crate) use create::create_claims;
use futures::{future, stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use plan::{Decisions, Preparations, Snapshot, ToSolve};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::task::JoinHandle;

/// Watches for pending pods and nodes being deleted and provisions for their pods, until the state watch ends.
pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    let mut changed = ctx.state.changed.clone();
    let mut batcher = Batcher::new(ctx.settings.batch_idle, ctx.settings.batch_max, RETRIGGER);
    let mut catalogs = ctx.catalogs.clone();
    let mut reported = Reported::default();
    let mut preparations = Preparations::default();
    warm(&ctx, &mut catalogs).await;
    loop {
        let now = ctx.clock.now();
        let state = &ctx.state;
        let (nodes, claims) = (state.nodes.state(), state.node_claims.state());
        let leaving = Leaving::of(
            nodes.iter().map(AsRef::as_ref),
            claims.iter().map(AsRef::as_ref),
        );
        let pods = state.pods.state();
        // CapacityBuffers' virtual pods wait like pending pods: they open a batch and retrigger it.
        let virtual_pods = ctx.buffer_pods.all();
        // PDBs are read when a batch is decided; here a leaving node's pods only open the window.
        let to_solve = ToSolve::of(
            pods.iter().chain(&virtual_pods).map(AsRef::as_ref),
            &leaving,
            &[],
            timestamp(now),
        );
        // A claim being deleted triggers a batch through its pods, as pending pods do.
        for pod in to_solve.all() {
            batcher.observe(uid(pod), now);
        }
        if batcher.ready(now) {
            batcher.close(now, to_solve.all().map(uid));
            tracing::debug!(pods = to_solve.all().count(), "batch window closed");
            provision(&ctx, &mut catalogs, &mut reported, &mut preparations).await;
            continue;
        }
        if batcher.deadline().is_some() {
            // Listing a class's instance types can take seconds; do it while the window is open, not after.
            warm(&ctx, &mut catalogs).await;
        }
        let now = ctx.clock.now();
        let wake = [batcher.deadline(), batcher.next_retrigger()]
            .into_iter()
            .flatten()
            .min()
            .map(|at| at.duration_since(now).unwrap_or_default())
            .unwrap_or(RETRIGGER);
        tokio::select! {
            watching = changed.changed() => {
                if watching.is_err() {
                    return Ok(());
                }
            }
            () = tokio::time::sleep(wake) => {}
        }
    }
}

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

/// The PodDisruptionBudgets, read only when a leaving node has pods (a pod they block for good is not solved
/// for). Unreadable ones block nothing: the pods are then solved for, as before PDBs were known.
async fn leaving_budgets<C: CloudProvider + 'static>(ctx: &Context<C>) -> Vec<PodDisruptionBudget> {
    match super::kit::pdbs::list_pdbs(&ctx.client).await {
        Ok(pdbs) => pdbs,
        Err(error) => {
            tracing::warn!(%error, "could not read PodDisruptionBudgets for the pods of leaving nodes");
            Vec::new()
        }
    }
}

/// `now` as the pure modules take it; a clock outside jiff's range (it is not) reads as the epoch.
fn timestamp(now: SystemTime) -> Timestamp {
    Timestamp::try_from(now).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// What was last reported per pod and pool, so that a pod waiting on a claim already made is not told the
/// same thing on every retrigger.
#[derive(Default)]
struct Reported {
    /// The task writing the last batch's pod Events: the next batch's task waits for it, so a pod's Events keep
    /// their order.
    writing: Option<JoinHandle<()>>,
    /// The last decision Event text per pod key.
    pods: HashMap<String, String>,
    /// Pool warnings already published: `(pool, message)`.
    pools: HashSet<(String, String)>,
}

/// One batch: snapshot, solve, create, report. Failures are logged; the next trigger retries.
async fn provision<C: CloudProvider + 'static>(
    ctx: &Arc<Context<C>>,
    catalogs: &mut Catalogs,
    reported: &mut Reported,
    preparations: &mut Preparations,
) {
    let state = &ctx.state;
    // Nodes and claims before pods (controller-behaviour.md §1.2): a pod bound meanwhile is then pending here, never
    // missing.
    let mut snapshot = Snapshot {
        nodes: state.nodes.state(),
        node_claims: state.node_claims.state(),
        daemon_sets: owned(state.daemon_sets.state()),
        node_pools: owned(state.node_pools.state()),
        node_classes: owned(state.node_classes.state()),
        pods: Vec::new(),
        policies: ctx.settings.policies,
        default_spread: state.default_spread(&ctx.settings.scheduler_config),
        volumes: state.volumes(),
        disruption_budgets: Vec::new(),
    };
    snapshot.pods = state.pods.state();
    snapshot.pods.extend(ctx.buffer_pods.all());
    if snapshot.leaving().has_pods(&snapshot.pods) {
        snapshot.disruption_budgets = leaving_budgets(ctx).await;
    }
    let class_catalogs =
        class_catalogs(ctx, catalogs, &snapshot.node_pools, &snapshot.node_classes).await;
    let started = Instant::now();
    let metrics = &ctx.metrics.provisioning;
    let now = timestamp(ctx.clock.now());
    let mut kept = std::mem::take(preparations);
    let solve = metrics.solve();
    let queued = solve.queue.clone();
    let solving = tokio::task::spawn_blocking(move || {
        let leaving = snapshot.leaving();
        let to_solve = ToSolve::of(
            snapshot.pods.iter().map(AsRef::as_ref),
            &leaving,
            &snapshot.disruption_budgets,
            now,
        );
        let pods: Vec<&Pod> = to_solve.all().collect();
        queued.store(pods.len(), std::sync::atomic::Ordering::Relaxed);
        let batch = Batch {
            pods: pods
                .iter()
                .filter(|p| !buffers::is_virtual(p))
                .map(|p| plan::pod_key(p))
                .collect(),
            reschedulable: to_solve
                .reschedulable
                .iter()
                .map(|p| plan::pod_key(p))
                .collect(),
        };
        let step = step::step(&snapshot, &pods, &class_catalogs, &mut kept);
        (snapshot, batch, step, kept)
    });
    let solved = metrics.track(&solve, solving).await;
    let (snapshot, batch, step) = match solved {
        Ok((snapshot, batch, Ok(step), kept)) => {
            *preparations = kept;
            (snapshot, batch, step)
        }
        Ok((_, _, Err(error), kept)) => {
            *preparations = kept;
            tracing::error!(%error, "could not build the cluster for the scheduling simulation");
            return;
        }
        Err(panic) => {
            tracing::error!(%panic, "the scheduling simulation panicked");
            return;
        }
    };
    ctx.metrics.pods.times.acked(&batch.pods, now);
    let decisions = &step.decisions;
    metrics
        .scheduling_duration
        .get_or_create(&Provisioning::provisioner())
        .observe(started.elapsed().as_secs_f64());
    metrics
        .ignored_pods
        .set(i64::try_from(decisions.ignored).unwrap_or(i64::MAX));
    let virtual_keys: HashSet<String> = snapshot
        .pods
        .iter()
        .filter(|p| buffers::is_virtual(p))
        .map(|p| plan::pod_key(p))
        .collect();
    let unschedulable = decisions
        .unschedulable
        .iter()
        .filter(|u| !u.deferred && !virtual_keys.contains(&u.pod))
        .count();
    metrics
        .unschedulable_pods
        .get_or_create(&Provisioning::provisioner())
        .set(i64::try_from(unschedulable).unwrap_or(i64::MAX));
    metrics.set_pending_by_zone(&decisions.effective_zones);
    tracing::debug!(
        pods = batch.pods.len(),
        of_deleting_nodes = batch.reschedulable.len(),
        claims = decisions.claims.len(),
        nominated = decisions.nominated.len(),
        unschedulable = decisions.unschedulable.len(),
        duration_ms = started.elapsed().as_millis() as u64,
        "scheduling simulation done"
    );
    // The nodes and in-flight claims the pods were planned onto are counted on: disruption leaves them be.
    ctx.nominations.nominate(
        step.nominated.iter().map(|(node, _)| node.as_str()),
        now,
        ctx.settings.batch_max,
    );
    if ctx.state.capacity_buffers.is_some() {
        record_buffers(ctx, &snapshot, &step.buffers);
        capacity_buffer::write_provisioning(ctx, &step.buffers.by_buffer).await;
    }
    // Each claim's launch starts as soon as its create call returns; the Events wait for the launches.
    let launches = std::sync::Mutex::new(Vec::new());
    let launch = |claim: &NodeClaim| {
        let launch = tokio::spawn(within(
            "nodeclaim.lifecycle",
            nodeclaim::launch_created(ctx.clone(), claim.clone()),
        ));
        launches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(launch);
    };
    let created = create_claims(ctx, &decisions.claims, "provisioned", &launch).await;
    let launches = launches
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    report(
        ctx, &snapshot, &batch, decisions, &created, reported, launches,
    )
    .await;
}

/// Records where the step put the buffers' virtual pods, for disruption: those on Nodes are kept room for there,
/// the others count as pending.
fn record_buffers<C>(ctx: &Context<C>, snapshot: &Snapshot, placement: &BufferPlacement) {
    let virtual_pods: HashMap<String, &Arc<Pod>> = snapshot
        .pods
        .iter()
        .filter(|p| buffers::is_virtual(p))
        .map(|p| (plan::pod_key(p), p))
        .collect();
    let pods = |keys: &mut dyn Iterator<Item = &str>| -> Vec<Arc<Pod>> {
        keys.filter_map(|key| virtual_pods.get(key).map(|p| Arc::clone(p)))
            .collect()
    };
    let on_nodes = placement
        .on_nodes
        .iter()
        .map(|(node, keys)| (node.clone(), pods(&mut keys.iter().map(String::as_str))))
        .collect();
    ctx.buffer_pods
        .placed(on_nodes, pods(&mut placement.waiting()));
}

/// The pods one batch solved for, by `namespace/name`.
struct Batch {
    pods: HashSet<String>,
    /// Those of them still running on a node being deleted.
    reschedulable: HashSet<String>,
}

/// Fills the catalog cache for the classes the NodePools reference now.
async fn warm<C: CloudProvider>(ctx: &Context<C>, catalogs: &mut Catalogs) {
    let pools = owned(ctx.state.node_pools.state());
    let classes = owned(ctx.state.node_classes.state());
    class_catalogs(ctx, catalogs, &pools, &classes).await;
}

/// Events and the decision-time metric: `Nominated` for pods on a created claim or existing capacity,
/// `FailedScheduling` for pending pods nothing fits, Warnings on NodePools. Each only when it differs from the
/// last report about the same object. A pod still running on a node being deleted is told where its capacity
/// is coming (as Karpenter does), but it gets no `FailedScheduling` — it is running, not failing to schedule —
/// so that is a log line; nor does it count in the decision-time metric, which measures pending pods.
///
/// The pod Events are written in the background once the batch's `launches` are done (at most
/// [`EVENTS_AFTER_LAUNCHES`] later): a batch has an Event for each of up to thousands of pods, and written at
/// once they would compete with the launches for the apiserver and the CPU, and so delay the instances.
async fn report<C: CloudProvider + 'static>(
    ctx: &Arc<Context<C>>,
    snapshot: &Snapshot,
    batch: &Batch,
    decisions: &Decisions,
    created: &HashSet<String>,
    reported: &mut Reported,
    launches: Vec<JoinHandle<()>>,
) {
    let pods: HashMap<String, &Arc<Pod>> = snapshot
        .pods
        .iter()
        .map(|p| (plan::pod_key(p), p))
        .collect();
    let mut pod_events: Vec<(Arc<Pod>, bool, String)> = Vec::new();
    let mut decide = |key: &str, warning: bool, note: String| {
        let Some(pod) = pods.get(key).filter(|p| !buffers::is_virtual(p)) else {
            return;
        };
        if reported.pods.get(key) == Some(&note) {
            return;
        }
        let reschedulable = batch.reschedulable.contains(key);
        if !reported.pods.contains_key(key) && !reschedulable {
            if let Some(waited) = unschedulable_for(pod, ctx.clock.now()) {
                ctx.metrics
                    .provisioning
                    .scheduling_decision
                    .observe(waited.as_secs_f64());
            }
        }
        ctx.metrics
            .pods
            .times
            .decided(key, !warning, timestamp(ctx.clock.now()));
        reported.pods.insert(key.to_owned(), note.clone());
        if warning && reschedulable {
            tracing::warn!(pod = key, reason = %note, "no capacity for a pod of a node being deleted");
            return;
        }
        pod_events.push((Arc::clone(pod), warning, note));
    };
    for new in &decisions.claims {
        let name = new.name();
        if created.contains(name) {
            for pod in &new.pods {
                decide(
                    pod,
                    false,
                    format!("Pod should schedule on: nodeclaim/{name}"),
                );
            }
        }
    }
    for (pod, target) in &decisions.nominated {
        decide(pod, false, format!("Pod should schedule on: {target}"));
    }
    // A pod waiting for reserved capacity held by this batch's claims has no decision yet: no Event, as Karpenter.
    for unschedulable in decisions.unschedulable.iter().filter(|u| !u.deferred) {
        decide(
            &unschedulable.pod,
            true,
            format!("Failed to schedule pod, {}", unschedulable.reason),
        );
    }
    let earlier = reported.writing.take();
    reported.writing = Some(tokio::spawn(write_pod_events(
        ctx.clone(),
        pod_events,
        launches,
        earlier,
    )));
    // Forget pods this batch did not solve for: one that is solved for again later is reported again.
    reported.pods.retain(|key, _| batch.pods.contains(key));
    for warning in &decisions.pool_warnings {
        let key = (warning.nodepool.clone(), warning.message.clone());
        if reported.pools.contains(&key) {
            continue;
        }
        let Some(pool) = snapshot
            .node_pools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(&warning.nodepool))
        else {
            continue;
        };
        tracing::warn!(nodepool = %warning.nodepool, reason = warning.reason, message = %warning.message, "nodepool cannot provision");
        ctx.events
            .warning(pool, warning.reason, warning.message.clone())
            .await;
        reported.pools.insert(key);
    }
    // A pool that can provision again is warned again when it next cannot.
    let current: HashSet<(String, String)> = decisions
        .pool_warnings
        .iter()
        .map(|w| (w.nodepool.clone(), w.message.clone()))
        .collect();
    reported.pools.retain(|key| current.contains(key));
}

/// The longest the pod Events of a batch wait for its launches.
const EVENTS_AFTER_LAUNCHES: Duration = Duration::from_secs(5);

/// Writes a batch's pod Events (`(pod, warning, note)`) once its `launches` are done (or after
/// [`EVENTS_AFTER_LAUNCHES`]) and the `earlier` batch's Events are written.
async fn write_pod_events<C: CloudProvider>(
    ctx: Arc<Context<C>>,
    pod_events: Vec<(Arc<Pod>, bool, String)>,
    launches: Vec<JoinHandle<()>>,
    earlier: Option<JoinHandle<()>>,
) {
    // A launch that outlasts the wait goes on; a failed one has logged its error itself.
    let _ = tokio::time::timeout(EVENTS_AFTER_LAUNCHES, future::join_all(launches)).await;
    if let Some(earlier) = earlier {
        let _ = earlier.await;
    }
    let ctx = &ctx;
    let notes = pod_events
        .iter()
        .map(|(pod, _, note)| (pod.clone(), note.clone()))
        .collect();
    let publishes: Vec<_> = pod_events
        .into_iter()
        .map(|(pod, warning, note)| async move {
            if warning {
                ctx.events
                    .warning(pod.as_ref(), "FailedScheduling", note)
                    .await;
            } else {
                ctx.events.normal(pod.as_ref(), "Nominated", note).await;
            }
        })
        .collect();
    stream::iter(publishes)
        .buffer_unordered(PARALLEL_WRITES)
        .collect::<Vec<()>>()
        .await;
    pod_status::write(&ctx.client, notes, PARALLEL_WRITES).await;
}

/// How long `pod` has been unschedulable at `now`: since its `PodScheduled` condition last changed.
fn unschedulable_for(pod: &Pod, now: SystemTime) -> Option<Duration> {
    let since = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")?
        .last_transition_time
        .as_ref()?;
    let since = SystemTime::from(since.0);
    now.duration_since(since).ok()
}
