//! The client-side call budget ([`kerf_core::cloud::api_limits`]): one token bucket per API, shared by every call of
//! the process, which waits for its token before it is sent.

use std::collections::HashMap;
use std::sync::Mutex;

use kerf_core::cloud::api_limits::{ApiRateLimits, TokenBucket, OPERATIONS};
use tokio::time::Instant;

/// The buckets of every API, filled as the limits say.
#[derive(Debug)]
pub struct ApiBudget {
    limits: ApiRateLimits,
    start: Instant,
    buckets: Mutex<HashMap<&'static str, TokenBucket>>,
}

impl ApiBudget {
    pub fn new(limits: ApiRateLimits) -> Self {
        ApiBudget {
            limits,
            start: Instant::now(),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Waits until a call of `operation` is within its budget. The caller bounds the wait (with the call).
    pub async fn acquire(&self, operation: &'static str) {
        debug_assert!(
            OPERATIONS.contains(&operation),
            "{operation} is not in api_limits::OPERATIONS"
        );
        let now = self.start.elapsed();
        let wait = {
            let mut buckets = self
                .buckets
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            buckets
                .entry(operation)
                .or_insert_with(|| TokenBucket::new(self.limits.limit(operation), now))
                .take(now)
        };
        if !wait.is_zero() {
            tracing::debug!(
                operation,
                ?wait,
                "waiting for the API's client-side rate limit"
            );
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A burst past the bucket is paced at the API's rate, and other APIs are not held up by it.
    #[tokio::test]
    async fn calls_past_the_burst_wait_for_their_token() {
        let budget = ApiBudget::new(ApiRateLimits::parse("CreateFleet=100:2").unwrap());
        let started = Instant::now();
        for _ in 0..2 {
            budget.acquire("CreateFleet").await;
        }
        assert!(
            started.elapsed() < Duration::from_millis(20),
            "the burst goes at once"
        );
        budget.acquire("DescribeInstances").await;
        assert!(
            started.elapsed() < Duration::from_millis(20),
            "another API has its own bucket"
        );
        for _ in 0..5 {
            budget.acquire("CreateFleet").await;
        }
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(45) && waited < Duration::from_secs(1),
            "five calls past the burst at 100/s take 50 ms: {waited:?}"
        );
    }
}
