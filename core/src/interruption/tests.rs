//! The loop over the in-memory queue with a recording handler.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::*;
use crate::catalog::CapacityType;
use crate::cloud::OfferingKey;
use crate::engine::Clock;

const INSTANCE: &str = "i-0123456789abcdef0";

fn examples() -> Vec<&'static str> {
    include_str!("examples.jsonl").lines().collect()
}

/// The examples' `time`.
fn event_time() -> SystemTime {
    humantime::parse_rfc3339("2025-03-01T10:00:00Z").unwrap()
}

/// A clock stopped at `.0`.
struct At(SystemTime);

impl Clock for At {
    fn now(&self) -> SystemTime {
        self.0
    }
}

/// A clock stopped at the examples' `time`.
fn at_event_time() -> At {
    At(event_time())
}

#[derive(Debug, thiserror::Error)]
#[error("the API server is unavailable")]
struct Unavailable;

/// Claim `web-1` runs the examples' instance (m5.large in us-west-2a); actions on claims in `failing` fail.
#[derive(Default)]
struct Recorder {
    applied: Mutex<Vec<(Kind, Action)>>,
    failing: Mutex<HashSet<String>>,
}

impl Recorder {
    fn applied(&self) -> Vec<(Kind, Action)> {
        self.applied.lock().unwrap().clone()
    }
}

impl Handler for Recorder {
    type Error = Unavailable;

    fn claim_of(&self, instance_id: &str) -> Option<ClaimInfo> {
        (instance_id == INSTANCE).then(|| ClaimInfo {
            name: "web-1".into(),
            instance_type: Some("m5.large".into()),
            zone: Some("us-west-2a".into()),
        })
    }

    async fn apply(&self, kind: Kind, action: &Action) -> Result<(), Unavailable> {
        if let Action::Claim { name, .. } = action {
            if self.failing.lock().unwrap().contains(name) {
                return Err(Unavailable);
            }
        }
        self.applied.lock().unwrap().push((kind, action.clone()));
        Ok(())
    }
}

fn claim_action(reason: EventReason, delete: bool) -> Action {
    Action::Claim {
        name: "web-1".into(),
        instance_id: INSTANCE.into(),
        reason,
        delete,
        forceful: false,
    }
}

fn spot_offering() -> Action {
    Action::MarkUnavailable(OfferingKey {
        capacity_type: CapacityType::Spot,
        instance_type: "m5.large".into(),
        zone: "us-west-2a".into(),
    })
}

