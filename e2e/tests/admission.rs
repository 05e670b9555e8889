//! A user's first hour, on the real control plane: `helm install` the chart pointing its webhooks at a
//! `kerf webhook` running on this machine, `kubectl apply` bad NodePools and EC2NodeClasses and see them refused
//! with kerf's message, apply good ones and see their defaults, then kill the webhook and see NodePools fail
//! closed while pods keep being created.

use anyhow::{ensure, Context, Result};
use kerf_e2e::kerf::{free_port, start_kerf, Process};
use kerf_e2e::{poll, Cluster};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// A new CA and serving certificate for 127.0.0.1.
fn certificate() -> Result<kerf_certs::SelfSigned> {
    Ok(kerf_certs::SelfSigned::generate(
        ["127.0.0.1"],
        SystemTime::now(),
        kerf_certs::DEFAULT_VALIDITY,
    )?)
}

/// Starts `kerf webhook` on `port` serving `certs`, written to `dir`.
async fn start_webhook(dir: &Path, port: u16, certs: &kerf_certs::SelfSigned) -> Result<Process> {
    let paths = certs.write_files(dir)?;
    let args = [
        "webhook".to_owned(),
        format!("--bind=127.0.0.1:{port}"),
        format!("--tls-cert-file={}", paths.cert.display()),
        format!("--tls-private-key-file={}", paths.key.display()),
        // Reloads quickly, for the rotation below.
        "--tls-reload-interval=1s".to_owned(),
        // NodePool and EC2NodeClass admission only; pod advice is tested in chart.rs.
        "--pod-advice=false".to_owned(),
    ];
    start_kerf(&args, &[], &dir.join("kerf-webhook.log"), port).await
}

/// The serial number of the certificate `openssl` reads from `pem`, or from the server on 127.0.0.1:`port`.
async fn serial(pem: Option<&Path>, port: u16) -> Result<String> {
    let script = match pem {
        Some(pem) => format!("openssl x509 -noout -serial -in '{}'", pem.display()),
        None => format!(
            "openssl s_client -connect 127.0.0.1:{port} </dev/null 2>/dev/null | openssl x509 -noout -serial"
        ),
    };
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::process::Command::new("bash")
            .args(["-c", &script])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .context("openssl did not answer within 20 s")??;
    ensure!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn nodepool(name: &str, spec: Value) -> Value {
    let mut np = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
        "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}}}});
    merge(&mut np["spec"], spec);
    np
}

fn nodeclass(name: &str, spec: Value) -> Value {
    let mut nc = json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name},
        "spec": {"role": "KarpenterNodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                 "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "e2e"}}],
                 "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "e2e"}}]}});
    merge(&mut nc["spec"], spec);
    nc
}

fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(&k);
                } else {
                    merge(t.entry(k).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p,
    }
}

