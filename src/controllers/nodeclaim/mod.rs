//! A NodeClaim's lifecycle (controller-behaviour.md §2.4): launch its instance (adopting one an earlier attempt
//! launched), register its Node (labels, taints, finalizer, owner; `karpenter.sh/unregistered` lifted), initialize it
//! (Ready, startup taints gone, extended resources up), and give up on it when it does not launch or register
//! in time. A kube-runtime `Controller` over NodeClaims, woken too by the Nodes of claims not yet initialized.
//! Deleting claims is the termination controller's.

pub mod consistency;
pub mod created_here;
pub mod launch;
pub mod liveness;
pub mod registration;

use super::catalogs::overlaid_class_catalogs;
use super::kit::backoff::{key_of, LIFECYCLE};
use super::kit::calls::{self, ReconcileError, TERMINATION_FINALIZER};
use super::kit::taints::taints_patch;
use super::metrics::{DisruptedLabels, LaunchFailureLabels, NodePoolLabels, NodePoolZoneLabels};
use super::nodepool::registration_health::{self, Outcome};
use super::state::owned;
use super::{Context, Error};
use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::catalog::Catalog;
use crate::cloud::metered::carried;
use crate::cloud::{CloudError, CloudProvider};
use crate::engine::conditions::{self, INITIALIZED, LAUNCHED, REGISTERED};
use crate::engine::overlay;
use ::kube::api::Api;
use ::kube::runtime::controller::{Action, Controller};
use ::kube::runtime::reflector::{ObjectRef, Store};
use created_here::FirstLaunch;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use launch::{Adoption, Launched};
use liveness::Liveness;
use serde_json::json;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

/// How often an initialized claim's instance is checked for (a claim whose instance is gone is deleted).
const STEADY_RECHECK: Duration = Duration::from_secs(5 * 60);
/// While waiting on the EC2NodeClass, or on a Node between watch events.
const WAIT_RECHECK: Duration = Duration::from_secs(10);

pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    let follow = &ctx.state.follow;
    let store = ctx.state.node_claims.clone();
    Controller::for_shared_stream(follow.node_claims.objects(), store.clone())
        .watches_shared_stream(follow.nodes.objects(), move |node| {
            claim_of_uninitialized_node(&store, &node)
        })
        .run(
            |claim, ctx| {
                carried(async move {
                    let key = key_of(LIFECYCLE, claim.as_ref());
                    ctx.backoff.track(&key, reconcile(claim, ctx.clone())).await
                })
            },
            error_policy,
            ctx,
        )
        .for_each(|_| async {})
        .await;
    Ok(())
}

/// Launches a claim the provisioner has just created, as the object its create call returned, without waiting
/// for the watch to deliver it: this is the pending pods' path to CreateFleet. The controller's own reconcile of
/// the claim waits meanwhile ([`FirstLaunch::Wait`]) and retries a launch that failed here.
pub async fn launch_created<C: CloudProvider>(ctx: Arc<Context<C>>, claim: NodeClaim) {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let launched = match now(&ctx) {
        Ok(now) => launch_step(&ctx, &api, &claim, now).await.map(|_| ()),
        Err(error) => Err(error),
    };
    if let Err(error) = launched {
        tracing::warn!(nodeclaim = ?claim.metadata.name, %error, "launch failed; the lifecycle controller retries it");
    }
}

/// The claim a Node that is still coming up belongs to (by provider ID). Initialized Nodes wake nothing:
/// their status heartbeats would otherwise reconcile every claim every few seconds.
fn claim_of_uninitialized_node(
    store: &Store<NodeClaim>,
    node: &Node,
) -> Option<ObjectRef<NodeClaim>> {
    let initialized = node
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(labels::NODE_INITIALIZED));
    if initialized {
        return None;
    }
    let provider_id = node.spec.as_ref()?.provider_id.as_deref()?;
    store
        .state()
        .iter()
        .find(|c| c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
        .map(|c| ObjectRef::from_obj(c.as_ref()))
}

fn error_policy<C>(claim: Arc<NodeClaim>, error: &ReconcileError, ctx: Arc<Context<C>>) -> Action {
    let retry_in = ctx.backoff.failed(&key_of(LIFECYCLE, claim.as_ref()));
    tracing::warn!(nodeclaim = ?claim.metadata.name, %error, ?retry_in, "nodeclaim lifecycle failed; retrying");
    Action::requeue(retry_in)
}

