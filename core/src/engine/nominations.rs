//! Nominations: nodes that a recent scheduling pass counted on to take pods. A nominated node is no disruption
//! candidate until its nomination lapses, so the destination of pods that are on their way (a consolidation's
//! replacement while the old node drains, an existing node that a deleted node's pods were planned onto) is not
//! taken away under them by emptiness or another consolidation (Karpenter's `StateNode.Nominate`, renewed by
//! every provisioning pass that plans pods onto the node and by every disruption command it is a destination of).

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::collections::BTreeMap;
use std::time::Duration;

/// The longest provisioning batch unless `--batch-max-duration` says otherwise (Karpenter's default).
pub const DEFAULT_BATCH_MAX: Duration = Duration::from_secs(10);

/// The shortest nomination.
const MIN_WINDOW: Duration = Duration::from_secs(10);

/// How long a nomination lasts: twice the longest provisioning batch, at least ten seconds, so the next pass
/// renews it before it lapses.
pub fn window(batch_max: Duration) -> SignedDuration {
    let window = batch_max.saturating_mul(2).max(MIN_WINDOW);
    SignedDuration::try_from(window).unwrap_or(SignedDuration::MAX)
}

/// Nominated nodes (by Node name, or claim name for a node not registered yet) and until when.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Nominations {
    until: BTreeMap<String, Timestamp>,
}

impl Nominations {
    /// Nominates `node` from `now` for `window`; an earlier, longer nomination stays.
    pub fn nominate(&mut self, node: &str, now: Timestamp, window: SignedDuration) {
        let until = now.checked_add(window).unwrap_or(Timestamp::MAX);
        let entry = self.until.entry(node.to_owned()).or_insert(until);
        *entry = (*entry).max(until);
    }

    /// Whether `node` is nominated at `now`.
    pub fn is_nominated(&self, node: &str, now: Timestamp) -> bool {
        self.until.get(node).is_some_and(|until| *until > now)
    }

    /// The next instant after `now` a nomination lapses.
    pub fn next_lapse(&self, now: Timestamp) -> Option<Timestamp> {
        self.until.values().filter(|t| **t > now).min().copied()
    }

    /// Forgets the nominations that lapsed by `now`, so the map holds only live ones.
    pub fn prune(&mut self, now: Timestamp) {
        self.until.retain(|_, until| *until > now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("time")
    }

    /// Karpenter's state suite: "should nominate the node until the nomination time passes" and "should extend
    /// the nomination window if already nominated"; the window is max(2 x BatchMaxDuration, 10 s).
    #[test]
    fn a_nomination_lasts_its_window_and_renewing_extends_it() {
        let w = window(Duration::from_secs(10));
        assert_eq!(w, SignedDuration::from_secs(20));
        assert_eq!(
            window(Duration::from_secs(1)),
            SignedDuration::from_secs(10)
        );
        let mut n = Nominations::default();
        n.nominate("a", at("2026-11-26T10:00:00Z"), w);
        assert!(n.is_nominated("a", at("2026-11-26T10:00:19Z")));
        assert!(!n.is_nominated("a", at("2026-11-26T10:00:20Z")));
        assert!(!n.is_nominated("b", at("2026-11-26T10:00:00Z")));
        n.nominate("a", at("2026-11-26T10:00:15Z"), w);
        assert!(n.is_nominated("a", at("2026-11-26T10:00:34Z")));
        n.nominate("a", at("2026-11-26T10:00:01Z"), w);
        assert!(
            n.is_nominated("a", at("2026-11-26T10:00:34Z")),
            "a shorter renewal keeps the longer nomination"
        );
        assert_eq!(
            n.next_lapse(at("2026-11-26T10:00:20Z")),
            Some(at("2026-11-26T10:00:35Z")),
            "the renewed nomination lapses then"
        );
        assert_eq!(n.next_lapse(at("2026-11-26T10:00:35Z")), None);
        n.prune(at("2026-11-26T10:00:35Z"));
        assert_eq!(n, Nominations::default());
    }
}
