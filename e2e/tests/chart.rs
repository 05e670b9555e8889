//! The chart's two certificate modes and pod advice, on the real control plane.
//!
//! 1. With cert-manager (the default), `helm template` renders an Issuer, a Certificate and the `inject-ca-from`
//!    annotations, and the apiserver accepts every other rendered object (`kubectl apply --dry-run=server`).
//! 2. Self-signed mode: `helm install` with `certManager.enabled=false`. No kubelet runs pods here, so the webhook
//!    Deployment's container runs as a local process instead: the test takes its arguments and environment from the
//!    chart's own rendering, changes only the listen address and the file paths (and adds 127.0.0.1 to the
//!    certificate's names), and runs it with the chart ServiceAccount's token, so the chart's RBAC is what it gets.
//!    The install points the webhook configurations at that process with `webhook.url`. kerf creates the Secret,
//!    injects the CA into both configurations, and kubectl is then refused through it; a restart reuses the Secret.
//! 3. Pod advice: the getting-started steps (docs/getting-started.md): `kubectl apply -f examples/inflate.yaml`, the
//!    pods the real controller-manager creates carry kerf's annotations naming the NodePool, and after the
//!    Deployment asks for arm64 the new pods say why no NodePool fits.
//! 4. Feature gates: `settings.featureGates` (Karpenter's camelCase keys and defaults) renders as the controller's
//!    `FEATURE_GATES`, which `kerf controller` reads: a gate kerf implements starts it, one it lacks stops it with a
//!    message; the values schema refuses a gate it does not know.

use anyhow::{anyhow, ensure, Context, Result};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use kerf_e2e::kerf::{free_port, kerf_binary, start_kerf, Process};
use kerf_e2e::{poll, repo_root, yaml_documents, Cluster, K8S_VERSION};
use kube::api::{Api, ListParams};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

const RELEASE: &str = "kerf";
const NAMESPACE: &str = "kerf";
const SECRET: &str = "kerf-webhook-tls";
const SUMMARY: &str = "kerf.sh/instance-summary";
const REQUIREMENTS: &str = "kerf.sh/instance-requirements";

#[tokio::test]
async fn chart_cert_modes_and_pod_advice() -> Result<()> {
    let Some(cluster) = Cluster::start_or_skip("chart_cert_modes_and_pod_advice").await? else {
        return Ok(());
    };
    cluster
        .kubectl_ok(&["create", "namespace", NAMESPACE])
        .await?;
    cert_manager_rendering_is_accepted(&cluster).await?;
    observability_renders(&cluster).await?;
    feature_gates_reach_the_controller(&cluster).await?;
    let _webhook = self_signed_install(&cluster).await?;
    pods_get_advice(&cluster).await
}

/// `helm template` for this cluster's version, as JSON documents.
async fn render(cluster: &Cluster, name: &str, values: &[&str]) -> Result<Vec<Value>> {
    let mut args = vec![
        "template",
        RELEASE,
        "charts/kerf",
        "--namespace",
        NAMESPACE,
        "--kube-version",
        K8S_VERSION.trim_start_matches('v'),
    ];
    for value in values {
        args.extend(["--set", value]);
    }
    let rendered = cluster.helm(&args).await?;
    let file = cluster.dir().join(format!("{name}.yaml"));
    std::fs::write(&file, rendered)?;
    yaml_documents(&file)
}

fn of_kind<'a>(documents: &'a [Value], kind: &str) -> Result<&'a Value> {
    documents
        .iter()
        .find(|d| d["kind"] == kind)
        .ok_or_else(|| anyhow!("no {kind} rendered"))
}

/// The rendered `kind` named `name`.
fn named<'a>(documents: &'a [Value], kind: &str, name: &str) -> Result<&'a Value> {
    documents
        .iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .ok_or_else(|| anyhow!("no {kind} {name} rendered"))
}

