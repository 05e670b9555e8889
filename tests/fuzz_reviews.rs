//! Fuzz targets for the admission entry points (issue 15): `kerf webhook`'s router in-process, fed mutated
//! valid AdmissionReviews for NodePools, EC2NodeClasses and Pods on `/validate` and `/mutate`, CREATE and
//! UPDATE, and bodies that are not reviews at all (random bytes, truncated JSON, deep nesting).
//!
//! A mutation replaces a value anywhere in the object with a wrong-typed one, edits a string with multi-byte
//! characters and digit runs, or duplicates, drops and inserts list items: the inputs of items 1, 6 and 9.
//! Asserted for every request: no 5xx except deliberate shedding (503 or 429 with `Retry-After`); a
//! well-formed review is answered 200 with a valid AdmissionReview carrying the request's uid. Case counts keep
//! this to a few seconds in debug; `KERF_FUZZ_CASES` runs longer (docs/fuzzing.md).

use arc_swap::ArcSwapOption;
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use axum::Router;
use kerf::admission::pods::{PodAdvisor, PodHook};
use kerf::catalog::{Catalog, CatalogSettings, Pricing};
use kerf_webhooks::Webhooks;
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{json, Value};
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tower::ServiceExt;

/// Cases per target unless `KERF_FUZZ_CASES` says otherwise; pod advice runs the scheduler, so it gets fewer.
const DEFAULT_CASES: u32 = 96;
/// The deadline the router is built with, as `kerf webhook` defaults it.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Largest body read back from a response.
const RESPONSE_LIMIT: usize = 16 << 20;
/// An answer may be this much larger than the request, plus [`RESPONSE_BASE`]: messages echo values and name
/// fields, so a list of wrong items grows the answer linearly (about 15× today), while errors that multiply with
/// each other (issue 15 item 1: a 200 KB review answered with 36 MB) grow it far past this.
const RESPONSE_GROWTH: usize = 32;
const RESPONSE_BASE: usize = 64 << 10;

fn config(divisor: u32) -> ProptestConfig {
    let cases = std::env::var("KERF_FUZZ_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    ProptestConfig {
        cases: (cases / divisor).max(1),
        ..ProptestConfig::default()
    }
}

const EXAMPLE: &str = include_str!("../examples/default.yaml");

/// The NodePool and EC2NodeClass of the getting-started example, as the apiserver sends them (JSON).
static EXAMPLES: LazyLock<Vec<Value>> = LazyLock::new(|| {
    serde_yaml::Deserializer::from_str(EXAMPLE)
        .map(|document| serde::Deserialize::deserialize(document).expect("example YAML"))
        .collect()
});

fn example(kind: &str) -> Value {
    let mut object = EXAMPLES
        .iter()
        .find(|object| object["kind"] == kind)
        .cloned()
        .unwrap_or_else(|| panic!("no {kind} in examples/default.yaml"));
    object["metadata"]["creationTimestamp"] = Value::Null;
    object
}

/// The example NodePool with the fields item 1 and 9 name filled in too: taints (with a date-time), startup
/// taints, expireAfter, and more budgets.
fn seed_nodepool() -> Value {
    let mut pool = example("NodePool");
    let spec = &mut pool["spec"]["template"]["spec"];
    spec["taints"] = json!([{"key": "example.com/gpu", "value": "true", "effect": "NoSchedule",
                             "timeAdded": "2024-01-02T03:04:05Z"}]);
    spec["startupTaints"] = json!([{"key": "example.com/init", "effect": "NoExecute"}]);
    spec["expireAfter"] = json!("720h");
    spec["terminationGracePeriod"] = json!("1h30m");
    pool["spec"]["weight"] = json!(10);
    pool["spec"]["disruption"]["budgets"]
        .as_array_mut()
        .expect("budgets")
        .push(json!({"nodes": "5", "reasons": ["Drifted", "Empty"], "schedule": "@daily", "duration": "10m"}));
    pool
}

fn seed_nodeclass() -> Value {
    let mut class = example("EC2NodeClass");
    class["spec"]["tags"] = json!({"team": "platform"});
    class["spec"]["blockDeviceMappings"] = json!([{"deviceName": "/dev/xvda",
        "ebs": {"volumeSize": "100Gi", "volumeType": "gp3", "iops": 3000, "encrypted": true}}]);
    class["spec"]["kubelet"] = json!({"maxPods": 110, "evictionHard": {"memory.available": "5%"},
        "kubeReserved": {"cpu": "100m", "memory": "1Gi"}});
    class["spec"]["metadataOptions"] =
        json!({"httpTokens": "required", "httpPutResponseHopLimit": 1});
    class
}

