//! The requirements algebra: what values each label key may take, how constraints from NodePools, pods,
//! instance types and nodes combine (intersection), and whether they can all be met (compatibility).
//!
//! It follows Karpenter's `pkg/scheduling` semantics, so a pod kerf schedules is one Karpenter would schedule
//! the same way: keys are normalised, a key only one side constrains is fine unless the other side *needs* a
//! value for it, and `NotIn`/`DoesNotExist` are satisfied by a node without the label.

mod error;
mod requirement;
mod sorted_values;
mod term;
mod values;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::LazyLock;

use k8s_openapi::api::core::v1::NodeSelectorRequirement;

pub use error::{Incompatibility, RequirementError};
pub use requirement::Requirement;
pub use sorted_values::Values;
pub use term::RequirementTerm;

use crate::labels;

/// Keys a pod may require although the other side does not define them, because the value is only known once
/// an instance is chosen (Karpenter's `AllowUndefinedWellKnownLabels`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowUndefined {
    keys: BTreeSet<String>,
}

static WELL_KNOWN_LABELS: LazyLock<AllowUndefined> =
    LazyLock::new(|| AllowUndefined::from_keys(labels::well_known_labels()));

impl AllowUndefined {
    /// Every key a pod requires must be defined: used for existing nodes, whose labels are final.
    pub const NONE: AllowUndefined = AllowUndefined {
        keys: BTreeSet::new(),
    };

    /// The well-known labels, built once: what NodePool templates and in-flight claims leave open.
    pub fn well_known_labels() -> &'static AllowUndefined {
        &WELL_KNOWN_LABELS
    }

    /// An explicit set of keys, normalised like requirement keys.
    pub fn from_keys<I, S>(keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self {
            keys: keys
                .into_iter()
                .map(|key| labels::normalize_key(key.as_ref()).to_owned())
                .collect(),
        }
    }

    pub fn allows(&self, key: &str) -> bool {
        self.keys.contains(labels::normalize_key(key))
    }
}

/// Requirements on several keys, all of which must hold: a map from normalised key to [`Requirement`], sorted
/// so iteration, messages and written terms are deterministic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requirements(BTreeMap<String, Requirement>);

impl Requirements {
    pub fn new() -> Self {
        Self::default()
    }

    /// Each label as `key In [value]`: a node's labels, or a pod's `nodeSelector`.
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Self {
        labels
            .iter()
            .map(|(key, value)| Requirement::one_of(key.as_str(), [value.as_str()]))
            .collect()
    }

    /// [`Self::from_labels`] of only the labels whose (normalised) key `keys` names: for asking whether a node
    /// meets `keys` ([`Self::is_compatible`] looks at no other key, so the answer is the same), without reading
    /// the dozens of labels it does not name.
    pub fn from_labels_on(labels: &BTreeMap<String, String>, keys: &Requirements) -> Self {
        labels
            .iter()
            .filter(|(key, _)| keys.0.contains_key(labels::normalize_key(key)))
            .map(|(key, value)| Requirement::one_of(key.as_str(), [value.as_str()]))
            .collect()
    }

    /// The `matchExpressions` of a node selector term, ANDed.
    pub fn from_node_selector(
        requirements: &[NodeSelectorRequirement],
    ) -> Result<Self, RequirementError> {
        requirements.iter().map(Requirement::try_from).collect()
    }

    /// Written terms (NodePool or NodeClaim requirements, annotations), ANDed; the inverse of [`Self::terms`].
    pub fn from_terms<I>(terms: I) -> Result<Self, RequirementError>
    where
        I: IntoIterator<Item = RequirementTerm>,
    {
        terms.into_iter().map(Requirement::try_from).collect()
    }

    /// Adds a requirement, intersecting it with any existing one on the same key.
    pub fn add(&mut self, requirement: Requirement) {
        match self.0.get_mut(requirement.key()) {
            Some(existing) => existing.narrow(&requirement),
            None => {
                self.0.insert(requirement.key().to_owned(), requirement);
            }
        }
    }

    /// Adds every requirement of `other`, as [`Self::add`] does.
    pub fn add_all(&mut self, other: &Requirements) {
        for requirement in other.iter() {
            match self.0.get_mut(requirement.key()) {
                Some(existing) => existing.narrow(requirement),
                None => {
                    self.0
                        .insert(requirement.key().to_owned(), requirement.clone());
                }
            }
        }
    }