/// The controller's Deployment and RBAC as rendered: two replicas with leader election, the pod's name and
/// namespace from the downward API, probes on its health port, the hardening of the webhook's pods, and the
/// Lease its Role names.
fn controller_rendering(documents: &[Value]) -> Result<()> {
    let deployment = named(documents, "Deployment", "kerf-controller")?;
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    ensure!(
        deployment["spec"]["replicas"] == 2,
        "replicas: {deployment}"
    );
    ensure!(
        container["args"].as_array().is_some_and(
            |a| a.contains(&json!("controller")) && a.contains(&json!("--leader-elect=true"))
        ),
        "args: {container}"
    );
    for (name, path) in [
        ("POD_NAME", "metadata.name"),
        ("KERF_NAMESPACE", "metadata.namespace"),
    ] {
        let variable = container["env"]
            .as_array()
            .and_then(|env| env.iter().find(|v| v["name"] == name))
            .ok_or_else(|| anyhow!("no {name} in {container}"))?;
        ensure!(
            variable["valueFrom"]["fieldRef"]["fieldPath"] == path,
            "{name}: {variable}"
        );
    }
    ensure!(
        container["livenessProbe"]["httpGet"]["path"] == "/healthz"
            && container["readinessProbe"]["httpGet"]["path"] == "/readyz",
        "probes: {container}"
    );
    let webhook = named(documents, "Deployment", "kerf-webhook")?;
    let webhook_pod = &webhook["spec"]["template"]["spec"];
    ensure!(
        pod["securityContext"] == webhook_pod["securityContext"]
            && container["securityContext"] == webhook_pod["containers"][0]["securityContext"]
            && pod["priorityClassName"] == "system-cluster-critical",
        "hardening differs from the webhook's: {pod}"
    );
    let role = named(documents, "Role", "kerf-controller")?;
    ensure!(
        role["rules"][0]["resourceNames"] == json!(["kerf-leader-election"]),
        "Role: {role}"
    );
    named(documents, "ClusterRole", "kerf-controller")?;
    named(documents, "PodDisruptionBudget", "kerf-controller")?;
    Ok(())
}

/// The controller's `FEATURE_GATES` as the chart renders it with `values`.
async fn rendered_gates(cluster: &Cluster, values: &[&str]) -> Result<String> {
    let documents = render(cluster, "feature-gates", values).await?;
    let container = &named(&documents, "Deployment", "kerf-controller")?["spec"]["template"]
        ["spec"]["containers"][0];
    container["env"]
        .as_array()
        .and_then(|env| env.iter().find(|v| v["name"] == "FEATURE_GATES"))
        .and_then(|v| v["value"].as_str())
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("no FEATURE_GATES in {container}"))
}

