//! What one disruption pass looks at: a snapshot of the cluster, handed in by the controller (or `kerf
//! simulate`), and the settings that tune the methods. Plain data borrowed from the caller's cache.

use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::catalog::Catalog;
use crate::scheduling::volumes::VolumeIndex;
use crate::scheduling::{DefaultSpread, Prepared};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use std::sync::Arc;
use std::time::Duration;

/// The cluster as one pass sees it.
#[derive(Clone, Copy, Debug)]
pub struct DisruptionInput<'a> {
    pub nodepools: &'a [NodePool],
    /// Every NodeClaim, with its Node and pods.
    pub nodes: &'a [NodeInput],
    /// Pods bound to no node yet: consolidation must leave room for them.
    pub pending: &'a [Pod],
    pub pdbs: &'a [PodDisruptionBudget],
    pub daemonsets: &'a [DaemonSet],
    /// Instance types with their offerings' prices and availability.
    pub catalog: &'a Catalog,
    /// The PersistentVolumeClaims, PersistentVolumes and StorageClasses: a pod whose volume is zonal can only
    /// move within its zone ([`VolumeIndex::empty`] when there are none).
    pub volumes: &'a VolumeIndex,
    /// The cluster's default spread and what deduces each pod's selector: the pods a simulation moves get it as
    /// provisioning's do ([`DefaultSpread::none`] when none is configured).
    pub default_spread: &'a DefaultSpread,
    pub settings: Settings,
    /// The scheduler preparation of `nodepools` over `catalog` with the DaemonSets' pods, when the driver keeps
    /// one from pass to pass ([`super::PassPreparation::get`]); `None`: the pass prepares its own.
    pub prepared: Option<&'a Prepared>,
}

/// One NodeClaim and what the controller knows of it.
#[derive(Clone, Debug)]
pub struct NodeInput {
    /// Shared with the driver's own copy: a pass reads every claim, and a claim lists up to 600 instance types.
    pub claim: Arc<NodeClaim>,
    /// Its Node, once registered; shared with the driver's own copy, as the claim is.
    pub node: Option<Arc<Node>>,
    /// Every pod bound to the Node (terminal ones may be included; they are ignored).
    pub pods: Vec<Pod>,
    /// Disruption already queued it (a command is in flight): it counts as disrupting and is no candidate.
    pub queued: bool,
    /// The cloud-side drift the controller found (it has the cloud access disruption does not).
    pub cloud_drift: Option<CloudDrift>,
    /// When disruption launched this claim as the replacement of another, if it did: no-churn protects it.
    pub launched_as_replacement: Option<Timestamp>,
    /// A recent scheduling pass counted on it to take pods ([`crate::engine::Nominations`]): no candidate.
    pub nominated: bool,
}

impl NodeInput {
    /// The claim to change, copied first when a driver still shares it.
    pub fn claim_mut(&mut self) -> &mut NodeClaim {
        Arc::make_mut(&mut self.claim)
    }

    /// The Node to change, if registered, copied first when a driver still shares it.
    pub fn node_mut(&mut self) -> Option<&mut Node> {
        self.node.as_mut().map(Arc::make_mut)
    }

    /// A claim with its Node and pods, no other facts.
    pub fn new(claim: impl Into<Arc<NodeClaim>>, node: Option<Node>, pods: Vec<Pod>) -> Self {
        Self::shared(claim, node.map(Arc::new), pods)
    }

    /// A claim with the driver's shared Node and its pods, no other facts.
    pub fn shared(
        claim: impl Into<Arc<NodeClaim>>,
        node: Option<Arc<Node>>,
        pods: Vec<Pod>,
    ) -> Self {
        NodeInput {
            claim: claim.into(),
            node,
            pods,
            queued: false,
            cloud_drift: None,
            launched_as_replacement: None,
            nominated: false,
        }
    }

    pub fn claim_name(&self) -> &str {
        self.claim.metadata.name.as_deref().unwrap_or_default()
    }

    pub fn node_name(&self) -> Option<&str> {
        self.node.as_ref().and_then(|n| n.metadata.name.as_deref())
    }
}

/// Why an instance no longer matches its node class, as the controller judged it with cloud access
/// (controller-behaviour.md §3.3, the AWS drift checks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloudDrift {
    NodeClass,
    Ami,
    Subnet,
    SecurityGroup,
    PlacementGroup,
}

impl CloudDrift {
    /// Karpenter's name for the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            CloudDrift::NodeClass => "NodeClassDrift",
            CloudDrift::Ami => "AMIDrift",
            CloudDrift::Subnet => "SubnetDrift",
            CloudDrift::SecurityGroup => "SecurityGroupDrift",
            CloudDrift::PlacementGroup => "PlacementGroupDrift",
        }
    }
}

/// Knobs of the methods; [`Settings::default`] is what kerf runs with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// Karpenter's `SpotToSpotConsolidation` gate (default off): without it, spot nodes are only deleted.
    pub spot_to_spot: bool,
    /// A replacement must cost at most `1 − margin` of what it replaces (see docs/disruption.md, no churn).
    pub replace_margin: f64,
    /// A claim launched as a replacement is not itself replaced within this window.
    pub no_churn_window: Duration,
    /// How the simulations treat preferences and `minValues`, as provisioning does.
    pub policies: crate::scheduling::Policies,
}

/// The default [`Settings::replace_margin`]: a replace must save at least 5 %.
pub const DEFAULT_REPLACE_MARGIN: f64 = 0.05;
/// The default [`Settings::no_churn_window`]: one hour.
pub const DEFAULT_NO_CHURN_WINDOW: Duration = Duration::from_secs(3600);

impl Default for Settings {
    fn default() -> Self {
        Settings {
            spot_to_spot: false,
            replace_margin: DEFAULT_REPLACE_MARGIN,
            no_churn_window: DEFAULT_NO_CHURN_WINDOW,
            policies: crate::scheduling::Policies::default(),
        }
    }
}
