//! The AWS API emulator for end-to-end tests: moto run by `e2e/scripts/aws-emu.sh`, with the fault injection
//! of `e2e/scripts/aws-emu/moto_emu.py`.
//!
//! One server serves the suite: [`AwsEmu::shared_or_skip`] starts it for the first test that asks and hands the
//! same one to the tests running alongside; it stops (by PID) when the last handle is dropped, also when a test
//! panics, and `aws-emu.sh`'s watchdog stops it if the process dies outright. Tests share its state, so each one
//! works under its own tags (cluster name, VPC); tests that set faults or count calls, which every caller sees,
//! share a server only within their group ([`AwsEmu::shared_in_or_skip`]). Without
//! moto installed (`aws-emu.sh install`) a test is skipped with a printed message, unless `KERF_E2E=1`,
//! which makes it a failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;
use tempfile::TempDir;

use crate::{announce, cache_dir, required, scripts_dir};

/// The region every test uses; moto's data (zones, offerings, AMIs, SSM seeds) is for it.
pub const REGION: &str = "us-west-2";
/// Upper bound for one call to the emulator's control endpoints.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(30);

/// The servers shared by the tests of this process, by group, each while any of its tests holds it.
static SHARED: Mutex<BTreeMap<&'static str, Weak<AwsEmu>>> = Mutex::new(BTreeMap::new());

/// The group of [`AwsEmu::shared_or_skip`]: tests that touch only what their own cluster names, ids and queues
/// select.
const COMMON: &str = "common";

/// A running emulator.
pub struct AwsEmu {
    endpoint: String,
    dir: TempDir,
    http: reqwest::Client,
}

impl AwsEmu {
    /// The venv `aws-emu.sh install` creates.
    pub fn venv() -> PathBuf {
        cache_dir().join("aws-emu").join("venv")
    }

    /// The emulator `test` shares with the suite's other tests: `None` (after printing why) when moto is not
    /// installed and `KERF_E2E` is not `1`; an error when it is missing with `KERF_E2E=1` or fails to start.
    pub fn shared_or_skip(test: &str) -> Result<Option<Arc<AwsEmu>>> {
        Self::shared_in_or_skip(COMMON, test)
    }

    /// [`AwsEmu::shared_or_skip`], shared only with the tests of `group`. The whole suite is one process, so tests
    /// that change what every caller sees (faults, call counts) keep a server of their own this way.
    pub fn shared_in_or_skip(group: &'static str, test: &str) -> Result<Option<Arc<AwsEmu>>> {
        if !Self::venv().join("bin/python").exists() {
            if required() {
                bail!(
                    "KERF_E2E=1 but moto is not installed in {}; run `bash e2e/scripts/aws-emu.sh install`",
                    Self::venv().display()
                );
            }
            announce(&format!(
                "SKIPPED {test}: moto is not installed (run `bash e2e/scripts/aws-emu.sh install`, or set \
                 KERF_E2E=1 to make this a failure)"
            ));
            return Ok(None);
        }
        let mut shared = SHARED
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(emu) = shared.get(group).and_then(Weak::upgrade) {
            return Ok(Some(emu));
        }
        let emu = Arc::new(AwsEmu::start()?);
        shared.insert(group, Arc::downgrade(&emu));
        Ok(Some(emu))
    }

