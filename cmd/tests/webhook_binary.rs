//! `kerf webhook` as a user runs it: the real binary on 127.0.0.1 with a generated certificate, driven with
//! AdmissionReview requests over HTTPS.

use base64::Engine;
use reqwest::{Certificate, Client, StatusCode};
use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// The webhook process; killed when the test ends, whatever happens.
struct Webhook {
    child: Child,
    base: String,
    client: Client,
    _dir: tempfile::TempDir,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("address").port()
}

/// `kerf webhook` without a cluster (no pod advice), as for installs that only admit NodePools.
async fn start() -> Webhook {
    start_with(&["--pod-advice=false"], &[]).await
}

/// `kerf webhook` with extra arguments and environment.
async fn start_with(args: &[&str], env: &[(&str, &std::path::Path)]) -> Webhook {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = kerf_certs::SelfSigned::generate(
        ["127.0.0.1"],
        SystemTime::now(),
        kerf_certs::DEFAULT_VALIDITY,
    )
    .expect("certificates");
    let paths = certs.write_files(dir.path()).expect("write certificates");
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["webhook", "--bind", &format!("127.0.0.1:{port}")])
        .arg("--tls-cert-file")
        .arg(&paths.cert)
        .arg("--tls-private-key-file")
        .arg(&paths.key)
        .args(args)
        .env_remove("KUBECONFIG")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start kerf webhook");
    let ca = Certificate::from_pem(certs.ca_cert_pem.as_bytes()).expect("ca");
    let client = Client::builder()
        .tls_certs_only([ca])
        // A connection the server closed after refusing an oversized body must not be reused.
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let webhook = Webhook {
        child,
        base: format!("https://127.0.0.1:{port}"),
        client,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match webhook
            .client
            .get(format!("{}/healthz", webhook.base))
            .send()
            .await
        {
            Ok(r) if r.status() == StatusCode::OK => return webhook,
            _ if Instant::now() > deadline => {
                panic!("kerf webhook did not become healthy within 20 s")
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

impl Webhook {
    async fn get(&self, path: &str) -> StatusCode {
        self.client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("request")
            .status()
    }

    async fn post(&self, path: &str, body: impl Into<reqwest::Body>) -> (StatusCode, String) {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request");
        let status = response.status();
        (status, response.text().await.expect("body"))
    }

    /// Asserts that a good NodePool passes validation.
    async fn allows_a_nodepool(&self) {
        let request = review("karpenter.sh", "NodePool", "CREATE", &nodepool(), None);
        let response = self.review("/validate", &request).await;
        assert_eq!(response["allowed"], true, "{response}");
    }

    async fn review(&self, path: &str, review: &Value) -> Value {
        let (status, body) = self.post(path, review.to_string()).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let answer: Value = serde_json::from_str(&body).expect("JSON answer");
        answer["response"].clone()
    }
}

fn review(group: &str, kind: &str, operation: &str, object: &Value, old: Option<&Value>) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "5e1b9d3c-0000-4000-8000-000000000001",
            "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": group, "version": "v1", "resource": format!("{}s", kind.to_lowercase())},
            "name": object["metadata"]["name"],
            "operation": operation,
            "userInfo": {"username": "admin"},
            "object": object,
            "oldObject": old,
        }
    })
}

fn nodepool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default", "creationTimestamp": null},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]
        }}}
    })
}

fn apply_patch(object: &Value, response: &Value) -> Value {
    assert_eq!(response["patchType"], "JSONPatch");
    let raw = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().expect("patch"))
        .expect("base64");
    let patch: json_patch::Patch = serde_json::from_slice(&raw).expect("a JSON Patch");
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).expect("patch applies");
    patched
}

