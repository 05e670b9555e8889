//! A scripted apiserver for unit tests of the controllers, so that a mistake in a request, a retry, a requeue
//! or the handling of a 404/409/429 shows in `cargo test` without a cluster.
//!
//! A test states the requests it expects the code under test to make, in order: method and path, optionally
//! checks on the query, the content type or the JSON body, and the answer each gets (a status code and a JSON
//! body: the object, or a [`status`] for an error). [`ApiServer::serve`] runs the code under test against a
//! `kube::Client` backed by kube's `tower-test` mock service, answers the requests as they come, and fails the
//! test with a message naming the request when one is not the one expected, when one comes after the script
//! is done, when a scripted one never comes, or when the code does not finish. Every wait is bounded by
//! [`WAIT`]; nothing sleeps.
//!
//! [`context`] builds the controllers' shared [`Context`] around such a client, with cluster state that holds
//! given objects and a fixed clock, for the functions that take one.

use super::provisioning::advice_refresh::AdviceCatalog;
use super::state::ClusterState;
use super::Context;
use crate::api::ec2nodeclass::{SecurityGroup, Subnet};
use crate::cloud::sim::{SimAmi, SimCloud, SimSecurityGroup, SimSubnet};
use crate::cloud::ResolvedAmi;
use crate::engine::Clock;
use crate::kube::events::Events;
use ::kube::client::Body;
use ::kube::Client;
use futures::FutureExt;
use http::{Method, Request, Response};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::timeout;

/// How long the code under test may take to finish one script.
pub(crate) const WAIT: Duration = Duration::from_secs(5);

/// A request as the apiserver received it.
#[derive(Debug)]
pub(crate) struct Seen {
    pub method: Method,
    pub path: String,
    pub query: Option<String>,
    pub content_type: Option<String>,
    /// The JSON body; `Null` when there is none.
    pub body: Value,
}

type Check = Box<dyn FnOnce(&Seen) + Send>;
type Decide = Box<dyn FnOnce(&Seen) -> (u16, Value) + Send>;

enum Answer {
    Json(u16, Value),
    /// The request's own body, as a create answers.
    Echo(u16),
    /// Decided on the request.
    With(Decide),
}

/// One expected request and the answer it gets (by default `200 {}`). A path ending in `*` matches every path
/// that starts with what precedes it (for requests whose order the code does not fix).
pub(crate) struct Exchange {
    method: Method,
    path: String,
    checks: Vec<Check>,
    answer: Answer,
}

impl Exchange {
    pub(crate) fn new(method: Method, path: &str) -> Exchange {
        Exchange {
            method,
            path: path.to_owned(),
            checks: Vec::new(),
            answer: Answer::Json(200, json!({})),
        }
    }

    pub(crate) fn get(path: &str) -> Exchange {
        Exchange::new(Method::GET, path)
    }

    pub(crate) fn patch(path: &str) -> Exchange {
        Exchange::new(Method::PATCH, path)
    }

    pub(crate) fn post(path: &str) -> Exchange {
        Exchange::new(Method::POST, path)
    }

    pub(crate) fn delete(path: &str) -> Exchange {
        Exchange::new(Method::DELETE, path)
    }

    /// The request's JSON body must be `expected`.
    pub(crate) fn body(self, expected: Value) -> Exchange {
        self.check(move |seen| {
            assert_eq!(
                seen.body, expected,
                "the body of {} {}",
                seen.method, seen.path
            )
        })
    }

    /// The request's query string must be `expected` (percent-encoded as sent).
    pub(crate) fn query(self, expected: &'static str) -> Exchange {
        self.check(move |seen| {
            assert_eq!(
                seen.query.as_deref(),
                Some(expected),
                "the query of {} {}",
                seen.method,
                seen.path
            )
        })
    }

    /// The request's `Content-Type` must be `expected` (it tells a JSON patch from a merge patch).
    pub(crate) fn content_type(self, expected: &'static str) -> Exchange {
        self.check(move |seen| {
            assert_eq!(
                seen.content_type.as_deref(),
                Some(expected),
                "the content type of {} {}",
                seen.method,
                seen.path
            )
        })
    }

    /// Any other check of the request.
    pub(crate) fn check(mut self, check: impl FnOnce(&Seen) + Send + 'static) -> Exchange {
        self.checks.push(Box::new(check));
        self
    }

    /// Answers `status` with `body`.
    pub(crate) fn answer(mut self, status: u16, body: Value) -> Exchange {
        self.answer = Answer::Json(status, body);
        self
    }

    /// Answers with the error [`status`] `code` and `reason`.
    pub(crate) fn fail(self, code: u16, reason: &str) -> Exchange {
        self.answer(code, status(code, reason, &format!("scripted {reason}")))
    }

