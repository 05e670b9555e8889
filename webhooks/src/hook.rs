//! What an application implements per kind, and what a hook may answer.

use kube_core::response::{reason, StatusCause};

use crate::ReviewRequest;
use serde_json::Value;

/// Admission logic for one kind. Both methods are plain synchronous functions of the request;
/// the server runs them on a blocking thread, under the request deadline, and survives their
/// panics: a request whose hook panics or misses the deadline is still answered with a review
/// (refused with 500 `InternalError` or 504 `Timeout`, or see [`Self::allow_on_timeout`]).
///
/// Each side has a default (leave unchanged, allow), so a hook implements only what it needs.
pub trait AdmissionHook: Send + Sync + 'static {
    /// Defaulting, called for `POST /mutate`. Return the object as it should be stored; the
    /// server turns the difference from the request's raw object into a JSON Patch.
    fn mutate(&self, request: &ReviewRequest) -> Result<Mutated, Denial> {
        let _ = request;
        Ok(Mutated::default())
    }

    /// Whether the hook is cheap and bounded (pure, linear in its input, well under a millisecond) and may run
    /// on the request's own task. Moving it to a blocking thread costs two thread wake-ups per request, which
    /// dominates the tail latency of such hooks under load; a panic is still caught. Only small reviews (16 KiB)
    /// run inline: larger ones go to a blocking thread under the deadline whatever this says. Hooks that may run
    /// long keep the default, so the request deadline can answer for them.
    fn runs_inline(&self) -> bool {
        false
    }

    /// Whether a request whose hook misses the deadline is admitted unchanged (with a warning) rather than
    /// refused. The default refuses: a rule that was not checked must not let an object in. Advice that must
    /// never block its objects says `true`.
    fn allow_on_timeout(&self) -> bool {
        false
    }

    /// Validation, called for `POST /validate`: warnings to allow, a [`Denial`] to refuse.
    fn validate(&self, request: &ReviewRequest) -> Result<Vec<String>, Denial> {
        let _ = request;
        Ok(Vec::new())
    }
}

/// The outcome of defaulting.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Mutated {
    /// The whole object after defaulting, or `None` when nothing changes.
    pub object: Option<Value>,
    /// Shown to the client (kubectl prints them) without failing the request.
    pub warnings: Vec<String>,
}

/// A refusal, shaped like the `Status` the apiserver relays to the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    /// HTTP-style code: 422 for an invalid object, 403 for a forbidden operation.
    pub code: u16,
    /// Machine-readable reason, e.g. `Invalid` or `Forbidden`.
    pub reason: String,
    /// What the user reads after "admission webhook … denied the request:".
    pub message: String,
    /// One entry per offending field.
    pub causes: Vec<StatusCause>,
}

impl Denial {
    /// The object breaks a rule: 422 `Invalid`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(422, reason::INVALID, message)
    }

    /// The request itself is malformed: 400 `BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, reason::BAD_REQUEST, message)
    }

    /// The request is larger than the server takes: 413 `RequestEntityTooLarge`.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(413, reason::REQUEST_ENTITY_TOO_LARGE, message)
    }

    /// The operation is not allowed whatever the object: 403 `Forbidden`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, reason::FORBIDDEN, message)
    }

    pub(crate) fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.to_owned(),
            message: message.into(),
            causes: Vec::new(),
        }
    }

    /// Adds a cause, e.g. `("FieldValueInvalid", "spec.limits.cpu", "must be positive")`.
    #[must_use]
    pub fn with_cause(
        mut self,
        reason: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        self.causes.push(StatusCause {
            reason: reason.into(),
            message: message.into(),
            field: field.into(),
        });
        self
    }
}
