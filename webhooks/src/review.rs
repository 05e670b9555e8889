//! AdmissionReview v1 on the wire: reading a request body, writing the response body.

use base64::Engine;
use kube_core::{
    admission::{AdmissionRequest, META_API_VERSION_V1, META_KIND},
    response::{StatusDetails, StatusSummary},
    DynamicObject, Status,
};
use serde::Serialize;
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
    Request(#[source] serde_json::Error),
}

/// A parsed request plus its object exactly as sent.
pub(crate) struct Review {
    pub(crate) request: AdmissionRequest<DynamicObject>,
    /// `request.object` as raw JSON. Patches are computed against this, not against a
    /// re-serialised `DynamicObject`, so fields it would drop or reorder cannot leak into them.
    pub(crate) object: Value,
}

pub(crate) fn parse(body: &[u8]) -> Result<Review, ReviewError> {
    let mut review: Value = serde_json::from_slice(body).map_err(ReviewError::Json)?;
    let field = |name: &str| review.get(name).cloned().unwrap_or(Value::Null);
    if field("apiVersion") != META_API_VERSION_V1 {
        return Err(ReviewError::ApiVersion(field("apiVersion")));
    }
    if field("kind") != META_KIND {
        return Err(ReviewError::Kind(field("kind")));
    }
    let request = match review.get_mut("request").map(Value::take) {
        None | Some(Value::Null) => return Err(ReviewError::MissingRequest),
        Some(request) => request,
    };
    let object = request.get("object").cloned().unwrap_or(Value::Null);
    let request = serde_json::from_value(request).map_err(ReviewError::Request)?;
    Ok(Review { request, object })
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
    request: &AdmissionRequest<DynamicObject>,
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
fn status(request: &AdmissionRequest<DynamicObject>, denial: Denial) -> Status {
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
        assert_eq!(parsed.object, request()["object"]);
        assert_eq!(parsed.request.uid, "u-1");
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
        let response = serde_json::to_value(respond(&parsed.request, verdict).expect("respond"))
            .expect("json");
        assert_eq!(
            response,
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "u-1", "allowed": true}})
        );
    }
}