    /// Answers what `answer` makes of the request.
    pub(crate) fn answer_with(
        mut self,
        answer: impl FnOnce(&Seen) -> (u16, Value) + Send + 'static,
    ) -> Exchange {
        self.answer = Answer::With(Box::new(answer));
        self
    }

    /// Answers `status` with the request's own body.
    pub(crate) fn echo(mut self, status: u16) -> Exchange {
        self.answer = Answer::Echo(status);
        self
    }
}

/// The `Status` object the apiserver answers an error with.
pub(crate) fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Status", "metadata": {},
        "status": "Failure", "reason": reason, "message": message, "code": code,
    })
}

/// A core/v1 Event in `default` (how kerf reports on cluster-scoped objects) with `reason`, whose message
/// contains `message`.
pub(crate) fn event(reason: &'static str, message: &'static str) -> Exchange {
    Exchange::post("/api/v1/namespaces/default/events")
        .check(move |seen| {
            assert_eq!(seen.body["reason"], reason, "{}", seen.body);
            let text = seen.body["message"].as_str().unwrap_or_default();
            assert!(text.contains(message), "{text:?} lacks {message:?}");
        })
        .echo(201)
}

/// An events.k8s.io/v1 Event in `namespace` (how kerf reports on namespaced objects) with `reason`.
pub(crate) fn namespaced_event(namespace: &str, reason: &'static str) -> Exchange {
    Exchange::post(&format!(
        "/apis/events.k8s.io/v1/namespaces/{namespace}/events"
    ))
    .check(move |seen| assert_eq!(seen.body["reason"], reason, "{}", seen.body))
    .echo(201)
}

/// The apiserver end of a mocked client.
pub(crate) struct ApiServer {
    handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
}

/// A client and the scripted apiserver it talks to (call inside a Tokio runtime).
pub(crate) fn apiserver() -> (Client, ApiServer) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), ApiServer { handle })
}

impl ApiServer {
    /// Runs `code` while answering `script`; returns what `code` returned. Panics when a request differs from
    /// the script, comes after it, or never comes, and when `code` takes longer than [`WAIT`].
    pub(crate) async fn serve<F: Future>(&mut self, script: Vec<Exchange>, code: F) -> F::Output {
        let code = timeout(WAIT, code);
        tokio::pin!(code);
        let mut script = script.into_iter().enumerate();
        loop {
            tokio::select! {
                biased;
                finished = &mut code => {
                    let Ok(output) = finished else {
                        panic!("the code under test did not finish within {WAIT:?}");
                    };
                    if let Some((i, missing)) = script.next() {
                        panic!(
                            "request #{i} ({} {}) was never made: the code under test finished without it",
                            missing.method, missing.path
                        );
                    }
                    if let Some(Some((request, _))) = self.handle.next_request().now_or_never() {
                        panic!("unexpected request after the script: {} {}", request.method(), request.uri());
                    }
                    return output;
                }
                request = self.handle.next_request() => {
                    let Some((request, respond)) = request else {
                        panic!("the client went away before the code under test finished");
                    };
                    let seen = seen(request).await;
                    let Some((i, exchange)) = script.next() else {
                        panic!("unexpected request beyond the script: {} {}?{} {}",
                            seen.method, seen.path, seen.query.unwrap_or_default(), seen.body);
                    };
                    respond.send_response(exchange.answer_to(i, seen));
                }
            }
        }
    }
}

impl Exchange {
    fn answer_to(self, i: usize, seen: Seen) -> Response<Body> {
        let path_matches = match self.path.strip_suffix('*') {
            Some(prefix) => seen.path.starts_with(prefix),
            None => seen.path == self.path,
        };
        assert!(
            seen.method == self.method && path_matches,
            "request #{i}: expected {} {}, got {} {} (body {})",
            self.method,
            self.path,
            seen.method,
            seen.path,
            seen.body
        );
        for check in self.checks {
            check(&seen);
        }
        let (code, body) = match self.answer {
            Answer::Json(code, body) => (code, body),
            Answer::Echo(code) => (code, seen.body),
            Answer::With(answer) => answer(&seen),
        };
        Response::builder()
            .status(code)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(
                serde_json::to_vec(&body).expect("a JSON answer"),
            ))
            .expect("a response")
    }
}

async fn seen(request: Request<Body>) -> Seen {
    let (parts, body) = request.into_parts();
    let bytes = body.collect_bytes().await.expect("the request body");
    Seen {
        method: parts.method,
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        content_type: parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        body: if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("a JSON request body")
        },
    }
}

/// A clock stopped at one moment.
pub(crate) struct At(pub SystemTime);

impl Clock for At {
    fn now(&self) -> SystemTime {
        self.0
    }
}

