//! The scheduling simulation on a small synthetic catalog: each constraint placed and refused, with reasons.

mod support;

use kerf::scheduling::solve;
use serde_json::{json, Value};
use support::{catalog, labelled, merge, nodepool, pods};

#[test]
fn packs_pods_onto_the_cheapest_types_that_fit() {
    let plan = solve(
        &pods(10, "web", json!({})),
        &[nodepool("default", json!({}))],
        &catalog(),
    );
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let placed: usize = plan.claims.iter().map(|c| c.pods.len()).sum();
    assert_eq!(placed, 10);
    // 1 CPU pods: a large holds 15 (16 CPU - 100m), so one claim takes all ten; it is the only type that fits 10.
    assert_eq!(plan.claims.len(), 1);
    let claim = &plan.claims[0];
    assert_eq!(*claim.instance_types, ["large"]);
    let cheapest = claim.cheapest.as_ref().expect("priced");
    assert_eq!(
        (
            cheapest.instance_type.as_str(),
            cheapest.zone.as_str(),
            cheapest.capacity_type.as_str()
        ),
        ("large", "test-zone-a", "spot")
    );
    assert!(
        claim
            .requirements
            .to_string()
            .contains("karpenter.sh/nodepool"),
        "{}",
        claim.requirements
    );
}

/// Karpenter's claim template labels claims with their class (`nodeclaimtemplate.go`), so a pod may select it:
/// the class's name fits, another class's does not.
#[test]
fn a_pod_may_select_its_pools_ec2nodeclass() {
    let pools = [nodepool("default", json!({}))];
    let class_of = |name: &str| {
        pods(
            1,
            name,
            json!({"nodeSelector": {"karpenter.k8s.aws/ec2nodeclass": name}}),
        )
    };
    let fits = solve(&class_of("default"), &pools, &catalog());
    assert!(fits.unschedulable.is_empty(), "{:?}", fits.unschedulable);
    assert_eq!(
        fits.claims[0]
            .requirements
            .labels()
            .get("karpenter.k8s.aws/ec2nodeclass")
            .map(String::as_str),
        Some("default")
    );
    let other = solve(&class_of("gpu"), &pools, &catalog());
    assert!(other.claims.is_empty());
    assert_eq!(other.unschedulable.len(), 1);
}

#[test]
fn an_arm64_pod_against_an_amd64_pool_is_refused_with_the_reason() {
    let arm = pods(
        1,
        "arm",
        json!({"nodeSelector": {"kubernetes.io/arch": "arm64"}}),
    );
    let plan = solve(&arm, &[nodepool("default", json!({}))], &catalog());
    assert!(plan.claims.is_empty());
    assert_eq!(plan.unschedulable.len(), 1);
    let reason = &plan.unschedulable[0].reason;
    assert!(
        reason.starts_with("nodepool default: incompatible requirements, key kubernetes.io/arch"),
        "{reason}"
    );
    assert!(
        reason.contains("arm64") && reason.contains("amd64"),
        "{reason}"
    );
}

#[test]
fn taints_need_tolerations_and_weights_order_the_pools() {
    let gpu_pool = nodepool(
        "tainted",
        json!({"weight": 50, "template": {"spec": {"taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]}}}),
    );
    let general = nodepool("general", json!({"weight": 10}));
    let plain = pods(1, "plain", json!({}));
    let plan = solve(&plain, &[general.clone(), gpu_pool.clone()], &catalog());
    assert_eq!(
        plan.claims[0].nodepool, "general",
        "the heavier pool is tainted"
    );
    let tolerant = pods(
        1,
        "batch",
        json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}]}),
    );
    let plan = solve(&tolerant, &[general, gpu_pool.clone()], &catalog());
    assert_eq!(
        plan.claims[0].nodepool, "tainted",
        "weight 50 is tried first"
    );
    let plan = solve(&plain, &[gpu_pool], &catalog());
    assert_eq!(
        plan.unschedulable[0].reason,
        "nodepool tainted: did not tolerate taint dedicated=batch:NoSchedule"
    );
}

