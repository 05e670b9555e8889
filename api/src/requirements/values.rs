//! The value set behind one requirement: a finite set, or the complement of one, optionally limited to a range
//! of integers. Every operator maps onto it, so intersection is one match on two shapes instead of 8 × 8 cases.

use std::borrow::Cow;
use std::fmt;

use super::sorted_values::Values;

/// How many values a message lists before it summarises the rest: instance-type lists run into the hundreds.
const LISTED_VALUES: usize = 5;

/// An inclusive, never empty range of integers. Once a requirement has a range, a value must parse as a
/// base-10 `i64` to be admitted. Parsing accepts a sign and leading zeros, as Go's `strconv.Atoi` does, so
/// `"07"` is admitted by `Gte 7`. This also means every integer has infinitely many spellings, which is why a
/// complement with a range is never empty, however many values it excludes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct IntRange {
    pub(super) min: i64,
    pub(super) max: i64,
}

impl IntRange {
    fn new(min: i64, max: i64) -> Option<Self> {
        (min <= max).then_some(Self { min, max })
    }

    fn intersect(self, other: Self) -> Option<Self> {
        Self::new(self.min.max(other.min), self.max.min(other.max))
    }

    fn admits(self, value: &str) -> bool {
        value
            .parse::<i64>()
            .is_ok_and(|n| self.min <= n && n <= self.max)
    }

    /// The lower bound worth writing down: `i64::MIN` is implied unless nothing else says "integers only".
    pub(super) fn written_min(self) -> Option<i64> {
        (self.min != i64::MIN || self.max == i64::MAX).then_some(self.min)
    }

    /// The upper bound worth writing down: `i64::MAX` is implied.
    pub(super) fn written_max(self) -> Option<i64> {
        (self.max != i64::MAX).then_some(self.max)
    }
}

/// The values a requirement admits.
///
/// The representation is canonical (equal predicates have equal values), so `==` compares predicates:
/// an empty range becomes `Only(∅)`, a range is stored with both ends, and a complement only excludes values
/// its range admits.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum ValueSet {
    /// Exactly these values (`In`); none at all is `DoesNotExist`.
    Only(Values),
    /// Every value but `excluded` (`NotIn`, `Exists`), limited to integers in `range` when it is set (`Gt`,
    /// `Lt`, `Gte`, `Lte`).
    AllBut {
        excluded: Values,
        range: Option<IntRange>,
    },
}

impl ValueSet {
    pub(super) fn nothing() -> Self {
        ValueSet::Only(Values::new())
    }

    pub(super) fn everything() -> Self {
        ValueSet::AllBut {
            excluded: Values::new(),
            range: None,
        }
    }

    /// Integers in `[min, max]`; a bound that overflowed while converting `Gt`/`Lt` arrives as `None` and
    /// leaves nothing (`Gt i64::MAX` admits no integer).
    pub(super) fn integers(min: Option<i64>, max: Option<i64>) -> Self {
        match min.zip(max).and_then(|(min, max)| IntRange::new(min, max)) {
            Some(range) => ValueSet::AllBut {
                excluded: Values::new(),
                range: Some(range),
            },
            None => ValueSet::nothing(),
        }
    }

    /// A complement, dropping exclusions the range already rules out (keeps the representation canonical).
    fn all_but(mut excluded: Values, range: Option<IntRange>) -> Self {
        if let Some(range) = range {
            excluded.retain(|value| range.admits(value));
        }
        ValueSet::AllBut { excluded, range }
    }

