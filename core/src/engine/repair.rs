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
mod tests;