/// A pod with every part of a spec that pod advice reads: requests, a node selector, affinity, tolerations and
/// topology spread.
fn seed_pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "inflate-", "namespace": "default", "labels": {"app": "inflate"}},
        "spec": {
            "containers": [{"name": "inflate", "image": "pause",
                            "resources": {"requests": {"cpu": "1", "memory": "1.5Gi"}, "limits": {"memory": "2Gi"}}}],
            "nodeSelector": {"kubernetes.io/arch": "amd64"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [
                    {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["1"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}]}]}}},
            "tolerations": [{"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "inflate"}}}]}})
}

static CATALOG: LazyLock<Arc<Catalog>> = LazyLock::new(|| {
    Arc::new(
        Catalog::embedded("us-east-1", &CatalogSettings::default(), &Pricing::none())
            .expect("embedded catalog"),
    )
});

/// `kerf webhook`'s NodePool and EC2NodeClass router, with the catalog (NodePool warnings need it).
static OBJECTS: LazyLock<Router> =
    LazyLock::new(|| kerf::cli::webhook::router(TIMEOUT, Some(CATALOG.clone())));

/// The Pod hook as `kerf webhook` registers it once NodePools are synced: advice from the example pools.
static PODS: LazyLock<Router> = LazyLock::new(|| {
    let pools = [serde_json::from_value(example("NodePool")).expect("example NodePool")];
    let classes = [serde_json::from_value(example("EC2NodeClass")).expect("example EC2NodeClass")];
    let catalog: &'static Catalog = &CATALOG;
    let advisor = Arc::new(ArcSwapOption::from_pointee(PodAdvisor::new(
        &pools, &classes, catalog,
    )));
    Webhooks::new()
        .hook(
            "",
            "Pod",
            PodHook {
                advisor,
                volumes: None,
            },
        )
        .timeout(TIMEOUT)
        .into_router()
});

/// POSTs `body` to `path` and returns the status, headers and body.
fn post(router: &Router, path: &str, body: Vec<u8>) -> (StatusCode, HeaderMap, Bytes) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let request = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body))
            .expect("request");
        let response = router.clone().oneshot(request).await.expect("infallible");
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, RESPONSE_LIMIT)
            .await
            .expect("response body");
        (parts.status, parts.headers, bytes)
    })
}

/// The assertions every answer must pass; `well_formed` says the review itself is valid, so it must be answered.
fn check_answer(
    request: &Value,
    request_len: usize,
    well_formed: bool,
    (status, headers, body): (StatusCode, HeaderMap, Bytes),
) -> Result<(), TestCaseError> {
    let text = String::from_utf8_lossy(&body);
    prop_assert!(
        body.len() <= RESPONSE_BASE + RESPONSE_GROWTH * request_len,
        "a {}-byte request was answered with {} bytes",
        request_len,
        body.len()
    );
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        let shed = matches!(
            status,
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
        );
        prop_assert!(
            shed && headers.contains_key(header::RETRY_AFTER),
            "{} without shedding: {}",
            status,
            text
        );
        return Ok(());
    }
    if well_formed {
        prop_assert_eq!(status, StatusCode::OK, "{}", text);
    }
    if status == StatusCode::OK {
        let answer: Value = serde_json::from_slice(&body)
            .map_err(|error| TestCaseError::fail(format!("200 but not JSON ({error}): {text}")))?;
        prop_assert_eq!(&answer["apiVersion"], "admission.k8s.io/v1");
        prop_assert_eq!(&answer["kind"], "AdmissionReview");
        prop_assert_eq!(&answer["response"]["uid"], &request["request"]["uid"]);
        prop_assert!(answer["response"]["allowed"].is_boolean(), "{}", text);
    }
    Ok(())
}

/// What an edit puts into a string: the characters and tokens the parsers of item 6 trip on.
const PIECES: &[&str] = &[
    "é",
    "🦀",
    "\u{301}",
    "µ",
    "\u{0}",
    " ",
    "-",
    "+",
    ".",
    "e",
    "E",
    "Ki",
    "Ei",
    "m",
    "h",
    "/",
    "%",
    "*",
    "@",
    "T",
    "Z",
    "+02:00",
    "99999999999999999999999999999999",
];

/// A JSON value of the wrong shape for almost any field.
fn wrong_value() -> impl Strategy<Value = Value> {
    let scalar = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        Just(json!(u64::MAX)),
        Just(json!(-1)),
        Just(json!(1_000_000_000)),
        "\\PC{0,12}".prop_map(Value::from),
        prop::sample::select(PIECES).prop_map(Value::from),
    ];
    prop_oneof![
        4 => scalar.clone(),
        1 => Just(json!([])),
        1 => Just(json!({})),
        1 => (1usize..40).prop_map(|depth| (0..depth).fold(json!(1), |inner, _| json!([inner]))),
        1 => (scalar, 1usize..200).prop_map(|(item, n)| Value::Array(vec![item; n])),
    ]
}

