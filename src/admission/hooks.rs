//! kerf's kinds plugged into the generic webhook server: each hook runs the admission pipeline.

use super::spot::catalog_warnings;
use super::KindAdmission;
use crate::catalog::Catalog;
use kerf_webhooks::{AdmissionHook, Denial, Mutated, Operation, ReviewRequest};
use std::sync::Arc;

/// The webhook side of a [`KindAdmission`]: defaulting on `/mutate`, validation on `/validate`, plus the
/// warnings that need the instance-type catalog when one is given.
pub struct ObjectHook {
    pub kind: &'static KindAdmission,
    pub catalog: Option<Arc<Catalog>>,
}

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
        (self.kind.default)(&mut defaulted);
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
        let admitted = self.kind.admit(object, old);
        match admitted.rejection(self.kind) {
            None => {
                let mut warnings = admitted.warnings;
                if let Some(catalog) = &self.catalog {
                    warnings.extend(catalog_warnings(&admitted.object, catalog));
                }
                Ok(warnings)
            }
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
