//! UPDATE ratcheting (kerf admission policy 5): an error in a field whose value did not change is dropped, so a
//! finalizer or label update on a legacy object is never blocked by a rule the object already broke.

use super::FieldError;
use serde_json::Value;
use std::collections::HashMap;

/// Keeps the errors that the UPDATE from `old` to `new` is responsible for: those at a path whose value
/// changed, and transition rules, which never ratchet.
///
/// Each path is compared once, however many errors it carries, so the work stays linear in the object.
pub fn ratchet(errors: Vec<FieldError>, new: &Value, old: &Value) -> Vec<FieldError> {
    let mut changed: HashMap<String, bool> = HashMap::new();
    errors
        .into_iter()
        .filter(|err| {
            if !err.ratchets {
                return true;
            }
            let pointer = err.path.json_pointer();
            *changed
                .entry(pointer)
                .or_insert_with_key(|pointer| new.pointer(pointer) != old.pointer(pointer))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::FieldPath;
    use serde_json::json;

    #[test]
    fn drops_only_unchanged_ratchetable_errors() {
        let weight = FieldPath::new("spec").child("weight");
        let group = FieldPath::new("spec").child("template.spec.nodeClassRef");
        let errors = vec![
            FieldError::minimum(&weight, 0, 1),
            FieldError::rule(
                &group,
                super::super::SchemaType::Object,
                "nodeClassRef.group is immutable",
            )
            .never_ratchets(),
        ];
        let old =
            json!({"spec": {"weight": 0, "template": {"spec": {"nodeClassRef": {"group": "a"}}}}});
        let same = old.clone();
        let kept = ratchet(errors.clone(), &same, &old);
        assert_eq!(kept.len(), 1, "the transition rule stays");
        let changed =
            json!({"spec": {"weight": -1, "template": {"spec": {"nodeClassRef": {"group": "a"}}}}});
        assert_eq!(ratchet(errors, &changed, &old).len(), 2);
    }
}
