//! Karpenter v1.14.1 `pkg/controllers/nodeoverlay/suite_test.go` and `store_test.go`, translated: each test names
//! the upstream case(s) it covers.

use super::*;
use crate::catalog::{CatalogSettings, Pricing};
use serde_json::json;
use std::sync::OnceLock;

const TYPES: [&str; 3] = ["c5.large", "m5.large", "m5.xlarge"];

fn catalog() -> Arc<Catalog> {
    static CATALOG: OnceLock<Arc<Catalog>> = OnceLock::new();
    CATALOG
        .get_or_init(|| {
            let all = Catalog::embedded(
                "us-east-1",
                &CatalogSettings::default(),
                &Pricing::snapshot(),
            )
            .expect("embedded catalog");
            let instance_types = all
                .instance_types
                .into_iter()
                .filter(|it| TYPES.contains(&it.name.as_str()))
                .collect();
            Arc::new(Catalog { instance_types })
        })
        .clone()
}

fn catalogs() -> BTreeMap<String, Arc<Catalog>> {
    [("default".to_owned(), catalog())].into_iter().collect()
}

fn pool(name: &str, labels: serde_json::Value) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": {
            "metadata": {"labels": labels},
            "spec": {"requirements": [],
                     "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
        }}
    }))
    .expect("a valid NodePool")
}

fn overlay(name: &str, spec: serde_json::Value) -> NodeOverlay {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
        "metadata": {"name": name}, "spec": spec
    }))
    .expect("a valid NodeOverlay")
}

fn types_in(key: &str, values: &[&str]) -> serde_json::Value {
    json!([{"key": key, "operator": "In", "values": values}])
}

const TYPE: &str = "node.kubernetes.io/instance-type";

fn verdicts(evaluation: &Evaluation) -> Vec<(&str, &Verdict)> {
    evaluation
        .verdicts
        .iter()
        .map(|(n, v)| (n.as_str(), v))
        .collect()
}

/// The type `name` as `pool` sees it in the overlaid catalog.
fn seen<'c>(catalog: &'c Catalog, pool: &str, name: &str) -> &'c InstanceType {
    catalog
        .instance_types
        .iter()
        .find(|it| {
            it.name == name
                && it
                    .requirements
                    .get(labels::NODEPOOL)
                    .is_none_or(|r| r.has(pool))
        })
        .expect("the type is in the catalog")
}

fn price(it: &InstanceType, zone: &str, capacity_type: CapacityType) -> Option<f64> {
    it.offerings
        .iter()
        .find(|o| o.zone == zone && o.capacity_type == capacity_type)
        .and_then(|o| o.price)
}

fn base_price(name: &str) -> f64 {
    price(
        catalog().get(name).expect("type"),
        "us-east-1a",
        CapacityType::OnDemand,
    )
    .expect("priced")
}

fn run(overlays: &[NodeOverlay], pools: &[NodePool]) -> (Arc<Catalog>, Evaluation) {
    let (catalogs, evaluation) = overlaid_catalogs(overlays, pools, &catalogs());
    (catalogs["default"].clone(), evaluation)
}

// "should return the same instance type when zero overlay are applied".
#[test]
fn no_overlays_leave_the_catalog_shared() {
    let (overlaid, evaluation) = run(&[], &[pool("a", json!({}))]);
    assert!(Arc::ptr_eq(&overlaid, &catalog()));
    assert!(evaluation.verdicts.is_empty());
}

