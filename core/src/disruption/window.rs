//! When a scheduled budget is active (controller-behaviour.md §3.6 step 2): a cron hit `h` opens the window
//! `[h, h + duration)`, overlapping windows merge, and at `now` the budget is active when some hit satisfies
//! `now − duration < h ≤ now`, in UTC and whole seconds.
//!
//! Hits come from the `cron` crate (via kerf's own parser, which keeps robfig's day-of-month / day-of-week
//! rule). That crate knows the years 1970–2100 only; outside them there are no hits.

use crate::api::cron::{CronError, CronSchedule};
use k8s_openapi::jiff::Timestamp;
use std::time::Duration;

/// How far ahead [`Window::next_transition`] looks, in steps (each at most one duration long) and in time.
/// Beyond either, the window is reported as staying as it is.
const MAX_STEPS: usize = 20_000;
const SEARCH_HORIZON_SECONDS: i64 = 400 * 24 * 3600;

/// A budget's `schedule` with its `duration`.
#[derive(Clone, Debug)]
pub struct Window {
    schedule: CronSchedule,
    /// The `cron` crate schedules whose hits together are `schedule`'s.
    hits: Vec<cron::Schedule>,
    duration_seconds: i64,
}

/// The next change of a window after an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// Inactive now; the window opens at this instant.
    Opens(Timestamp),
    /// Active now; the window closes at this instant.
    Closes(Timestamp),
    /// No change within the search bounds (for example a duration at least the schedule's period, or a
    /// schedule that never fires).
    None,
}

impl Window {
    /// Parses `schedule`; `duration` is whole seconds (budget durations are minutes and hours).
    pub fn new(schedule: &str, duration: Duration) -> Result<Self, CronError> {
        let schedule = CronSchedule::parse(schedule)?;
        let hits = schedule.to_cron_crate()?;
        Ok(Window {
            schedule,
            hits,
            duration_seconds: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX),
        })
    }

    /// Whether the window is open at `now`. A schedule that never fires counts as always active, as in
    /// Karpenter, whose next-hit search then returns the zero time (api-rules.md §2.8).
    pub fn is_active(&self, now: Timestamp) -> bool {
        if !self.schedule.ever_fires() {
            return true;
        }
        let now = floor_second(now);
        let checkpoint = now.saturating_sub(self.duration_seconds);
        self.first_hit_after(checkpoint).is_some_and(|h| h <= now)
    }

    /// When the window next opens or closes after `now`, searched over a bounded horizon.
    pub fn next_transition(&self, now: Timestamp) -> Transition {
        if !self.schedule.ever_fires() {
            return Transition::None;
        }
        let now_s = floor_second(now);
        let horizon = now_s.saturating_add(SEARCH_HORIZON_SECONDS);
        let to_timestamp = |s: i64| Timestamp::from_second(s).ok();
        if !self.is_active(now) {
            return match self.first_hit_after(now_s) {
                Some(h) if h <= horizon => {
                    to_timestamp(h).map_or(Transition::None, Transition::Opens)
                }
                _ => Transition::None,
            };
        }
        // Active: the stretch of merged windows lasts at least until the latest hit plus the duration. At that
        // end it goes on if the latest hit by then is still within one duration, and so on. Each step jumps by
        // up to a duration.
        let Some(mut end) = self
            .last_hit_at_or_before(now_s)
            .map(|h| h.saturating_add(self.duration_seconds))
        else {
            return Transition::None;
        };
        for _ in 0..MAX_STEPS {
            if end > horizon {
                return Transition::None;
            }
            match self.last_hit_at_or_before(end) {
                Some(h) if h.saturating_add(self.duration_seconds) > end => {
                    end = h.saturating_add(self.duration_seconds);
                }
                _ => return to_timestamp(end).map_or(Transition::None, Transition::Closes),
            }
        }
        Transition::None
    }

    /// The latest hit at or before `at` (Unix seconds), as Unix seconds.
    fn last_hit_at_or_before(&self, at: i64) -> Option<i64> {
        let before = chrono::DateTime::<chrono::Utc>::from_timestamp(at.checked_add(1)?, 0)?;
        self.hits
            .iter()
            .filter_map(|s| s.after(&before).next_back())
            .map(|h| h.timestamp())
            .max()
    }

    /// The first hit strictly after `after` (Unix seconds), as Unix seconds.
    fn first_hit_after(&self, after: i64) -> Option<i64> {
        let after = chrono::DateTime::<chrono::Utc>::from_timestamp(after, 0)?;
        self.hits
            .iter()
            .filter_map(|s| s.after(&after).next())
            .map(|h| h.timestamp())
            .min()
    }
}

