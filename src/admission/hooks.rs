//! kerf's kinds plugged into the generic webhook server: each hook runs the admission pipeline.

use super::KindAdmission;
use kerf_webhooks::{AdmissionHook, AdmissionRequest, Denial, DynamicObject, Mutated};
use kube::core::admission::Operation;
use serde_json::Value;

/// The webhook side of a [`KindAdmission`]: defaulting on `/mutate`, validation on `/validate`.
pub struct ObjectHook(pub &'static KindAdmission);

fn to_json(object: Option<&DynamicObject>) -> Option<Value> {
    object.and_then(|o| serde_json::to_value(o).ok())
}

impl AdmissionHook for ObjectHook {
    fn mutate(&self, request: &AdmissionRequest<DynamicObject>) -> Result<Mutated, Denial> {
        let Some(object) = to_json(request.object.as_ref()) else {
            return Ok(Mutated::default());
        };
        if !matches!(request.operation, Operation::Create | Operation::Update) {
            return Ok(Mutated::default());
        }
        let mut defaulted = object;
        (self.0.default)(&mut defaulted);
        Ok(Mutated {
            object: Some(defaulted),
            warnings: Vec::new(),
        })
    }

    fn validate(&self, request: &AdmissionRequest<DynamicObject>) -> Result<Vec<String>, Denial> {
        if !matches!(request.operation, Operation::Create | Operation::Update) {
            return Ok(Vec::new());
        }
        let Some(object) = to_json(request.object.as_ref()) else {
            return Ok(Vec::new());
        };
        let old = match request.operation {
            Operation::Update => to_json(request.old_object.as_ref()),
            _ => None,
        };
        let admitted = self.0.admit(&object, old.as_ref());
        match admitted.rejection(self.0) {
            None => Ok(admitted.warnings),
            Some(invalid) => {
                let denial = invalid.errors.iter().fold(
                    Denial::invalid(invalid.to_string()),
                    |denial, err| {
                        denial.with_cause(
                            err.kind.cause_reason(),
                            err.path.to_string(),
                            err.kind.to_string(),
                        )
                    },
                );
                Err(denial)
            }
        }
    }
}