    pub(super) fn has(&self, value: &str) -> bool {
        match self {
            ValueSet::Only(values) => values.contains(value),
            ValueSet::AllBut { excluded, range } => {
                !excluded.contains(value) && range.is_none_or(|range| range.admits(value))
            }
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        matches!(self, ValueSet::Only(values) if values.is_empty())
    }

    /// `NotIn` and `DoesNotExist` are the operators a node without the label satisfies. A range needs the label
    /// (Kubernetes' `Gt`/`Lt` do), and `Exists` obviously does.
    pub(super) fn allows_absent(&self) -> bool {
        match self {
            ValueSet::Only(values) => values.is_empty(),
            ValueSet::AllBut { excluded, range } => range.is_none() && !excluded.is_empty(),
        }
    }

    pub(super) fn intersect(&self, other: &ValueSet) -> ValueSet {
        match (self, other) {
            (ValueSet::Only(a), ValueSet::Only(b)) => {
                let (small, large) = if a.len() <= b.len() { (a, b) } else { (b, a) };
                ValueSet::Only(
                    small
                        .iter()
                        .filter(|v| large.contains(v))
                        .cloned()
                        .collect(),
                )
            }
            (ValueSet::Only(finite), open @ ValueSet::AllBut { .. })
            | (open @ ValueSet::AllBut { .. }, ValueSet::Only(finite)) => {
                ValueSet::Only(finite.iter().filter(|v| open.has(v)).cloned().collect())
            }
            (
                ValueSet::AllBut {
                    excluded: a,
                    range: range_a,
                },
                ValueSet::AllBut {
                    excluded: b,
                    range: range_b,
                },
            ) => match intersect_ranges(*range_a, *range_b) {
                Some(range) => ValueSet::all_but(a.union(b), range),
                None => ValueSet::nothing(),
            },
        }
    }

    /// Whether `self ∩ other` is non-empty, without building it: the scheduler asks this far more often than
    /// it needs the intersection itself.
    pub(super) fn overlaps(&self, other: &ValueSet) -> bool {
        match (self, other) {
            (ValueSet::Only(a), ValueSet::Only(b)) => {
                let (small, large) = if a.len() <= b.len() { (a, b) } else { (b, a) };
                small.iter().any(|v| large.contains(v))
            }
            (ValueSet::Only(finite), open @ ValueSet::AllBut { .. })
            | (open @ ValueSet::AllBut { .. }, ValueSet::Only(finite)) => {
                finite.iter().any(|v| open.has(v))
            }
            (ValueSet::AllBut { range: a, .. }, ValueSet::AllBut { range: b, .. }) => {
                intersect_ranges(*a, *b).is_some()
            }
        }
    }

    /// A deterministic member: the smallest listed value, or for a complement the integer nearest to 0 from
    /// above within the range that is not excluded (a plain number is a valid label value).
    pub(super) fn any(&self) -> Option<Cow<'_, str>> {
        match self {
            ValueSet::Only(values) => values.first().map(|v| Cow::Borrowed(v.as_str())),
            ValueSet::AllBut { excluded, range } => {
                let range = range.unwrap_or(IntRange {
                    min: i64::MIN,
                    max: i64::MAX,
                });
                Some(Cow::Owned(unexcluded_integer(excluded, range)))
            }
        }
    }
}

/// Intersects optional ranges, where `None` means "no numeric limit"; the outer `None` means "empty".
fn intersect_ranges(a: Option<IntRange>, b: Option<IntRange>) -> Option<Option<IntRange>> {
    match (a, b) {
        (Some(a), Some(b)) => a.intersect(b).map(Some),
        (one, None) | (None, one) => Some(one),
    }
}

/// An integer spelling in `range` that `excluded` does not name. Among `excluded.len() + 1` consecutive
/// integers one is free; when the range is too narrow for that, a zero-padded spelling of its first integer is.
fn unexcluded_integer(excluded: &Values, range: IntRange) -> String {
    let start = 0_i64.clamp(range.min, range.max);
    let span = i64::try_from(excluded.len()).unwrap_or(i64::MAX);
    let end = start.saturating_add(span).min(range.max);
    (start..=end)
        .map(|n| n.to_string())
        .find(|n| !excluded.contains(n))
        .unwrap_or_else(|| {
            let (sign, digits) = if start < 0 {
                ("-", start.unsigned_abs())
            } else {
                ("", start.unsigned_abs())
            };
            (1..)
                .map(|zeros| format!("{sign}{}{digits}", "0".repeat(zeros)))
                .find(|n| !excluded.contains(n))
                .unwrap_or_default()
        })
}

/// The operator-and-values part of a requirement, as messages show it: `In [amd64 arm64]`, `Exists`,
/// `Gte 4 and Lte 16`, `NotIn [7] and Gte 4`.
pub(super) struct Predicate<'a>(pub(super) &'a ValueSet);

impl fmt::Display for Predicate<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            ValueSet::Only(values) if values.is_empty() => f.write_str("DoesNotExist"),
            ValueSet::Only(values) => write!(f, "In {}", ValueList(values)),
            ValueSet::AllBut { excluded, range } => {
                let mut parts = Vec::with_capacity(3);
                if let Some(min) = range.and_then(IntRange::written_min) {
                    parts.push(format!("Gte {min}"));
                }
                if let Some(max) = range.and_then(IntRange::written_max) {
                    parts.push(format!("Lte {max}"));
                }
                if !excluded.is_empty() {
                    parts.push(format!("NotIn {}", ValueList(excluded)));
                }
                if parts.is_empty() {
                    f.write_str("Exists")
                } else {
                    f.write_str(&parts.join(" and "))
                }
            }
        }
    }
}

/// A value list in the `[a b c]` form Karpenter's messages use, cut after a few values.
pub(super) struct ValueList<'a, T>(pub(super) &'a T);

impl<'a, T> fmt::Display for ValueList<'a, T>
where
    &'a T: IntoIterator,
    <&'a T as IntoIterator>::Item: fmt::Display,
    <&'a T as IntoIterator>::IntoIter: ExactSizeIterator,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let values = self.0.into_iter();
        let total = values.len();
        f.write_str("[")?;
        for (i, value) in values.take(LISTED_VALUES).enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{value}")?;
        }
        if total > LISTED_VALUES {
            write!(f, " and {} others", total - LISTED_VALUES)?;
        }
        f.write_str("]")
    }
}
