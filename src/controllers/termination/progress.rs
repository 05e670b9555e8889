//! How far a NodeClaim's termination got, as the claim's conditions tell it (Karpenter's `awaitDrain`,
//! `awaitVolumeDetachment` and `awaitInstanceTermination` in `node/termination/controller.go`, and the claim's
//! finalizer in `nodeclaim/lifecycle/controller.go`):
//! - `Drained`: `Unknown` (`Draining`) from the first pass over its Node, `True` once no pod is left to wait
//!   for and at least [`MIN_DRAIN_TIME`] has passed since the drain began (pods the scheduler bound before it saw
//!   the taint are caught);
//! - `VolumesDetached`: `True` once no VolumeAttachment holds the Node, `Unknown` (`AwaitingVolumeDetachment`)
//!   while one does, `False` (`TerminationGracePeriodElapsed`) when the claim's termination grace period ran
//!   out first and the termination goes on without waiting;
//! - `InstanceTerminating`: `True` once the instance's termination was asked for.
//!
//! Pure: each pass decides on the conditions as read and the time, and the pass writes them once.

use crate::api::condition::Condition;
use crate::api::nodeclaim::NodeClaim;
use crate::engine::conditions::{self, DRAINED, INSTANCE_TERMINATING, VOLUMES_DETACHED};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::time::Duration;

/// A drain lasts at least this long (Karpenter's `MinDrainTime`).
pub const MIN_DRAIN_TIME: Duration = Duration::from_secs(5);
/// While the drain or the volume detachment is waited for (Karpenter requeues every second).
pub const RECHECK: Duration = Duration::from_secs(1);

const TRUE: &str = "True";
const UNKNOWN: &str = "Unknown";
const FALSE: &str = "False";

/// What the termination does after a stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// On to the next stage.
    Continue,
    /// Come back after this long.
    Wait(Duration),
}

/// A claim's conditions as a termination pass leaves them.
#[derive(Clone, Debug)]
pub struct Progress {
    read: Vec<Condition>,
    conditions: Vec<Condition>,
    now: Timestamp,
}

impl Progress {
    pub fn of(claim: &NodeClaim, now: Timestamp) -> Self {
        let read = claim
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        Progress {
            conditions: read.clone(),
            read,
            now,
        }
    }

    fn get(&self, type_: &str) -> Option<&Condition> {
        crate::api::condition::get(&self.conditions, type_)
    }

    fn set(&mut self, type_: &str, status: &str, reason: &str, message: &str) {
        conditions::set(
            &mut self.conditions,
            type_,
            status,
            reason,
            message,
            self.now,
        );
    }

    /// The conditions to write, when the pass changed any.
    pub fn changed(&self) -> Option<&[Condition]> {
        (self.conditions != self.read).then_some(&self.conditions)
    }

    /// Whether this pass found the Node drained (`Drained` went `True`): counted once, as Karpenter counts
    /// `karpenter_nodes_drained_total` once the condition is written.
    pub fn drained_now(&self) -> bool {
        let was = crate::api::condition::is_true(&self.read, DRAINED);
        !was && crate::api::condition::is_true(&self.conditions, DRAINED)
    }

    /// The drain of the claim's Node begins (or goes on).
    pub fn draining(&mut self) {
        if self.get(DRAINED).is_none() {
            self.set(DRAINED, UNKNOWN, "Draining", "Draining");
        }
    }

    /// After a drain pass that left `drained`.
    pub fn after_drain(&mut self, drained: bool, recheck: Duration) -> Next {
        if !drained {
            return Next::Wait(recheck);
        }
        if let Some(c) = self.get(DRAINED).filter(|c| c.status == UNKNOWN) {
            let began = c
                .last_transition_time
                .parse::<Timestamp>()
                .unwrap_or(self.now);
            let min = SignedDuration::try_from(MIN_DRAIN_TIME).unwrap_or(SignedDuration::ZERO);
            let left = min - self.now.duration_since(began);
            if left.is_positive() {
                return Next::Wait(Duration::try_from(left).unwrap_or(RECHECK));
            }
        }
        self.set(DRAINED, TRUE, DRAINED, "");
        Next::Continue
    }