    /// Starts a server of its own (stopped when dropped).
    pub fn start() -> Result<AwsEmu> {
        let dir = tempfile::Builder::new()
            .prefix("kerf-aws-emu-")
            .tempdir()
            .context("creating the emulator's directory")?;
        // `aws-emu.sh start` has its own readiness deadline; the watchdog stops the server if this
        // process dies without dropping the handle.
        let out = Command::new("bash")
            .arg(scripts_dir().join("aws-emu.sh"))
            .arg("start")
            .arg(dir.path())
            .env("KERF_E2E_OWNER_PID", std::process::id().to_string())
            .output()
            .context("running aws-emu.sh start")?;
        // Built before the status check, so that dropping it stops whatever `start` left running.
        let mut emu = AwsEmu {
            endpoint: String::new(),
            http: reqwest::Client::builder()
                .timeout(CONTROL_TIMEOUT)
                .build()
                .context("building an HTTP client")?,
            dir,
        };
        if !out.status.success() {
            bail!(
                "aws-emu.sh start failed ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let port = std::fs::read_to_string(emu.dir.path().join("server.port"))
            .context("reading the emulator's port")?;
        emu.endpoint = format!("http://127.0.0.1:{}", port.trim());
        announce(&format!(
            "kerf-e2e: AWS emulator (moto) at {}",
            emu.endpoint
        ));
        Ok(emu)
    }

    /// `http://127.0.0.1:PORT`: the endpoint of EC2, SSM, SQS and IAM alike.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The server's directory: `server.log`, `server.pid`, `server.port`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Replaces the fault configuration (`{"capacity": [...], "api": [...]}`, see moto_emu.py).
    pub async fn set_faults(&self, faults: &Value) -> Result<()> {
        self.control(reqwest::Method::POST, "/_emu/faults", Some(faults))
            .await
    }

    /// Adds SSM parameters (`{"/aws/service/...": "value"}`; the emulator allows names under `/aws/service/`).
    pub async fn seed_ssm(&self, parameters: &Value) -> Result<()> {
        self.control(reqwest::Method::POST, "/_emu/ssm", Some(parameters))
            .await
    }

    /// Adds capacity reservations, or replaces them by ID (a list in EC2's shape; see moto_emu.py): moto has none,
    /// the emulator serves these to DescribeCapacityReservations and lets launches target them.
    pub async fn seed_capacity_reservations(&self, reservations: &Value) -> Result<()> {
        self.control(
            reqwest::Method::POST,
            "/_emu/capacity-reservations",
            Some(reservations),
        )
        .await
    }

    /// Makes DescribeInstanceStatus report an instance's status checks (`{"instanceId", "instanceStatus":
    /// "impaired", "systemStatus", "impairedSince", "events": [codes]}`; see `moto_emu.py`).
    pub async fn seed_instance_status(&self, status: &Value) -> Result<()> {
        self.control(reqwest::Method::POST, "/_emu/instance-status", Some(status))
            .await
    }

    /// Creates the EKS cluster `name` in the emulator (moto's EKS): what `DescribeCluster` then describes.
    pub async fn create_eks_cluster(&self, name: &str) -> Result<aws_sdk_eks::types::Cluster> {
        let eks = aws_sdk_eks::Client::from_conf(
            aws_sdk_eks::Config::builder()
                .behavior_version(aws_sdk_eks::config::BehaviorVersion::latest())
                .region(aws_sdk_eks::config::Region::new(REGION))
                .endpoint_url(self.endpoint())
                .credentials_provider(aws_sdk_eks::config::Credentials::new(
                    "testing", "testing", None, None, "e2e",
                ))
                .build(),
        );
        let created = eks
            .create_cluster()
            .name(name)
            .role_arn("arn:aws:iam::123456789012:role/eks")
            .resources_vpc_config(aws_sdk_eks::types::VpcConfigRequest::builder().build())
            .send()
            .await
            .context("CreateCluster")?;
        created.cluster.context("CreateCluster answered no cluster")
    }

    /// Replaces the ARC zonal shifts of `resource` (an EKS cluster ARN): `[{"awayFrom": "usw2-az1",
    /// "expiresInSeconds": 3600, "appliedStatus": "APPLIED"}]`; see moto_emu.py. An empty list clears them.
    pub async fn set_zonal_shifts(&self, resource: &str, shifts: &Value) -> Result<()> {
        self.control(
            reqwest::Method::POST,
            "/_emu/zonal-shifts",
            Some(&serde_json::json!({"resourceIdentifier": resource, "zonalShifts": shifts})),
        )
        .await
    }

    /// Ends reservation `id` (as a cancelled ODCR): the emulator forgets it and its instances run on outside it.
    pub async fn end_capacity_reservation(&self, id: &str) -> Result<()> {
        self.control(
            reqwest::Method::POST,
            "/_emu/capacity-reservations/end",
            Some(&serde_json::json!({ "id": id })),
        )
        .await
    }

    /// The API calls the emulator answered since it started (or since its counts were reset), by action; dry
    /// runs as `<Action>:dryRun`.
    pub async fn calls(&self) -> Result<std::collections::BTreeMap<String, u64>> {
        let response = self
            .http
            .get(format!("{}/_emu/calls", self.endpoint))
            .send()
            .await
            .context("calling the emulator's /_emu/calls")?;
        Ok(response.error_for_status()?.json().await?)
    }

    /// Starts counting calls again.
    pub async fn reset_calls(&self) -> Result<()> {
        self.control(reqwest::Method::DELETE, "/_emu/calls", None)
            .await
    }

    /// Clears every injected fault.
    pub async fn clear_faults(&self) -> Result<()> {
        self.control(reqwest::Method::DELETE, "/_emu/faults", None)
            .await
    }

    async fn control(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<()> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.endpoint));
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("calling the emulator's {path}"))?;
        let status = response.status();
        if !status.is_success() {
            bail!(
                "the emulator's {path} answered {status}: {}",
                response.text().await.unwrap_or_default()
            );
        }
        Ok(())
    }
}

