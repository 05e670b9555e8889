//! Pod advice on `/mutate`: the hook reads the latest prepared NodePools from an `ArcSwap` and adds the two advice
//! annotations (see [`super::advice`]). A pod that cannot be advised (no NodePools synced yet, a spec kerf cannot
//! read) is admitted unchanged: advice must never block or fail a workload.

use super::advice::{
    advise, advise_with_volumes, inputs_fingerprint, Advice, Incompatible, INPUTS_ANNOTATION,
};
use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::nodepool::NodePool;
use crate::catalog::Catalog;
use crate::scheduling::volumes::{self, VolumeIndex};
use crate::scheduling::{PodError, PodInfo, Scheduler};
use arc_swap::ArcSwapOption;
use k8s_openapi::api::core::v1::Pod;
use kerf_webhooks::{AdmissionHook, Denial, Mutated, Operation, ReviewRequest};
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// Where pod advice finds the claims, volumes and StorageClasses a pod's volumes refer to (the cluster's, through
/// watches); `None` while they are not known yet.
pub trait VolumeSource: Send + Sync {
    fn index(&self) -> Option<VolumeIndex>;
}

/// At most this many pod shapes are remembered per advisor; the memo starts over when it is full.
const MEMO_CAPACITY: usize = 4096;

/// The NodePools of the cluster prepared against the catalog: built when NodePools or EC2NodeClasses change, read
/// by every pod admission.
pub struct PodAdvisor {
    scheduler: Scheduler<'static>,
    /// Pools that cannot launch anything because their EC2NodeClass does not exist.
    without_class: Vec<Incompatible>,
    /// The annotations already computed, by pod shape (namespace, labels and spec). The replicas of a workload
    /// share one shape, so only its first pod pays for the advice (about a millisecond against the whole catalog);
    /// the memo goes with the advisor when NodePools change.
    memo: Mutex<HashMap<String, Arc<BTreeMap<String, String>>>>,
    /// The fingerprint of the NodePools and EC2NodeClasses this advisor was prepared from, written with every
    /// advice ([`INPUTS_ANNOTATION`]).
    inputs: String,
}

impl PodAdvisor {
    /// Prepares `nodepools`. A pool whose `nodeClassRef` names no EC2NodeClass among `nodeclasses` is not tried
    /// (Karpenter does not launch from it either) and is reported as incompatible with every pod.
    pub fn new(
        nodepools: &[NodePool],
        nodeclasses: &[EC2NodeClass],
        catalog: &'static Catalog,
    ) -> Self {
        let (usable, without_class): (Vec<NodePool>, Vec<NodePool>) =
            nodepools.iter().cloned().partition(|pool| {
                let class = &pool.spec.template.spec.node_class_ref;
                class.group == "karpenter.k8s.aws"
                    && class.kind == "EC2NodeClass"
                    && nodeclasses
                        .iter()
                        .any(|nc| nc.metadata.name.as_deref() == Some(class.name.as_str()))
            });
        let without_class = without_class
            .iter()
            .map(|pool| {
                let class = &pool.spec.template.spec.node_class_ref;
                Incompatible {
                    node_pool: pool.metadata.name.clone().unwrap_or_default(),
                    reason: format!(
                        "nodeClassRef {}/{} {:?} not found",
                        class.group, class.kind, class.name
                    ),
                }
            })
            .collect();
        PodAdvisor {
            scheduler: Scheduler::new(&usable, catalog),
            without_class,
            memo: Mutex::default(),
            inputs: inputs_fingerprint(nodepools, nodeclasses),
        }
    }

