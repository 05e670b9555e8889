//! The batching window of controller-behaviour.md §1.1, as a pure state machine fed pod UIDs and `now`: the
//! window opens at the first trigger, a pod UID it has not seen restarts the idle timer, and it closes `idle`
//! after the last new pod or `max` after it opened, whichever comes first. A pod already solved triggers again
//! only after `retrigger` (Karpenter re-triggers pending pods every 10 s), so pods waiting on capacity already
//! planned for them do not keep the loop solving.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

/// How long a solved pod that is still pending waits before it triggers another batch.
pub const RETRIGGER: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct Batcher {
    idle: Duration,
    max: Duration,
    retrigger: Duration,
    window: Option<Window>,
    /// When each pod last went into a solve.
    solved: HashMap<String, SystemTime>,
}

#[derive(Debug)]
struct Window {
    opened: SystemTime,
    last_new: SystemTime,
    seen: HashSet<String>,
}

impl Batcher {
    pub fn new(idle: Duration, max: Duration, retrigger: Duration) -> Batcher {
        Batcher {
            idle,
            max,
            retrigger,
            window: None,
            solved: HashMap::new(),
        }
    }

    /// Records that `uid` is pending at `now`.
    pub fn observe(&mut self, uid: &str, now: SystemTime) {
        let recently_solved = self
            .solved
            .get(uid)
            .is_some_and(|at| elapsed(*at, now) < self.retrigger);
        if recently_solved {
            return;
        }
        let window = self.window.get_or_insert_with(|| Window {
            opened: now,
            last_new: now,
            seen: HashSet::new(),
        });
        // Looked up before it is copied: the loop observes every pending pod on every watch event.
        if !window.seen.contains(uid) {
            window.seen.insert(uid.to_owned());
            window.last_new = now;
        }
    }

    /// When the open window closes; `None` with no window open.
    pub fn deadline(&self) -> Option<SystemTime> {
        self.window
            .as_ref()
            .map(|w| (w.last_new + self.idle).min(w.opened + self.max))
    }

    /// Whether the open window has closed at `now`.
    pub fn ready(&self, now: SystemTime) -> bool {
        self.deadline().is_some_and(|deadline| now >= deadline)
    }

    /// Closes the window: the pods it saw are being solved at `now`. `pending` are the UIDs still pending,
    /// so the memory of solved pods never outgrows them.
    pub fn close<'a>(&mut self, now: SystemTime, pending: impl IntoIterator<Item = &'a str>) {
        if let Some(window) = self.window.take() {
            for uid in window.seen {
                self.solved.insert(uid, now);
            }
        }
        let pending: HashSet<&str> = pending.into_iter().collect();
        self.solved.retain(|uid, _| pending.contains(uid.as_str()));
    }

    /// The next time a solved pod may trigger again: the loop wakes then even without a watch event.
    pub fn next_retrigger(&self) -> Option<SystemTime> {
        self.solved.values().min().map(|at| *at + self.retrigger)
    }
}

/// `now − since`, zero when the clock went backwards.
fn elapsed(since: SystemTime, now: SystemTime) -> Duration {
    now.duration_since(since).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(10);

    fn at(millis: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(millis)
    }

    fn batcher() -> Batcher {
        Batcher::new(IDLE, MAX, RETRIGGER)
    }

    #[test]
    fn no_pod_no_window() {
        let b = batcher();
        assert_eq!(b.deadline(), None);
        assert!(!b.ready(at(100_000)));
    }

    #[test]
    fn a_lone_pod_closes_the_window_after_the_idle_time() {
        let mut b = batcher();
        b.observe("a", at(0));
        assert!(!b.ready(at(999)));
        assert!(b.ready(at(1_000)));
    }

    #[test]
    fn a_new_pod_restarts_the_idle_timer_but_a_repeat_does_not() {
        let mut b = batcher();
        b.observe("a", at(0));
        b.observe("b", at(800));
        assert_eq!(b.deadline(), Some(at(1_800)));
        b.observe("a", at(1_500));
        b.observe("b", at(1_700));
        assert_eq!(b.deadline(), Some(at(1_800)));
        assert!(b.ready(at(1_800)));
    }

    #[test]
    fn a_steady_stream_of_pods_closes_at_the_max() {
        let mut b = batcher();
        for (i, t) in (0..20_000).step_by(500).enumerate() {
            b.observe(&format!("p{i}"), at(t));
            if t < 10_000 {
                assert!(!b.ready(at(t)), "closed early at {t} ms");
            }
        }
        assert_eq!(b.deadline(), Some(at(10_000)));
    }

    #[test]
    fn a_solved_pod_triggers_again_only_after_the_retrigger_period() {
        let mut b = batcher();
        b.observe("a", at(0));
        b.close(at(1_000), ["a"]);
        assert_eq!(b.deadline(), None);
        b.observe("a", at(5_000));
        assert_eq!(b.deadline(), None, "re-triggered before 10 s");
        assert_eq!(b.next_retrigger(), Some(at(11_000)));
        b.observe("a", at(11_000));
        assert_eq!(b.deadline(), Some(at(12_000)));
    }

    #[test]
    fn a_new_pod_opens_a_window_while_a_solved_one_waits() {
        let mut b = batcher();
        b.observe("a", at(0));
        b.close(at(1_000), ["a"]);
        b.observe("a", at(2_000));
        b.observe("b", at(2_000));
        assert_eq!(b.deadline(), Some(at(3_000)));
    }

    #[test]
    fn pods_no_longer_pending_are_forgotten() {
        let mut b = batcher();
        b.observe("a", at(0));
        b.observe("b", at(0));
        b.close(at(1_000), ["a", "b"]);
        b.close(at(2_000), ["b"]);
        b.observe("a", at(3_000));
        assert_eq!(
            b.deadline(),
            Some(at(4_000)),
            "a pod that left and came back (same UID) is new again"
        );
        assert_eq!(b.next_retrigger(), Some(at(11_000)));
    }
}