/// One step of the lifecycle: the first one the claim has not passed.
#[tracing::instrument(skip_all, fields(nodeclaim = claim.metadata.name.as_deref()))]
async fn reconcile<C: CloudProvider>(
    claim: Arc<NodeClaim>,
    ctx: Arc<Context<C>>,
) -> Result<Action, ReconcileError> {
    if claim.metadata.deletion_timestamp.is_some() {
        if let Some(name) = claim.metadata.name.as_deref() {
            ctx.created_here.forget(name);
        }
        return Ok(Action::await_change());
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    // Before anything can launch: a crash after the launch must not leave an instance without it.
    calls::add_finalizer(&api, claim.as_ref(), TERMINATION_FINALIZER).await?;
    hydrate_class_label(&ctx, &api, &claim).await?;
    let now = now(ctx.as_ref())?;
    let recheck = match liveness::liveness(&claim, now, ctx.settings.registration_ttl) {
        Liveness::Expired { reason } => {
            tracing::info!(reason, "deleting nodeclaim: it did not come up in time");
            count_disrupted(&ctx, &claim, reason);
            calls::delete(&api, &calls::name(claim.as_ref())?).await?;
            registration_health::record(&ctx, &claim, Outcome::TimedOut).await;
            return Ok(Action::await_change());
        }
        Liveness::Alive { recheck_in } => recheck_in.map_or(WAIT_RECHECK, |d| d.min(WAIT_RECHECK)),
    };
    if !conditions::is_true(&claim, LAUNCHED) {
        return launch_step(&ctx, &api, &claim, now).await;
    }
    if !conditions::is_true(&claim, REGISTERED) {
        return registration_step(&ctx, &api, &claim, now, recheck).await;
    }
    if !conditions::is_true(&claim, INITIALIZED) {
        return initialization_step(&ctx, &api, &claim, now).await;
    }
    steady_step(&ctx, &api, &claim).await
}

fn now<C>(ctx: &Context<C>) -> Result<Timestamp, ReconcileError> {
    Timestamp::try_from(ctx.clock.now())
        .map_err(|e| ReconcileError::Invalid(format!("the clock is out of range: {e}")))
}

fn node_pool(claim: &NodeClaim) -> String {
    node_pool_label(claim).unwrap_or_default().to_owned()
}

fn count_disrupted<C>(ctx: &Context<C>, claim: &NodeClaim, reason: &str) {
    let capacity_type = claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::CAPACITY_TYPE))
        .cloned()
        .unwrap_or_default();
    ctx.metrics
        .lifecycle
        .disrupted
        .get_or_create(&DisruptedLabels {
            reason: reason.to_owned(),
            nodepool: node_pool(claim),
            capacity_type,
        })
        .inc();
}

/// Writes `type_` into the claim's conditions (and `Ready`), with more status fields, when that changes
/// anything.
async fn set_condition(
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
    (type_, status, reason, message): (&str, &str, &str, &str),
    mut fields: serde_json::Value,
    now: Timestamp,
) -> Result<(), ReconcileError> {
    let current = claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut updated = current.clone();
    conditions::set(&mut updated, type_, status, reason, message, now);
    let no_fields = fields.as_object().is_none_or(|f| f.is_empty());
    if updated == current && no_fields {
        return Ok(());
    }
    fields["conditions"] = json!(updated);
    calls::patch_status(api, &calls::name(claim)?, fields).await
}

/// Launches `claim` with `class` as the shared catalog cache knows it (its resolution and instance types, the
/// ones the provisioner solved with), so a launch costs no selector or instance-type calls; when the cache has
/// no resolution (the class failed to resolve lately), the class is resolved here, which also gives the reason
/// it is not ready.
async fn launch_with_class<C: CloudProvider>(
    ctx: &Context<C>,
    claim: &NodeClaim,
    class: &EC2NodeClass,
    adoption: Adoption,
) -> Result<Launched, CloudError> {
    let now = ctx.clock.now();
    let catalog = ctx.catalogs.get(&ctx.cloud, class, now).await;
    let cached = ctx.catalogs.resolved(class, now).await;
    let (node_class, types) = match (cached, catalog) {
        (Some(node_class), Some(catalog)) => ((*node_class).clone(), catalog),
        _ => {
            let name = &claim.spec.node_class_ref.name;
            let node_class = ctx.cloud.resolve_node_class(name, &class.spec).await?;
            let types = ctx.cloud.instance_types(&node_class, now).await?;
            (
                node_class,
                Arc::new(Catalog {
                    instance_types: types,
                }),
            )
        }
    };
    // A claim of a pool NodeOverlays price is launched at the prices the solve chose it with (Karpenter's AWS
    // provider applies the overlays in `Create` too): the overrides' priorities are the overlaid prices.
    let overlaid = match (node_pool_label(claim), ctx.state.node_overlays.is_some()) {
        (Some(pool), true) => {
            let pools = owned(ctx.state.node_pools.state());
            let classes = owned(ctx.state.node_classes.state());
            let mut catalogs = ctx.catalogs.clone();
            let (_, evaluation) =
                overlaid_class_catalogs(ctx, &mut catalogs, &pools, &classes).await;
            evaluation.and_then(|e| overlay::for_pool(&types.instance_types, pool, &e))
        }
        _ => None,
    };
    let types = overlaid.as_deref().unwrap_or(&types.instance_types);
    launch::launch(&ctx.cloud, claim, node_class, types, adoption, now).await
}

