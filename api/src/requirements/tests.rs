use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::NodeSelectorRequirement;

use super::*;
use crate::operator::Operator::{self, *};

fn req(operator: Operator, values: &[&str]) -> Requirement {
    Requirement::new("k", operator, values.iter().copied(), None).expect("valid requirement")
}

fn keyed(key: &str, operator: Operator, values: &[&str]) -> Requirement {
    Requirement::new(key, operator, values.iter().copied(), None).expect("valid requirement")
}

fn reqs(list: &[(&str, Operator, &[&str])]) -> Requirements {
    list.iter()
        .map(|(key, operator, values)| keyed(key, *operator, values))
        .collect()
}

/// The terms of a requirement as `(operator, values)`, the easiest thing to compare exactly.
fn shape(requirement: &Requirement) -> Vec<(Operator, Vec<String>)> {
    requirement
        .terms()
        .into_iter()
        .map(|term| (term.operator, term.values))
        .collect()
}

fn s(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| (*v).to_owned()).collect()
}

#[test]
fn in_intersect_in_keeps_common_values() {
    assert_eq!(
        req(In, &["a", "b"]).intersection(&req(In, &["b", "c"])),
        req(In, &["b"])
    );
    let disjoint = req(In, &["a"]).intersection(&req(In, &["b"]));
    assert!(disjoint.is_empty());
    assert_eq!(disjoint.operator(), DoesNotExist);
}

#[test]
fn in_intersect_not_in_removes_excluded_values_both_ways() {
    let (finite, excluded) = (req(In, &["a", "b"]), req(NotIn, &["b", "z"]));
    assert_eq!(finite.intersection(&excluded), req(In, &["a"]));
    assert_eq!(excluded.intersection(&finite), req(In, &["a"]));
}

#[test]
fn not_in_intersect_not_in_unions_exclusions() {
    let both = req(NotIn, &["a"]).intersection(&req(NotIn, &["b"]));
    assert_eq!(both, req(NotIn, &["a", "b"]));
    assert_eq!(both.operator(), NotIn);
    assert!(!both.has("a") && !both.has("b") && both.has("c"));
}

#[test]
fn exists_is_the_identity_and_not_in_nothing_is_exists() {
    let exists = req(Exists, &[]);
    assert!(exists.is_unconstrained());
    assert_eq!(
        req(NotIn, &[]),
        exists,
        "Karpenter treats NotIn [] as Exists"
    );
    for other in [
        req(In, &["a"]),
        req(NotIn, &["a"]),
        req(DoesNotExist, &[]),
        req(Gt, &["3"]),
        req(Lte, &["7"]),
    ] {
        assert_eq!(exists.intersection(&other), other);
        assert_eq!(other.intersection(&exists), other);
    }
}

#[test]
fn does_not_exist_absorbs_everything() {
    let none = req(DoesNotExist, &[]);
    assert!(none.is_empty() && none.any().is_none() && !none.has(""));
    for other in [
        req(In, &["a"]),
        req(NotIn, &["a"]),
        req(Exists, &[]),
        req(Gt, &["3"]),
    ] {
        assert!(none.intersection(&other).is_empty());
        assert!(!none.has_intersection(&other));
    }
}

#[test]
fn numeric_bounds_filter_in_values() {
    let values = &["2", "3", "4", "a", "04"];
    assert_eq!(
        req(Gt, &["3"]).intersection(&req(In, values)),
        req(In, &["04", "4"])
    );
    assert_eq!(
        req(Gte, &["3"]).intersection(&req(In, values)),
        req(In, &["04", "3", "4"])
    );
    assert_eq!(
        req(Lt, &["3"]).intersection(&req(In, values)),
        req(In, &["2"])
    );
    assert_eq!(
        req(Lte, &["3"]).intersection(&req(In, values)),
        req(In, &["2", "3"])
    );
}

