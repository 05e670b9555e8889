//! Pod evictions through the eviction API, on any server version kerf supports.
//!
//! Three things make kube's own `Api::evict` unusable here (docs/lifecycle.md): the apiserver serves
//! Eviction as `policy/v1` only from 1.22 (1.20 has `policy/v1beta1`, and answers 400 to a v1 body), kube 5
//! sends the delete options under a key the server ignores, and kube's default retry layer retries a
//! PDB-blocked eviction (429) for minutes. So the version is discovered once, the body is built here, and
//! evictions go through a client with retries off: a 429 comes back at once as [`EvictionOutcome::Blocked`]
//! and the drain tries again on its next pass.

use ::kube::{Client, Config};
use serde_json::{json, Value};
use std::time::Duration;

/// How long one eviction request may take.
const EVICTION_TIMEOUT: Duration = Duration::from_secs(10);

/// The message of the apiserver's 500 answer to an eviction of a pod that more than one PodDisruptionBudget
/// selects: no eviction can succeed until one goes, so the drain reports it as it reports a PDB's refusal.
pub const MULTIPLE_PDBS_MESSAGE: &str =
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.";

/// The Eviction API version the server serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionVersion {
    V1,
    V1Beta1,
}

impl EvictionVersion {
    pub fn api_version(self) -> &'static str {
        match self {
            EvictionVersion::V1 => "policy/v1",
            EvictionVersion::V1Beta1 => "policy/v1beta1",
        }
    }

    /// The version the `pods/eviction` entry of the core v1 discovery document names; when it names none
    /// (old servers), `policy/v1` if the server serves that group version, else `v1beta1`.
    pub fn from_discovery(eviction_entry_version: Option<&str>, serves_policy_v1: bool) -> Self {
        match eviction_entry_version {
            Some("v1") => EvictionVersion::V1,
            Some(_) => EvictionVersion::V1Beta1,
            None if serves_policy_v1 => EvictionVersion::V1,
            None => EvictionVersion::V1Beta1,
        }
    }
}

/// What an eviction request came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvictionOutcome {
    /// Accepted: the pod is being deleted.
    Evicted,
    /// The pod is gone already (404), or it is another pod by now (409: the UID precondition failed); `code` is
    /// which (counted apart, as Karpenter counts them).
    Gone { code: u16 },
    /// A PodDisruptionBudget does not allow it now (429); try again later.
    Blocked { message: String },
    /// Anything else; try again later.
    Failed { code: u16, message: String },
}

impl EvictionOutcome {
    /// Maps the server's answer: its HTTP status and (for errors) the `Status` message.
    pub fn from_response(code: u16, message: String) -> Self {
        match code {
            200..=299 => EvictionOutcome::Evicted,
            404 | 409 => EvictionOutcome::Gone { code },
            429 => EvictionOutcome::Blocked { message },
            _ => EvictionOutcome::Failed { code, message },
        }
    }

    /// The status code, as `karpenter_pods_eviction_requests_total{code}` counts it (0: no answer).
    pub fn code(&self) -> u16 {
        match self {
            EvictionOutcome::Evicted => 200,
            EvictionOutcome::Gone { code } => *code,
            EvictionOutcome::Blocked { .. } => 429,
            EvictionOutcome::Failed { code, .. } => *code,
        }
    }
}

/// The Eviction object for a pod, with a UID precondition so that a pod recreated under the same name is
/// not evicted in its place. Both versions take the same shape.
pub fn eviction_body(
    version: EvictionVersion,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
) -> Value {
    let mut body = json!({
        "apiVersion": version.api_version(),
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    });
    if let Some(uid) = uid {
        body["deleteOptions"] = json!({"preconditions": {"uid": uid}});
    }
    body
}

/// Why an evictor could not be built.
#[derive(Debug, thiserror::Error)]
pub enum EvictionError {
    #[error("loading the Kubernetes client configuration: {0}")]
    Config(#[from] ::kube::config::InferConfigError),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] ::kube::Error),
    #[error("discovering the Eviction API version timed out")]
    Timeout,
}

/// Posts evictions with retries off.
#[derive(Clone)]
pub struct Evictor {
    client: Client,
    version: EvictionVersion,
}

impl Evictor {
    /// A client from the same configuration `Client::try_default` reads (in-cluster, or `KUBECONFIG`),
    /// without the retry layer, and the Eviction version the server serves.
    pub async fn connect() -> Result<Evictor, EvictionError> {
        let mut config = Config::infer().await?;
        config.default_retry = false;
        let client = Client::try_from(config)?;
        let version = tokio::time::timeout(EVICTION_TIMEOUT, discover(&client))
            .await
            .map_err(|_| EvictionError::Timeout)??;
        tracing::info!(
            version = version.api_version(),
            "pod evictions use this Eviction version"
        );
        Ok(Evictor { client, version })
    }

