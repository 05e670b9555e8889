//! Why a requirement could not be built, and why two sets of requirements cannot both hold. The second kind
//! ends up in pod annotations, Events and "unschedulable" reasons, so it names the key and both sides.

use thiserror::Error;

use super::values::ValueList;
use super::Requirement;
use crate::operator::Operator;

/// A requirement that cannot be built from what a NodePool or pod says.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RequirementError {
    #[error("key {key}: unsupported operator {operator:?}")]
    UnsupportedOperator { key: String, operator: String },
    #[error("key {key}: operator {} needs a single integer value, got {}", .operator.as_str(), ValueList(.values))]
    NotASingleInteger {
        key: String,
        operator: Operator,
        values: Vec<String>,
    },
}

/// The first reason two sets of requirements cannot both be met.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Incompatibility {
    /// One side requires a label the other never sets, e.g. a pod selecting on a custom label no NodePool
    /// defines. `hint` names a defined key that looks like what was meant.
    #[error("label {key:?} does not have known values{}", typo_hint(.hint.as_deref()))]
    UndefinedLabel { key: String, hint: Option<String> },
    /// Both sides constrain the key, and no value satisfies both. Boxed to keep `Result`s small on the
    /// scheduler's paths, where failures are common.
    #[error("key {}, requires {}, but only {} is allowed", .required.key(), .required.predicate(), .allowed.predicate())]
    NoCommonValue {
        required: Box<Requirement>,
        allowed: Box<Requirement>,
    },
}

impl Incompatibility {
    /// The label key the incompatibility is about.
    pub fn key(&self) -> &str {
        match self {
            Incompatibility::UndefinedLabel { key, .. } => key,
            Incompatibility::NoCommonValue { required, .. } => required.key(),
        }
    }
}

fn typo_hint(hint: Option<&str>) -> String {
    hint.map(|hint| format!(" (typo of {hint:?}?)"))
        .unwrap_or_default()
}

/// A defined key that `key` was probably meant to be: one with the same name after the `/`, such as
/// `kubernetes.io/zone` for `topology.kubernetes.io/zone`. Karpenter offers the same kind of hint.
pub(super) fn similar_key<'a>(
    key: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let name = key_name(key);
    candidates
        .into_iter()
        .find(|candidate| key_name(candidate).eq_ignore_ascii_case(name))
        .map(str::to_owned)
}

/// The part of a key after its prefix: `arch` in `kubernetes.io/arch`.
fn key_name(key: &str) -> &str {
    key.rsplit_once('/').map_or(key, |(_, name)| name)
}