#[test]
fn numeric_bounds_combine_into_inclusive_ranges() {
    let range = req(Gt, &["3"]).intersection(&req(Lt, &["6"]));
    assert_eq!(shape(&range), [(Gte, s(&["4"])), (Lte, s(&["5"]))]);
    assert!(!range.has("3") && range.has("4") && range.has("5") && !range.has("6"));
    assert_eq!(range, req(Gte, &["4"]).intersection(&req(Lte, &["5"])));
    assert_eq!(
        req(Gt, &["3"]).intersection(&req(Gt, &["5"])),
        req(Gte, &["6"])
    );
    assert_eq!(
        req(Lt, &["3"]).intersection(&req(Lte, &["9"])),
        req(Lte, &["2"])
    );
    assert!(req(Gt, &["3"]).intersection(&req(Lt, &["4"])).is_empty());
    assert!(req(Gte, &["3"]).intersection(&req(Lte, &["3"])).has("3"));
    assert!(req(Gte, &["4"]).intersection(&req(Lte, &["3"])).is_empty());
}

#[test]
fn numeric_bounds_at_the_edges_of_i64_do_not_overflow() {
    assert!(req(Gt, &[&i64::MAX.to_string()]).is_empty());
    assert!(req(Lt, &[&i64::MIN.to_string()]).is_empty());
    let integers = req(Gte, &[&i64::MIN.to_string()]);
    assert!(integers.has("0") && !integers.has("a"));
    assert_eq!(
        integers,
        req(Lte, &[&i64::MAX.to_string()]),
        "both mean 'any integer'"
    );
    assert_eq!(shape(&integers), [(Gte, s(&[&i64::MIN.to_string()]))]);
}

#[test]
fn numeric_bounds_admit_only_integers() {
    let gt = req(Gt, &["3"]);
    for admitted in ["4", "04", "+4", "1000"] {
        assert!(gt.has(admitted), "{admitted}");
    }
    for refused in ["3", "a", "4.5", "", " 4", "99999999999999999999"] {
        assert!(!gt.has(refused), "{refused:?}");
    }
    assert!(!req(Gt, &["3"]).intersection(&req(NotIn, &["7"])).has("a"));
}

#[test]
fn numeric_bounds_with_exclusions_keep_only_relevant_exclusions() {
    let both = req(Gt, &["3"]).intersection(&req(NotIn, &["a", "1", "5"]));
    assert_eq!(shape(&both), [(Gte, s(&["4"])), (NotIn, s(&["5"]))]);
    assert_eq!(both.operator(), Gte);
    assert!(both.has("4") && !both.has("5") && both.has("05") && !both.has("a"));
}

#[test]
fn numeric_operators_need_a_single_integer() {
    for values in [&[][..], &["1", "2"], &["x"], &["99999999999999999999"]] {
        let err = Requirement::new(
            "karpenter.k8s.aws/instance-cpu",
            Gt,
            values.iter().copied(),
            None,
        );
        assert!(
            matches!(err, Err(RequirementError::NotASingleInteger { .. })),
            "{values:?}"
        );
    }
    let err =
        Requirement::new("karpenter.k8s.aws/instance-cpu", Lte, ["x", "y"], None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "key karpenter.k8s.aws/instance-cpu: operator Lte needs a single integer value, got [x y]"
    );
}

#[test]
fn min_values_takes_the_larger_and_survives_emptiness() {
    let a = Requirement::new("k", In, ["a", "b", "c"], Some(2)).expect("valid");
    let b = Requirement::new("k", NotIn, ["c"], Some(3)).expect("valid");
    assert_eq!(a.intersection(&req(Exists, &[])).min_values(), Some(2));
    assert_eq!(req(Exists, &[]).intersection(&a).min_values(), Some(2));
    assert_eq!(a.intersection(&b).min_values(), Some(3));
    assert_eq!(
        a.intersection(&req(DoesNotExist, &[])).min_values(),
        Some(2)
    );
    assert!(a.terms().iter().all(|term| term.min_values == Some(2)));
}

#[test]
fn beta_keys_are_normalised() {
    assert_eq!(
        keyed("beta.kubernetes.io/arch", In, &["amd64"]).key(),
        labels::ARCH
    );
    assert_eq!(
        keyed("failure-domain.beta.kubernetes.io/zone", Exists, &[]).key(),
        labels::ZONE
    );
    let labels = BTreeMap::from([
        ("beta.kubernetes.io/arch".to_owned(), "amd64".to_owned()),
        ("kubernetes.io/arch".to_owned(), "arm64".to_owned()),
    ]);
    let merged = Requirements::from_labels(&labels);
    assert_eq!(merged.len(), 1);
    assert!(merged
        .get("beta.kubernetes.io/arch")
        .is_some_and(Requirement::is_empty));
    assert!(
        AllowUndefined::from_keys(["failure-domain.beta.kubernetes.io/zone"]).allows(labels::ZONE)
    );
}