impl Drop for AwsEmu {
    fn drop(&mut self) {
        let result = Command::new("bash")
            .arg(scripts_dir().join("aws-emu.sh"))
            .arg("stop")
            .arg(self.dir.path())
            .output();
        match result {
            Ok(out) if out.status.success() => {}
            Ok(out) => announce(&format!(
                "kerf-e2e: aws-emu.sh stop failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )),
            Err(e) => announce(&format!("kerf-e2e: could not run aws-emu.sh stop: {e}")),
        }
        if std::thread::panicking() {
            let log =
                std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            announce(&format!(
                "kerf-e2e: the emulator's last log lines:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
        }
    }
}

/// The Kubernetes version whose EKS AMIs the emulator's SSM parameters name (`aws-emu/ssm-seed.json`).
pub const EKS_AMI_VERSION: &str = "1.30";

/// On-demand and spot prices of the instance types the tests launch (moto has no Pricing API).
pub const TEST_PRICES: &str = r#"{
  "source": "kerf e2e tests",
  "onDemandUsdPerHour": {"us-west-2": {"c5.large": 0.085, "m5.large": 0.096, "m5.xlarge": 0.192,
                                       "c6i.large": 0.085, "m6i.large": 0.096}},
  "spotUsdPerHour": {"us-west-2": {"c5.large": 0.035, "m5.large": 0.04, "m5.xlarge": 0.08,
                                   "c6i.large": 0.035, "m6i.large": 0.04}}
}"#;

/// A VPC of its own for one test: two /20 subnets (us-west-2a and 2b) and a security group, all tagged
/// `karpenter.sh/discovery=<cluster>`.
#[derive(Clone, Debug)]
pub struct Network {
    pub vpc_id: String,
    /// `(subnet ID, zone)`.
    pub subnets: Vec<(String, String)>,
    pub security_group_id: String,
}

impl AwsEmu {
    /// kerf's AWS cloud provider for `cluster_name`, pointed at this emulator (see [`AwsEmu::settings`]).
    pub async fn cloud(
        &self,
        cluster_name: &str,
        call_timeout: Duration,
    ) -> Result<kerf_aws::AwsCloud> {
        Ok(kerf_aws::AwsCloud::connect(self.settings(cluster_name, call_timeout)?).await?)
    }

    /// kerf's AWS settings for `cluster_name`, pointed at this emulator, with [`TEST_PRICES`], one attempt
    /// per call (so injected API errors show) and `call_timeout`.
    pub fn settings(
        &self,
        cluster_name: &str,
        call_timeout: Duration,
    ) -> Result<kerf_aws::AwsSettings> {
        let cluster = kerf_aws::ClusterInfo {
            name: cluster_name.to_owned(),
            endpoint: "https://127.0.0.1:6443".to_owned(),
            ca_bundle: None,
            cidr: Some("10.100.0.0/16".to_owned()),
            dns_ip: None,
        };
        let mut settings = kerf_aws::AwsSettings::new(cluster, EKS_AMI_VERSION);
        settings.region = Some(REGION.to_owned());
        settings.endpoint_url = Some(self.endpoint.clone());
        settings.static_credentials = Some(("testing".to_owned(), "testing".to_owned()));
        settings.call_timeout = call_timeout;
        settings.max_attempts = 1;
        settings.pricing = kerf::catalog::Pricing::from_json(TEST_PRICES)?;
        Ok(settings)
    }

    /// Creates a [`Network`] tagged for `cluster_name`.
    pub async fn create_network(
        &self,
        ec2: &aws_sdk_ec2::Client,
        cluster_name: &str,
    ) -> Result<Network> {
        use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
        let tagged = |resource: ResourceType| {
            TagSpecification::builder()
                .resource_type(resource)
                .tags(
                    Tag::builder()
                        .key("karpenter.sh/discovery")
                        .value(cluster_name)
                        .build(),
                )
                .build()
        };
        let vpc = ec2
            .create_vpc()
            .cidr_block("10.0.0.0/16")
            .tag_specifications(tagged(ResourceType::Vpc))
            .send()
            .await
            .context("CreateVpc")?;
        let vpc_id = vpc
            .vpc()
            .and_then(|v| v.vpc_id())
            .context("CreateVpc gave no VPC ID")?
            .to_owned();
        let mut subnets = Vec::new();
        for (cidr, zone) in [
            ("10.0.0.0/20", "us-west-2a"),
            ("10.0.16.0/20", "us-west-2b"),
        ] {
            let subnet = ec2
                .create_subnet()
                .vpc_id(&vpc_id)
                .cidr_block(cidr)
                .availability_zone(zone)
                .tag_specifications(tagged(ResourceType::Subnet))
                .send()
                .await
                .context("CreateSubnet")?;
            let id = subnet
                .subnet()
                .and_then(|s| s.subnet_id())
                .context("no subnet ID")?;
            subnets.push((id.to_owned(), zone.to_owned()));
        }
        let group = ec2
            .create_security_group()
            .vpc_id(&vpc_id)
            .group_name(format!("{cluster_name}-nodes"))
            .description("kerf e2e nodes")
            .tag_specifications(tagged(ResourceType::SecurityGroup))
            .send()
            .await
            .context("CreateSecurityGroup")?;
        Ok(Network {
            vpc_id,
            subnets,
            security_group_id: group.group_id().context("no security group ID")?.to_owned(),
        })
    }
}

/// A cluster name no other test of the run uses.
pub fn unique_cluster_name(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A capacity reservation ID (`cr-` and lowercase hex, as the EC2NodeClass pattern wants) no other test of the
/// run uses.
pub fn unique_reservation_id() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "cr-{:08x}{:08x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// An EC2NodeClass spec that discovers the [`Network`] of `cluster_name` and takes AL2023 AMIs.
pub fn node_class_spec(cluster_name: &str) -> Result<kerf::api::ec2nodeclass::EC2NodeClassSpec> {
    Ok(serde_json::from_value(serde_json::json!({
        "role": "KarpenterNodeRole",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": cluster_name}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": cluster_name}}],
        "tags": {"team": "e2e"}
    }))?)
}

/// A NodeClaim for `instance_types` and `capacity_types`, with a label and a taint.
pub fn node_claim(
    name: &str,
    instance_types: &[&str],
    capacity_types: &[&str],
) -> Result<kerf::api::nodeclaim::NodeClaim> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default", "team": "e2e"}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": instance_types},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types}
            ],
            "taints": [{"key": "dedicated", "value": "e2e", "effect": "NoSchedule"}]
        }
    }))?)
}