/// Unix seconds, rounded down (jiff truncates toward zero, which differs before 1970).
fn floor_second(t: Timestamp) -> i64 {
    let s = t.as_second();
    if t.subsec_nanosecond() < 0 {
        s - 1
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn window(schedule: &str, minutes: u64) -> Window {
        Window::new(schedule, Duration::from_secs(minutes * 60)).expect("valid schedule")
    }

    #[test]
    fn a_hit_opens_the_window_for_its_duration_excluding_the_end() {
        let daily = window("@daily", 10);
        assert!(!daily.is_active(at("2026-11-22T23:59:59Z")));
        assert!(daily.is_active(at("2026-11-23T00:00:00Z")));
        assert!(daily.is_active(at("2026-11-23T00:09:59.999Z")));
        assert!(!daily.is_active(at("2026-11-23T00:10:00Z")));
    }

    #[test]
    fn a_duration_of_at_least_the_period_is_always_active() {
        let hourly = window("@hourly", 60);
        for t in [
            "2026-11-22T00:00:00Z",
            "2026-11-22T00:59:59Z",
            "2026-11-22T13:30:00Z",
        ] {
            assert!(hourly.is_active(at(t)), "{t}");
        }
        assert_eq!(
            hourly.next_transition(at("2026-11-22T13:30:00Z")),
            Transition::None
        );
    }

    #[test]
    fn a_schedule_that_never_fires_is_always_active() {
        let never = window("0 0 30 2 *", 10);
        assert!(never.is_active(at("2026-03-01T12:00:00Z")));
        assert_eq!(
            never.next_transition(at("2026-03-01T12:00:00Z")),
            Transition::None
        );
    }

    #[test]
    fn transitions_merge_overlapping_windows() {
        // Hits every 5 minutes from 09:00 to 09:55 with 10-minute windows: one stretch 09:00–10:05.
        let w = window("*/5 9 * * *", 10);
        assert_eq!(
            w.next_transition(at("2026-11-22T08:00:00Z")),
            Transition::Opens(at("2026-11-22T09:00:00Z"))
        );
        assert_eq!(
            w.next_transition(at("2026-11-22T09:02:00Z")),
            Transition::Closes(at("2026-11-22T10:05:00Z"))
        );
        assert_eq!(
            w.next_transition(at("2026-11-22T10:05:00Z")),
            Transition::Opens(at("2026-11-23T09:00:00Z"))
        );
    }

    #[test]
    fn long_stretches_of_frequent_hits_are_followed_to_their_end() {
        // Every minute but 23:xx, one-minute windows: open from 00:00 until 23:00.
        let w = window("* 0-22 * * *", 1);
        assert_eq!(
            w.next_transition(at("2026-11-22T00:30:00Z")),
            Transition::Closes(at("2026-11-22T23:00:00Z"))
        );
        assert_eq!(
            w.next_transition(at("2026-11-22T23:30:00Z")),
            Transition::Opens(at("2026-11-23T00:00:00Z"))
        );
        // Every minute of weekdays with a day's duration: closes a day after Friday's last minute.
        let weekdays = window("* * * * mon-fri", 24 * 60);
        assert_eq!(
            weekdays.next_transition(at("2026-11-23T12:00:00Z")),
            Transition::Closes(at("2026-11-28T23:59:00Z"))
        );
    }

    #[test]
    fn touching_windows_do_not_close_in_between() {
        // Hits at :00 and :30 with 30-minute windows touch: the budget never closes.
        let w = window("0,30 * * * *", 30);
        assert!(w.is_active(at("2026-11-22T10:29:59Z")));
        assert!(w.is_active(at("2026-11-22T10:30:00Z")));
        assert_eq!(
            w.next_transition(at("2026-11-22T10:00:00Z")),
            Transition::None
        );
    }

    #[test]
    fn day_of_month_and_day_of_week_are_ored_when_both_are_restricted() {
        // 2026-11-01 is a Sunday; 2026-11-02 a Monday; 2026-11-03 a Tuesday.
        let or = window("0 0 1 * mon", 60);
        assert!(or.is_active(at("2026-11-01T00:30:00Z")));
        assert!(or.is_active(at("2026-11-02T00:30:00Z")));
        assert!(!or.is_active(at("2026-11-03T00:30:00Z")));
        // With `*` in the day of month, only Mondays.
        let and = window("0 0 * * mon", 60);
        assert!(!and.is_active(at("2026-11-01T00:30:00Z")));
        assert!(and.is_active(at("2026-11-02T00:30:00Z")));
        // `*/2` counts as restricted: odd days OR Mondays.
        let step = window("0 0 */2 * mon", 60);
        assert!(step.is_active(at("2026-11-03T00:30:00Z")));
        assert!(step.is_active(at("2026-11-02T00:30:00Z")));
        assert!(!step.is_active(at("2026-11-04T00:30:00Z")));
    }

    #[test]
    fn floors_to_whole_seconds() {
        assert_eq!(floor_second(at("1969-12-31T23:59:59.5Z")), -1);
        assert_eq!(floor_second(at("1970-01-01T00:00:01.5Z")), 1);
    }
}
