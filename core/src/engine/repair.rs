//! Node repair (the `NodeRepair` feature gate; Karpenter's `node.health` controller): a node whose Node reports
//! an unhealthy condition that one of the cloud provider's repair policies names, for longer than that policy
//! tolerates, has its NodeClaim deleted at once — no disruption budget, no `do-not-disrupt`, and a termination
//! deadline of *now* (the `karpenter.sh/nodeclaim-termination-timestamp` annotation), so its pods are deleted
//! rather than evicted and the instance goes without waiting for volumes.
//!
//! Repair holds back while too much is broken: when more than 20% (rounded up) of the Nodes of the claim's
//! NodePool — or of the whole cluster, for a claim without a NodePool — report any unhealthy condition, no node
//! of that scope is repaired and each gets a `NodeRepairBlocked` Event instead (re-checked every 5 minutes),
//! since replacing a large part of a pool at once is more likely to hurt than a cluster-wide fault is to heal.
//!
//! Pure: [`decide`] takes the Nodes, the claims that own them and the time; both drivers (the `node.health`
//! controller and `kerf simulate`'s timeline) carry out its [`Repair`]s.

use crate::api::labels;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::collections::BTreeMap;

/// A condition a Node may report, and how long it may report it before the node is replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepairPolicy {
    pub condition: &'static str,
    /// The status that is unhealthy (`False` or `Unknown`).
    pub status: &'static str,
    pub toleration: SignedDuration,
}

const fn minutes(m: i64) -> SignedDuration {
    SignedDuration::from_secs(m * 60)
}

/// The AWS provider's repair policies (Karpenter AWS v1.14 `RepairPolicies`): the kubelet's `Ready` condition
/// `False` or `Unknown` for 30 minutes, and the conditions of the EKS node monitoring agent — accelerated
/// hardware for 10 minutes, storage, networking, kernel and container runtime for 30.
pub const AWS_POLICIES: [RepairPolicy; 7] = [
    RepairPolicy {
        condition: "Ready",
        status: "False",
        toleration: minutes(30),
    },
    RepairPolicy {
        condition: "Ready",
        status: "Unknown",
        toleration: minutes(30),
    },
    RepairPolicy {
        condition: "AcceleratedHardwareReady",
        status: "False",
        toleration: minutes(10),
    },
    RepairPolicy {
        condition: "StorageReady",
        status: "False",
        toleration: minutes(30),
    },
    RepairPolicy {
        condition: "NetworkingReady",
        status: "False",
        toleration: minutes(30),
    },
    RepairPolicy {
        condition: "KernelReady",
        status: "False",
        toleration: minutes(30),
    },
    RepairPolicy {
        condition: "ContainerRuntimeReady",
        status: "False",
        toleration: minutes(30),
    },
];

/// At most this share of a scope's Nodes (rounded up) may be unhealthy for repair to go ahead.
pub const ALLOWED_UNHEALTHY_PERCENT: usize = 20;
/// How soon a node whose repair was held back is looked at again.
pub const BLOCKED_RECHECK: SignedDuration = minutes(5);
/// Reason of the Event on a Node whose repair is held back.
pub const NODE_REPAIR_BLOCKED: &str = "NodeRepairBlocked";
/// The `reason` of `karpenter_nodeclaims_disrupted_total` for a repaired node.
pub const UNHEALTHY_REASON: &str = "unhealthy";

/// A Node as repair sees it.
#[derive(Clone, Copy, Debug)]
pub struct NodeHealth<'a> {
    pub name: &'a str,
    /// The Node's `karpenter.sh/nodepool` label: which pool it counts in.
    pub pool: Option<&'a str>,
    pub conditions: &'a [NodeCondition],
    /// The NodeClaim that owns it; a Node without one is counted but never repaired.
    pub claim: Option<ClaimHealth<'a>>,
}

impl<'a> NodeHealth<'a> {
    /// `node` as repair sees it, owned by `claim`.
    pub fn of(node: &'a Node, claim: Option<ClaimHealth<'a>>) -> Self {
        NodeHealth {
            name: node.metadata.name.as_deref().unwrap_or_default(),
            pool: pool_label(node.metadata.labels.as_ref()),
            conditions: node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_deref())
                .unwrap_or_default(),
            claim,
        }
    }
}

/// What repair needs of a Node's NodeClaim.
#[derive(Clone, Copy, Debug)]
pub struct ClaimHealth<'a> {
    pub name: &'a str,
    /// The claim's `karpenter.sh/nodepool` label: whose Nodes are its scope (none: the whole cluster).
    pub pool: Option<&'a str>,
    /// Being deleted already: repair only brings its termination deadline forward.
    pub deleting: bool,
    /// Its `karpenter.sh/nodeclaim-termination-timestamp` annotation.
    pub termination_timestamp: Option<&'a str>,
}

