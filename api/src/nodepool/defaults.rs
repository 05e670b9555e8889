//! NodePool defaulting (api-rules.md §2.1), applied to the raw JSON so the webhook's JSON Patch only adds
//! what was missing and never rewrites what the user wrote (GitOps tools would see drift).

use serde_json::{json, Map, Value};

/// Fills in Karpenter v1.14's defaults, plus kerf's `consolidateAfter: 0s` when `disruption` lacks it.
pub fn default_nodepool(object: &mut Value) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(disruption) = spec
        .entry("disruption")
        .or_insert_with(|| json!({}))
        .as_object_mut()
    {
        default_disruption(disruption);
    }
    let template_spec = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut);
    if let Some(template_spec) = template_spec {
        template_spec
            .entry("expireAfter")
            .or_insert_with(|| json!("720h"));
    }
}

fn default_disruption(disruption: &mut Map<String, Value>) {
    disruption
        .entry("consolidateAfter")
        .or_insert_with(|| json!("0s"));
    disruption
        .entry("consolidationPolicy")
        .or_insert_with(|| json!("WhenEmptyOrUnderutilized"));
    let budgets = disruption
        .entry("budgets")
        .or_insert_with(|| json!([{"nodes": "10%"}]));
    for budget in budgets.as_array_mut().into_iter().flatten() {
        if let Some(budget) = budget.as_object_mut() {
            budget.entry("nodes").or_insert_with(|| json!("10%"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_disruption_and_expiry() {
        let mut np = json!({"spec": {"template": {"spec": {"requirements": []}}}});
        default_nodepool(&mut np);
        assert_eq!(
            np,
            json!({"spec": {
                "template": {"spec": {"requirements": [], "expireAfter": "720h"}},
                "disruption": {"consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized", "budgets": [{"nodes": "10%"}]}
            }})
        );
    }

    #[test]
    fn keeps_what_the_user_wrote_and_defaults_inside_it() {
        let mut np = json!({"spec": {"template": {"spec": {"expireAfter": "20m0s"}}, "disruption": {"budgets": [{"schedule": "@daily", "duration": "10m"}]}}});
        default_nodepool(&mut np);
        assert_eq!(np["spec"]["template"]["spec"]["expireAfter"], "20m0s");
        assert_eq!(
            np["spec"]["disruption"],
            json!({"consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized", "budgets": [{"nodes": "10%", "schedule": "@daily", "duration": "10m"}]})
        );
        let mut empty_budgets = json!({"spec": {"disruption": {"budgets": []}}});
        default_nodepool(&mut empty_budgets);
        assert_eq!(empty_budgets["spec"]["disruption"]["budgets"], json!([]));
    }

    #[test]
    fn leaves_objects_without_a_spec_alone() {
        let mut odd = json!({"spec": "nonsense"});
        default_nodepool(&mut odd);
        assert_eq!(odd, json!({"spec": "nonsense"}));
    }
}
