//! Running `kerf controller` against a test [`Cluster`] and the AWS emulator, the one way every e2e test does:
//! [`prepare`] installs the CRDs, a tagged network, an EC2NodeClass `default` and the test prices as a pricing
//! file; [`ControllerSetup::start`] runs a controller process with its own health and metrics ports and its
//! log. [`crate::testbed::Testbed`] adds the stand-in kubelet and kerf's own cloud provider on top of it.

use crate::aws::{node_class_spec, unique_cluster_name, AwsEmu, Network, REGION, TEST_PRICES};
use crate::kerf::{free_port, start_kerf, Process};
use crate::{poll, Cluster};
use anyhow::{bail, Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use kerf::api::nodeclaim::NodeClaim;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// What a controller test runs against.
pub struct ControllerSetup {
    /// The cluster name instances are tagged for (unique per test).
    pub cluster_name: String,
    pub network: Network,
    pub pricing_file: PathBuf,
    pub kubeconfig: PathBuf,
    /// The apiserver's URL, the controller's `--cluster-endpoint`.
    pub server_url: String,
    pub aws_endpoint: String,
    pub dir: PathBuf,
}

/// One `kerf controller` process.
pub struct Controller {
    pub process: Process,
    pub health_port: u16,
    pub metrics_port: u16,
    pub log: PathBuf,
}

/// Installs the CRDs, creates a network for a new cluster name and applies the EC2NodeClass `default`. The
/// controller these tests start discovers the Kubernetes version from the apiserver (no `--kubernetes-version`),
/// so the emulator gets the EKS AMI parameters of that version too: those of `ssm-seed.json`'s version, renamed.
pub async fn prepare(cluster: &Cluster, emu: &AwsEmu, prefix: &str) -> Result<ControllerSetup> {
    Ok(prepare_with_cloud(cluster, emu, prefix).await?.0)
}

/// [`prepare`], also returning kerf's cloud provider for the cluster name (what a test inspects instances
/// through).
pub async fn prepare_with_cloud(
    cluster: &Cluster,
    emu: &AwsEmu,
    prefix: &str,
) -> Result<(ControllerSetup, kerf_aws::AwsCloud)> {
    cluster.install_crds().await?;
    emu.seed_ssm(&ami_parameters_for_apiserver()?).await?;
    let cluster_name = unique_cluster_name(prefix);
    // Listing every instance type takes moto ~5 s, more on a busy machine.
    let cloud = emu.cloud(&cluster_name, Duration::from_secs(60)).await?;
    let network = emu.create_network(cloud.ec2(), &cluster_name).await?;
    let pricing_file = cluster.dir().join(format!("{cluster_name}-prices.json"));
    std::fs::write(&pricing_file, TEST_PRICES).context("writing the pricing file")?;
    let class = json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": serde_json::to_value(node_class_spec(&cluster_name)?)?,
    });
    let (ok, stderr) = cluster.apply(&class).await?;
    anyhow::ensure!(ok, "applying the EC2NodeClass: {stderr}");
    let setup = ControllerSetup {
        cluster_name,
        network,
        pricing_file,
        kubeconfig: cluster.kubeconfig().to_path_buf(),
        server_url: cluster.server_url(),
        aws_endpoint: emu.endpoint().to_owned(),
        dir: cluster.dir().to_path_buf(),
    };
    Ok((setup, cloud))
}

/// What the controller logs once its watches have synced and its controllers run.
const STARTED: &str = "starting the controllers";

/// `e2e/scripts/aws-emu/ssm-seed.json`'s EKS AMI parameters under the test apiserver's minor version.
fn ami_parameters_for_apiserver() -> Result<Value> {
    let seed =
        std::fs::read_to_string(crate::repo_root().join("e2e/scripts/aws-emu/ssm-seed.json"))
            .context("reading ssm-seed.json")?;
    let seed: serde_json::Map<String, Value> = serde_json::from_str(&seed)?;
    let minor = crate::K8S_VERSION
        .trim_start_matches('v')
        .rsplit_once('.')
        .map_or(crate::K8S_VERSION, |(minor, _patch)| minor);
    let from = format!("/{}/", crate::aws::EKS_AMI_VERSION);
    let to = format!("/{minor}/");
    Ok(Value::Object(
        seed.into_iter()
            .map(|(name, value)| (name.replace(&from, &to), value))
            .collect(),
    ))
}

impl ControllerSetup {
    /// The JSON log of the controller running as `identity` (its restarts append to it).
    pub fn log_of(&self, identity: &str) -> PathBuf {
        self.dir.join(format!("controller-{identity}.log"))
    }