/// The claim's `karpenter.sh/nodepool` label.
fn node_pool_label(claim: &NodeClaim) -> Option<&str> {
    claim
        .metadata
        .labels
        .as_ref()?
        .get(labels::NODEPOOL)
        .map(String::as_str)
}

async fn launch_step<C: CloudProvider>(
    ctx: &Context<C>,
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
    now: Timestamp,
) -> Result<Action, ReconcileError> {
    let name = calls::name(claim)?;
    let uid = claim.metadata.uid.as_deref().unwrap_or_default();
    let first_launch = ctx.created_here.first_launch(&name, uid);
    tracing::debug!(?first_launch, "launch step");
    // Held until the launch is recorded (or has failed): until then this process launches it nowhere else.
    let (adoption, _launching) = match first_launch {
        FirstLaunch::Yes(launching) => (Adoption::Skip, Some(launching)),
        FirstLaunch::Wait(recheck) => return Ok(Action::requeue(recheck)),
        FirstLaunch::No => {
            // The store can lag our own last write: a reconcile woken by the launch's label patch may still
            // see the claim unlaunched. Ask the apiserver before launching, so one claim never gets two
            // instances.
            let fresh = calls::timed("reading the nodeclaim", api.get_opt(&name)).await?;
            if fresh.is_none_or(|c| c.status.and_then(|s| s.provider_id).is_some()) {
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
            (Adoption::Look, None)
        }
    };
    let class_name = &claim.spec.node_class_ref.name;
    let class = ctx
        .state
        .node_classes
        .get(&ObjectRef::new(class_name))
        .filter(|c| c.metadata.deletion_timestamp.is_none());
    let launched = match class {
        None => Err(CloudError::NodeClassNotReady {
            name: class_name.clone(),
            reason: "it does not exist or is being deleted".into(),
        }),
        Some(class) => launch_with_class(ctx, claim, &class, adoption).await,
    };
    let failure = |reason: &str| {
        ctx.metrics
            .lifecycle
            .launch_failures
            .get_or_create(&LaunchFailureLabels {
                nodepool: node_pool(claim),
                reason: reason.to_owned(),
            })
            .inc();
    };
    match launched {
        Ok(launched) => {
            record_launch(ctx, api, claim, &launched, now).await?;
            Ok(Action::requeue(WAIT_RECHECK))
        }
        Err(e @ CloudError::NodeClassNotReady { .. }) => {
            failure(e.metric_label());
            let message = e.to_string();
            // Once per change of reason, not on every retry.
            let known = conditions::condition(claim, LAUNCHED)
                .is_some_and(|c| c.reason == "NodeClassNotReady" && c.message == message);
            if !known {
                ctx.events
                    .warning(claim, "NodeClassNotReady", message.clone())
                    .await;
            }
            let condition = (LAUNCHED, "False", "NodeClassNotReady", message.as_str());
            set_condition(api, claim, condition, json!({}), now).await?;
            Ok(Action::requeue(WAIT_RECHECK))
        }
        Err(e @ CloudError::InsufficientCapacity { .. }) => {
            failure(e.metric_label());
            tracing::info!(error = %e, "deleting nodeclaim: no capacity for it");
            ctx.events
                .warning(
                    claim,
                    "InsufficientCapacityError",
                    format!("NodeClaim {}: {e}", calls::name(claim)?),
                )
                .await;
            count_disrupted(ctx, claim, "insufficient_capacity");
            calls::delete(api, &calls::name(claim)?).await?;
            Ok(Action::await_change())
        }
        Err(e) => {
            failure(e.metric_label());
            let message = e.to_string();
            let condition = (LAUNCHED, "Unknown", "LaunchFailed", message.as_str());
            set_condition(api, claim, condition, json!({}), now).await?;
            Err(e.into())
        }
    }
}

/// The claim's labels, then its status: provider ID, image, resources, `Launched=True`.
async fn record_launch<C>(
    ctx: &Context<C>,
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
    launched: &Launched,
    now: Timestamp,
) -> Result<(), ReconcileError> {
    let name = calls::name(claim)?;
    let labels = launch::launched_labels(launched);
    let annotations = launch::launched_annotations(launched);
    let metadata = json!({"metadata": {"labels": labels, "annotations": annotations}});
    calls::merge_patch(api, &name, metadata).await?;
    let condition = (LAUNCHED, "True", LAUNCHED, "");
    set_condition(
        api,
        claim,
        condition,
        launch::launched_status(launched),
        now,
    )
    .await?;
    let instance = &launched.instance;
    tracing::info!(
        provider_id = %instance.provider_id,
        instance_type = %instance.instance_type,
        zone = %instance.zone,
        capacity_type = instance.capacity_type.as_str(),
        adopted = launched.adopted,
        "launched nodeclaim"
    );
    ctx.metrics
        .lifecycle
        .launched
        .get_or_create(&NodePoolLabels {
            nodepool: node_pool(claim),
        })
        .inc();
    Ok(())
}

/// `claim` with its placement-group partition label filled in from EC2 when launch left it pending (EC2 chose
/// the partition), written to the claim; `None` while EC2 does not say it yet. Every other claim is passed
/// through as it is.
async fn with_partition<'c, C: CloudProvider>(
    ctx: &Context<C>,
    api: &Api<NodeClaim>,
    claim: &'c NodeClaim,
    provider_id: &str,
) -> Result<Option<Cow<'c, NodeClaim>>, ReconcileError> {
    let pending = claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(crate::catalog::PLACEMENT_GROUP_PARTITION))
        .is_some_and(|p| p == crate::engine::launch::PARTITION_PENDING);
    if !pending {
        return Ok(Some(Cow::Borrowed(claim)));
    }
    let instance = ctx.cloud.get(provider_id).await?;
    let Some(partition) = instance.placement.and_then(|p| p.partition) else {
        tracing::debug!(
            provider_id,
            "waiting for EC2 to report the instance's partition"
        );
        return Ok(None);
    };
    let partition = partition.to_string();
    let key = crate::catalog::PLACEMENT_GROUP_PARTITION;
    let patch = json!({"metadata": {"labels": {key: partition}}});
    calls::merge_patch(api, &calls::name(claim)?, patch).await?;
    let mut claim = claim.clone();
    claim
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(key.to_owned(), partition);
    Ok(Some(Cow::Owned(claim)))
}

