//! A node's clock-driven facts (controller-behaviour.md §3.3 and §3.5): when it becomes `Consolidatable`
//! (`consolidateAfter` after its last pod event, else after initialization) and when it expires
//! (`creationTimestamp + expireAfter`; `Never` disables both).

use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::api::validation::grammar::parse_duration;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::time::Duration;

/// The CRD default of `expireAfter`.
pub const DEFAULT_EXPIRE_AFTER: &str = "720h";
/// kerf's default of `consolidateAfter` (api-rules.md §2.1, kerf+).
pub const DEFAULT_CONSOLIDATE_AFTER: &str = "0s";
const NEVER: &str = "Never";

/// A field these facts need that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LifetimeError {
    #[error("{field}: invalid duration {value:?}")]
    Duration { field: &'static str, value: String },
    #[error("{field}: invalid time {value:?}")]
    Time { field: &'static str, value: String },
    #[error("the NodeClaim has no creationTimestamp")]
    NoCreationTimestamp,
}

/// When a node may be consolidated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consolidatable {
    /// `Consolidatable=True` (since this instant).
    Since(Timestamp),
    /// Not yet: from this instant on.
    From(Timestamp),
    /// `consolidateAfter: Never`: not by consolidation nor emptiness.
    Never,
    /// Neither a pod event nor initialization yet, so the clock has not started.
    NotInitialized,
}

impl Consolidatable {
    pub fn is_consolidatable(self) -> bool {
        matches!(self, Consolidatable::Since(_))
    }
}

/// `Consolidatable` of `claim` (of `pool`) at `now`: `now − t0 ≥ consolidateAfter`, where `t0` is
/// `status.lastPodEventTime`, else the time the claim became `Initialized`.
pub fn consolidatable(
    pool: &NodePool,
    claim: &NodeClaim,
    now: Timestamp,
) -> Result<Consolidatable, LifetimeError> {
    let after = pool
        .spec
        .disruption
        .as_ref()
        .and_then(|d| d.consolidate_after.as_deref())
        .unwrap_or(DEFAULT_CONSOLIDATE_AFTER);
    let Some(after) = duration_or_never("spec.disruption.consolidateAfter", after)? else {
        return Ok(Consolidatable::Never);
    };
    let status = claim.status.as_ref();
    let t0 = match status.and_then(|s| s.last_pod_event_time.as_deref()) {
        Some(t) => Some(time("status.lastPodEventTime", t)?),
        None => status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| {
                c.iter()
                    .find(|c| c.type_ == "Initialized" && c.status == "True")
            })
            .map(|c| {
                time(
                    "status.conditions[Initialized].lastTransitionTime",
                    &c.last_transition_time,
                )
            })
            .transpose()?,
    };
    let Some(t0) = t0 else {
        return Ok(Consolidatable::NotInitialized);
    };
    let from = add(t0, after);
    Ok(if now >= from {
        Consolidatable::Since(from)
    } else {
        Consolidatable::From(from)
    })
}

/// When `claim` expires, or `None` for `expireAfter: Never`.
pub fn expires_at(claim: &NodeClaim) -> Result<Option<Timestamp>, LifetimeError> {
    Ok(lifetime_from(claim)?.map(|(lifetime, created)| add(created, lifetime)))
}

/// The claim's `expireAfter` and the instant it counts from (its creation), or `None` for `Never`.
pub(crate) fn lifetime_from(
    claim: &NodeClaim,
) -> Result<Option<(Duration, Timestamp)>, LifetimeError> {
    let Some(lifetime) = expire_after(claim)? else {
        return Ok(None);
    };
    let created = claim
        .metadata
        .creation_timestamp
        .as_ref()
        .ok_or(LifetimeError::NoCreationTimestamp)?;
    Ok(Some((lifetime, created.0)))
}

/// Whether `claim` has expired at `now`: expiration then deletes it directly, without budgets.
pub fn is_expired(claim: &NodeClaim, now: Timestamp) -> Result<bool, LifetimeError> {
    Ok(expires_at(claim)?.is_some_and(|at| now >= at))
}

