//! A stand-in kubelet for end-to-end tests (not shipped): it watches, through the EC2 API it is pointed at,
//! the instances tagged for a cluster, and for each running one registers a Node as a kubelet would —
//! providerID `aws:///<zone>/<id>`, capacity and allocatable of the instance type from kerf's catalog, the
//! labels and taints of the launch template's user data, the well-known labels a kubelet and the cloud
//! provider add — keeps it Ready with a heartbeat, and deletes the Node once the instance is terminated.
//!
//! A test can make a Node unhealthy through [`StandInKubelet::report`]: from then on the kubelet posts that
//! condition with each heartbeat (a `Ready` one in place of its own), as a failing kubelet or the EKS node
//! monitoring agent would.
//!
//! It runs as a background task until the handle is dropped. Errors of one round (an API hiccup) are
//! reported on stderr and the next round tries again.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use aws_sdk_ec2::types as ec2;
use base64::Engine;
use k8s_openapi::api::core::v1::{
    Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kerf::api::labels;
use kerf::catalog::{Catalog, CatalogSettings, InstanceType, Pricing};
use kerf::cloud::{Instance, InstanceState, TAG_CLUSTER_PREFIX};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::Client;
use tokio::task::JoinHandle;

use crate::announce;

/// How the stand-in kubelet behaves.
#[derive(Clone, Debug)]
pub struct KubeletSettings {
    /// Instances tagged `kubernetes.io/cluster/<cluster_name>` are its to register.
    pub cluster_name: String,
    pub region: String,
    /// How often it looks for new and terminated instances.
    pub poll_interval: Duration,
    /// How often it renews the Ready condition (node-lifecycle marks a Node NotReady ~40 s after the last).
    pub heartbeat_interval: Duration,
    /// The bound on one EC2 or Kubernetes call.
    pub call_timeout: Duration,
}

impl KubeletSettings {
    pub fn new(cluster_name: &str, region: &str) -> Self {
        KubeletSettings {
            cluster_name: cluster_name.to_owned(),
            region: region.to_owned(),
            poll_interval: Duration::from_millis(500),
            heartbeat_interval: Duration::from_secs(5),
            call_timeout: Duration::from_secs(20),
        }
    }
}

/// Conditions a test made Nodes report, by Node name.
type Faults = Arc<Mutex<HashMap<String, Vec<NodeCondition>>>>;

/// A running stand-in kubelet; it stops when dropped.
pub struct StandInKubelet {
    task: JoinHandle<()>,
    faults: Faults,
}

impl StandInKubelet {
    /// Starts registering Nodes in the cluster of `client` for the instances `ec2` lists.
    pub fn start(
        client: Client,
        ec2: aws_sdk_ec2::Client,
        settings: KubeletSettings,
    ) -> Result<Self> {
        let catalog = Catalog::embedded(
            &settings.region,
            &CatalogSettings::default(),
            &Pricing::none(),
        )
        .context("loading kerf's catalog for node capacity")?;
        let faults = Faults::default();
        let mut state = State {
            faults: faults.clone(),
            nodes: Api::all(client),
            ec2,
            catalog,
            settings,
            registered: HashMap::new(),
            last_heartbeat: None,
        };
        let task = tokio::spawn(async move {
            loop {
                if let Err(e) = state.round().await {
                    announce(&format!("stand-in kubelet: {e:#}"));
                }
                tokio::time::sleep(state.settings.poll_interval).await;
            }
        });
        Ok(StandInKubelet { task, faults })
    }

    /// Makes the Node `node` report `condition` from its next heartbeat on (replacing an earlier one of the same
    /// type; a `Ready` condition replaces the kubelet's own).
    pub fn report(&self, node: &str, condition: NodeCondition) {
        let mut faults = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        let list = faults.entry(node.to_owned()).or_default();
        list.retain(|c| c.type_ != condition.type_);
        list.push(condition);
    }
}

impl Drop for StandInKubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct State {
    faults: Faults,
    nodes: Api<Node>,
    ec2: aws_sdk_ec2::Client,
    catalog: Catalog,
    settings: KubeletSettings,
    /// Instance ID → Node name, for the Nodes this kubelet registered.
    registered: HashMap<String, String>,
    last_heartbeat: Option<tokio::time::Instant>,
}

impl State {
    /// One look at the instances; a failure with one instance or Node is reported and retried next round
    /// without holding up the others.
    async fn round(&mut self) -> Result<()> {
        let instances = self.instances().await?;
        for (instance, details) in &instances {
            let registered = self.registered.get(&instance.id).cloned();
            let outcome = match registered {
                None if instance.state == InstanceState::Running => {
                    self.register(instance, details).await.map(|name| {
                        self.registered.insert(instance.id.clone(), name);
                    })
                }
                Some(name) if instance.state.is_gone() => self.deregister(&name).await.map(|()| {
                    self.registered.remove(&instance.id);
                }),
                _ => Ok(()),
            };
            if let Err(e) = outcome {
                announce(&format!(
                    "stand-in kubelet: instance {}: {e:#}",
                    instance.id
                ));
            }
        }
        let due = self
            .last_heartbeat
            .is_none_or(|t| t.elapsed() >= self.settings.heartbeat_interval);
        if due {
            for name in self.registered.values() {
                if let Err(e) = self.heartbeat(name).await {
                    announce(&format!("stand-in kubelet: {e:#}"));
                }
            }
            self.last_heartbeat = Some(tokio::time::Instant::now());
        }
        Ok(())
    }

    /// Every instance tagged for the cluster, terminated ones included, with EC2's description.
    async fn instances(&self) -> Result<Vec<(Instance, ec2::Instance)>> {
        let filter = ec2::Filter::builder()
            .name("tag-key")
            .values(format!(
                "{TAG_CLUSTER_PREFIX}{}",
                self.settings.cluster_name
            ))
            .build();
        let reservations = kerf_aws::collect_pages("DescribeInstances", |token| {
            let request = self
                .ec2
                .describe_instances()
                .filters(filter.clone())
                .max_results(500)
                .set_next_token(token);
            let timeout = self.settings.call_timeout;
            async move {
                let out = tokio::time::timeout(timeout, request.send())
                    .await
                    .map_err(|_| kerf::cloud::CloudError::Timeout {
                        operation: "DescribeInstances",
                        after: timeout,
                    })?
                    .map_err(|e| {
                        kerf::cloud::CloudError::InvalidRequest(format!("DescribeInstances: {e}"))
                    })?;
                Ok((out.reservations.unwrap_or_default(), out.next_token))
            }
        })
        .await?;
        Ok(reservations
            .iter()
            .flat_map(|r| r.instances())
            .filter_map(|i| Some((kerf_aws::instance_from_ec2(i)?, i.clone())))
            .collect())
    }

    /// The labels and taints the instance's user data (from its launch template) tells its kubelet to
    /// register with: what a real kubelet reads through the instance metadata service.
    async fn registration(
        &self,
        instance: &Instance,
    ) -> Result<(BTreeMap<String, String>, Vec<Taint>)> {
        let attribute = tokio::time::timeout(
            self.settings.call_timeout,
            self.ec2
                .describe_instance_attribute()
                .instance_id(&instance.id)
                .attribute(ec2::InstanceAttributeName::UserData)
                .send(),
        )
        .await
        .context("DescribeInstanceAttribute timed out")?
        .context("DescribeInstanceAttribute userData")?;
        let encoded = attribute
            .user_data()
            .and_then(|u| u.value())
            .ok_or_else(|| anyhow!("instance {} has no user data", instance.id))?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .context("decoding user data")?;
        let text = String::from_utf8(decoded).context("user data is not UTF-8")?;
        let (labels, taints) = kerf_aws::registration(&text)
            .ok_or_else(|| anyhow!("the user data of {} carries no NodeConfig", instance.id))?;
        let taints = taints
            .into_iter()
            .map(|t| Taint {
                key: t.key,
                value: t.value.filter(|v| !v.is_empty()),
                effect: t.effect.as_str().to_owned(),
                time_added: None,
            })
            .collect();
        Ok((labels, taints))
    }

    async fn register(&self, instance: &Instance, details: &ec2::Instance) -> Result<String> {
        let instance_type = self
            .catalog
            .get(&instance.instance_type)
            .ok_or_else(|| anyhow!("{} is not in kerf's catalog", instance.instance_type))?;
        let (mut node_labels, taints) = self.registration(instance).await?;
        let name = details
            .private_dns_name()
            .filter(|n| !n.is_empty())
            .unwrap_or(&instance.id)
            .to_owned();
        // What a kubelet labels its Node with, as kerf's simulator assumes too.
        let own = kerf::engine::launch::kubelet_labels(
            &name,
            instance_type,
            &instance.zone,
            &self.settings.region,
        );
        let arch = own.get(labels::ARCH).cloned().unwrap_or_default();
        node_labels.extend(own);
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(node_labels),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(instance.provider_id.clone()),
                taints: (!taints.is_empty()).then_some(taints),
                ..Default::default()
            }),
            status: Some(status(instance_type, details, &arch)),
        };
        let created = tokio::time::timeout(
            self.settings.call_timeout,
            self.nodes.create(&PostParams::default(), &node),
        )
        .await
        .context("creating the Node timed out")?;
        match created {
            Ok(_) => {}
            // Registered by an earlier life of this kubelet: adopt it.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("creating Node {name}")),
        }
        self.heartbeat(&name).await?;
        Ok(name)
    }

    /// Renews the Ready condition (and its heartbeat time), and posts the conditions a test made the Node report.
    async fn heartbeat(&self, name: &str) -> Result<()> {
        let now = Time(Timestamp::now());
        let mut conditions = self
            .faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
            .unwrap_or_default();
        for fault in &mut conditions {
            fault.last_heartbeat_time = Some(now.clone());
        }
        if !conditions.iter().any(|c| c.type_ == "Ready") {
            conditions.push(ready(now));
        }
        let patch = serde_json::json!({"status": {"conditions": conditions}});
        tokio::time::timeout(
            self.settings.call_timeout,
            self.nodes
                .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch)),
        )
        .await
        .context("the heartbeat timed out")?
        .with_context(|| format!("heartbeat of Node {name}"))?;
        Ok(())
    }

    async fn deregister(&self, name: &str) -> Result<()> {
        let deleted = tokio::time::timeout(
            self.settings.call_timeout,
            self.nodes.delete(name, &DeleteParams::default()),
        )
        .await
        .context("deleting the Node timed out")?;
        match deleted {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e).with_context(|| format!("deleting Node {name}")),
        }
    }
}

