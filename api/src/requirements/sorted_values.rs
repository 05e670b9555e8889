//! The label values a requirement lists, as a sorted vector without duplicates.
//!
//! Nearly every requirement lists one value: each well-known label of an instance type does, and a catalog
//! holds about 30 of them for each of some 1,400 types. A `BTreeSet` allocates a whole node (288 bytes for
//! `String`s) even for one value; a vector allocates one `String` slot. Lookups are binary searches, and the
//! order is the same as a `BTreeSet`'s, so messages and written terms do not change.

use std::slice;

/// Sorted, distinct values.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Values(Vec<String>);

impl Values {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, value: &str) -> bool {
        self.0.binary_search_by(|v| v.as_str().cmp(value)).is_ok()
    }

    /// The smallest value.
    pub fn first(&self) -> Option<&String> {
        self.0.first()
    }

    pub fn iter(&self) -> slice::Iter<'_, String> {
        self.0.iter()
    }

    pub(super) fn retain(&mut self, keep: impl FnMut(&String) -> bool) {
        self.0.retain(keep);
    }

    /// The values of either, merged in one pass.
    pub(super) fn union(&self, other: &Values) -> Values {
        let (mut a, mut b) = (self.0.iter().peekable(), other.0.iter().peekable());
        let mut merged = Vec::with_capacity(self.len() + other.len());
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if x < y => a.next(),
                (Some(x), Some(y)) if y < x => b.next(),
                (Some(_), Some(_)) => {
                    b.next();
                    a.next()
                }
                (Some(_), None) => a.next(),
                (None, _) => b.next(),
            };
            match next {
                Some(value) => merged.push(value.clone()),
                None => return Values(merged),
            }
        }
    }
}

impl FromIterator<String> for Values {
    fn from_iter<I: IntoIterator<Item = String>>(values: I) -> Self {
        let mut values: Vec<String> = values.into_iter().collect();
        values.sort_unstable();
        values.dedup();
        values.shrink_to_fit();
        Values(values)
    }
}

impl<'a> IntoIterator for &'a Values {
    type Item = &'a String;
    type IntoIter = slice::Iter<'a, String>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::Values;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// Every operation agrees with the `BTreeSet` it replaces.
        #[test]
        fn values_behave_as_a_btreeset(
            a in proptest::collection::vec("[a-d]{0,2}", 0..8),
            b in proptest::collection::vec("[a-d]{0,2}", 0..8),
            probe in "[a-d]{0,2}",
        ) {
            let (set_a, set_b): (BTreeSet<String>, BTreeSet<String>) =
                (a.iter().cloned().collect(), b.iter().cloned().collect());
            let (values_a, values_b): (Values, Values) =
                (a.into_iter().collect(), b.into_iter().collect());
            prop_assert!(values_a.iter().eq(set_a.iter()));
            prop_assert_eq!(values_a.len(), set_a.len());
            prop_assert_eq!(values_a.first(), set_a.first());
            prop_assert_eq!(values_a.contains(&probe), set_a.contains(&probe));
            prop_assert!(values_a.union(&values_b).iter().eq(set_a.union(&set_b)));
        }
    }
}
