//! Retry delays per object that double with each consecutive failed reconcile, from [`FIRST`] up to [`MAX`],
//! and start again after a success: a transient error is retried quickly, an outage (the cloud API down, a
//! webhook refusing every write) is not hammered every few seconds by every object.

use ::kube::Resource;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

/// The delay after a first failure.
pub const FIRST: Duration = Duration::from_secs(1);
/// The longest delay.
pub const MAX: Duration = Duration::from_secs(5 * 60);

/// The controllers' names in the keys.
pub const LIFECYCLE: &str = "lifecycle";
pub const TERMINATION: &str = "termination";
pub const NODECLASS: &str = "nodeclass";

/// Consecutive failures per key ([`key_of`]: controller, kind and name).
#[derive(Debug, Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// Notes a failure of `key` and returns how long to wait before retrying it.
    pub fn failed(&self, key: &str) -> Duration {
        let mut failures = self.lock();
        let count = failures.entry(key.to_owned()).or_insert(0);
        let delay = FIRST.saturating_mul(2u32.saturating_pow(*count)).min(MAX);
        *count = count.saturating_add(1);
        delay
    }

    /// Forgets the failures of `key`.
    pub fn succeeded(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Runs `reconcile` for `key`, forgetting the key's failures when it succeeds.
    pub async fn track<T, E>(
        &self,
        key: &str,
        reconcile: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let result = reconcile.await;
        if result.is_ok() {
            self.succeeded(key);
        }
        result
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        // Every update is a single insert or remove: a panic elsewhere leaves the map whole.
        self.failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The key of `object` in `controller`'s reconciles: the controller, the kind and the name (the controllers
/// retrying with backoff watch cluster-scoped kinds). Two controllers reconciling the same object (the lifecycle
/// and termination both reconcile NodeClaims) count their failures apart: one's success does not reset the
/// other's backoff.
pub fn key_of<K: Resource<DynamicType = ()>>(controller: &str, object: &K) -> String {
    let name = object.meta().name.as_deref().unwrap_or_default();
    format!("{controller}:{}/{name}", K::kind(&()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_controllers_keep_their_own_counts_for_one_object() {
        let claim: crate::api::nodeclaim::NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "a"},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"},
                     "requirements": []}
        }))
        .expect("a NodeClaim");
        let backoff = Backoff::default();
        let (lifecycle, termination) = (key_of(LIFECYCLE, &claim), key_of(TERMINATION, &claim));
        assert_eq!(termination, "termination:NodeClaim/a");
        backoff.failed(&termination);
        backoff.failed(&termination);
        backoff.succeeded(&lifecycle);
        assert_eq!(
            backoff.failed(&termination),
            FIRST * 4,
            "the lifecycle's success leaves termination's count"
        );
    }

    #[test]
    fn delays_double_per_failure_up_to_the_cap_and_restart_after_a_success() {
        let backoff = Backoff::default();
        let delays: Vec<u64> = (0..12)
            .map(|_| backoff.failed("NodeClaim/a").as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(
            backoff.failed("NodeClaim/b"),
            FIRST,
            "each object has its own count"
        );
        backoff.succeeded("NodeClaim/a");
        assert_eq!(backoff.failed("NodeClaim/a"), FIRST);
    }

    #[test]
    fn many_failures_do_not_overflow() {
        let backoff = Backoff::default();
        for _ in 0..100 {
            assert!(backoff.failed("k") <= MAX);
        }
    }

    #[test]
    fn keys_name_the_controller_the_kind_and_the_object() {
        let node: k8s_openapi::api::core::v1::Node =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "n1"}}))
                .expect("a Node");
        assert_eq!(key_of(TERMINATION, &node), "termination:Node/n1");
    }

    #[tokio::test]
    async fn a_tracked_success_forgets_the_failures() {
        let backoff = Backoff::default();
        backoff.failed("k");
        backoff.failed("k");
        let failed: Result<(), &str> = backoff.track("k", async { Err("no") }).await;
        assert!(failed.is_err());
        assert_eq!(
            backoff.failed("k"),
            Duration::from_secs(4),
            "a failure is not forgotten"
        );
        let ok: Result<(), &str> = backoff.track("k", async { Ok(()) }).await;
        assert!(ok.is_ok());
        assert_eq!(backoff.failed("k"), FIRST);
    }
}