fn ready(now: Time) -> NodeCondition {
    NodeCondition {
        type_: "Ready".into(),
        status: "True".into(),
        reason: Some("KubeletReady".into()),
        message: Some("stand-in kubelet is posting ready status".into()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now),
    }
}

fn quantities(resources: &kerf::catalog::Resources) -> BTreeMap<String, Quantity> {
    resources
        .to_quantities()
        .into_iter()
        .map(|(k, v)| (k, Quantity(v)))
        .collect()
}

fn status(instance_type: &InstanceType, details: &ec2::Instance, arch: &str) -> NodeStatus {
    let mut addresses = Vec::new();
    if let Some(ip) = details.private_ip_address() {
        addresses.push(NodeAddress {
            type_: "InternalIP".into(),
            address: ip.to_owned(),
        });
    }
    NodeStatus {
        capacity: Some(quantities(&instance_type.capacity)),
        allocatable: Some(quantities(&instance_type.allocatable())),
        conditions: Some(vec![ready(Time(Timestamp::now()))]),
        addresses: Some(addresses),
        node_info: Some(NodeSystemInfo {
            architecture: arch.to_owned(),
            operating_system: "linux".into(),
            kubelet_version: crate::K8S_VERSION.into(),
            kube_proxy_version: crate::K8S_VERSION.into(),
            container_runtime_version: "containerd://1.7.0".into(),
            os_image: "Amazon Linux 2023".into(),
            kernel_version: "6.1.0".into(),
            machine_id: details.instance_id().unwrap_or_default().to_owned(),
            system_uuid: details.instance_id().unwrap_or_default().to_owned(),
            boot_id: details.instance_id().unwrap_or_default().to_owned(),
            ..Default::default()
        }),
        ..Default::default()
    }
}
