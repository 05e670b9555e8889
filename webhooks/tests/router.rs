//! The router in-process (`Router::oneshot`): dispatch, patches, denials, limits, failures,
//! health and metrics.

mod common;

use std::{
    sync::{mpsc, Mutex},
    time::Duration,
};

use axum::{
    body::Body,
    http::{Method, Request, StatusCode},
    Router,
};
use base64::Engine;
use common::{review, webhooks, widget, GROUP};
use kerf_webhooks::{AdmissionHook, Denial, Mutated, ReadyFlag, ReviewRequest};
use prometheus_client::{metrics::counter::Counter, registry::Registry};
use serde_json::{json, Value};
use tower::ServiceExt;

async fn call(router: &Router, method: Method, path: &str, body: Body) -> (StatusCode, String) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body)
        .expect("request");
    let response = router.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    (status, String::from_utf8(bytes.to_vec()).expect("utf-8"))
}

/// POSTs a review and returns its `response` object, asserting a 200.
async fn admit(router: &Router, path: &str, review: &Value) -> Value {
    let body = Body::from(serde_json::to_vec(review).expect("json"));
    let (status, text) = call(router, Method::POST, path, body).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let mut answer: Value = serde_json::from_str(&text).expect("json answer");
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    assert_eq!(answer["response"]["uid"], review["request"]["uid"]);
    answer["response"].take()
}

fn decode_patch(response: &Value) -> json_patch::Patch {
    assert_eq!(response["patchType"], "JSONPatch");
    let encoded = response["patch"]
        .as_str()
        .expect("patch is a base64 string");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .expect("base64");
    serde_json::from_slice(&bytes).expect("JSON Patch")
}

#[tokio::test]
async fn mutate_patches_the_raw_object_into_the_defaulted_one() {
    let router = webhooks().into_router();
    let object = widget(json!({"color": "blue"}));
    let response = admit(&router, "/mutate", &review(GROUP, "Widget", object.clone())).await;
    assert_eq!(response["allowed"], true);
    assert_eq!(
        response["warnings"],
        json!(["spec.size defaulted to medium"])
    );

    let patch = decode_patch(&response);
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch.0).expect("applies");
    let mut expected = object;
    expected["spec"]["size"] = json!("medium");
    assert_eq!(patched, expected);
    assert_eq!(
        patch.0.len(),
        1,
        "only the default, nothing else: {patch:?}"
    );
}

#[tokio::test]
async fn mutate_without_changes_sends_no_patch() {
    let router = webhooks().into_router();
    let object = widget(json!({"size": "small"}));
    let response = admit(&router, "/mutate", &review(GROUP, "Widget", object)).await;
    assert_eq!(
        response,
        json!({"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": true})
    );
}

#[tokio::test]
async fn denial_carries_code_reason_message_and_causes() {
    let router = webhooks().into_router();
    let object = widget(json!({"size": "huge"}));
    let response = admit(&router, "/validate", &review(GROUP, "Widget", object)).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(
        response["status"],
        json!({
            "status": "Failure",
            "code": 422,
            "reason": "Invalid",
            "message": r#"Widget.example.com "w" is invalid: spec.size: Unsupported value: "huge""#,
            "details": {
                "name": "w",
                "group": "example.com",
                "kind": "Widget",
                "causes": [{
                    "reason": "FieldValueNotSupported",
                    "message": r#"Unsupported value: "huge""#,
                    "field": "spec.size"
                }]
            }
        })
    );
}

#[tokio::test]
async fn validation_warnings_pass_through() {
    let router = webhooks().into_router();
    let object = widget(json!({"size": "small", "color": "pink"}));
    let response = admit(&router, "/validate", &review(GROUP, "Widget", object)).await;
    assert_eq!(response["allowed"], true);
    assert_eq!(response["warnings"], json!(["pink widgets are deprecated"]));
}

struct Gadgets;

impl AdmissionHook for Gadgets {
    fn validate(&self, _: &ReviewRequest) -> Result<Vec<String>, Denial> {
        Err(Denial::forbidden("gadgets are read-only"))
    }
}