    /// After looking at the attachments that hold the Node (`pending`), with the claim's termination `deadline`
    /// if it has one: `Some(pending)` when the termination waits for them (the Node is told why), else goes on.
    pub fn after_volumes<'a>(
        &mut self,
        pending: Vec<&'a VolumeAttachment>,
        deadline: Option<Timestamp>,
    ) -> Option<Vec<&'a VolumeAttachment>> {
        if pending.is_empty() {
            self.set(VOLUMES_DETACHED, TRUE, VOLUMES_DETACHED, "");
            return None;
        }
        if deadline.is_some_and(|d| self.now > d) {
            let elapsed = "TerminationGracePeriodElapsed";
            self.set(VOLUMES_DETACHED, FALSE, elapsed, elapsed);
            return None;
        }
        let awaiting = "AwaitingVolumeDetachment";
        self.set(VOLUMES_DETACHED, UNKNOWN, awaiting, awaiting);
        Some(pending)
    }

    /// The instance's termination was asked for (or it is gone already).
    pub fn instance_terminating(&mut self) {
        self.set(INSTANCE_TERMINATING, TRUE, INSTANCE_TERMINATING, "");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn claim(conditions: serde_json::Value) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "c"},
            "spec": {"nodeClassRef": {"group": "g", "kind": "k", "name": "n"}, "requirements": []},
            "status": {"conditions": conditions},
        }))
        .expect("claim")
    }

    fn status_of<'a>(progress: &'a Progress, type_: &str) -> Option<(&'a str, &'a str, &'a str)> {
        progress
            .get(type_)
            .map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
    }

    fn ready() -> serde_json::Value {
        json!({"type": "Ready", "status": "True", "reason": "Ready", "message": "",
               "lastTransitionTime": "2026-11-23T00:00:00Z"})
    }

    /// Karpenter's termination suite: "should set the NodeClaim's Drained condition to Unknown while draining",
    /// "should not finish draining until the minimum drain time has passed" and "should set Drained to True once
    /// the node is drained"; the lifecycle's `Ready` is left alone.
    #[test]
    fn the_drain_is_unknown_until_no_pod_is_left_and_five_seconds_have_passed() {
        let t0 = at("2026-11-23T00:00:00Z");
        let mut first = Progress::of(&claim(json!([ready()])), t0);
        first.draining();
        assert_eq!(first.after_drain(false, RECHECK), Next::Wait(RECHECK));
        assert_eq!(
            status_of(&first, DRAINED),
            Some(("Unknown", "Draining", "Draining"))
        );
        assert_eq!(status_of(&first, "Ready"), Some(("True", "Ready", "")));
        let written = json!(first.changed().expect("a change"));

        // Drained at 3 s: it waits out the 2 s left of the minimum drain time.
        let mut early = Progress::of(&claim(written.clone()), at("2026-11-23T00:00:03Z"));
        early.draining();
        assert_eq!(
            early.after_drain(true, RECHECK),
            Next::Wait(Duration::from_secs(2))
        );
        assert!(early.changed().is_none(), "nothing to write");

        let mut done = Progress::of(&claim(written), at("2026-11-23T00:00:05Z"));
        done.draining();
        assert_eq!(done.after_drain(true, RECHECK), Next::Continue);
        assert_eq!(status_of(&done, DRAINED), Some(("True", "Drained", "")));
        assert!(done.drained_now());
        let drained = json!(done.changed().expect("a change"));
        let mut again = Progress::of(&claim(drained), at("2026-11-23T00:01:00Z"));
        again.draining();
        assert_eq!(again.after_drain(true, RECHECK), Next::Continue);
        assert!(!again.drained_now(), "counted once");
        assert!(again.changed().is_none());
    }

    fn attachment(name: &str) -> VolumeAttachment {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"attacher": "a", "nodeName": "n", "source": {"persistentVolumeName": "pv"}},
        }))
        .expect("attachment")
    }

    /// Karpenter's termination suite: "should wait for VolumeAttachments" (VolumesDetached Unknown,
    /// AwaitingVolumeDetachment), "should only wait for VolumeAttachments until the nodeclaim's
    /// terminationGracePeriod has elapsed" (False, TerminationGracePeriodElapsed) and VolumesDetached True once
    /// they are gone; then InstanceTerminating.
    #[test]
    fn attachments_hold_the_instance_until_they_go_or_the_grace_period_ends() {
        let now = at("2026-11-23T00:10:00Z");
        let va = attachment("va-1");
        let mut waiting = Progress::of(&claim(json!([])), now);
        let held = waiting.after_volumes(vec![&va], None).expect("waits");
        assert_eq!(held.len(), 1);
        assert_eq!(
            status_of(&waiting, VOLUMES_DETACHED),
            Some((
                "Unknown",
                "AwaitingVolumeDetachment",
                "AwaitingVolumeDetachment"
            ))
        );
        let before_deadline = Some(at("2026-11-23T00:10:30Z"));
        assert!(waiting.after_volumes(vec![&va], before_deadline).is_some());

        let mut elapsed = Progress::of(&claim(json!([])), now);
        let past_deadline = Some(at("2026-11-23T00:09:59Z"));
        assert!(elapsed.after_volumes(vec![&va], past_deadline).is_none());
        assert_eq!(
            status_of(&elapsed, VOLUMES_DETACHED),
            Some((
                "False",
                "TerminationGracePeriodElapsed",
                "TerminationGracePeriodElapsed"
            ))
        );

        let mut detached = Progress::of(&claim(json!([])), now);
        assert!(detached.after_volumes(vec![], None).is_none());
        assert_eq!(
            status_of(&detached, VOLUMES_DETACHED),
            Some(("True", "VolumesDetached", ""))
        );
        detached.instance_terminating();
        assert_eq!(
            status_of(&detached, INSTANCE_TERMINATING),
            Some(("True", "InstanceTerminating", ""))
        );
        assert_eq!(detached.changed().map(<[Condition]>::len), Some(2));
    }
}
