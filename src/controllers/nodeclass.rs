//! EC2NodeClass status: what its selector terms resolve to (subnets, security groups, AMIs, instance profile)
//! and its readiness conditions, as Karpenter reports them, so `kubectl get ec2nodeclass -o yaml` shows what
//! kerf will launch with. Classes are resolved again every few minutes, which is how a newly published AMI
//! reaches the status (and, through it, drift). A class carries the `karpenter.k8s.aws/termination`
//! finalizer: deleting it waits until no NodeClaim uses it, then removes what the cloud provider made for it
//! (the instance profile kerf manages for its role) before the class goes. With the `ReservedCapacity` feature
//! gate on, the capacity reservations it selects are listed too (`status.capacityReservations`,
//! `CapacityReservationsReady`), and a class that selects any is resolved again every minute, or when a
//! reservation ends if sooner, as Karpenter polls them.

use super::backoff::key_of;
use super::nodeclaim::calls;
use super::{Context, Error};
use crate::api::condition;
use crate::api::ec2nodeclass::{Ami, CapacityReservation, EC2NodeClass, EC2NodeClassStatus};
use crate::api::nodeclaim::NodeClaim;
use crate::cloud::{
    CloudError, CloudProvider, ResolvedNodeClass, NO_AMIS, NO_SECURITY_GROUPS, NO_SUBNETS,
};
use ::kube::runtime::controller::{Action, Controller};
use ::kube::runtime::watcher;
use ::kube::{Api, ResourceExt};
use futures::StreamExt;
use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use k8s_openapi::jiff::{Timestamp, Unit};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How often a ready class is resolved again.
const RESOLVE_INTERVAL: Duration = Duration::from_secs(5 * 60);
/// How soon a class whose selectors matched nothing is resolved again.
const RETRY_INTERVAL: Duration = Duration::from_secs(30);
/// How often a deleted class still used by NodeClaims looks again.
const WAIT_FOR_CLAIMS: Duration = Duration::from_secs(10);
/// How often a class that selects capacity reservations lists them again (Karpenter's poll period): their
/// state and end time change on EC2's side.
const RESERVATION_POLL: Duration = Duration::from_secs(60);

/// Holds a deleted EC2NodeClass until its NodeClaims are gone and its cloud resources removed.
pub const FINALIZER: &str = "karpenter.k8s.aws/termination";

pub const SUBNETS_READY: &str = "SubnetsReady";
pub const SECURITY_GROUPS_READY: &str = "SecurityGroupsReady";
pub const AMIS_READY: &str = "AMIsReady";
pub const CAPACITY_RESERVATIONS_READY: &str = "CapacityReservationsReady";
pub const READY: &str = "Ready";

/// Reconciles every EC2NodeClass until the task is dropped.
pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    let api: Api<EC2NodeClass> = Api::all(ctx.client.clone());
    Controller::new(api, watcher::Config::default())
        .run(
            |class, ctx| async move {
                let key = key_of(class.as_ref());
                ctx.backoff.track(&key, reconcile(class, ctx.clone())).await
            },
            error_policy,
            ctx,
        )
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "EC2NodeClass reconcile");
            }
        })
        .await;
    Ok(())
}