#[tokio::test]
async fn dispatches_on_group_and_kind() {
    let router = webhooks().hook(GROUP, "Gadget", Gadgets).into_router();
    let object = widget(json!({"size": "small"}));

    let gadget = admit(
        &router,
        "/validate",
        &review(GROUP, "Gadget", object.clone()),
    )
    .await;
    assert_eq!(gadget["status"]["code"], 403);
    assert_eq!(gadget["status"]["reason"], "Forbidden");
    assert_eq!(gadget["status"]["message"], "gadgets are read-only");

    let widget = admit(
        &router,
        "/validate",
        &review(GROUP, "Widget", object.clone()),
    )
    .await;
    assert_eq!(widget["allowed"], true);

    // Gadgets implement only validation: mutation leaves them alone.
    let mutated = admit(&router, "/mutate", &review(GROUP, "Gadget", object.clone())).await;
    assert_eq!(mutated["allowed"], true);
    assert!(mutated.get("patch").is_none());

    // Same kind name, other group: no hook.
    let other = admit(
        &router,
        "/validate",
        &review("other.example.com", "Gadget", object),
    )
    .await;
    assert_eq!(other["allowed"], true);
}

#[tokio::test]
async fn unknown_kinds_are_allowed_unchanged() {
    let router = webhooks().into_router();
    let object = widget(json!({"size": "huge"}));
    for path in ["/mutate", "/validate"] {
        let response = admit(&router, path, &review(GROUP, "Sprocket", object.clone())).await;
        assert_eq!(
            response,
            json!({"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": true})
        );
    }
}

