//! The scheduling simulation: which NodeClaims to create for pending pods, over the NodePools and the
//! instance-type catalog. Pure: no I/O, no clock; the controller, the pod webhook and `kerf simulate` share it.
//!
//! Implemented so far: effective requests, node selectors and required/preferred node affinity with
//! Karpenter's relaxation order, taints and tolerations, NodePool weights and limits, instance-type filtering
//! on requirements, allocatable and offerings, the cheapest-first launch list, topology spread and required and
//! preferred pod (anti-)affinity on any label key (docs/scheduling.md), the cluster's default spread
//! (`--scheduler-config`), the requeue of failed pods, existing nodes
//! and in-flight NodeClaims (with their pods counted in topology), DaemonSet overhead, host ports and minValues.

pub mod bound;
mod cluster;
mod daemons;
mod default_spread;
pub mod effective_zone;
mod min_values;
mod offerings;
mod pod;
mod policies;
mod reservations;
mod solve;
mod static_pool;
mod taints;
mod template;
mod topology;
mod type_name;
pub mod volumes;

pub use cluster::{bound_node, BoundPod, Cluster, ClusterError, DaemonSetPod, ExistingNode};
pub use default_spread::{DefaultSpread, SchedulerConfig, SchedulerConfigError};
pub use min_values::MinValuesPolicy;
pub use offerings::allows;
pub use pod::{HostPort, PodError, PodInfo};
pub use policies::{Policies, PreferencePolicy};
pub use reservations::ReservedMode;
pub use solve::{
    solve, solve_cluster, Choice, NewNode, NodePlacement, Plan, PlannedClaim, PoolFit, PoolKey,
    PoolOption, Prepared, Scheduler, Unschedulable, MAX_INSTANCE_TYPES,
};
pub use static_pool::{replicas_of, static_replacement};
pub use template::{pool_limits, pool_requirements, Limits, Template, NODES};
pub use type_name::TypeName;
