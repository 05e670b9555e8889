//! AdmissionReview v1 on the wire: reading a request body, writing the response body.

use base64::Engine;
use kube_core::{
    admission::{Operation, META_API_VERSION_V1, META_KIND},
    response::{StatusDetails, StatusSummary},
    GroupVersionKind, Status,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Denial;

/// Why a request body is not an AdmissionReview v1 request. Answered with 400.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReviewError {
    #[error("the body is not JSON")]
    Json(#[source] serde_json::Error),
    #[error("expected apiVersion {META_API_VERSION_V1:?}, got {0}")]
    ApiVersion(Value),
    #[error("expected kind {META_KIND:?}, got {0}")]
    Kind(Value),
    #[error("the AdmissionReview has no request")]
    MissingRequest,
    #[error("the AdmissionReview request is malformed")]
    Request {
        /// The request's uid, when it has one that reads as a string: the answer can then be a
        /// review the apiserver matches to its request.
        uid: Option<String>,
        #[source]
        error: serde_json::Error,
    },
}

impl ReviewError {
    /// The uid of a malformed request that still carries one.
    pub(crate) fn uid(&self) -> Option<&str> {
        match self {
            Self::Request { uid, .. } => uid.as_deref(),
            _ => None,
        }
    }
}

/// One admission request as a hook sees it. The objects stay the raw JSON the apiserver sent: no typed round
/// trip that could drop or reorder fields (patches are computed against them), and no copies of them.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewRequest {
    pub uid: String,
    /// The kind of `object`, e.g. `karpenter.sh/v1 NodePool`.
    pub kind: GroupVersionKind,
    pub operation: Operation,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub dry_run: bool,
    /// The object being created or updated (absent on DELETE).
    #[serde(default)]
    pub object: Option<Value>,
    /// The stored object, on UPDATE and DELETE.
    #[serde(default)]
    pub old_object: Option<Value>,
}

/// The request envelope, deserialized straight from the body bytes in one pass.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    api_version: Option<String>,
    kind: Option<String>,
    request: Option<ReviewRequest>,
}

pub(crate) fn parse(body: &[u8]) -> Result<ReviewRequest, ReviewError> {
    match serde_json::from_slice::<Envelope>(body) {
        Ok(Envelope {
            api_version: Some(v),
            kind: Some(k),
            request: Some(request),
        }) if v == META_API_VERSION_V1 && k == META_KIND => Ok(request),
        Ok(_) => Err(diagnose(body, None)),
        Err(error) => Err(diagnose(body, Some(error))),
    }
}

/// Says what is wrong with a body that is not a well-formed AdmissionReview v1 request (the slow path).
fn diagnose(body: &[u8], request_error: Option<serde_json::Error>) -> ReviewError {
    let review: Value = match serde_json::from_slice(body) {
        Ok(review) => review,
        Err(error) => return ReviewError::Json(error),
    };
    let field = |name: &str| review.get(name).cloned().unwrap_or(Value::Null);
    if field("apiVersion") != META_API_VERSION_V1 {
        return ReviewError::ApiVersion(field("apiVersion"));
    }
    if field("kind") != META_KIND {
        return ReviewError::Kind(field("kind"));
    }
    let request = field("request");
    let uid = request
        .get("uid")
        .and_then(Value::as_str)
        .map(str::to_owned);
    match (request, request_error) {
        (Value::Null, _) => ReviewError::MissingRequest,
        (request, None) => match serde_json::from_value::<ReviewRequest>(request) {
            Ok(_) => ReviewError::MissingRequest,
            Err(error) => ReviewError::Request { uid, error },
        },
        (_, Some(error)) => ReviewError::Request { uid, error },
    }
}

/// The refusal of a request that was not admitted as sent but carries a uid: a review, so that
/// whoever sent it reads what is wrong in the usual place.
pub(crate) fn refuse_unread(
    uid: &str,
    denial: Denial,
) -> Result<ReviewResponse, serde_json::Error> {
    let request = ReviewRequest {
        uid: uid.to_owned(),
        kind: GroupVersionKind::gvk("", "", ""),
        operation: Operation::Create,
        name: String::new(),
        namespace: None,
        dry_run: false,
        object: None,
        old_object: None,
    };
    respond(&request, Verdict::Deny(denial))
}

