//! Static capacity (the `StaticCapacity` feature gate; Karpenter's `static.provisioning` and
//! `static.deprovisioning` controllers): a NodePool with `spec.replicas` keeps exactly that many NodeClaims,
//! whatever the pods ask for. Below it, claims are made from the pool's template alone (no pods, no requests: the
//! launch takes the cheapest offering the template allows), within `limits.nodes`; above it, the surplus is
//! deleted — claims not launched yet first, then empty nodes, then the nodes cheapest to disrupt, nodes with
//! `do-not-disrupt` pods last. Consolidation leaves static pools alone; drift replaces their nodes one for one
//! ([`crate::disruption`]).
//!
//! Pure: [`scale`] decides from the pool's claims, their pods and the time; both drivers (the
//! `static.capacity` controller and `kerf simulate`'s timeline) carry it out, making the claims with
//! [`static_claim`].

use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::catalog::Resources;
use crate::disruption::{is_daemonset_pod, reschedule_cost, scan_pods};
use crate::engine::provisioning::claim::node_claim;
use crate::scheduling::{pool_requirements, PlannedClaim};
pub use crate::scheduling::{replicas_of, static_replacement};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

/// How often a static pool is looked at without a change (Karpenter requeues after a minute).
pub const RECHECK: std::time::Duration = std::time::Duration::from_secs(60);

/// One NodeClaim of a static pool, as the decision needs it.
#[derive(Clone, Copy, Debug)]
pub struct StaticClaim<'a> {
    pub name: &'a str,
    /// It has a provider ID: an instance exists (or is being made) for it.
    pub launched: bool,
    /// Being deleted.
    pub deleting: bool,
    /// A disruption command holds it (its replacement is on the way): counted apart, as Karpenter's
    /// `PendingDisruption`.
    pub pending_disruption: bool,
    /// The pods bound to its Node.
    pub pods: &'a [Pod],
    /// The share of its life left (`expireAfter`), 1 without expiry.
    pub lifetime_remaining: f64,
}

/// What to do to a static pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scale {
    /// As many claims as replicas (or a scale-down or replacement under way).
    Hold,
    /// Make this many claims.
    Up(u64),
    /// Below its replicas, but `limits.nodes` allows no more: `nodepool node limit reached`.
    AtLimit { wanted: u64 },
    /// Delete these claims, in this order.
    Down(Vec<String>),
}

/// How `claims` (every claim of the pool) meet `replicas` under a node limit of `node_limit`, at `now`.
pub fn scale(
    replicas: u64,
    node_limit: Option<u64>,
    claims: &[StaticClaim<'_>],
    now: Timestamp,
) -> Scale {
    let deleting = count(claims.iter().filter(|c| c.deleting));
    let pending = count(
        claims
            .iter()
            .filter(|c| !c.deleting && c.pending_disruption),
    );
    let active: Vec<&StaticClaim<'_>> = claims
        .iter()
        .filter(|c| !c.deleting && !c.pending_disruption)
        .collect();
    let running = count(active.iter());
    if running > replicas {
        let surplus = usize::try_from(running - replicas).unwrap_or(usize::MAX);
        return Scale::Down(surplus_claims(&active, surplus, now));
    }
    // A claim being replaced by drift still counts until its replacement is up.
    if running + pending >= replicas {
        return Scale::Hold;
    }
    let wanted = replicas - running;
    let room = node_limit.map_or(u64::MAX, |limit| {
        limit.saturating_sub(running + deleting + pending)
    });
    match wanted.min(room) {
        0 => Scale::AtLimit { wanted },
        granted => Scale::Up(granted),
    }
}

fn count<T>(items: impl Iterator<Item = T>) -> u64 {
    u64::try_from(items.count()).unwrap_or(u64::MAX)
}

/// The `surplus` claims to delete: not launched first, then empty (only DaemonSet pods, none `do-not-disrupt`),
/// then by rescheduling cost × lifetime left, nodes with an active `do-not-disrupt` pod last; names break ties.
fn surplus_claims(active: &[&StaticClaim<'_>], surplus: usize, now: Timestamp) -> Vec<String> {
    let blocked = |c: &StaticClaim<'_>| scan_pods(c.pods, now).blocking.is_some();
    let empty = |c: &StaticClaim<'_>| c.pods.iter().all(is_daemonset_pod) && !blocked(c);
    let mut ordered: Vec<(u8, bool, f64, &str)> = active
        .iter()
        .map(|c| {
            let tier = if !c.launched {
                0
            } else if empty(c) {
                1
            } else {
                2
            };
            let cost = if tier == 2 {
                reschedule_cost(c.pods) * c.lifetime_remaining
            } else {
                0.0
            };
            (tier, tier == 2 && blocked(c), cost, c.name)
        })
        .collect();
    ordered.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then(a.1.cmp(&b.1))
            .then(a.2.total_cmp(&b.2))
            .then(a.3.cmp(b.3))
    });
    ordered
        .into_iter()
        .take(surplus)
        .map(|(.., name)| name.to_owned())
        .collect()
}

