//! Prices at run time: on-demand prices from the AWS Price List API ([`on_demand`]) and spot prices from
//! EC2's spot price history ([`spot`]), each table fetched again when it is older than its refresh period.
//! An offering neither table prices keeps the pricing file's price, or none.

pub mod on_demand;
pub mod spot;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kerf_core::cloud::CloudError;

/// A price table and when it was last fetched. A failed fetch keeps the previous table (or the empty one)
/// until the next refresh, so an unreachable API costs one timeout per period, not one per catalog read.
#[derive(Debug)]
pub struct Refreshing<T> {
    every: Duration,
    fetched: Option<SystemTime>,
    table: Arc<T>,
}

impl<T: Default> Refreshing<T> {
    /// An empty table, due at once, fetched again every `every`.
    pub fn new(every: Duration) -> Self {
        Refreshing {
            every,
            fetched: None,
            table: Arc::new(T::default()),
        }
    }

    /// Whether the table is due for a fetch at `now` (a clock that went backwards does not make it due).
    pub fn due(&self, now: SystemTime) -> bool {
        self.fetched
            .is_none_or(|at| now.duration_since(at).is_ok_and(|age| age >= self.every))
    }

    /// The table, fetched with `fetch` first when [`due`](Self::due). A failure is logged with `what`.
    pub async fn get<F, Fut>(&mut self, now: SystemTime, what: &'static str, fetch: F) -> Arc<T>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, CloudError>>,
    {
        if self.due(now) {
            match fetch().await {
                Ok(table) => self.table = Arc::new(table),
                Err(error) => {
                    tracing::warn!(%error, prices = what, "could not fetch prices; keeping the previous ones and the pricing file")
                }
            }
            self.fetched = Some(now);
        }
        Arc::clone(&self.table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    #[tokio::test]
    async fn a_table_is_fetched_when_due_and_kept_when_a_fetch_fails() {
        let mut prices: Refreshing<Vec<u32>> = Refreshing::new(Duration::from_secs(3600));
        assert!(prices.due(t(0)));
        let table = prices.get(t(0), "test", || async { Ok(vec![1]) }).await;
        assert_eq!(*table, vec![1]);
        assert!(!prices.due(t(3599)));
        let table = prices
            .get(t(3599), "test", || async { panic!("not due: no fetch") })
            .await;
        assert_eq!(*table, vec![1]);
        assert!(prices.due(t(3600)));
        let failed = prices
            .get(t(3600), "test", || async {
                Err(CloudError::InvalidRequest("unreachable".into()))
            })
            .await;
        assert_eq!(*failed, vec![1], "a failed fetch keeps the previous table");
        assert!(
            !prices.due(t(3601)),
            "and is not retried before the next period"
        );
        assert!(
            !prices.due(t(0)),
            "a clock that went backwards is not a refresh"
        );
    }
}