#[test]
fn limits_stop_provisioning() {
    // 6 CPU of limit. The first claim may become a small or a medium, so it uses up 4 (the larger); the second
    // can then only be a small (2), which holds one 1-CPU pod; after that the limit is exhausted.
    let limited = nodepool("limited", json!({"limits": {"cpu": "6"}}));
    let plan = solve(&pods(6, "web", json!({})), &[limited], &catalog());
    let types: Vec<String> = plan
        .claims
        .iter()
        .map(|c| c.instance_types.join(","))
        .collect();
    assert_eq!(types, ["medium", "small"]);
    let placed: usize = plan.claims.iter().map(|c| c.pods.len()).sum();
    assert_eq!(placed, 4);
    assert_eq!(plan.unschedulable.len(), 2);
    assert_eq!(
        plan.unschedulable[0].reason,
        "nodepool limited: cpu limit has been exhausted for nodepool limited"
    );
}

#[test]
fn preferences_are_relaxed_and_zones_narrow_the_offerings() {
    let prefers_arm = pods(
        1,
        "p",
        json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "preference": {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]}}]}}}),
    );
    let plan = solve(&prefers_arm, &[nodepool("default", json!({}))], &catalog());
    assert!(
        plan.unschedulable.is_empty(),
        "a preference that cannot be met is dropped: {:?}",
        plan.unschedulable
    );
    let zonal = pods(
        1,
        "z",
        json!({"nodeSelector": {"topology.kubernetes.io/zone": "test-zone-c"}}),
    );
    let plan = solve(&zonal, &[nodepool("default", json!({}))], &catalog());
    let cheapest = plan.claims[0].cheapest.as_ref().expect("priced");
    assert_eq!(
        (cheapest.zone.as_str(), cheapest.capacity_type.as_str()),
        ("test-zone-c", "on-demand"),
        "zone c has no spot"
    );
    assert_eq!(cheapest.instance_type, "small");
}

#[test]
fn the_plan_is_deterministic() {
    let mut all = pods(30, "a", json!({}));
    all.extend(pods(
        5,
        "b",
        json!({"nodeSelector": {"topology.kubernetes.io/zone": "test-zone-b"}}),
    ));
    let pools = [
        nodepool("default", json!({})),
        nodepool("other", json!({"weight": 5})),
    ];
    assert_eq!(
        solve(&all, &pools, &catalog()),
        solve(&all, &pools, &catalog())
    );
}

#[test]
fn pod_advice_names_the_pools_and_the_cheapest_or_why_none_fits() {
    use kerf::admission::advice::{advise, REQUIREMENTS_ANNOTATION, SUMMARY_ANNOTATION};
    use kerf::scheduling::Scheduler;
    let catalog = catalog();
    let pools = [
        nodepool("default", json!({})),
        nodepool(
            "spot-only",
            json!({"weight": 10, "template": {"spec": {"requirements": [
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}}}),
        ),
    ];
    let scheduler = Scheduler::new(&pools, &catalog);

    let web = &pods(1, "web", json!({}))[0];
    let advice = advise(&scheduler, web);
    assert_eq!(
        advice.summary(),
        "2 nodepools; spot-only: 3 instance types, cheapest small spot test-zone-a $0.0400/h"
    );
    let json: Value =
        serde_json::from_str(&advice.annotations().expect("json")[REQUIREMENTS_ANNOTATION])
            .expect("compact JSON");
    assert_eq!(
        json["requests"],
        json!({"cpu": "1", "memory": "1Gi", "pods": "1"})
    );
    assert_eq!(
        json["nodePools"][1],
        json!({"name": "default", "instanceTypes": 3,
        "cheapest": {"instanceType": "small", "capacityType": "spot", "zone": "test-zone-a", "pricePerHour": 0.04000000000000001}})
    );

    let arm = &pods(
        1,
        "arm",
        json!({"nodeSelector": {"kubernetes.io/arch": "arm64"}}),
    )[0];
    let advice = advise(&scheduler, arm);
    assert!(advice.node_pools.is_empty());
    assert_eq!(
        advice.annotations().expect("json")[SUMMARY_ANNOTATION],
        "no nodepool fits: spot-only: incompatible requirements, key kubernetes.io/arch, requires In [arm64], but only In [amd64] is allowed; default: incompatible requirements, key kubernetes.io/arch, requires In [arm64], but only In [amd64] is allowed"
    );
}

#[test]
fn spot_only_pools_with_few_instance_types_get_a_warning() {
    use kerf::admission::spot::catalog_warnings;
    let spot_only = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "spot"},
        "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}}}});
    let warnings = catalog_warnings(&spot_only, &catalog());
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].contains("this spot-only NodePool allows 4 instance types; spot-to-spot consolidation needs at least 15"), "{warnings:?}");
    let mut mixed = spot_only.clone();
    mixed["spec"]["template"]["spec"]["requirements"][0]["values"] = json!(["spot", "on-demand"]);
    assert_eq!(catalog_warnings(&mixed, &catalog()), Vec::<String>::new());
}

