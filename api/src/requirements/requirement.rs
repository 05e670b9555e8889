//! One key's requirement: construction from an operator, the set operations, and the way back to
//! `{key, operator, values}` terms.

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::api::core::v1::NodeSelectorRequirement;

use super::error::RequirementError;
use super::sorted_values::Values;
use super::values::{IntRange, Predicate, ValueSet};
use super::RequirementTerm;
use crate::labels;
use crate::operator::Operator;

/// The values one label key may take, as the intersection of every constraint put on it.
///
/// Every operator is one shape of the same set: `In` a finite set, `NotIn` its complement, `Exists` the
/// complement of nothing, `DoesNotExist` the empty set, and `Gt`/`Lt`/`Gte`/`Lte` a complement limited to an
/// inclusive integer range. The representation is canonical, so `==` compares what two requirements admit
/// (and their key and `min_values`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    values: ValueSet,
    min_values: Option<usize>,
}

impl Requirement {
    /// Builds `key operator values`. The key is normalised (deprecated beta keys become stable), so requirements
    /// written with either spelling meet on one key. Values of `Exists` and `DoesNotExist` are ignored, as the
    /// apiserver rejects them anyway.
    ///
    /// Fails only for a numeric operator whose values are not exactly one integer: NodePool validation and the
    /// apiserver's pod validation both rule that out, but kerf must not panic on an object that slipped past.
    pub fn new<I, S>(
        key: impl Into<String>,
        operator: Operator,
        values: I,
        min_values: Option<usize>,
    ) -> Result<Self, RequirementError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let key = normalized(key.into());
        let values = match operator {
            Operator::In => ValueSet::Only(collect(values)),
            Operator::NotIn => ValueSet::AllBut {
                excluded: collect(values),
                range: None,
            },
            Operator::Exists => ValueSet::everything(),
            Operator::DoesNotExist => ValueSet::nothing(),
            Operator::Gt => ValueSet::integers(
                single_integer(&key, operator, values)?.checked_add(1),
                Some(i64::MAX),
            ),
            Operator::Lt => ValueSet::integers(
                Some(i64::MIN),
                single_integer(&key, operator, values)?.checked_sub(1),
            ),
            Operator::Gte => ValueSet::integers(
                Some(single_integer(&key, operator, values)?),
                Some(i64::MAX),
            ),
            Operator::Lte => ValueSet::integers(
                Some(i64::MIN),
                Some(single_integer(&key, operator, values)?),
            ),
        };
        Ok(Self {
            key,
            values,
            min_values,
        })
    }

    /// `key In values`, the one constructor that cannot fail: labels and node selectors become these.
    pub fn one_of<I, S>(key: impl Into<String>, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            key: normalized(key.into()),
            values: ValueSet::Only(collect(values)),
            min_values: None,
        }
    }

    /// The normalised label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// How many distinct values a launch must keep open for this key (NodePool `minValues`).
    pub fn min_values(&self) -> Option<usize> {
        self.min_values
    }

    /// The values both requirements admit. `min_values` becomes the larger of the two, since both must hold.
    /// Both sides are expected to have the same key; the result keeps `self`'s.
    pub fn intersection(&self, other: &Requirement) -> Requirement {
        debug_assert_eq!(
            self.key, other.key,
            "intersecting requirements on different keys"
        );
        Requirement {
            key: self.key.clone(),
            values: self.values.intersect(&other.values),
            min_values: self.min_values.max(other.min_values),
        }
    }

    /// Narrows `self` in place to `self ∩ other`, which saves cloning the key when merging into a map.
    pub(super) fn narrow(&mut self, other: &Requirement) {
        self.values = self.values.intersect(&other.values);
        self.min_values = self.min_values.max(other.min_values);
    }

    /// Whether some value satisfies both, without building the intersection.
    pub fn has_intersection(&self, other: &Requirement) -> bool {
        self.values.overlaps(&other.values)
    }

    /// Whether a node whose label has this value satisfies the requirement.
    pub fn has(&self, value: &str) -> bool {
        self.values.has(value)
    }

    /// The number of admitted values, or `None` when there are unboundedly many (`NotIn`, `Exists`, bounds).
    pub fn len(&self) -> Option<usize> {
        match &self.values {
            ValueSet::Only(values) => Some(values.len()),
            ValueSet::AllBut { .. } => None,
        }
    }

    /// No value is admitted: `DoesNotExist`, or constraints that contradict each other.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Every value is admitted (`Exists` and nothing more), so the requirement only says the label is set.
    pub fn is_unconstrained(&self) -> bool {
        self.values == ValueSet::everything()
    }

    /// Whether a node without the label satisfies this requirement (`NotIn`, `DoesNotExist`).
    pub fn allows_absent(&self) -> bool {
        self.values.allows_absent()
    }

    /// A deterministic admitted value, `None` only when the requirement is empty. For a finite set it is the
    /// smallest value; otherwise an integer, which Karpenter also picks (it picks one at random).
    pub fn any(&self) -> Option<Cow<'_, str>> {
        self.values.any()
    }

    /// The admitted values, when they are a finite set (`In`, `DoesNotExist`).
    pub fn values(&self) -> Option<&Values> {
        match &self.values {
            ValueSet::Only(values) => Some(values),
            ValueSet::AllBut { .. } => None,
        }
    }

    /// The simplest operator for this requirement, and the operator of the first of its [`terms`](Self::terms):
    /// `In`, `DoesNotExist`, `Exists` or `NotIn`; with integer bounds `Gte` (or `Lte` when there is only an upper
    /// bound). `Gt n` and `Lt n` come back as `Gte n+1` and `Lte n-1`, which is what Karpenter writes too.
    pub fn operator(&self) -> Operator {
        match &self.values {
            ValueSet::Only(values) if values.is_empty() => Operator::DoesNotExist,
            ValueSet::Only(_) => Operator::In,
            ValueSet::AllBut {
                range: Some(range), ..
            } if range.written_min().is_some() => Operator::Gte,
            ValueSet::AllBut { range: Some(_), .. } => Operator::Lte,
            ValueSet::AllBut { excluded, .. } if excluded.is_empty() => Operator::Exists,
            ValueSet::AllBut { .. } => Operator::NotIn,
        }
    }

    /// The requirement as `{key, operator, values}` terms whose intersection is exactly this requirement. One
    /// term suffices except for an integer range (`Gte` and `Lte`) or bounds with exclusions (then `NotIn` too),
    /// which the list of a NodeClaim expresses by repeating the key. Values are sorted.
    pub fn terms(&self) -> Vec<RequirementTerm> {
        let term = |operator, values| RequirementTerm {
            key: self.key.clone(),
            operator,
            values,
            min_values: self.min_values,
        };
        match &self.values {
            ValueSet::Only(values) if values.is_empty() => {
                vec![term(Operator::DoesNotExist, Vec::new())]
            }
            ValueSet::Only(values) => vec![term(Operator::In, values.iter().cloned().collect())],
            ValueSet::AllBut { excluded, range } => {
                let mut terms = Vec::with_capacity(1);
                if let Some(min) = range.and_then(IntRange::written_min) {
                    terms.push(term(Operator::Gte, vec![min.to_string()]));
                }
                if let Some(max) = range.and_then(IntRange::written_max) {
                    terms.push(term(Operator::Lte, vec![max.to_string()]));
                }
                if !excluded.is_empty() {
                    terms.push(term(Operator::NotIn, excluded.iter().cloned().collect()));
                }
                if terms.is_empty() {
                    terms.push(term(Operator::Exists, Vec::new()));
                }
                terms
            }
        }
    }

    /// The operator-and-values part alone (`In [amd64]`, `Gte 4 and Lte 8`), for messages that name the key
    /// once.
    pub fn predicate(&self) -> impl fmt::Display + '_ {
        Predicate(&self.values)
    }
}