#[tokio::test]
async fn defaults_validates_and_refuses_over_https() {
    let webhook = start().await;

    // Defaulting: the patch gives the defaulted object.
    let np = nodepool();
    let response = webhook
        .review(
            "/mutate",
            &review("karpenter.sh", "NodePool", "CREATE", &np, None),
        )
        .await;
    assert_eq!(response["allowed"], true);
    let patched = apply_patch(&np, &response);
    assert_eq!(
        patched["spec"]["disruption"],
        json!({"consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized", "budgets": [{"nodes": "10%"}]})
    );
    assert_eq!(patched["spec"]["template"]["spec"]["expireAfter"], "720h");

    // Validation: accepted, and refused with the apiserver's message and one cause per field.
    let response = webhook
        .review(
            "/validate",
            &review("karpenter.sh", "NodePool", "CREATE", &patched, None),
        )
        .await;
    assert_eq!(response["allowed"], true, "{response}");
    let mut bad = patched.clone();
    bad["spec"]["weight"] = json!(0);
    bad["spec"]["disruption"]["budgets"] =
        json!([{"nodes": "0", "schedule": "0 0 * * sat-sun", "duration": "48h"}]);
    let response = webhook
        .review(
            "/validate",
            &review("karpenter.sh", "NodePool", "CREATE", &bad, None),
        )
        .await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 422);
    assert_eq!(response["status"]["reason"], "Invalid");
    assert_eq!(
        response["status"]["message"],
        r#"NodePool.karpenter.sh "default" is invalid: [spec.weight: Invalid value: 0: spec.weight in body should be greater than or equal to 1, spec.disruption.budgets[0].schedule: Invalid value: "0 0 * * sat-sun": invalid cron, beginning of range (6) beyond end of range (0): sat-sun]"#
    );
    let causes: Vec<&str> = response["status"]["details"]["causes"]
        .as_array()
        .expect("causes")
        .iter()
        .filter_map(|c| c["field"].as_str())
        .collect();
    assert_eq!(
        causes,
        ["spec.weight", "spec.disruption.budgets[0].schedule"]
    );

    // UPDATE ratcheting: a legacy object with a bad label can still be relabelled; a transition cannot ratchet.
    let mut legacy = patched.clone();
    legacy["spec"]["template"]["metadata"] = json!({"labels": {"karpenter.sh/custom": "x"}});
    let mut relabelled = legacy.clone();
    relabelled["metadata"]["labels"] = json!({"owner": "me"});
    let response = webhook
        .review(
            "/validate",
            &review(
                "karpenter.sh",
                "NodePool",
                "UPDATE",
                &relabelled,
                Some(&legacy),
            ),
        )
        .await;
    assert_eq!(response["allowed"], true, "{response}");
    let response = webhook
        .review(
            "/validate",
            &review("karpenter.sh", "NodePool", "CREATE", &relabelled, None),
        )
        .await;
    assert_eq!(response["allowed"], false);
    let mut regrouped = patched.clone();
    regrouped["spec"]["template"]["spec"]["nodeClassRef"]["group"] = json!("example.com");
    let response = webhook
        .review(
            "/validate",
            &review(
                "karpenter.sh",
                "NodePool",
                "UPDATE",
                &regrouped,
                Some(&patched),
            ),
        )
        .await;
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .ends_with("nodeClassRef.group is immutable"),
        "{response}"
    );

    // A spot-only pool narrowed to one size of one family is admitted with a warning (embedded catalog).
    let mut narrow = patched.clone();
    narrow["spec"]["template"]["spec"]["requirements"] = json!([
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.xlarge"]}]);
    let response = webhook
        .review(
            "/validate",
            &review("karpenter.sh", "NodePool", "CREATE", &narrow, None),
        )
        .await;
    assert_eq!(response["allowed"], true, "{response}");
    let warnings = response["warnings"].to_string();
    assert!(
        warnings.contains("this spot-only NodePool allows 2 instance types"),
        "{warnings}"
    );

    // EC2NodeClass defaulting through the same server.
    let nc = json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
        "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}], "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}]}});
    let response = webhook
        .review(
            "/mutate",
            &review("karpenter.k8s.aws", "EC2NodeClass", "CREATE", &nc, None),
        )
        .await;
    assert_eq!(
        apply_patch(&nc, &response)["spec"]["metadataOptions"]["httpTokens"],
        "required"
    );

    // Kinds kerf does not handle are allowed unchanged.
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
    let response = webhook
        .review("/validate", &review("", "Pod", "CREATE", &pod, None))
        .await;
    assert_eq!(response["allowed"], true);
}

#[tokio::test]
async fn malformed_and_oversized_requests_get_clear_errors() {
    let webhook = start().await;
    let (status, body) = webhook.post("/validate", "{not json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = webhook
        .post(
            "/validate",
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).to_string(),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let mut huge = nodepool();
    huge["metadata"]["annotations"] = json!({"padding": "x".repeat(4 * 1024 * 1024)});
    // The server answers 413 as soon as the body passes 3 MiB and closes the connection; over HTTP/1.1 a client
    // still writing the rest may see the close before it reads the answer. Either way the body is refused.
    let oversized = webhook
        .client
        .post(format!("{}/validate", webhook.base))
        .header("content-type", "application/json")
        .body(review("karpenter.sh", "NodePool", "CREATE", &huge, None).to_string())
        .send()
        .await;
    match oversized {
        Ok(response) => assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE),
        Err(err) => assert!(
            err.is_request(),
            "the upload was cut off, not refused otherwise: {err}"
        ),
    }
    // The server still answers after bad requests.
    webhook.allows_a_nodepool().await;
}

/// A kubeconfig for an apiserver that is not there: the watch of NodePools never syncs.
fn unreachable_cluster(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"https://127.0.0.1:{}\", insecure-skip-tls-verify: true}}}}]\nusers: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n",
        free_port()
    );
    std::fs::write(&path, kubeconfig).expect("write kubeconfig");
    path
}

#[tokio::test]
async fn pods_are_admitted_unchanged_until_nodepools_have_synced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = unreachable_cluster(dir.path());
    let webhook = start_with(&[], &[("KUBECONFIG", kubeconfig.as_path())]).await;
    // Not ready: the NodePools could not be listed, so pods would get no advice.
    assert_eq!(
        webhook.get("/readyz").await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "inflate-"},
        "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]}});
    let mut request = review("", "Pod", "CREATE", &pod, None);
    // The apiserver sends no name for a pod created from generateName.
    request["request"]["name"] = json!("");
    request["request"]["namespace"] = json!("apps");
    let response = webhook.review("/mutate", &request).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert!(response.get("patch").is_none(), "{response}");
    // NodePool admission does not wait for the cluster.
    webhook.allows_a_nodepool().await;
}

#[tokio::test]
async fn a_replica_that_cannot_sync_becomes_ready_after_the_grace_period() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = unreachable_cluster(dir.path());
    let webhook = start_with(
        &["--pod-advice-ready-grace=1s"],
        &[("KUBECONFIG", kubeconfig.as_path())],
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while webhook.get("/readyz").await != StatusCode::OK {
        assert!(
            Instant::now() < deadline,
            "not ready 20 s after a 1 s grace period"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn without_pod_advice_the_webhook_is_ready_at_once() {
    let webhook = start().await;
    assert_eq!(webhook.get("/readyz").await, StatusCode::OK);
}
