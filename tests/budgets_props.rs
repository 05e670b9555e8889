//! Property tests of disruption budgets over random schedules, durations, node counts and times.

use k8s_openapi::jiff::{tz::TimeZone, SignedDuration, Timestamp};
use kerf::api::cron::CronSchedule;
use kerf::api::nodepool::Budget;
use kerf::disruption::{Allowed, Budgets, PoolCounts, Transition, Window, REASONS};
use proptest::prelude::*;
use std::time::Duration;

/// One cron field item: `*`, `N`, `N-M`, `*/S`, `N/S` or `N-M/S`, over `min..=max`.
fn item(min: u32, max: u32) -> impl Strategy<Value = String> {
    let value = min..=max;
    prop_oneof![
        Just("*".to_owned()),
        value.clone().prop_map(|v| v.to_string()),
        (value.clone(), value.clone()).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
        (1..=max.max(1)).prop_map(|s| format!("*/{s}")),
        (value.clone(), 1..=max.max(1)).prop_map(|(v, s)| format!("{v}/{s}")),
        (value.clone(), value, 1..=5u32).prop_map(|(a, b, s)| format!(
            "{}-{}/{s}",
            a.min(b),
            a.max(b)
        )),
    ]
}

fn field(min: u32, max: u32) -> impl Strategy<Value = String> {
    prop::collection::vec(item(min, max), 1..=3).prop_map(|items| items.join(","))
}

/// Schedules that parse: five random fields, or a descriptor.
fn schedule() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (field(0, 59), field(0, 23), field(1, 31), field(1, 12), field(0, 6))
            .prop_map(|(m, h, dom, mon, dow)| format!("{m} {h} {dom} {mon} {dow}")),
        1 => prop::sample::select(vec!["@hourly", "@daily", "@weekly", "@monthly", "@yearly"])
            .prop_map(str::to_owned),
    ]
}

/// Mostly valid schedules, sometimes ones that never parse (which block the whole pool).
fn budget_schedule() -> impl Strategy<Value = String> {
    let invalid = prop::sample::select(vec![
        "0 0 * * sat-sun",
        "0 0 * * 1-7",
        "0 0 0 * * *",
        "@every 1h",
    ]);
    prop_oneof![9 => schedule(), 1 => invalid.prop_map(str::to_owned)]
}

/// Budget durations in minutes: mostly short, sometimes days.
fn duration_minutes() -> impl Strategy<Value = u64> {
    prop_oneof![3 => 1..=180u64, 1 => 1..=4320u64]
}

/// An instant between 2001 and 2090, with a fraction of a second.
fn instant() -> impl Strategy<Value = Timestamp> {
    (978_307_200i64..3_786_912_000, 0..1_000_000_000i32)
        .prop_map(|(s, ns)| Timestamp::new(s, ns).expect("in range"))
}

fn budget() -> impl Strategy<Value = Budget> {
    let nodes = prop_oneof![
        (0..=30u64).prop_map(|n| n.to_string()),
        (0..=100u64).prop_map(|p| format!("{p}%")),
    ];
    let reasons = prop::option::of(prop::sample::subsequence(REASONS.to_vec(), 0..=3));
    let window = prop::option::of((budget_schedule(), duration_minutes()));
    (nodes, reasons, window).prop_map(|(nodes, reasons, window)| Budget {
        nodes: Some(nodes),
        schedule: window.as_ref().map(|(s, _)| s.clone()),
        duration: window.map(|(_, m)| format!("{m}m")),
        reasons,
    })
}

fn counts() -> impl Strategy<Value = PoolCounts> {
    (0..=500u64, 0..=50u64).prop_map(|(total, d)| PoolCounts {
        total,
        disrupting: d.min(total),
    })
}

