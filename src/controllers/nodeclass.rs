//! EC2NodeClass status: what its selector terms resolve to (subnets, security groups, AMIs, instance profile)
//! and its conditions, as Karpenter reports them ([`conditions`]), so `kubectl get ec2nodeclass -o yaml` shows
//! what kerf will launch with; and whether launches from it would be allowed (`ValidationSucceeded`,
//! [`validation`]). Classes are resolved again every few minutes, which is how a newly published AMI reaches the
//! status (and, through it, drift). A class carries the `karpenter.k8s.aws/termination` finalizer: deleting it
//! waits until no NodeClaim uses it, then removes what the cloud provider made for it (the instance profile kerf
//! manages for its role) before the class goes. With the `ReservedCapacity` feature gate on, the capacity
//! reservations it selects are listed too (`status.capacityReservations`, `CapacityReservationsReady`), and a
//! class that selects any is resolved again every minute, or when a reservation ends if sooner, as Karpenter
//! polls them.

pub mod conditions;
#[cfg(test)]
mod reconcile_tests;
pub mod validation;

use super::kit::backoff::{key_of, NODECLASS};
use super::kit::calls;
use super::{Context, Error};
use crate::api::ec2nodeclass::{CapacityReservation, EC2NodeClass, EC2NodeClassStatus};
use crate::api::nodeclaim::NodeClaim;
use crate::cloud::metered::carried;
use crate::cloud::{CloudError, CloudProvider, NodeClass};
use ::kube::runtime::controller::{Action, Controller};
use ::kube::{Api, ResourceExt};
use futures::StreamExt;
use k8s_openapi::jiff::{Timestamp, Unit};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use validation::{Checks, Verdict};

pub use conditions::{
    AMIS_READY, CAPACITY_RESERVATIONS_READY, INSTANCE_PROFILE_READY, READY, SECURITY_GROUPS_READY,
    SUBNETS_READY, VALIDATION_SUCCEEDED,
};

/// How often a ready class is resolved again.
const RESOLVE_INTERVAL: Duration = Duration::from_secs(5 * 60);
/// How soon a class whose selectors matched nothing is resolved again.
const RETRY_INTERVAL: Duration = Duration::from_secs(30);
/// How often a deleted class still used by NodeClaims looks again.
const WAIT_FOR_CLAIMS: Duration = Duration::from_secs(10);
/// How often a class that selects capacity reservations lists them again (Karpenter's poll period): their
/// state and end time change on EC2's side.
const RESERVATION_POLL: Duration = Duration::from_secs(60);

pub use crate::api::well_known::NODECLASS_FINALIZER as FINALIZER;

/// What the reconciles of EC2NodeClasses share.
struct NodeClasses<C> {
    ctx: Arc<Context<C>>,
    /// The answers of the cloud's launch checks.
    checks: Checks,
}

/// Reconciles every EC2NodeClass until the task is dropped.
pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    let trigger = ctx.state.follow.node_classes.objects();
    let store = ctx.state.node_classes.clone();
    let classes = Arc::new(NodeClasses {
        ctx,
        checks: Checks::default(),
    });
    Controller::for_shared_stream(trigger, store)
        .run(
            |class, classes| {
                carried(async move {
                    let key = key_of(NODECLASS, class.as_ref());
                    let reconciled = reconcile(class, classes.clone());
                    classes.ctx.backoff.track(&key, reconciled).await
                })
            },
            error_policy,
            classes,
        )
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "EC2NodeClass reconcile");
            }
        })
        .await;
    Ok(())
}

/// Reconciles one class; a class the apiserver no longer has (404: deleted since the watch saw it) is done with,
/// as Karpenter ignores NotFound: no failure to log and back off from under a name that is gone.
async fn reconcile<C: CloudProvider>(
    class: Arc<EC2NodeClass>,
    classes: Arc<NodeClasses<C>>,
) -> Result<Action, Error> {
    let name = class.name_any();
    match reconcile_class(class, classes.clone()).await {
        Err(Error::Call(error)) if error.is_not_found() => {
            tracing::debug!(ec2nodeclass = %name, %error, "ec2nodeclass is gone");
            classes.checks.forget(&name);
            Ok(Action::await_change())
        }
        other => other,
    }
}

