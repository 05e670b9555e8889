//! The status condition shape shared by NodePool, NodeClaim and EC2NodeClass (metav1.Condition).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The condition's type in CamelCase, e.g. `Ready`.
    #[serde(rename = "type")]
    #[schemars(length(max = 316))]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[schemars(extend("enum" = ["True", "False", "Unknown"]))]
    pub status: String,
    /// When the status last changed (RFC 3339).
    #[schemars(schema_with = "crate::schema::fragments::date_time")]
    pub last_transition_time: String,
    /// A CamelCase machine-readable reason for the last transition.
    #[schemars(length(max = 1024))]
    pub reason: String,
    /// A human-readable explanation; may be empty.
    #[schemars(length(max = 32768))]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
}

/// Sets the condition `type_` in `conditions`: its `lastTransitionTime` becomes `now` (RFC 3339) only when the
/// status changes, so the time says since when the status holds. Returns whether anything changed.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: &str,
    observed_generation: Option<i64>,
) -> bool {
    let status = if status { TRUE } else { FALSE };
    set_status(
        conditions,
        type_,
        status,
        reason,
        message,
        now,
        observed_generation,
    )
}

pub const TRUE: &str = "True";
pub const FALSE: &str = "False";
pub const UNKNOWN: &str = "Unknown";

/// [`set`] for any of the three statuses ([`TRUE`], [`FALSE`], [`UNKNOWN`]): conditions that are not known
/// yet (a NodePool's registration health after a change, an EC2NodeClass validation waiting on resolution).
pub fn set_status(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: &str,
    observed_generation: Option<i64>,
) -> bool {
    let next = |last_transition_time: String| Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        last_transition_time,
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation,
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            let time = if existing.status == status {
                existing.last_transition_time.clone()
            } else {
                now.to_owned()
            };
            let updated = next(time);
            let changed = *existing != updated;
            *existing = updated;
            changed
        }
        None => {
            conditions.push(next(now.to_owned()));
            true
        }
    }
}

/// The condition `type_` in `conditions`, if set.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether `conditions` holds `type_` with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    get(conditions, type_).is_some_and(|c| c.status == TRUE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transition_time_moves_only_when_the_status_changes() {
        let mut conditions = vec![];
        assert!(set(&mut conditions, "Ready", false, "A", "", "t1", None));
        assert!(set(&mut conditions, "Ready", false, "B", "why", "t2", None));
        assert_eq!(conditions[0].last_transition_time, "t1");
        assert!(!set(
            &mut conditions,
            "Ready",
            false,
            "B",
            "why",
            "t3",
            None
        ));
        assert!(set(
            &mut conditions,
            "Ready",
            true,
            "Ready",
            "",
            "t4",
            Some(2)
        ));
        assert_eq!(conditions[0].last_transition_time, "t4");
        assert!(is_true(&conditions, "Ready"));
        assert_eq!(conditions.len(), 1);
    }
}
