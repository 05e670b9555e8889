//! NodeOverlay rules: the CEL rules of Karpenter's CRD (same messages) and its `RuntimeValidate` (requirements
//! through the NodePool requirement checks, restricted capacity names). Types, patterns and bounds are the
//! schema's, checked generically by `api::schema`.

use super::types::*;
use crate::labels;
use crate::nodepool::{
    is_single_non_negative_integer, validate_requirement, NodeSelectorRequirementWithMinValues,
};
use crate::operator::Operator;
use crate::validation::{FieldError, FieldPath, Findings, SchemaType};

/// The resources every node has: an overlay adds extended resources only (Karpenter's `WellKnownResources`).
pub const RESTRICTED_CAPACITY: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pods"];

/// Checks every rule of `overlay` (it has no transition rules).
pub fn validate_nodeoverlay(overlay: &NodeOverlay, findings: &mut Findings) {
    let spec = FieldPath::new("spec");
    if overlay.spec.price.is_some() && overlay.spec.price_adjustment.is_some() {
        findings.error(FieldError::rule(
            &spec,
            SchemaType::Object,
            "cannot set both 'price' and 'priceAdjustment'",
        ));
    }
    let path = spec.child("requirements");
    let reqs = &overlay.spec.requirements;
    let list_rule = |msg: &str| FieldError::rule(&path, SchemaType::Array, msg);
    let empty = |r: &OverlayRequirement| r.values.as_ref().is_none_or(Vec::is_empty);
    if reqs
        .iter()
        .any(|r| r.operator == Operator::NotIn && empty(r))
    {
        findings.error(list_rule(
            "requirements with operator 'NotIn' must have a value defined",
        ));
    }
    if reqs.iter().any(|r| r.operator == Operator::In && empty(r)) {
        findings.error(list_rule(
            "requirements with operator 'In' must have a value defined",
        ));
    }
    if reqs
        .iter()
        .any(|r| r.operator.is_numeric() && !is_single_non_negative_integer(r.values.as_deref()))
    {
        findings.error(list_rule(
            "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
        ));
    }
    for (i, req) in reqs.iter().enumerate() {
        let as_pool_requirement = NodeSelectorRequirementWithMinValues {
            key: req.key.clone(),
            operator: req.operator,
            values: req.values.clone(),
            min_values: None,
        };
        validate_requirement(
            &as_pool_requirement,
            &path.index(i),
            labels::overlay_restriction,
            findings,
        );
    }
    if let Some(capacity) = &overlay.spec.capacity {
        if capacity
            .keys()
            .any(|name| RESTRICTED_CAPACITY.contains(&name.as_str()))
        {
            findings.error(FieldError::rule(
                &spec.child("capacity"),
                SchemaType::Object,
                "invalid resource restricted",
            ));
        }
    }
}

/// What Karpenter's overlay controller finds wrong with a stored overlay (the webhook refuses all of it, but an
/// overlay may have been stored without it): the errors, joined, for the `ValidationSucceeded` condition.
pub fn runtime_validation(overlay: &NodeOverlay) -> Result<(), String> {
    let mut findings = Findings::default();
    validate_nodeoverlay(overlay, &mut findings);
    if findings.errors.is_empty() {
        return Ok(());
    }
    let errors: Vec<String> = findings.errors.iter().map(ToString::to_string).collect();
    Err(errors.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn overlay(reqs: Vec<(&str, Operator, &[&str])>) -> NodeOverlay {
        NodeOverlay::new(
            "o",
            NodeOverlaySpec {
                requirements: reqs
                    .into_iter()
                    .map(|(key, operator, values)| OverlayRequirement {
                        key: key.to_owned(),
                        operator,
                        values: (!values.is_empty())
                            .then(|| values.iter().map(|v| (*v).to_owned()).collect()),
                    })
                    .collect(),
                ..NodeOverlaySpec::default()
            },
        )
    }

    fn errors(o: &NodeOverlay) -> Vec<String> {
        let mut findings = Findings::default();
        validate_nodeoverlay(o, &mut findings);
        findings.errors.iter().map(ToString::to_string).collect()
    }

    fn refused_with(o: &NodeOverlay, message: &str) {
        let errors = errors(o);
        assert!(
            errors.iter().any(|e| e.contains(message)),
            "expected {message:?} in {errors:?}"
        );
        assert!(runtime_validation(o).is_err());
    }

    // Upstream: pkg/apis/v1alpha1/nodeoverlay_validation_test.go, Context("Requirements").
    #[test]
    fn requirements_follow_karpenters_overlay_rules() {
        refused_with(
            &overlay(vec![("Test", Operator::In, &[])]),
            "requirements with operator 'In' must have a value defined",
        );
        refused_with(
            &overlay(vec![("Test", Operator::NotIn, &[])]),
            "requirements with operator 'NotIn' must have a value defined",
        );
        for key in [
            "test.com.com}",
            "Test.com/test",
            "test/test/test",
            "test/",
            "/test",
        ] {
            assert!(
                !errors(&overlay(vec![(key, Operator::Exists, &[])])).is_empty(),
                "{key}"
            );
        }
        // "should allow for the karpenter.sh/nodepool label" (a NodePool may not use it).
        assert_eq!(
            errors(&overlay(vec![(labels::NODEPOOL, Operator::In, &["a"])])),
            Vec::<String>::new()
        );
        refused_with(
            &overlay(vec![("karpenter.sh/custom", Operator::Exists, &[])]),
            "label domain \"karpenter.sh\" is restricted",
        );
        refused_with(
            &overlay(vec![(labels::HOSTNAME, Operator::Exists, &[])]),
            "label \"kubernetes.io/hostname\" is restricted",
        );
        // "should allow well known label exceptions", "should allow empty requirements".
        assert!(errors(&overlay(vec![
            (labels::CAPACITY_TYPE, Operator::In, &["spot"]),
            ("karpenter.k8s.aws/instance-family", Operator::In, &["m5"]),
            ("node.kubernetes.io/instance-type", Operator::Exists, &[]),
        ]))
        .is_empty());
        assert!(errors(&overlay(vec![])).is_empty());
        // "should fail with invalid GT or LT values" / "GTE or LTE".
        for op in [Operator::Gt, Operator::Lt, Operator::Gte, Operator::Lte] {
            for values in [&[][..], &["1", "2"][..], &["-1"][..], &["a"][..]] {
                refused_with(
                    &overlay(vec![("key", op, values)]),
                    "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
                );
            }
        }
        // "should fail at runtime for requirement keys that are too long".
        let long = format!("test.com.test/test-{}", "a".repeat(250));
        assert!(runtime_validation(&overlay(vec![(&long, Operator::Exists, &[])])).is_err());
    }

    // Upstream: "shout not be able to set both price and priceAdjustment", Context("Capacity").
    #[test]
    fn price_and_capacity_rules() {
        let mut o = overlay(vec![]);
        o.spec.price = Some("0.432".into());
        o.spec.price_adjustment = Some("+10%".into());
        refused_with(&o, "cannot set both 'price' and 'priceAdjustment'");
        let mut o = overlay(vec![]);
        o.spec.capacity = Some(
            [("smarter-devices/fuse".to_owned(), IntOrString::Int(1))]
                .into_iter()
                .collect(),
        );
        assert!(runtime_validation(&o).is_ok());
        for name in RESTRICTED_CAPACITY {
            let mut o = overlay(vec![]);
            o.spec.capacity = Some(
                [(name.to_owned(), IntOrString::String("1".into()))]
                    .into_iter()
                    .collect(),
            );
            refused_with(&o, "invalid resource restricted");
        }
    }
}
