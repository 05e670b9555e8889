//! The v1 API kerf shares with Karpenter: `NodePool` and `NodeClaim` (karpenter.sh/v1), `EC2NodeClass`
//! (karpenter.k8s.aws/v1), their defaults and validation, the well-known labels and the requirements algebra.
//! Nothing here depends on the rest of kerf, does I/O or reads the clock: this crate is the bottom layer, and
//! every other kerf crate may use it.

pub mod capacitybuffer;
pub mod cel_rules;
pub mod condition;
pub mod crds;
pub mod cron;
pub mod ec2nodeclass;
pub mod labels;
pub mod nodeclaim;
pub mod nodeoverlay;
pub mod nodepool;
pub mod operator;
pub mod requirements;
pub mod schema;
pub mod validation;
pub mod well_known;