/// One mutation, applied at the node picked by `at` among all nodes of the object.
#[derive(Clone, Debug)]
enum Mutation {
    /// Replace the node with a value of another shape.
    Replace(Index, Value),
    /// Edit a string node: insert a piece at a character position (other nodes: replace with the piece).
    EditString(Index, Index, String),
    /// Arrays: duplicate an item; objects: drop a field.
    DuplicateOrDrop(Index, Index),
    /// Arrays: insert a value at an index; objects: add an unknown field.
    Insert(Index, Index, Value),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let piece = prop_oneof![
        prop::sample::select(PIECES).prop_map(str::to_owned),
        "\\PC{1,4}",
    ];
    prop_oneof![
        3 => (any::<Index>(), wrong_value()).prop_map(|(at, v)| Mutation::Replace(at, v)),
        3 => (any::<Index>(), any::<Index>(), piece).prop_map(|(at, pos, p)| Mutation::EditString(at, pos, p)),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(at, which)| Mutation::DuplicateOrDrop(at, which)),
        2 => (any::<Index>(), any::<Index>(), wrong_value()).prop_map(|(at, pos, v)| Mutation::Insert(at, pos, v)),
    ]
}

/// The JSON pointer of every node below the root, in document order.
fn pointers(value: &Value, at: &str, out: &mut Vec<String>) {
    let escape = |key: &str| key.replace('~', "~0").replace('/', "~1");
    match value {
        Value::Object(fields) => {
            for (key, child) in fields {
                let pointer = format!("{at}/{}", escape(key));
                out.push(pointer.clone());
                pointers(child, &pointer, out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                let pointer = format!("{at}/{i}");
                out.push(pointer.clone());
                pointers(child, &pointer, out);
            }
        }
        _ => {}
    }
}

fn apply(object: &mut Value, mutation: &Mutation) {
    let mut all = Vec::new();
    pointers(object, "", &mut all);
    let at = match mutation {
        Mutation::Replace(at, _)
        | Mutation::EditString(at, ..)
        | Mutation::DuplicateOrDrop(at, _)
        | Mutation::Insert(at, ..) => at,
    };
    let Some(node) = all
        .get(at.index(all.len().max(1)))
        .and_then(|pointer| object.pointer_mut(pointer))
    else {
        return;
    };
    match (mutation, node) {
        (Mutation::Replace(_, value), node) => *node = value.clone(),
        (Mutation::EditString(_, pos, piece), Value::String(text)) => {
            let mut chars: Vec<char> = text.chars().collect();
            let pos = pos.index(chars.len() + 1);
            chars.splice(pos..pos, piece.chars());
            *text = chars.into_iter().collect();
        }
        (Mutation::EditString(_, _, piece), node) => *node = Value::from(piece.as_str()),
        (Mutation::DuplicateOrDrop(_, which), Value::Array(items)) if !items.is_empty() => {
            let item = items[which.index(items.len())].clone();
            items.push(item);
        }
        (Mutation::DuplicateOrDrop(_, which), Value::Object(fields)) if !fields.is_empty() => {
            let key = fields.keys().nth(which.index(fields.len())).cloned();
            if let Some(key) = key {
                fields.remove(&key);
            }
        }
        (Mutation::Insert(_, pos, value), Value::Array(items)) => {
            items.insert(pos.index(items.len() + 1), value.clone());
        }
        (Mutation::Insert(_, _, value), Value::Object(fields)) => {
            fields.insert("fuzzUnknownField".to_owned(), value.clone());
        }
        _ => {}
    }
}

fn mutated(seed: &Value, mutations: &[Mutation]) -> Value {
    let mut object = seed.clone();
    for mutation in mutations {
        apply(&mut object, mutation);
    }
    object
}

/// A review of `object` (and `old` on UPDATE) for `kind`.
fn review(uid: &str, group: &str, kind: &str, object: &Value, old: Option<&Value>) -> Value {
    let mut request = json!({
        "uid": uid,
        "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": format!("{}s", kind.to_lowercase())},
        "operation": if old.is_some() { "UPDATE" } else { "CREATE" },
        "name": object["metadata"]["name"].as_str().unwrap_or_default(),
        "userInfo": {"username": "fuzz"},
        "object": object,
    });
    if let Some(old) = old {
        request["oldObject"] = old.clone();
    }
    if kind == "Pod" {
        request["namespace"] = json!("default");
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

/// Mutations of the object and, on UPDATE, of the stored object (none: the valid seed is stored).
fn object_mutations() -> impl Strategy<Value = (Vec<Mutation>, Option<Vec<Mutation>>)> {
    (
        prop::collection::vec(mutation(), 1..5),
        prop::option::of(prop::collection::vec(mutation(), 0..3)),
    )
}

/// Sends a mutated review of `seed` to `path` and checks the answer.
fn admit_mutated(
    router: &Router,
    path: &str,
    (group, kind, seed): (&str, &str, &Value),
    uid: &str,
    (mutations, old_mutations): &(Vec<Mutation>, Option<Vec<Mutation>>),
) -> Result<(), TestCaseError> {
    let object = mutated(seed, mutations);
    let old = old_mutations.as_ref().map(|m| mutated(seed, m));
    let request = review(uid, group, kind, &object, old.as_ref());
    let body = serde_json::to_vec(&request).expect("encode review");
    check_answer(&request, body.len(), true, post(router, path, body))
}

fn uid() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        1 => "\\PC{0,20}",
    ]
}

