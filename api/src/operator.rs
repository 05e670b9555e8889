//! The node-selector operators NodePool and NodeClaim requirements accept.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a requirement relates its key to its values.
// The declaration order is the upstream CRD's enum order, which the apiserver prints in `Unsupported value`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum Operator {
    Gte,
    Lte,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

impl Operator {
    /// Every operator, in CRD order.
    pub const ALL: [Operator; 8] = [
        Operator::Gte,
        Operator::Lte,
        Operator::In,
        Operator::NotIn,
        Operator::Exists,
        Operator::DoesNotExist,
        Operator::Gt,
        Operator::Lt,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Gte => "Gte",
            Operator::Lte => "Lte",
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
        }
    }

    /// `Gt`, `Lt`, `Gte` and `Lte` compare a single integer.
    pub fn is_numeric(self) -> bool {
        matches!(
            self,
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte
        )
    }
}

impl std::str::FromStr for Operator {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        Operator::ALL
            .into_iter()
            .find(|op| op.as_str() == s)
            .ok_or(())
    }
}
