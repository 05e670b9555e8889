//! The cloud edge: the [`CloudProvider`] port controllers launch, find and terminate instances through,
//! the pure decisions both implementations share (the launch plan, the ICE cache, drift facts), and the
//! in-memory implementation [`sim::SimCloud`]. The AWS implementation lives in the `kerf-aws` crate, so
//! that the SDK stays out of this one. docs/cloud.md describes the contract.

pub mod api_limits;
mod drift;
mod error;
mod ice;
mod instance;
mod instance_health;
mod launch;
mod launch_check;
pub mod metered;
mod node_class;
pub mod sim;
pub mod zonal_shift;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::future::Future;
use std::time::SystemTime;

pub use drift::{drift, DriftReason};
pub use error::CloudError;
pub use ice::{IceCache, OfferingKey, ICE_TTL};
pub use instance::{
    instance_id, provider_id, zone_of, Instance, InstancePlacement, InstanceReservation,
    InstanceState,
};
pub use instance_health::{InstanceHealth, StatusCategory, StatusCheck};
pub use launch::{
    plan, LaunchOverride, LaunchPlan, LaunchRequest, MAX_INSTANCE_TYPES, TAG_CLUSTER_PREFIX,
    TAG_EC2NODECLASS, TAG_EKS_CLUSTER_NAME, TAG_NODECLAIM, TAG_NODEPOOL, UNREGISTERED_TAINT_KEY,
};
pub use launch_check::{LaunchRefusal, RefusedCall};
pub use node_class::{
    newest_per_architecture, AmiVariant, NodeClass, PlacementGroup, PlacementStrategy, ResolvedAmi,
    ResolvedNodeClass, ResolvedSubnet, NO_AMIS, NO_INSTANCE_PROFILE, NO_PLACEMENT_GROUP, NO_ROLE,
    NO_SECURITY_GROUPS, NO_SUBNETS, PLACEMENT_GROUP_UNRESOLVED, UNSUPPORTED_ALIAS,
};

use crate::api::ec2nodeclass::EC2NodeClassSpec;
use crate::catalog::InstanceType;

/// Where instances come from. Controllers are generic over it (`C: CloudProvider`); every method is one
/// bounded call (implementations time out), and the time of a decision (ICE expiry) is passed in.
pub trait CloudProvider: Send + Sync {
    /// Resolves an EC2NodeClass's selector terms (subnets, security groups, AMIs, instance profile).
    /// [`CloudError::NodeClassNotReady`] when a selector matches nothing.
    fn resolve_node_class(
        &self,
        name: &str,
        spec: &EC2NodeClassSpec,
    ) -> impl Future<Output = Result<NodeClass, CloudError>> + Send;

    /// The instance types a class can launch, with offerings in the zones of its subnets, prices where known,
    /// and `available = false` for offerings out of capacity at `now`.
    fn instance_types(
        &self,
        node_class: &NodeClass,
        now: SystemTime,
    ) -> impl Future<Output = Result<Vec<InstanceType>, CloudError>> + Send;

    /// Launches one instance for the request; [`CloudError::InsufficientCapacity`] when no offering had
    /// capacity (the offerings tried are then unavailable for [`ICE_TTL`]).
    fn create(
        &self,
        request: &LaunchRequest<'_>,
        now: SystemTime,
    ) -> impl Future<Output = Result<Instance, CloudError>> + Send;

    /// The instance a provider ID names; [`CloudError::NotFound`] once it is terminated or shutting down.
    fn get(&self, provider_id: &str) -> impl Future<Output = Result<Instance, CloudError>> + Send;

    /// Every live instance tagged for this cluster.
    fn list(&self) -> impl Future<Output = Result<Vec<Instance>, CloudError>> + Send;

    /// Terminates the instance; [`CloudError::NotFound`] when it is already gone, which callers treat as
    /// done.
    fn delete(&self, provider_id: &str) -> impl Future<Output = Result<(), CloudError>> + Send;

    /// Keeps an offering out of launches for [`ICE_TTL`] from `now` (a spot interruption warning says its
    /// capacity is being reclaimed). No call is made.
    fn mark_unavailable(&self, key: OfferingKey, now: SystemTime);

    /// Whether a launch of `request` would be allowed, asked without launching anything (Karpenter's
    /// EC2NodeClass validation): the launch template one on-demand launch of its first instance type uses is
    /// created, then the cloud is asked for dry runs of CreateFleet and of RunInstances with it. `Ok(None)`: allowed;
    /// `Ok(Some(refusal))`: refused for a reason the user must fix; an error when the cloud could not tell
    /// (throttled, unavailable), to ask again.
    fn check_launch(
        &self,
        request: &LaunchRequest<'_>,
        now: SystemTime,
    ) -> impl Future<Output = Result<Option<LaunchRefusal>, CloudError>> + Send;

    /// Removes what the provider created for EC2NodeClass `name` (the instance profile it manages for
    /// `spec.role`) once the class is deleted and no NodeClaim uses it. Something already gone is done.
    fn delete_node_class(
        &self,
        name: &str,
        spec: &EC2NodeClassSpec,
    ) -> impl Future<Output = Result<(), CloudError>> + Send;

    /// The instances whose EC2 status checks are impaired or that have a scheduled event (every instance of the
    /// account and region the provider sees: the caller matches them to its NodeClaims).
    fn instance_health(
        &self,
    ) -> impl Future<Output = Result<Vec<InstanceHealth>, CloudError>> + Send;

    /// Asks the cloud again which zones traffic is shifted away from (ARC zonal shifts on the cluster, with
    /// `--enable-zonal-shift`) and answers their zone IDs at `now`. From then on no offering in them is available
    /// and no instance in them is terminated ([`CloudError::ZonallyShifted`]). Empty, with no call, when zonal
    /// shifts are not followed.
    fn zonal_shifts(
        &self,
        now: SystemTime,
    ) -> impl Future<Output = Result<BTreeSet<String>, CloudError>> + Send;

    /// Removes what the provider created for launches and no longer needs (launch templates this process has
    /// not used, created over an hour before `now`); returns how many were removed.
    fn collect_garbage(
        &self,
        now: SystemTime,
    ) -> impl Future<Output = Result<usize, CloudError>> + Send;
}
