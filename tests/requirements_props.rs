//! Property tests for the requirements algebra: intersection is the conjunction of predicates and a
//! commutative, associative, idempotent operation; written terms round-trip; `compatible` agrees with
//! per-key intersections.

use kerf::api::operator::Operator;
use kerf::api::requirements::{AllowUndefined, Requirement, RequirementTerm, Requirements};
use proptest::prelude::*;

/// The values generated requirements mention.
const UNIVERSE: [&str; 12] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "a", "b"];
/// Values they never mention, including other spellings of integers, which numeric bounds still admit.
const OUTSIDE: [&str; 3] = ["z", "07", "+5"];
/// Generated bounds lie in `-2..12`, so after `Gt`/`Lt` conversion every range ends in `-3..=12`.
const BOUNDS: std::ops::Range<i64> = -2..12;
const KEYS: [&str; 3] = ["example.com/x", "example.com/y", "example.com/z"];

/// Values that tell any two generated requirements apart: the universe, the outsiders, and every integer a
/// range could start or end at, plus one beyond on each side, each also zero-padded: `Lte 3` with `NotIn [3]`
/// still admits `03`, so it is not `Lte 2`.
fn probes() -> impl Iterator<Item = String> {
    let integers = (BOUNDS.start - 2..=BOUNDS.end + 1).flat_map(|n| {
        let padded = if n < 0 {
            format!("-0{}", n.unsigned_abs())
        } else {
            format!("0{n}")
        };
        [n.to_string(), padded]
    });
    UNIVERSE
        .into_iter()
        .chain(OUTSIDE)
        .map(str::to_owned)
        .chain(integers)
}

fn term(key: &'static str) -> impl Strategy<Value = RequirementTerm> {
    (
        prop::sample::select(Operator::ALL.to_vec()),
        prop::collection::vec(prop::sample::select(UNIVERSE.to_vec()), 0..4),
        BOUNDS,
        prop::option::of(1_usize..4),
    )
        .prop_map(move |(operator, listed, bound, min_values)| {
            let values = match operator {
                Operator::In | Operator::NotIn => listed.into_iter().map(str::to_owned).collect(),
                Operator::Exists | Operator::DoesNotExist => Vec::new(),
                Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                    vec![bound.to_string()]
                }
            };
            RequirementTerm {
                key: key.to_owned(),
                operator,
                values,
                min_values,
            }
        })
}

/// A requirement on `key` built from 1–3 terms, so ranges and bounds with exclusions show up too.
fn requirement_on(key: &'static str) -> impl Strategy<Value = Requirement> {
    prop::collection::vec(term(key), 1..4).prop_map(|terms| {
        let mut all = Requirements::from_terms(terms).expect("generated terms are valid");
        all.remove(key).expect("one key")
    })
}

fn requirement() -> impl Strategy<Value = Requirement> {
    requirement_on(KEYS[0])
}

/// Requirements on a random subset of `KEYS`.
fn requirements() -> impl Strategy<Value = Requirements> {
    (
        prop::option::of(requirement_on(KEYS[0])),
        prop::option::of(requirement_on(KEYS[1])),
        prop::option::of(requirement_on(KEYS[2])),
    )
        .prop_map(|(x, y, z)| [x, y, z].into_iter().flatten().collect())
}

fn same_predicate(a: &Requirement, b: &Requirement) -> bool {
    probes().all(|v| a.has(&v) == b.has(&v)) && a.is_empty() == b.is_empty()
}

/// The written form without `minValues`, which says nothing about which values are admitted.
fn written_predicate(a: &Requirement) -> Vec<(Operator, Vec<String>)> {
    a.terms()
        .into_iter()
        .map(|term| (term.operator, term.values))
        .collect()
}

fn allows_absent(requirement: &Requirement) -> bool {
    matches!(
        requirement.operator(),
        Operator::NotIn | Operator::DoesNotExist
    )
}