/// `kerf controller` started with the rendered `FEATURE_GATES` and no cluster to reach: how it stops, and its
/// stderr. A gate it accepts gets it as far as connecting to the Kubernetes API.
async fn controller_with_gates(gates: &str) -> Result<(Option<i32>, String)> {
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(kerf_binary()?)
            .args([
                "controller",
                "--cluster-name=c",
                "--cluster-endpoint=https://k",
                "--kubernetes-version=1.30",
            ])
            .env("FEATURE_GATES", gates)
            .envs([
                ("AWS_REGION", "us-west-2"),
                ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
                ("AWS_ACCESS_KEY_ID", "unused"),
                ("AWS_SECRET_ACCESS_KEY", "unused"),
            ])
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .context("kerf controller did not stop")??;
    Ok((
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

async fn feature_gates_reach_the_controller(cluster: &Cluster) -> Result<()> {
    let defaults = rendered_gates(cluster, &[]).await?;
    ensure!(
        defaults
            == "CapacityBuffer=false,NodeOverlay=false,NodeRepair=false,ReservedCapacity=true,\
                SpotToSpotConsolidation=false,StaticCapacity=false",
        "defaults: {defaults}"
    );
    let spot = rendered_gates(
        cluster,
        &["settings.featureGates.spotToSpotConsolidation=true"],
    )
    .await?;
    ensure!(spot.contains("SpotToSpotConsolidation=true"), "{spot}");
    let (code, stderr) = controller_with_gates(&spot).await?;
    ensure!(
        code == Some(1) && stderr.contains("connecting to the Kubernetes API"),
        "the gates were not accepted ({code:?}): {stderr}"
    );
    let repair = rendered_gates(cluster, &["settings.featureGates.nodeRepair=true"]).await?;
    ensure!(repair.contains("NodeRepair=true"), "{repair}");
    let (code, stderr) = controller_with_gates(&repair).await?;
    ensure!(
        code == Some(1) && stderr.contains("connecting to the Kubernetes API"),
        "NodeRepair=true was not accepted ({code:?}): {stderr}"
    );
    let buffer = rendered_gates(cluster, &["settings.featureGates.capacityBuffer=true"]).await?;
    let (code, stderr) = controller_with_gates(&buffer).await?;
    ensure!(
        code == Some(1) && stderr.contains("connecting to the Kubernetes API"),
        "CapacityBuffer=true was not accepted ({code:?}): {stderr}"
    );
    let unknown = render(
        cluster,
        "feature-gates",
        &["settings.featureGates.hello=true"],
    )
    .await;
    ensure!(
        unknown
            .as_ref()
            .is_err_and(|e| format!("{e:#}").contains("hello")),
        "an unknown gate rendered: {unknown:?}"
    );
    Ok(())
}

/// With `serviceMonitor`, `prometheusRule` and `dashboard` on: a ServiceMonitor for each of the webhook and the
/// controller, the PrometheusRule's alerts with the values' thresholds, and the dashboard's JSON in a ConfigMap
/// the Grafana sidecar finds by label. (The PrometheusRule and ServiceMonitor CRDs are not on the test
/// apiserver; `tests/chart_observability.rs` checks that every metric the rules and the dashboard read exists.)
async fn observability_renders(cluster: &Cluster) -> Result<()> {
    let documents = render(
        cluster,
        "observability",
        &[
            "serviceMonitor.enabled=true",
            "prometheusRule.enabled=true",
            "prometheusRule.unschedulableFor=30m",
            "dashboard.enabled=true",
        ],
    )
    .await?;
    for name in ["kerf-webhook", "kerf-controller"] {
        named(&documents, "ServiceMonitor", name)?;
    }
    let rule = named(&documents, "PrometheusRule", "kerf")?;
    let rules = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .context("rules")?;
    ensure!(rules.len() >= 8, "alerts: {rule}");
    let unschedulable = rules
        .iter()
        .find(|r| r["alert"] == "KerfPodsUnschedulable")
        .context("KerfPodsUnschedulable")?;
    ensure!(unschedulable["for"] == "30m", "{unschedulable}");
    let dashboard = named(&documents, "ConfigMap", "kerf-dashboard")?;
    ensure!(
        dashboard["metadata"]["labels"]["grafana_dashboard"] == "1",
        "{dashboard}"
    );
    let json: Value = serde_json::from_str(
        dashboard["data"]["kerf.json"]
            .as_str()
            .context("kerf.json")?,
    )?;
    ensure!(
        json["panels"].as_array().is_some_and(|p| p.len() >= 10),
        "dashboard: {json}"
    );
    Ok(())
}

async fn cert_manager_rendering_is_accepted(cluster: &Cluster) -> Result<()> {
    let documents = render(cluster, "cert-manager", &[]).await?;
    controller_rendering(&documents)?;
    let issuer = of_kind(&documents, "Issuer")?;
    ensure!(
        issuer["spec"]["selfSigned"] == json!({}),
        "Issuer: {issuer}"
    );
    let certificate = of_kind(&documents, "Certificate")?;
    ensure!(
        certificate["spec"]["secretName"] == SECRET
            && certificate["spec"]["dnsNames"]
                == json!([
                    "kerf-webhook.kerf.svc",
                    "kerf-webhook.kerf.svc.cluster.local"
                ])
            && certificate["spec"]["issuerRef"]["name"] == issuer["metadata"]["name"],
        "Certificate: {certificate}"
    );
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let annotation = &of_kind(&documents, kind)?["metadata"]["annotations"]
            ["cert-manager.io/inject-ca-from"];
        ensure!(
            annotation == "kerf/kerf-webhook",
            "{kind} inject-ca-from: {annotation}"
        );
    }
    // The apiserver has no cert-manager; everything else must be accepted as rendered.
    let others: Vec<&Value> = documents
        .iter()
        .filter(|d| {
            !d["apiVersion"]
                .as_str()
                .unwrap_or_default()
                .starts_with("cert-manager.io/")
        })
        .collect();
    let file = cluster.dir().join("without-cert-manager.json");
    std::fs::write(
        &file,
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": others}))?,
    )?;
    let out = cluster
        .kubectl_ok(&[
            "apply".as_ref(),
            "--dry-run=server".as_ref(),
            "-f".as_ref(),
            file.as_os_str(),
        ])
        .await?;
    let accepted = out
        .lines()
        .filter(|l| l.ends_with("(server dry run)"))
        .count();
    ensure!(
        accepted == others.len() && others.len() >= 15,
        "{accepted} of {} objects accepted:\n{out}",
        others.len()
    );
    Ok(())
}

/// The webhook container of the self-signed Deployment, as (args, env) with the namespace resolved.
async fn deployment_command(cluster: &Cluster) -> Result<(Vec<String>, Vec<(String, String)>)> {
    let documents = render(cluster, "self-signed", &["certManager.enabled=false"]).await?;
    let container = &named(&documents, "Deployment", "kerf-webhook")?["spec"]["template"]["spec"]
        ["containers"][0];
    let args: Vec<String> = serde_json::from_value(container["args"].clone())?;
    let mut env = Vec::new();
    for variable in container["env"].as_array().context("env")? {
        let name = variable["name"].as_str().context("env name")?.to_owned();
        let value = match (
            &variable["value"],
            &variable["valueFrom"]["fieldRef"]["fieldPath"],
        ) {
            (Value::String(value), _) => value.clone(),
            (_, path) if path == "metadata.namespace" => NAMESPACE.to_owned(),
            other => anyhow::bail!("env {name}: cannot resolve {other:?} outside a pod"),
        };
        env.push((name, value));
    }
    Ok((args, env))
}

/// The Deployment's arguments for a process on this machine: listen on 127.0.0.1:`port`, files under `dir`, and
/// 127.0.0.1 among the certificate's names. Fails if the chart no longer passes one of them.
fn local_args(args: &[String], port: u16, dir: &Path) -> Result<Vec<String>> {
    let mut local = Vec::new();
    let mut changed = 0;
    for arg in args {
        let (flag, value) = arg.split_once('=').unwrap_or((arg, ""));
        let replaced = match flag {
            "--bind" => format!("--bind=127.0.0.1:{port}"),
            "--tls-cert-file" => format!("--tls-cert-file={}", dir.join("tls.crt").display()),
            "--tls-private-key-file" => {
                format!("--tls-private-key-file={}", dir.join("tls.key").display())
            }
            "--self-signed-names" => format!("--self-signed-names={value},127.0.0.1"),
            _ => {
                local.push(arg.clone());
                continue;
            }
        };
        changed += 1;
        local.push(replaced);
    }
    ensure!(
        changed == 4,
        "the chart's webhook arguments changed: {args:?}"
    );
    Ok(local)
}

/// A kubeconfig for this cluster that authenticates as the chart's ServiceAccount.
async fn service_account_kubeconfig(cluster: &Cluster) -> Result<PathBuf> {
    let client = cluster.client()?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let accounts = &accounts;
    let secret = poll(
        "the kerf ServiceAccount's token",
        Duration::from_secs(60),
        || async move {
            let account = accounts.get_opt(RELEASE).await?;
            Ok(account
                .and_then(|a| a.secrets)
                .and_then(|s| s.into_iter().next())
                .and_then(|s| s.name))
        },
    )
    .await?;
    let secrets: Api<Secret> = Api::namespaced(client, NAMESPACE);
    let token = secrets
        .get(&secret)
        .await?
        .data
        .and_then(|d| d.get("token").cloned())
        .context("the token Secret has no token")?;
    let mut kubeconfig: Value =
        serde_yaml::from_str(&std::fs::read_to_string(cluster.kubeconfig())?)?;
    kubeconfig["users"][0]["user"] = json!({"token": String::from_utf8(token.0)?});
    let path = cluster.dir().join("kerf-sa.kubeconfig");
    std::fs::write(&path, serde_yaml::to_string(&kubeconfig)?)?;
    Ok(path)
}

async fn start_self_signed(
    cluster: &Cluster,
    args: &[String],
    env: &[(String, String)],
    port: u16,
    kubeconfig: &Path,
) -> Result<Process> {
    let kubeconfig = kubeconfig.to_string_lossy();
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    env.push(("KUBECONFIG", &kubeconfig));
    start_kerf(
        args,
        &env,
        &cluster.dir().join("kerf-self-signed.log"),
        port,
    )
    .await
}

/// The PEM CA bundle of every webhook of both configurations, when they all agree.
async fn injected_bundle(cluster: &Cluster) -> Result<Option<Vec<u8>>> {
    let client = cluster.client()?;
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(RELEASE)
        .await?;
    let validating = Api::<ValidatingWebhookConfiguration>::all(client)
        .get(RELEASE)
        .await?;
    let bundles: Vec<Option<Vec<u8>>> = mutating
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .map(|w| w.client_config.ca_bundle.map(|b| b.0))
        .chain(
            validating
                .webhooks
                .unwrap_or_default()
                .into_iter()
                .map(|w| w.client_config.ca_bundle.map(|b| b.0)),
        )
        .collect();
    // Mutating: NodePool and EC2NodeClass defaulting, pod advice; validating: NodePool, EC2NodeClass,
    // NodeOverlay and CapacityBuffer.
    ensure!(
        bundles.len() == 7,
        "expected 7 webhooks, found {}",
        bundles.len()
    );
    Ok(bundles
        .iter()
        .all(|b| b.is_some() && *b == bundles[0])
        .then(|| bundles[0].clone())
        .flatten())
}

async fn self_signed_install(cluster: &Cluster) -> Result<Process> {
    let port = free_port()?;
    cluster
        .helm(&[
            "install",
            RELEASE,
            "charts/kerf",
            "--namespace",
            NAMESPACE,
            "--set",
            "certManager.enabled=false",
            "--set",
            &format!("webhook.url=https://127.0.0.1:{port}"),
        ])
        .await?;
    let (args, env) = deployment_command(cluster).await?;
    let tls_dir = cluster.dir().join("self-signed-tls");
    std::fs::create_dir_all(&tls_dir)?;
    let args = local_args(&args, port, &tls_dir)?;
    let kubeconfig = service_account_kubeconfig(cluster).await?;
    let webhook = start_self_signed(cluster, &args, &env, port, &kubeconfig).await?;

    // The Secret holds the CA, and both configurations trust it.
    let secrets: Api<Secret> = Api::namespaced(cluster.client()?, NAMESPACE);
    let secret = secrets
        .get(SECRET)
        .await
        .context("kerf did not create its Secret")?;
    let data = secret.data.clone().context("the Secret has no data")?;
    let ca = data
        .get("ca.crt")
        .context("no ca.crt in the Secret")?
        .0
        .clone();
    poll(
        "the CA bundle in both webhook configurations",
        Duration::from_secs(60),
        || async { Ok((injected_bundle(cluster).await? == Some(ca.clone())).then_some(())) },
    )
    .await?;
    refused_through(cluster).await?;

    // Another replica (here: a restart) serves the stored certificate rather than issuing its own.
    drop(webhook);
    let webhook = start_self_signed(cluster, &args, &env, port, &kubeconfig).await?;
    refused_through(cluster).await?;
    let after = secrets.get(SECRET).await?;
    ensure!(
        after.metadata.resource_version == secret.metadata.resource_version
            && after.data == secret.data,
        "the restart replaced the stored certificate"
    );
    ensure!(
        std::fs::read(tls_dir.join("tls.crt"))? == data["tls.crt"].0,
        "kerf does not serve the stored certificate"
    );
    Ok(webhook)
}

/// A bad NodePool is refused with kerf's message (polled: the apiserver picks up a new CA bundle asynchronously).
async fn refused_through(cluster: &Cluster) -> Result<()> {
    let bad = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "self-signed-bad"},
        "spec": {"weight": 0, "template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": []}}}});
    poll(
        "kubectl to be refused by kerf",
        Duration::from_secs(60),
        || async {
            let (ok, stderr) = cluster.apply(&bad).await?;
            ensure!(!ok, "a bad NodePool was stored");
            ensure!(
                stderr.contains("spec.weight in body should be greater than or equal to 1"),
                "kubectl said: {stderr}"
            );
            Ok(Some(()))
        },
    )
    .await
}

