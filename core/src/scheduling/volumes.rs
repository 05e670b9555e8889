//! Volume topology: what a pod's PersistentVolumeClaims ask of the node it lands on, and the claims that keep a
//! pod out of the solve altogether (controller-behaviour.md §1.1 "Ignored pods" and §1.3 "Volume topology";
//! Karpenter's `volumetopology.go`). Pure: the caller hands in the claims, volumes and classes it has.
//!
//! * A claim bound to a volume (`spec.volumeName`) asks for that PersistentVolume's
//!   `spec.nodeAffinity.required` terms, each term one alternative (the terms are ORed). For a `local` or
//!   `hostPath` volume the `kubernetes.io/hostname` expressions are dropped: a new node can never be the old host.
//! * A claim not bound yet asks for its StorageClass's `allowedTopologies`, each term one alternative.
//! * A generic ephemeral volume's claim is `<pod>-<volume>`; until the ephemeral-volume controller has made it,
//!   the pod's `volumeClaimTemplate` stands in for it.
//! * A claim that names no class (`storageClassName` unset, not `""`) gets the default StorageClass, as the
//!   apiserver's DefaultStorageClass admission gives it one: the newest class annotated
//!   `storageclass.kubernetes.io/is-default-class: "true"`, ties by name.
//! * A pod with several such volumes must meet one alternative of each: the alternatives are crossed, pairs whose
//!   requirements cannot both hold are left out (all kept if none can), at most [`MAX_ALTERNATIVES`].
//!
//! The alternatives narrow only the node, never the pod's own affinity: [`apply`] gives them to the pod
//! ([`PodInfo::volume_alternatives`]), and the solve tries each node and claim with each in turn. The pod's
//! requirement sets and strict requirements (what a topology spread measures its domains by) stay as they are,
//! as Karpenter keeps them out of `StrictRequirements`.
//! [`VolumeIndex::validate`] refuses what Karpenter ignores a pending pod for (a missing claim, an unknown
//! StorageClass, ...), in Karpenter's words.

use super::PodInfo;
use crate::api::labels;
use crate::api::requirements::{Requirement, RequirementError, Requirements};
use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    Pod, Volume,
};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The annotation that makes a StorageClass the default (`"true"`).
pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";
/// Its beta spelling, which the apiserver still honours.
pub const BETA_DEFAULT_CLASS_ANNOTATION: &str = "storageclass.beta.kubernetes.io/is-default-class";
/// Set by the PersistentVolume controller once it has bound a claim; without it a claim that names its volume is
/// not bound yet (kube-scheduler's rule, which Karpenter follows).
pub const BIND_COMPLETED_ANNOTATION: &str = "pv.kubernetes.io/bind-completed";
/// The most volume-topology alternatives one pod keeps: each multiplies the requirement sets the solve tries,
/// and a pod with many multi-term volumes must not make that a cross product of thousands.
pub const MAX_ALTERNATIVES: usize = 16;

/// The StorageClass binding mode that provisions (and so binds) a claim before any pod uses it; the apiserver's
/// default when a class says nothing.
const IMMEDIATE: &str = "Immediate";

