//! Instance status checks as interruption messages (Karpenter AWS's `interruption.instancestatus` controller):
//! every minute EC2 is asked which instances have a failed status check or a scheduled event, and each unhealthy
//! category of an instance becomes a [`Message`] that [`super::dispatch`] turns into actions like a queue message.
//! A failed instance or system check counts once it has failed for [`UNHEALTHY_AFTER`] (a blip is not a broken
//! instance) and terminates the node forcefully; a scheduled event counts at once (the host needs vacating) and
//! drains it. EBS checks are left alone: a failed volume may be a pod's, not the node's.
//!
//! Pure: [`findings`] decides from what the cloud reports and the time; [`Seen`] remembers which (instance,
//! category) pairs were counted, so `karpenter_interruption_instance_status_unhealthy_total` counts each once
//! while it lasts.

use super::message::{Kind, Message};
use crate::cloud::{InstanceHealth, StatusCategory};
use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

/// How often EC2 is asked.
pub const POLL_EVERY: Duration = Duration::from_secs(60);
/// How long an instance or system check must have failed before it counts.
pub const UNHEALTHY_AFTER: Duration = Duration::from_secs(120);

/// One unhealthy category of one instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub instance_id: String,
    pub category: StatusCategory,
    /// The earliest impairment among the instance's counted checks (`now` for a scheduled event).
    pub since: SystemTime,
}

impl Finding {
    /// The message it stands for.
    pub fn message(&self) -> Message {
        Message {
            kind: kind(self.category),
            instance_ids: vec![self.instance_id.clone()],
            time: Some(self.since),
        }
    }
}

fn kind(category: StatusCategory) -> Kind {
    match category {
        StatusCategory::Instance => Kind::InstanceStatus,
        StatusCategory::System => Kind::SystemStatus,
        StatusCategory::Event | StatusCategory::Ebs => Kind::EventStatus,
    }
}

/// The unhealthy categories of `statuses` at `now`, one finding per instance and category, in the order of
/// the instances and then of the categories.
pub fn findings(statuses: &[InstanceHealth], now: SystemTime) -> Vec<Finding> {
    let mut found = Vec::new();
    for status in statuses {
        let counted: Vec<(StatusCategory, SystemTime)> = status
            .checks
            .iter()
            .filter(|c| c.failed && c.category != StatusCategory::Ebs)
            .filter_map(|c| {
                if c.category == StatusCategory::Event {
                    return Some((c.category, now));
                }
                // A failed check without a time has been failing for as long as anyone knows.
                let since = c.impaired_since.unwrap_or(SystemTime::UNIX_EPOCH);
                let failing_for = now.duration_since(since).unwrap_or_default();
                (failing_for >= UNHEALTHY_AFTER).then_some((c.category, since))
            })
            .collect();
        let Some(since) = counted.iter().map(|(_, t)| *t).min() else {
            continue;
        };
        let categories: BTreeSet<StatusCategory> = counted.iter().map(|(c, _)| *c).collect();
        for category in categories {
            found.push(Finding {
                instance_id: status.instance_id.clone(),
                category,
                since,
            });
        }
    }
    found
}

/// The (instance, category) pairs counted so far that are still unhealthy.
#[derive(Debug, Default)]
pub struct Seen(BTreeSet<(String, StatusCategory)>);

impl Seen {
    /// Of `counted` (findings whose instance runs one of this cluster's claims), those not counted before; the
    /// pairs no longer reported are forgotten, so an instance unhealthy again later is counted again.
    pub fn newly<'a>(&mut self, counted: &[&'a Finding]) -> Vec<&'a Finding> {
        let current: BTreeSet<(String, StatusCategory)> = counted
            .iter()
            .map(|f| (f.instance_id.clone(), f.category))
            .collect();
        let new = counted
            .iter()
            .filter(|f| !self.0.contains(&(f.instance_id.clone(), f.category)))
            .copied()
            .collect();
        self.0 = current;
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::StatusCheck;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn check(category: StatusCategory, failed: bool, since: Option<u64>) -> StatusCheck {
        StatusCheck {
            category,
            name: "reachability".into(),
            failed,
            impaired_since: since.map(at),
        }
    }

    fn health(id: &str, checks: Vec<StatusCheck>) -> InstanceHealth {
        InstanceHealth {
            instance_id: id.into(),
            checks,
        }
    }

    /// Karpenter AWS's instance status provider suite: failed checks count after the 2-minute threshold, a
    /// passed check never, a scheduled event at once, an EBS check never.
    #[test]
    fn failed_checks_count_after_two_minutes_and_events_at_once() {
        use StatusCategory::*;
        let now = at(600);
        let cases = [
            (
                vec![check(Instance, true, Some(0))],
                vec![(Instance, at(0))],
            ),
            (vec![check(Instance, true, Some(500))], vec![]),
            (
                vec![check(Instance, true, Some(480))],
                vec![(Instance, at(480))],
            ),
            (vec![check(System, false, Some(0))], vec![]),
            (vec![check(Ebs, true, Some(0))], vec![]),
            (vec![check(Event, true, None)], vec![(Event, now)]),
            (
                vec![
                    check(System, true, Some(100)),
                    check(Instance, true, Some(0)),
                ],
                vec![(Instance, at(0)), (System, at(0))],
            ),
        ];
        for (checks, want) in cases {
            let got: Vec<(StatusCategory, SystemTime)> =
                findings(&[health("i-1", checks.clone())], now)
                    .into_iter()
                    .map(|f| (f.category, f.since))
                    .collect();
            assert_eq!(got, want, "{checks:?}");
        }
    }

    /// Karpenter's actionForMessage through dispatch: the categories become their kinds.
    #[test]
    fn categories_become_the_kinds_dispatch_acts_on() {
        let found = findings(
            &[health(
                "i-1",
                vec![
                    check(StatusCategory::Event, true, None),
                    check(StatusCategory::System, true, Some(0)),
                ],
            )],
            at(600),
        );
        let kinds: Vec<Kind> = found.iter().map(|f| f.message().kind).collect();
        assert_eq!(kinds, [Kind::SystemStatus, Kind::EventStatus]);
        assert_eq!(found[0].message().instance_ids, ["i-1"]);
    }

    /// "the metric is only incremented the first time a given instance+category is observed", and counted again
    /// after it recovered.
    #[test]
    fn each_instance_and_category_is_counted_once_while_it_lasts() {
        let one = Finding {
            instance_id: "i-1".into(),
            category: StatusCategory::Instance,
            since: at(0),
        };
        let two = Finding {
            category: StatusCategory::Event,
            ..one.clone()
        };
        let mut seen = Seen::default();
        assert_eq!(seen.newly(&[&one]).len(), 1);
        assert_eq!(seen.newly(&[&one, &two]), [&two]);
        assert!(seen.newly(&[&one, &two]).is_empty());
        assert!(seen.newly(&[]).is_empty());
        assert_eq!(
            seen.newly(&[&one]).len(),
            1,
            "counted again after recovering"
        );
    }
}