    /// The requirement on `key` (normalised before the lookup), if any.
    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.0.get(labels::normalize_key(key))
    }

    pub fn remove(&mut self, key: &str) -> Option<Requirement> {
        self.0.remove(labels::normalize_key(key))
    }

    /// The requirements in key order.
    pub fn iter(&self) -> impl Iterator<Item = &Requirement> {
        self.0.values()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a node meeting `self` (a NodePool template, a planned claim, a node) can also meet `other` (a
    /// pod's requirements), as Karpenter's `Compatible`:
    /// * a key `other` requires but `self` does not define is an error, unless `other` is satisfied without the
    ///   label (`NotIn`, `DoesNotExist`) or `allow_undefined` lists the key;
    /// * every key both define must share a value ([`Self::intersects`]).
    ///
    /// Undefined labels are reported before disjoint values, as Karpenter does; within each kind, the first key
    /// in order.
    pub fn compatible(
        &self,
        other: &Requirements,
        allow_undefined: &AllowUndefined,
    ) -> Result<(), Incompatibility> {
        if let Some(key) = self.first_undefined(other, allow_undefined) {
            let candidates = allow_undefined
                .keys
                .iter()
                .chain(self.0.keys())
                .map(String::as_str);
            return Err(Incompatibility::UndefinedLabel {
                key: key.to_owned(),
                hint: error::similar_key(key, candidates),
            });
        }
        self.intersects(other)
    }

    /// [`Self::compatible`] without building the error: the scheduler's hot path.
    pub fn is_compatible(&self, other: &Requirements, allow_undefined: &AllowUndefined) -> bool {
        self.first_undefined(other, allow_undefined).is_none()
            && self.first_disjoint(other).is_none()
    }

    /// [`Self::intersects`] without building the error. The error copies both requirements, and a claim's
    /// instance-type requirement lists hundreds of values: filtering a catalog by it must not copy them for
    /// every type left out.
    pub fn has_intersection(&self, other: &Requirements) -> bool {
        self.first_disjoint(other).is_none()
    }

    /// Whether every key both sides define has a value both admit. Keys only one side defines are fine. Two
    /// requirements a node without the label satisfies (`NotIn`, `DoesNotExist`) never conflict, since such a
    /// node satisfies both.
    pub fn intersects(&self, other: &Requirements) -> Result<(), Incompatibility> {
        match self.first_disjoint(other) {
            Some((allowed, required)) => Err(Incompatibility::NoCommonValue {
                required: Box::new(required.clone()),
                allowed: Box::new(allowed.clone()),
            }),
            None => Ok(()),
        }
    }

    /// The first key `other` needs a value for that `self` leaves undefined.
    fn first_undefined<'a>(
        &self,
        other: &'a Requirements,
        allow_undefined: &AllowUndefined,
    ) -> Option<&'a str> {
        other
            .0
            .iter()
            .find(|(key, required)| {
                !self.0.contains_key(*key)
                    && !required.allows_absent()
                    && !allow_undefined.allows(key)
            })
            .map(|(key, _)| key.as_str())
    }

    /// The first shared key on which no value satisfies both, as `(self's, other's)` requirement. Walks the
    /// smaller map and looks keys up in the larger; both visit shared keys in key order.
    fn first_disjoint<'a>(
        &'a self,
        other: &'a Requirements,
    ) -> Option<(&'a Requirement, &'a Requirement)> {
        let meet = |existing: &Requirement, incoming: &Requirement| {
            existing.has_intersection(incoming)
                || (existing.allows_absent() && incoming.allows_absent())
        };
        if self.len() <= other.len() {
            self.iter()
                .filter_map(|mine| other.0.get(mine.key()).map(|theirs| (mine, theirs)))
                .find(|(mine, theirs)| !meet(mine, theirs))
        } else {
            other
                .iter()
                .filter_map(|theirs| self.0.get(theirs.key()).map(|mine| (mine, theirs)))
                .find(|(mine, theirs)| !meet(mine, theirs))
        }
    }

    /// The labels these requirements pin down: every key with exactly one admitted value. A NodeClaim gets
    /// these as labels before its instance type (and so the other values) is known.
    pub fn labels(&self) -> BTreeMap<String, String> {
        self.0
            .iter()
            .filter_map(|(key, requirement)| match requirement.values() {
                Some(values) if values.len() == 1 => {
                    values.first().map(|value| (key.clone(), value.clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// Every requirement as written terms, in key order: NodeClaim `spec.requirements` and annotations.
    pub fn terms(&self) -> Vec<RequirementTerm> {
        self.iter().flat_map(Requirement::terms).collect()
    }
}

impl FromIterator<Requirement> for Requirements {
    fn from_iter<I: IntoIterator<Item = Requirement>>(requirements: I) -> Self {
        let mut all = Requirements::new();
        all.extend(requirements);
        all
    }
}

impl Extend<Requirement> for Requirements {
    fn extend<I: IntoIterator<Item = Requirement>>(&mut self, requirements: I) {
        for requirement in requirements {
            self.add(requirement);
        }
    }
}

/// `key1 In [a], key2 Exists`, in key order.
impl fmt::Display for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, requirement) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}