/// (object, a fragment of the message kubectl must print)
fn mistakes() -> Vec<(Value, &'static str)> {
    let req = |r: Value| json!({"template": {"spec": {"requirements": [r]}}});
    vec![
        (
            nodepool(
                "bad-cron",
                json!({"disruption": {"budgets": [{"nodes": "0", "schedule": "0 0 * * sat-sun", "duration": "48h"}]}}),
            ),
            "invalid cron, beginning of range (6) beyond end of range (0): sat-sun",
        ),
        (
            nodepool(
                "bad-cron-dow",
                json!({"disruption": {"budgets": [{"nodes": "0", "schedule": "0 0 * * 7", "duration": "1h"}]}}),
            ),
            "invalid cron, end of range (7) above maximum (6): 7",
        ),
        (
            nodepool(
                "bad-capacity-type",
                req(
                    json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spots"]}),
                ),
            ),
            "no valid values found in [spots] for karpenter.sh/capacity-type",
        ),
        (
            nodepool(
                "bad-domain",
                req(json!({"key": "karpenter.sh/team", "operator": "Exists"})),
            ),
            r#"label domain "karpenter.sh" is restricted"#,
        ),
        (
            nodepool(
                "bad-hostname",
                req(json!({"key": "kubernetes.io/hostname", "operator": "Exists"})),
            ),
            r#"label "kubernetes.io/hostname" is restricted"#,
        ),
        (
            nodepool(
                "bad-in",
                req(json!({"key": "team", "operator": "In", "values": []})),
            ),
            "requirements with operator 'In' must have a value defined",
        ),
        (
            nodepool(
                "bad-gt",
                req(
                    json!({"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["a"]}),
                ),
            ),
            "must have a single positive integer value",
        ),
        (
            nodepool(
                "bad-minvalues",
                req(json!({"key": "team", "operator": "In", "values": ["a"], "minValues": 2})),
            ),
            "requirements with 'minValues' must have at least that many values",
        ),
        (
            nodepool(
                "bad-policy",
                json!({"disruption": {"consolidationPolicy": "WhenUnderutilized"}}),
            ),
            "WhenUnderutilized",
        ),
        (
            nodepool("bad-weight", json!({"weight": 0})),
            "should be greater than or equal to 1",
        ),
        (
            nodepool(
                "bad-budget-nodes",
                json!({"disruption": {"budgets": [{"nodes": "101%"}]}}),
            ),
            "nodes in body should match '^((100|[0-9]{1,2})%|[0-9]+)$'",
        ),
        (
            nodepool(
                "bad-schedule-alone",
                json!({"disruption": {"budgets": [{"nodes": "0", "schedule": "@daily"}]}}),
            ),
            "'schedule' must be set with 'duration'",
        ),
        (
            nodepool(
                "bad-expire",
                json!({"template": {"spec": {"expireAfter": "1d"}}}),
            ),
            "expireAfter",
        ),
        (
            nodepool(
                "bad-taints",
                json!({"template": {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}], "startupTaints": [{"key": "a", "effect": "NoSchedule"}]}}}),
            ),
            "duplicate taint Key/Effect pair a=NoSchedule",
        ),
        (
            nodepool(
                "bad-group",
                json!({"template": {"spec": {"nodeClassRef": {"group": ""}}}}),
            ),
            "group may not be empty",
        ),
        (
            nodepool("bad-static", json!({"replicas": 2, "weight": 5})),
            "'weight' is not supported on static NodePools",
        ),
        (
            nodeclass(
                "bad-subnet-id",
                json!({"subnetSelectorTerms": [{"id": "xsubnet-1"}]}),
            ),
            "id in body should match '^subnet-[0-9a-z]+$'",
        ),
        (
            nodeclass("bad-role", json!({"role": null})),
            "must specify exactly one of ['role', 'instanceProfile']",
        ),
        (
            nodeclass(
                "bad-alias",
                json!({"amiSelectorTerms": [{"alias": "ubuntu@latest"}]}),
            ),
            "family is not supported",
        ),
        (
            nodeclass(
                "bad-tags",
                json!({"tags": {"kubernetes.io/cluster/x": "owned"}}),
            ),
            "tag contains a restricted tag matching kubernetes.io/cluster/",
        ),
        (
            nodeclass(
                "bad-volume",
                json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Mi"}}]}),
            ),
            "volumeSize",
        ),
        (
            nodeclass("bad-empty-subnets", json!({"subnetSelectorTerms": []})),
            "subnetSelectorTerms cannot be empty",
        ),
        (
            json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
                   "metadata": {"name": "bad-overlay-price"},
                   "spec": {"requirements": [], "price": "1", "priceAdjustment": "+1"}}),
            "cannot set both 'price' and 'priceAdjustment'",
        ),
        (
            json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
                   "metadata": {"name": "bad-overlay-capacity"},
                   "spec": {"requirements": [], "capacity": {"cpu": "1"}}}),
            "invalid resource restricted",
        ),
        (
            json!({"apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
                   "metadata": {"name": "bad-buffer", "namespace": "default"},
                   "spec": {"podTemplateRef": {"name": "t"}}}),
            "If podTemplateRef is set, replicas or limits must also be set",
        ),
    ]
}

