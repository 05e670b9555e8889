//! [`MemoryQueue`]: an in-memory [`MessageQueue`] for tests and the simulator. It never waits: a receive on
//! an empty queue returns nothing at once. Visibility is explicit: received messages stay in flight until
//! deleted or until [`MemoryQueue::expire_visibility`] puts them back, as SQS does when the visibility
//! timeout passes.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use super::queue::{MessageQueue, QueueError, QueueMessage, MAX_MESSAGES};

#[derive(Debug, Default)]
struct State {
    visible: VecDeque<Stored>,
    in_flight: Vec<(String, Stored)>,
    next_id: u64,
    next_receipt: u64,
    /// Errors the next calls return, one per call, before any real work.
    receive_faults: VecDeque<QueueError>,
    delete_faults: VecDeque<QueueError>,
}

#[derive(Clone, Debug)]
struct Stored {
    id: String,
    body: String,
}

/// An in-memory queue.
#[derive(Debug, Default)]
pub struct MemoryQueue {
    state: Mutex<State>,
}

impl MemoryQueue {
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Each update under the lock moves whole entries: a panic elsewhere leaves the state consistent.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Appends a message; returns its ID.
    pub fn send(&self, body: &str) -> String {
        let mut state = self.state();
        state.next_id += 1;
        let id = format!("m-{}", state.next_id);
        state.visible.push_back(Stored {
            id: id.clone(),
            body: body.to_owned(),
        });
        id
    }

    /// Makes every message in flight visible again (their visibility timeout passed).
    pub fn expire_visibility(&self) {
        let mut state = self.state();
        let returned: Vec<Stored> = state.in_flight.drain(..).map(|(_, m)| m).collect();
        for message in returned.into_iter().rev() {
            state.visible.push_front(message);
        }
    }

    /// Makes the next receive fail with `error` (faults queue up, one per receive).
    pub fn fail_next_receive(&self, error: QueueError) {
        self.state().receive_faults.push_back(error);
    }

    /// Makes the next delete fail with `error` (faults queue up, one per delete).
    pub fn fail_next_delete(&self, error: QueueError) {
        self.state().delete_faults.push_back(error);
    }

    /// The bodies of messages not yet deleted, visible first, then in flight.
    pub fn bodies(&self) -> Vec<String> {
        let state = self.state();
        state
            .visible
            .iter()
            .chain(state.in_flight.iter().map(|(_, m)| m))
            .map(|m| m.body.clone())
            .collect()
    }
}

impl MessageQueue for MemoryQueue {
    async fn receive(&self) -> Result<Vec<QueueMessage>, QueueError> {
        let mut state = self.state();
        if let Some(error) = state.receive_faults.pop_front() {
            return Err(error);
        }
        let count = state.visible.len().min(MAX_MESSAGES);
        let mut received = Vec::with_capacity(count);
        for message in state.visible.drain(..count).collect::<Vec<_>>() {
            state.next_receipt += 1;
            let receipt_handle = format!("r-{}", state.next_receipt);
            received.push(QueueMessage {
                id: message.id.clone(),
                receipt_handle: receipt_handle.clone(),
                body: message.body.clone(),
            });
            state.in_flight.push((receipt_handle, message));
        }
        Ok(received)
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        let mut state = self.state();
        if let Some(error) = state.delete_faults.pop_front() {
            return Err(error);
        }
        let Some(at) = state
            .in_flight
            .iter()
            .position(|(handle, _)| handle == receipt_handle)
        else {
            return Err(QueueError::InvalidReceipt {
                receipt_handle: receipt_handle.to_owned(),
            });
        };
        state.in_flight.remove(at);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn receives_ten_at_a_time_hides_them_until_deleted_or_expired() {
        let queue = MemoryQueue::new();
        for i in 0..12 {
            queue.send(&format!("body {i}"));
        }
        let first = queue.receive().await.unwrap();
        assert_eq!(first.len(), 10);
        assert_eq!(first[0].body, "body 0");
        let second = queue.receive().await.unwrap();
        assert_eq!(
            second.iter().map(|m| m.body.as_str()).collect::<Vec<_>>(),
            ["body 10", "body 11"]
        );
        assert!(queue.receive().await.unwrap().is_empty());

        for message in &first[1..] {
            queue.delete(&message.receipt_handle).await.unwrap();
        }
        assert_eq!(
            queue.delete(&first[1].receipt_handle).await,
            Err(QueueError::InvalidReceipt {
                receipt_handle: first[1].receipt_handle.clone()
            })
        );
        queue.expire_visibility();
        let again = queue.receive().await.unwrap();
        assert_eq!(
            again.iter().map(|m| m.body.as_str()).collect::<Vec<_>>(),
            ["body 0", "body 10", "body 11"]
        );
        // A new delivery has a new receipt handle; the old one is spent.
        assert_eq!(again[0].id, first[0].id);
        assert_ne!(again[0].receipt_handle, first[0].receipt_handle);
        assert!(queue.delete(&first[0].receipt_handle).await.is_err());
    }

    #[tokio::test]
    async fn injected_receive_faults_come_once_each() {
        let queue = MemoryQueue::new();
        queue.send("x");
        let fault = QueueError::Timeout {
            operation: "ReceiveMessage",
            after: std::time::Duration::from_secs(1),
        };
        queue.fail_next_receive(fault.clone());
        assert_eq!(queue.receive().await, Err(fault));
        assert_eq!(queue.receive().await.unwrap().len(), 1);
        assert_eq!(queue.bodies(), ["x"]);
    }
}