// "should pass with a single overlay", "should apply pricing updates for instances types" (Price and
// PriceAdjustment entries), "should not apply adjustments for overlays that do not overlap with instance types
// requirements".
#[test]
fn a_price_or_an_adjustment_applies_to_the_types_it_selects() {
    for (spec_price, expect) in [
        (json!({"price": "13234.223"}), 13234.223),
        (
            json!({"priceAdjustment": "+1000"}),
            base_price("m5.large") + 1000.0,
        ),
        (
            json!({"priceAdjustment": "-50%"}),
            base_price("m5.large") / 2.0,
        ),
    ] {
        let mut spec = spec_price.clone();
        spec["requirements"] = types_in(TYPE, &["m5.large"]);
        let (overlaid, evaluation) = run(&[overlay("o", spec)], &[pool("a", json!({}))]);
        assert_eq!(verdicts(&evaluation), [("o", &Verdict::Applied)]);
        let m5 = seen(&overlaid, "a", "m5.large");
        for offering in &m5.offerings {
            let got = offering.price.expect("priced");
            assert!(
                (got - expect).abs() < 1e-9,
                "{spec_price}: {got} != {expect}"
            );
        }
        assert!(m5.overlaid.price && !m5.overlaid.capacity);
        let c5 = seen(&overlaid, "a", "c5.large");
        assert_eq!(c5, catalog().get("c5.large").expect("type"));
    }
}

// "should apply pricing updates for instances types for capacity type" / "for availability zone".
#[test]
fn offering_requirements_narrow_the_offerings_priced() {
    let spec = json!({"price": "7", "requirements": [
        {"key": TYPE, "operator": "In", "values": ["m5.large"]},
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1b"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
    ]});
    let (overlaid, _) = run(&[overlay("o", spec)], &[pool("a", json!({}))]);
    let m5 = seen(&overlaid, "a", "m5.large");
    assert_eq!(price(m5, "us-east-1b", CapacityType::OnDemand), Some(7.0));
    assert_eq!(
        price(m5, "us-east-1a", CapacityType::OnDemand),
        Some(base_price("m5.large"))
    );
    assert_ne!(price(m5, "us-east-1b", CapacityType::Spot), Some(7.0));
}

// "should fail validation for invalid requirements values" / "invalid capacity values", "should not apply pricing
// updates for invalid overlays".
#[test]
fn an_invalid_overlay_is_reported_and_changes_nothing() {
    let bad = overlay(
        "bad",
        json!({"price": "3", "requirements": [{"key": "karpenter.sh/custom", "operator": "Exists"}]}),
    );
    let cpu = overlay("cpu", json!({"requirements": [], "capacity": {"cpu": "1"}}));
    let (overlaid, evaluation) = run(&[bad, cpu], &[pool("a", json!({}))]);
    assert!(Arc::ptr_eq(&overlaid, &catalog()));
    for name in ["bad", "cpu"] {
        let verdict = &evaluation.verdicts[name];
        assert!(
            matches!(verdict, Verdict::Invalid(_)),
            "{name}: {verdict:?}"
        );
        assert_eq!(verdict.condition().1, "RuntimeValidation");
    }
}

// "should fail with conflicting pricing updates overlays with overlapping requirements", "should fail with pricing
// updates are the same overlays with overlapping requirements", "should fail with requirements overlays overlap on
// zone / on capacity type".
#[test]
fn equal_weights_setting_the_same_offering_conflict() {
    for (a, b) in [
        (json!({"price": "1.03"}), json!({"price": "23"})),
        (
            json!({"priceAdjustment": "+100"}),
            json!({"priceAdjustment": "+100"}),
        ),
    ] {
        let mut first = a.clone();
        first["requirements"] = types_in(TYPE, &["m5.large", "m5.xlarge"]);
        let mut second = b.clone();
        second["requirements"] = types_in("topology.kubernetes.io/zone", &["us-east-1a"]);
        // "b" is taken first (equal weights in reverse name order), so "a" is the one in conflict.
        let (overlaid, evaluation) = run(
            &[overlay("a", first), overlay("b", second)],
            &[pool("p", json!({}))],
        );
        assert_eq!(
            verdicts(&evaluation),
            [("a", &Verdict::Conflict), ("b", &Verdict::Applied)]
        );
        assert_eq!(
            evaluation.verdicts["a"].condition(),
            (false, "Conflict", "conflict with another overlay")
        );
        // Only "b" applies: m5.xlarge in us-east-1b keeps its price.
        let xl = seen(&overlaid, "p", "m5.xlarge");
        assert_eq!(
            price(xl, "us-east-1b", CapacityType::OnDemand),
            Some(base_price("m5.xlarge"))
        );
    }
}