async fn registration_step<C: CloudProvider>(
    ctx: &Context<C>,
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
    now: Timestamp,
    recheck: Duration,
) -> Result<Action, ReconcileError> {
    let Some(provider_id) = claim.status.as_ref().and_then(|s| s.provider_id.as_deref()) else {
        return Err(ReconcileError::Invalid(
            "launched, but the status has no providerID".into(),
        ));
    };
    let Some(node) = registration::node_with_provider_id(&ctx.state.nodes.state(), provider_id)
    else {
        return Ok(Action::requeue(recheck));
    };
    let node_name = calls::name(node.as_ref())?;
    if registration::unregistered_taint_missing(&node) {
        ctx.events
            .warning(
                claim,
                "UnregisteredTaintMissing",
                format!("Node {node_name} registered without the taint karpenter.sh/unregistered"),
            )
            .await;
    }
    // Karpenter's placement-group registration hook: the Node is not freed of its unregistered taint before its
    // partition label is known, so a spread over partitions never counts it in the wrong one.
    let Some(claim) = with_partition(ctx, api, claim, provider_id).await? else {
        return Ok(Action::requeue(recheck));
    };
    let claim = claim.as_ref();
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let patch = registration::registration_patch(&node, claim);
    match calls::merge_patch(&nodes, &node_name, patch).await {
        // The cached Node was behind: try again on the fresh one.
        Err(ReconcileError::Kube(::kube::Error::Api(s))) if s.code == 409 => {
            return Ok(Action::requeue(Duration::from_secs(1)))
        }
        other => other?,
    }
    let condition = (REGISTERED, "True", REGISTERED, "");
    set_condition(api, claim, condition, json!({"nodeName": node_name}), now).await?;
    tracing::info!(node = %node_name, provider_id, "registered nodeclaim");
    registration_health::record(ctx, claim, Outcome::Registered).await;
    let pool = node_pool(claim);
    let zone = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::ZONE))
        .cloned()
        .unwrap_or_default();
    let lifecycle = &ctx.metrics.lifecycle;
    lifecycle
        .registered
        .get_or_create(&NodePoolLabels {
            nodepool: pool.clone(),
        })
        .inc();
    lifecycle
        .nodes_created
        .get_or_create(&NodePoolZoneLabels {
            nodepool: pool,
            zone,
        })
        .inc();
    Ok(Action::requeue(WAIT_RECHECK))
}

