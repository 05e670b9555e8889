//! The status conditions of a NodeClaim, set purely: its lifecycle's `Launched`, `Registered`, `Initialized`,
//! and `Ready` (all three true); and its termination's `Drained`, `VolumesDetached` and `InstanceTerminating`,
//! which `Ready` does not depend on (Karpenter's NodeClaim condition set). A condition's `lastTransitionTime`
//! moves only when its status changes.

use crate::api::condition::Condition;
use crate::api::nodeclaim::NodeClaim;
use k8s_openapi::jiff::Timestamp;

pub const LAUNCHED: &str = "Launched";
pub const REGISTERED: &str = "Registered";
pub const INITIALIZED: &str = "Initialized";
pub const READY: &str = "Ready";
/// Termination: the Node has no pod left to evict (`Unknown` while it drains).
pub const DRAINED: &str = "Drained";
/// Termination: no VolumeAttachment holds the Node (`Unknown` while one does, `False` when the termination grace
/// period ran out first).
pub const VOLUMES_DETACHED: &str = "VolumesDetached";
/// Termination: the instance's termination has been asked for.
pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
/// The conditions `Ready` sums up.
const LIFECYCLE: [&str; 3] = [LAUNCHED, REGISTERED, INITIALIZED];

/// Karpenter caps a condition's message at this many characters.
const MAX_MESSAGE: usize = 300;

/// The claim's condition `type_`, if set.
pub fn condition<'a>(claim: &'a NodeClaim, type_: &str) -> Option<&'a Condition> {
    claim
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// `claim`'s conditions with `type_` set `True` with `(reason, message)` as of `now` (RFC 3339), or removed for
/// `None`; `None` when that changes nothing. For the conditions the engine's verdicts mirror (`Drifted`,
/// `Consolidatable`, `DisruptionReason`), which are either true or absent.
pub fn with_true_or_absent(
    claim: &NodeClaim,
    type_: &str,
    verdict: Option<(&str, &str)>,
    now: &str,
) -> Option<Vec<Condition>> {
    let mut conditions = claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let changed = match verdict {
        Some((reason, message)) => {
            crate::api::condition::set(&mut conditions, type_, true, reason, message, now, None)
        }
        None => {
            let before = conditions.len();
            conditions.retain(|c| c.type_ != type_);
            conditions.len() != before
        }
    };
    changed.then_some(conditions)
}

pub fn is_true(claim: &NodeClaim, type_: &str) -> bool {
    condition(claim, type_).is_some_and(|c| c.status == "True")
}

/// When the condition last changed status, if it is set and its time parses.
pub fn transitioned_at(claim: &NodeClaim, type_: &str) -> Option<Timestamp> {
    condition(claim, type_)?.last_transition_time.parse().ok()
}

/// Sets `type_` in `conditions`, keeping its transition time when the status is unchanged, then derives
/// `Ready` when `type_` is one of the lifecycle's. The message is cut to [`MAX_MESSAGE`] characters.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    upsert(conditions, type_, status, reason, message, now);
    if LIFECYCLE.contains(&type_) {
        let all_true = LIFECYCLE.iter().all(|t| {
            conditions
                .iter()
                .any(|c| c.type_ == *t && c.status == "True")
        });
        let (status, reason) = if all_true {
            ("True", READY)
        } else {
            ("Unknown", "AwaitingReconciliation")
        };
        upsert(conditions, READY, status, reason, "", now);
    }
}

fn upsert(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let message: String = message.chars().take(MAX_MESSAGE).collect();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.status = status.to_owned();
                c.last_transition_time = now.to_string();
            }
            c.reason = reason.to_owned();
            c.message = message;
        }
        None => conditions.push(Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            last_transition_time: now.to_string(),
            reason: reason.to_owned(),
            message,
            observed_generation: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    #[test]
    fn ready_follows_the_three_lifecycle_conditions() {
        let mut conditions = Vec::new();
        let t0 = at("2026-11-23T00:00:00Z");
        set(&mut conditions, LAUNCHED, "True", LAUNCHED, "", t0);
        set(&mut conditions, REGISTERED, "True", REGISTERED, "", t0);
        let ready = |cs: &[Condition]| {
            cs.iter()
                .find(|c| c.type_ == READY)
                .map(|c| c.status.clone())
        };
        assert_eq!(ready(&conditions).as_deref(), Some("Unknown"));
        let t1 = at("2026-11-23T00:01:00Z");
        set(&mut conditions, INITIALIZED, "True", INITIALIZED, "", t1);
        assert_eq!(ready(&conditions).as_deref(), Some("True"));
        let r = conditions.iter().find(|c| c.type_ == READY).expect("ready");
        assert_eq!(r.last_transition_time, t1.to_string());
    }

    #[test]
    fn the_transition_time_moves_only_with_the_status() {
        let mut conditions = Vec::new();
        let t0 = at("2026-11-23T00:00:00Z");
        let t1 = at("2026-11-23T00:05:00Z");
        set(
            &mut conditions,
            LAUNCHED,
            "Unknown",
            "Boom",
            &"x".repeat(400),
            t0,
        );
        assert_eq!(conditions[0].message.len(), 300);
        set(&mut conditions, LAUNCHED, "Unknown", "Boom again", "", t1);
        assert_eq!(conditions[0].last_transition_time, t0.to_string());
        assert_eq!(conditions[0].reason, "Boom again");
        set(&mut conditions, LAUNCHED, "True", LAUNCHED, "", t1);
        assert_eq!(conditions[0].last_transition_time, t1.to_string());
    }

    /// Karpenter's NodeClaim condition set: `Ready` sums up the lifecycle only; the termination's conditions
    /// leave it as it is.
    #[test]
    fn termination_conditions_do_not_touch_ready() {
        let mut conditions = Vec::new();
        let t0 = at("2026-11-23T00:00:00Z");
        for type_ in [LAUNCHED, REGISTERED, INITIALIZED] {
            set(&mut conditions, type_, "True", type_, "", t0);
        }
        let before = conditions.clone();
        let t1 = at("2026-11-23T00:05:00Z");
        set(
            &mut conditions,
            DRAINED,
            "Unknown",
            "Draining",
            "Draining",
            t1,
        );
        set(
            &mut conditions,
            INSTANCE_TERMINATING,
            "True",
            INSTANCE_TERMINATING,
            "",
            t1,
        );
        assert_eq!(conditions[..before.len()], before[..]);
        assert_eq!(conditions.len(), before.len() + 2);
    }
}