fn path() -> impl Strategy<Value = &'static str> {
    prop::sample::select(&["/validate", "/mutate"][..])
}

static NODEPOOL_SEED: LazyLock<Value> = LazyLock::new(seed_nodepool);
static NODECLASS_SEED: LazyLock<Value> = LazyLock::new(seed_nodeclass);
static POD_SEED: LazyLock<Value> = LazyLock::new(seed_pod);

proptest! {
    #![proptest_config(config(1))]

    #[test]
    fn nodepool_reviews(path in path(), uid in uid(), mutations in object_mutations()) {
        let kind = ("karpenter.sh", "NodePool", &*NODEPOOL_SEED);
        admit_mutated(&OBJECTS, path, kind, &uid, &mutations)?;
    }

    #[test]
    fn ec2nodeclass_reviews(path in path(), uid in uid(), mutations in object_mutations()) {
        let kind = ("karpenter.k8s.aws", "EC2NodeClass", &*NODECLASS_SEED);
        admit_mutated(&OBJECTS, path, kind, &uid, &mutations)?;
    }

    /// Bodies that are not AdmissionReviews: random bytes, a valid review cut short, nesting past any parser's
    /// depth, and a review whose envelope (kind, operation, uid) is mutated.
    #[test]
    fn malformed_bodies(
        path in path(),
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        cut in any::<Index>(),
        depth in 100usize..5_000,
        envelope in mutation(),
    ) {
        let valid = review("u-1", "karpenter.sh", "NodePool", &NODEPOOL_SEED, None);
        let encoded = serde_json::to_vec(&valid).expect("encode review");
        let truncated = encoded[..cut.index(encoded.len())].to_vec();
        let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes();
        let nested_spec = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
        let nested_object = String::from_utf8(encoded.clone())
            .expect("UTF-8")
            .replacen(r#""spec":{"#, &format!(r#""spec":{{"deep":{nested_spec},"#), 1)
            .into_bytes();
        for body in [bytes, truncated, nested, nested_object] {
            check_answer(&valid, body.len(), false, post(&OBJECTS, path, body))?;
        }
        let mut envelope_mutated = valid.clone();
        apply(&mut envelope_mutated, &envelope);
        let body = serde_json::to_vec(&envelope_mutated).expect("encode review");
        check_answer(&envelope_mutated, body.len(), false, post(&OBJECTS, path, body))?;
    }
}

proptest! {
    #![proptest_config(config(3))]

    /// Pods on `/mutate` (advice) and `/validate`, CREATE and UPDATE.
    #[test]
    fn pod_reviews(path in path(), uid in uid(), mutations in object_mutations()) {
        let kind = ("", "Pod", &*POD_SEED);
        admit_mutated(&PODS, path, kind, &uid, &mutations)?;
    }
}

/// The seeds themselves are admitted: otherwise every mutation would only test the denial path.
#[test]
fn seeds_are_admitted() {
    for (router, group, kind, seed) in [
        (&*OBJECTS, "karpenter.sh", "NodePool", &*NODEPOOL_SEED),
        (
            &*OBJECTS,
            "karpenter.k8s.aws",
            "EC2NodeClass",
            &*NODECLASS_SEED,
        ),
        (&*PODS, "", "Pod", &*POD_SEED),
    ] {
        let request = review("seed", group, kind, seed, None);
        let body = serde_json::to_vec(&request).expect("encode review");
        let (status, _, body) = post(router, "/validate", body);
        let answer: Value = serde_json::from_slice(&body).expect("JSON answer");
        assert_eq!(status, StatusCode::OK, "{kind}: {answer}");
        assert_eq!(answer["response"]["allowed"], true, "{kind}: {answer}");
    }
    // Pod advice ran: the mutating answer carries the annotations as a patch.
    let request = review("seed", "", "Pod", &POD_SEED, None);
    let body = serde_json::to_vec(&request).expect("encode review");
    let (status, _, body) = post(&PODS, "/mutate", body);
    let answer: Value = serde_json::from_slice(&body).expect("JSON answer");
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["response"]["patchType"], "JSONPatch", "{answer}");
}