    /// The advice annotations for `pod` (raw JSON) created in `namespace`, from the memo when a pod of the same
    /// shape was advised before. A pod with PersistentVolumeClaims (or generic ephemeral volumes) is advised with
    /// `volumes`' index, when there is one, and never memoised: its advice depends on those objects, not only on
    /// its shape.
    pub fn annotations(
        &self,
        pod: &Value,
        namespace: Option<&str>,
        volumes: Option<&dyn VolumeSource>,
    ) -> Result<Arc<BTreeMap<String, String>>, AdviceError> {
        let namespace = pod["metadata"]["namespace"].as_str().or(namespace);
        let shape = serde_json::to_string(&(namespace, &pod["metadata"]["labels"], &pod["spec"]))
            .map_err(AdviceError::Encode)?;
        if let Some(known) = self.memo().get(&shape) {
            return Ok(known.clone());
        }
        let mut typed = Pod::deserialize(pod).map_err(AdviceError::Parse)?;
        // A pod being created carries its namespace in the request, not always in its metadata; affinity terms
        // need it.
        typed.metadata.namespace = namespace.map(str::to_owned);
        if typed.metadata.name.is_none() {
            typed.metadata.name = typed.metadata.generate_name.clone();
        }
        let info = PodInfo::from_pod(&typed)?;
        if volumes::uses_claims(&typed) {
            let advice = match volumes.and_then(VolumeSource::index) {
                Some(index) => {
                    self.finish(advise_with_volumes(&self.scheduler, info, &typed, &index))
                }
                None => self.advise(&info),
            };
            return Ok(Arc::new(self.annotations_of(&advice)?));
        }
        let annotations = Arc::new(self.annotations_of(&self.advise(&info))?);
        let mut memo = self.memo();
        if memo.len() >= MEMO_CAPACITY {
            memo.clear();
        }
        memo.insert(shape, annotations.clone());
        Ok(annotations)
    }

    /// The fingerprint of the NodePools and EC2NodeClasses this advisor was prepared from.
    pub fn inputs(&self) -> &str {
        &self.inputs
    }

    /// `advice` as the pod's annotations, with the fingerprint of the advisor's inputs.
    fn annotations_of(&self, advice: &Advice) -> Result<BTreeMap<String, String>, AdviceError> {
        let mut annotations = advice.annotations().map_err(AdviceError::Encode)?;
        annotations.insert(INPUTS_ANNOTATION.to_owned(), self.inputs.clone());
        Ok(annotations)
    }