/// What a launch needs, for one test: a cluster name of its own, kerf's cloud provider for it, a
/// [`Network`], and the class `default` resolved with its instance types (listed now).
pub struct Launchable {
    pub cluster: String,
    pub cloud: kerf_aws::AwsCloud,
    pub network: Network,
    pub class: kerf::cloud::NodeClass,
    pub types: Vec<kerf::catalog::InstanceType>,
}

impl AwsEmu {
    /// A [`Launchable`] whose cluster name starts with `prefix`.
    pub async fn launchable(&self, prefix: &str) -> Result<Launchable> {
        use kerf::cloud::CloudProvider;
        let cluster = unique_cluster_name(prefix);
        // Listing every instance type takes moto ~5 s, more on a busy machine.
        let cloud = self.cloud(&cluster, Duration::from_secs(60)).await?;
        let network = self.create_network(cloud.ec2(), &cluster).await?;
        let class = cloud
            .resolve_node_class("default", &node_class_spec(&cluster)?)
            .await?;
        let types = cloud
            .instance_types(&class, std::time::SystemTime::now())
            .await?;
        Ok(Launchable {
            cluster,
            cloud,
            network,
            class,
            types,
        })
    }
}

impl Launchable {
    /// The launch request of a [`node_claim`] against this class and its instance types.
    pub fn request(
        &self,
        claim: &str,
        instance_types: &[&str],
        capacity_types: &[&str],
    ) -> Result<kerf::cloud::LaunchRequest<'_>> {
        let claim = node_claim(claim, instance_types, capacity_types)?;
        Ok(kerf::cloud::LaunchRequest::from_node_claim(
            &claim,
            self.class.clone(),
            &self.types,
        )?)
    }
}