/// Labels on a random subset of `KEYS` and of keys no generated requirement names, plus a deprecated key whose
/// stable spelling may be set too (both read as one key, narrowed).
fn labels() -> impl Strategy<Value = std::collections::BTreeMap<String, String>> {
    let value = || prop::option::of(prop::sample::select(UNIVERSE.to_vec()));
    (
        prop::collection::vec(value(), KEYS.len()),
        value(),
        value(),
        value(),
    )
        .prop_map(|(on_keys, other, beta_arch, arch)| {
            let named = KEYS.iter().zip(on_keys).filter_map(|(k, v)| Some((*k, v?)));
            let rest = [
                ("example.com/unnamed", other),
                ("beta.kubernetes.io/arch", beta_arch),
                ("kubernetes.io/arch", arch),
            ]
            .into_iter()
            .filter_map(|(k, v)| Some((k, v?)));
            named
                .chain(rest)
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
}

/// Requirements on a random subset of `KEYS` and the architecture key.
fn node_requirements() -> impl Strategy<Value = Requirements> {
    (
        requirements(),
        prop::option::of(requirement_on("kubernetes.io/arch")),
    )
        .prop_map(|(mut all, arch)| {
            all.extend(arch);
            all
        })
}

proptest! {
    #[test]
    fn labels_on_the_required_keys_are_as_compatible_as_all_labels(
        labels in labels(),
        required in node_requirements(),
    ) {
        for allow in [AllowUndefined::well_known_labels(), &AllowUndefined::default()] {
            prop_assert_eq!(
                Requirements::from_labels_on(&labels, &required).is_compatible(&required, allow),
                Requirements::from_labels(&labels).is_compatible(&required, allow)
            );
        }
    }

    #[test]
    fn intersection_is_the_conjunction(a in requirement(), b in requirement()) {
        let both = a.intersection(&b);
        for v in probes() {
            prop_assert_eq!(both.has(&v), a.has(&v) && b.has(&v), "value {}: {} ∩ {} = {}", v, a, b, both);
        }
        prop_assert_eq!(a.has_intersection(&b), !both.is_empty());
        prop_assert_eq!(both.min_values(), a.min_values().max(b.min_values()));
    }

    #[test]
    fn intersection_is_commutative(a in requirement(), b in requirement()) {
        let (ab, ba) = (a.intersection(&b), b.intersection(&a));
        prop_assert!(same_predicate(&ab, &ba));
        prop_assert_eq!(ab, ba);
    }

    #[test]
    fn intersection_is_associative(a in requirement(), b in requirement(), c in requirement()) {
        let (left, right) = (a.intersection(&b).intersection(&c), a.intersection(&b.intersection(&c)));
        prop_assert!(same_predicate(&left, &right));
        prop_assert_eq!(left, right);
    }

    #[test]
    fn intersection_is_idempotent(a in requirement()) {
        prop_assert_eq!(a.intersection(&a), a);
    }

    #[test]
    fn equal_predicates_have_equal_representations(a in requirement(), b in requirement()) {
        prop_assert_eq!(same_predicate(&a, &b), written_predicate(&a) == written_predicate(&b), "{} vs {}", a, b);
    }

    #[test]
    fn excluding_a_refused_value_changes_nothing(a in requirement(), v in prop::sample::select(UNIVERSE.to_vec())) {
        prop_assume!(!a.has(v));
        let excluded = Requirement::new(a.key(), Operator::NotIn, [v], None).expect("valid");
        prop_assert_eq!(a.intersection(&excluded), a);
    }

    #[test]
    fn any_is_a_member_unless_empty(a in requirement()) {
        match a.any() {
            Some(value) => prop_assert!(a.has(&value), "{} does not admit its own {}", a, value),
            None => {
                prop_assert!(a.is_empty());
                prop_assert!(probes().all(|v| !a.has(&v)));
            }
        }
    }

    #[test]
    fn terms_round_trip(a in requirement()) {
        let terms = a.terms();
        prop_assert_eq!(terms[0].operator, a.operator());
        let json = serde_json::to_string(&terms).expect("serialisable");
        let parsed: Vec<RequirementTerm> = serde_json::from_str(&json).expect("deserialisable");
        let back = Requirements::from_terms(parsed).expect("written terms are valid");
        let back = back.get(a.key()).expect("same key");
        prop_assert!(same_predicate(back, &a), "{} came back as {}", a, back);
        prop_assert_eq!(back, &a);
    }

    #[test]
    fn adding_terms_in_any_order_gives_the_same_requirements(
        terms in prop::collection::vec(term(KEYS[0]), 1..5).prop_shuffle(),
    ) {
        let forward = Requirements::from_terms(terms.clone()).expect("valid");
        let backward = Requirements::from_terms(terms.into_iter().rev()).expect("valid");
        prop_assert_eq!(forward, backward);
    }

    #[test]
    fn compatible_means_every_shared_key_intersects(a in requirements(), b in requirements()) {
        let shared_ok = b.iter().all(|theirs| match a.get(theirs.key()) {
            Some(mine) => mine.has_intersection(theirs) || (allows_absent(mine) && allows_absent(theirs)),
            None => true,
        });
        let everything = AllowUndefined::from_keys(KEYS);
        prop_assert_eq!(a.is_compatible(&b, &everything), shared_ok);
        prop_assert_eq!(a.compatible(&b, &everything).is_ok(), shared_ok);
        prop_assert_eq!(a.intersects(&b).is_ok(), shared_ok);

        let defined_ok = b.iter().all(|theirs| a.get(theirs.key()).is_some() || allows_absent(theirs));
        prop_assert_eq!(a.is_compatible(&b, &AllowUndefined::NONE), shared_ok && defined_ok);
        prop_assert_eq!(a.compatible(&b, &AllowUndefined::NONE).is_ok(), shared_ok && defined_ok);
    }

    #[test]
    fn compatible_keys_merge_into_satisfiable_requirements(a in requirements(), b in requirements()) {
        prop_assume!(a.is_compatible(&b, &AllowUndefined::from_keys(KEYS)));
        let mut merged = a.clone();
        merged.add_all(&b);
        for merged_requirement in merged.iter() {
            let key = merged_requirement.key();
            let either_absent = [a.get(key), b.get(key)].into_iter().flatten().all(allows_absent);
            prop_assert!(!merged_requirement.is_empty() || either_absent, "{} ∧ {} left {}", a, b, merged_requirement);
        }
    }
}