    /// The memo; a panic elsewhere while it was held cannot have left it inconsistent (one insert), so a poisoned
    /// lock is used as is.
    fn memo(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<BTreeMap<String, String>>>> {
        self.memo
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn advise(&self, pod: &PodInfo) -> Advice {
        self.finish(advise(&self.scheduler, pod))
    }

    /// `advice` with the pools that have no EC2NodeClass added as incompatible.
    fn finish(&self, mut advice: Advice) -> Advice {
        advice
            .incompatible
            .extend(self.without_class.iter().cloned());
        advice
    }
}

/// Why a pod was admitted without advice (logged at debug level; the pod is never refused).
#[derive(Debug, thiserror::Error)]
pub enum AdviceError {
    #[error("the Pod does not parse: {0}")]
    Parse(#[source] serde_json::Error),
    #[error(transparent)]
    Pod(#[from] PodError),
    #[error("cannot encode the advice: {0}")]
    Encode(#[source] serde_json::Error),
}

/// `pod` (the raw JSON of an admission request in `namespace`) with the advice annotations added.
pub fn annotate(
    advisor: &PodAdvisor,
    pod: &Value,
    namespace: Option<&str>,
    volumes: Option<&dyn VolumeSource>,
) -> Result<Value, AdviceError> {
    let annotations = advisor.annotations(pod, namespace, volumes)?;
    let mut annotated = pod.clone();
    let metadata = annotated.as_object_mut().map(|object| {
        object
            .entry("metadata")
            .or_insert_with(|| Value::Object(Default::default()))
    });
    if let Some(Value::Object(metadata)) = metadata {
        let existing = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if !existing.is_object() {
            *existing = Value::Object(Default::default());
        }
        if let Value::Object(existing) = existing {
            for (key, value) in annotations.iter() {
                existing.insert(key.clone(), Value::String(value.clone()));
            }
        }
    }
    Ok(annotated)
}

/// The Pod hook: advice on CREATE from whatever [`PodAdvisor`] is current; `None` until the NodePools synced.
pub struct PodHook {
    pub advisor: Arc<ArcSwapOption<PodAdvisor>>,
    /// The cluster's claims, volumes and classes; `None` where kerf does not watch them.
    pub volumes: Option<Arc<dyn VolumeSource>>,
}

impl AdmissionHook for PodHook {
    /// Advice is a courtesy: a pod whose advice misses the deadline is admitted without it (its webhook's failure
    /// policy is Ignore for the same reason), never refused.
    fn allow_on_timeout(&self) -> bool {
        true
    }

    fn mutate(&self, request: &ReviewRequest) -> Result<Mutated, Denial> {
        if request.operation != Operation::Create {
            return Ok(Mutated::default());
        }
        let (Some(pod), Some(advisor)) = (request.object.as_ref(), self.advisor.load_full()) else {
            return Ok(Mutated::default());
        };
        match annotate(
            &advisor,
            pod,
            request.namespace.as_deref(),
            self.volumes.as_deref(),
        ) {
            Ok(annotated) => Ok(Mutated {
                object: Some(annotated),
                warnings: Vec::new(),
            }),
            Err(error) => {
                tracing::debug!(namespace = ?request.namespace, name = %request.name, %error, "pod admitted without advice");
                Ok(Mutated::default())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{CatalogSettings, Pricing};
    use kerf_webhooks::GroupVersionKind;
    use serde_json::json;
    use std::sync::OnceLock;

    fn catalog() -> &'static Catalog {
        static CATALOG: OnceLock<Catalog> = OnceLock::new();
        CATALOG.get_or_init(|| {
            Catalog::embedded("us-east-1", &CatalogSettings::default(), &Pricing::none())
                .expect("embedded catalog")
        })
    }

    fn nodepool(name: &str, class: &str) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": class},
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}}}
        }))
        .expect("nodepool")
    }