async fn reconcile_class<C: CloudProvider>(
    class: Arc<EC2NodeClass>,
    classes: Arc<NodeClasses<C>>,
) -> Result<Action, Error> {
    let ctx = &classes.ctx;
    let api: Api<EC2NodeClass> = Api::all(ctx.client.clone());
    if class.metadata.deletion_timestamp.is_some() {
        return finalize(&api, &class, &classes).await;
    }
    calls::add_finalizer(&api, class.as_ref(), FINALIZER).await?;
    let name = class.name_any();
    let resolution = match ctx.cloud.resolve_node_class(&name, &class.spec).await {
        Ok(resolved) => Ok(resolved),
        Err(CloudError::NodeClassNotReady { reason, .. }) => Err(reason),
        Err(error) => return Err(error.into()),
    };
    let now = rfc3339(ctx.clock.now());
    let generation = class.metadata.generation;
    let mut next = conditions::resolved(
        class.status.as_ref(),
        resolution
            .as_ref()
            .map(|c| &c.resolved)
            .map_err(String::as_str),
        &now,
        generation,
    );
    conditions::without_placement_group(&mut next, &class.spec, &now, generation);
    // What resolution found is written even when the cloud could not answer the launch check (it is asked again).
    let resolved = resolution.as_ref().map_err(String::as_str);
    let validated = validate(&classes, &class, resolved, &next).await;
    if let Ok(verdict) = &validated {
        conditions::set(&mut next, verdict.condition(), &now, generation);
    }
    let gate = ctx.settings.feature_gates.reserved_capacity;
    conditions::set_ready(&mut next, &conditions::dependents(gate), &now, generation);
    if class.status.as_ref() != Some(&next) {
        calls::patch_status(&api, &name, serde_json::json!(next)).await?;
        match conditions::ready_reason(&next) {
            None => tracing::info!(ec2nodeclass = %name, "resolved ec2nodeclass"),
            Some(reason) => tracing::warn!(ec2nodeclass = %name, reason, "ec2nodeclass not ready"),
        }
    }
    validated?;
    Ok(Action::requeue(match &resolution {
        Ok(resolved) => {
            let selects = class
                .spec
                .capacity_reservation_selector_terms
                .as_ref()
                .is_some_and(|terms| !terms.is_empty());
            let resolve_in = match &resolved.resolved.capacity_reservations {
                Some(reservations) if selects => {
                    reservations_requeue(reservations, ctx.clock.now()).min(RESOLVE_INTERVAL)
                }
                _ => RESOLVE_INTERVAL,
            };
            resolve_in.min(validation::REVALIDATE)
        }
        Err(_) => RETRY_INTERVAL,
    }))
}

/// `ValidationSucceeded` of `class` with its status so far (`status`, from `resolution`, or why it failed):
/// decided without the cloud when it can be, else by the cloud's launch check (its answer kept for a while).
async fn validate<C: CloudProvider>(
    classes: &NodeClasses<C>,
    class: &EC2NodeClass,
    resolution: Result<&NodeClass, &str>,
    status: &EC2NodeClassStatus,
) -> Result<Verdict, Error> {
    let conditions = status.conditions.as_deref().unwrap_or_default();
    if let Some(verdict) = validation::precheck(class, conditions) {
        return Ok(verdict);
    }
    let node_class = match resolution {
        Ok(node_class) => node_class,
        Err(reason) => return Ok(Verdict::unresolved(reason)),
    };
    let ctx = &classes.ctx;
    let name = class.name_any();
    let now = ctx.clock.now();
    let key = validation::check_key(class, status);
    if let Some(verdict) = classes.checks.get(&name, key, now) {
        return Ok(verdict);
    }
    let types = ctx.cloud.instance_types(node_class, now).await?;
    let pools = ctx.state.node_pools.state();
    let Some(instance_type) = validation::candidate(node_class, types, &pools) else {
        return Err(Error::Invalid(format!(
            "EC2NodeClass {name}: no instance type with an on-demand offering and an image to check a launch with"
        )));
    };
    let request = validation::launch_request(node_class.clone(), &instance_type);
    let refusal = ctx.cloud.check_launch(&request, now).await?;
    let verdict = Verdict::of(refusal.as_ref());
    match &refusal {
        None => {
            tracing::debug!(ec2nodeclass = %name, instance_type = %instance_type.name, "launch check passed")
        }
        Some(refusal) => {
            tracing::warn!(ec2nodeclass = %name, reason = refusal.call.reason(), message = %refusal.message(), "launch check refused")
        }
    }
    classes.checks.put(&name, key, verdict.clone(), now);
    Ok(verdict)
}

/// When the reservations of a class are listed again: every [`RESERVATION_POLL`], or as soon as one of them
/// ends if that is sooner (in a second for one already past its end: never a busy loop), so that the status
/// drops it in time.
fn reservations_requeue(reservations: &[CapacityReservation], now: SystemTime) -> Duration {
    let now = Timestamp::try_from(now).unwrap_or(Timestamp::UNIX_EPOCH);
    reservations
        .iter()
        .filter_map(|r| r.end_time.as_deref()?.parse::<Timestamp>().ok())
        .map(|end| {
            let left = end.as_millisecond().saturating_sub(now.as_millisecond());
            Duration::from_millis(u64::try_from(left).unwrap_or(0))
        })
        .fold(RESERVATION_POLL, Duration::min)
        .max(Duration::from_secs(1))
}

