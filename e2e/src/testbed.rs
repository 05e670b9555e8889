//! The testbed of the lifecycle, termination, disruption and feature tests: [`crate::controller`]'s setup (CRDs, a
//! network, the EC2NodeClass `default`, prices) with a stand-in kubelet registering its instances, kerf's own
//! cloud provider to inspect them, and `kerf controller` (dropped, it is killed as in a crash), plus the objects
//! those tests apply (NodeClaims).

use crate::aws::{AwsEmu, InterruptionQueue, REGION};
use crate::controller::{prepare_with_cloud, Controller, ControllerSetup};
use crate::{poll, Cluster};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::time::Duration;

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
    pub controller: Option<Controller>,
    pub kubelet: crate::kubelet::StandInKubelet,
    /// kerf's cloud provider for this cluster name: what a test inspects instances through.
    pub cloud: kerf_aws::AwsCloud,
    pub name: String,
    pub setup: ControllerSetup,
    /// The controller's flags beyond the setup's, for its restarts too.
    pub flags: Vec<String>,
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
        Self::start(AwsEmu::shared_or_skip(test)?, test, prepare).await
    }

    /// [`Testbed::start_or_skip`] on an emulator shared only within `group`
    /// ([`AwsEmu::shared_in_or_skip`]): for tests that set faults, which every caller of a server sees.
    pub async fn start_in_or_skip(group: &'static str, test: &str) -> Result<Option<Testbed>> {
        Self::start(
            AwsEmu::shared_in_or_skip(group, test)?,
            test,
            async |_, _, _| Ok(Vec::new()),
        )
        .await
    }

    async fn start(
        emu: Option<std::sync::Arc<AwsEmu>>,
        test: &str,
        prepare: impl AsyncFnOnce(&AwsEmu, &kerf_aws::AwsCloud, &str) -> Result<Vec<String>>,
    ) -> Result<Option<Testbed>> {
        let Some(emu) = emu else {
            return Ok(None);
        };
        let Some(cluster) = Cluster::start_or_skip(test).await? else {
            return Ok(None);
        };
        let (setup, cloud) = prepare_with_cloud(&cluster, &emu, "life").await?;
        let name = setup.cluster_name.clone();
        let kubelet = crate::kubelet::StandInKubelet::start(
            cluster.client()?,
            cloud.ec2().clone(),
            crate::kubelet::KubeletSettings::new(&name, REGION),
        )?;
        // One controller: no Lease to wait for, also when a test restarts it after a crash. Its AMIs resolve for
        // the Kubernetes version `cloud` resolves them for.
        let mut flags = vec![
            "--leader-elect".to_owned(),
            "false".to_owned(),
            "--kubernetes-version".to_owned(),
            crate::aws::EKS_AMI_VERSION.to_owned(),
        ];
        flags.extend(prepare(&emu, &cloud, &name).await?);
        let mut bed = Testbed {
            controller: None,
            kubelet,
            cloud,
            name,
            setup,
            flags,
            emu,
            cluster,
        };
        bed.restart_controller().await?;
        Ok(Some(bed))
    }

    /// Starts the controller (again, after a test dropped it), with the testbed's flags.
    pub async fn restart_controller(&mut self) -> Result<()> {
        self.controller = None;
        let flags: Vec<&str> = self.flags.iter().map(String::as_str).collect();
        // Its identity is the cluster name: the log (`controller-<name>.log`) is the testbed's own also on a
        // reused control plane.
        self.controller = Some(self.setup.start_running(&self.name, &flags).await?);
        Ok(())
    }

    /// The controller's log so far, its earlier lives' included.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.setup.log_of(&self.name)).unwrap_or_default()
    }

    /// The controller's metrics.
    pub async fn metrics(&self) -> Result<String> {
        self.controller
            .as_ref()
            .context("the controller is not running")?
            .metrics()
            .await
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
