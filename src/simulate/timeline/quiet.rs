//! Quiet minutes. A minute in which nothing happened (no event, no pod waiting, no launch becoming ready, a
//! disruption pass that found no command) is followed by the same minute again until
//! something on the clock comes due: the next event, a launched node becoming ready, a nomination lapsing, or
//! the instant the disruption pass said it could decide differently ([`crate::disruption::Decision::revisit_at`]).
//! The run skips the minutes between and only bills them, so a steady cluster costs a few passes a day instead
//! of one a minute. Features whose own clocks are not modelled here (static pools, CapacityBuffers, zonal
//! shifts, nodes under repair, nodes waiting for their replacements) keep every minute while they are in play.
//! The report is the same byte for byte as a run of every minute ([`TimelineRun::every_minute`]).

use super::*;

/// What the disruption pass of the last minute run did.
#[derive(Clone, Copy, Debug)]
pub(super) enum LastPass {
    /// It carried out commands.
    Acted,
    /// It found none (the claims' `Drifted` and `Consolidatable` marks it may have written are not read by a
    /// pass), and the same cluster is decided alike until this instant (`None`: for ever).
    Settled(Option<Timestamp>),
}

/// What a minute is compared with to tell whether it changed anything.
pub(super) struct Before {
    entries: usize,
    launched: u64,
    claims: usize,
    ready: usize,
    waiting: bool,
}

impl TimelineRun<'_> {
    /// Makes the run go through every minute in full, as before quiet minutes were skipped: the comparison that
    /// shows skipping them changes nothing in the report.
    pub fn every_minute(mut self) -> Self {
        self.skip_quiet = false;
        self
    }

    /// The run as a minute starts.
    pub(super) fn before(&self) -> Before {
        Before {
            entries: self.entries.len(),
            launched: self.launched,
            claims: self.claims.len(),
            ready: self.claims.iter().filter(|c| c.ready).count(),
            waiting: self.waiting(),
        }
    }

    /// The first minute after this one (`self.now`) that has to run in full, given the run before it and whether
    /// an event happened in it.
    pub(super) fn next_busy_minute(&self, before: &Before, event: bool) -> Timestamp {
        let next = self.now.checked_add(STEP).unwrap_or(self.now);
        let changed = event
            || before.waiting
            || self.waiting()
            || before.entries != self.entries.len()
            || before.launched != self.launched
            || before.claims != self.claims.len()
            || before.ready != self.claims.iter().filter(|c| c.ready).count();
        let revisit = match self.last_pass {
            LastPass::Settled(revisit) if self.skip_quiet && !changed && !self.own_clocks() => {
                revisit
            }
            _ => return next,
        };
        let due = self
            .claims
            .iter()
            .filter(|c| !c.ready)
            .filter_map(|c| c.launched.checked_add(READY_AFTER).ok())
            .chain(self.nominations.next_lapse(self.now))
            .chain(revisit)
            .min();
        let Some(due) = due else {
            return Timestamp::MAX;
        };
        // The minute at or after `due`: the first the run would have seen the change in.
        let step = STEP.as_secs();
        let seconds = due.duration_since(self.now).as_secs().max(1);
        let minutes = (seconds + step - 1) / step;
        self.now
            .checked_add(SignedDuration::from_secs(minutes.saturating_mul(step)))
            .unwrap_or(Timestamp::MAX)
    }

    /// Pods that wait for a node (CapacityBuffer virtual pods placed by the last decision do not).
    fn waiting(&self) -> bool {
        self.pods
            .iter()
            .any(|p| p.on.is_none() && !self.buffers.is_placed(&p.key))
    }

    /// Whether a feature with a clock of its own is in play.
    fn own_clocks(&self) -> bool {
        self.pools.iter().any(|p| p.spec.replicas.is_some())
            || !self.scenario.capacity_buffers.is_empty()
            || !self.zonal_shifts.is_empty()
            || !self.shifted.is_empty()
            || !self.held.is_empty()
            || self.under_repair
            || self.claims.iter().any(|c| c.awaiting.is_some())
    }
}
