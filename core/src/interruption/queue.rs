//! The queue edge: the [`MessageQueue`] port the interruption loop reads through, and its errors. The SQS
//! implementation lives in the `kerf-aws` crate; [`MemoryQueue`](super::MemoryQueue) is the in-memory one.

use std::future::Future;
use std::time::Duration;

use thiserror::Error;

/// Most messages one receive returns (SQS's own limit).
pub const MAX_MESSAGES: usize = 10;

/// A received message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueMessage {
    /// The queue's ID of the message (for logs).
    pub id: String,
    /// What deleting this delivery of the message takes.
    pub receipt_handle: String,
    pub body: String,
}

/// Where interruption messages come from. Every method is one bounded call (implementations time out).
pub trait MessageQueue: Send + Sync {
    /// Up to [`MAX_MESSAGES`] messages, waiting (long poll) a while for the first. A received message is
    /// hidden from other receivers until it is deleted or its visibility timeout passes, after which it is
    /// received again.
    fn receive(&self) -> impl Future<Output = Result<Vec<QueueMessage>, QueueError>> + Send;

    /// Deletes a received message for good.
    fn delete(&self, receipt_handle: &str) -> impl Future<Output = Result<(), QueueError>> + Send;
}

/// An error from a [`MessageQueue`].
#[derive(Clone, Debug, Error, PartialEq)]
pub enum QueueError {
    /// The client cannot be set up (no region, credentials that do not load).
    #[error("cannot set up the queue client: {0}")]
    Config(String),
    /// The queue does not exist.
    #[error("queue {queue} does not exist")]
    NoSuchQueue { queue: String },
    /// The receipt handle names no message in flight (deleted already, or its delivery expired).
    #[error("receipt handle {receipt_handle:?} is not valid")]
    InvalidReceipt { receipt_handle: String },
    /// The queue service answered with an error.
    #[error("{operation} failed: {code}: {message}")]
    Api {
        operation: &'static str,
        code: String,
        message: String,
    },
    /// The queue service did not answer in time.
    #[error("{operation} timed out after {after:?}")]
    Timeout {
        operation: &'static str,
        after: Duration,
    },
}

impl QueueError {
    /// A short, stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            QueueError::Config(_) => "config",
            QueueError::NoSuchQueue { .. } => "no_such_queue",
            QueueError::InvalidReceipt { .. } => "invalid_receipt",
            QueueError::Api { .. } => "api_error",
            QueueError::Timeout { .. } => "timeout",
        }
    }
}
