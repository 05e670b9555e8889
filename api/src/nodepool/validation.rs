//! NodePool rule checks (api-rules.md §2): the CEL rules of Karpenter's CRD, its runtime validation (RT) and
//! kerf's stricter checks (kerf+). Schema-level checks (types, enums, patterns, bounds) are done generically
//! from the CRD schema by `api::schema`; these run on the typed object once it parses.

use super::types::*;
use crate::cron::CronSchedule;
use crate::labels;
use crate::operator::Operator;
use crate::validation::grammar::{self, DurationError};
use crate::validation::{elide, FieldError, FieldPath, Findings, SchemaType, MAX_VALUE_CHARS};
use std::collections::{BTreeMap, HashSet};

/// Budgets whose `nodes` is not `"0"` only restrict: users often expect a schedule to allow disruption.
const SCHEDULED_BUDGET_WARNING: &str = "restricts disruption only while its schedule is active; a budget never allows more than the others. To block disruption during a window, use nodes: \"0\"";

/// Checks every rule; `old` is the stored object on UPDATE, for the transition rules.
pub fn validate_nodepool(np: &NodePool, old: Option<&NodePool>, findings: &mut Findings) {
    let spec = FieldPath::new("spec");
    let template = spec.child("template");
    if let Some(labels) = &np
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref())
    {
        validate_template_labels(labels, &template.child("metadata.labels"), findings);
    }
    let tspec = &np.spec.template.spec;
    let tspec_path = template.child("spec");
    validate_requirements(
        &tspec.requirements,
        &tspec_path.child("requirements"),
        findings,
    );
    validate_taints(tspec, &tspec_path, findings);
    validate_node_class_ref(
        &tspec.node_class_ref,
        old,
        &tspec_path.child("nodeClassRef"),
        findings,
    );
    check_duration(
        tspec.expire_after.as_deref(),
        &tspec_path.child("expireAfter"),
        findings,
    );
    check_duration(
        tspec.termination_grace_period.as_deref(),
        &tspec_path.child("terminationGracePeriod"),
        findings,
    );
    if let Some(disruption) = &np.spec.disruption {
        validate_disruption(disruption, &spec.child("disruption"), findings);
    }
    validate_static(&np.spec, old, &spec, findings);
}

/// api-rules.md §2.2: static NodePools (`replicas`) allow only `limits.nodes`, no `weight`, and no switching mode.
fn validate_static(
    spec: &NodePoolSpec,
    old: Option<&NodePool>,
    path: &FieldPath,
    findings: &mut Findings,
) {
    if let Some(old) = old {
        if old.spec.replicas.is_some() != spec.replicas.is_some() {
            let msg = "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes";
            findings.error(FieldError::rule(path, SchemaType::Object, msg).never_ratchets());
        }
    }
    if spec.replicas.is_none() {
        return;
    }
    if spec
        .limits
        .as_ref()
        .is_some_and(|limits| limits.keys().any(|k| k != "nodes"))
    {
        findings.error(FieldError::rule(
            path,
            SchemaType::Object,
            "only 'limits.nodes' is supported on static NodePools",
        ));
    }
    if spec.weight.is_some() {
        findings.error(FieldError::rule(
            path,
            SchemaType::Object,
            "'weight' is not supported on static NodePools",
        ));
    }
}

/// api-rules.md §2.3 (on the map) and §2.6 (per entry).
fn validate_template_labels(
    labels: &BTreeMap<String, String>,
    path: &FieldPath,
    findings: &mut Findings,
) {
    let mut restrictions: Vec<&str> = labels
        .keys()
        .filter_map(|k| labels::restriction(k))
        .collect();
    restrictions.dedup();
    for message in restrictions {
        findings.error(FieldError::rule(path, SchemaType::Object, message));
    }
    for (key, value) in labels {
        let entry = path.key(key);
        // What the details quote of user text is bounded like the values errors carry.
        let (key_text, value_text) = (shown(key), shown(value));
        let key_problems = grammar::qualified_name_problems(key);
        if !key_problems.is_empty() {
            let detail = format!(
                "invalid key name {key_text:?} in labels, {:?}",
                key_problems.join("; ")
            );
            findings.error(FieldError::invalid(&entry, key, detail));
        } else if labels::is_runtime_restricted(key) {
            let detail = format!(
                "invalid key name {key_text:?} in labels, {}",
                labels::runtime_restriction_message(key)
            );
            findings.error(FieldError::invalid(&entry, key, detail));
        }
        let value_problems = grammar::label_value_problems(value);
        if !value_problems.is_empty() {
            let detail = format!(
                "invalid value: {value_text} for label[{key_text}], {}",
                value_problems.join("; ")
            );
            findings.error(FieldError::invalid(&entry, value, detail));
        }
    }
}

