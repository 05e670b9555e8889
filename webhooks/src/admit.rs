//! One admission request, from body to answer: read, parse, run the hook, respond, count.

use std::{collections::HashMap, sync::Arc, time::Duration};

use axum::{
    body::Body,
    http::{header, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use http_body_util::LengthLimitError;
use kube_core::{admission::Operation, response::reason};
use serde_json::Value;
use tokio::{
    sync::Semaphore,
    time::{timeout_at, Instant},
};

use crate::{
    budget::{json_values, parsed_cost, Budget, Reservation},
    metrics::{Metrics, Observation, RequestResult},
    review::{self, ReviewRequest, Verdict},
    AdmissionHook, Denial, Mutated,
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
    pub(crate) budget: Budget,
    /// Blocking threads hooks may run on at once.
    pub(crate) hook_threads: Arc<Semaphore>,
    pub(crate) metrics: Metrics,
}

/// An HTTP answer and how it is counted.
struct Outcome {
    response: Response,
    result: RequestResult,
}

impl Outcome {
    /// A plain-text error, for bodies that are not a review (there is no uid to answer). A
    /// non-200 answer makes the apiserver apply the webhook's failure policy.
    fn failure(status: StatusCode, message: String) -> Self {
        Self {
            response: (status, message).into_response(),
            result: RequestResult::Error,
        }
    }

    /// A request that cannot be admitted as sent (malformed, too many values) but still carries
    /// a uid: refused as a review, so the answer names its request like every other verdict.
    fn refused(uid: &str, denial: Denial) -> Self {
        let response = match review::refuse_unread(uid, denial) {
            Ok(body) => Json(body).into_response(),
            Err(error) => (StatusCode::BAD_REQUEST, error.to_string()).into_response(),
        };
        Self {
            response,
            result: RequestResult::Error,
        }
    }

    /// 429 with `Retry-After`, before the body is read: the apiserver's client waits and
    /// retries, and nothing was buffered.
    fn shed(message: String) -> Self {
        Self {
            response: (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, RETRY_AFTER_SECONDS.to_string())],
                message,
            )
                .into_response(),
            result: RequestResult::Shed,
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
            Err(error) => Self::server_fault(
                review,
                Denial::new(
                    500,
                    reason::INTERNAL_ERROR,
                    format!("cannot encode the JSON Patch: {error}"),
                ),
            ),
        }
    }

    /// The server's own failure on a review (a hook that panicked or ran out of time) is still
    /// answered as a review carrying its uid: a refusal saying what went wrong, counted as an
    /// error.
    fn server_fault(review: &ReviewRequest, denial: Denial) -> Self {
        let response = match review::respond(review, Verdict::Deny(denial)) {
            Ok(body) => Json(body).into_response(),
            // A refusal has no patch to encode.
            Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
        };
        Self {
            response,
            result: RequestResult::Error,
        }
    }
}

/// What a shed request is told to wait before retrying.
const RETRY_AFTER_SECONDS: u64 = 1;

/// How long a request waits for room in the budget before it is shed (within its deadline).
const BUDGET_WAIT: Duration = Duration::from_secs(1);

/// The most JSON values a review may hold, both objects together. Parsed, each costs
/// [`crate::budget`]'s estimate many times over its text (a `1,` becomes a 32-byte value and a
/// slot), so this, not the byte limit, bounds what one review can take: a genuine NodePool or
/// EC2NodeClass holds hundreds, a large Pod thousands.
pub const VALUE_LIMIT: usize = 200_000;

/// Reviews up to this size run an inline hook ([`AdmissionHook::runs_inline`]) on the request's
/// task; larger ones go to a blocking thread under the deadline like any hook. A hook that is
/// linear in its input takes well under a millisecond on 16 KiB, and genuine NodePools are a
/// few KiB; a hostile review, e.g. megabytes of wrongly typed list items, cannot hold the
/// request's task past the deadline.
const INLINE_BODY_LIMIT: usize = 16 * 1024;