// "should pass with conflicting pricing updates overlays with mutually exclusive requirements", "should pass with
// conflicting pricing update overlays with mutually exclusive weights", "should update price updates offerings
// instance types from multiple overlays with different weights".
#[test]
fn disjoint_requirements_or_different_weights_do_not_conflict_and_the_heavier_wins() {
    let (overlaid, evaluation) = run(
        &[
            overlay(
                "a",
                json!({"price": "54", "requirements": types_in(TYPE, &["m5.large"])}),
            ),
            overlay(
                "b",
                json!({"price": "23", "requirements": types_in(TYPE, &["c5.large"])}),
            ),
            overlay(
                "light",
                json!({"price": "1", "weight": 1, "requirements": []}),
            ),
            overlay(
                "heavy",
                json!({"price": "2", "weight": 10, "requirements": types_in(TYPE, &["m5.xlarge"])}),
            ),
        ],
        &[pool("p", json!({}))],
    );
    assert!(evaluation.verdicts.values().all(|v| *v == Verdict::Applied));
    let at = |name| {
        price(
            seen(&overlaid, "p", name),
            "us-east-1a",
            CapacityType::OnDemand,
        )
    };
    // Absent weight is 0: lighter than "light" (1), so "light" prices every type first, and the weight-0
    // overlays find those offerings already set by a heavier overlay.
    assert_eq!(at("m5.xlarge"), Some(2.0));
    assert_eq!(at("m5.large"), Some(1.0));
    assert_eq!(at("c5.large"), Some(1.0));
}

// "should fail with conflicting capacity overlays with overlapping requirements", "should pass with non conflicting
// capacity overlays with overlapping requirements", "should update capacity for instance types from multiple
// overlays", "should apply higher weight overlay when multiple overlays match the same instance type", "should
// apply pricing and capacity adjustment from two overlays on the same instance type".
#[test]
fn capacity_merges_by_weight_and_conflicts_on_the_same_resource() {
    let fuse = |name: &str, weight: Option<i32>, amount: &str, resource: &str| {
        let mut spec =
            json!({"requirements": types_in(TYPE, &["m5.large"]), "capacity": {resource: amount}});
        if let Some(w) = weight {
            spec["weight"] = json!(w);
        }
        overlay(name, spec)
    };
    let (_, evaluation) = run(
        &[
            fuse("a", None, "1", "smarter-devices/fuse"),
            fuse("b", None, "2", "smarter-devices/fuse"),
        ],
        &[pool("p", json!({}))],
    );
    assert_eq!(
        verdicts(&evaluation),
        [("a", &Verdict::Conflict), ("b", &Verdict::Applied)]
    );
    let (overlaid, evaluation) = run(
        &[
            fuse("fuse", None, "1", "smarter-devices/fuse"),
            fuse("huge", None, "100Mi", "hugepages-2Mi"),
            fuse("heavy", Some(5), "4", "smarter-devices/fuse"),
            overlay(
                "price",
                json!({"priceAdjustment": "+1", "requirements": types_in(TYPE, &["m5.large"])}),
            ),
        ],
        &[pool("p", json!({}))],
    );
    assert!(
        evaluation.verdicts.values().all(|v| *v == Verdict::Applied),
        "{evaluation:?}"
    );
    let m5 = seen(&overlaid, "p", "m5.large");
    assert_eq!(m5.capacity.get("smarter-devices/fuse"), 4);
    assert_eq!(m5.capacity.get("hugepages-2Mi"), 100 * 1024 * 1024);
    assert_eq!(
        m5.capacity.cpu,
        catalog().get("m5.large").expect("type").capacity.cpu
    );
    assert!(m5.overlaid.capacity && m5.overlaid.price);
    assert_eq!(m5.allocatable().get("smarter-devices/fuse"), 4);
}

