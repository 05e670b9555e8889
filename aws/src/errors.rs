//! SDK errors in kerf's terms ([`CloudError`]), and which EC2 error codes mean "no capacity".

use std::future::Future;
use std::time::Duration;

use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use kerf_core::cloud::CloudError;

/// CreateFleet error codes that mean the offering had no capacity (controller-behaviour.md §2.2): the offering goes
/// into the ICE cache, and a launch that got only these is insufficient capacity.
const CAPACITY_ERROR_CODES: [&str; 9] = [
    "InsufficientInstanceCapacity",
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "UnfulfillableCapacity",
    "Unsupported",
    "InsufficientFreeAddressesInSubnet",
    "MaxFleetCountExceeded",
    "ReservationCapacityExceeded",
    "AuthFailure.ServiceLinkedRoleCreationNotPermitted",
];

pub fn is_capacity_error(code: &str) -> bool {
    CAPACITY_ERROR_CODES.contains(&code)
}

/// One API call bounded by `after` (retries included), its error in kerf's terms.
pub async fn bounded<T, E, R>(
    operation: &'static str,
    after: Duration,
    call: impl Future<Output = Result<T, SdkError<E, R>>>,
) -> Result<T, CloudError>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match tokio::time::timeout(after, call).await {
        Ok(result) => result.map_err(|e| api_error(operation, after, e)),
        Err(_) => Err(CloudError::Timeout { operation, after }),
    }
}

/// An SDK error as a [`CloudError`]: a timeout as [`CloudError::Timeout`], everything else as
/// [`CloudError::Api`] with EC2's code and message (or the transport error).
pub fn api_error<E, R>(
    operation: &'static str,
    timeout: Duration,
    error: SdkError<E, R>,
) -> CloudError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    if let SdkError::TimeoutError(_) = error {
        return CloudError::Timeout {
            operation,
            after: timeout,
        };
    }
    let (code, message) = code_and_message(&error);
    CloudError::Api {
        operation,
        code,
        message,
    }
}

/// The service's error code and message of an SDK error; `Unknown` and the transport error when the
/// service did not answer with one.
pub fn code_and_message<E, R>(error: &SdkError<E, R>) -> (String, String)
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let code = error.code().unwrap_or("Unknown").to_owned();
    let message = match error.message() {
        Some(message) => message.to_owned(),
        None => DisplayErrorContext(error).to_string(),
    };
    (code, message)
}

/// The EC2 error code of an API error, if it is one.
pub fn code_of(error: &CloudError) -> Option<&str> {
    match error {
        CloudError::Api { code, .. } => Some(code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_codes_are_recognised_and_others_are_not() {
        assert!(is_capacity_error("InsufficientInstanceCapacity"));
        assert!(is_capacity_error(
            "AuthFailure.ServiceLinkedRoleCreationNotPermitted"
        ));
        assert!(!is_capacity_error("InvalidParameterValue"));
        assert!(!is_capacity_error("RequestLimitExceeded"));
    }
}