    /// An evictor on `client` (in unit tests, a scripted apiserver's) posting Evictions of `version`.
    #[cfg(test)]
    pub(crate) fn new(client: Client, version: EvictionVersion) -> Evictor {
        Evictor { client, version }
    }

    /// Evicts `namespace/name` (UID `uid` when given).
    pub async fn evict(&self, namespace: &str, name: &str, uid: Option<&str>) -> EvictionOutcome {
        let body = eviction_body(self.version, namespace, name, uid);
        let request = http::Request::post(format!(
            "/api/v1/namespaces/{namespace}/pods/{name}/eviction"
        ))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body.to_string().into_bytes());
        let request = match request {
            Ok(request) => request,
            Err(error) => {
                return EvictionOutcome::Failed {
                    code: 0,
                    message: format!("building the request: {error}"),
                }
            }
        };
        let sent =
            tokio::time::timeout(EVICTION_TIMEOUT, self.client.request::<Value>(request)).await;
        match sent {
            Ok(Ok(_)) => EvictionOutcome::Evicted,
            Ok(Err(::kube::Error::Api(status))) => {
                EvictionOutcome::from_response(status.code, status.message.clone())
            }
            Ok(Err(error)) => EvictionOutcome::Failed {
                code: 0,
                message: error.to_string(),
            },
            Err(_) => EvictionOutcome::Failed {
                code: 0,
                message: format!("no answer within {EVICTION_TIMEOUT:?}"),
            },
        }
    }
}

