//! A testbed for the lifecycle and termination tests: `kerf controller` against a test [`Cluster`] and the
//! AWS emulator: the process (killed when dropped, so a test can also crash it on purpose), its log, and the
//! objects those tests apply (an EC2NodeClass discovering a test's [`Network`](crate::aws::Network), NodeClaims).

use crate::aws::{node_class_spec, AwsEmu, InterruptionQueue, REGION, TEST_PRICES};
use crate::kerf::kerf_binary;
use crate::{poll, Cluster};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// What the controller logs once its watches have synced and the controllers run.
const STARTED: &str = "starting the controllers";

/// A running `kerf controller`; killed (SIGKILL, as a crash) when dropped.
pub struct KerfController {
    child: Child,
    log: PathBuf,
}

impl KerfController {
    /// Starts `kerf controller` for `cluster_name` on `cluster` and `emu`, its log appended to
    /// `<cluster dir>/logs/kerf-controller.log` (a restart appends to the same file), and waits until its
    /// controllers run.
    pub async fn start(cluster: &Cluster, emu: &AwsEmu, cluster_name: &str) -> Result<Self> {
        Self::start_with(cluster, emu, cluster_name, &[]).await
    }

    /// [`KerfController::start`] with `extra` flags.
    pub async fn start_with(
        cluster: &Cluster,
        emu: &AwsEmu,
        cluster_name: &str,
        extra: &[&str],
    ) -> Result<Self> {
        let logs = cluster.dir().join("logs");
        std::fs::create_dir_all(&logs)?;
        let log = logs.join("kerf-controller.log");
        let prices = cluster.dir().join("kerf-prices.json");
        std::fs::write(&prices, TEST_PRICES)?;
        let starts_before = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches(STARTED)
            .count();
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("opening {}", log.display()))?;
        let child = Command::new(kerf_binary()?)
            .arg("controller")
            .args(["--cluster-name", cluster_name])
            .args(["--cluster-endpoint", &cluster.server_url()])
            .args(["--kubernetes-version", crate::aws::EKS_AMI_VERSION])
            .args(["--aws-region", REGION])
            .args(["--aws-endpoint-url", emu.endpoint()])
            .arg("--pricing-file")
            .arg(&prices)
            .args(["--leader-elect", "false"])
            .args(extra)
            .args(
                // A test that reads the metrics binds them itself.
                if extra.iter().any(|a| a.starts_with("--metrics-bind")) {
                    &[][..]
                } else {
                    &["--metrics-bind", "127.0.0.1:0"][..]
                },
            )
            .args(["--health-bind", "127.0.0.1:0"])
            .env("KUBECONFIG", cluster.kubeconfig())
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("LOG_LEVEL", "info,kerf=debug")
            // Structured lines a test can match field by field (no colour codes).
            .env("LOG_FORMAT", "json")
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .context("starting kerf controller")?;
        let mut controller = KerfController { child, log };
        let controller_ref = &mut controller;
        poll(
            "kerf controller to start its controllers",
            Duration::from_secs(90),
            || {
                let exited = controller_ref.child.try_wait();
                let log = controller_ref.log_text();
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

    /// Everything the controller (and its earlier lives on this cluster) logged.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for KerfController {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Applies the EC2NodeClass `default` discovering the network of `cluster_name`.
pub async fn apply_node_class(cluster: &Cluster, cluster_name: &str) -> Result<()> {
    let class = json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": serde_json::to_value(node_class_spec(cluster_name)?)?,
    });
    apply_ok(cluster, &class).await
}

/// Applies a [`crate::aws::node_claim`].
pub async fn apply_node_claim(
    cluster: &Cluster,
    name: &str,
    instance_types: &[&str],
    capacity_types: &[&str],
) -> Result<()> {
    let claim = crate::aws::node_claim(name, instance_types, capacity_types)?;
    apply_ok(cluster, &serde_json::to_value(claim)?).await
}

/// `kubectl apply` of one object, failing with kubectl's stderr.
pub async fn apply_ok(cluster: &Cluster, object: &Value) -> Result<()> {
    let (ok, stderr) = cluster.apply(object).await?;
    if !ok {
        bail!("kubectl apply failed: {stderr}");
    }
    Ok(())
}

/// Everything a lifecycle test runs against: a control plane with kerf's CRDs, the shared emulator, a
/// cluster name and [`Network`](crate::aws::Network) of its own with the EC2NodeClass `default`, a stand-in
/// kubelet registering its instances, and `kerf controller`.
pub struct Testbed {
    pub controller: Option<KerfController>,
    pub kubelet: crate::kubelet::StandInKubelet,
    /// kerf's cloud provider for this cluster name: what a test inspects instances through.
    pub cloud: kerf_aws::AwsCloud,
    pub name: String,
    pub emu: std::sync::Arc<AwsEmu>,
    // Declared last: stopped after the processes above.
    pub cluster: Cluster,
}

impl Testbed {
    /// The testbed for `test`, or `None` (after printing why) when it is to be skipped.
    pub async fn start_or_skip(test: &str) -> Result<Option<Testbed>> {
        Self::start_or_skip_with(test, |_| Vec::new()).await
    }