/// Why a pod's volumes keep it out of the solve, in Karpenter's words, then the objects concerned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VolumeError {
    #[error("getting persistent volume claim, persistentvolumeclaims {claim:?} not found")]
    ClaimNotFound { claim: String },
    #[error("persistentvolumeclaim is being deleted (PersistentVolumeClaim={claim})")]
    ClaimDeleting { claim: String },
    #[error("persistentvolumeclaim bound to non-existent persistentvolume (PersistentVolumeClaim={claim}, PersistentVolume={volume})")]
    ClaimLost { claim: String, volume: String },
    #[error("failed to validate pvc, persistentvolumes {volume:?} not found (PersistentVolumeClaim={claim})")]
    VolumeNotFound { claim: String, volume: String },
    #[error("failed to validate pvc, persistentvolume is being deleted (PersistentVolumeClaim={claim}, PersistentVolume={volume})")]
    VolumeDeleting { claim: String, volume: String },
    #[error("pvc is considered unbound because it does not contain annotation (annotation={BIND_COMPLETED_ANNOTATION}, PersistentVolumeClaim={claim}, PersistentVolume={volume})")]
    NotBound { claim: String, volume: String },
    #[error("unbound pvc must define a storage class (PersistentVolumeClaim={claim})")]
    NoStorageClass { claim: String },
    #[error("failed to validate pvc, failed to get storage class, storageclasses.storage.k8s.io {class:?} not found (PersistentVolumeClaim={claim})")]
    ClassNotFound { claim: String, class: String },
    #[error("failed to validate pvc, pvc with immediate volume binding mode must be bound (PersistentVolumeClaim={claim}, StorageClass={class})")]
    ImmediateUnbound { claim: String, class: String },
    /// A PersistentVolume's node affinity that is no requirement (an unknown operator): the apiserver refuses
    /// it, but kerf must not panic on one that slipped past.
    #[error("persistentvolume {volume}: node affinity: {source}")]
    Affinity {
        volume: String,
        #[source]
        source: RequirementError,
    },
}

impl VolumeError {
    /// A short label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            VolumeError::ClaimNotFound { .. } => "claim_not_found",
            VolumeError::ClaimDeleting { .. } => "claim_deleting",
            VolumeError::ClaimLost { .. } => "claim_lost",
            VolumeError::VolumeNotFound { .. } => "volume_not_found",
            VolumeError::VolumeDeleting { .. } => "volume_deleting",
            VolumeError::NotBound { .. } => "claim_not_bound",
            VolumeError::NoStorageClass { .. } => "no_storage_class",
            VolumeError::ClassNotFound { .. } => "class_not_found",
            VolumeError::ImmediateUnbound { .. } => "immediate_unbound",
            VolumeError::Affinity { .. } => "volume_affinity",
        }
    }
}

/// The PersistentVolumeClaims (by namespace and name), PersistentVolumes and StorageClasses (by name) of the
/// cluster, shared with the caller's cache rather than copied.
#[derive(Clone, Debug, Default)]
pub struct VolumeIndex {
    claims: BTreeMap<(String, String), Arc<PersistentVolumeClaim>>,
    volumes: BTreeMap<String, Arc<PersistentVolume>>,
    classes: BTreeMap<String, Arc<StorageClass>>,
    /// The class a claim that names none gets.
    default_class: Option<String>,
    /// The nodes' CSINodes: how many volumes each driver may attach to each.
    csi_nodes: Vec<Arc<CSINode>>,
}

static EMPTY: VolumeIndex = VolumeIndex::new();

impl VolumeIndex {
    /// An index of nothing: every pod without claims is unaffected, every pod with one is refused.
    pub const fn new() -> Self {
        VolumeIndex {
            claims: BTreeMap::new(),
            volumes: BTreeMap::new(),
            classes: BTreeMap::new(),
            default_class: None,
            csi_nodes: Vec::new(),
        }
    }

