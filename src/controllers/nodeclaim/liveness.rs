//! Giving up on a NodeClaim that does not come up: not launched within [`LAUNCH_TTL`] of its creation, or
//! launched but not registered within the registration TTL (Karpenter: 15 minutes). Pure.

use crate::api::nodeclaim::NodeClaim;
use crate::engine::conditions::{self, LAUNCHED, REGISTERED};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::time::Duration;

/// How long a claim may take to launch before it is deleted.
pub const LAUNCH_TTL: Duration = Duration::from_secs(5 * 60);

/// Whether the claim still has time, and how much.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// Launched and registered, or too young to judge: check again within `recheck_in` (if bounded).
    Alive { recheck_in: Option<Duration> },
    /// Out of time: delete it, for this `disrupted_total` reason.
    Expired { reason: &'static str },
}

pub fn liveness(claim: &NodeClaim, now: Timestamp, registration_ttl: Duration) -> Liveness {
    if conditions::is_true(claim, REGISTERED) {
        return Liveness::Alive { recheck_in: None };
    }
    let (since, ttl, reason) = if conditions::is_true(claim, LAUNCHED) {
        (
            conditions::transitioned_at(claim, LAUNCHED),
            registration_ttl,
            "registration_timeout",
        )
    } else {
        let created = claim.metadata.creation_timestamp.as_ref().map(|t| t.0);
        (created, LAUNCH_TTL, "launch_timeout")
    };
    let Some(since) = since else {
        return Liveness::Alive { recheck_in: None };
    };
    let elapsed = now.duration_since(since);
    let ttl = SignedDuration::try_from(ttl).unwrap_or(SignedDuration::MAX);
    if elapsed >= ttl {
        Liveness::Expired { reason }
    } else {
        let left = Duration::try_from(ttl - elapsed).unwrap_or_default();
        Liveness::Alive {
            recheck_in: Some(left),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(created: &str, conditions: serde_json::Value) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "creationTimestamp": created},
            "spec": {"nodeClassRef": {"group": "g", "kind": "k", "name": "n"}, "requirements": []},
            "status": {"conditions": conditions},
        }))
        .expect("claim")
    }

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn cond(type_: &str, status: &str, time: &str) -> serde_json::Value {
        json!({"type": type_, "status": status, "lastTransitionTime": time, "reason": type_, "message": ""})
    }

    #[test]
    fn an_unlaunched_claim_has_five_minutes_from_its_creation() {
        let c = claim("2026-11-23T00:00:00Z", json!([]));
        let ttl = Duration::from_secs(900);
        assert_eq!(
            liveness(&c, at("2026-11-23T00:04:00Z"), ttl),
            Liveness::Alive {
                recheck_in: Some(Duration::from_secs(60))
            }
        );
        assert_eq!(
            liveness(&c, at("2026-11-23T00:05:00Z"), ttl),
            Liveness::Expired {
                reason: "launch_timeout"
            }
        );
    }

    #[test]
    fn a_launched_claim_has_the_registration_ttl_from_its_launch() {
        let ttl = Duration::from_secs(900);
        let c = claim(
            "2026-11-23T00:00:00Z",
            json!([cond("Launched", "True", "2026-11-23T00:01:00Z")]),
        );
        assert_eq!(
            liveness(&c, at("2026-11-23T00:15:30Z"), ttl),
            Liveness::Alive {
                recheck_in: Some(Duration::from_secs(30))
            }
        );
        assert_eq!(
            liveness(&c, at("2026-11-23T00:16:00Z"), ttl),
            Liveness::Expired {
                reason: "registration_timeout"
            }
        );
        let registered = claim(
            "2026-11-23T00:00:00Z",
            json!([
                cond("Launched", "True", "2026-11-23T00:01:00Z"),
                cond("Registered", "True", "2026-11-23T00:02:00Z")
            ]),
        );
        assert_eq!(
            liveness(&registered, at("2026-11-24T00:00:00Z"), ttl),
            Liveness::Alive { recheck_in: None }
        );
    }
}