/// A claim of static pool `pool` made from its template alone: the template's requirements, labels, taints and
/// hashes, no instance-type list and no resource requests (the launch picks the cheapest offering the template
/// allows), named from `seed` (different for every claim the driver makes). `None` when the pool's requirements
/// do not parse (admission refuses such a pool).
pub fn static_claim(pool: &NodePool, seed: &str) -> Option<NodeClaim> {
    let planned = PlannedClaim {
        nodepool: pool.metadata.name.clone().unwrap_or_default(),
        requirements: pool_requirements(pool).ok()?,
        instance_types: Default::default(),
        pods: Vec::new(),
        requests: Resources::default(),
        cheapest: None,
    };
    let mut claim = node_claim(pool, &planned, &[&format!("static/{seed}")]);
    claim.spec.resources = None;
    Some(claim)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2026-11-27T12:00:00Z".parse().unwrap()
    }

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    fn app_pod() -> Pod {
        pod(json!({"metadata": {"name": "web", "namespace": "default",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u"}]},
            "spec": {"containers": []}}))
    }

    fn daemon_pod() -> Pod {
        pod(json!({"metadata": {"name": "ds", "namespace": "default",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u"}]},
            "spec": {"containers": []}}))
    }

    fn pinned_pod() -> Pod {
        pod(
            json!({"metadata": {"name": "pinned", "namespace": "default",
            "annotations": {"karpenter.sh/do-not-disrupt": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "p", "uid": "u"}]},
            "spec": {"containers": []}}),
        )
    }

    fn launched<'a>(name: &'a str, pods: &'a [Pod]) -> StaticClaim<'a> {
        StaticClaim {
            name,
            launched: true,
            deleting: false,
            pending_disruption: false,
            pods,
            lifetime_remaining: 1.0,
        }
    }

    /// Karpenter's static provisioning suite: "should create nodeclaims when current node count is less than
    /// desired replicas", "should create additional nodeclaims to reach desired replicas", "should handle zero
    /// replicas", "should return early if current node count exceeds desired replicas" (a scale-down then),
    /// "should not create additional nodeclaims" (claims not launched or not registered count).
    #[test]
    fn claims_are_made_up_to_the_replicas() {
        let none: [Pod; 0] = [];
        let one = [launched("a", &none)];
        assert_eq!(scale(2, None, &[], now()), Scale::Up(2));
        assert_eq!(scale(3, None, &one, now()), Scale::Up(2));
        assert_eq!(scale(0, None, &[], now()), Scale::Hold);
        let mut unlaunched = launched("b", &none);
        unlaunched.launched = false;
        let three = [launched("a", &none), unlaunched, launched("c", &none)];
        assert_eq!(scale(3, None, &three, now()), Scale::Hold);
        assert_eq!(scale(500, None, &[], now()), Scale::Up(500));
    }

    /// "should not create additional nodeclaims when node limits are reached", and a limit that allows some.
    #[test]
    fn the_node_limit_caps_what_is_made() {
        let none: [Pod; 0] = [];
        let one = [launched("a", &none)];
        assert_eq!(scale(3, Some(1), &one, now()), Scale::AtLimit { wanted: 2 });
        assert_eq!(scale(3, Some(2), &one, now()), Scale::Up(1));
        let mut going = launched("b", &none);
        going.deleting = true;
        // A claim being deleted still holds its place under the limit until it is gone.
        assert_eq!(
            scale(3, Some(2), &[launched("a", &none), going], now()),
            Scale::AtLimit { wanted: 2 }
        );
        assert_eq!(
            scale(3, None, &[launched("a", &none), going], now()),
            Scale::Up(2)
        );
    }

    /// A node drift is replacing counts until its replacement is up: no extra claim meanwhile.
    #[test]
    fn a_claim_pending_disruption_holds_its_place() {
        let none: [Pod; 0] = [];
        let mut old = launched("old", &none);
        old.pending_disruption = true;
        let claims = [launched("a", &none), launched("replacement", &none), old];
        assert_eq!(scale(2, None, &claims, now()), Scale::Hold);
        // ... and is not picked for a scale-down either: only running claims are.
        assert_eq!(
            scale(1, None, &claims, now()),
            Scale::Down(vec!["a".into()])
        );
    }

    /// Karpenter's static deprovisioning suite: "should terminate excess nodeclaims", "should handle zero replicas
    /// by terminating all nodeclaims", "should only consider running nodeclaims and not deleting nodeclaims",
    /// "should prioritize nodeclaims that have unresolved providerID", "should prioritize empty nodes (with only
    /// daemonset pods) for termination", "should terminate non-empty nodes when empty nodes are insufficient" and
    /// its disruption cost ordering (do-not-disrupt last).
    #[test]
    fn the_surplus_goes_unlaunched_first_then_empty_then_cheapest_to_disrupt() {
        let none: [Pod; 0] = [];
        let daemons = [daemon_pod()];
        let one_app = [app_pod()];
        let two_apps = [app_pod(), app_pod()];
        let pinned = [pinned_pod()];
        let mut unlaunched = launched("e-unlaunched", &none);
        unlaunched.launched = false;
        let mut gone = launched("f-deleting", &none);
        gone.deleting = true;
        let claims = [
            launched("a-pinned", &pinned),
            launched("b-two", &two_apps),
            launched("c-daemons", &daemons),
            launched("d-one", &one_app),
            unlaunched,
            gone,
        ];
        let order = |n: u64| match scale(5 - n, None, &claims, now()) {
            Scale::Down(names) => names,
            other => panic!("{other:?}"),
        };
        assert_eq!(order(1), ["e-unlaunched"]);
        assert_eq!(order(2), ["e-unlaunched", "c-daemons"]);
        assert_eq!(
            order(5),
            ["e-unlaunched", "c-daemons", "d-one", "b-two", "a-pinned"]
        );
        // Lifetime left scales the cost: a node about to expire goes before a cheaper young one.
        let mut old = launched("b-two", &two_apps);
        old.lifetime_remaining = 0.1;
        let aging = [launched("d-one", &one_app), old];
        assert_eq!(
            scale(1, None, &aging, now()),
            Scale::Down(vec!["b-two".into()])
        );
    }

    #[test]
    fn a_static_claim_is_the_template_without_requests_or_instance_types() {
        let pool: NodePool = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "fixed", "uid": "pool-uid"},
            "spec": {"replicas": 3, "limits": {"nodes": "5"}, "template": {
                "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
                "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                         "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                         "taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}}}
        }))
        .unwrap();
        assert_eq!(replicas_of(&pool), Some((3, Some(5))));
        let a = static_claim(&pool, "1").expect("claim");
        let b = static_claim(&pool, "2").expect("claim");
        assert_ne!(a.metadata.name, b.metadata.name);
        assert!(a.metadata.name.as_deref().unwrap().starts_with("fixed-"));
        let labels = a.metadata.labels.clone().unwrap();
        assert_eq!(
            labels.get("karpenter.sh/nodepool").map(String::as_str),
            Some("fixed")
        );
        assert_eq!(labels.get("team").map(String::as_str), Some("a"));
        assert!(a.spec.resources.is_none());
        assert!(!a
            .spec
            .requirements
            .iter()
            .any(|r| r.key == "node.kubernetes.io/instance-type"));
        assert_eq!(a.spec.taints.as_ref().map(Vec::len), Some(1));
        assert!(a
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .contains_key("karpenter.sh/nodepool-hash"));
    }
}