    /// A shared empty index, for inputs that have no volumes to say.
    pub fn empty() -> &'static VolumeIndex {
        &EMPTY
    }

    /// The index of these objects. Unnamed objects are left out; of two with the same name, the last counts.
    pub fn from_objects(
        claims: impl IntoIterator<Item = Arc<PersistentVolumeClaim>>,
        volumes: impl IntoIterator<Item = Arc<PersistentVolume>>,
        classes: impl IntoIterator<Item = Arc<StorageClass>>,
    ) -> Self {
        let claims = claims
            .into_iter()
            .filter_map(|c| {
                let name = c.metadata.name.clone()?;
                let namespace = namespace_of(&c.metadata).to_owned();
                Some(((namespace, name), c))
            })
            .collect();
        let volumes = volumes
            .into_iter()
            .filter_map(|v| Some((v.metadata.name.clone()?, v)))
            .collect();
        let classes: BTreeMap<String, Arc<StorageClass>> = classes
            .into_iter()
            .filter_map(|c| Some((c.metadata.name.clone()?, c)))
            .collect();
        let default_class = default_class(&classes);
        VolumeIndex {
            claims,
            volumes,
            classes,
            default_class,
            csi_nodes: Vec::new(),
        }
    }

    /// The index with the nodes' CSINodes, whose attach limits the solve keeps to.
    pub fn with_csi_nodes(mut self, csi_nodes: impl IntoIterator<Item = Arc<CSINode>>) -> Self {
        self.csi_nodes = csi_nodes.into_iter().collect();
        self
    }

    /// The nodes' CSINodes.
    pub fn csi_nodes(&self) -> &[Arc<CSINode>] {
        &self.csi_nodes
    }

    /// Whether the index holds no object at all.
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty() && self.volumes.is_empty() && self.classes.is_empty()
    }

    /// The class claims without one get, if any class is the default.
    pub fn default_class(&self) -> Option<&str> {
        self.default_class.as_deref()
    }

    /// For a pending pod: [`Self::validate`], then [`Self::requirements`].
    pub fn pending(&self, pod: &Pod) -> Result<Vec<Requirements>, VolumeError> {
        self.validate(pod)?;
        self.requirements(pod)
    }

    /// Whether the pod's claims let it be planned at all (Karpenter's `ValidatePersistentVolumeClaims`): each
    /// claim exists, is not being deleted or `Lost`; a bound one's volume exists, is not being deleted, and the
    /// binding is complete; an unbound one names a StorageClass that exists and waits for its first consumer.
    pub fn validate(&self, pod: &Pod) -> Result<(), VolumeError> {
        for volume in volumes_of(pod) {
            let Some(claim) = self.claim(pod, volume)? else {
                continue;
            };
            if claim.deleting {
                return Err(VolumeError::ClaimDeleting { claim: claim.id() });
            }
            if claim.lost {
                return Err(VolumeError::ClaimLost {
                    claim: claim.id(),
                    volume: claim.volume_name().to_owned(),
                });
            }
            if !claim.volume_name().is_empty() {
                let pv = self.volume(&claim)?;
                if pv.metadata.deletion_timestamp.is_some() {
                    return Err(VolumeError::VolumeDeleting {
                        claim: claim.id(),
                        volume: claim.volume_name().to_owned(),
                    });
                }
                if !claim.bind_completed {
                    return Err(VolumeError::NotBound {
                        claim: claim.id(),
                        volume: claim.volume_name().to_owned(),
                    });
                }
            } else {
                let class = self.class(&claim)?;
                if class.volume_binding_mode.as_deref().unwrap_or(IMMEDIATE) == IMMEDIATE {
                    return Err(VolumeError::ImmediateUnbound {
                        claim: claim.id(),
                        class: claim.class.to_owned(),
                    });
                }
            }
        }
        Ok(())
    }

    /// The node requirements the pod's volumes impose, as alternatives any one of which will do (Karpenter's
    /// `GetRequirements`); empty when its volumes constrain nothing. An error when a claim, its volume or its
    /// class cannot be found.
    pub fn requirements(&self, pod: &Pod) -> Result<Vec<Requirements>, VolumeError> {
        if !uses_claims(pod) {
            return Ok(Vec::new());
        }
        // One empty alternative, until a volume constrains something.
        let mut alternatives = vec![Requirements::new()];
        let mut constrained = false;
        for volume in volumes_of(pod) {
            let Some(claim) = self.claim(pod, volume)? else {
                continue;
            };
            let own = if !claim.volume_name().is_empty() {
                volume_alternatives(self.volume(&claim)?)?
            } else if !claim.class.is_empty() {
                class_alternatives(self.class(&claim)?)
            } else {
                Vec::new()
            };
            if own.is_empty() {
                continue;
            }
            constrained = true;
            alternatives = cross(&alternatives, &own);
        }
        if !constrained || alternatives.iter().all(Requirements::is_empty) {
            return Ok(Vec::new());
        }
        Ok(alternatives)
    }

    /// The volumes `pod` attaches that count against a node's CSI attach limits (Karpenter's `GetVolumes`): each
    /// claim's driver, from its volume when bound (a CSI volume's driver, or the EBS driver for an in-tree EBS
    /// volume), else from its class's provisioner (in-tree names read as their CSI drivers). A claim, volume or
    /// class that cannot be found counts nothing, as in Karpenter (the pod's validation reports it).
    pub fn attached(&self, pod: &Pod) -> Vec<AttachedVolume> {
        let mut attached: Vec<AttachedVolume> = volumes_of(pod)
            .filter_map(|volume| {
                let claim = self.claim(pod, volume).ok()??;
                let driver = if !claim.volume_name().is_empty() {
                    let spec = self.volumes.get(claim.volume_name())?.spec.as_ref()?;
                    match (&spec.csi, &spec.aws_elastic_block_store) {
                        (Some(csi), _) => csi.driver.clone(),
                        (None, Some(_)) => EBS_CSI_DRIVER.to_owned(),
                        (None, None) => return None,
                    }
                } else {
                    let class = self.classes.get(claim.class)?;
                    csi_driver(&class.provisioner).to_owned()
                };
                Some(AttachedVolume {
                    driver,
                    claim: claim.id(),
                })
            })
            .collect();
        attached.sort();
        attached.dedup();
        attached
    }

    /// The claim `volume` of `pod` uses, if it uses one: a `persistentVolumeClaim` volume's, or a generic
    /// ephemeral volume's (`<pod>-<volume>`, else its template). Other volumes (emptyDir, hostPath, ...) have none.
    fn claim<'a>(
        &'a self,
        pod: &'a Pod,
        volume: &'a Volume,
    ) -> Result<Option<Claim<'a>>, VolumeError> {
        let namespace = namespace_of(&pod.metadata);
        if let Some(source) = &volume.persistent_volume_claim {
            let name = source.claim_name.as_str();
            return match self.claims.get(&(namespace.to_owned(), name.to_owned())) {
                Some(pvc) => Ok(Some(self.claim_of(pvc))),
                None => Err(VolumeError::ClaimNotFound {
                    claim: name.to_owned(),
                }),
            };
        }
        let Some(ephemeral) = &volume.ephemeral else {
            return Ok(None);
        };
        let name = format!(
            "{}-{}",
            pod.metadata.name.as_deref().unwrap_or_default(),
            volume.name
        );
        if let Some(pvc) = self.claims.get(&(namespace.to_owned(), name.clone())) {
            return Ok(Some(self.claim_of(pvc)));
        }
        match &ephemeral.volume_claim_template {
            Some(template) => Ok(Some(Claim {
                namespace,
                name: Cow::Owned(name),
                class: self.class_name(&template.spec),
                spec: Some(&template.spec),
                deleting: false,
                lost: false,
                bind_completed: false,
            })),
            None => Err(VolumeError::ClaimNotFound { claim: name }),
        }
    }

    fn claim_of<'a>(&'a self, pvc: &'a PersistentVolumeClaim) -> Claim<'a> {
        let spec = pvc.spec.as_ref();
        Claim {
            namespace: namespace_of(&pvc.metadata),
            name: Cow::Borrowed(pvc.metadata.name.as_deref().unwrap_or_default()),
            class: spec.map_or("", |s| self.class_name(s)),
            spec,
            deleting: pvc.metadata.deletion_timestamp.is_some(),
            lost: pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost"),
            bind_completed: pvc
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(BIND_COMPLETED_ANNOTATION)),
        }
    }

    /// The class a claim asks for: its own (`""` asks for none), else the default class.
    fn class_name<'a>(&'a self, spec: &'a PersistentVolumeClaimSpec) -> &'a str {
        match (&spec.storage_class_name, &self.default_class) {
            (Some(name), _) => name,
            (None, Some(default)) => default,
            (None, None) => "",
        }
    }

    /// The volume a bound claim names.
    fn volume(&self, claim: &Claim) -> Result<&PersistentVolume, VolumeError> {
        self.volumes
            .get(claim.volume_name())
            .map(AsRef::as_ref)
            .ok_or_else(|| VolumeError::VolumeNotFound {
                claim: claim.id(),
                volume: claim.volume_name().to_owned(),
            })
    }

    /// The class an unbound claim names.
    fn class(&self, claim: &Claim) -> Result<&StorageClass, VolumeError> {
        if claim.class.is_empty() {
            return Err(VolumeError::NoStorageClass { claim: claim.id() });
        }
        self.classes
            .get(claim.class)
            .map(AsRef::as_ref)
            .ok_or_else(|| VolumeError::ClassNotFound {
                claim: claim.id(),
                class: claim.class.to_owned(),
            })
    }
}