/// `key In [a b]`, `key Gte 4 and NotIn [7] minValues 2`.
impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.key, self.predicate())?;
        match self.min_values {
            Some(min_values) => write!(f, " minValues {min_values}"),
            None => Ok(()),
        }
    }
}

impl TryFrom<RequirementTerm> for Requirement {
    type Error = RequirementError;

    fn try_from(term: RequirementTerm) -> Result<Self, RequirementError> {
        Requirement::new(term.key, term.operator, term.values, term.min_values)
    }
}

/// Pod node affinity terms carry the operator as a string; anything but the 8 operators is an error.
impl TryFrom<&NodeSelectorRequirement> for Requirement {
    type Error = RequirementError;

    fn try_from(requirement: &NodeSelectorRequirement) -> Result<Self, RequirementError> {
        let operator =
            requirement
                .operator
                .parse()
                .map_err(|()| RequirementError::UnsupportedOperator {
                    key: requirement.key.clone(),
                    operator: requirement.operator.clone(),
                })?;
        let values = requirement.values.iter().flatten().map(String::as_str);
        Requirement::new(requirement.key.as_str(), operator, values, None)
    }
}

/// Maps a deprecated key to its stable form, reusing the allocation when it already is stable (the usual case).
fn normalized(key: String) -> String {
    if labels::normalize_key(&key) == key {
        key
    } else {
        labels::normalize_key(&key).to_owned()
    }
}

fn collect<I, S>(values: I) -> Values
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    values.into_iter().map(Into::into).collect()
}

/// The one integer a numeric operator compares with.
fn single_integer<I, S>(key: &str, operator: Operator, values: I) -> Result<i64, RequirementError>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let values: Vec<String> = values.into_iter().map(Into::into).collect();
    let parsed = match values.as_slice() {
        [value] => value.parse::<i64>().ok(),
        _ => None,
    };
    parsed.ok_or_else(|| RequirementError::NotASingleInteger {
        key: key.to_owned(),
        operator,
        values,
    })
}