/// The unhealthy condition a node is judged by: of the policies that match, the one whose toleration ends
/// first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unhealthy {
    pub condition: String,
    /// When its toleration ends.
    pub due: Timestamp,
}

/// What to do about one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Unhealthy, still within its toleration: look again at `due`.
    Tolerated(Unhealthy),
    /// Past its toleration, but too much of its scope is unhealthy: publish [`NODE_REPAIR_BLOCKED`] with
    /// `message` on the Node and look again after [`BLOCKED_RECHECK`].
    Blocked { condition: String, message: String },
    /// Replace it: stamp the claim's termination timestamp with `stamp` (when `Some`) and delete the claim
    /// (unless it is being deleted already).
    Repair {
        condition: String,
        stamp: Option<String>,
        delete: bool,
    },
}

/// One node's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repair {
    pub node: String,
    pub claim: String,
    /// The claim's NodePool label, empty without one.
    pub pool: String,
    pub verdict: Verdict,
}

/// The condition `conditions` make a node unhealthy by, under `policies`, or `None` when it is healthy. A
/// condition without a transition time counts from the epoch (long past any toleration), as Go's zero time does.
pub fn unhealthy(conditions: &[NodeCondition], policies: &[RepairPolicy]) -> Option<Unhealthy> {
    policies
        .iter()
        .filter_map(|policy| {
            let condition = conditions.iter().find(|c| c.type_ == policy.condition)?;
            (condition.status == policy.status).then(|| {
                let since = condition
                    .last_transition_time
                    .as_ref()
                    .map_or(Timestamp::UNIX_EPOCH, |t| t.0);
                Unhealthy {
                    condition: policy.condition.to_owned(),
                    due: since.saturating_add(policy.toleration).unwrap_or(since),
                }
            })
        })
        .min_by_key(|u| u.due)
}

/// Whether `unhealthy` of `total` Nodes is within the share repair tolerates (rounded up, as a
/// PodDisruptionBudget's percentages are: one of three may be unhealthy).
pub fn within_threshold(unhealthy: usize, total: usize) -> bool {
    let allowed = (total * ALLOWED_UNHEALTHY_PERCENT).div_ceil(100);
    unhealthy <= allowed
}

/// The annotation value to stamp a claim being repaired with at `now`, or `None` when the one it carries is
/// already past (Karpenter keeps a deadline that has passed and replaces one still ahead).
pub fn termination_stamp(current: Option<&str>, now: Timestamp) -> Option<String> {
    let passed = current
        .and_then(|t| t.parse::<Timestamp>().ok())
        .is_some_and(|t| t < now);
    (!passed).then(|| rfc3339_seconds(now))
}