/// Pods labelled `labels`, with `spec` merged in.
fn spread(key: &str, max_skew: i32, when: &str, extra: Value) -> Value {
    let mut constraint = json!({"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when,
                                "labelSelector": {"matchLabels": {"app": "spread"}}});
    merge(&mut constraint, extra);
    json!({"topologySpreadConstraints": [constraint]})
}

/// The single zone each claim is narrowed to, with its pod count.
fn pods_per_zone(plan: &kerf::scheduling::Plan) -> std::collections::BTreeMap<String, usize> {
    let mut zones = std::collections::BTreeMap::new();
    for claim in &plan.claims {
        let zone = claim
            .requirements
            .get("topology.kubernetes.io/zone")
            .and_then(|r| r.values())
            .filter(|v| v.len() == 1)
            .and_then(|v| v.first().cloned())
            .expect("claim narrowed to one zone");
        *zones.entry(zone).or_default() += claim.pods.len();
    }
    zones
}

const ZONE: &str = "topology.kubernetes.io/zone";
const HOSTNAME: &str = "kubernetes.io/hostname";

#[test]
fn zonal_spread_balances_the_zones() {
    let all = labelled(
        6,
        "s",
        json!({"app": "spread"}),
        spread(ZONE, 1, "DoNotSchedule", json!({})),
    );
    let plan = solve(&all, &[nodepool("default", json!({}))], &catalog());
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let zones = pods_per_zone(&plan);
    assert_eq!(
        zones.into_iter().collect::<Vec<_>>(),
        [
            ("test-zone-a".to_owned(), 2),
            ("test-zone-b".to_owned(), 2),
            ("test-zone-c".to_owned(), 2)
        ]
    );
    assert_eq!(plan.claims.len(), 3, "one claim per zone");
}

#[test]
fn unmet_min_domains_forces_spreading() {
    // Only three zones exist, so minDomains 5 is never met: the global minimum is 0 and each zone takes one pod.
    let all = labelled(
        4,
        "s",
        json!({"app": "spread"}),
        spread(ZONE, 1, "DoNotSchedule", json!({"minDomains": 5})),
    );
    let plan = solve(&all, &[nodepool("default", json!({}))], &catalog());
    assert_eq!(
        pods_per_zone(&plan).values().copied().collect::<Vec<_>>(),
        [1, 1, 1]
    );
    assert_eq!(plan.unschedulable.len(), 1);
    let reason = &plan.unschedulable[0].reason;
    assert!(
        reason.contains(
            "topology spread constraint on topology.kubernetes.io/zone (maxSkew 1, DoNotSchedule)"
        ),
        "{reason}"
    );
    // Without minDomains the fourth pod is allowed a second pod in a zone.
    let all = labelled(
        4,
        "s",
        json!({"app": "spread"}),
        spread(ZONE, 1, "DoNotSchedule", json!({})),
    );
    let plan = solve(&all, &[nodepool("default", json!({}))], &catalog());
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
}

#[test]
fn hostname_spread_puts_one_pod_per_claim() {
    let all = labelled(
        4,
        "h",
        json!({"app": "spread"}),
        spread(HOSTNAME, 1, "DoNotSchedule", json!({})),
    );
    let plan = solve(&all, &[nodepool("default", json!({}))], &catalog());
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(plan.claims.len(), 4);
    assert!(plan.claims.iter().all(|c| c.pods.len() == 1));
}