/// `spec.expireAfter` of the claim (the CRD default when absent); `None` for `Never`.
pub fn expire_after(claim: &NodeClaim) -> Result<Option<Duration>, LifetimeError> {
    let value = claim
        .spec
        .expire_after
        .as_deref()
        .unwrap_or(DEFAULT_EXPIRE_AFTER);
    duration_or_never("spec.expireAfter", value)
}

fn duration_or_never(field: &'static str, value: &str) -> Result<Option<Duration>, LifetimeError> {
    if value == NEVER {
        return Ok(None);
    }
    parse_duration(value)
        .map(Some)
        .map_err(|_| LifetimeError::Duration {
            field,
            value: value.to_owned(),
        })
}

fn time(field: &'static str, value: &str) -> Result<Timestamp, LifetimeError> {
    value.parse().map_err(|_| LifetimeError::Time {
        field,
        value: value.to_owned(),
    })
}

/// `t + d`, saturating at the end of time (durations are at most Go's ~292 years).
fn add(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{created_claim as claim, pool};
    use super::*;
    use serde_json::json;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn initialized(at: &str) -> serde_json::Value {
        json!({"conditions": [{"type": "Initialized", "status": "True", "lastTransitionTime": at,
            "reason": "Initialized", "message": ""}]})
    }

    #[test]
    fn consolidate_after_counts_from_the_last_pod_event() {
        let p = pool(json!({"consolidateAfter": "10m"}));
        let mut status = initialized("2026-11-22T09:00:00Z");
        status["lastPodEventTime"] = json!("2026-11-22T10:00:00Z");
        let c = claim("2026-11-22T08:59:00Z", None, status);
        assert_eq!(
            consolidatable(&p, &c, at("2026-11-22T10:09:59Z")),
            Ok(Consolidatable::From(at("2026-11-22T10:10:00Z")))
        );
        assert_eq!(
            consolidatable(&p, &c, at("2026-11-22T10:10:00Z")),
            Ok(Consolidatable::Since(at("2026-11-22T10:10:00Z")))
        );
    }

    #[test]
    fn consolidate_after_falls_back_to_initialization_and_defaults_to_zero() {
        let c = claim(
            "2026-11-22T08:59:00Z",
            None,
            initialized("2026-11-22T09:00:00Z"),
        );
        let default = pool(json!(null));
        assert!(consolidatable(&default, &c, at("2026-11-22T09:00:00Z"))
            .is_ok_and(Consolidatable::is_consolidatable));
        let uninitialized = claim("2026-11-22T08:59:00Z", None, json!({}));
        assert_eq!(
            consolidatable(&default, &uninitialized, at("2026-11-22T12:00:00Z")),
            Ok(Consolidatable::NotInitialized)
        );
        let never = pool(json!({"consolidateAfter": "Never"}));
        assert_eq!(
            consolidatable(&never, &c, at("2030-01-01T00:00:00Z")),
            Ok(Consolidatable::Never)
        );
        let bad = pool(json!({"consolidateAfter": "1d"}));
        assert!(consolidatable(&bad, &c, at("2030-01-01T00:00:00Z")).is_err());
    }

    #[test]
    fn expiration_is_creation_plus_expire_after() {
        let c = claim("2026-11-01T00:00:00Z", Some("24h"), json!({}));
        assert_eq!(expires_at(&c), Ok(Some(at("2026-11-02T00:00:00Z"))));
        assert_eq!(is_expired(&c, at("2026-11-01T23:59:59Z")), Ok(false));
        assert_eq!(is_expired(&c, at("2026-11-02T00:00:00Z")), Ok(true));
        let default = claim("2026-11-01T00:00:00Z", None, json!({}));
        assert_eq!(expires_at(&default), Ok(Some(at("2026-12-01T00:00:00Z"))));
        let never = claim("2026-11-01T00:00:00Z", Some("Never"), json!({}));
        assert_eq!(is_expired(&never, at("2100-01-01T00:00:00Z")), Ok(false));
        let huge = claim("2026-11-01T00:00:00Z", Some("2562047h"), json!({}));
        assert!(expires_at(&huge).is_ok_and(|t| t.is_some()));
        let bad = claim("2026-11-01T00:00:00Z", Some("1w"), json!({}));
        assert_eq!(
            expires_at(&bad),
            Err(LifetimeError::Duration {
                field: "spec.expireAfter",
                value: "1w".into()
            })
        );
    }
}
