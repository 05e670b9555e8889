//! The status condition shape shared by NodePool, NodeClaim and EC2NodeClass (metav1.Condition).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The condition's type in CamelCase, e.g. `Ready`.
    #[serde(rename = "type")]
    #[schemars(length(max = 316))]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[schemars(extend("enum" = ["True", "False", "Unknown"]))]
    pub status: String,
    /// When the status last changed (RFC 3339).
    #[schemars(schema_with = "crate::api::schema::fragments::date_time")]
    pub last_transition_time: String,
    /// A CamelCase machine-readable reason for the last transition.
    #[schemars(length(max = 1024))]
    pub reason: String,
    /// A human-readable explanation; may be empty.
    #[schemars(length(max = 32768))]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
}
