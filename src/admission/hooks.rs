//! kerf's kinds plugged into the generic webhook server: each hook runs the admission pipeline.

use super::KindAdmission;
use kerf_webhooks::{AdmissionHook, Denial, Mutated, Operation, ReviewRequest};

/// The webhook side of a [`KindAdmission`]: defaulting on `/mutate`, validation on `/validate`.
pub struct ObjectHook(pub &'static KindAdmission);

impl AdmissionHook for ObjectHook {
    /// Defaulting and validation are pure and take about a tenth of a millisecond.
    fn runs_inline(&self) -> bool {
        true
    }

    fn mutate(&self, request: &ReviewRequest) -> Result<Mutated, Denial> {
        let Some(object) = request.object.as_ref() else {
            return Ok(Mutated::default());
        };
        if !matches!(request.operation, Operation::Create | Operation::Update) {
            return Ok(Mutated::default());
        }
        let mut defaulted = object.clone();
        (self.0.default)(&mut defaulted);
        Ok(Mutated {
            object: Some(defaulted),
            warnings: Vec::new(),
        })
    }

    fn validate(&self, request: &ReviewRequest) -> Result<Vec<String>, Denial> {
        let Some(object) = request.object.as_ref() else {
            return Ok(Vec::new());
        };
        let old = match request.operation {
            Operation::Create => None,
            Operation::Update => request.old_object.as_ref(),
            Operation::Delete | Operation::Connect => return Ok(Vec::new()),
        };
        let admitted = self.0.admit(object, old);
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