/// The advice annotations of the pods with `selector` in `default`, once at least `count` pods carry them.
/// `kubectl create --dry-run=server -o json` of `object`: what admission (kerf's pod advice included) makes of it.
async fn dry_run(cluster: &Cluster, object: &Value) -> Result<Value> {
    let file = cluster.dir().join(format!(
        "dry-run-{}.json",
        object["metadata"]["name"].as_str().unwrap_or("object")
    ));
    std::fs::write(&file, serde_json::to_vec(object)?)?;
    let out = cluster
        .kubectl_ok(&[
            "create".as_ref(),
            "--dry-run=server".as_ref(),
            "-o".as_ref(),
            "json".as_ref(),
            "-f".as_ref(),
            file.as_os_str(),
        ])
        .await?;
    Ok(serde_json::from_str(&out)?)
}

/// A pod whose claim is bound to a zonal volume is advised into the volume's zone, not the cheapest zone it would
/// get otherwise (`free_zone`): the webhook watches claims, volumes and StorageClasses with the chart's RBAC.
async fn advice_follows_volumes(cluster: &Cluster, free_zone: &Value) -> Result<()> {
    let zone = ["us-east-1a", "us-east-1b", "us-east-1c"]
        .into_iter()
        .find(|z| free_zone != z)
        .unwrap_or("us-east-1a");
    let volume = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "advice-zonal"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-advice"},
            "claimRef": {"namespace": "default", "name": "advice-data"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}]}}}});
    let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "advice-data", "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": "advice-zonal",
            "resources": {"requests": {"storage": "1Gi"}}}});
    for object in [&volume, &claim] {
        let (ok, stderr) = cluster.apply(object).await?;
        ensure!(ok, "applying {}: {stderr}", object["kind"]);
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "with-volume", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "pause"}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "advice-data"}}]}});
    let pod = &pod;
    poll(
        &format!("advice in {zone}, the zone of the pod's volume"),
        Duration::from_secs(60),
        || async move {
            let advised = dry_run(cluster, pod).await?;
            let requirements: Value = serde_json::from_str(
                advised["metadata"]["annotations"][REQUIREMENTS]
                    .as_str()
                    .unwrap_or("null"),
            )?;
            Ok((requirements["nodePools"][0]["cheapest"]["zone"] == zone).then_some(()))
        },
    )
    .await
}