/// A claim as the checks read it: a PersistentVolumeClaim, or an ephemeral volume's template.
struct Claim<'a> {
    namespace: &'a str,
    name: Cow<'a, str>,
    /// The class it asks for, the default class filled in; `""` for none.
    class: &'a str,
    spec: Option<&'a PersistentVolumeClaimSpec>,
    deleting: bool,
    lost: bool,
    bind_completed: bool,
}

impl Claim<'_> {
    /// `namespace/name`, for messages.
    fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn volume_name(&self) -> &str {
        self.spec
            .and_then(|s| s.volume_name.as_deref())
            .unwrap_or_default()
    }
}

/// A volume a pod attaches that counts against a node's CSI attach limit: its driver and its claim
/// (`namespace/name`). Pods that share a claim on one node attach it once.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AttachedVolume {
    pub driver: String,
    pub claim: String,
}

/// The EBS CSI driver, which in-tree `awsElasticBlockStore` volumes and the `kubernetes.io/aws-ebs` provisioner
/// migrate to.
pub const EBS_CSI_DRIVER: &str = "ebs.csi.aws.com";

/// The CSI driver of a StorageClass provisioner: an in-tree provisioner's migrated driver (the CSI translation
/// library's names), any other provisioner as it is.
fn csi_driver(provisioner: &str) -> &str {
    match provisioner {
        "kubernetes.io/aws-ebs" => EBS_CSI_DRIVER,
        "kubernetes.io/gce-pd" => "pd.csi.storage.gke.io",
        "kubernetes.io/azure-disk" => "disk.csi.azure.com",
        "kubernetes.io/azure-file" => "file.csi.azure.com",
        "kubernetes.io/cinder" => "cinder.csi.openstack.org",
        "kubernetes.io/vsphere-volume" => "csi.vsphere.vmware.com",
        "kubernetes.io/portworx-volume" => "pxd.portworx.com",
        "kubernetes.io/rbd" => "rbd.csi.ceph.com",
        other => other,
    }
}