/// api-rules.md §2.4: the list rules, then each requirement's key and values.
fn validate_requirements(
    reqs: &[NodeSelectorRequirementWithMinValues],
    path: &FieldPath,
    findings: &mut Findings,
) {
    let list_rule = |msg: &str| FieldError::rule(path, SchemaType::Array, msg);
    let values_len =
        |r: &NodeSelectorRequirementWithMinValues| r.values.as_ref().map_or(0, Vec::len);
    if reqs
        .iter()
        .any(|r| r.operator == Operator::In && values_len(r) == 0)
    {
        findings.error(list_rule(
            "requirements with operator 'In' must have a value defined",
        ));
    }
    if reqs
        .iter()
        .any(|r| r.operator.is_numeric() && !is_single_non_negative_integer(r.values.as_deref()))
    {
        findings.error(list_rule(
            "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
        ));
    }
    if reqs.iter().any(|r| {
        r.operator == Operator::In && r.min_values.is_some_and(|m| (values_len(r) as i64) < m)
    }) {
        findings.error(list_rule(
            "requirements with 'minValues' must have at least that many values specified in the 'values' field",
        ));
    }
    for (i, req) in reqs.iter().enumerate() {
        validate_requirement(req, &path.index(i), labels::restriction, findings);
    }
}

/// User text as an error's detail quotes it: elided like the values errors carry.
fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    elide(text, MAX_VALUE_CHARS)
}

pub(crate) fn is_single_non_negative_integer(values: Option<&[String]>) -> bool {
    match values {
        Some([value]) => value.parse::<i64>().is_ok_and(|n| n >= 0),
        _ => false,
    }
}

/// One requirement's key and values; `restriction` is the CRD's key rule (NodePools and NodeOverlays restrict
/// different keys), the rest is Karpenter's runtime `ValidateRequirement`.
pub(crate) fn validate_requirement(
    req: &NodeSelectorRequirementWithMinValues,
    path: &FieldPath,
    restriction: fn(&str) -> Option<&'static str>,
    findings: &mut Findings,
) {
    let key_path = path.child("key");
    let key = labels::normalize_key(&req.key);
    if let Some(message) = restriction(&req.key) {
        findings.error(FieldError::rule(&key_path, SchemaType::String, message));
    } else if labels::is_runtime_restricted(key) {
        findings.error(FieldError::invalid(
            &key_path,
            &req.key,
            labels::runtime_restriction_message(key),
        ));
    }
    let key_problems = grammar::qualified_name_problems(&req.key);
    if !key_problems.is_empty() {
        let detail = format!(
            "key {} is not a qualified name, {}",
            shown(&req.key),
            key_problems.join("; ")
        );
        findings.error(FieldError::invalid(&key_path, &req.key, detail));
    }
    let values = req.values.as_deref().unwrap_or_default();
    for (j, value) in values.iter().enumerate() {
        let problems = grammar::label_value_problems(value);
        if !problems.is_empty() {
            let detail = format!(
                "invalid value {} for key {}, {}",
                shown(value),
                shown(&req.key),
                problems.join("; ")
            );
            findings.error(FieldError::invalid(
                &path.child("values").index(j),
                value,
                detail,
            ));
        }
    }
    if req.operator == Operator::In {
        validate_known_values(req, key, values, path, findings);
    }
}

/// api-rules.md §2.4 RT: `In` on capacity type or tenancy must name at least one (and `minValues`) known value.
fn validate_known_values(
    req: &NodeSelectorRequirementWithMinValues,
    key: &str,
    values: &[String],
    path: &FieldPath,
    findings: &mut Findings,
) {
    let Some(known) = labels::known_values(key) else {
        return;
    };
    let (valid, unknown): (Vec<&String>, Vec<&String>) =
        values.iter().partition(|v| known.contains(&v.as_str()));
    let all = elide(&values.join(" "), MAX_VALUE_CHARS).into_owned();
    if valid.is_empty() && !values.is_empty() {
        let unknown: Vec<&str> = unknown.iter().map(|s| s.as_str()).collect();
        let detail = format!(
            "no valid values found in [{all}] for {key}, expected one of: [{}], got: [{}]",
            known.join(" "),
            shown(&unknown.join(" "))
        );
        findings.error(FieldError::invalid(&path.child("values"), &all, detail));
        return;
    }
    if let Some(min) = req.min_values.filter(|m| (valid.len() as i64) < *m) {
        let detail = format!(
            "not enough valid values found in [{all}] for {key}, expected at least {min} valid values from: [{}], got: {}",
            known.join(" "),
            valid.len()
        );
        findings.error(FieldError::invalid(&path.child("values"), &all, detail));
    } else if !unknown.is_empty() {
        let unknown: Vec<&str> = unknown.iter().map(|s| s.as_str()).collect();
        findings.warn(format!(
            "{}: {key} values [{}] are not known and will never match; known values are [{}]",
            path.child("values"),
            unknown.join(" "),
            known.join(" ")
        ));
    }
}

