//! An EC2NodeClass's conditions, as Karpenter's nodeclass reconcilers set them (`controllers/nodeclass/
//! {subnet,securitygroup,ami,instanceprofile,capacityreservation,validation}.go`), and `Ready`, their sum as
//! operatorpkg computes a root condition: `True` when every dependent is `True` for the current generation;
//! otherwise `False` (`UnhealthyDependents`) when one of them is `False` for it, else `Unknown`
//! (`ReconcilingDependents`), the message naming the unhealthy ones, latest change first. `kubectl get
//! ec2nodeclasses` shows `Ready`, and a NodePool's `NodeClassReady` repeats its reason and message.
//!
//! `PlacementGroupReady` is one of them, as in Karpenter: `True` without `spec.placementGroupSelector` or when
//! the group it names is available, else `False` (`PlacementGroupNotFound`), so nothing launches outside the group
//! the class asks for.

use crate::api::condition::{self, Condition, FALSE, TRUE, UNKNOWN};
use crate::api::ec2nodeclass::{Ami, EC2NodeClassSpec, EC2NodeClassStatus};
use crate::cloud::{
    ResolvedNodeClass, NO_AMIS, NO_INSTANCE_PROFILE, NO_PLACEMENT_GROUP, NO_ROLE,
    NO_SECURITY_GROUPS, NO_SUBNETS, PLACEMENT_GROUP_UNRESOLVED, UNSUPPORTED_ALIAS,
};
use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use k8s_openapi::jiff::Timestamp;

pub const SUBNETS_READY: &str = "SubnetsReady";
pub const SECURITY_GROUPS_READY: &str = "SecurityGroupsReady";
pub const AMIS_READY: &str = "AMIsReady";
pub const INSTANCE_PROFILE_READY: &str = "InstanceProfileReady";
pub const CAPACITY_RESERVATIONS_READY: &str = "CapacityReservationsReady";
pub const PLACEMENT_GROUP_READY: &str = "PlacementGroupReady";
pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
pub const READY: &str = "Ready";

/// A condition not decided yet (operatorpkg initializes every dependent so).
const AWAITING_RECONCILIATION: (&str, &str) = (
    "AwaitingReconciliation",
    "object is awaiting reconciliation",
);

/// A resolution failure: the cloud's reason, and Karpenter's condition reason and message for it.
type NotFound = (&'static str, &'static str, &'static str);

/// What resolution checks, in the order kerf resolves: the condition, and the failures that make it false.
const RESOLVED: [(&str, &[NotFound]); 5] = [
    (
        SUBNETS_READY,
        &[(
            NO_SUBNETS,
            "SubnetsNotFound",
            "SubnetSelector did not match any Subnets",
        )],
    ),
    (
        SECURITY_GROUPS_READY,
        &[(
            NO_SECURITY_GROUPS,
            "SecurityGroupsNotFound",
            "SecurityGroupSelector did not match any SecurityGroups",
        )],
    ),
    (
        AMIS_READY,
        &[
            (NO_AMIS, "AMINotFound", "AMISelector did not match any AMIs"),
            // Karpenter's message is the cloud's own (an empty one here takes the detail alone).
            (UNSUPPORTED_ALIAS, "UnsupportedAlias", ""),
        ],
    ),
    // Karpenter never fails this one (it takes spec.instanceProfile as given, and a failure to make the profile
    // for spec.role is an error it retries); kerf looks both up, and says so here.
    (
        INSTANCE_PROFILE_READY,
        &[
            (
                NO_INSTANCE_PROFILE,
                "InstanceProfileNotFound",
                "spec.instanceProfile names an instance profile that does not exist",
            ),
            (
                NO_ROLE,
                "RoleNotFound",
                "spec.role names an IAM role that does not exist",
            ),
        ],
    ),
    // Not found: Karpenter's message is the cloud's (`Placement group "hpc" not found`). Not resolved (EC2 did not
    // answer): Karpenter's words, then the error.
    (
        PLACEMENT_GROUP_READY,
        &[
            (NO_PLACEMENT_GROUP, "PlacementGroupNotFound", ""),
            (
                PLACEMENT_GROUP_UNRESOLVED,
                "PlacementGroupResolutionFailed",
                "Failed to resolve placement group",
            ),
        ],
    ),
];

/// The failure `reason` names, if it is one of [`RESOLVED`]'s: its row and the failure. A reason may go on after
/// the cloud's message (`no AMI matches amiSelectorTerms: ssmParameter ...`).
fn failure(reason: &str) -> Option<(usize, &NotFound, &str)> {
    RESOLVED
        .iter()
        .enumerate()
        .find_map(|(row, (_, failures))| {
            failures.iter().find_map(|failure| {
                let detail = reason.strip_prefix(failure.0)?;
                (detail.is_empty() || detail.starts_with(':')).then_some((row, failure, detail))
            })
        })
}

/// The conditions `Ready` sums up; `CapacityReservationsReady` only with the `ReservedCapacity` feature gate.
pub fn dependents(reserved_capacity: bool) -> Vec<&'static str> {
    let mut types = vec![
        AMIS_READY,
        SUBNETS_READY,
        SECURITY_GROUPS_READY,
        INSTANCE_PROFILE_READY,
        VALIDATION_SUCCEEDED,
        PLACEMENT_GROUP_READY,
    ];
    if reserved_capacity {
        types.push(CAPACITY_RESERVATIONS_READY);
    }
    types
}

