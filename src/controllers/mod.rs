//! The controllers: async loops that connect the pure decisions to the edges (the apiserver through `kube`,
//! instances through a [`CloudProvider`]). Each owns one concern:
//! - `provisioning`: unschedulable pods → batches → a scheduling solve → NodeClaims;
//! - `nodeclaim`: a NodeClaim's lifecycle: launch, registration, initialization, registration timeout; and its
//!   consistency with its Node (`ConsistentStateFound`);
//! - `termination`: a deleted NodeClaim or Node is drained (evictions honouring PDBs), then its instance is
//!   terminated and the finalizers removed;
//! - `nodeclass`: EC2NodeClass status: what its selectors resolve to, and whether it is ready;
//! - `interruption`: messages of the interruption queue (SQS) → offerings marked unavailable, claims deleted;
//!   EC2's instance status checks (polled every minute) → the same, broken instances terminated forcefully;
//! - `disruption`: every 10 s the pure disruption engine decides on a snapshot; its commands are carried out
//!   (replacements launched and initialized, then the candidates tainted and deleted);
//! - `pod_events`: a pod bound to or leaving a claim's node stamps the claim's `status.lastPodEventTime`;
//! - `node_health`: with the `NodeRepair` gate, a node unhealthy past its toleration has its NodeClaim deleted
//!   with a termination deadline of now;
//! - `static_capacity`: NodePools with `replicas` (the `StaticCapacity` gate) kept at that many claims;
//! - `zonal_shift`: with `--enable-zonal-shift`, the cluster's ARC zonal shifts every 30 s: offerings in shifted
//!   zones unavailable, Events on the NodePools that launch there;
//! - `garbage`: instances tagged for this cluster with no NodeClaim are terminated after a grace period.
//!
//! They share one [`Context`]: the client, the cloud, the settings, the cluster state (reflectors), the clock,
//! Events and metrics.

pub mod capacity_buffer;
pub mod catalogs;
pub mod disruption;
pub mod follow;
pub mod garbage;
pub mod hashes;
pub mod interruption;
pub mod kit;
pub mod metrics;
pub mod node_health;
pub mod nodeclaim;
pub mod nodeclass;
pub mod nodeoverlay;
pub mod nodepool;
pub mod pod_events;
pub mod provisioning;
pub mod reservations;
pub mod serve;
pub mod state;
pub mod static_capacity;
pub mod termination;
#[cfg(test)]
pub(crate) mod testkit;
pub mod zonal_shift;

use crate::cloud::metered::within;
use crate::cloud::{CloudError, CloudProvider};
use crate::engine::Clock;
use crate::interruption::MessageQueue;
use crate::kube::events::Events;
use ::kube::Client;
use catalogs::Catalogs;
use metrics::Metrics;
use state::ClusterState;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// What the controllers are configured with (flags of `kerf controller`, Karpenter's names).
#[derive(Clone, Debug)]
pub struct Settings {
    pub cluster_name: String,
    /// A batch of pending pods closes this long after its last pod arrived…
    pub batch_idle: Duration,
    /// …or this long after its first.
    pub batch_max: Duration,
    /// A launched NodeClaim whose Node has not registered by then is deleted (and its pods provisioned again).
    pub registration_ttl: Duration,
    /// How old an instance tagged for this cluster must be before it counts as leaked when no NodeClaim names it.
    pub leak_grace: Duration,
    /// How often instances and NodeClaims are reconciled against each other (garbage collection).
    pub gc_interval: Duration,
    /// How often NodeClaims in capacity reservations are checked against EC2: demoted to on-demand when their
    /// reservation ended, deleted when their capacity block is expiring.
    pub reservation_sync_interval: Duration,
    /// How the solves treat preferences and `minValues` (`--preference-policy`, `--min-values-policy`).
    pub policies: crate::scheduling::Policies,
    /// `--scheduler-config`: the cluster's default topology spread, which provisioning and the disruption
    /// simulations give pods that declare none.
    pub scheduler_config: crate::scheduling::SchedulerConfig,
    /// `--feature-gates`: spot-to-spot consolidation, reserved capacity, node repair.
    pub feature_gates: crate::engine::FeatureGates,
    /// `--enable-zonal-shift`: the cloud's zonal shifts are polled and acted on.
    pub zonal_shift: bool,
}

impl Settings {
    /// What the disruption engine reads of them.
    pub fn disruption(&self) -> crate::disruption::Settings {
        crate::disruption::Settings {
            policies: self.policies,
            spot_to_spot: self.feature_gates.spot_to_spot_consolidation,
            ..crate::disruption::Settings::default()
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            cluster_name: String::new(),
            batch_idle: Duration::from_secs(1),
            batch_max: crate::engine::nominations::DEFAULT_BATCH_MAX,
            registration_ttl: Duration::from_secs(15 * 60),
            leak_grace: Duration::from_secs(30),
            gc_interval: Duration::from_secs(2 * 60),
            reservation_sync_interval: Duration::from_secs(60),
            policies: crate::scheduling::Policies::default(),
            scheduler_config: crate::scheduling::SchedulerConfig::default(),
            feature_gates: crate::engine::FeatureGates::default(),
            zonal_shift: false,
        }
    }
}