    fn nodeclass(name: &str) -> EC2NodeClass {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name},
            "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                     "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}]}
        }))
        .expect("nodeclass")
    }

    fn pod(node_selector: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "inflate-", "labels": {"app": "inflate"}},
            "spec": {"nodeSelector": node_selector,
                     "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]}})
    }

    fn request(operation: Operation, object: Value) -> ReviewRequest {
        ReviewRequest {
            uid: "u".into(),
            kind: GroupVersionKind::gvk("", "v1", "Pod"),
            operation,
            name: String::new(),
            namespace: Some("apps".into()),
            dry_run: false,
            object: Some(object),
            old_object: None,
        }
    }

    fn hook(advisor: Option<PodAdvisor>) -> PodHook {
        PodHook {
            advisor: Arc::new(ArcSwapOption::new(advisor.map(Arc::new))),
            volumes: None,
        }
    }

    fn annotations(mutated: &Mutated) -> (Value, String) {
        let object = mutated.object.as_ref().expect("annotated");
        let annotations = &object["metadata"]["annotations"];
        let requirements = annotations["kerf.sh/instance-requirements"]
            .as_str()
            .expect("requirements annotation");
        (
            serde_json::from_str(requirements).expect("compact JSON"),
            annotations["kerf.sh/instance-summary"]
                .as_str()
                .expect("summary annotation")
                .to_owned(),
        )
    }

    /// The `default` NodePool (amd64) with its EC2NodeClass.
    fn default_advisor() -> PodAdvisor {
        PodAdvisor::new(
            &[nodepool("default", "default")],
            &[nodeclass("default")],
            catalog(),
        )
    }

    #[test]
    fn names_the_pools_that_fit() {
        let advisor = default_advisor();
        let mutated = hook(Some(advisor))
            .mutate(&request(Operation::Create, pod(json!({}))))
            .expect("allowed");
        let (requirements, summary) = annotations(&mutated);
        assert_eq!(requirements["nodePools"][0]["name"], "default");
        assert!(requirements["nodePools"][0]["instanceTypes"].as_u64() > Some(10));
        assert_eq!(requirements["requests"]["cpu"], "1");
        assert!(summary.starts_with("1 nodepool; default: "), "{summary}");
        // Everything else of the pod is untouched.
        let mut expected = pod(json!({}));
        expected["metadata"]["annotations"] =
            mutated.object.as_ref().expect("object")["metadata"]["annotations"].clone();
        assert_eq!(mutated.object, Some(expected));
    }

    /// The advice names what it was computed from; a changed NodePool spec (a new generation) or a new
    /// EC2NodeClass gives another fingerprint, which is how the controller finds stale advice.
    #[test]
    fn advice_carries_the_fingerprint_of_its_pools_and_classes() {
        let advisor = default_advisor();
        let annotations = advisor
            .annotations(&pod(json!({})), Some("apps"), None)
            .expect("advice");
        assert_eq!(
            annotations.get(INPUTS_ANNOTATION).map(String::as_str),
            Some(advisor.inputs())
        );
        let mut changed = nodepool("default", "default");
        changed.metadata.generation = Some(2);
        let other = PodAdvisor::new(&[changed], &[nodeclass("default")], catalog());
        assert_ne!(other.inputs(), advisor.inputs());
        let more = PodAdvisor::new(
            &[nodepool("default", "default")],
            &[nodeclass("default"), nodeclass("gpu")],
            catalog(),
        );
        assert_ne!(more.inputs(), advisor.inputs());
        // The same objects in another order are the same inputs.
        let reordered = PodAdvisor::new(
            &[nodepool("default", "default")],
            &[nodeclass("gpu"), nodeclass("default")],
            catalog(),
        );
        assert_eq!(reordered.inputs(), more.inputs());
    }

    #[test]
    fn says_why_no_pool_fits() {
        let advisor = default_advisor();
        let mutated = hook(Some(advisor))
            .mutate(&request(
                Operation::Create,
                pod(json!({"kubernetes.io/arch": "arm64"})),
            ))
            .expect("allowed");
        let (requirements, summary) = annotations(&mutated);
        assert_eq!(requirements["nodePools"], json!([]));
        assert_eq!(requirements["incompatible"][0]["nodePool"], "default");
        assert!(
            summary.starts_with("no nodepool fits: default: ") && summary.contains("arm64"),
            "{summary}"
        );
    }

    #[test]
    fn pods_of_one_shape_share_the_advice_and_other_shapes_get_their_own() {
        let advisor = default_advisor();
        let first = advisor
            .annotations(&pod(json!({})), Some("apps"), None)
            .expect("advice");
        let again = advisor
            .annotations(&pod(json!({})), Some("apps"), None)
            .expect("advice");
        assert!(
            Arc::ptr_eq(&first, &again),
            "the second replica is served from the memo"
        );
        let arm = advisor
            .annotations(
                &pod(json!({"kubernetes.io/arch": "arm64"})),
                Some("apps"),
                None,
            )
            .expect("advice");
        assert_ne!(first, arm);
        let elsewhere = advisor
            .annotations(&pod(json!({})), Some("other"), None)
            .expect("advice");
        assert!(
            !Arc::ptr_eq(&first, &elsewhere),
            "the namespace is part of the shape"
        );
    }

    #[test]
    fn a_pool_without_its_nodeclass_is_incompatible() {
        let advisor = PodAdvisor::new(
            &[
                nodepool("default", "default"),
                nodepool("orphan", "missing"),
            ],
            &[nodeclass("default")],
            catalog(),
        );
        let (requirements, _) = annotations(
            &hook(Some(advisor))
                .mutate(&request(Operation::Create, pod(json!({}))))
                .expect("allowed"),
        );
        assert_eq!(
            requirements["incompatible"],
            json!([{"nodePool": "orphan", "reason": "nodeClassRef karpenter.k8s.aws/EC2NodeClass \"missing\" not found"}])
        );
    }

    #[test]
    fn admits_unchanged_what_it_cannot_advise() {
        let advisor = || Some(default_advisor());
        let unchanged = Ok(Mutated::default());
        // Nothing synced yet.
        assert_eq!(
            hook(None).mutate(&request(Operation::Create, pod(json!({})))),
            unchanged
        );
        // Not a CREATE.
        assert_eq!(
            hook(advisor()).mutate(&request(Operation::Update, pod(json!({})))),
            unchanged
        );
        // A spec kerf cannot read.
        let mut bad = pod(json!({}));
        bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("lots");
        assert_eq!(
            hook(advisor()).mutate(&request(Operation::Create, bad)),
            unchanged
        );
        assert_eq!(
            hook(advisor()).mutate(&request(Operation::Create, json!({"spec": "x"}))),
            unchanged
        );
    }

    /// A cluster with one claim `data` in namespace `apps`, bound to a volume in `zone`.
    struct OneVolume {
        zone: &'static str,
    }

    impl VolumeSource for OneVolume {
        fn index(&self) -> Option<VolumeIndex> {
            let claim = serde_json::from_value(json!({"metadata": {"name": "data", "namespace": "apps",
                "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                "spec": {"volumeName": "pv-1", "storageClassName": ""}, "status": {"phase": "Bound"}}))
            .expect("claim");
            let volume = serde_json::from_value(json!({"metadata": {"name": "pv-1"},
                "spec": {"capacity": {"storage": "1Gi"}, "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
                         "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                             {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [self.zone]}]}]}}}}))
            .expect("volume");
            Some(VolumeIndex::from_objects(
                [Arc::new(claim)],
                [Arc::new(volume)],
                [],
            ))
        }
    }

    fn with_claim(claim: &str) -> Value {
        let mut pod = pod(json!({}));
        pod["spec"]["volumes"] =
            json!([{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]);
        pod
    }

    #[test]
    fn advice_follows_the_zone_of_a_pods_volume() {
        // As the controller plans it (Karpenter's volume topology): the claim's volume pins the node's zone, a
        // volume in a zone no offering has fits no pool, and a missing claim keeps the pod out with its reason.
        let advisor = default_advisor();
        let advise = |pod: &Value, zone| {
            let source = OneVolume { zone };
            let annotations = advisor
                .annotations(pod, Some("apps"), Some(&source))
                .expect("advice");
            serde_json::from_str::<Value>(&annotations["kerf.sh/instance-requirements"])
                .expect("json")
        };
        let in_b = advise(&with_claim("data"), "us-east-1b");
        assert_eq!(
            in_b["nodePools"][0]["cheapest"]["zone"], "us-east-1b",
            "{in_b}"
        );
        let in_c = advise(&with_claim("data"), "us-east-1c");
        assert_eq!(
            in_c["nodePools"][0]["cheapest"]["zone"], "us-east-1c",
            "{in_c}"
        );
        let nowhere = advise(&with_claim("data"), "mars-1a");
        assert_eq!(nowhere["nodePools"], json!([]), "{nowhere}");
        assert_eq!(nowhere["incompatible"][0]["nodePool"], "default");
        let missing = advise(&with_claim("other"), "us-east-1b");
        assert_eq!(missing["nodePools"], json!([]));
        assert_eq!(
            missing["incompatible"][0]["reason"],
            "getting persistent volume claim, persistentvolumeclaims \"other\" not found",
            "{missing}"
        );
        // Until the claims are known the pod gets the advice of its shape alone.
        let unknown = advisor
            .annotations(&with_claim("other"), Some("apps"), None)
            .expect("advice");
        assert!(unknown["kerf.sh/instance-summary"].starts_with("1 nodepool; default:"));
    }
}
