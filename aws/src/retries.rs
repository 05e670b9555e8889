//! Attempts per API: the SDK's standard retry (jittered exponential backoff) reads its configuration from the
//! request's config bag at every retry decision, so an interceptor that puts one there before the retry loop gives
//! an operation its own number of attempts ([`kerf_core::cloud::api_limits::ApiAttempts`]); the others keep the
//! client's.

use aws_config::retry::RetryConfig;
use aws_sdk_ec2::config::interceptors::BeforeTransmitInterceptorContextMut;
use aws_sdk_ec2::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use kerf_core::cloud::api_limits::ApiAttempts;

/// Sets the attempts of the operations [`ApiAttempts`] names, over `base` (the client's retry configuration).
#[derive(Debug)]
pub struct AttemptsPerApi {
    pub attempts: ApiAttempts,
    pub base: RetryConfig,
}

impl Intercept for AttemptsPerApi {
    fn name(&self) -> &'static str {
        "AttemptsPerApi"
    }

    fn modify_before_retry_loop(
        &self,
        _context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let attempts = cfg
            .load::<Metadata>()
            .and_then(|m| self.attempts.of(m.name()));
        if let Some(attempts) = attempts {
            cfg.interceptor_state()
                .store_put(self.base.clone().with_max_attempts(attempts));
        }
        Ok(())
    }
}
