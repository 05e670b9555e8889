//! The controller kit: what every controller uses to work on the apiserver, so that each controller's folder
//! holds only its own reconcile. The bounded calls (finalizers, JSON and merge patches, status patches, deletes)
//! and the error a reconcile ends with ([`calls`]), the per-controller retry backoff ([`backoff`]), the Node
//! taint patches ([`taints`]), the disruption marks a pass writes on NodeClaims ([`marks`]), and the
//! PodDisruptionBudgets list ([`pdbs`]). Events go through [`crate::kube::events`]; the shared watch cache is
//! [`super::state`], followed through [`super::follow`].

pub mod backoff;
pub mod calls;
pub mod marks;
pub mod pdbs;
pub mod taints;