/// `t` as Go's `time.RFC3339` writes it in UTC: whole seconds.
pub fn rfc3339_seconds(t: Timestamp) -> String {
    Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

/// The verdicts on every unhealthy node of `nodes` (all Nodes of the cluster) at `now`, in the order of
/// `nodes`. Healthy nodes and Nodes no claim owns get none.
pub fn decide(nodes: &[NodeHealth<'_>], policies: &[RepairPolicy], now: Timestamp) -> Vec<Repair> {
    let is_unhealthy: Vec<bool> = nodes
        .iter()
        .map(|n| unhealthy(n.conditions, policies).is_some())
        .collect();
    // Nodes and unhealthy Nodes per pool label, and in the cluster.
    let mut per_pool: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (node, sick) in nodes.iter().zip(&is_unhealthy) {
        if let Some(pool) = node.pool {
            let counts = per_pool.entry(pool).or_default();
            counts.0 += 1;
            counts.1 += usize::from(*sick);
        }
    }
    let cluster_unhealthy = is_unhealthy.iter().filter(|s| **s).count();
    let mut repairs = Vec::new();
    for node in nodes {
        let (Some(claim), Some(found)) = (node.claim, unhealthy(node.conditions, policies)) else {
            continue;
        };
        let verdict = if now < found.due {
            Verdict::Tolerated(found)
        } else {
            let blocked = match claim.pool {
                Some(pool) => {
                    let (total, sick) = per_pool.get(pool).copied().unwrap_or_default();
                    (!within_threshold(sick, total)).then(|| {
                        format!(
                            "more than {ALLOWED_UNHEALTHY_PERCENT}% nodes are unhealthy in the nodepool"
                        )
                    })
                }
                // Karpenter's wording, its typo included: alerts match on it.
                None => (!within_threshold(cluster_unhealthy, nodes.len())).then(|| {
                    format!(
                        "more then {ALLOWED_UNHEALTHY_PERCENT}% nodes are unhealthy in the cluster"
                    )
                }),
            };
            match blocked {
                Some(message) => Verdict::Blocked {
                    condition: found.condition,
                    message,
                },
                None => Verdict::Repair {
                    condition: found.condition,
                    stamp: termination_stamp(claim.termination_timestamp, now),
                    delete: !claim.deleting,
                },
            }
        };
        repairs.push(Repair {
            node: node.name.to_owned(),
            claim: claim.name.to_owned(),
            pool: claim.pool.unwrap_or_default().to_owned(),
            verdict,
        });
    }
    repairs
}

/// When the earliest of `repairs` wants another look: a toleration ending, or a held-back repair's re-check.
pub fn next_look(repairs: &[Repair], now: Timestamp) -> Option<Timestamp> {
    repairs
        .iter()
        .filter_map(|r| match &r.verdict {
            Verdict::Tolerated(u) => Some(u.due),
            Verdict::Blocked { .. } => now.checked_add(BLOCKED_RECHECK).ok(),
            Verdict::Repair { .. } => None,
        })
        .min()
}

/// A condition name as Karpenter labels metrics with it (`AcceleratedHardwareReady` →
/// `accelerated_hardware_ready`).
pub fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    let mut previous: Option<char> = None;
    let chars: Vec<char> = name.chars().collect();
    for (i, c) in chars.iter().copied().enumerate() {
        if c.is_uppercase() {
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            let after_lower = previous.is_some_and(|p| p.is_lowercase() || p.is_ascii_digit());
            let after_upper = previous.is_some_and(char::is_uppercase);
            if after_lower || (after_upper && next_lower) {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
        previous = Some(c);
    }
    out
}

/// The Node's pool label, as [`NodeHealth::pool`] wants it.
pub fn pool_label(labels: Option<&BTreeMap<String, String>>) -> Option<&str> {
    labels?.get(labels::NODEPOOL).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    const T0: &str = "2026-11-27T00:00:00Z";

    /// The fake cloud provider's policy in Karpenter's health suite: `BadNode` `False` for 30 minutes.
    const BAD_NODE: [RepairPolicy; 1] = [RepairPolicy {
        condition: "BadNode",
        status: "False",
        toleration: minutes(30),
    }];

    fn condition(type_: &str, status: &str, since: &str) -> NodeCondition {
        NodeCondition {
            type_: type_.into(),
            status: status.into(),
            last_transition_time: Some(Time(at(since))),
            ..NodeCondition::default()
        }
    }

    struct Fixture {
        name: String,
        pool: Option<String>,
        conditions: Vec<NodeCondition>,
        claim_pool: Option<String>,
        deleting: bool,
        stamp: Option<String>,
    }

    fn node(name: &str, pool: Option<&str>, conditions: Vec<NodeCondition>) -> Fixture {
        Fixture {
            name: name.into(),
            pool: pool.map(Into::into),
            conditions,
            claim_pool: pool.map(Into::into),
            deleting: false,
            stamp: None,
        }
    }

    fn view(fixtures: &[Fixture]) -> Vec<NodeHealth<'_>> {
        fixtures
            .iter()
            .map(|f| NodeHealth {
                name: &f.name,
                pool: f.pool.as_deref(),
                conditions: &f.conditions,
                claim: Some(ClaimHealth {
                    name: &f.name,
                    pool: f.claim_pool.as_deref(),
                    deleting: f.deleting,
                    termination_timestamp: f.stamp.as_deref(),
                }),
            })
            .collect()
    }

    fn verdict_of(fixtures: &[Fixture], policies: &[RepairPolicy], now: &str) -> Option<Verdict> {
        decide(&view(fixtures), policies, at(now))
            .into_iter()
            .find(|r| r.node == fixtures[0].name)
            .map(|r| r.verdict)
    }

    fn repaired(verdict: &Option<Verdict>) -> bool {
        matches!(verdict, Some(Verdict::Repair { delete: true, .. }))
    }

    /// Karpenter's node health suite, "Reconciliation": which conditions, statuses and durations delete the
    /// claim.
    #[test]
    fn a_matching_condition_past_its_toleration_replaces_the_node() {
        let cases = [
            // "should delete nodes that are unhealthy by the cloud provider"
            ("BadNode", "False", "2026-11-27T01:00:00Z", true),
            // "should not delete node when unhealthy type does not match cloud provider passed in value"
            ("FakeHealthyNode", "False", "2026-11-27T01:00:00Z", false),
            // "should not delete node when health status does not match cloud provider passed in value"
            ("BadNode", "True", "2026-11-27T01:00:00Z", false),
            // "should not delete node when health duration is not reached"
            ("BadNode", "False", "2026-11-27T00:20:00Z", false),
            // exactly at the end of the toleration (Karpenter: not before it)
            ("BadNode", "False", "2026-11-27T00:30:00Z", true),
        ];
        for (type_, status, now, expected) in cases {
            let nodes = [node("a", Some("pool"), vec![condition(type_, status, T0)])];
            let verdict = verdict_of(&nodes, &BAD_NODE, now);
            assert_eq!(
                repaired(&verdict),
                expected,
                "{type_}={status} at {now}: {verdict:?}"
            );
        }
    }

    /// "should set annotation termination grace period when force termination is started", "should not respect
    /// termination grace period if set on the nodepool", "should not update termination grace period if set
    /// before the current time".
    #[test]
    fn the_termination_timestamp_becomes_now_unless_it_has_passed() {
        let now = "2026-11-27T01:00:00Z";
        let cases = [
            (None, Some(now)),
            (Some("2026-11-27T03:00:00Z"), Some(now)),
            (Some("2026-11-27T00:57:00Z"), None),
            (Some("not a time"), Some(now)),
        ];
        for (current, expected) in cases {
            let mut nodes = [node(
                "a",
                Some("pool"),
                vec![condition("BadNode", "False", T0)],
            )];
            nodes[0].stamp = current.map(Into::into);
            let verdict = verdict_of(&nodes, &BAD_NODE, now);
            let Some(Verdict::Repair { stamp, .. }) = verdict else {
                panic!("{current:?}: {verdict:?}");
            };
            assert_eq!(stamp.as_deref(), expected, "{current:?}");
        }
    }

    /// "should return the requeue interval for the condition closest to its terminationDuration" and "... for the
    /// time between now and when the nodeClaim termination time".
    #[test]
    fn the_condition_whose_toleration_ends_first_decides_when_to_look_again() {
        let policies = [
            RepairPolicy {
                condition: "BadNode",
                status: "False",
                toleration: minutes(60),
            },
            RepairPolicy {
                condition: "ValidUnhealthyCondition",
                status: "False",
                toleration: minutes(30),
            },
        ];
        let nodes = [node(
            "a",
            Some("pool"),
            vec![
                condition("ValidUnhealthyCondition", "False", T0),
                condition("BadNode", "False", T0),
            ],
        )];
        let now = at("2026-11-27T00:27:00Z");
        let repairs = decide(&view(&nodes), &policies, now);
        assert_eq!(
            next_look(&repairs, now),
            Some(at("2026-11-27T00:30:00Z")),
            "{repairs:?}"
        );
        let single = [node(
            "a",
            Some("pool"),
            vec![condition("BadNode", "False", T0)],
        )];
        let repairs = decide(&view(&single), &BAD_NODE, now);
        assert_eq!(next_look(&repairs, now), Some(at("2026-11-27T00:30:00Z")));
    }

    /// "Forceful termination": "should ignore unhealthy nodes if more then 20% of the nodes are unhealthy in a
    /// nodepool" (3 of 10), "... in a cluster" (the same without a pool), "should consider round up when there is
    /// a low number of nodes for a nodepool" (1 of 3).
    #[test]
    fn repair_holds_back_while_more_than_a_fifth_of_the_scope_is_unhealthy() {
        let now = "2026-11-27T01:00:00Z";
        for pool in [Some("pool"), None] {
            let nodes: Vec<Fixture> = (0..10)
                .map(|i| {
                    let conditions = if i < 3 {
                        vec![condition("BadNode", "False", T0)]
                    } else {
                        Vec::new()
                    };
                    node(&format!("n{i}"), pool, conditions)
                })
                .collect();
            let repairs = decide(&view(&nodes), &BAD_NODE, at(now));
            assert_eq!(repairs.len(), 3, "{pool:?}");
            for repair in &repairs {
                let Verdict::Blocked { message, .. } = &repair.verdict else {
                    panic!("{pool:?}: {repair:?}");
                };
                let scope = if pool.is_some() {
                    "nodepool"
                } else {
                    "cluster"
                };
                assert!(
                    message.ends_with(&format!("unhealthy in the {scope}")),
                    "{message}"
                );
            }
            assert_eq!(
                next_look(&repairs, at(now)),
                Some(at(now) + BLOCKED_RECHECK)
            );
        }
        let few: Vec<Fixture> = (0..3)
            .map(|i| {
                let conditions = if i == 0 {
                    vec![condition("BadNode", "False", T0)]
                } else {
                    Vec::new()
                };
                node(&format!("n{i}"), Some("pool"), conditions)
            })
            .collect();
        assert!(repaired(&verdict_of(&few, &BAD_NODE, now)));
    }

    /// The pool's share counts only that pool's Nodes: another pool's broken nodes do not hold it back.
    #[test]
    fn each_pool_is_its_own_scope() {
        let now = "2026-11-27T01:00:00Z";
        let mut nodes = vec![node(
            "a",
            Some("one"),
            vec![condition("BadNode", "False", T0)],
        )];
        for i in 0..4 {
            nodes.push(node(&format!("one-{i}"), Some("one"), Vec::new()));
            nodes.push(node(
                &format!("two-{i}"),
                Some("two"),
                vec![condition("BadNode", "False", T0)],
            ));
        }
        assert!(repaired(&verdict_of(&nodes, &BAD_NODE, now)));
    }

    /// "should ignore node disruption budgets", "should ignore do-not-disrupt on a node": neither is an input.
    /// A claim being deleted already only has its deadline brought forward.
    #[test]
    fn a_claim_being_deleted_is_not_deleted_again() {
        let mut nodes = [node(
            "a",
            Some("pool"),
            vec![condition("BadNode", "False", T0)],
        )];
        nodes[0].deleting = true;
        let verdict = verdict_of(&nodes, &BAD_NODE, "2026-11-27T01:00:00Z");
        assert!(
            matches!(
                verdict,
                Some(Verdict::Repair {
                    delete: false,
                    stamp: Some(_),
                    ..
                })
            ),
            "{verdict:?}"
        );
    }

    #[test]
    fn nodes_without_a_claim_are_counted_but_not_repaired() {
        let fixtures = [node("a", None, vec![condition("Ready", "Unknown", T0)])];
        let mut nodes = view(&fixtures);
        nodes[0].claim = None;
        assert!(decide(&nodes, &AWS_POLICIES, at("2026-11-27T01:00:00Z")).is_empty());
    }

    /// The AWS policies: Ready False or Unknown for 30 minutes, accelerated hardware for 10.
    #[test]
    fn the_aws_policies_tolerate_what_karpenter_s_do() {
        let cases = [
            ("Ready", "False", "2026-11-27T00:29:59Z", false),
            ("Ready", "False", "2026-11-27T00:30:00Z", true),
            ("Ready", "Unknown", "2026-11-27T00:30:00Z", true),
            ("Ready", "True", "2026-11-27T05:00:00Z", false),
            (
                "AcceleratedHardwareReady",
                "False",
                "2026-11-27T00:10:00Z",
                true,
            ),
            ("KernelReady", "False", "2026-11-27T00:10:00Z", false),
            ("KernelReady", "Unknown", "2026-11-27T05:00:00Z", false),
            (
                "ContainerRuntimeReady",
                "False",
                "2026-11-27T00:30:00Z",
                true,
            ),
        ];
        for (type_, status, now, expected) in cases {
            let nodes = [node("a", Some("pool"), vec![condition(type_, status, T0)])];
            let verdict = verdict_of(&nodes, &AWS_POLICIES, now);
            assert_eq!(
                repaired(&verdict),
                expected,
                "{type_}={status} at {now}: {verdict:?}"
            );
        }
    }

    #[test]
    fn thresholds_round_up() {
        assert!(within_threshold(0, 0));
        assert!(within_threshold(1, 1));
        assert!(within_threshold(1, 5));
        assert!(!within_threshold(2, 5));
        assert!(within_threshold(2, 6));
        assert!(!within_threshold(3, 10));
    }

    #[test]
    fn condition_names_become_metric_labels_as_karpenter_writes_them() {
        for (name, label) in [
            ("Ready", "ready"),
            ("AcceleratedHardwareReady", "accelerated_hardware_ready"),
            ("BadNode", "bad_node"),
            ("ContainerRuntimeReady", "container_runtime_ready"),
        ] {
            assert_eq!(snake_case(name), label);
        }
    }

    #[test]
    fn stamps_are_whole_seconds() {
        assert_eq!(
            rfc3339_seconds(at("2026-11-27T01:02:03.456Z")),
            "2026-11-27T01:02:03Z"
        );
    }
}
