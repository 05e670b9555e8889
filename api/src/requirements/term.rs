//! The `{key, operator, values, minValues}` shape requirements are written in: NodeClaim `spec.requirements`
//! and the JSON kerf puts in annotations.

use serde::{Deserialize, Serialize};

use crate::operator::Operator;

/// One written requirement. `values` is always present (empty for `Exists` and `DoesNotExist`) and sorted when
/// produced by [`Requirement::terms`](super::Requirement::terms), so equal requirements serialise identically.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequirementTerm {
    pub key: String,
    pub operator: Operator,
    #[serde(default)]
    pub values: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<usize>,
}
