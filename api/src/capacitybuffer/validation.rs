//! CapacityBuffer rules: the two CEL rules of its CRD (same messages); a strategy other than
//! `buffer.x-k8s.io/active-capacity` is admitted with a warning, since it is provisioned for the same way.

use super::types::*;
use crate::validation::{FieldError, FieldPath, Findings, SchemaType};

/// Checks every rule of `buffer` (it has no transition rules).
pub fn validate_capacitybuffer(buffer: &CapacityBuffer, findings: &mut Findings) {
    let spec = FieldPath::new("spec");
    let s = &buffer.spec;
    if s.pod_template_ref.is_some() && s.replicas.is_none() && s.limits.is_none() {
        findings.error(FieldError::rule(
            &spec,
            SchemaType::Object,
            "If podTemplateRef is set, replicas or limits must also be set",
        ));
    }
    if s.pod_template_ref.is_some() && s.scalable_ref.is_some() {
        findings.error(FieldError::rule(
            &spec,
            SchemaType::Object,
            "You must define either PodTemplateRef or ScalableRef, but not both",
        ));
    }
    if let Some(strategy) = s
        .provisioning_strategy
        .as_deref()
        .filter(|s| *s != ACTIVE_CAPACITY)
    {
        findings.warn(format!(
            "spec.provisioningStrategy: {strategy:?} is provisioned for as {ACTIVE_CAPACITY} (the only strategy Karpenter and kerf implement)"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(spec: serde_json::Value) -> Vec<String> {
        let buffer: CapacityBuffer = serde_json::from_value(json!({
            "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
            "metadata": {"name": "b", "namespace": "default"}, "spec": spec
        }))
        .expect("buffer");
        let mut findings = Findings::default();
        validate_capacitybuffer(&buffer, &mut findings);
        findings.errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_crds_rules_with_their_messages() {
        assert!(errors(json!({"podTemplateRef": {"name": "t"}, "replicas": 2})).is_empty());
        assert!(
            errors(json!({"podTemplateRef": {"name": "t"}, "limits": {"cpu": "4"}})).is_empty()
        );
        assert!(errors(
            json!({"scalableRef": {"kind": "Deployment", "name": "d"}, "percentage": 20})
        )
        .is_empty());
        let lone = errors(json!({"podTemplateRef": {"name": "t"}}));
        assert!(
            lone[0].contains("If podTemplateRef is set, replicas or limits must also be set"),
            "{lone:?}"
        );
        let both = errors(json!({"podTemplateRef": {"name": "t"}, "replicas": 1,
                                 "scalableRef": {"kind": "Deployment", "name": "d"}}));
        assert!(
            both[0].contains("You must define either PodTemplateRef or ScalableRef, but not both"),
            "{both:?}"
        );
    }
}
