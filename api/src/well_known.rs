//! The well-known names other than labels (those are in [`super::labels`]): the finalizers, taints, annotations
//! and instance tags kerf shares with Karpenter, so that a cluster moves between the two with its objects as they
//! are, and kerf's own `kerf.sh/` annotations. One place: the modules that act on a name re-export it from here.

// ---- Finalizers ------------------------------------------------------------------------------------------------

/// Holds a NodeClaim (and its Node) until its instance is terminated and its Node gone.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";
/// Holds a deleted EC2NodeClass until its NodeClaims are gone and its cloud resources removed.
pub const NODECLASS_FINALIZER: &str = "karpenter.k8s.aws/termination";

// ---- Taints ----------------------------------------------------------------------------------------------------

/// The taint disruption and termination put on a node they are taking away; pods tolerating it are not evicted.
pub const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";
/// The taint every node registers with until kerf has synced it (lifted on registration).
pub const UNREGISTERED_TAINT_KEY: &str = "karpenter.sh/unregistered";

// ---- Annotations -----------------------------------------------------------------------------------------------

/// On a pod (`"true"` or a duration) or a node: disruption leaves it be.
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// When termination stops waiting for anything (pods are deleted rather than evicted, volumes are not waited
/// for): the deletion time plus `spec.terminationGracePeriod`, or *now* for a node repair. RFC 3339.
pub const TERMINATION_TIMESTAMP: &str = "karpenter.sh/nodeclaim-termination-timestamp";
/// The NodePool template's hash on the pool and its claims: a claim whose hash differs has drifted.
pub const NODEPOOL_HASH: &str = "karpenter.sh/nodepool-hash";
pub const NODEPOOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";
/// The EC2NodeClass's hash on the class and its claims.
pub const EC2NODECLASS_HASH: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
pub const EC2NODECLASS_HASH_VERSION: &str = "karpenter.k8s.aws/ec2nodeclass-hash-version";
/// On a NodeClaim whose instance types include one a NodeOverlay priced.
pub const PRICE_OVERLAY_APPLIED: &str = "karpenter.sh/price-overlay-applied";
/// On a NodeClaim whose instance types include one a NodeOverlay added capacity to.
pub const CAPACITY_OVERLAY_APPLIED: &str = "karpenter.sh/capacity-overlay-applied";
/// Marks a CapacityBuffer's virtual pod.
pub const FAKE_POD: &str = "karpenter.sh/capacity-buffer-fake-pod";
/// The name of the buffer a virtual pod belongs to.
pub const BUFFER_NAME: &str = "karpenter.sh/capacity-buffer-name";
/// The namespace of the buffer a virtual pod belongs to.
pub const BUFFER_NAMESPACE: &str = "karpenter.sh/capacity-buffer-namespace";

// ---- Instance tags ---------------------------------------------------------------------------------------------

/// Tags kerf puts on everything it launches (controller-behaviour.md §2.3).
pub const TAG_NODEPOOL: &str = "karpenter.sh/nodepool";
pub const TAG_NODECLAIM: &str = "karpenter.sh/nodeclaim";
pub const TAG_EC2NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
pub const TAG_EKS_CLUSTER_NAME: &str = "eks:eks-cluster-name";
/// `kubernetes.io/cluster/<name>` = `owned`.
pub const TAG_CLUSTER_PREFIX: &str = "kubernetes.io/cluster/";

// ---- kerf's own ------------------------------------------------------------------------------------------------

/// Compact JSON on a pod: its effective requests and requirements, the pools that fit, those that do not.
pub const REQUIREMENTS_ANNOTATION: &str = "kerf.sh/instance-requirements";
/// Written by the controller, not the webhook: the last provisioning decision about a pending pod, as the text of
/// its `Nominated` or `FailedScheduling` Event (see `controllers::provisioning::pod_status`).
pub const PROVISIONING_ANNOTATION: &str = "kerf.sh/provisioning";
/// One human line, e.g. `1 nodepool; default: 143 instance types, cheapest c6a.large spot us-east-1a $0.0312/h`.
pub const SUMMARY_ANNOTATION: &str = "kerf.sh/instance-summary";
/// Which NodePools and EC2NodeClasses a pod's advice was computed from: the controller recomputes the advice of a
/// pending pod whose fingerprint is no longer the cluster's.
pub const INPUTS_ANNOTATION: &str = "kerf.sh/advice-inputs";
/// Marks a workload whose pods a scenario lists as Pods (`kerf snapshot` writes it): it is not expanded, and
/// scaling it adds or removes pods among those it selects.
pub const PODS_LISTED: &str = "kerf.sh/pods-listed";