/// A deleted class: waits while NodeClaims use it, then removes its cloud resources and the finalizer.
async fn finalize<C: CloudProvider>(
    api: &Api<EC2NodeClass>,
    class: &EC2NodeClass,
    classes: &NodeClasses<C>,
) -> Result<Action, Error> {
    let ctx = &classes.ctx;
    let finalizers = class.metadata.finalizers.as_deref().unwrap_or_default();
    if !finalizers.iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let name = class.name_any();
    let claims = claims_of(&name, &ctx.state.node_claims.state());
    if !claims.is_empty() {
        let note = format!("Waiting on NodeClaim termination for {}", claims.join(", "));
        tracing::info!(ec2nodeclass = %name, %note, "ec2nodeclass deletion waits");
        ctx.events
            .normal(class, "WaitingOnNodeClaimTermination", note)
            .await;
        return Ok(Action::requeue(WAIT_FOR_CLAIMS));
    }
    ctx.cloud.delete_node_class(&name, &class.spec).await?;
    calls::remove_finalizer(api, class, FINALIZER).await?;
    classes.checks.forget(&name);
    tracing::info!(ec2nodeclass = %name, "deleted ec2nodeclass");
    Ok(Action::await_change())
}

/// The names of the NodeClaims that launch with class `name`, sorted.
fn claims_of(name: &str, claims: &[Arc<NodeClaim>]) -> Vec<String> {
    let mut names: Vec<String> = claims
        .iter()
        .filter(|c| c.spec.node_class_ref.name == name)
        .map(|c| c.name_any())
        .collect();
    names.sort();
    names
}

fn error_policy<C>(
    class: Arc<EC2NodeClass>,
    error: &Error,
    classes: Arc<NodeClasses<C>>,
) -> Action {
    let retry_in = classes
        .ctx
        .backoff
        .failed(&key_of(NODECLASS, class.as_ref()));
    tracing::warn!(ec2nodeclass = %class.name_any(), %error, ?retry_in, "could not reconcile the EC2NodeClass; retrying");
    Action::requeue(retry_in)
}

/// `now` as RFC 3339 in whole seconds, as Kubernetes writes times.
pub fn rfc3339(now: SystemTime) -> String {
    Timestamp::try_from(now)
        .and_then(|t| t.round(Unit::Second))
        .map(|t| t.to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reservation(id: &str, end_time: Option<&str>) -> CapacityReservation {
        serde_json::from_value(serde_json::json!({
            "id": id, "instanceType": "m5.large", "availabilityZone": "us-west-2a",
            "ownerID": "123456789012", "instanceMatchCriteria": "targeted",
            "reservationType": "default", "state": "active", "endTime": end_time,
        }))
        .expect("a reservation")
    }

    #[test]
    fn reservations_are_polled_every_minute_or_when_one_ends() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let at = |secs: u64| rfc3339(now + Duration::from_secs(secs));
        assert_eq!(reservations_requeue(&[], now), RESERVATION_POLL);
        let later = [reservation("cr-1", Some(&at(3600)))];
        assert_eq!(reservations_requeue(&later, now), RESERVATION_POLL);
        let soon = [
            reservation("cr-1", Some(&at(3600))),
            reservation("cr-2", Some(&at(20))),
            reservation("cr-3", None),
        ];
        assert_eq!(reservations_requeue(&soon, now), Duration::from_secs(20));
        let past = [reservation("cr-1", Some("2020-01-01T00:00:00Z"))];
        assert_eq!(reservations_requeue(&past, now), Duration::from_secs(1));
    }

    #[test]
    fn times_are_whole_seconds() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_800_000_000_400);
        assert_eq!(rfc3339(t), "2027-01-15T08:00:00Z");
    }

    #[test]
    fn a_class_is_used_by_the_claims_that_reference_it() {
        let claim = |name: &str, class: &str| -> Arc<NodeClaim> {
            Arc::new(
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                    "metadata": {"name": name},
                    "spec": {"requirements": [], "nodeClassRef":
                        {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": class}}
                }))
                .expect("a NodeClaim"),
            )
        };
        let claims = [
            claim("b", "default"),
            claim("c", "gpu"),
            claim("a", "default"),
        ];
        assert_eq!(claims_of("default", &claims), ["a", "b"]);
        assert!(claims_of("unused", &claims).is_empty());
    }
}