/// The status for a resolution: what resolved (kept from `previous` when resolution failed) and the
/// resolution's conditions, with transition times moved only on change. `Ready` is left to [`set_ready`].
pub fn resolved(
    previous: Option<&EC2NodeClassStatus>,
    resolution: Result<&ResolvedNodeClass, &str>,
    now: &str,
    generation: Option<i64>,
) -> EC2NodeClassStatus {
    let mut next = previous.cloned().unwrap_or_default();
    let mut conditions = next.conditions.take().unwrap_or_default();
    let mut set = |type_: &str, status: &str, reason: &str, message: &str| {
        condition::set_status(
            &mut conditions,
            type_,
            status,
            reason,
            message,
            now,
            generation,
        );
    };
    match resolution {
        Ok(resolved) => {
            next.subnets = Some(resolved.subnets.iter().map(|s| s.subnet.clone()).collect());
            next.security_groups = Some(resolved.security_groups.clone());
            next.amis = Some(resolved.amis.iter().flat_map(amis).collect());
            next.instance_profile = resolved.instance_profile.clone();
            // Listed only with the `ReservedCapacity` gate on; otherwise what an earlier run wrote stays, as
            // Karpenter leaves the status of a reconciler it skips.
            if let Some(reservations) = &resolved.capacity_reservations {
                next.capacity_reservations =
                    (!reservations.is_empty()).then(|| reservations.clone());
                set(
                    CAPACITY_RESERVATIONS_READY,
                    TRUE,
                    CAPACITY_RESERVATIONS_READY,
                    "",
                );
            }
            for (type_, _) in RESOLVED {
                set(type_, TRUE, type_, "");
            }
        }
        Err(reason) => {
            // Resolution stops at the first failure: what comes before it resolved, what comes after it was
            // not looked at (it keeps its last verdict, or waits for its first). A failure kerf does not know
            // leaves them all as they were; the validation says it (`DependenciesNotReady`).
            if let Some((failing, (_, not_found, message), detail)) = failure(reason) {
                for (type_, _) in RESOLVED.iter().take(failing) {
                    set(type_, TRUE, type_, "");
                }
                // Karpenter's words, then kerf's detail when the cloud gave one.
                let type_ = RESOLVED[failing].0;
                let message = if message.is_empty() {
                    detail.trim_start_matches(':').trim_start().to_owned()
                } else {
                    format!("{message}{detail}")
                };
                set(type_, FALSE, not_found, &message);
            }
        }
    }
    next.conditions = Some(conditions);
    next
}

/// `PlacementGroupReady` of a class with no `spec.placementGroupSelector`: `True` whatever else failed, as
/// Karpenter resolves the placement group on its own (a resolution failing earlier leaves the other rows be).
pub fn without_placement_group(
    status: &mut EC2NodeClassStatus,
    spec: &EC2NodeClassSpec,
    now: &str,
    generation: Option<i64>,
) {
    if spec.placement_group_selector.is_none() {
        let ready = PLACEMENT_GROUP_READY;
        set(status, (ready, TRUE, ready, ""), now, generation);
    }
}