#[tokio::test]
async fn a_batch_acts_on_every_event_deletes_every_message_and_reports_kinds_and_latency() {
    let queue = MemoryQueue::new();
    for body in examples() {
        queue.send(body);
    }
    queue.send("{not json");
    queue.send(r#"{"version":"0","source":"aws.ec2","detail-type":"EC2 AMI State Change","time":"2025-03-01T10:00:00Z","detail":{}}"#);
    let recorder = Recorder::default();

    let report = process_batch(
        &queue,
        &recorder,
        &At(event_time() + Duration::from_secs(30)),
    )
    .await
    .unwrap();

    assert_eq!(
        report,
        BatchReport {
            received: BTreeMap::from([
                (Kind::SpotInterrupted, 1),
                (Kind::RebalanceRecommendation, 1),
                (Kind::ScheduledChange, 1),
                (Kind::InstanceStopped, 1),
                (Kind::CapacityReservationInterrupted, 1),
                (Kind::NoOp, 1),
            ]),
            malformed: 1,
            deleted: 7,
            left_for_retry: 0,
            delete_failures: 0,
            queue_latencies: vec![Duration::from_secs(30); 6],
        }
    );
    assert!(queue.bodies().is_empty());
    let reserved_offering = Action::MarkUnavailable(OfferingKey {
        capacity_type: CapacityType::Reserved,
        instance_type: "m5.large".into(),
        zone: "us-west-2a".into(),
    });
    assert_eq!(
        recorder.applied(),
        [
            (Kind::SpotInterrupted, spot_offering()),
            (
                Kind::SpotInterrupted,
                claim_action(EventReason::SpotInterrupted, true)
            ),
            (
                Kind::RebalanceRecommendation,
                claim_action(EventReason::SpotRebalanceRecommendation, false)
            ),
            (
                Kind::InstanceStopped,
                claim_action(EventReason::InstanceStopping, true)
            ),
            (
                Kind::ScheduledChange,
                claim_action(EventReason::InstanceUnhealthy, true)
            ),
            (Kind::CapacityReservationInterrupted, reserved_offering),
            (
                Kind::CapacityReservationInterrupted,
                claim_action(EventReason::CapacityReservationInstanceInterrupted, true)
            ),
        ]
    );
}

#[tokio::test]
async fn a_failed_action_leaves_the_message_for_a_retry_that_repeats_its_actions() {
    let queue = MemoryQueue::new();
    queue.send(examples()[0]);
    queue.send(&examples()[0].replace(INSTANCE, "i-other-cluster"));
    let recorder = Recorder::default();
    recorder.failing.lock().unwrap().insert("web-1".into());

    let report = process_batch(&queue, &recorder, &at_event_time())
        .await
        .unwrap();
    assert_eq!(
        (
            report.received[&Kind::SpotInterrupted],
            report.deleted,
            report.left_for_retry
        ),
        (2, 1, 1)
    );
    // The offering was marked before the claim's deletion failed; the other cluster's message is gone.
    assert_eq!(
        recorder.applied(),
        [(Kind::SpotInterrupted, spot_offering())]
    );
    assert_eq!(queue.bodies(), [examples()[0]]);

    // Still invisible until its visibility timeout passes.
    let report = process_batch(&queue, &recorder, &at_event_time())
        .await
        .unwrap();
    assert_eq!(report, BatchReport::default());

    recorder.failing.lock().unwrap().clear();
    queue.expire_visibility();
    let report = process_batch(&queue, &recorder, &at_event_time())
        .await
        .unwrap();
    assert_eq!((report.deleted, report.left_for_retry), (1, 0));
    assert!(queue.bodies().is_empty());
    assert_eq!(
        recorder.applied(),
        [
            (Kind::SpotInterrupted, spot_offering()),
            (Kind::SpotInterrupted, spot_offering()),
            (
                Kind::SpotInterrupted,
                claim_action(EventReason::SpotInterrupted, true)
            ),
        ]
    );
}

#[tokio::test]
async fn a_failed_delete_is_counted_and_the_message_comes_back() {
    let queue = MemoryQueue::new();
    queue.send(examples()[2]);
    queue.fail_next_delete(QueueError::Api {
        operation: "DeleteMessage",
        code: "InternalError".into(),
        message: "try again".into(),
    });
    let recorder = Recorder::default();
    let report = process_batch(&queue, &recorder, &at_event_time())
        .await
        .unwrap();
    assert_eq!(
        (
            report.deleted,
            report.delete_failures,
            report.left_for_retry
        ),
        (0, 1, 0)
    );
    queue.expire_visibility();
    let report = process_batch(&queue, &recorder, &at_event_time())
        .await
        .unwrap();
    assert_eq!((report.deleted, report.delete_failures), (1, 0));
    assert!(queue.bodies().is_empty());
    assert_eq!(recorder.applied().len(), 2);
}

#[tokio::test]
async fn an_event_from_the_future_has_zero_latency_and_a_failed_receive_is_the_error() {
    let queue = MemoryQueue::new();
    queue.send(examples()[1]);
    let report = process_batch(
        &queue,
        &Recorder::default(),
        &At(event_time() - Duration::from_secs(5)),
    )
    .await
    .unwrap();
    assert_eq!(report.queue_latencies, [Duration::ZERO]);

    let fault = QueueError::NoSuchQueue {
        queue: "kerf".into(),
    };
    queue.fail_next_receive(fault.clone());
    assert_eq!(
        process_batch(&queue, &Recorder::default(), &at_event_time()).await,
        Err(fault)
    );
}

/// Runs the loop over `queue` until `stop` says so, without waiting in backoffs; returns each batch's result and each
/// backoff asked for.
async fn run_until(
    queue: &MemoryQueue,
    recorder: &Recorder,
    stop: impl Fn(&[Result<BatchReport, QueueError>]) -> bool,
) -> (Vec<Result<BatchReport, QueueError>>, Vec<Duration>) {
    let done = tokio::sync::Notify::new();
    let sleeps = Mutex::new(Vec::new());
    let mut results = Vec::new();
    run(
        queue,
        recorder,
        &at_event_time(),
        |backoff| {
            let sleeps = &sleeps;
            // Recorded when waited for: a shutdown during the backoff drops the wait unpolled.
            async move {
                sleeps.lock().unwrap().push(backoff);
                tokio::task::yield_now().await;
            }
        },
        |result| {
            // An empty in-memory queue answers at once: a loop that missed its shutdown would spin.
            assert!(results.len() < 20, "the loop did not stop");
            results.push(result.clone());
            if stop(&results) {
                done.notify_one();
            }
        },
        done.notified(),
    )
    .await;
    (results, sleeps.into_inner().unwrap())
}

fn timeout() -> QueueError {
    QueueError::Timeout {
        operation: "ReceiveMessage",
        after: Duration::from_secs(50),
    }
}

#[tokio::test]
async fn the_loop_handles_batches_and_backs_off_after_failed_receives() {
    let queue = MemoryQueue::new();
    queue.fail_next_receive(timeout());
    queue.fail_next_receive(timeout());
    queue.send(examples()[0]);
    queue.send(examples()[3]);
    let recorder = Recorder::default();

    let (results, sleeps) = run_until(&queue, &recorder, |results| {
        results
            .iter()
            .any(|r| r.as_ref().is_ok_and(|r| r.deleted == 2))
    })
    .await;

    assert_eq!(results.len(), 3);
    assert_eq!(results[..2], [Err(timeout()), Err(timeout())]);
    assert_eq!(results[2].as_ref().map(|r| r.deleted), Ok(2));
    assert_eq!(sleeps, [Duration::from_secs(1), Duration::from_secs(2)]);
    assert!(queue.bodies().is_empty());
    assert_eq!(recorder.applied().len(), 3);
}

#[tokio::test]
async fn the_backoff_doubles_up_to_a_minute_and_resets_after_a_good_batch() {
    let queue = MemoryQueue::new();
    for _ in 0..9 {
        queue.fail_next_receive(timeout());
    }
    // The loop stops right after the ninth failure, before its backoff.
    let (results, sleeps) =
        run_until(&queue, &Recorder::default(), |results| results.len() == 9).await;
    assert!(results.iter().all(Result::is_err));
    assert_eq!(
        sleeps,
        [1, 2, 4, 8, 16, 32, 60, 60].map(Duration::from_secs)
    );

    queue.fail_next_receive(timeout());
    queue.send(examples()[1]);
    let (_, sleeps) = run_until(&queue, &Recorder::default(), |results| results.len() == 3).await;
    // A failure, a good batch (the message), a good empty batch: one backoff, from the start.
    assert_eq!(sleeps, [Duration::from_secs(1)]);
}

#[tokio::test]
async fn the_loop_returns_at_once_when_shut_down_before_it_starts() {
    let queue = MemoryQueue::new();
    queue.send(examples()[0]);
    let mut observed = 0;
    run(
        &queue,
        &Recorder::default(),
        &at_event_time(),
        |_| std::future::ready(()),
        |_| observed += 1,
        std::future::ready(()),
    )
    .await;
    assert_eq!(observed, 0);
    assert_eq!(queue.bodies(), [examples()[0]]);
}