/// api-rules.md §2.5: RT length limits and (key, effect) pairs unique across `taints` and `startupTaints`.
fn validate_taints(tspec: &NodeClaimTemplateSpec, path: &FieldPath, findings: &mut Findings) {
    let mut seen = HashSet::new();
    for (field, taints) in [
        ("taints", &tspec.taints),
        ("startupTaints", &tspec.startup_taints),
    ] {
        for (i, taint) in taints.iter().flatten().enumerate() {
            let item = path.child(field).index(i);
            for (name, text) in [("key", Some(&taint.key)), ("value", taint.value.as_ref())] {
                let Some(text) = text else { continue };
                let problems = grammar::qualified_name_problems(text);
                // Pattern errors are the schema's; only the length limits are left to report here.
                if grammar::matches_qualified_name_pattern(text) && !problems.is_empty() {
                    let detail = format!("invalid value: {} in {field}", problems.join("; "));
                    findings.error(FieldError::invalid(&item.child(name), text, detail));
                }
            }
            if !seen.insert((taint.key.clone(), taint.effect)) {
                let detail = format!(
                    "duplicate taint Key/Effect pair {}={}",
                    shown(&taint.key),
                    taint.effect.as_str()
                );
                findings.error(FieldError::invalid(&item, &taint.key, detail));
            }
        }
    }
}

/// api-rules.md §2.7: non-empty fields; `group` and `kind` immutable on UPDATE (a changed `name` is drift, not an
/// error).
fn validate_node_class_ref(
    r: &NodeClassReference,
    old: Option<&NodePool>,
    path: &FieldPath,
    findings: &mut Findings,
) {
    for (field, value) in [("group", &r.group), ("kind", &r.kind), ("name", &r.name)] {
        if value.is_empty() {
            findings.error(FieldError::rule(
                &path.child(field),
                SchemaType::String,
                format!("{field} may not be empty"),
            ));
        }
    }
    let Some(old) = old.map(|o| &o.spec.template.spec.node_class_ref) else {
        return;
    };
    if old.group != r.group {
        findings.error(
            FieldError::rule(path, SchemaType::Object, "nodeClassRef.group is immutable")
                .never_ratchets(),
        );
    }
    if old.kind != r.kind {
        findings.error(
            FieldError::rule(path, SchemaType::Object, "nodeClassRef.kind is immutable")
                .never_ratchets(),
        );
    }
}

/// api-rules.md §1.3: a duration too long for Go's 64-bit nanoseconds would make the object undecodable for Karpenter.
fn check_duration(value: Option<&str>, path: &FieldPath, findings: &mut Findings) {
    let Some(value) = value.filter(|v| *v != "Never") else {
        return;
    };
    if grammar::parse_duration(value) == Err(DurationError::Overflow) {
        findings.error(FieldError::invalid(
            path,
            value,
            DurationError::OVERFLOW_MESSAGE,
        ));
    }
}

/// api-rules.md §2.8: budgets, and the overflow check on `consolidateAfter`.
fn validate_disruption(disruption: &Disruption, path: &FieldPath, findings: &mut Findings) {
    check_duration(
        disruption.consolidate_after.as_deref(),
        &path.child("consolidateAfter"),
        findings,
    );
    let budgets_path = path.child("budgets");
    let budgets = disruption.budgets.as_deref().unwrap_or_default();
    if budgets
        .iter()
        .any(|b| b.schedule.is_some() != b.duration.is_some())
    {
        findings.error(FieldError::rule(
            &budgets_path,
            SchemaType::Array,
            "'schedule' must be set with 'duration'",
        ));
    }
    for (i, budget) in budgets.iter().enumerate() {
        validate_budget(budget, &budgets_path.index(i), findings);
    }
}

fn validate_budget(budget: &Budget, path: &FieldPath, findings: &mut Findings) {
    if let Some(schedule) = &budget.schedule {
        match CronSchedule::parse(schedule) {
            Err(err) => findings.error(FieldError::invalid(&path.child("schedule"), schedule, format!("invalid cron, {err}"))),
            Ok(parsed) if !parsed.ever_fires() => findings.warn(format!(
                "{path}.schedule: {schedule:?} never fires, so Karpenter treats this budget as always active"
            )),
            Ok(_) => {}
        }
        if budget.nodes.as_deref() != Some("0") {
            findings.warn(format!(
                "{path}: a budget with a schedule {SCHEDULED_BUDGET_WARNING}"
            ));
        }
    }
    let reasons = budget.reasons.as_deref();
    if reasons.is_some_and(<[DisruptionReason]>::is_empty) {
        findings.warn(format!("{path}.reasons: an empty list makes this budget apply to no disruption reason; omit the field to apply it to all"));
    }
    let mut seen = HashSet::new();
    for (i, reason) in reasons.unwrap_or_default().iter().enumerate() {
        if !seen.insert(*reason) {
            let name = serde_json::to_value(reason)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            findings.error(FieldError::duplicate(
                &path.child("reasons").index(i),
                &name,
            ));
        }
    }
}
