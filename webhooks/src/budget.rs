//! The memory that admission requests may hold at once, across all connections.
//!
//! Each body is bounded ([`crate::BODY_LIMIT`]), but 150 concurrent 3 MiB bodies are still
//! 450 MiB. So a request reserves its share of one byte budget before its body is read (its
//! `Content-Length`, or the body limit when it has none), grows the reservation to what the
//! parsed review will cost once the body is in, and keeps it until its hook has finished. A
//! request that cannot reserve within a short wait is turned away with 429 and `Retry-After`
//! without its body being read: the apiserver's client retries those.

use std::sync::Arc;

use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore},
    time::{timeout_at, Instant},
};

/// The budget unless [`crate::Webhooks::in_flight_bytes`] says otherwise: with the per-connection
/// buffers and the process itself, it stays well under the chart's 256 MiB memory limit.
pub const DEFAULT_IN_FLIGHT_BYTES: usize = 64 * 1024 * 1024;

/// What one parsed JSON value costs beyond its text, until the hook is done: a
/// `serde_json::Value` is 32 bytes, the vector slot or map entry holding it with its allocation
/// about as much again, and a hook works on a copy (defaulting returns a changed object) and
/// builds its own typed view of it.
const VALUE_COST: usize = 160;

/// The shared budget, in bytes.
#[derive(Debug)]
pub(crate) struct Budget {
    semaphore: Arc<Semaphore>,
    /// The whole budget: no request is charged more, so any request can run alone.
    total: u32,
}

/// Bytes reserved by one request, given back when it is dropped.
#[derive(Debug)]
pub(crate) struct Reservation(OwnedSemaphorePermit);

impl Budget {
    pub(crate) fn new(bytes: usize) -> Self {
        let total = u32::try_from(bytes.min(Semaphore::MAX_PERMITS)).unwrap_or(u32::MAX);
        Self {
            semaphore: Arc::new(Semaphore::new(total as usize)),
            total,
        }
    }

    /// Reserves `bytes` (at most the whole budget), waiting until `until` at most; `None` when
    /// the budget stayed taken.
    pub(crate) async fn reserve(&self, bytes: usize, until: Instant) -> Option<Reservation> {
        let permits = self.charge(bytes);
        let acquire = self.semaphore.clone().acquire_many_owned(permits);
        match timeout_at(until, acquire).await {
            Ok(Ok(permit)) => Some(Reservation(permit)),
            // The semaphore is never closed; a closed one has nothing to give either.
            Ok(Err(_)) | Err(_) => None,
        }
    }

    /// Grows `reservation` to `bytes` (at most the whole budget), or shrinks it, waiting until
    /// `until` at most for what is missing; `false` when it could not grow.
    pub(crate) async fn resize(
        &self,
        reservation: &mut Reservation,
        bytes: usize,
        until: Instant,
    ) -> bool {
        let wanted = self.charge(bytes) as usize;
        let held = reservation.0.num_permits();
        if wanted <= held {
            drop(reservation.0.split(held - wanted));
            return true;
        }
        match self.reserve(wanted - held, until).await {
            Some(more) => {
                reservation.0.merge(more.0);
                true
            }
            None => false,
        }
    }

    fn charge(&self, bytes: usize) -> u32 {
        u32::try_from(bytes).map_or(self.total, |bytes| bytes.min(self.total))
    }
}

/// What a review of `len` bytes holding `values` JSON values costs in memory until its hook is
/// done: the body, its strings again once parsed and once more in the copy a hook makes, and
/// [`VALUE_COST`] per value.
pub(crate) fn parsed_cost(len: usize, values: usize) -> usize {
    len.saturating_mul(3)
        .saturating_add(values.saturating_mul(VALUE_COST))
}

/// How many JSON values `body` holds, about: one per `,` `:` `[` and `{` outside strings. One
/// linear pass over the bytes, before anything is parsed; a string full of commas counts as
/// one value.
pub(crate) fn json_values(body: &[u8]) -> usize {
    let mut values = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &byte in body {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match byte {
                b'"' => in_string = true,
                b',' | b':' | b'[' | b'{' => values += 1,
                _ => {}
            }
        }
    }
    values
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn soon() -> Instant {
        Instant::now() + Duration::from_millis(20)
    }

    #[tokio::test]
    async fn reservations_share_the_budget_and_give_it_back() {
        let budget = Budget::new(100);
        let first = budget.reserve(60, soon()).await.expect("room");
        assert!(budget.reserve(60, soon()).await.is_none(), "40 left");
        let second = budget.reserve(40, soon()).await.expect("room");
        drop(first);
        assert!(budget.reserve(60, soon()).await.is_some());
        drop(second);
    }

    #[tokio::test]
    async fn a_request_larger_than_the_budget_runs_alone() {
        let budget = Budget::new(100);
        let mut big = budget.reserve(1000, soon()).await.expect("whole budget");
        assert!(budget.reserve(1, soon()).await.is_none());
        assert!(budget.resize(&mut big, 10, soon()).await, "shrinks");
        assert!(budget.reserve(90, soon()).await.is_some());
    }

    #[tokio::test]
    async fn growing_waits_for_room() {
        let budget = Budget::new(100);
        let mut mine = budget.reserve(10, soon()).await.expect("room");
        let other = budget.reserve(80, soon()).await.expect("room");
        assert!(!budget.resize(&mut mine, 50, soon()).await);
        drop(other);
        assert!(budget.resize(&mut mine, 50, soon()).await);
        assert_eq!(mine.0.num_permits(), 50);
    }

    #[test]
    fn values_are_counted_outside_strings() {
        assert_eq!(json_values(b"\"abc\""), 0);
        assert_eq!(json_values(b"[1,2]"), 2);
        assert_eq!(json_values(br#"{"a":[]}"#), 3);
        assert_eq!(json_values(br#"["a,b:[{", "\",[", 1]"#), 3);
        assert_eq!(parsed_cost(5, 2), 15 + 2 * VALUE_COST);
    }
}