async fn advised_pods(
    cluster: &Cluster,
    selector: &str,
    count: usize,
) -> Result<Vec<(Value, String)>> {
    let pods: Api<Pod> = Api::namespaced(cluster.client()?, "default");
    let pods = &pods;
    poll(
        &format!("{count} advised pods ({selector})"),
        Duration::from_secs(90),
        || async move {
            let mut advised = Vec::new();
            for pod in pods.list(&ListParams::default().labels(selector)).await? {
                let annotations = pod.metadata.annotations.unwrap_or_default();
                if let (Some(requirements), Some(summary)) =
                    (annotations.get(REQUIREMENTS), annotations.get(SUMMARY))
                {
                    advised.push((serde_json::from_str(requirements)?, summary.clone()));
                }
            }
            Ok((advised.len() >= count).then_some(advised))
        },
    )
    .await
}

async fn pods_get_advice(cluster: &Cluster) -> Result<()> {
    // Getting started, step 3: the mistakes example is refused (here by the CRD's enum, which the apiserver checks
    // between the mutating and the validating webhooks).
    let mistakes = repo_root().join("examples/mistakes.yaml");
    let out = cluster
        .kubectl(&["apply".as_ref(), "-f".as_ref(), mistakes.as_os_str()])
        .await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && stderr.contains(r#""weekend-freeze" is invalid"#),
        "examples/mistakes.yaml: {stderr}"
    );
    let stored = cluster
        .kubectl_ok(&["get", "nodepools", "-o", "name"])
        .await?;
    ensure!(stored.trim().is_empty(), "stored: {stored}");

    let example = repo_root().join("examples/inflate.yaml");
    // Advice is given once, when a pod is created: the NodePool must be known to kerf before the Deployment's pods
    // appear. So the NodePool and EC2NodeClass go first, and a server-side dry run of a pod shows when kerf sees them.
    let pools: Vec<Value> = yaml_documents(&example)?
        .into_iter()
        .filter(|d| d["kind"] != "Deployment")
        .collect();
    let file = cluster.dir().join("inflate-pools.json");
    std::fs::write(
        &file,
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": pools}))?,
    )?;
    cluster
        .kubectl_ok(&["apply".as_ref(), "-f".as_ref(), file.as_os_str()])
        .await?;
    let probe = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "pause"}]}});
    let probe = &probe;
    let free_zone = poll(
        "kerf to advise with the default NodePool",
        Duration::from_secs(60),
        || async move {
            let pod = dry_run(cluster, probe).await?;
            let requirements: Value = serde_json::from_str(
                pod["metadata"]["annotations"][REQUIREMENTS]
                    .as_str()
                    .unwrap_or("null"),
            )?;
            Ok(pod["metadata"]["annotations"][SUMMARY]
                .as_str()
                .is_some_and(|s| s.starts_with("1 nodepool; default: "))
                .then(|| requirements["nodePools"][0]["cheapest"]["zone"].clone()))
        },
    )
    .await?;
    advice_follows_volumes(cluster, &free_zone).await?;

    // The getting-started commands.
    cluster
        .kubectl_ok(&["apply".as_ref(), "-f".as_ref(), example.as_os_str()])
        .await?;
    for (requirements, summary) in advised_pods(cluster, "app=inflate", 10).await? {
        // Priced out of the box by the shipped on-demand snapshot (docs/getting-started.md shows this line).
        ensure!(
            summary.starts_with("1 nodepool; default: ")
                && summary.contains(" on-demand ")
                && summary.ends_with("/h")
                && !summary.contains("price unknown"),
            "summary: {summary}"
        );
        ensure!(
            requirements["nodePools"][0]["name"] == "default"
                && requirements["nodePools"][0]["instanceTypes"].as_u64() > Some(10)
                && requirements["requests"]["cpu"] == "1"
                && requirements["incompatible"] == json!([]),
            "requirements: {requirements}"
        );
    }
    let shown = cluster
        .kubectl_ok(&[
            "get",
            "pods",
            "-l",
            "app=inflate",
            "-o",
            r"jsonpath={.items[0].metadata.annotations.kerf\.sh/instance-summary}",
        ])
        .await?;
    ensure!(
        shown.starts_with("1 nodepool; default: "),
        "kubectl shows: {shown}"
    );

    cluster
        .kubectl_ok(&[
            "patch",
            "deployment",
            "inflate",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/arch":"arm64"}}}}}"#,
        ])
        .await?;
    // The rollout's new pods carry the new template's hash; find one by its nodeSelector.
    let pods: Api<Pod> = Api::namespaced(cluster.client()?, "default");
    let pods = &pods;
    let summary = poll(
        "an arm64 pod with advice",
        Duration::from_secs(90),
        || async move {
            let list = pods
                .list(&ListParams::default().labels("app=inflate"))
                .await?;
            Ok(list.into_iter().find_map(|pod| {
                let arm64 = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_selector.as_ref())
                    .is_some_and(|n| {
                        n.get("kubernetes.io/arch").map(String::as_str) == Some("arm64")
                    });
                let summary = pod
                    .metadata
                    .annotations
                    .and_then(|a| a.get(SUMMARY).cloned());
                summary.filter(|_| arm64)
            }))
        },
    )
    .await?;
    ensure!(
        summary.starts_with("no nodepool fits: default: ")
            && summary.contains("kubernetes.io/arch")
            && summary.contains("arm64")
            && summary.contains("amd64"),
        "arm64 summary: {summary}"
    );
    Ok(())
}