/// What every controller works with.
pub struct Context<C> {
    pub client: Client,
    pub cloud: C,
    pub settings: Settings,
    pub state: ClusterState,
    pub clock: Arc<dyn Clock>,
    pub events: Events,
    pub metrics: Arc<Metrics>,
    /// Retry delays of the reconcilers after failures.
    pub backoff: kit::backoff::Backoff,
    /// The instance types of each EC2NodeClass, one cache for every controller that solves.
    pub catalogs: Catalogs,
    /// NodeClaims created by this process and not yet launched: their launch has nothing to adopt.
    pub created_here: nodeclaim::created_here::CreatedHere,
    /// Nodes a scheduling pass or a disruption command counted on to take pods: disruption leaves them be.
    pub nominations: SharedNominations,
    /// The recent registration outcomes of each NodePool: the lifecycle adds them, the NodePool status resets
    /// them (`NodeRegistrationHealthy`).
    pub registration_health: nodepool::registration_health::RegistrationHealth,
    /// The catalog the webhook advises pods from, for recomputing stale advice.
    pub advice_catalog: provisioning::advice_refresh::AdviceCatalog,
    /// The CapacityBuffers' virtual pods, and where provisioning last put them.
    pub buffer_pods: capacity_buffer::BufferPods,
}

/// Nominations shared by provisioning (which makes them) and disruption (which reads and makes them).
#[derive(Clone, Debug, Default)]
pub struct SharedNominations(Arc<std::sync::Mutex<crate::engine::Nominations>>);

impl SharedNominations {
    /// Nominates each of `nodes` (Node names, or claim names of nodes not registered yet) from `now` for the
    /// nomination window of `batch_max`.
    pub fn nominate<'a>(
        &self,
        nodes: impl IntoIterator<Item = &'a str>,
        now: k8s_openapi::jiff::Timestamp,
        batch_max: Duration,
    ) {
        let window = crate::engine::nominations::window(batch_max);
        let mut nominations = self.lock();
        nominations.prune(now);
        for node in nodes {
            nominations.nominate(node, now, window);
        }
    }

    /// `read`'s answer on the nominations as they are now.
    pub fn with<R>(&self, read: impl FnOnce(&crate::engine::Nominations) -> R) -> R {
        read(&self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, crate::engine::Nominations> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Why a controller stopped or a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] ::kube::Error),
    #[error("cloud provider: {0}")]
    Cloud(#[from] CloudError),
    #[error(transparent)]
    Call(#[from] kit::calls::ReconcileError),
    #[error("the cluster state watch stopped before it synced")]
    StateNotSynced,
    #[error("{0}")]
    Invalid(String),
}

/// Runs every controller until one of them stops with an error; the interruption controller only with a
/// queue. The reflectors of `ctx.state` must be running.
pub async fn run<C, Q>(ctx: Arc<Context<C>>, interruption_queue: Option<Q>) -> Result<(), Error>
where
    C: CloudProvider + 'static,
    Q: MessageQueue + 'static,
{
    ctx.state
        .synced()
        .await
        .map_err(|_| Error::StateNotSynced)?;
    tracing::info!("cluster state synced; starting the controllers");
    let mut controllers = JoinSet::new();
    // Each runs under Karpenter's name for its role: the `controller` label of its cloud calls.
    controllers.spawn(within("provisioner", provisioning::run(ctx.clone())));
    controllers.spawn(within("nodepool", nodepool::run(ctx.clone())));
    controllers.spawn(within("nodepool.hash", hashes::run(ctx.clone())));
    controllers.spawn(within("nodeclaim.lifecycle", nodeclaim::run(ctx.clone())));
    controllers.spawn(within("node.termination", termination::run(ctx.clone())));
    controllers.spawn(within(
        "nodeclaim.consistency",
        nodeclaim::consistency::run(ctx.clone()),
    ));
    controllers.spawn(within("nodeclass", nodeclass::run(ctx.clone())));
    controllers.spawn(within(
        "capacityreservation",
        reservations::run(ctx.clone()),
    ));
    controllers.spawn(within("disruption", disruption::run(ctx.clone())));
    controllers.spawn(within("pod.events", pod_events::run(ctx.clone())));
    controllers.spawn(within(
        "pod.advice",
        provisioning::advice_refresh::run(ctx.clone()),
    ));
    controllers.spawn(within(
        "interruption.instancestatus",
        interruption::run_instance_status(ctx.clone()),
    ));
    if let Some(queue) = interruption_queue {
        controllers.spawn(within(
            "interruption",
            interruption::run(ctx.clone(), queue),
        ));
    }
    if ctx.settings.feature_gates.node_repair {
        controllers.spawn(within("node.health", node_health::run(ctx.clone())));
    }
    if ctx.settings.zonal_shift {
        controllers.spawn(within("zonalshift", zonal_shift::run(ctx.clone())));
    }
    controllers.spawn(within("static.capacity", static_capacity::run(ctx.clone())));
    controllers.spawn(within("nodeoverlay", nodeoverlay::run(ctx.clone())));
    controllers.spawn(within("capacitybuffer", capacity_buffer::run(ctx.clone())));
    controllers.spawn(within("metrics", metrics::observer::run(ctx.clone())));
    controllers.spawn(within("nodeclaim.garbagecollection", garbage::run(ctx)));
    while let Some(stopped) = controllers.join_next().await {
        match stopped {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(error),
            Err(panic) => return Err(Error::Invalid(format!("a controller panicked: {panic}"))),
        }
    }
    Ok(())
}
