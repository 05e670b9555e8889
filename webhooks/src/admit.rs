//! One admission request, from body to answer: read, parse, run the hook, respond, count.

use std::{collections::HashMap, sync::Arc, time::Duration};

use axum::{
    body::Body,
    http::StatusCode,
    response::{IntoResponse, Response},
    Json,
};
use http_body_util::LengthLimitError;
use kube_core::admission::Operation;
use serde_json::Value;
use tokio::time::{timeout_at, Instant};

use crate::{
    metrics::{Metrics, Observation, RequestResult},
    review::{self, ReviewRequest, Verdict},
    AdmissionHook, Mutated,
};

/// etcd caps an object at 1.5 MiB and an UPDATE review carries two of them (`object` and
/// `oldObject`), so 3 MiB holds any genuine review; anything larger is not worth reading.
pub const BODY_LIMIT: usize = 3 * 1024 * 1024;

/// Hooks by API group and kind (`("karpenter.sh", "NodePool")`; the core group is `""`).
pub(crate) type Hooks = HashMap<(String, String), Arc<dyn AdmissionHook>>;

/// The two admission endpoints; the path doubles as the metrics label.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Endpoint {
    Mutate,
    Validate,
}

impl Endpoint {
    pub(crate) fn path(self) -> &'static str {
        match self {
            Self::Mutate => "/mutate",
            Self::Validate => "/validate",
        }
    }
}

pub(crate) struct Admission {
    pub(crate) hooks: Hooks,
    pub(crate) timeout: Duration,
    pub(crate) metrics: Metrics,
}

/// An HTTP answer and how it is counted.
struct Outcome {
    response: Response,
    result: RequestResult,
}

impl Outcome {
    /// A plain-text error. A non-200 answer makes the apiserver apply the webhook's failure
    /// policy, which is what should decide when the webhook itself is at fault.
    fn failure(status: StatusCode, message: String) -> Self {
        Self {
            response: (status, message).into_response(),
            result: RequestResult::Error,
        }
    }

    fn verdict(review: &ReviewRequest, verdict: Verdict) -> Self {
        let result = match verdict {
            Verdict::Allow { .. } => RequestResult::Allowed,
            Verdict::Deny(_) => RequestResult::Denied,
        };
        match review::respond(review, verdict) {
            Ok(body) => Self {
                response: Json(body).into_response(),
                result,
            },
            Err(error) => Self::failure(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot encode the JSON Patch: {error}"),
            ),
        }
    }
}

impl Admission {
    /// Answers one request within [`Admission::timeout`], reading the body included.
    pub(crate) async fn admit(&self, endpoint: Endpoint, body: Body) -> Response {
        let started = Instant::now();
        let deadline = started + self.timeout;
        let (outcome, kind, operation) = match self.read(body, deadline).await {
            Err(outcome) => (outcome, String::new(), ""),
            Ok(review) => {
                let kind = review.kind.kind.clone();
                let operation = operation_label(&review.operation);
                (self.run(endpoint, review, deadline).await, kind, operation)
            }
        };
        let observation = Observation {
            path: endpoint.path(),
            kind: &kind,
            operation,
            result: outcome.result,
            elapsed: started.elapsed(),
        };
        tracing::debug!(
            path = observation.path,
            kind,
            operation,
            result = observation.result.label(),
            elapsed = ?observation.elapsed,
            "admission request answered"
        );
        self.metrics.observe(observation);
        outcome.response
    }

    async fn read(&self, body: Body, deadline: Instant) -> Result<ReviewRequest, Outcome> {
        let body = match timeout_at(deadline, axum::body::to_bytes(body, BODY_LIMIT)).await {
            Ok(Ok(body)) => body,
            Ok(Err(error)) if is_too_large(&error) => {
                return Err(Outcome::failure(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the AdmissionReview is larger than {BODY_LIMIT} bytes"),
                ))
            }
            Ok(Err(error)) => {
                return Err(Outcome::failure(
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the request body: {}", error_chain(&error)),
                ))
            }
            Err(_) => {
                return Err(Outcome::failure(
                    StatusCode::REQUEST_TIMEOUT,
                    format!("the request body did not arrive within {:?}", self.timeout),
                ))
            }
        };
        review::parse(&body)
            .map_err(|error| Outcome::failure(StatusCode::BAD_REQUEST, error_chain(&error)))
    }

