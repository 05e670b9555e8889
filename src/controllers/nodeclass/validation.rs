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
mod tests {
    use super::*;
    use crate::api::ec2nodeclass::EC2NodeClassStatus;
    use crate::catalog::{CatalogSettings, Pricing};
    use crate::cloud::{ResolvedAmi, ResolvedNodeClass};
    use serde_json::json;

    fn class(spec: serde_json::Value) -> EC2NodeClass {
        let mut base = json!({"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "R",
                              "subnetSelectorTerms": [{"tags": {"k": "v"}}],
                              "securityGroupSelectorTerms": [{"tags": {"k": "v"}}]});
        if let (Some(base), serde_json::Value::Object(extra)) = (base.as_object_mut(), spec) {
            base.extend(extra);
        }
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default", "generation": 1}, "spec": base,
        }))
        .expect("an EC2NodeClass")
    }

    fn conditions(statuses: &[(&str, &str)]) -> Vec<Condition> {
        let mut conditions = Vec::new();
        for (type_, status) in statuses {
            condition::set_status(&mut conditions, type_, status, "r", "", "t", Some(1));
        }
        conditions
    }

    fn resolved_deps() -> Vec<Condition> {
        conditions(&DEPENDENCIES.map(|t| (t, TRUE)))
    }

    /// Karpenter's validation suite, "Preconditions": a required condition False makes the validation False,
    /// one Unknown (or missing) makes it Unknown, both with `DependenciesNotReady`.
    #[test]
    fn validation_waits_for_the_resolution_it_needs() {
        let good = class(json!({}));
        assert_eq!(precheck(&good, &resolved_deps()), None);
        for dependency in DEPENDENCIES {
            let mut failed = resolved_deps();
            condition::set_status(&mut failed, dependency, FALSE, "r", "", "t", Some(1));
            let verdict = precheck(&good, &failed).expect("a verdict");
            assert_eq!(
                (verdict.status, verdict.reason.as_str()),
                (FALSE, "DependenciesNotReady")
            );
            assert_eq!(
                verdict.message,
                "Awaiting AMI, Instance Profile, Security Group, and Subnet resolution"
            );
            let mut unknown = resolved_deps();
            condition::set_status(&mut unknown, dependency, UNKNOWN, "r", "", "t", Some(1));
            let verdict = precheck(&good, &unknown).expect("a verdict");
            assert_eq!(
                (verdict.status, verdict.reason.as_str()),
                (UNKNOWN, "DependenciesNotReady")
            );
        }
        let missing = conditions(&[(AMIS_READY, TRUE)]);
        assert_eq!(precheck(&good, &missing).map(|v| v.status), Some(UNKNOWN));
    }

    /// Karpenter's validation suite, "Tag Validation": each tag kerf sets itself fails the validation with
    /// `TagValidationFailed`; valid tags pass. A class that breaks another admission rule fails too (kerf).
    #[test]
    fn restricted_tags_and_admission_rules_fail_the_validation() {
        for key in [
            "kubernetes.io/cluster/acluster",
            "karpenter.sh/nodepool",
            "eks:eks-cluster-name",
            "karpenter.k8s.aws/ec2nodeclass",
            "karpenter.sh/nodeclaim",
        ] {
            let tagged = class(json!({"tags": {key: "v"}}));
            let verdict = precheck(&tagged, &resolved_deps()).expect(key);
            assert_eq!(
                (verdict.status, verdict.reason.as_str()),
                (FALSE, "TagValidationFailed")
            );
            assert_eq!(
                verdict.message,
                format!("tags failed validation requirements (tags=\"{key}\")")
            );
        }
        let fine = class(json!({"tags": {"team": "a", "kubernetes.io/cluster/-x": "y"}}));
        assert_eq!(restricted_tags(&fine), None);
        let invalid =
            class(json!({"amiSelectorTerms": [{"alias": "al2023@latest", "id": "ami-1"}]}));
        let verdict = precheck(&invalid, &resolved_deps()).expect("invalid");
        assert_eq!(
            (verdict.status, verdict.reason.as_str()),
            (FALSE, "EC2NodeClassValidationFailed")
        );
        assert!(
            verdict.message.contains("mutually exclusive"),
            "{}",
            verdict.message
        );
    }

    /// Karpenter's validation suite: a refusal is kept ("Even though we would succeed on the subsequent call,
    /// we should fail here because we hit the cache"), until the class or its resolution changes ("should not
    /// skip validation when new annotation is added") or it is deleted ("should clear the validation cache
    /// when the nodeclass is deleted"), or the answer is older than the TTL.
    #[test]
    fn a_check_is_kept_for_what_the_class_is() {
        let checks = Checks::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let plain = class(json!({}));
        let status = EC2NodeClassStatus::default();
        let key = check_key(&plain, &status);
        let refused = Verdict::failed("CreateFleetAuthCheckFailed", "m");
        checks.put("default", key, refused.clone(), t0);
        assert_eq!(
            checks.get("default", key, t0 + Duration::from_secs(60)),
            Some(refused)
        );
        assert_eq!(checks.get("default", key, t0 + CHECK_TTL), None);
        let mut annotated = plain.clone();
        annotated.metadata.annotations = Some([("a".to_owned(), "b".to_owned())].into());
        assert_ne!(check_key(&annotated, &status), key);
        let resolved = EC2NodeClassStatus {
            instance_profile: Some("p".into()),
            ..EC2NodeClassStatus::default()
        };
        assert_ne!(check_key(&plain, &resolved), key);
        checks.forget("default");
        assert_eq!(checks.get("default", key, t0), None);
    }

    fn node_class(architectures: &[&str]) -> NodeClass {
        NodeClass {
            name: "default".into(),
            spec: class(json!({})).spec,
            resolved: ResolvedNodeClass {
                amis: architectures
                    .iter()
                    .map(|a| ResolvedAmi {
                        id: format!("ami-{a}"),
                        name: None,
                        architecture: (*a).to_owned(),
                        creation_date: None,
                        variants: Vec::new(),
                        deprecated: false,
                    })
                    .collect(),
                ..ResolvedNodeClass::default()
            },
        }
    }

    fn types(names: &[&str]) -> Vec<InstanceType> {
        let catalog = Catalog::embedded(
            "us-west-2",
            &CatalogSettings::default(),
            &Pricing::snapshot(),
        )
        .expect("catalog");
        catalog
            .instance_types
            .into_iter()
            .filter(|t| names.contains(&t.name.as_str()))
            .collect()
    }

    fn pool(requirements: serde_json::Value) -> Arc<NodePool> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
                "spec": {"template": {"spec": {"requirements": requirements,
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}},
            }))
            .expect("a NodePool"),
        )
    }

    fn name(it: Option<InstanceType>) -> Option<String> {
        it.map(|it| it.name)
    }

    /// Karpenter's validation suite, "NodeClass Filtering" and "Instance Type Prioritization Validation": a
    /// type the class's NodePools launch, non-GPU first ("should prioritize non-GPU instances", "should
    /// fallback to GPU instances when no non-GPU instances exist"); m5.large or m6g.large when the pools allow
    /// none ("should succeed validation using fallback instance types when NodePool requirements are
    /// incompatible with NodeClass AMI"); only types the class has an image for.
    #[test]
    fn the_check_launches_a_type_the_pools_would() {
        let offered = types(&[
            "c5.large",
            "g4dn.xlarge",
            "m5.large",
            "m6g.large",
            "m6g.xlarge",
        ]);
        let both = node_class(&["x86_64", "arm64"]);
        let gpu_or_c5 = pool(
            json!([{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                      "values": ["g4dn.xlarge", "c5.large"]}]),
        );
        assert_eq!(
            name(candidate(&both, offered.clone(), &[gpu_or_c5])),
            Some("c5.large".to_owned())
        );
        let gpu_only = pool(
            json!([{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                    "values": ["g4dn.xlarge"]}]),
        );
        assert_eq!(
            name(candidate(&both, offered.clone(), &[gpu_only])),
            Some("g4dn.xlarge".to_owned())
        );
        let nothing = pool(
            json!([{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                   "values": ["x9.huge"]}]),
        );
        assert_eq!(
            name(candidate(
                &both,
                offered.clone(),
                std::slice::from_ref(&nothing)
            )),
            Some("m5.large".to_owned())
        );
        assert_eq!(
            name(candidate(&both, offered.clone(), &[])),
            Some("m5.large".to_owned())
        );
        // Only arm64 images: the arm64 fallback.
        let arm = node_class(&["arm64"]);
        assert_eq!(
            name(candidate(&arm, offered.clone(), &[nothing])),
            Some("m6g.large".to_owned())
        );
        // A pool of another class does not count.
        let mut other = (*pool(json!([]))).clone();
        other.spec.template.spec.node_class_ref.name = "other".into();
        assert_eq!(
            name(candidate(&arm, offered.clone(), &[Arc::new(other)])),
            Some("m6g.large".to_owned())
        );
        // Neither fallback offered: the cheapest.
        let few = types(&["c5.large", "m6g.xlarge"]);
        assert_eq!(
            name(candidate(&both, few.clone(), &[])),
            Some("c5.large".to_owned())
        );
        assert_eq!(name(candidate(&node_class(&[]), few, &[])), None);
    }

    #[test]
    fn the_check_is_one_on_demand_launch_without_labels() {
        let offered = types(&["m5.large"]);
        let request = launch_request(node_class(&["x86_64"]), &offered[0]);
        assert_eq!(request.instance_types.len(), 1);
        assert_eq!(
            request
                .requirements
                .get(labels::CAPACITY_TYPE)
                .and_then(|r| r.any())
                .as_deref(),
            Some("on-demand")
        );
        assert!(request.labels.is_empty() && request.taints.is_empty());
        let refusal = LaunchRefusal::new(
            crate::cloud::RefusedCall::CreateFleet,
            "UnauthorizedOperation",
            "",
        );
        let verdict = Verdict::of(Some(&refusal));
        assert_eq!(
            verdict.condition(),
            (
                "ValidationSucceeded",
                FALSE,
                "CreateFleetAuthCheckFailed",
                "Controller isn't authorized to call ec2:CreateFleet: User is not authorized to perform this \
                 operation because no identity-based policy allows it"
            )
        );
        assert_eq!(Verdict::of(None), Verdict::succeeded());
        let unresolved = Verdict::unresolved("something else");
        assert_eq!(
            (unresolved.status, unresolved.reason.as_str(), unresolved.message.as_str()),
            (
                UNKNOWN,
                "DependenciesNotReady",
                "Awaiting AMI, Instance Profile, Security Group, and Subnet resolution: something else"
            )
        );
    }
}
