//! Validation with the apiserver's field paths and messages (api-rules.md §1.2), shared by the webhooks,
//! `kerf validate` and the status controllers.

mod bounded;
mod field;
pub mod grammar;
mod ratchet;

pub use bounded::{BoundedErrors, ErrorCaps, MAX_ERRORS, MAX_ERRORS_PER_COLLECTION};
pub use field::{
    elide, elide_owned, ErrorKind, FieldError, FieldPath, Invalid, SchemaType, Step,
    MAX_DETAIL_CHARS, MAX_VALUE_CHARS,
};
pub use ratchet::ratchet;

/// The most errors the rules may collect on one object before ratcheting; the others are only counted. The
/// rules find at most a few errors per item, and lists this long are refused by the schema's maxItems anyway.
pub const MAX_RULE_ERRORS: usize = ErrorCaps::CHECKING.total;
/// The most warnings one object gets (the apiserver keeps 4 KiB of warnings in all); the others are counted.
pub const MAX_WARNINGS: usize = 20;
/// The most characters of one warning (the apiserver may truncate those over 256).
pub const MAX_WARNING_CHARS: usize = 512;

/// What validating one object found: errors reject it, warnings are shown to the user but admit it. Both are
/// bounded; what is past a bound is counted in `omitted_errors` and `omitted_warnings`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    pub errors: Vec<FieldError>,
    pub warnings: Vec<String>,
    pub omitted_errors: usize,
    pub omitted_warnings: usize,
}

impl Findings {
    pub fn error(&mut self, error: FieldError) {
        if self.errors.len() < MAX_RULE_ERRORS {
            self.errors.push(error);
        } else {
            self.omitted_errors += 1;
        }
    }

    pub fn errors(&mut self, errors: impl IntoIterator<Item = FieldError>) {
        errors.into_iter().for_each(|error| self.error(error));
    }

    pub fn warn(&mut self, warning: impl Into<String>) {
        if self.warnings.len() < MAX_WARNINGS {
            self.warnings
                .push(elide_owned(warning.into(), MAX_WARNING_CHARS));
        } else {
            self.omitted_warnings += 1;
        }
    }
}