/// The controllers' [`Context`] around `client` (from [`apiserver`]), with `cloud`, `state` and the clock
/// stopped at `now`; everything else is default.
pub(crate) fn context<C>(
    client: Client,
    cloud: C,
    state: ClusterState,
    now: SystemTime,
) -> Context<C> {
    Context {
        events: Events::new(client.clone(), "kerf", None),
        client,
        cloud,
        settings: Default::default(),
        state,
        clock: Arc::new(At(now)),
        metrics: Default::default(),
        backoff: Default::default(),
        catalogs: Default::default(),
        created_here: Default::default(),
        nominations: Default::default(),
        registration_health: Default::default(),
        advice_catalog: AdviceCatalog::new(|| Err("no catalog in unit tests".to_owned())),
        buffer_pods: Default::default(),
    }
}

/// `karpenter_nodeclaims_created_total` for `reason` and `nodepool`, as the controllers count it.
pub(crate) fn nodeclaims_created<C>(ctx: &Context<C>, nodepool: &str, reason: &str) -> u64 {
    ctx.metrics
        .provisioning
        .nodeclaims_created
        .get_or_create(&super::metrics::CreatedLabels {
            reason: reason.into(),
            nodepool: nodepool.into(),
            min_values_relaxed: "false".into(),
        })
        .get()
}

/// A NodePool `name` (uid `pool-uid`) of amd64 nodes of the `default` EC2NodeClass, for tests that need one.
pub(crate) fn node_pool(name: &str) -> crate::api::nodepool::NodePool {
    let mut pool = kerf_testkit::nodepool(
        name,
        json!({"template": {"spec": {"requirements": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}}}),
    );
    pool.metadata.uid = Some("pool-uid".to_owned());
    pool
}

mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    /// The kit itself: a scripted answer reaches the code, and the request's parts reach the checks.
    #[tokio::test]
    async fn requests_are_checked_and_answered_in_order() {
        let (client, mut server) = apiserver();
        let api: ::kube::Api<ConfigMap> = ::kube::Api::namespaced(client, "ns");
        let script = vec![
            Exchange::get("/api/v1/namespaces/ns/configmaps/a")
                .answer(200, json!({"metadata": {"name": "a"}, "data": {"k": "v"}})),
            Exchange::get("/api/v1/namespaces/ns/configmaps/b").fail(404, "NotFound"),
            Exchange::get("/api/v1/namespaces/ns/configmaps")
                .query("&labelSelector=app%3Dweb")
                .answer(200, json!({"metadata": {}, "items": []})),
        ];
        let listed = ::kube::api::ListParams::default().labels("app=web");
        let (a, b, list) = server
            .serve(script, async {
                (
                    api.get("a").await,
                    api.get_opt("b").await,
                    api.list(&listed).await,
                )
            })
            .await;
        assert!(list.expect("a list").items.is_empty());
        let data = a.expect("a").data.unwrap_or_default();
        assert_eq!(data.get("k").map(String::as_str), Some("v"));
        assert!(b.expect("no error").is_none());
    }

    #[tokio::test]
    #[should_panic(expected = "was never made")]
    async fn a_missing_request_fails_the_test() {
        let (_client, mut server) = apiserver();
        server
            .serve(vec![Exchange::get("/api/v1/nodes/n")], async {})
            .await;
    }

    #[tokio::test]
    #[should_panic(expected = "expected GET /api/v1/nodes/n, got DELETE /api/v1/nodes/n")]
    async fn an_unexpected_request_fails_the_test() {
        let (client, mut server) = apiserver();
        let nodes: ::kube::Api<k8s_openapi::api::core::v1::Node> = ::kube::Api::all(client);
        let script = vec![Exchange::get("/api/v1/nodes/n")];
        let _ = server
            .serve(script, nodes.delete("n", &Default::default()))
            .await;
    }
}

/// Adds to `cloud` a network an EC2NodeClass selecting `tags` resolves in: a subnet per `(id, zone, zone ID)`
/// with `available_ips` each and the security group `sg-1`, both tagged `tags`, and the AL2023 AMI `ami-1`
/// (found by its alias, so untagged).
pub(crate) fn add_network(
    cloud: &SimCloud,
    subnets: &[(&str, &str, &str)],
    available_ips: i64,
    tags: &BTreeMap<String, String>,
) {
    for (id, zone, zone_id) in subnets {
        cloud.add_subnet(SimSubnet {
            subnet: Subnet {
                id: (*id).into(),
                zone: (*zone).into(),
                zone_id: Some((*zone_id).into()),
            },
            available_ips,
            tags: tags.clone(),
        });
    }
    cloud.add_security_group(SimSecurityGroup {
        group: SecurityGroup {
            id: "sg-1".into(),
            name: None,
        },
        tags: tags.clone(),
    });
    cloud.add_ami(SimAmi {
        ami: ResolvedAmi {
            id: "ami-1".into(),
            name: None,
            architecture: "x86_64".into(),
            creation_date: None,
            variants: Vec::new(),
            deprecated: false,
        },
        alias_family: Some("al2023".into()),
        tags: BTreeMap::new(),
    });
}