    async fn run(&self, endpoint: Endpoint, review: ReviewRequest, deadline: Instant) -> Outcome {
        let gvk = &review.kind;
        let kind = gvk.kind.clone();
        let Some(hook) = self.hooks.get(&(gvk.group.clone(), kind.clone())).cloned() else {
            let allow = Verdict::Allow {
                patch: None,
                warnings: Vec::new(),
            };
            return Outcome::verdict(&review, allow);
        };
        if hook.runs_inline() {
            let decided = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                decide(endpoint, hook.as_ref(), &review)
            }));
            return match decided {
                Ok(verdict) => Outcome::verdict(&review, verdict),
                Err(_) => {
                    tracing::error!(%kind, "admission hook panicked");
                    hook_panicked(&kind)
                }
            };
        }
        // Hooks are synchronous and may be CPU-heavy (pod advice runs the scheduler), so they
        // run on a blocking thread: the runtime stays responsive, the deadline can fire, and a
        // panic comes back as a JoinError instead of unwinding through the server. A hook
        // still running at the deadline finishes on its own and its answer is dropped.
        let run = tokio::task::spawn_blocking(move || {
            let verdict = decide(endpoint, hook.as_ref(), &review);
            (review, verdict)
        });
        match timeout_at(deadline, run).await {
            Ok(Ok((review, verdict))) => Outcome::verdict(&review, verdict),
            Ok(Err(error)) => {
                tracing::error!(%kind, %error, "admission hook panicked");
                hook_panicked(&kind)
            }
            Err(_) => {
                tracing::warn!(%kind, timeout = ?self.timeout, "admission hook timed out");
                Outcome::failure(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "the {kind} admission hook did not answer within {:?}",
                        self.timeout
                    ),
                )
            }
        }
    }
}

/// A panicking hook is the webhook's fault: a 500 lets the failure policy decide.
fn hook_panicked(kind: &str) -> Outcome {
    Outcome::failure(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("the {kind} admission hook failed; see the webhook's log"),
    )
}

/// Calls the hook side that `endpoint` names.
fn decide(endpoint: Endpoint, hook: &dyn AdmissionHook, review: &ReviewRequest) -> Verdict {
    let answer = match endpoint {
        Endpoint::Mutate => hook.mutate(review).map(|Mutated { object, warnings }| {
            let before = review.object.as_ref().unwrap_or(&Value::Null);
            let patch = object.map(|after| defaulting_patch(before, &after));
            (patch, warnings)
        }),
        Endpoint::Validate => hook.validate(review).map(|warnings| (None, warnings)),
    };
    match answer {
        Ok((patch, warnings)) => Verdict::Allow { patch, warnings },
        Err(denial) => Verdict::Deny(denial),
    }
}

/// The JSON Patch from the raw object the apiserver sent to the object the hook returned. Hooks get the raw
/// object, so they return it with every member they did not touch as it was, and the patch holds only theirs.
fn defaulting_patch(before: &Value, after: &Value) -> json_patch::Patch {
    json_patch::diff(before, after)
}

fn operation_label(operation: &Operation) -> &'static str {
    match operation {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

fn is_too_large(error: &axum::Error) -> bool {
    std::error::Error::source(error).is_some_and(|source| source.is::<LengthLimitError>())
}

/// "outer: inner: innermost", so a 400 says exactly what did not parse.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_patch_turns_the_raw_object_into_the_returned_one() {
        let before = json!({"metadata": {"name": "w", "creationTimestamp": null}, "spec": {"items": [null, {"a": null}]}});
        let mut after = before.clone();
        after["spec"]["size"] = json!("m");
        after["spec"]["items"][1]["b"] = json!(1);
        let patch = defaulting_patch(&before, &after);
        assert_eq!(patch.0.len(), 2, "only the hook's changes: {patch:?}");
        let mut patched = before.clone();
        json_patch::patch(&mut patched, &patch.0).expect("patch applies to the raw object");
        assert_eq!(patched, after);
    }
}
