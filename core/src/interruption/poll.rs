//! The interruption loop: receive a batch, read and dispatch each message, let the controller's
//! [`Handler`] carry out the actions, delete what was handled. What happened is returned as a
//! [`BatchReport`] (the controller owns the metrics); the time comes from the caller's [`Clock`].

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, SystemTime};

use futures::future::join_all;

use super::dispatch::{dispatch, Action, ClaimInfo};
use super::message::{parse, Kind};
use super::queue::{MessageQueue, QueueError, QueueMessage};
use crate::engine::Clock;

/// First wait after a failed receive; it doubles per failure in a row, up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// What the controller does for the loop: find the claim of an instance, carry out an action.
pub trait Handler: Send + Sync {
    type Error: std::error::Error + Send + Sync + 'static;

    /// The claim running `instance_id` in this cluster, if any.
    fn claim_of(&self, instance_id: &str) -> Option<ClaimInfo>;

    /// Carries out `action` of a `kind` message. Must be bounded in time (the batch waits for it) and
    /// idempotent: after an error, the message stays on the queue and all its actions are carried out again
    /// when it comes back.
    fn apply(
        &self,
        kind: Kind,
        action: &Action,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// What one batch did, for the metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchReport {
    /// Messages read, by kind (`karpenter_interruption_received_messages_total{message_type}`).
    pub received: BTreeMap<Kind, u32>,
    /// Messages that were not events kerf can read (logged and deleted).
    pub malformed: u32,
    /// Messages deleted (`karpenter_interruption_deleted_messages_total`).
    pub deleted: u32,
    /// Messages left on the queue because an action failed; they come back after the visibility timeout.
    pub left_for_retry: u32,
    /// Messages handled whose deletion failed; they come back and are handled again.
    pub delete_failures: u32,
    /// For each read message with an event time: receive time − event time
    /// (`karpenter_interruption_message_queue_duration_seconds`); zero when the event seems to be from the
    /// future.
    pub queue_latencies: Vec<Duration>,
}

/// How one message ended.
enum Outcome {
    Malformed {
        deleted: bool,
    },
    Read {
        kind: Kind,
        latency: Option<Duration>,
        /// `None` when an action failed (not deleted, left for retry); else whether the delete worked.
        deleted: Option<bool>,
    },
}

/// Receives one batch (waiting as long as the queue's long poll) and handles its messages concurrently;
/// the clock is read once the batch has arrived. Only a failed receive is an error: every message's own
/// failures are logged and counted in the report.
pub async fn process_batch<Q: MessageQueue, H: Handler>(
    queue: &Q,
    handler: &H,
    clock: &(impl Clock + ?Sized),
) -> Result<BatchReport, QueueError> {
    let messages = queue.receive().await?;
    let received_at = clock.now();
    let outcomes = join_all(
        messages
            .iter()
            .map(|message| handle(queue, handler, message, received_at)),
    )
    .await;
    let mut report = BatchReport::default();
    for outcome in outcomes {
        let deleted = match outcome {
            Outcome::Malformed { deleted } => {
                report.malformed += 1;
                Some(deleted)
            }
            Outcome::Read {
                kind,
                latency,
                deleted,
            } => {
                *report.received.entry(kind).or_default() += 1;
                report.queue_latencies.extend(latency);
                deleted
            }
        };
        match deleted {
            Some(true) => report.deleted += 1,
            Some(false) => report.delete_failures += 1,
            None => report.left_for_retry += 1,
        }
    }
    Ok(report)
}

async fn handle<Q: MessageQueue, H: Handler>(
    queue: &Q,
    handler: &H,
    message: &QueueMessage,
    received_at: SystemTime,
) -> Outcome {
    let parsed = match parse(&message.body) {
        Ok(parsed) => parsed,
        Err(error) => {
            // The start of the body is enough to tell what sent it.
            let body: String = message.body.chars().take(256).collect();
            tracing::warn!(message_id = %message.id, %error, %body, "deleting a malformed interruption message");
            return Outcome::Malformed {
                deleted: delete(queue, message).await,
            };
        }
    };
    let latency = parsed
        .time
        .map(|time| received_at.duration_since(time).unwrap_or_default());
    for action in dispatch(&parsed, |id| handler.claim_of(id)) {
        if let Err(error) = handler.apply(parsed.kind, &action).await {
            tracing::warn!(
                message_id = %message.id, kind = %parsed.kind, ?action, %error,
                "interruption action failed; the message stays on the queue for a retry"
            );
            return Outcome::Read {
                kind: parsed.kind,
                latency,
                deleted: None,
            };
        }
    }
    tracing::debug!(message_id = %message.id, kind = %parsed.kind, "handled an interruption message");
    Outcome::Read {
        kind: parsed.kind,
        latency,
        deleted: Some(delete(queue, message).await),
    }
}

/// Deletes a message; a failure is logged (the message comes back and is handled again).
async fn delete<Q: MessageQueue>(queue: &Q, message: &QueueMessage) -> bool {
    match queue.delete(&message.receipt_handle).await {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(message_id = %message.id, %error, "could not delete an interruption message");
            false
        }
    }
}

/// Runs [`process_batch`] until `shutdown` completes, passing every batch's result to `observe`. After a
/// failed receive it waits through `sleep` (the controller passes `tokio::time::sleep`): [`FIRST_BACKOFF`],
/// doubling per failure in a row up to [`MAX_BACKOFF`]. A batch cut short by shutdown leaves its messages
/// undeleted: they come back to the next leader.
pub async fn run<Q, H, S>(
    queue: &Q,
    handler: &H,
    clock: &(impl Clock + ?Sized),
    sleep: impl Fn(Duration) -> S,
    mut observe: impl FnMut(&Result<BatchReport, QueueError>),
    shutdown: impl Future<Output = ()>,
) where
    Q: MessageQueue,
    H: Handler,
    S: Future<Output = ()>,
{
    tokio::pin!(shutdown);
    let mut backoff = FIRST_BACKOFF;
    loop {
        let result = tokio::select! {
            biased;
            () = &mut shutdown => return,
            result = process_batch(queue, handler, clock) => result,
        };
        observe(&result);
        match result {
            Ok(_) => backoff = FIRST_BACKOFF,
            Err(error) => {
                tracing::warn!(%error, retry_in = ?backoff, "receiving interruption messages failed");
                tokio::select! {
                    biased;
                    () = &mut shutdown => return,
                    () = sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}
