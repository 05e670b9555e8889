//! Provisioning, decided purely: which pods are waiting for capacity ([`pending`]), which nodes are on their way
//! out ([`leaving`]), the solve over the cluster and each EC2NodeClass's catalog ([`plan`]) and the NodeClaims
//! it creates ([`claim`]). The controller drives it from its watch caches, `kerf simulate` from its timeline.

pub mod claim;
pub mod leaving;
pub mod pending;
pub mod plan;

#[cfg(test)]
mod tests;