/// The `request.uid` of an AdmissionReview body, read without building its objects (they are
/// skipped, not parsed into values).
pub(crate) fn uid(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Envelope {
        request: Uid,
    }
    #[derive(Deserialize)]
    struct Uid {
        uid: String,
    }
    serde_json::from_slice::<Envelope>(body)
        .ok()
        .map(|envelope| envelope.request.uid)
}

/// What the server decided for one request.
pub(crate) enum Verdict {
    Allow {
        patch: Option<json_patch::Patch>,
        warnings: Vec<String>,
    },
    Deny(Denial),
}

/// The response body. Written by hand rather than with kube-core's `AdmissionResponse`,
/// which serialises `patch` as an array of numbers (kube-rs#1781) where the API documents a
/// base64 string.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReviewResponse {
    api_version: &'static str,
    kind: &'static str,
    response: Response,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Response {
    uid: String,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

pub(crate) fn respond(
    request: &ReviewRequest,
    verdict: Verdict,
) -> Result<ReviewResponse, serde_json::Error> {
    let response = match verdict {
        Verdict::Allow { patch, warnings } => {
            let patch = patch
                .filter(|patch| !patch.0.is_empty())
                .map(|patch| serde_json::to_vec(&patch))
                .transpose()?;
            Response {
                uid: request.uid.clone(),
                allowed: true,
                status: None,
                patch_type: patch.as_ref().map(|_| "JSONPatch"),
                patch: patch.map(|bytes| base64::engine::general_purpose::STANDARD.encode(bytes)),
                warnings,
            }
        }
        Verdict::Deny(denial) => Response {
            uid: request.uid.clone(),
            allowed: false,
            status: Some(status(request, denial)),
            patch: None,
            patch_type: None,
            warnings: Vec::new(),
        },
    };
    Ok(ReviewResponse {
        api_version: META_API_VERSION_V1,
        kind: META_KIND,
        response,
    })
}

/// The denial as a `Status`, naming the object the way the apiserver's own errors do.
fn status(request: &ReviewRequest, denial: Denial) -> Status {
    Status {
        status: Some(StatusSummary::Failure),
        code: denial.code,
        message: denial.message,
        metadata: None,
        reason: denial.reason,
        details: Some(StatusDetails {
            name: request.name.clone(),
            group: request.kind.group.clone(),
            kind: request.kind.kind.clone(),
            uid: String::new(),
            causes: denial.causes,
            retry_after_seconds: 0,
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn body(review: Value) -> Vec<u8> {
        serde_json::to_vec(&review).expect("json")
    }

    fn request() -> Value {
        json!({
            "uid": "u-1",
            "kind": {"group": "example.com", "version": "v1", "kind": "Widget"},
            "resource": {"group": "example.com", "version": "v1", "resource": "widgets"},
            "name": "w",
            "operation": "CREATE",
            "userInfo": {},
            "object": {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"b": 1, "a": 2}}
        })
    }

    #[test]
    fn keeps_the_raw_object() {
        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request()});
        let parsed = parse(&body(review)).expect("parse");
        assert_eq!(parsed.object, Some(request()["object"].clone()));
        assert_eq!(parsed.uid, "u-1");
    }

    #[test]
    fn names_what_is_wrong() {
        let cases = [
            (b"{".to_vec(), "the body is not JSON"),
            (
                body(json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"})),
                r#"expected apiVersion "admission.k8s.io/v1", got "admission.k8s.io/v1beta1""#,
            ),
            (
                body(json!({"apiVersion": "admission.k8s.io/v1", "kind": "Pod"})),
                r#"expected kind "AdmissionReview", got "Pod""#,
            ),
            (
                body(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"})),
                "the AdmissionReview has no request",
            ),
            (
                body(
                    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 3}}),
                ),
                "the AdmissionReview request is malformed",
            ),
        ];
        for (body, expected) in cases {
            let error = parse(&body).err().map(|e| e.to_string());
            assert_eq!(error.as_deref(), Some(expected));
        }
    }

    #[test]
    fn empty_patch_is_left_out() {
        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request()});
        let parsed = parse(&body(review)).expect("parse");
        let verdict = Verdict::Allow {
            patch: Some(json_patch::Patch(Vec::new())),
            warnings: Vec::new(),
        };
        let response =
            serde_json::to_value(respond(&parsed, verdict).expect("respond")).expect("json");
        assert_eq!(
            response,
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "u-1", "allowed": true}})
        );
    }
}
