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