/// Claims (and their Nodes) made before kerf labelled them with their class get the label, as Karpenter's
/// hydration controllers do on upgrade; a label patch only when one is missing.
async fn hydrate_class_label<C>(
    ctx: &Context<C>,
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
) -> Result<(), ReconcileError> {
    let Some((key, class)) = crate::engine::launch::missing_class_label(claim) else {
        return Ok(());
    };
    let patch = json!({"metadata": {"labels": {key.as_str(): class.as_str()}}});
    calls::merge_patch(api, &calls::name(claim)?, patch.clone()).await?;
    if let Some(node) = claim_node(ctx, claim) {
        if node.metadata.labels.as_ref().and_then(|l| l.get(&key)) != Some(&class) {
            let nodes: Api<Node> = Api::all(ctx.client.clone());
            calls::merge_patch(&nodes, &calls::name(node.as_ref())?, patch).await?;
        }
    }
    Ok(())
}

/// The claim's Node: by `status.nodeName`, else by provider ID.
fn claim_node<C>(ctx: &Context<C>, claim: &NodeClaim) -> Option<Arc<Node>> {
    let status = claim.status.as_ref()?;
    if let Some(node) = status
        .node_name
        .as_deref()
        .and_then(|n| ctx.state.nodes.get(&ObjectRef::new(n)))
    {
        return Some(node);
    }
    registration::node_with_provider_id(&ctx.state.nodes.state(), status.provider_id.as_deref()?)
}

async fn initialization_step<C>(
    ctx: &Context<C>,
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
    now: Timestamp,
) -> Result<Action, ReconcileError> {
    let Some(node) = claim_node(ctx, claim) else {
        return Ok(Action::requeue(WAIT_RECHECK));
    };
    let node_name = calls::name(node.as_ref())?;
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    if let Some(kept) = registration::taints_without_unregistered(&node) {
        let patch = taints_patch(&node, kept);
        match calls::json_patch(&nodes, "lifting the unregistered taint", &node_name, patch).await {
            // The cached Node's taints were behind (its test failed): look again on the next copy.
            Err(ReconcileError::Kube(::kube::Error::Api(s))) if [409, 422].contains(&s.code) => {}
            other => {
                other?;
                tracing::info!(node = %node_name, "lifted the karpenter.sh/unregistered taint again");
            }
        }
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    if let Some(blocker) = registration::initialization_blocker(&node, claim) {
        let condition = (INITIALIZED, "Unknown", "NotInitialized", blocker.as_str());
        set_condition(api, claim, condition, json!({}), now).await?;
        return Ok(Action::requeue(WAIT_RECHECK));
    }
    let label = json!({"metadata": {"labels": {labels::NODE_INITIALIZED: "true"}}});
    calls::merge_patch(&nodes, &node_name, label).await?;
    let condition = (INITIALIZED, "True", INITIALIZED, "");
    set_condition(api, claim, condition, json!({}), now).await?;
    tracing::info!(node = %node_name, "initialized nodeclaim");
    ctx.metrics
        .lifecycle
        .initialized
        .get_or_create(&NodePoolLabels {
            nodepool: node_pool(claim),
        })
        .inc();
    Ok(Action::requeue(STEADY_RECHECK))
}

/// An initialized claim whose instance is gone is deleted (its Node and pods go with it).
async fn steady_step<C: CloudProvider>(
    ctx: &Context<C>,
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
) -> Result<Action, ReconcileError> {
    let Some(provider_id) = claim.status.as_ref().and_then(|s| s.provider_id.as_deref()) else {
        return Ok(Action::requeue(STEADY_RECHECK));
    };
    match ctx.cloud.get(provider_id).await {
        Err(CloudError::NotFound { .. }) => {
            tracing::info!(provider_id, "deleting nodeclaim: its instance is gone");
            count_disrupted(ctx, claim, "instance_terminated");
            calls::delete(api, &calls::name(claim)?).await?;
            Ok(Action::await_change())
        }
        Err(e) => Err(e.into()),
        Ok(_) => Ok(Action::requeue(STEADY_RECHECK)),
    }
}

#[cfg(test)]
pub(crate) mod tests;