#[test]
fn operator_reports_the_simplest_form_and_leads_the_terms() {
    let cases = [
        (req(In, &["b", "a"]), In, vec![(In, s(&["a", "b"]))]),
        (req(In, &[]), DoesNotExist, vec![(DoesNotExist, vec![])]),
        (req(NotIn, &["a"]), NotIn, vec![(NotIn, s(&["a"]))]),
        (req(Exists, &["ignored"]), Exists, vec![(Exists, vec![])]),
        (
            req(DoesNotExist, &["ignored"]),
            DoesNotExist,
            vec![(DoesNotExist, vec![])],
        ),
        (req(Gt, &["3"]), Gte, vec![(Gte, s(&["4"]))]),
        (req(Lt, &["3"]), Lte, vec![(Lte, s(&["2"]))]),
        (req(Gte, &["3"]), Gte, vec![(Gte, s(&["3"]))]),
        (req(Lte, &["3"]), Lte, vec![(Lte, s(&["3"]))]),
        (
            req(Lt, &["3"]).intersection(&req(NotIn, &["1"])),
            Lte,
            vec![(Lte, s(&["2"])), (NotIn, s(&["1"]))],
        ),
    ];
    for (requirement, operator, terms) in cases {
        assert_eq!(requirement.operator(), operator, "{requirement}");
        assert_eq!(shape(&requirement), terms, "{requirement}");
    }
}

#[test]
fn any_is_a_deterministic_member() {
    let cases = [
        (req(In, &["b", "a"]), "a"),
        (req(Exists, &[]), "0"),
        (req(NotIn, &["0", "1"]), "2"),
        (req(Gt, &["4"]), "5"),
        (req(Lte, &["-3"]), "-3"),
        (
            req(Gte, &["5"])
                .intersection(&req(Lte, &["5"]))
                .intersection(&req(NotIn, &["5", "05"])),
            "005",
        ),
        (req(Lte, &["-3"]).intersection(&req(NotIn, &["-3"])), "-03"),
    ];
    for (requirement, expected) in cases {
        let value = requirement.any().expect("non-empty");
        assert_eq!(value, expected, "{requirement}");
        assert!(requirement.has(&value));
    }
}

#[test]
fn len_and_values_describe_finite_sets_only() {
    assert_eq!(req(In, &["a", "b", "a"]).len(), Some(2));
    assert_eq!(req(DoesNotExist, &[]).len(), Some(0));
    assert_eq!(req(NotIn, &["a"]).len(), None);
    assert_eq!(req(Gte, &["1"]).len(), None);
    assert_eq!(req(In, &["a"]).values().map(|v| v.len()), Some(1));
    assert!(req(Exists, &[]).values().is_none());
}

#[test]
fn display_is_short_and_readable() {
    let many: Vec<String> = (0..8).map(|n| n.to_string()).collect();
    assert_eq!(req(In, &["b", "a"]).to_string(), "k In [a b]");
    assert_eq!(
        Requirement::one_of("k", many.iter()).to_string(),
        "k In [0 1 2 3 4 and 3 others]"
    );
    let range = Requirement::new("k", Gt, ["3"], Some(2))
        .expect("valid")
        .intersection(&req(Lt, &["6"]));
    assert_eq!(range.to_string(), "k Gte 4 and Lte 5 minValues 2");
    let requirements = reqs(&[("b", Exists, &[]), ("a", NotIn, &["x"])]);
    assert_eq!(requirements.to_string(), "a NotIn [x], b Exists");
}

