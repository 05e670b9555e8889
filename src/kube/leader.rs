//! Leader election on a coordination.k8s.io/v1 Lease, as client-go does it: a replica takes the Lease when it
//! is free or has not been renewed for its duration, renews it every retry period while it holds it, and
//! gives up leadership when it could not renew within the renew deadline. Expiry is judged by this process's
//! own monotonic clock (how long the Lease has stayed unchanged), never by comparing another replica's
//! timestamps with ours, so clock skew between nodes cannot hand the Lease to two replicas.

use crate::kube::CALL_TIMEOUT;
use ::kube::api::PostParams;
use ::kube::{Api, Client};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use std::time::Duration;
use tokio::time::Instant;

/// How the Lease is held.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// This replica (the pod name).
    pub identity: String,
    /// How long an unrenewed Lease keeps others out.
    pub lease_duration: Duration,
    /// The leader steps down when it has not renewed for this long.
    pub renew_deadline: Duration,
    /// How often the leader renews and a standby retries.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// Karpenter's timings: a 15 s Lease, a 10 s renew deadline, a 2 s retry period — failover well within
    /// 20 s of the leader dying.
    pub fn new(namespace: &str, name: &str, identity: &str) -> LeaseConfig {
        LeaseConfig {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("lost the lease {namespace}/{name}: not renewed within {deadline:?}")]
    Lost {
        namespace: String,
        name: String,
        deadline: Duration,
    },
}

/// One replica's view of the Lease.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    /// The Lease as last read and when it was first seen in that state (local clock).
    observed: Option<(LeaseSpec, Instant)>,
}

/// The outcome of one attempt.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    Leading,
    Standby { holder: Option<String> },
}

impl LeaderElector {
    pub fn new(client: Client, config: LeaseConfig) -> LeaderElector {
        LeaderElector {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
        }
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(&mut self) {
        let mut last_holder = None;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(Attempt::Leading) => {
                    tracing::info!(lease = %self.config.name, identity = %self.config.identity, "acquired the leader lease");
                    return;
                }
                Ok(Attempt::Standby { holder }) => {
                    if holder != last_holder {
                        tracing::info!(lease = %self.config.name, holder = holder.as_deref().unwrap_or(""), "another replica leads; standing by");
                        last_holder = holder;
                    }
                }
                Err(error) => {
                    tracing::warn!(lease = %self.config.name, %error, "could not read or take the leader lease")
                }
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    /// Renews the Lease every retry period; returns when leadership is lost (not renewed within the renew
    /// deadline, or another replica took it).
    pub async fn hold(&mut self) -> LeaderError {
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            match self.try_acquire_or_renew().await {
                Ok(Attempt::Leading) => renewed = Instant::now(),
                Ok(Attempt::Standby { holder }) => {
                    tracing::error!(lease = %self.config.name, holder = holder.as_deref().unwrap_or(""), "another replica took the leader lease");
                    return self.lost();
                }
                Err(error) => {
                    tracing::warn!(lease = %self.config.name, %error, "could not renew the leader lease")
                }
            }
            if renewed.elapsed() >= self.config.renew_deadline {
                return self.lost();
            }
        }
    }

    /// Hands the Lease back (on shutdown) so a standby takes over at once instead of waiting for expiry.
    pub async fn release(&mut self) {
        let Ok(Ok(mut lease)) =
            tokio::time::timeout(CALL_TIMEOUT, self.api.get(&self.config.name)).await
        else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        let params = PostParams::default();
        let replace = self.api.replace(&self.config.name, &params, &lease);
        match tokio::time::timeout(CALL_TIMEOUT, replace).await {
            Ok(Ok(_)) => tracing::info!(lease = %self.config.name, "released the leader lease"),
            _ => {
                tracing::warn!(lease = %self.config.name, "could not release the leader lease; it expires on its own")
            }
        }
    }

    fn lost(&self) -> LeaderError {
        LeaderError::Lost {
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            deadline: self.config.renew_deadline,
        }
    }

    /// One round: create the Lease, renew it, take it over when expired, or observe another holder.
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, ::kube::Error> {
        let now = MicroTime(Timestamp::now());
        let current = match timed(self.api.get_opt(&self.config.name)).await? {
            Some(lease) => lease,
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(self.spec(now.clone(), now, 0)),
                };
                return match timed(self.api.create(&PostParams::default(), &lease)).await {
                    Ok(_) => Ok(Attempt::Leading),
                    Err(::kube::Error::Api(status)) if status.code == 409 => {
                        Ok(Attempt::Standby { holder: None })
                    }
                    Err(error) => Err(error),
                };
            }
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let ours = holder.as_deref() == Some(self.config.identity.as_str());
        if !ours && !self.expired(&spec) {
            return Ok(Attempt::Standby { holder });
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        let next = if ours {
            let acquired = spec.acquire_time.clone().unwrap_or_else(|| now.clone());
            self.spec(acquired, now, transitions)
        } else {
            self.spec(now.clone(), now, transitions + 1)
        };
        let mut lease = current;
        lease.spec = Some(next);
        // `replace` carries the resourceVersion read above: of two replicas racing, one gets 409.
        match timed(
            self.api
                .replace(&self.config.name, &PostParams::default(), &lease),
        )
        .await
        {
            Ok(_) => Ok(Attempt::Leading),
            Err(::kube::Error::Api(status)) if status.code == 409 => {
                Ok(Attempt::Standby { holder })
            }
            Err(error) => Err(error),
        }
    }

    /// Whether the Lease has stayed unchanged for its duration, by this process's clock. A Lease without
    /// holder is free at once.
    fn expired(&mut self, spec: &LeaseSpec) -> bool {
        if spec.holder_identity.as_deref().is_none_or(str::is_empty) {
            return true;
        }
        let now = Instant::now();
        let since = match &self.observed {
            Some((seen, at)) if seen == spec => *at,
            _ => {
                self.observed = Some((spec.clone(), now));
                now
            }
        };
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.config.lease_duration, Duration::from_secs);
        now.duration_since(since) >= duration
    }

    fn spec(&self, acquired: MicroTime, renewed: MicroTime, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: i32::try_from(self.config.lease_duration.as_secs()).ok(),
            acquire_time: Some(acquired),
            renew_time: Some(renewed),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }
}

async fn timed<T>(
    call: impl std::future::Future<Output = Result<T, ::kube::Error>>,
) -> Result<T, ::kube::Error> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(result) => result,
        Err(_) => Err(::kube::Error::Service(
            format!("the apiserver did not answer within {CALL_TIMEOUT:?}").into(),
        )),
    }
}