/// Plays the PersistentVolume controller for objects written by hand (`kerf simulate`, `kerf validate`): a claim
/// that names one of `volumes` is bound to it (`pv.kubernetes.io/bind-completed`), as it would be moments after
/// both are applied.
pub fn complete_bindings(claims: &mut [PersistentVolumeClaim], volumes: &[PersistentVolume]) {
    let names: std::collections::BTreeSet<&str> = volumes
        .iter()
        .filter_map(|v| v.metadata.name.as_deref())
        .collect();
    for claim in claims {
        let named = claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .is_some_and(|v| names.contains(v));
        if named {
            claim
                .metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .entry(BIND_COMPLETED_ANNOTATION.to_owned())
                .or_insert_with(|| "yes".to_owned());
        }
    }
}

/// Whether `pod` mounts a PersistentVolumeClaim or a generic ephemeral volume: the only volumes with a topology.
pub fn uses_claims(pod: &Pod) -> bool {
    volumes_of(pod).any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
}

fn namespace_of(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or("default")
}

fn volumes_of(pod: &Pod) -> impl Iterator<Item = &Volume> {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
}

/// The default class: the newest annotated one, ties by name (the apiserver's `GetDefaultClass`).
fn default_class(classes: &BTreeMap<String, Arc<StorageClass>>) -> Option<String> {
    let is_default = |class: &StorageClass| {
        class.metadata.annotations.as_ref().is_some_and(|a| {
            [DEFAULT_CLASS_ANNOTATION, BETA_DEFAULT_CLASS_ANNOTATION]
                .iter()
                .any(|key| a.get(*key).map(String::as_str) == Some("true"))
        })
    };
    classes
        .iter()
        .filter(|(_, class)| is_default(class))
        // Newest first; among equals, the smallest name. A class without a timestamp is the oldest.
        .min_by(|(a_name, a), (b_name, b)| {
            let created = |c: &StorageClass| c.metadata.creation_timestamp.as_ref().map(|t| t.0);
            created(b).cmp(&created(a)).then_with(|| a_name.cmp(b_name))
        })
        .map(|(name, _)| name.clone())
}

