//! An EC2NodeClass's `ValidationSucceeded` (Karpenter's `controllers/nodeclass/validation.go`), decided in
//! this order:
//! 1. the resolution it needs (AMIs, instance profile, security groups, subnets): `False` when one of them
//!    failed, `Unknown` while one is undecided (`DependenciesNotReady`);
//! 2. `spec.tags`: none of the keys kerf tags instances with itself (`TagValidationFailed`);
//! 3. the admission rules of the webhook, which a class that slipped past it (webhook down, an old apiserver
//!    ignoring CEL) breaks (`EC2NodeClassValidationFailed`, kerf's: Karpenter relies on CEL alone);
//! 4. whether the cloud would allow launches from it ([`crate::cloud::CloudProvider::check_launch`]): the launch
//!    template one on-demand launch uses, then dry runs of CreateFleet and RunInstances. The answer is kept
//!    [`CHECK_TTL`] for what the class and its resolution are (a change asks again).
//!
//! The instance type the check launches is one the class's NodePools would launch (the cheapest, without
//! accelerators if any will do), else m5.large or m6g.large, else the cheapest the class offers.

use super::conditions::{AMIS_READY, INSTANCE_PROFILE_READY, SECURITY_GROUPS_READY, SUBNETS_READY};
use crate::api::condition::{self, Condition, FALSE, TRUE, UNKNOWN};
use crate::api::ec2nodeclass::{validate_ec2nodeclass, EC2NodeClass, EC2NodeClassStatus};
use crate::api::labels;
use crate::api::nodepool::NodePool;
use crate::api::requirements::{Requirement, Requirements};
use crate::api::validation::Findings;
use crate::catalog::{CapacityType, Catalog, InstanceType, Resources};
use crate::cloud::{LaunchRefusal, LaunchRequest, NodeClass, TAG_CLUSTER_PREFIX};
use crate::cloud::{TAG_EC2NODECLASS, TAG_EKS_CLUSTER_NAME, TAG_NODECLAIM, TAG_NODEPOOL};
use crate::scheduling::Template;
use std::borrow::Cow;
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// How long a cloud check's answer is kept (Karpenter's `ValidationTTL`).
pub const CHECK_TTL: Duration = Duration::from_secs(30 * 60);
/// How often a validated class is validated again (Karpenter's validation requeue).
pub const REVALIDATE: Duration = Duration::from_secs(10 * 60);

const DEPENDENCIES: [&str; 4] = [
    AMIS_READY,
    INSTANCE_PROFILE_READY,
    SECURITY_GROUPS_READY,
    SUBNETS_READY,
];
const DEPENDENCIES_NOT_READY: (&str, &str) = (
    "DependenciesNotReady",
    "Awaiting AMI, Instance Profile, Security Group, and Subnet resolution",
);
/// The fallback instance types, one per architecture (Karpenter's).
const FALLBACK_TYPES: [&str; 2] = ["m5.large", "m6g.large"];

/// `ValidationSucceeded` as one validation decided it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub status: &'static str,
    pub reason: String,
    pub message: String,
}

impl Verdict {
    pub fn succeeded() -> Self {
        Verdict {
            status: TRUE,
            reason: super::conditions::VALIDATION_SUCCEEDED.to_owned(),
            message: String::new(),
        }
    }

    fn failed(reason: &str, message: impl Into<String>) -> Self {
        Verdict {
            status: FALSE,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }

    /// Resolution failed for a reason no resolution condition covers: waiting on it, with the reason.
    pub fn unresolved(why: &str) -> Self {
        let (reason, message) = DEPENDENCIES_NOT_READY;
        Verdict {
            status: UNKNOWN,
            reason: reason.to_owned(),
            message: format!("{message}: {why}"),
        }
    }

    /// The verdict of a cloud check.
    pub fn of(refusal: Option<&LaunchRefusal>) -> Self {
        match refusal {
            None => Verdict::succeeded(),
            Some(refusal) => Verdict::failed(refusal.call.reason(), refusal.message()),
        }
    }

    /// The condition as `(type, status, reason, message)`.
    pub fn condition(&self) -> (&str, &str, &str, &str) {
        (
            super::conditions::VALIDATION_SUCCEEDED,
            self.status,
            &self.reason,
            &self.message,
        )
    }
}

/// What decides the verdict without asking the cloud, if anything does: the resolution the class needs
/// (`conditions`), its tags, and the webhook's rules.
pub fn precheck(class: &EC2NodeClass, conditions: &[Condition]) -> Option<Verdict> {
    // A dependency not set yet is waiting for its first verdict.
    let any = |status: &str| {
        DEPENDENCIES.iter().any(|type_| {
            condition::get(conditions, type_).map_or(UNKNOWN, |c| c.status.as_str()) == status
        })
    };
    let (reason, message) = DEPENDENCIES_NOT_READY;
    if any(FALSE) {
        return Some(Verdict::failed(reason, message));
    }
    if any(UNKNOWN) {
        return Some(Verdict {
            status: UNKNOWN,
            reason: reason.to_owned(),
            message: message.to_owned(),
        });
    }
    if let Some(message) = restricted_tags(class) {
        return Some(Verdict::failed("TagValidationFailed", message));
    }
    let mut findings = Findings::default();
    validate_ec2nodeclass(class, &mut findings);
    if !findings.errors.is_empty() {
        let message = findings
            .errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        return Some(Verdict::failed("EC2NodeClassValidationFailed", message));
    }
    None
}

/// The error for tags kerf sets itself (Karpenter's `RestrictedTagPatterns`), if the class has any.
fn restricted_tags(class: &EC2NodeClass) -> Option<String> {
    let restricted = |key: &str| match key.strip_prefix(TAG_CLUSTER_PREFIX) {
        // A cluster name as EKS allows it.
        Some(cluster) => {
            let mut chars = cluster.chars();
            chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        }
        None => [
            TAG_NODEPOOL,
            TAG_EKS_CLUSTER_NAME,
            TAG_EC2NODECLASS,
            TAG_NODECLAIM,
        ]
        .contains(&key),
    };
    let keys: Vec<String> = class
        .spec
        .tags
        .iter()
        .flatten()
        .map(|(key, _)| key)
        .filter(|key| restricted(key))
        .map(|key| format!("{key:?}"))
        .collect();
    (!keys.is_empty()).then(|| {
        format!(
            "tags failed validation requirements (tags={})",
            keys.join(", ")
        )
    })
}

/// What a cloud check's answer depends on: the resolution, the spec, the annotations.
pub fn check_key(class: &EC2NodeClass, status: &EC2NodeClassStatus) -> u64 {
    let parts = serde_json::json!([
        status.subnets,
        status.security_groups,
        status.amis,
        status.instance_profile,
        class.spec,
        class.metadata.annotations,
    ]);
    let mut hasher = DefaultHasher::new();
    parts.to_string().hash(&mut hasher);
    hasher.finish()
}

/// The cloud checks' answers, one per class (the latest), each for [`CHECK_TTL`].
#[derive(Debug, Default)]
pub struct Checks(Mutex<HashMap<String, (u64, Verdict, SystemTime)>>);

impl Checks {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, Verdict, SystemTime)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The answer for class `name` as `key` describes it, if one was kept at `now`.
    pub fn get(&self, name: &str, key: u64, now: SystemTime) -> Option<Verdict> {
        let checks = self.lock();
        let (kept_key, verdict, at) = checks.get(name)?;
        let fresh = now.duration_since(*at).is_ok_and(|age| age < CHECK_TTL);
        (*kept_key == key && fresh).then(|| verdict.clone())
    }

