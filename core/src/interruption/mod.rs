//! Interruption: the EventBridge events AWS sends to the interruption queue (spot interruption warnings,
//! rebalance recommendations, Health scheduled changes, instance state changes, capacity reservation
//! interruptions), read ([`parse`]) and turned into actions on NodeClaims and offerings ([`dispatch`]),
//! both pure; EC2's status checks become the same messages ([`instance_status`]). [`run`] is the loop the controller drives over a [`MessageQueue`] (SQS in `kerf-aws`,
//! [`MemoryQueue`] in tests) and its own [`Handler`]. docs/interruption.md describes the behaviour.

mod dispatch;
pub mod instance_status;
mod memory;
mod message;
mod poll;
mod queue;

#[cfg(test)]
mod tests;

pub use dispatch::{dispatch, Action, ClaimInfo, EventReason};
pub use memory::MemoryQueue;
pub use message::{parse, Kind, Message, ParseError};
pub use poll::{process_batch, run, BatchReport, Handler, FIRST_BACKOFF, MAX_BACKOFF};
pub use queue::{MessageQueue, QueueError, QueueMessage, MAX_MESSAGES};