    /// Starts `kerf controller` as `identity` (its `POD_NAME`), leader election on, its Lease in `default`;
    /// `extra` are more flags. Returns once `/healthz` answers.
    pub async fn start(&self, identity: &str, extra: &[&str]) -> Result<Controller> {
        let health_port = free_port()?;
        let metrics_port = free_port()?;
        let log = self.log_of(identity);
        let mut args: Vec<String> = [
            "--log-format",
            "json",
            "--log-level",
            "info,kerf=debug",
            "controller",
            "--cluster-name",
            &self.cluster_name,
            "--cluster-endpoint",
            &self.server_url,
            "--aws-region",
            REGION,
            "--aws-endpoint-url",
            &self.aws_endpoint,
            "--pricing-file",
            &self.pricing_file.display().to_string(),
            "--health-bind",
            &format!("127.0.0.1:{health_port}"),
            "--metrics-bind",
            &format!("127.0.0.1:{metrics_port}"),
            "--namespace",
            "default",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let kubeconfig = self.kubeconfig.display().to_string();
        let env = [
            ("KUBECONFIG", kubeconfig.as_str()),
            ("POD_NAME", identity),
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
            ("AWS_REGION", REGION),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ];
        let process = start_kerf(&args, &env, &log, health_port).await?;
        Ok(Controller {
            process,
            health_port,
            metrics_port,
            log,
        })
    }

    /// [`ControllerSetup::start`], returning once the controllers run (the process leads, its watches synced): what
    /// a test that acts at once needs. A restart of the same `identity` appends to its log.
    pub async fn start_running(&self, identity: &str, extra: &[&str]) -> Result<Controller> {
        let log = self.log_of(identity);
        let starts_before = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches(STARTED)
            .count();
        let mut controller = self.start(identity, extra).await?;
        let running = &mut controller;
        poll(
            "kerf controller to start its controllers",
            Duration::from_secs(90),
            || {
                let exited = running.process.try_wait();
                let log = running.log_text();
                async move {
                    if let Some(status) = exited? {
                        bail!("kerf controller exited ({status}):\n{log}");
                    }
                    Ok((log.matches(STARTED).count() > starts_before).then_some(()))
                }
            },
        )
        .await?;
        Ok(controller)
    }
}

impl Controller {
    /// Everything the controller (and its earlier lives under the same identity) logged.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The body of `GET path` on the metrics port.
    pub async fn metrics(&self) -> Result<String> {
        let url = format!("http://127.0.0.1:{}/metrics", self.metrics_port);
        Ok(reqwest::get(url).await?.error_for_status()?.text().await?)
    }

    /// The status code of `GET path` on the health port.
    pub async fn health(&self, path: &str) -> Result<u16> {
        let url = format!("http://127.0.0.1:{}{path}", self.health_port);
        Ok(reqwest::get(url).await?.status().as_u16())
    }
}

/// A NodePool `name` over the EC2NodeClass `default`: amd64 on-demand, with `limits` (or none).
pub fn node_pool(name: &str, limits: Value) -> Value {
    let mut pool = json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "e2e"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                    ],
                    "expireAfter": "720h"
                }
            }
        }
    });
    if !limits.is_null() {
        pool["spec"]["limits"] = limits;
    }
    pool
}

/// The `inflate` Deployment: `replicas` pause pods of `cpu` / `memory` in `namespace`.
pub async fn create_inflate(
    cluster: &Cluster,
    namespace: &str,
    replicas: i32,
    cpu: &str,
    memory: &str,
) -> Result<()> {
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "inflate", "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "inflate"}},
            "template": {
                "metadata": {"labels": {"app": "inflate"}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "inflate",
                        "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                        "resources": {"requests": {"cpu": cpu, "memory": memory}}
                    }]
                }
            }
        }
    }))?;
    let api: Api<Deployment> = Api::namespaced(cluster.client()?, namespace);
    api.create(&PostParams::default(), &deployment)
        .await
        .context("creating the inflate Deployment")?;
    Ok(())
}

/// Every NodeClaim of the cluster.
pub async fn node_claims(cluster: &Cluster) -> Result<Vec<NodeClaim>> {
    let api: Api<NodeClaim> = Api::all(cluster.client()?);
    Ok(api.list(&ListParams::default()).await?.items)
}

/// Every core/v1 Event of the cluster with `reason`.
pub async fn events_with_reason(
    cluster: &Cluster,
    reason: &str,
) -> Result<Vec<k8s_openapi::api::core::v1::Event>> {
    let api: Api<k8s_openapi::api::core::v1::Event> = Api::all(cluster.client()?);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect())
}

/// One Event to wait for: on the object named `involved`, with this reason, type (`Normal`/`Warning`) and message.
pub struct ExpectedEvent<'a> {
    pub involved: &'a str,
    pub reason: &'a str,
    pub type_: &'a str,
    pub message: String,
}

/// Waits up to `timeout` until `expected` is recorded.
pub async fn wait_for_event(
    cluster: &Cluster,
    expected: &ExpectedEvent<'_>,
    timeout: Duration,
) -> Result<()> {
    crate::poll(
        &format!("a {} Event on {}", expected.reason, expected.involved),
        timeout,
        || async move {
            let events = events_with_reason(cluster, expected.reason).await?;
            Ok(events
                .iter()
                .any(|e| {
                    e.involved_object.name.as_deref() == Some(expected.involved)
                        && e.message.as_deref() == Some(expected.message.as_str())
                        && e.type_.as_deref() == Some(expected.type_)
                })
                .then_some(()))
        },
    )
    .await
}