async fn reconcile<C: CloudProvider>(
    class: Arc<EC2NodeClass>,
    ctx: Arc<Context<C>>,
) -> Result<Action, Error> {
    let api: Api<EC2NodeClass> = Api::all(ctx.client.clone());
    if class.metadata.deletion_timestamp.is_some() {
        return finalize(&api, &class, &ctx).await;
    }
    calls::add_finalizer(&api, class.as_ref(), FINALIZER).await?;
    let name = class.name_any();
    let resolution = match ctx.cloud.resolve_node_class(&name, &class.spec).await {
        Ok(resolved) => Ok(resolved.resolved),
        Err(CloudError::NodeClassNotReady { reason, .. }) => Err(reason),
        Err(error) => return Err(error.into()),
    };
    let next = status(
        class.status.as_ref(),
        resolution.as_ref().map_err(String::as_str),
        &rfc3339(ctx.clock.now()),
        class.metadata.generation,
    );
    if class.status.as_ref() != Some(&next) {
        calls::patch_status(&api, &name, serde_json::json!(next)).await?;
        match &resolution {
            Ok(_) => tracing::info!(ec2nodeclass = %name, "resolved ec2nodeclass"),
            Err(reason) => tracing::warn!(ec2nodeclass = %name, reason, "ec2nodeclass not ready"),
        }
    }
    Ok(Action::requeue(match &resolution {
        Ok(resolved) => {
            let selects = class
                .spec
                .capacity_reservation_selector_terms
                .as_ref()
                .is_some_and(|terms| !terms.is_empty());
            match &resolved.capacity_reservations {
                Some(reservations) if selects => {
                    reservations_requeue(reservations, ctx.clock.now()).min(RESOLVE_INTERVAL)
                }
                _ => RESOLVE_INTERVAL,
            }
        }
        Err(_) => RETRY_INTERVAL,
    }))
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
    ctx: &Context<C>,
) -> Result<Action, Error> {
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

fn error_policy<C>(class: Arc<EC2NodeClass>, error: &Error, ctx: Arc<Context<C>>) -> Action {
    let retry_in = ctx.backoff.failed(&key_of(class.as_ref()));
    tracing::warn!(ec2nodeclass = %class.name_any(), %error, ?retry_in, "could not reconcile the EC2NodeClass; retrying");
    Action::requeue(retry_in)
}

/// The status for a resolution: what resolved (kept from `previous` when resolution failed) and the
/// conditions, with transition times moved only on change.
pub fn status(
    previous: Option<&EC2NodeClassStatus>,
    resolution: Result<&ResolvedNodeClass, &str>,
    now: &str,
    generation: Option<i64>,
) -> EC2NodeClassStatus {
    let mut next = previous.cloned().unwrap_or_default();
    let mut conditions = next.conditions.take().unwrap_or_default();
    let mut set = |type_: &str, ok: bool, reason: &str, message: &str| {
        condition::set(&mut conditions, type_, ok, reason, message, now, generation);
    };
    match resolution {
        Ok(resolved) => {
            next.subnets = Some(resolved.subnets.iter().map(|s| s.subnet.clone()).collect());
            next.security_groups = Some(resolved.security_groups.clone());
            next.amis = Some(resolved.amis.iter().map(ami).collect());
            next.instance_profile = resolved.instance_profile.clone();
            // Listed only with the `ReservedCapacity` gate on; otherwise what an earlier run wrote stays, as
            // Karpenter leaves the status of a reconciler it skips.
            if let Some(reservations) = &resolved.capacity_reservations {
                next.capacity_reservations =
                    (!reservations.is_empty()).then(|| reservations.clone());
                set(
                    CAPACITY_RESERVATIONS_READY,
                    true,
                    CAPACITY_RESERVATIONS_READY,
                    "",
                );
            }
            for type_ in [SUBNETS_READY, SECURITY_GROUPS_READY, AMIS_READY, READY] {
                set(type_, true, type_, "");
            }
        }
        Err(reason) => {
            // Selectors are checked in this order; the ones after the failing one are unknown, not ready.
            let failed = [
                (SUBNETS_READY, NO_SUBNETS),
                (SECURITY_GROUPS_READY, NO_SECURITY_GROUPS),
                (AMIS_READY, NO_AMIS),
            ];
            // A reason may go on after its selector's message (`no AMI matches amiSelectorTerms: ssmParameter ...`).
            let failing = failed.iter().position(|(_, r)| {
                reason
                    .strip_prefix(r)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(':'))
            });
            for (i, (type_, _)) in failed.iter().enumerate() {
                match failing {
                    Some(f) if i < f => set(type_, true, type_, ""),
                    Some(f) if i == f => set(type_, false, "NotFound", reason),
                    _ => {}
                }
            }
            set(READY, false, "NodeClassNotReady", reason);
        }
    }
    next.conditions = Some(conditions);
    next
}