    /// [`Testbed::start_or_skip`] with an interruption queue, created first: the controller looks it up at
    /// start.
    pub async fn start_with_interruption_queue_or_skip(
        test: &str,
    ) -> Result<Option<(Testbed, InterruptionQueue)>> {
        let Some(emu) = AwsEmu::shared_or_skip(test)? else {
            return Ok(None);
        };
        let queue = emu.interruption_queue("interruption").await?;
        let flags = vec!["--interruption-queue".to_owned(), queue.name.clone()];
        let Some(bed) = Self::start_or_skip_with(test, |_| flags).await? else {
            return Ok(None);
        };
        Ok(Some((bed, queue)))
    }

    /// [`Testbed::start_or_skip`], the controller started with the flags `extra` gives for the cluster name.
    pub async fn start_or_skip_with(
        test: &str,
        extra: impl FnOnce(&str) -> Vec<String>,
    ) -> Result<Option<Testbed>> {
        Self::start_or_skip_prepared(test, async |_, _, name| Ok(extra(name))).await
    }

    /// [`Testbed::start_or_skip`], with `prepare` run before the controller starts (on the emulator, kerf's cloud
    /// provider for the cluster name, and the name): it gives the controller's extra flags.
    pub async fn start_or_skip_prepared(
        test: &str,
        prepare: impl AsyncFnOnce(&AwsEmu, &kerf_aws::AwsCloud, &str) -> Result<Vec<String>>,
    ) -> Result<Option<Testbed>> {
        let Some(cluster) = Cluster::start_or_skip(test).await? else {
            return Ok(None);
        };
        let Some(emu) = AwsEmu::shared_or_skip(test)? else {
            return Ok(None);
        };
        cluster.install_crds().await?;
        let name = crate::aws::unique_cluster_name("life");
        // Listing every instance type takes moto ~5 s, more on a busy machine.
        let cloud = emu.cloud(&name, Duration::from_secs(60)).await?;
        emu.create_network(cloud.ec2(), &name).await?;
        apply_node_class(&cluster, &name).await?;
        let kubelet = crate::kubelet::StandInKubelet::start(
            cluster.client()?,
            cloud.ec2().clone(),
            crate::kubelet::KubeletSettings::new(&name, REGION),
        )?;
        let extra = prepare(&emu, &cloud, &name).await?;
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let controller = KerfController::start_with(&cluster, &emu, &name, &extra).await?;
        Ok(Some(Testbed {
            controller: Some(controller),
            kubelet,
            cloud,
            name,
            emu,
            cluster,
        }))
    }

    /// Starts the controller again (after a test dropped it).
    pub async fn restart_controller(&mut self) -> Result<()> {
        self.controller = None;
        self.controller = Some(KerfController::start(&self.cluster, &self.emu, &self.name).await?);
        Ok(())
    }

    /// The controller's log so far.
    pub fn log(&self) -> String {
        self.controller
            .as_ref()
            .map(KerfController::log_text)
            .unwrap_or_default()
    }

    /// The live instances tagged for the NodeClaim `claim`.
    pub async fn instances_of(&self, claim: &str) -> Result<Vec<kerf::cloud::Instance>> {
        use kerf::cloud::CloudProvider;
        Ok(self
            .cloud
            .list()
            .await?
            .into_iter()
            .filter(|i| i.tags.get(kerf::cloud::TAG_NODECLAIM).map(String::as_str) == Some(claim))
            .collect())
    }

    /// Waits until the NodeClaim `name` has each of `conditions` True, and returns it.
    pub async fn wait_for_conditions(
        &self,
        name: &str,
        conditions: &[&str],
        timeout: Duration,
    ) -> Result<kerf::api::nodeclaim::NodeClaim> {
        let claims: kube::Api<kerf::api::nodeclaim::NodeClaim> =
            kube::Api::all(self.cluster.client()?);
        let claims = &claims;
        let waited = poll(
            &format!("NodeClaim {name} to be {}", conditions.join(", ")),
            timeout,
            || async move {
                let Some(claim) = claims.get_opt(name).await? else {
                    return Ok(None);
                };
                let all = conditions.iter().all(|type_| {
                    claim
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| kerf::api::condition::is_true(c, type_))
                });
                Ok(all.then_some(claim))
            },
        )
        .await;
        waited.with_context(|| format!("kerf controller log:\n{}", tail(&self.log(), 40)))
    }
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