/// Brute force: whether some whole minute in `(now − duration, now]` is a hit, read off the parsed fields.
fn brute_force_active(schedule: &CronSchedule, minutes: u64, now: Timestamp) -> bool {
    let now_minute = now.as_second().div_euclid(60) * 60;
    let window = i64::try_from(minutes).expect("small") * 60;
    let earliest = now.as_second() - window; // exclusive; hits are whole minutes
    (0..=minutes)
        .map(|k| now_minute - 60 * i64::try_from(k).expect("small"))
        .filter(|&m| m > earliest)
        .any(|m| {
            let t = Timestamp::from_second(m).expect("in range");
            schedule.fires_at(TimeZone::UTC.to_datetime(t))
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_window_matches_a_minute_by_minute_scan(
        spec in schedule(),
        minutes in duration_minutes(),
        now in instant(),
    ) {
        let parsed = CronSchedule::parse(&spec).expect("generated schedules parse");
        prop_assume!(parsed.ever_fires());
        let window = Window::new(&spec, Duration::from_secs(minutes * 60)).expect("parses");
        prop_assert_eq!(window.is_active(now), brute_force_active(&parsed, minutes, now));
    }

    #[test]
    fn transitions_are_where_the_window_changes(
        spec in schedule(),
        minutes in duration_minutes(),
        now in instant(),
    ) {
        let window = Window::new(&spec, Duration::from_secs(minutes * 60)).expect("parses");
        let active = window.is_active(now);
        let (t, expect_after) = match window.next_transition(now) {
            Transition::None => return Ok(()),
            Transition::Opens(t) => (t, true),
            Transition::Closes(t) => (t, false),
        };
        prop_assert_eq!(expect_after, !active, "the transition flips the current state");
        prop_assert!(t > now);
        prop_assert_eq!(window.is_active(t), expect_after);
        // No change before `t`: sample up to 100 instants in between, and the last second.
        let span = t.duration_since(now).as_secs();
        let step = (span / 100).max(1);
        let mut s = 0;
        while s < span {
            let between = now + SignedDuration::from_secs(s);
            prop_assert_eq!(window.is_active(between), active, "at {}", between);
            s += step;
        }
        prop_assert_eq!(window.is_active(t - SignedDuration::from_secs(1)), active);
    }

    #[test]
    fn inactive_budgets_never_restrict(
        list in prop::collection::vec(budget(), 0..5),
        extra in budget(),
        pool in counts(),
        now in instant(),
    ) {
        let with_extra: Vec<Budget> = list.iter().cloned().chain([extra.clone()]).collect();
        let only_extra = Budgets::parse(std::slice::from_ref(&extra));
        for reason in REASONS {
            // The extra budget alone is unrestricted exactly when it is inactive (or does not apply).
            if only_extra.evaluate(reason, pool, now).allowed == Allowed::Unlimited {
                prop_assert_eq!(
                    Budgets::parse(&with_extra).evaluate(reason, pool, now).allowed,
                    Budgets::parse(&list).evaluate(reason, pool, now).allowed
                );
            }
        }
    }

    #[test]
    fn adding_a_budget_never_allows_more(
        list in prop::collection::vec(budget(), 0..5),
        extra in budget(),
        pool in counts(),
        now in instant(),
    ) {
        let with_extra: Vec<Budget> = list.iter().cloned().chain([extra]).collect();
        for reason in REASONS {
            let before = Budgets::parse(&list).evaluate(reason, pool, now);
            let after = Budgets::parse(&with_extra).evaluate(reason, pool, now);
            prop_assert!(after.allowed <= before.allowed);
            prop_assert!(after.budget <= before.budget);
        }
    }

    #[test]
    fn the_budget_is_allowed_minus_disrupting(
        list in prop::collection::vec(budget(), 0..5),
        pool in counts(),
        now in instant(),
        reason in prop::sample::select(REASONS.to_vec()),
    ) {
        let a = Budgets::parse(&list).evaluate(reason, pool, now);
        prop_assert_eq!(a.disrupting, pool.disrupting);
        match a.allowed {
            Allowed::Unlimited => prop_assert_eq!(a.budget, Allowed::Unlimited),
            Allowed::Nodes(n) => {
                prop_assert_eq!(a.budget, Allowed::Nodes(n.saturating_sub(pool.disrupting)))
            }
        }
    }

    #[test]
    fn percentages_are_the_smallest_count_covering_the_share(
        percent in 0..=100u64,
        total in 0..=10_000u64,
        reason in prop::sample::select(REASONS.to_vec()),
    ) {
        let b = Budgets::parse(&[Budget { nodes: Some(format!("{percent}%")), ..Budget::default() }]);
        let now = Timestamp::UNIX_EPOCH;
        let Allowed::Nodes(n) = b.evaluate(reason, PoolCounts { total, disrupting: 0 }, now).allowed
        else {
            return Err(TestCaseError::fail("a percentage always restricts"));
        };
        prop_assert!(n * 100 >= percent * total);
        prop_assert!(n == 0 || (n - 1) * 100 < percent * total);
    }
}