/// An AMI as the status lists it: with the architecture requirement that picks it.
fn ami(resolved: &crate::cloud::ResolvedAmi) -> Ami {
    let arch = match resolved.architecture.as_str() {
        "x86_64" => "amd64",
        other => other,
    };
    Ami {
        id: resolved.id.clone(),
        deprecated: None,
        name: resolved.name.clone(),
        requirements: vec![NodeSelectorRequirement {
            key: crate::api::labels::ARCH.to_owned(),
            operator: "In".to_owned(),
            values: Some(vec![arch.to_owned()]),
        }],
        root_device_name: None,
        root_device_snapshot_id: None,
    }
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
    use crate::api::ec2nodeclass::{SecurityGroup, Subnet};
    use crate::cloud::{ResolvedAmi, ResolvedSubnet};

    fn resolved() -> ResolvedNodeClass {
        ResolvedNodeClass {
            subnets: vec![ResolvedSubnet {
                subnet: Subnet {
                    id: "subnet-1".into(),
                    zone: "us-west-2a".into(),
                    zone_id: Some("usw2-az1".into()),
                },
                available_ips: 100,
            }],
            security_groups: vec![SecurityGroup {
                id: "sg-1".into(),
                name: Some("nodes".into()),
            }],
            amis: vec![ResolvedAmi {
                id: "ami-1".into(),
                name: Some("al2023".into()),
                architecture: "x86_64".into(),
                creation_date: None,
            }],
            instance_profile: Some("profile".into()),
            capacity_reservations: Some(vec![]),
        }
    }

    fn reservation(id: &str, end_time: Option<&str>) -> CapacityReservation {
        serde_json::from_value(serde_json::json!({
            "id": id, "instanceType": "m5.large", "availabilityZone": "us-west-2a",
            "ownerID": "123456789012", "instanceMatchCriteria": "targeted",
            "reservationType": "default", "state": "active", "endTime": end_time,
        }))
        .expect("a reservation")
    }

    fn condition<'a>(status: &'a EC2NodeClassStatus, type_: &str) -> &'a condition::Condition {
        let conditions = status.conditions.as_deref().unwrap_or_default();
        conditions.iter().find(|c| c.type_ == type_).expect(type_)
    }

    #[test]
    fn a_resolved_class_lists_what_it_launches_with_and_is_ready() {
        let status = status(None, Ok(&resolved()), "2026-11-23T00:00:00Z", Some(1));
        assert_eq!(status.subnets.as_ref().unwrap()[0].id, "subnet-1");
        assert_eq!(status.security_groups.as_ref().unwrap()[0].id, "sg-1");
        let amis = status.amis.as_ref().unwrap();
        assert_eq!(amis[0].requirements[0].values, Some(vec!["amd64".into()]));
        assert_eq!(status.instance_profile.as_deref(), Some("profile"));
        for type_ in [SUBNETS_READY, SECURITY_GROUPS_READY, AMIS_READY, READY] {
            assert_eq!(condition(&status, type_).status, "True", "{type_}");
        }
    }

    #[test]
    fn a_class_without_amis_says_which_selector_matched_nothing() {
        let ready = status(None, Ok(&resolved()), "t1", Some(1));
        let broken = status(Some(&ready), Err(NO_AMIS), "t2", Some(2));
        assert_eq!(condition(&broken, SUBNETS_READY).status, "True");
        assert_eq!(condition(&broken, SUBNETS_READY).last_transition_time, "t1");
        assert_eq!(condition(&broken, AMIS_READY).status, "False");
        assert_eq!(condition(&broken, AMIS_READY).message, NO_AMIS);
        let ready_condition = condition(&broken, READY);
        assert_eq!(
            (
                ready_condition.status.as_str(),
                ready_condition.last_transition_time.as_str()
            ),
            ("False", "t2")
        );
        // What resolved before is still shown.
        assert_eq!(broken.subnets, ready.subnets);
        // A selector's message may go on with the detail (an `ssmParameter` that holds no image id).
        let detail =
            format!("{NO_AMIS}: ssmParameter \"/p\" holds \"x\", not an image id (ami-...)");
        let ssm = status(Some(&ready), Err(&detail), "t3", Some(3));
        assert_eq!(condition(&ssm, SECURITY_GROUPS_READY).status, "True");
        assert_eq!(condition(&ssm, AMIS_READY).status, "False");
        assert_eq!(condition(&ssm, AMIS_READY).message, detail);
        // A reason that merely begins like a selector's is not that selector's.
        let other = status(
            Some(&ready),
            Err("no AMI matches amiSelectorTermsX"),
            "t3",
            Some(3),
        );
        assert_eq!(condition(&other, AMIS_READY).status, "True");
    }

    #[test]
    fn an_unchanged_resolution_gives_an_equal_status_so_nothing_is_written() {
        let first = status(None, Ok(&resolved()), "t1", Some(1));
        assert_eq!(status(Some(&first), Ok(&resolved()), "t2", Some(1)), first);
    }

    #[test]
    fn reservations_are_listed_and_ready_only_when_they_were_looked_up() {
        let mut with = resolved();
        with.capacity_reservations = Some(vec![reservation("cr-1", None)]);
        let listed = status(None, Ok(&with), "t1", Some(1));
        let ids: Vec<&str> = listed
            .capacity_reservations
            .iter()
            .flatten()
            .map(|r| r.id.as_str())
            .collect();
        assert_eq!(ids, ["cr-1"]);
        assert_eq!(
            condition(&listed, CAPACITY_RESERVATIONS_READY).status,
            "True"
        );
        assert_eq!(condition(&listed, READY).status, "True");
        // None selected any more: the list goes, the condition stays true (no reservation is not an error).
        let none = status(Some(&listed), Ok(&resolved()), "t2", Some(1));
        assert_eq!(none.capacity_reservations, None);
        assert_eq!(condition(&none, CAPACITY_RESERVATIONS_READY).status, "True");
        // With the ReservedCapacity gate off nothing is looked up: what was written stays, and a class that never
        // had the condition does not get it.
        let mut off = resolved();
        off.capacity_reservations = None;
        assert_eq!(
            status(Some(&listed), Ok(&off), "t3", Some(1)).capacity_reservations,
            listed.capacity_reservations
        );
        let fresh = status(None, Ok(&off), "t3", Some(1));
        assert!(fresh
            .conditions
            .iter()
            .flatten()
            .all(|c| c.type_ != CAPACITY_RESERVATIONS_READY));
        assert_eq!(condition(&fresh, READY).status, "True");
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