#[tokio::test]
async fn chart_webhooks_refuse_bad_specs_default_good_ones_and_fail_closed() -> Result<()> {
    let Some(cluster) =
        Cluster::start_or_skip("chart_webhooks_refuse_bad_specs_default_good_ones_and_fail_closed")
            .await?
    else {
        return Ok(());
    };
    let port = free_port()?;
    let certs = certificate()?;
    let webhook = start_webhook(cluster.dir(), port, &certs).await?;
    let ca_bundle = certs.ca_bundle_base64();
    cluster
        .helm(&[
            "install",
            "kerf",
            "charts/kerf",
            "--namespace",
            "kerf",
            "--create-namespace",
            "--set",
            &format!("webhook.url=https://127.0.0.1:{port}"),
            "--set",
            &format!("webhook.caBundle={ca_bundle}"),
        ])
        .await?;
    for crd in [
        "nodepools.karpenter.sh",
        "nodeclaims.karpenter.sh",
        "ec2nodeclasses.karpenter.k8s.aws",
        "nodeoverlays.karpenter.sh",
        "capacitybuffers.autoscaling.x-k8s.io",
    ] {
        cluster
            .wait_crd_established(crd, Duration::from_secs(60))
            .await?;
    }

    // Every mistake is refused with kerf's message, and nothing of them is stored.
    let mut failures = Vec::new();
    for (object, expected) in mistakes() {
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let (ok, stderr) = cluster.apply(&object).await?;
        if ok || !stderr.contains(expected) {
            failures.push(format!(
                "{name}: applied={ok}, expected {expected:?} in: {stderr}"
            ));
        }
    }
    ensure!(
        failures.is_empty(),
        "{} mistake(s) not refused as expected:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let stored = cluster
        .kubectl_ok(&[
            "get",
            "nodepools,ec2nodeclasses,nodeoverlays,capacitybuffers",
            "--all-namespaces",
            "-o",
            "name",
        ])
        .await?;
    ensure!(
        stored.trim().is_empty(),
        "refused objects were stored: {stored}"
    );

    // Good objects are stored with their defaults.
    let (ok, stderr) = cluster.apply(&nodepool("default", json!({}))).await?;
    ensure!(ok, "the good NodePool was refused: {stderr}");
    let (ok, stderr) = cluster.apply(&nodeclass("default", json!({}))).await?;
    ensure!(ok, "the good EC2NodeClass was refused: {stderr}");
    let np: Value = serde_json::from_str(
        &cluster
            .kubectl_ok(&["get", "nodepool", "default", "-o", "json"])
            .await?,
    )?;
    ensure!(
        np["spec"]["disruption"]
            == json!({"consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized", "budgets": [{"nodes": "10%"}]}),
        "NodePool defaults: {}",
        np["spec"]
    );
    ensure!(
        np["spec"]["template"]["spec"]["expireAfter"] == "720h",
        "expireAfter: {}",
        np["spec"]
    );
    let nc: Value = serde_json::from_str(
        &cluster
            .kubectl_ok(&["get", "ec2nodeclass", "default", "-o", "json"])
            .await?,
    )?;
    ensure!(
        nc["spec"]["metadataOptions"]["httpTokens"] == "required",
        "EC2NodeClass defaults: {}",
        nc["spec"]
    );

    // With the webhook gone, NodePools fail closed and pods are still created (failurePolicy Ignore).
    drop(webhook);
    let (ok, stderr) = cluster.apply(&nodepool("while-down", json!({}))).await?;
    ensure!(
        !ok && stderr.contains("failed calling webhook"),
        "a NodePool slipped past a dead webhook: {stderr}"
    );
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "while-down", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "pause"}]}});
    let (ok, stderr) = cluster.apply(&pod).await?;
    ensure!(ok, "pod creation must not depend on the webhook: {stderr}");

    // Restarting the webhook restores service.
    let _webhook = start_webhook(cluster.dir(), port, &certs)
        .await
        .context("restart on the same port")?;
    let bad = mistakes().swap_remove(0);
    refused_by_kerf(&cluster, &bad).await?;

    // Rotation without restart: new certificate files from a new CA, the CA bundle updated with helm (what
    // cert-manager's CA injector does). Once kubectl is refused with kerf's message again, the apiserver trusts only
    // the new CA and kerf serves the new certificate; openssl sees its serial.
    let rotated = certificate()?;
    let paths = rotated.write_files(cluster.dir())?;
    cluster
        .helm(&[
            "upgrade",
            "kerf",
            "charts/kerf",
            "--namespace",
            "kerf",
            "--reuse-values",
            "--set",
            &format!("webhook.caBundle={}", rotated.ca_bundle_base64()),
        ])
        .await?;
    let expected = serial(Some(&paths.cert), port).await?;
    poll(
        "kerf to serve the rotated certificate",
        Duration::from_secs(30),
        || async { Ok((serial(None, port).await? == expected).then_some(())) },
    )
    .await?;
    refused_by_kerf(&cluster, &bad).await
}

/// Polls until `kubectl apply` of `bad` fails with kerf's message: while the apiserver and kerf disagree on the
/// certificate, it fails with a TLS error instead.
async fn refused_by_kerf(cluster: &Cluster, (object, expected): &(Value, &str)) -> Result<()> {
    poll(
        "kubectl to be refused by kerf",
        Duration::from_secs(60),
        || async {
            let (ok, stderr) = cluster.apply(object).await?;
            ensure!(!ok, "a bad object was stored: {object}");
            Ok(stderr.contains(expected).then_some(()))
        },
    )
    .await
}