#[test]
fn compatible_reports_disjoint_values_with_both_sides() {
    let nodepool = reqs(&[(labels::ARCH, In, &["amd64"])]);
    let pod = reqs(&[("beta.kubernetes.io/arch", In, &["arm64"])]);
    let err = nodepool
        .compatible(&pod, AllowUndefined::well_known_labels())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "key kubernetes.io/arch, requires In [arm64], but only In [amd64] is allowed"
    );
    assert_eq!(err.key(), labels::ARCH);
    assert!(!nodepool.is_compatible(&pod, AllowUndefined::well_known_labels()));
    let pod = reqs(&[(labels::ARCH, NotIn, &["arm64"])]);
    assert_eq!(nodepool.compatible(&pod, &AllowUndefined::NONE), Ok(()));
}

#[test]
fn compatible_refuses_undefined_custom_labels() {
    let nodepool = reqs(&[(labels::ARCH, In, &["amd64"])]);
    let pod = reqs(&[("example.com/team", In, &["a"])]);
    let err = nodepool
        .compatible(&pod, AllowUndefined::well_known_labels())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "label \"example.com/team\" does not have known values"
    );
    assert!(!nodepool.is_compatible(&pod, AllowUndefined::well_known_labels()));
    for operator in [Exists, Gt] {
        let pod = reqs(&[("example.com/team", operator, &["1"])]);
        assert!(
            nodepool
                .compatible(&pod, AllowUndefined::well_known_labels())
                .is_err(),
            "{operator:?}"
        );
    }
}

#[test]
fn compatible_allows_undefined_labels_that_may_be_absent() {
    let nodepool = Requirements::new();
    let pod = reqs(&[
        ("example.com/team", NotIn, &["a"]),
        ("example.com/gpu", DoesNotExist, &[]),
    ]);
    assert_eq!(nodepool.compatible(&pod, &AllowUndefined::NONE), Ok(()));
    assert!(nodepool.is_compatible(&pod, &AllowUndefined::NONE));
}

#[test]
fn compatible_allows_undefined_well_known_labels_only_when_asked() {
    let nodepool = reqs(&[(labels::CAPACITY_TYPE, In, &["spot"])]);
    let pod = reqs(&[(labels::ZONE, In, &["us-west-2a"])]);
    assert_eq!(
        nodepool.compatible(&pod, AllowUndefined::well_known_labels()),
        Ok(())
    );
    let err = nodepool
        .compatible(&pod, &AllowUndefined::NONE)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "label \"topology.kubernetes.io/zone\" does not have known values"
    );
    assert!(!nodepool.is_compatible(&pod, &AllowUndefined::NONE));
    let custom = AllowUndefined::from_keys(["example.com/team"]);
    assert!(nodepool.is_compatible(&reqs(&[("example.com/team", In, &["a"])]), &custom));
}

#[test]
fn compatible_hints_at_a_similar_key() {
    let nodepool = reqs(&[("example.com/team", In, &["a"])]);
    let pod = reqs(&[
        ("kubernetes.io/zone", In, &["us-west-2a"]),
        ("other.io/team", In, &["a"]),
    ]);
    let err = nodepool
        .compatible(&pod, AllowUndefined::well_known_labels())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "label \"kubernetes.io/zone\" does not have known values (typo of \"topology.kubernetes.io/zone\"?)"
    );
    let pod = reqs(&[("other.io/team", In, &["a"])]);
    let err = nodepool
        .compatible(&pod, &AllowUndefined::NONE)
        .unwrap_err();
    assert_eq!(
        err,
        Incompatibility::UndefinedLabel {
            key: "other.io/team".into(),
            hint: Some("example.com/team".into())
        }
    );
}

#[test]
fn compatible_reports_undefined_labels_before_disjoint_values() {
    let nodepool = reqs(&[("a.io/x", In, &["1"])]);
    let pod = reqs(&[("a.io/x", In, &["2"]), ("z.io/y", In, &["1"])]);
    let err = nodepool
        .compatible(&pod, &AllowUndefined::NONE)
        .unwrap_err();
    assert_eq!(err.key(), "z.io/y");
    assert!(matches!(err, Incompatibility::UndefinedLabel { .. }));
}