impl Admission {
    /// Answers one request within [`Admission::timeout`], reading the body included.
    pub(crate) async fn admit(&self, endpoint: Endpoint, body: Body) -> Response {
        let started = Instant::now();
        let deadline = started + self.timeout;
        let (outcome, kind, operation) = match self.read(body, deadline).await {
            Err(outcome) => (outcome, String::new(), ""),
            Ok(read) => {
                let kind = read.review.kind.kind.clone();
                let operation = operation_label(&read.review.operation);
                (self.run(endpoint, read, deadline).await, kind, operation)
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

    /// Reserves the request's share of the budget, reads the body and parses it.
    async fn read(&self, body: Body, deadline: Instant) -> Result<Read, Outcome> {
        let declared = axum::body::HttpBody::size_hint(&body).exact();
        if declared.is_some_and(|length| length > BODY_LIMIT as u64) {
            return Err(too_large());
        }
        // Without a Content-Length the body may be as large as the limit.
        let declared = declared.map_or(BODY_LIMIT, |length| length as usize);
        let queue_until = deadline.min(Instant::now() + BUDGET_WAIT);
        let Some(mut reservation) = self.budget.reserve(declared, queue_until).await else {
            return Err(Outcome::shed(format!(
                "the webhook is at its in-flight budget; retry in {RETRY_AFTER_SECONDS} s"
            )));
        };
        let body = match timeout_at(deadline, axum::body::to_bytes(body, declared)).await {
            Ok(Ok(body)) => body,
            Ok(Err(error)) if is_too_large(&error) => return Err(too_large()),
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
        let size = body.len();
        // Counting and parsing megabytes is CPU work like a hook's: done on a hook thread, it
        // cannot hold up the runtime's workers, which accept connections, finish TLS handshakes
        // and answer `/healthz`. Small reviews stay on the request's task.
        let values = if size <= INLINE_BODY_LIMIT {
            json_values(&body)
        } else {
            let body = body.clone();
            self.on_hook_thread(queue_until, move || json_values(&body))
                .await?
        };
        if values <= VALUE_LIMIT
            && !self
                .budget
                .resize(&mut reservation, parsed_cost(size, values), queue_until)
                .await
        {
            return Err(Outcome::shed(format!(
                "the webhook is at its in-flight budget; retry in {RETRY_AFTER_SECONDS} s"
            )));
        }
        let review = if size <= INLINE_BODY_LIMIT {
            parse(&body, values)
        } else {
            self.on_hook_thread(queue_until, move || parse(&body, values))
                .await?
        }
        .map_err(|outcome| *outcome)?;
        Ok(Read {
            review,
            size,
            reservation,
        })
    }

    /// Runs `work` on a hook thread, waiting for one until `queue_until`: shed when none comes
    /// free, a server fault when `work` panics.
    async fn on_hook_thread<T: Send + 'static>(
        &self,
        queue_until: Instant,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Outcome> {
        let Ok(Ok(thread)) =
            timeout_at(queue_until, self.hook_threads.clone().acquire_owned()).await
        else {
            return Err(Outcome::shed(format!(
                "every admission thread is busy; retry in {RETRY_AFTER_SECONDS} s"
            )));
        };
        let done = tokio::task::spawn_blocking(move || {
            let done = work();
            drop(thread);
            done
        });
        done.await.map_err(|error| {
            tracing::error!(%error, "reading an AdmissionReview panicked");
            Outcome::failure(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the AdmissionReview could not be read; see the webhook's log".to_owned(),
            )
        })
    }

    async fn run(&self, endpoint: Endpoint, read: Read, deadline: Instant) -> Outcome {
        let Read {
            review,
            size,
            reservation,
        } = read;
        let gvk = &review.kind;
        let kind = gvk.kind.clone();
        let Some(hook) = self.hooks.get(&(gvk.group.clone(), kind.clone())).cloned() else {
            let allow = Verdict::Allow {
                patch: None,
                warnings: Vec::new(),
            };
            return Outcome::verdict(&review, allow);
        };
        if hook.runs_inline() && size <= INLINE_BODY_LIMIT {
            let decided = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                decide(endpoint, hook.as_ref(), &review)
            }));
            return match decided {
                Ok(verdict) => Outcome::verdict(&review, verdict),
                Err(_) => {
                    tracing::error!(%kind, "admission hook panicked");
                    hook_panicked(&review)
                }
            };
        }
        // Hooks are synchronous and may be CPU-heavy (pod advice runs the scheduler), so they
        // run on a blocking thread: the runtime stays responsive, the deadline can fire, and a
        // panic comes back as a JoinError instead of unwinding through the server. A hook
        // still running at the deadline finishes on its own and its answer is dropped; it
        // keeps its share of the budget until then, since it still holds the memory.
        // Waiting for a thread holds no thread, so a burst of slow hooks cannot starve the
        // runtime (and `/healthz`) of the CPU; a request still waiting at the deadline is
        // answered like a hook that ran out of time.
        let Ok(Ok(thread)) = timeout_at(deadline, self.hook_threads.clone().acquire_owned()).await
        else {
            return self.timed_out(&review, hook.allow_on_timeout());
        };
        let review = Arc::new(review);
        let allow_on_timeout = hook.allow_on_timeout();
        let run = tokio::task::spawn_blocking({
            let review = review.clone();
            move || {
                let verdict = decide(endpoint, hook.as_ref(), &review);
                drop((reservation, thread));
                verdict
            }
        });
        match timeout_at(deadline, run).await {
            Ok(Ok(verdict)) => Outcome::verdict(&review, verdict),
            Ok(Err(error)) => {
                tracing::error!(%kind, %error, "admission hook panicked");
                hook_panicked(&review)
            }
            Err(_) => self.timed_out(&review, allow_on_timeout),
        }
    }

    /// The answer for a review whose hook did not decide within the deadline: refused with 504
    /// `Timeout`, or admitted unchanged with a warning for hooks that ask for that.
    fn timed_out(&self, review: &ReviewRequest, allow_on_timeout: bool) -> Outcome {
        let kind = &review.kind.kind;
        tracing::warn!(%kind, timeout = ?self.timeout, "admission hook timed out");
        let verdict = if allow_on_timeout {
            Verdict::Allow {
                patch: None,
                warnings: vec![format!(
                    "the {kind} admission hook did not answer within {:?}; admitted unchanged",
                    self.timeout
                )],
            }
        } else {
            Verdict::Deny(Denial::new(
                504,
                reason::TIMEOUT,
                format!(
                    "the {kind} admission hook did not answer within {:?}",
                    self.timeout
                ),
            ))
        };
        Outcome {
            result: RequestResult::Error,
            ..Outcome::verdict(review, verdict)
        }
    }
}

/// A review read from a body, with the budget it holds.
struct Read {
    review: ReviewRequest,
    /// The body's length in bytes.
    size: usize,
    reservation: Reservation,
}

/// The review in `body`, which holds `values` JSON values; a refusal, as a review when the body
/// carries a uid, when it holds too many values or is not a well-formed request.
fn parse(body: &[u8], values: usize) -> Result<ReviewRequest, Box<Outcome>> {
    if values > VALUE_LIMIT {
        let message = format!(
            "the AdmissionReview holds about {values} JSON values, more than the limit of {VALUE_LIMIT}"
        );
        return Err(Box::new(match review::uid(body) {
            Some(uid) => Outcome::refused(&uid, Denial::too_large(message)),
            None => Outcome::failure(StatusCode::PAYLOAD_TOO_LARGE, message),
        }));
    }
    review::parse(body).map_err(|error| {
        Box::new(match error.uid() {
            Some(uid) => Outcome::refused(uid, Denial::bad_request(error_chain(&error))),
            None => Outcome::failure(StatusCode::BAD_REQUEST, error_chain(&error)),
        })
    })
}

fn too_large() -> Outcome {
    Outcome::failure(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the AdmissionReview is larger than {BODY_LIMIT} bytes"),
    )
}

/// A panicking hook is the webhook's fault: refused with 500 `InternalError`, as the apiserver
/// reports its own failures.
fn hook_panicked(review: &ReviewRequest) -> Outcome {
    let kind = &review.kind.kind;
    Outcome::server_fault(
        review,
        Denial::new(
            500,
            reason::INTERNAL_ERROR,
            format!("the {kind} admission hook failed; see the webhook's log"),
        ),
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