/// Sets `type_` in `status`'s conditions.
pub fn set(
    status: &mut EC2NodeClassStatus,
    (type_, state, reason, message): (&str, &str, &str, &str),
    now: &str,
    generation: Option<i64>,
) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    condition::set_status(conditions, type_, state, reason, message, now, generation);
}

/// Sets `Ready` from `dependents` (missing ones count as waiting for their first verdict, and are added so).
pub fn set_ready(
    status: &mut EC2NodeClassStatus,
    dependents: &[&str],
    now: &str,
    generation: Option<i64>,
) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    for type_ in dependents {
        if condition::get(conditions, type_).is_none() {
            let (reason, message) = AWAITING_RECONCILIATION;
            condition::set_status(conditions, type_, UNKNOWN, reason, message, now, generation);
        }
    }
    let mut unhealthy: Vec<&Condition> = conditions
        .iter()
        .filter(|c| dependents.contains(&c.type_.as_str()))
        .filter(|c| c.status != TRUE || c.observed_generation != generation)
        .collect();
    // Latest change first (the name breaks ties, so the message is stable).
    unhealthy.sort_by(|a, b| {
        let at = |c: &Condition| c.last_transition_time.parse::<Timestamp>().ok();
        at(b).cmp(&at(a)).then_with(|| a.type_.cmp(&b.type_))
    });
    let (state, reason, message) = if unhealthy.is_empty() {
        (TRUE, READY.to_owned(), String::new())
    } else {
        let failed = unhealthy
            .iter()
            .any(|c| c.status == FALSE && c.observed_generation == generation);
        let message = unhealthy
            .iter()
            .map(|c| format!("{}={}", c.type_, c.status))
            .collect::<Vec<_>>()
            .join(", ");
        if failed {
            (FALSE, "UnhealthyDependents".to_owned(), message)
        } else {
            (UNKNOWN, "ReconcilingDependents".to_owned(), message)
        }
    };
    condition::set_status(conditions, READY, state, &reason, &message, now, generation);
}

/// Why `status` is not `Ready` (`reason: message`), or `None` when it is.
pub fn ready_reason(status: &EC2NodeClassStatus) -> Option<String> {
    let conditions = status.conditions.as_deref().unwrap_or_default();
    match condition::get(conditions, READY) {
        Some(c) if c.status == TRUE => None,
        Some(c) => Some(format!("{}: {}", c.reason, c.message)),
        None => Some("not reconciled".to_owned()),
    }
}

/// An AMI as the status lists it, once per variant it is published as: the architecture requirement that picks
/// it and the variant's (Karpenter's `status.amis`, e.g. `karpenter.k8s.aws/instance-gpu-count Exists` for an
/// NVIDIA image).
fn amis(resolved: &crate::cloud::ResolvedAmi) -> Vec<Ami> {
    let arch = crate::catalog::kube_arch(&resolved.architecture);
    let entry = |variant: Option<crate::cloud::AmiVariant>| {
        let mut requirements = vec![NodeSelectorRequirement {
            key: crate::api::labels::ARCH.to_owned(),
            operator: "In".to_owned(),
            values: Some(vec![arch.to_owned()]),
        }];
        for &(key, exists) in variant.map(|v| v.requirements()).unwrap_or_default() {
            requirements.push(NodeSelectorRequirement {
                key: key.to_owned(),
                operator: if exists { "Exists" } else { "DoesNotExist" }.to_owned(),
                values: None,
            });
        }
        Ami {
            id: resolved.id.clone(),
            deprecated: resolved.deprecated.then_some(true),
            name: resolved.name.clone(),
            requirements,
            root_device_name: None,
            root_device_snapshot_id: None,
        }
    };
    if resolved.variants.is_empty() {
        return vec![entry(None)];
    }
    resolved.variants.iter().map(|&v| entry(Some(v))).collect()
}

#[cfg(test)]
mod tests;