#[test]
fn intersects_lets_labels_that_may_be_absent_meet() {
    let nodepool = reqs(&[("example.com/gpu", DoesNotExist, &[])]);
    let pod = reqs(&[("example.com/gpu", NotIn, &["a100"])]);
    assert_eq!(nodepool.intersects(&pod), Ok(()));
    assert!(nodepool.has_intersection(&pod));
    assert_eq!(nodepool.intersects(&nodepool), Ok(()));
    let pod = reqs(&[("example.com/gpu", In, &["a100"])]);
    assert!(!nodepool.has_intersection(&pod));
    let err = nodepool.intersects(&pod).unwrap_err();
    assert_eq!(
        err.to_string(),
        "key example.com/gpu, requires In [a100], but only DoesNotExist is allowed"
    );
    let pod = reqs(&[("example.com/gpu", Exists, &[])]);
    assert!(nodepool.intersects(&pod).is_err());
}

#[test]
fn intersects_ignores_keys_one_side_lacks() {
    let a = reqs(&[("a.io/x", In, &["1"])]);
    let b = reqs(&[("b.io/y", In, &["1"])]);
    assert_eq!(a.intersects(&b), Ok(()));
    let numeric = reqs(&[
        ("karpenter.k8s.aws/instance-cpu", Gt, &["8"]),
        ("a.io/x", In, &["1"]),
    ]);
    let small = reqs(&[("karpenter.k8s.aws/instance-cpu", In, &["2", "4"])]);
    let err = numeric.intersects(&small).unwrap_err();
    assert_eq!(
        err.to_string(),
        "key karpenter.k8s.aws/instance-cpu, requires In [2 4], but only Gte 9 is allowed"
    );
}

#[test]
fn add_intersects_on_existing_keys() {
    let mut all = reqs(&[("k", In, &["a", "b"])]);
    all.add(keyed("k", NotIn, &["a"]));
    all.add(keyed("j", Exists, &[]));
    assert_eq!(all.get("k"), Some(&req(In, &["b"])));
    let mut merged = Requirements::new();
    merged.add_all(&all);
    merged.add_all(&reqs(&[("j", In, &["x"])]));
    assert_eq!(merged.get("j"), Some(&keyed("j", In, &["x"])));
    assert_eq!(merged.remove("j"), Some(keyed("j", In, &["x"])));
    assert_eq!(merged.len(), 1);
}

#[test]
fn labels_are_the_single_valued_requirements() {
    let all = reqs(&[
        ("one", In, &["x"]),
        ("two", In, &["x", "y"]),
        ("none", DoesNotExist, &[]),
        ("any", Exists, &[]),
        ("not", NotIn, &["x"]),
    ]);
    assert_eq!(
        all.labels(),
        BTreeMap::from([("one".to_owned(), "x".to_owned())])
    );
}

#[test]
fn node_selector_requirements_parse_their_operator() {
    let selector = |operator: &str, values: Option<&[&str]>| NodeSelectorRequirement {
        key: "beta.kubernetes.io/os".into(),
        operator: operator.into(),
        values: values.map(s),
    };
    let parsed = Requirements::from_node_selector(&[
        selector("In", Some(&["linux"])),
        selector("Exists", None),
    ])
    .expect("valid selector");
    assert_eq!(
        parsed.get(labels::OS),
        Some(&keyed(labels::OS, In, &["linux"]))
    );
    let err = Requirements::from_node_selector(&[selector("Near", None)]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "key beta.kubernetes.io/os: unsupported operator \"Near\""
    );
    assert!(Requirements::from_node_selector(&[selector("Gt", None)]).is_err());
}

#[test]
fn terms_serialise_as_key_operator_values() {
    let all = reqs(&[("k", In, &["b", "a"]), ("e", Exists, &[])]);
    let json = serde_json::to_string(&all.terms()).expect("serialisable");
    assert_eq!(
        json,
        r#"[{"key":"e","operator":"Exists","values":[]},{"key":"k","operator":"In","values":["a","b"]}]"#
    );
    let with_min = Requirement::new("k", In, ["a"], Some(1)).expect("valid");
    let json = serde_json::to_string(&with_min.terms()).expect("serialisable");
    assert_eq!(
        json,
        r#"[{"key":"k","operator":"In","values":["a"],"minValues":1}]"#
    );
    let back: Vec<RequirementTerm> =
        serde_json::from_str(r#"[{"key":"e","operator":"Exists"}]"#).expect("valid");
    assert_eq!(
        Requirements::from_terms(back),
        Ok(reqs(&[("e", Exists, &[])]))
    );
}