/// Reads the `pods/eviction` entry of the core v1 resources, and whether `policy/v1` is served.
async fn discover(client: &Client) -> Result<EvictionVersion, ::kube::Error> {
    let core = client.list_core_api_resources("v1").await?;
    let entry = core
        .resources
        .iter()
        .find(|r| r.name == "pods/eviction")
        .and_then(|r| r.version.clone());
    let serves_policy_v1 = match entry {
        Some(_) => false,
        None => client
            .list_api_groups()
            .await?
            .groups
            .iter()
            .filter(|g| g.name == "policy")
            .flat_map(|g| &g.versions)
            .any(|v| v.version == "v1"),
    };
    Ok(EvictionVersion::from_discovery(
        entry.as_deref(),
        serves_policy_v1,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_follows_discovery() {
        use EvictionVersion::*;
        assert_eq!(EvictionVersion::from_discovery(Some("v1"), false), V1);
        assert_eq!(
            EvictionVersion::from_discovery(Some("v1beta1"), true),
            V1Beta1
        );
        assert_eq!(EvictionVersion::from_discovery(None, true), V1);
        assert_eq!(EvictionVersion::from_discovery(None, false), V1Beta1);
    }

    #[test]
    fn the_body_names_the_pod_and_its_uid_in_camel_case() {
        let body = eviction_body(EvictionVersion::V1Beta1, "ns", "p", Some("u-1"));
        assert_eq!(
            body,
            json!({
                "apiVersion": "policy/v1beta1",
                "kind": "Eviction",
                "metadata": {"name": "p", "namespace": "ns"},
                "deleteOptions": {"preconditions": {"uid": "u-1"}},
            })
        );
        let body = eviction_body(EvictionVersion::V1, "ns", "p", None);
        assert_eq!(body["apiVersion"], "policy/v1");
        assert!(body.get("deleteOptions").is_none());
    }

    #[test]
    fn answers_map_to_outcomes() {
        assert_eq!(
            EvictionOutcome::from_response(201, String::new()),
            EvictionOutcome::Evicted
        );
        let gone = EvictionOutcome::from_response(404, "not found".into());
        assert_eq!(gone, EvictionOutcome::Gone { code: 404 });
        assert_eq!(gone.code(), 404);
        let replaced = EvictionOutcome::from_response(409, "uid".into());
        assert_eq!(replaced, EvictionOutcome::Gone { code: 409 });
        assert_eq!(replaced.code(), 409, "a 409 is counted as a 409");
        let blocked = EvictionOutcome::from_response(429, "budget".into());
        assert_eq!(
            blocked,
            EvictionOutcome::Blocked {
                message: "budget".into()
            }
        );
        assert_eq!(blocked.code(), 429);
        let failed = EvictionOutcome::from_response(500, "boom".into());
        assert_eq!(failed.code(), 500);
        assert!(matches!(failed, EvictionOutcome::Failed { .. }));
    }

    use crate::controllers::testkit::{apiserver, status, Exchange};

    const EVICTION: &str = "/api/v1/namespaces/ns/pods/p/eviction";

    fn accepted() -> Value {
        json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success", "code": 201})
    }

    /// Karpenter's queue posts an Eviction to the pod's `eviction` subresource with the pod's UID as a
    /// precondition; kerf posts it in the version the server serves, as JSON, and a 201 is an eviction.
    #[tokio::test]
    async fn an_eviction_is_posted_to_the_pod_s_subresource_in_the_served_version() {
        let (client, mut server) = apiserver();
        let v1 = Evictor::new(client.clone(), EvictionVersion::V1);
        let v1beta1 = Evictor::new(client, EvictionVersion::V1Beta1);
        let script = vec![
            Exchange::post(EVICTION)
                .content_type("application/json")
                .body(json!({
                    "apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": "p", "namespace": "ns"},
                    "deleteOptions": {"preconditions": {"uid": "u-1"}},
                }))
                .check(|seen| assert_eq!(seen.query, None, "no dry run, no field manager"))
                .answer(201, accepted()),
            Exchange::post("/api/v1/namespaces/kube-system/pods/q/eviction")
                .body(json!({
                    "apiVersion": "policy/v1beta1", "kind": "Eviction",
                    "metadata": {"name": "q", "namespace": "kube-system"},
                }))
                .answer(201, accepted()),
        ];
        let outcomes = server
            .serve(script, async {
                (
                    v1.evict("ns", "p", Some("u-1")).await,
                    v1beta1.evict("kube-system", "q", None).await,
                )
            })
            .await;
        assert_eq!(
            outcomes,
            (EvictionOutcome::Evicted, EvictionOutcome::Evicted)
        );
    }

    /// Karpenter's eviction "should succeed with no event when the pod is not found" (404) and "... when the pod
    /// UID conflicts" (409), "should return a NodeDrainError event when a PDB is blocking" (429) and "... when two
    /// PDBs refer to the same pod" (500): each answer comes back at once, once (no retry of a 429), with its code
    /// and the server's message.
    #[tokio::test]
    async fn each_answer_comes_back_once_as_its_outcome() {
        let (client, mut server) = apiserver();
        let evictor = Evictor::new(client, EvictionVersion::V1);
        let budget = "Cannot evict pod as it would violate the pod's disruption budget.";
        let script = vec![
            Exchange::post(EVICTION).fail(404, "NotFound"),
            Exchange::post(EVICTION).fail(409, "Conflict"),
            Exchange::post(EVICTION).answer(429, status(429, "TooManyRequests", budget)),
            Exchange::post(EVICTION)
                .answer(500, status(500, "InternalError", MULTIPLE_PDBS_MESSAGE)),
        ];
        let outcomes = server
            .serve(script, async {
                let mut outcomes = Vec::new();
                for _ in 0..4 {
                    outcomes.push(evictor.evict("ns", "p", Some("u-1")).await);
                }
                outcomes
            })
            .await;
        assert_eq!(
            outcomes,
            [
                EvictionOutcome::Gone { code: 404 },
                EvictionOutcome::Gone { code: 409 },
                EvictionOutcome::Blocked {
                    message: budget.into()
                },
                EvictionOutcome::Failed {
                    code: 500,
                    message: MULTIPLE_PDBS_MESSAGE.into()
                },
            ]
        );
    }

    fn core_resources(eviction_version: Option<&str>) -> Value {
        let mut eviction = json!({"name": "pods/eviction", "singularName": "", "namespaced": true,
                                  "group": "policy", "kind": "Eviction", "verbs": ["create"]});
        if let Some(version) = eviction_version {
            eviction["version"] = json!(version);
        }
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": [
            {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod", "verbs": ["get"]},
            eviction,
        ]})
    }

    fn groups(policy_versions: &[&str]) -> Value {
        let versions: Vec<Value> = policy_versions
            .iter()
            .map(|v| json!({"groupVersion": format!("policy/{v}"), "version": v}))
            .collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}]},
            {"name": "policy", "versions": versions},
        ]})
    }

    /// The version comes from the core resources' `pods/eviction` entry; an old server's entry names none, and
    /// then the `policy` group's versions decide (1.20 serves `policy/v1beta1` only).
    #[tokio::test]
    async fn the_version_is_discovered_from_the_server() {
        let (client, mut server) = apiserver();
        let script = vec![
            Exchange::get("/api/v1").answer(200, core_resources(Some("v1"))),
            Exchange::get("/api/v1").answer(200, core_resources(None)),
            Exchange::get("/apis").answer(200, groups(&["v1beta1"])),
            Exchange::get("/api/v1").answer(200, core_resources(None)),
            Exchange::get("/apis").answer(200, groups(&["v1", "v1beta1"])),
        ];
        let found = server
            .serve(script, async {
                let mut found = Vec::new();
                for _ in 0..3 {
                    found.push(discover(&client).await.expect("discovered"));
                }
                found
            })
            .await;
        use EvictionVersion::*;
        assert_eq!(found, [V1, V1Beta1, V1]);
    }
}
