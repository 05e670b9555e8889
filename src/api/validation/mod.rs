//! Validation with the apiserver's field paths and messages (api-rules.md §1.2), shared by the webhooks,
//! `kerf validate` and the status controllers.

mod field;
pub mod grammar;
mod ratchet;

pub use field::{ErrorKind, FieldError, FieldPath, Invalid, SchemaType};
pub use ratchet::ratchet;

/// What validating one object found: errors reject it, warnings are shown to the user but admit it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    pub errors: Vec<FieldError>,
    pub warnings: Vec<String>,
}

impl Findings {
    pub fn error(&mut self, error: FieldError) {
        self.errors.push(error);
    }

    pub fn errors(&mut self, errors: impl IntoIterator<Item = FieldError>) {
        self.errors.extend(errors);
    }

    pub fn warn(&mut self, warning: impl Into<String>) {
        self.warnings.push(warning.into());
    }
}
