//! Provisioning, decided purely: which pods are waiting for capacity ([`pending`]), which nodes are on their way
//! out ([`leaving`]), the solve over the cluster and each EC2NodeClass's catalog ([`plan`]), the NodeClaims
//! it creates ([`claim`]) and the step both drivers carry out ([`step`]: nominations, CapacityBuffer placement). The controller drives it from its watch caches, `kerf simulate` from its timeline.

pub mod claim;
pub mod leaving;
pub mod pending;
pub mod plan;
mod preparations;
pub mod replicas;
pub mod step;

#[cfg(test)]
mod tests;