/// A volume's node affinity as alternatives, one per `required` term with expressions. For `local` and
/// `hostPath` volumes, hostname expressions are dropped, and a term of nothing else constrains nothing.
fn volume_alternatives(pv: &PersistentVolume) -> Result<Vec<Requirements>, VolumeError> {
    let Some(spec) = pv.spec.as_ref() else {
        return Ok(Vec::new());
    };
    let terms = spec
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    let on_host = spec.local.is_some() || spec.host_path.is_some();
    let mut alternatives = Vec::new();
    for term in terms {
        let expressions = term.match_expressions.as_deref().unwrap_or_default();
        let kept: Vec<&NodeSelectorRequirement> = expressions
            .iter()
            .filter(|e| !(on_host && e.key == labels::HOSTNAME))
            .collect();
        if kept.is_empty() {
            if on_host && !expressions.is_empty() {
                alternatives.push(Requirements::new());
            }
            continue;
        }
        let requirements = kept
            .into_iter()
            .map(Requirement::try_from)
            .collect::<Result<Requirements, _>>()
            .map_err(|source| VolumeError::Affinity {
                volume: pv.metadata.name.clone().unwrap_or_default(),
                source,
            })?;
        alternatives.push(requirements);
    }
    Ok(alternatives)
}

/// A class's `allowedTopologies` as alternatives, one per term with expressions, each expression `key In values`.
fn class_alternatives(class: &StorageClass) -> Vec<Requirements> {
    class
        .allowed_topologies
        .iter()
        .flatten()
        .map(|term| {
            term.match_label_expressions
                .iter()
                .flatten()
                .map(|e| Requirement::one_of(e.key.as_str(), e.values.iter().map(String::as_str)))
                .collect::<Requirements>()
        })
        .filter(|r| !r.is_empty())
        .collect()
}

/// Every alternative of `so_far` with every one of a volume's `own`, leaving out pairs that cannot both hold
/// (unless no pair can: then all of them, and the solve says why none fits). At most [`MAX_ALTERNATIVES`].
fn cross(so_far: &[Requirements], own: &[Requirements]) -> Vec<Requirements> {
    let pairs = || so_far.iter().flat_map(|a| own.iter().map(move |b| (a, b)));
    let merge = |(a, b): (&Requirements, &Requirements)| {
        let mut merged = a.clone();
        merged.add_all(b);
        merged
    };
    let compatible: Vec<Requirements> = pairs()
        .filter(|(a, b)| a.has_intersection(b))
        .take(MAX_ALTERNATIVES)
        .map(merge)
        .collect();
    if !compatible.is_empty() {
        return compatible;
    }
    pairs().take(MAX_ALTERNATIVES).map(merge).collect()
}

/// Gives `pod` the volume alternatives of its claims ([`VolumeIndex::requirements`]): the solve tries each node
/// and claim with each in turn, as Karpenter does; none when they constrain nothing.
pub fn apply(pod: &mut PodInfo, alternatives: &[Requirements]) {
    pod.volume_alternatives = if alternatives.iter().all(Requirements::is_empty) {
        Vec::new()
    } else {
        alternatives.to_vec()
    };
}

#[cfg(test)]
mod tests;