// "should only apply override for nodepool that defined in the overlay requirements", "should only apply pricing
// updates for nodeclaim spec labels that defined in the overlay requirements", "should not return instance type
// requirements with nodepool, nodeclass, and custom nodepool labels".
#[test]
fn an_overlay_on_one_pool_gives_that_pool_its_own_variant() {
    let pools = [pool("a", json!({"team": "x"})), pool("b", json!({}))];
    for requirements in [types_in(labels::NODEPOOL, &["a"]), types_in("team", &["x"])] {
        let (overlaid, _) = run(
            &[overlay(
                "o",
                json!({"price": "9", "requirements": requirements}),
            )],
            &pools,
        );
        assert_eq!(overlaid.instance_types.len(), 2 * TYPES.len());
        for name in TYPES {
            let at = |pool| {
                price(
                    seen(&overlaid, pool, name),
                    "us-east-1a",
                    CapacityType::OnDemand,
                )
            };
            assert_eq!(at("a"), Some(9.0));
            assert_eq!(at("b"), Some(base_price(name)));
        }
        // The scheduler's view: each pool's template picks its own variant.
        let allocatable: Vec<Resources> = overlaid
            .instance_types
            .iter()
            .map(InstanceType::allocatable)
            .collect();
        for p in &pools {
            let template =
                crate::scheduling::Template::new(p, &overlaid, &allocatable).expect("template");
            assert_eq!(template.instance_types.len(), TYPES.len());
        }
    }
}

// "should not partial apply for a subset of nodepools", "should pass with conflicting pricing update overlays for
// all nodepools".
#[test]
fn an_overlay_in_conflict_in_one_pool_applies_in_none() {
    let pools = [pool("a", json!({})), pool("b", json!({}))];
    let (overlaid, evaluation) = run(
        &[
            overlay(
                "z-only-a",
                json!({"price": "5", "requirements": types_in(labels::NODEPOOL, &["a"])}),
            ),
            overlay("all", json!({"price": "6", "requirements": []})),
        ],
        &pools,
    );
    assert_eq!(
        verdicts(&evaluation),
        [("all", &Verdict::Conflict), ("z-only-a", &Verdict::Applied)]
    );
    let at = |pool| {
        price(
            seen(&overlaid, pool, "m5.large"),
            "us-east-1a",
            CapacityType::OnDemand,
        )
    };
    assert_eq!(at("a"), Some(5.0));
    assert_eq!(at("b"), Some(base_price("m5.large")));
}

#[test]
fn adjusted_prices_follow_karpenters_arithmetic() {
    let cases: [(Option<f64>, &str, Option<f64>); 8] = [
        (Some(1.02), "+1000", Some(1001.02)),
        (Some(1.0), "-0.25", Some(0.75)),
        (Some(1.0), "-3", Some(0.0)),
        (Some(2.0), "+10%", Some(2.2)),
        (Some(2.0), "-100%", Some(0.0)),
        (Some(2.0), "5.5", Some(5.5)),
        (None, "5.5", Some(5.5)),
        (None, "+1", None),
    ];
    for (price, change, expect) in cases {
        let got = adjusted_price(price, change);
        match (got, expect) {
            (Some(g), Some(e)) => assert!((g - e).abs() < 1e-9, "{change}: {g} != {e}"),
            _ => assert_eq!(got, expect, "{change}"),
        }
    }
}

#[test]
fn claims_say_when_an_overlaid_type_may_be_launched() {
    let (overlaid, _) = run(
        &[overlay(
            "o",
            json!({"price": "9", "capacity": {"example.com/x": "1"},
                               "requirements": types_in(TYPE, &["m5.large"])}),
        )],
        &[pool("p", json!({}))],
    );
    assert_eq!(
        claim_annotations(&overlaid, "p", ["m5.large", "c5.large"]),
        [
            (PRICE_OVERLAY_APPLIED, "true"),
            (CAPACITY_OVERLAY_APPLIED, "true")
        ]
    );
    assert!(claim_annotations(&overlaid, "p", ["c5.large"]).is_empty());
}