#[tokio::test]
async fn bad_requests_get_400_naming_the_problem() {
    let router = webhooks().into_router();
    let mut no_request = review(GROUP, "Widget", widget(json!({})));
    no_request
        .as_object_mut()
        .expect("object")
        .remove("request");
    let mut old_version = review(GROUP, "Widget", widget(json!({})));
    old_version["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let cases = [
        ("{not json".to_owned(), "the body is not JSON: "),
        (no_request.to_string(), "the AdmissionReview has no request"),
        (
            old_version.to_string(),
            r#"expected apiVersion "admission.k8s.io/v1", got "admission.k8s.io/v1beta1""#,
        ),
        (
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":3}}"#
                .to_owned(),
            "the AdmissionReview request is malformed: invalid type",
        ),
    ];
    for (body, expected) in cases {
        let (status, text) = call(&router, Method::POST, "/validate", Body::from(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            text.starts_with(expected),
            "{text:?} should start with {expected:?}"
        );
    }
}

/// A malformed request that still carries a uid is refused as a review naming it, so its sender finds the
/// answer where it looks for every other one.
#[tokio::test]
async fn a_malformed_request_with_a_uid_is_refused_as_a_review() {
    let router = webhooks().into_router();
    let body = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":7}}"#;
    let (status, text) = call(&router, Method::POST, "/validate", Body::from(body)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let answer: Value = serde_json::from_str(&text).expect("a review");
    assert_eq!(answer["kind"], "AdmissionReview");
    assert_eq!(answer["response"]["uid"], "x");
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["status"]["code"], 400);
    let message = answer["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.starts_with("the AdmissionReview request is malformed: invalid type"),
        "{message}"
    );
}

/// Megabytes of tiny values cost far more parsed than their bytes: a review over the value limit is refused, as a
/// review naming its request, before anything is parsed.
#[tokio::test]
async fn reviews_over_the_value_limit_are_refused_unparsed() {
    let router = webhooks().into_router();
    let mut many = review(GROUP, "Widget", widget(json!({})));
    many["request"]["object"]["spec"]["items"] =
        Value::Array(vec![json!(1); kerf_webhooks::VALUE_LIMIT + 1]);
    let uid = many["request"]["uid"].clone();
    let (status, text) = call(
        &router,
        Method::POST,
        "/validate",
        Body::from(many.to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let answer: Value = serde_json::from_str(&text).expect("a review");
    assert_eq!(answer["response"]["uid"], uid);
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["status"]["code"], 413);
    let message = answer["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("more than the limit of 200000"),
        "{message}"
    );
    // The same values inside one string are one value.
    let mut one_string = review(GROUP, "Widget", widget(json!({})));
    one_string["request"]["object"]["spec"]["items"] =
        json!("1,".repeat(kerf_webhooks::VALUE_LIMIT + 1));
    let (status, text) = call(
        &router,
        Method::POST,
        "/validate",
        Body::from(one_string.to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let answer: Value = serde_json::from_str(&text).expect("a review");
    assert_ne!(answer["response"]["status"]["code"], 413, "{text}");
}

#[tokio::test]
async fn bodies_over_3_mib_get_413() {
    let router = webhooks().into_router();
    let mut huge = review(GROUP, "Widget", widget(json!({})));
    huge["request"]["object"]["spec"]["blob"] = json!("x".repeat(4 * 1024 * 1024));
    let body = Body::from(huge.to_string());
    let (status, text) = call(&router, Method::POST, "/mutate", body).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(text, "the AdmissionReview is larger than 3145728 bytes");
}

/// Panics; runs on the request's task when `inline`, on a blocking thread otherwise.
struct Bomb {
    inline: bool,
}

impl AdmissionHook for Bomb {
    fn mutate(&self, _: &ReviewRequest) -> Result<Mutated, Denial> {
        panic!("boom")
    }

    fn runs_inline(&self) -> bool {
        self.inline
    }
}

#[tokio::test]
async fn a_panicking_hook_is_refused_with_500_and_the_server_carries_on() {
    let router = webhooks()
        .hook(GROUP, "Bomb", Bomb { inline: false })
        .hook(GROUP, "InlineBomb", Bomb { inline: true })
        .into_router();
    for kind in ["Bomb", "InlineBomb", "Bomb", "InlineBomb"] {
        let response = admit(&router, "/mutate", &review(GROUP, kind, widget(json!({})))).await;
        assert_eq!(response["allowed"], false);
        assert_eq!(response["status"]["code"], 500);
        assert_eq!(response["status"]["reason"], "InternalError");
        assert_eq!(
            response["status"]["message"],
            format!("the {kind} admission hook failed; see the webhook's log")
        );
    }
    let response = admit(
        &router,
        "/validate",
        &review(GROUP, "Widget", widget(json!({}))),
    )
    .await;
    assert_eq!(response["allowed"], true);
}

/// Blocks until the test drops the sender, i.e. longer than any timeout under test.
struct Sloth(Mutex<mpsc::Receiver<()>>);

impl AdmissionHook for Sloth {
    fn validate(&self, _: &ReviewRequest) -> Result<Vec<String>, Denial> {
        let _ = self.0.lock().map(|receiver| receiver.recv());
        Ok(Vec::new())
    }
}

#[tokio::test]
async fn a_slow_hook_is_refused_with_504_at_the_deadline() {
    let (_release, receiver) = mpsc::channel::<()>();
    let router = webhooks()
        .hook(GROUP, "Sloth", Sloth(Mutex::new(receiver)))
        .timeout(Duration::from_millis(200))
        .into_router();
    let response = admit(
        &router,
        "/validate",
        &review(GROUP, "Sloth", widget(json!({}))),
    )
    .await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 504);
    assert_eq!(response["status"]["reason"], "Timeout");
    assert_eq!(
        response["status"]["message"],
        "the Sloth admission hook did not answer within 200ms"
    );
}

/// Advice that must never block: blocks like [`Sloth`] but is admitted unchanged at the deadline.
struct SlowAdvice(Mutex<mpsc::Receiver<()>>);

impl AdmissionHook for SlowAdvice {
    fn mutate(&self, _: &ReviewRequest) -> Result<Mutated, Denial> {
        let _ = self.0.lock().map(|receiver| receiver.recv());
        Ok(Mutated::default())
    }

    fn allow_on_timeout(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn a_slow_hook_that_allows_on_timeout_admits_unchanged() {
    let (_release, receiver) = mpsc::channel::<()>();
    let router = webhooks()
        .hook(GROUP, "Advice", SlowAdvice(Mutex::new(receiver)))
        .timeout(Duration::from_millis(200))
        .into_router();
    let response = admit(
        &router,
        "/mutate",
        &review(GROUP, "Advice", widget(json!({}))),
    )
    .await;
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none(), "{response}");
    assert_eq!(
        response["warnings"][0],
        "the Advice admission hook did not answer within 200ms; admitted unchanged"
    );
}

/// Counts its calls and sleeps, inline: the inline path only takes small reviews.
struct InlineSleeper;

impl AdmissionHook for InlineSleeper {
    fn validate(&self, _: &ReviewRequest) -> Result<Vec<String>, Denial> {
        std::thread::sleep(Duration::from_millis(600));
        Ok(Vec::new())
    }

    fn runs_inline(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn a_large_review_does_not_run_inline_past_the_deadline() {
    let router = webhooks()
        .hook(GROUP, "Sleeper", InlineSleeper)
        .timeout(Duration::from_millis(200))
        .into_router();
    let mut large = review(GROUP, "Sleeper", widget(json!({})));
    large["request"]["object"]["spec"]["padding"] = json!("x".repeat(64 * 1024));
    let started = std::time::Instant::now();
    let response = admit(&router, "/validate", &large).await;
    assert_eq!(response["status"]["code"], 504, "{response}");
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn health_and_readiness() {
    let ready = ReadyFlag::new(false);
    let router = webhooks().readiness(ready.clone()).into_router();
    let get = |path| call(&router, Method::GET, path, Body::empty());
    assert_eq!(get("/healthz").await, (StatusCode::OK, "ok".to_owned()));
    assert_eq!(
        get("/readyz").await,
        (StatusCode::SERVICE_UNAVAILABLE, "not ready".to_owned())
    );
    ready.set(true);
    assert_eq!(get("/readyz").await, (StatusCode::OK, "ok".to_owned()));
}

#[tokio::test]
async fn metrics_count_requests_denials_and_durations() {
    let mut registry = Registry::default();
    let app_counter = Counter::<u64>::default();
    registry.register(
        "app_things",
        "Things the application counts",
        app_counter.clone(),
    );
    app_counter.inc();
    let router = webhooks().registry(registry).into_router();

    admit(
        &router,
        "/validate",
        &review(GROUP, "Widget", widget(json!({"size": "huge"}))),
    )
    .await;
    admit(
        &router,
        "/mutate",
        &review(GROUP, "Widget", widget(json!({}))),
    )
    .await;
    call(&router, Method::POST, "/validate", Body::from("{")).await;

    let (status, text) = call(&router, Method::GET, "/metrics", Body::empty()).await;
    assert_eq!(status, StatusCode::OK);
    for line in [
        r#"kerf_webhook_requests_total{path="/validate",kind="Widget",operation="CREATE",result="denied"} 1"#,
        r#"kerf_webhook_requests_total{path="/mutate",kind="Widget",operation="CREATE",result="allowed"} 1"#,
        r#"kerf_webhook_requests_total{path="/validate",kind="",operation="",result="error"} 1"#,
        r#"kerf_webhook_denials_total{kind="Widget"} 1"#,
        r#"kerf_webhook_request_duration_seconds_count{path="/mutate",kind="Widget"} 1"#,
        "app_things_total 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

/// Records how many of its calls run at once.
#[derive(Default)]
struct Crowd {
    running: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

struct Crowded(std::sync::Arc<Crowd>);

impl AdmissionHook for Crowded {
    fn validate(&self, _: &ReviewRequest) -> Result<Vec<String>, Denial> {
        use std::sync::atomic::Ordering;
        let now = self.0.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.0.most.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        self.0.running.fetch_sub(1, Ordering::SeqCst);
        Ok(Vec::new())
    }
}

/// Hooks are CPU work: a burst of them runs on at most `hook_threads` blocking threads, and a request that
/// cannot get one within its deadline is answered as timed out instead of piling up threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_run_on_a_bounded_number_of_threads() {
    let crowd = std::sync::Arc::new(Crowd::default());
    let router = webhooks()
        .hook(GROUP, "Crowd", Crowded(crowd.clone()))
        .hook_threads(2)
        .timeout(Duration::from_millis(400))
        .into_router();
    let body = review(GROUP, "Crowd", widget(json!({})));
    let answers = answers_of(
        (0..40)
            .map(|_| {
                let (router, body) = (router.clone(), body.clone());
                tokio::spawn(async move { admit(&router, "/validate", &body).await })
            })
            .collect(),
    )
    .await;
    assert_eq!(
        crowd.most.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "at most two hooks at once"
    );
    let allowed = answers.iter().filter(|a| a["allowed"] == true).count();
    let timed_out = answers
        .iter()
        .filter(|a| a["status"]["code"] == 504)
        .count();
    // 40 calls of 50 ms on two threads take a second; the deadline is 400 ms.
    assert!(
        allowed >= 2 && timed_out >= 1,
        "{allowed} allowed, {timed_out} timed out"
    );
    assert_eq!(allowed + timed_out, 40);
}

async fn answers_of(tasks: Vec<tokio::task::JoinHandle<Value>>) -> Vec<Value> {
    let mut answers = Vec::with_capacity(tasks.len());
    for task in tasks {
        answers.push(task.await.expect("task"));
    }
    answers
}
