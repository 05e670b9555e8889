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
mod tests {
    use super::*;
    use crate::api::ec2nodeclass::{CapacityReservation, SecurityGroup, Subnet};
    use crate::cloud::{ResolvedAmi, ResolvedSubnet};

    fn resolution() -> ResolvedNodeClass {
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
                variants: Vec::new(),
                deprecated: false,
            }],
            instance_profile: Some("profile".into()),
            capacity_reservations: Some(vec![]),
            placement_group: None,
        }
    }

    fn reservation(id: &str) -> CapacityReservation {
        serde_json::from_value(serde_json::json!({
            "id": id, "instanceType": "m5.large", "availabilityZone": "us-west-2a",
            "ownerID": "123456789012", "instanceMatchCriteria": "targeted",
            "reservationType": "default", "state": "active",
        }))
        .expect("a reservation")
    }

    fn get<'a>(status: &'a EC2NodeClassStatus, type_: &str) -> (&'a str, &'a str, &'a str) {
        let conditions = status.conditions.as_deref().unwrap_or_default();
        let c = condition::get(conditions, type_).expect(type_);
        (c.status.as_str(), c.reason.as_str(), c.message.as_str())
    }

    /// The status of a resolution with a passed validation and `Ready` summed up, as a reconcile writes it.
    fn full(
        previous: Option<&EC2NodeClassStatus>,
        resolution: Result<&ResolvedNodeClass, &str>,
        now: &str,
        generation: i64,
    ) -> EC2NodeClassStatus {
        let mut status = resolved(previous, resolution, now, Some(generation));
        without_placement_group(
            &mut status,
            &EC2NodeClassSpec::default(),
            now,
            Some(generation),
        );
        let validation = match resolution {
            Ok(_) => (VALIDATION_SUCCEEDED, TRUE, VALIDATION_SUCCEEDED, ""),
            Err(_) => (VALIDATION_SUCCEEDED, FALSE, "DependenciesNotReady", "m"),
        };
        set(&mut status, validation, now, Some(generation));
        set_ready(&mut status, &dependents(false), now, Some(generation));
        status
    }

    /// Karpenter's subnet/securitygroup/ami/instanceprofile suites: a resolved class lists what it launches
    /// with, every resolution condition is true (InstanceProfileReady with them), and so is Ready.
    #[test]
    fn a_resolved_class_lists_what_it_launches_with_and_is_ready() {
        let status = full(None, Ok(&resolution()), "2026-11-23T00:00:00Z", 1);
        assert_eq!(status.subnets.as_ref().expect("subnets")[0].id, "subnet-1");
        assert_eq!(
            status.security_groups.as_ref().expect("groups")[0].id,
            "sg-1"
        );
        let amis = status.amis.as_ref().expect("amis");
        assert_eq!(amis[0].requirements[0].values, Some(vec!["amd64".into()]));
        assert_eq!(status.instance_profile.as_deref(), Some("profile"));
        for type_ in [
            SUBNETS_READY,
            SECURITY_GROUPS_READY,
            AMIS_READY,
            INSTANCE_PROFILE_READY,
        ] {
            assert_eq!(get(&status, type_), (TRUE, type_, ""));
        }
        assert_eq!(get(&status, READY), (TRUE, READY, ""));
    }

    /// Karpenter's suites: "should update status condition on nodeClass as NotReady when subnet/security
    /// group/AMI selectors match nothing" (SubnetsNotFound, SecurityGroupsNotFound, AMINotFound with their
    /// messages), and Ready False naming the dependent.
    #[test]
    fn a_class_whose_selector_matches_nothing_says_which_in_karpenters_words() {
        let ready = full(None, Ok(&resolution()), "2026-11-23T00:00:00Z", 1);
        let broken = full(Some(&ready), Err(NO_AMIS), "2026-11-23T00:01:00Z", 2);
        assert_eq!(get(&broken, SUBNETS_READY), (TRUE, SUBNETS_READY, ""));
        let subnets = condition::get(
            broken.conditions.as_deref().unwrap_or_default(),
            SUBNETS_READY,
        );
        assert_eq!(
            subnets.map(|c| c.last_transition_time.as_str()),
            Some("2026-11-23T00:00:00Z")
        );
        assert_eq!(
            get(&broken, AMIS_READY),
            (FALSE, "AMINotFound", "AMISelector did not match any AMIs")
        );
        // Latest change first; the instance profile was not looked at for generation 2 (resolution stopped at
        // the AMIs), so it is not known to be ready for it.
        assert_eq!(
            get(&broken, READY),
            (
                FALSE,
                "UnhealthyDependents",
                "AMIsReady=False, ValidationSucceeded=False, InstanceProfileReady=True"
            )
        );
        // What resolved before is still shown.
        assert_eq!(broken.subnets, ready.subnets);

        let no_subnets = full(None, Err(NO_SUBNETS), "t", 1);
        assert_eq!(
            get(&no_subnets, SUBNETS_READY),
            (
                FALSE,
                "SubnetsNotFound",
                "SubnetSelector did not match any Subnets"
            )
        );
        let no_groups = full(None, Err(NO_SECURITY_GROUPS), "t", 1);
        assert_eq!(
            get(&no_groups, SECURITY_GROUPS_READY),
            (
                FALSE,
                "SecurityGroupsNotFound",
                "SecurityGroupSelector did not match any SecurityGroups"
            )
        );
        // A selector's message may go on with the detail (an `ssmParameter` that holds no image id).
        let detail = format!("{NO_AMIS}: ssmParameter \"/p\" holds \"x\"");
        let ssm = full(Some(&ready), Err(&detail), "t3", 3);
        assert_eq!(
            get(&ssm, AMIS_READY),
            (
                FALSE,
                "AMINotFound",
                "AMISelector did not match any AMIs: ssmParameter \"/p\" holds \"x\""
            )
        );
        // A reason that merely begins like a selector's is not that selector's.
        let other = full(
            Some(&ready),
            Err("no AMI matches amiSelectorTermsX"),
            "t3",
            3,
        );
        assert_eq!(get(&other, AMIS_READY).0, TRUE);
        // kerf looks up spec.instanceProfile: one that does not exist fails InstanceProfileReady.
        let profile = format!("{NO_INSTANCE_PROFILE}: gone");
        let missing = full(None, Err(&profile), "t", 1);
        assert_eq!(get(&missing, AMIS_READY).0, TRUE);
        assert_eq!(
            get(&missing, INSTANCE_PROFILE_READY),
            (
                FALSE,
                "InstanceProfileNotFound",
                "spec.instanceProfile names an instance profile that does not exist: gone"
            )
        );
        let role = format!("{NO_ROLE}: KarpenterNodeRole");
        let no_role = full(None, Err(&role), "t", 1);
        assert_eq!(
            get(&no_role, INSTANCE_PROFILE_READY),
            (
                FALSE,
                "RoleNotFound",
                "spec.role names an IAM role that does not exist: KarpenterNodeRole"
            )
        );
        // Upstream nodeclass/ami.go: an alias the Kubernetes version does not support is `UnsupportedAlias`, its
        // message the cloud's own.
        let unsupported =
            format!("{UNSUPPORTED_ALIAS}: AL2 aliases are no longer supported on EKS 1.33+");
        let refused = full(None, Err(&unsupported), "t", 1);
        assert_eq!(
            get(&refused, AMIS_READY),
            (
                FALSE,
                "UnsupportedAlias",
                "AL2 aliases are no longer supported on EKS 1.33+"
            )
        );
        // A failure no condition covers leaves them as they were (the validation tells it).
        let unknown = resolved(Some(&ready), Err("something else"), "t4", Some(1));
        assert_eq!(unknown.conditions, ready.conditions);
    }

    /// Upstream `nodeclass/placementgroup_test.go` ("should set PlacementGroupReady to true when no placement
    /// group selector is specified", "... to false when the placement group is not found"): a resolved class has
    /// it True; a selector naming no available group makes it False with Karpenter's reason and message, what
    /// resolved before it stays True, and the class is not Ready.
    #[test]
    fn a_class_selecting_a_missing_placement_group_is_not_ready_and_says_why() {
        let ready = full(None, Ok(&resolution()), "t", 1);
        assert_eq!(
            get(&ready, PLACEMENT_GROUP_READY),
            (TRUE, PLACEMENT_GROUP_READY, "")
        );
        let missing = format!("{NO_PLACEMENT_GROUP}: Placement group \"hpc\" not found");
        let mut status = resolved(None, Err(&missing), "t", Some(1));
        set_ready(&mut status, &dependents(false), "t", Some(1));
        assert_eq!(
            get(&status, PLACEMENT_GROUP_READY),
            (
                FALSE,
                "PlacementGroupNotFound",
                "Placement group \"hpc\" not found"
            )
        );
        for type_ in [
            SUBNETS_READY,
            SECURITY_GROUPS_READY,
            AMIS_READY,
            INSTANCE_PROFILE_READY,
        ] {
            assert_eq!(get(&status, type_).0, TRUE, "{type_}");
        }
        assert_eq!(get(&status, READY).0, FALSE);
        // EC2 not answering: Karpenter's `PlacementGroupResolutionFailed`, with the error after its words.
        let failed = format!("{PLACEMENT_GROUP_UNRESOLVED}: RequestLimitExceeded: slow down");
        let status = resolved(None, Err(&failed), "t", Some(1));
        assert_eq!(
            get(&status, PLACEMENT_GROUP_READY),
            (
                FALSE,
                "PlacementGroupResolutionFailed",
                "Failed to resolve placement group: RequestLimitExceeded: slow down"
            )
        );
    }

    /// operatorpkg's root condition: missing dependents are initialized Unknown; Unknown dependents make Ready
    /// Unknown (`ReconcilingDependents`); a dependent of an older generation is not healthy.
    #[test]
    fn ready_sums_up_its_dependents() {
        let mut fresh = resolved(None, Ok(&resolution()), "2026-11-23T00:00:00Z", Some(1));
        set_ready(
            &mut fresh,
            &dependents(false),
            "2026-11-23T00:00:00Z",
            Some(1),
        );
        assert_eq!(
            get(&fresh, VALIDATION_SUCCEEDED),
            (
                UNKNOWN,
                "AwaitingReconciliation",
                "object is awaiting reconciliation"
            )
        );
        assert_eq!(
            get(&fresh, READY),
            (
                UNKNOWN,
                "ReconcilingDependents",
                "ValidationSucceeded=Unknown"
            )
        );
        let reason = ready_reason(&fresh).expect("not ready");
        assert_eq!(reason, "ReconcilingDependents: ValidationSucceeded=Unknown");

        let mut refused = fresh.clone();
        let message = "Controller isn't authorized to call ec2:CreateFleet: x";
        set(
            &mut refused,
            (
                VALIDATION_SUCCEEDED,
                FALSE,
                "CreateFleetAuthCheckFailed",
                message,
            ),
            "2026-11-23T00:01:00Z",
            Some(1),
        );
        set_ready(
            &mut refused,
            &dependents(false),
            "2026-11-23T00:01:00Z",
            Some(1),
        );
        assert_eq!(
            get(&refused, READY),
            (FALSE, "UnhealthyDependents", "ValidationSucceeded=False")
        );

        // Every dependent True but for an older generation: not Ready yet.
        let mut stale = full(None, Ok(&resolution()), "t1", 1);
        set_ready(&mut stale, &dependents(false), "t2", Some(2));
        assert_eq!(get(&stale, READY).0, UNKNOWN);
    }

    #[test]
    fn an_unchanged_resolution_gives_an_equal_status_so_nothing_is_written() {
        let first = full(None, Ok(&resolution()), "t1", 1);
        assert_eq!(full(Some(&first), Ok(&resolution()), "t2", 1), first);
    }

    /// Karpenter's capacityreservation suite: the reservations are listed and the condition is set only when
    /// they were looked up (the `ReservedCapacity` gate), and then Ready depends on it.
    #[test]
    fn reservations_are_listed_and_ready_only_when_they_were_looked_up() {
        let mut with = resolution();
        with.capacity_reservations = Some(vec![reservation("cr-1")]);
        let mut listed = full(None, Ok(&with), "t1", 1);
        set_ready(&mut listed, &dependents(true), "t1", Some(1));
        let ids: Vec<&str> = listed
            .capacity_reservations
            .iter()
            .flatten()
            .map(|r| r.id.as_str())
            .collect();
        assert_eq!(ids, ["cr-1"]);
        assert_eq!(get(&listed, CAPACITY_RESERVATIONS_READY).0, TRUE);
        assert_eq!(get(&listed, READY).0, TRUE);
        // None selected any more: the list goes, the condition stays true (no reservation is not an error).
        let none = full(Some(&listed), Ok(&resolution()), "t2", 1);
        assert_eq!(none.capacity_reservations, None);
        assert_eq!(get(&none, CAPACITY_RESERVATIONS_READY).0, TRUE);
        // With the ReservedCapacity gate off nothing is looked up: what was written stays, and a class that never
        // had the condition does not get it.
        let mut off = resolution();
        off.capacity_reservations = None;
        assert_eq!(
            full(Some(&listed), Ok(&off), "t3", 1).capacity_reservations,
            listed.capacity_reservations
        );
        let fresh = full(None, Ok(&off), "t3", 1);
        assert!(fresh
            .conditions
            .iter()
            .flatten()
            .all(|c| c.type_ != CAPACITY_RESERVATIONS_READY));
        assert_eq!(get(&fresh, READY).0, TRUE);
    }
}