    pub fn put(&self, name: &str, key: u64, verdict: Verdict, now: SystemTime) {
        self.lock().insert(name.to_owned(), (key, verdict, now));
    }

    /// Forgets class `name` (deleted).
    pub fn forget(&self, name: &str) {
        self.lock().remove(name);
    }
}

/// The instance type a check launches for `node_class`, from the types it offers (`types`) and the NodePools
/// that use it.
pub fn candidate(
    node_class: &NodeClass,
    mut types: Vec<InstanceType>,
    pools: &[Arc<NodePool>],
) -> Option<InstanceType> {
    types.retain(|it| has_image(node_class, it) && on_demand(it));
    let catalog = Catalog {
        instance_types: types,
    };
    let launchable = &catalog.instance_types;
    let allocatable: Vec<Resources> = launchable.iter().map(InstanceType::allocatable).collect();
    let mut compatible: Vec<usize> = Vec::new();
    for pool in pools
        .iter()
        .filter(|p| p.spec.template.spec.node_class_ref.name == node_class.name)
    {
        // A pool whose requirements do not parse launches nothing; its own validation says why.
        if let Ok(template) = Template::new(pool, &catalog, &allocatable) {
            for &i in template.instance_types.iter() {
                if !compatible.contains(&i) {
                    compatible.push(i);
                }
            }
        }
    }
    let standard = compatible
        .iter()
        .map(|i| &launchable[*i])
        .find(|it| !accelerated(it));
    standard
        .or_else(|| compatible.first().map(|i| &launchable[*i]))
        .or_else(|| {
            FALLBACK_TYPES
                .iter()
                .find_map(|name| launchable.iter().find(|it| it.name == *name))
        })
        .or_else(|| cheapest(launchable))
        .cloned()
}

fn cheapest(types: &[InstanceType]) -> Option<&InstanceType> {
    let price = |it: &InstanceType| {
        it.offerings
            .iter()
            .filter(|o| o.capacity_type == CapacityType::OnDemand)
            .filter_map(|o| o.price)
            .fold(f64::INFINITY, f64::min)
    };
    types.iter().min_by(|a, b| {
        price(a)
            .total_cmp(&price(b))
            .then_with(|| a.name.cmp(&b.name))
    })
}

fn on_demand(it: &InstanceType) -> bool {
    it.offerings
        .iter()
        .any(|o| o.capacity_type == CapacityType::OnDemand)
}

/// Whether the class resolved an image the type boots.
fn has_image(node_class: &NodeClass, it: &InstanceType) -> bool {
    node_class.resolved.ami_for(it).is_some()
}

/// GPUs, Neuron or other accelerators: such types may boot a bigger image than the class's volumes allow.
fn accelerated(it: &InstanceType) -> bool {
    [
        "nvidia.com/gpu",
        "amd.com/gpu",
        "aws.amazon.com/neuron",
        "habana.ai/gaudi",
    ]
    .iter()
    .any(|resource| it.capacity.extended.contains_key(*resource))
}

/// The request a check launches: one on-demand instance of `instance_type` from `node_class`, with no labels
/// or taints (Karpenter checks with an empty NodeClaim).
pub fn launch_request<'a>(
    node_class: NodeClass,
    instance_type: &'a InstanceType,
) -> LaunchRequest<'a> {
    let mut requirements = Requirements::new();
    requirements.add(Requirement::one_of(
        labels::CAPACITY_TYPE,
        [CapacityType::OnDemand.as_str()],
    ));
    LaunchRequest {
        node_claim: String::new(),
        node_pool: String::new(),
        node_class,
        instance_types: vec![Cow::Borrowed(instance_type)],
        requirements,
        labels: Default::default(),
        taints: Vec::new(),
        efa_requested: false,
    }
}

#[cfg(test)]
mod tests;