#[test]
fn schedule_anyway_is_relaxed_and_do_not_schedule_is_reported() {
    // Pinned to one zone with minDomains 2: after the first pod the skew cannot be met.
    let pinned = |when: &str| {
        let mut spec = spread(ZONE, 1, when, json!({"minDomains": 2}));
        merge(&mut spec, json!({"nodeSelector": {ZONE: "test-zone-a"}}));
        labelled(3, "p", json!({"app": "spread"}), spec)
    };
    let pools = [nodepool("default", json!({}))];
    let plan = solve(&pinned("ScheduleAnyway"), &pools, &catalog());
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(plan.claims.iter().map(|c| c.pods.len()).sum::<usize>(), 3);

    let plan = solve(&pinned("DoNotSchedule"), &pools, &catalog());
    assert_eq!(plan.claims.iter().map(|c| c.pods.len()).sum::<usize>(), 1);
    assert_eq!(plan.unschedulable.len(), 2);
    for u in &plan.unschedulable {
        assert!(
            u.reason.starts_with("nodepool default: topology spread constraint on topology.kubernetes.io/zone (maxSkew 1, DoNotSchedule)"),
            "{}",
            u.reason
        );
    }
}

#[test]
fn hostname_anti_affinity_gives_one_pod_per_node() {
    let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {"app": "nginx"}}}]}}});
    let mut all = labelled(3, "nginx", json!({"app": "nginx"}), anti);
    // Plain pods with the label may not join them either (the inverse); other pods may.
    all.extend(labelled(2, "plain", json!({"app": "nginx"}), json!({})));
    all.extend(labelled(2, "other", json!({"app": "other"}), json!({})));
    let plan = solve(&all, &[nodepool("default", json!({}))], &catalog());
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    for claim in &plan.claims {
        let nginx = claim
            .pods
            .iter()
            .filter(|p| p.starts_with("default/nginx") || p.starts_with("default/plain"))
            .count();
        let owners = claim
            .pods
            .iter()
            .filter(|p| p.starts_with("default/nginx"))
            .count();
        assert!(
            owners <= 1 && (owners == 0 || nginx == 1),
            "{:?}",
            claim.pods
        );
    }
    assert_eq!(
        plan.claims
            .iter()
            .filter(|c| c.pods.iter().any(|p| p.starts_with("default/nginx")))
            .count(),
        3
    );
}

#[test]
fn zonal_self_affinity_keeps_a_group_in_one_zone() {
    let affinity = json!({
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}}],
        "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": ZONE, "labelSelector": {"matchLabels": {"group": "x"}}}]}}});
    let all = labelled(12, "g", json!({"group": "x"}), affinity);
    let plan = solve(&all, &[nodepool("default", json!({}))], &catalog());
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert!(plan.claims.len() > 1);
    let zones = pods_per_zone(&plan);
    assert_eq!(zones.len(), 1, "{zones:?}");
    assert_eq!(zones.values().sum::<usize>(), 12);
}

#[test]
fn pod_affinity_waits_for_its_target_through_the_requeue() {
    // The followers are larger, so they are tried first; the leader lands later and the requeue places them.
    let follower = json!({
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}],
        "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": ZONE, "labelSelector": {"matchLabels": {"role": "leader"}}}]}}});
    let mut all = labelled(2, "follower", json!({"role": "follower"}), follower);
    all.extend(labelled(
        1,
        "leader",
        json!({"role": "leader"}),
        json!({"nodeSelector": {ZONE: "test-zone-b"}}),
    ));
    let plan = solve(&all, &[nodepool("default", json!({}))], &catalog());
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(
        pods_per_zone(&plan).keys().collect::<Vec<_>>(),
        ["test-zone-b"]
    );
}

#[test]
fn unsatisfiable_preferred_anti_affinity_is_relaxed() {
    let prefers = json!({"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "podAffinityTerm": {"topologyKey": ZONE, "labelSelector": {"matchLabels": {"app": "web"}}}}]}}});
    let all = labelled(5, "web", json!({"app": "web"}), prefers);
    let plan = solve(&all, &[nodepool("default", json!({}))], &catalog());
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(plan.claims.iter().map(|c| c.pods.len()).sum::<usize>(), 5);
}

#[test]
fn topology_plans_are_deterministic() {
    let mut all = labelled(
        9,
        "s",
        json!({"app": "spread"}),
        spread(ZONE, 1, "DoNotSchedule", json!({})),
    );
    all.extend(labelled(
        5,
        "h",
        json!({"app": "spread"}),
        spread(HOSTNAME, 1, "DoNotSchedule", json!({})),
    ));
    all.extend(labelled(
        4,
        "n",
        json!({"app": "nginx"}),
        json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {"app": "nginx"}}}]}}}),
    ));
    let pools = [nodepool("default", json!({}))];
    assert_eq!(
        solve(&all, &pools, &catalog()),
        solve(&all, &pools, &catalog())
    );
}