/// An SQS queue on the emulator, for a controller's `--interruption-queue` (create it before the controller
/// starts: the controller looks its URL up once).
pub struct InterruptionQueue {
    /// What `--interruption-queue` takes.
    pub name: String,
    url: String,
    sqs: aws_sdk_sqs::Client,
}

impl AwsEmu {
    /// A new queue named `<prefix>-<unique>`.
    pub async fn interruption_queue(&self, prefix: &str) -> Result<InterruptionQueue> {
        let name = unique_cluster_name(prefix);
        let settings = self.settings(&name, CONTROL_TIMEOUT)?;
        let sqs = kerf_aws::SqsQueue::client(&settings).await?;
        let url = sqs
            .create_queue()
            .queue_name(&name)
            .send()
            .await?
            .queue_url
            .context("queue URL")?;
        Ok(InterruptionQueue { name, url, sqs })
    }
}

impl InterruptionQueue {
    pub async fn send(&self, body: String) -> Result<()> {
        self.sqs
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .send()
            .await?;
        Ok(())
    }

    /// SQS's `ApproximateNumberOfMessages`: how many messages wait on the queue.
    pub async fn waiting(&self) -> Result<Option<String>> {
        use aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages;
        let answer = self
            .sqs
            .get_queue_attributes()
            .queue_url(&self.url)
            .attribute_names(ApproximateNumberOfMessages)
            .send()
            .await?;
        Ok(answer
            .attributes()
            .and_then(|a| a.get(&ApproximateNumberOfMessages))
            .cloned())
    }
}

/// An EventBridge "EC2 Spot Instance Interruption Warning" for `instance_id`.
pub fn spot_interruption(instance_id: &str) -> String {
    serde_json::json!({"version": "0", "source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning",
           "time": "2026-11-23T00:00:00Z",
           "detail": {"instance-id": instance_id, "instance-action": "terminate"}})
    .to_string()
}

#[cfg(test)]
mod tests {
    /// Faults and call counts are the whole server's: a test of the suite that sets faults or resets the counts on
    /// the emulator every test shares fails the others meanwhile (a class whose dry runs are refused is not
    /// ready, and nothing launches). Each such test must take an emulator of its group
    /// ([`AwsEmu::shared_in_or_skip`](super::AwsEmu::shared_in_or_skip)).
    #[test]
    fn every_suite_test_that_changes_the_emulator_has_an_emulator_of_its_group() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .expect("the suite's folder")
            .map(|entry| entry.expect("an entry").path())
            .filter(|path| path.extension().is_some_and(|e| e == "rs"))
            .collect();
        files.sort();
        let mut shared = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).expect("a suite file");
            // A test is the text from its attribute to the next test's, the helpers after it included.
            for (i, test) in text.split("#[tokio::test]").enumerate().skip(1) {
                let changes = ["set_faults(", "clear_faults(", "reset_calls("]
                    .iter()
                    .any(|call| test.contains(call));
                if changes && !test.contains("_in_or_skip(") {
                    shared.push(format!("{} (test {i})", file.display()));
                }
            }
        }
        assert!(files.len() > 20, "{files:?}");
        assert!(
            shared.is_empty(),
            "tests that change the shared emulator: {shared:?}"
        );
    }
}
