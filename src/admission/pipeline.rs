//! The admission steps of api-rules.md §1.1, as one pure function per object: prune nulls, default, check the
//! schema, check the rules on the typed object, ratchet on UPDATE, bound what is reported. The webhooks,
//! `kerf validate` and the status controllers all call this, so they cannot disagree.

use super::unparsed::Unparsed;
use crate::api::schema::{prune_nulls, CompiledSchema, SchemaError, SchemaReport};
use crate::api::validation::{
    ratchet, BoundedErrors, ErrorCaps, ErrorKind, FieldError, FieldPath, Findings, Invalid,
};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::HashSet;

/// What kerf knows about one kind it admits.
pub struct KindAdmission {
    pub group: &'static str,
    pub kind: &'static str,
    /// Defaulting on the raw JSON.
    pub default: fn(&mut Value),
    /// The CRD schema the apiserver enforces.
    pub schema: fn() -> Result<&'static CompiledSchema, &'static SchemaError>,
    /// The rule checks on the typed object (`old` on UPDATE); an error when the JSON does not parse as the type.
    pub rules: fn(&Value, Option<&Value>, &mut Findings) -> Result<(), serde_json::Error>,
}

/// The outcome of admitting one object.
#[derive(Debug, Clone, PartialEq)]
pub struct Admitted {
    /// The object after pruning and defaulting: what would be stored.
    pub object: Value,
    pub errors: Vec<FieldError>,
    pub warnings: Vec<String>,
}

impl Admitted {
    /// The apiserver-style rejection, when there are errors.
    pub fn rejection(&self, kind: &KindAdmission) -> Option<Invalid> {
        (!self.errors.is_empty()).then(|| Invalid {
            kind: kind.kind.to_owned(),
            group: kind.group.to_owned(),
            name: self
                .object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            errors: self.errors.clone(),
        })
    }
}

impl KindAdmission {
    /// Runs every step on `object` (and the stored `old` one on UPDATE). The work is linear in the size of the
    /// objects, and what is reported is bounded whatever they hold (see `docs/limits.md`).
    pub fn admit(&self, object: &Value, old: Option<&Value>) -> Admitted {
        let mut object = object.clone();
        prune_nulls(&mut object);
        (self.default)(&mut object);
        // Warnings from every step, then the rules' errors: schema errors are kept apart until the rules ran.
        let mut findings = Findings::default();
        let report = match (self.schema)() {
            Ok(schema) => schema.check(&object),
            Err(err) => {
                findings.warn(format!("schema check skipped: {err}"));
                SchemaReport::default()
            }
        };
        for field in &report.unknown_fields {
            findings.warn(format!(
                "unknown field \"{field}\": the apiserver will drop it"
            ));
        }
        findings.omitted_warnings += report.omitted_unknown_fields;
        let (schema_errors, schema_omitted) = report.errors.into_parts();
        let old = old.map(|old| {
            let mut old = old.clone();
            prune_nulls(&mut old);
            (self.default)(&mut old);
            old
        });
        let mut errors = self.rule_errors(&object, old.as_ref(), schema_errors, &mut findings);
        if let Some(old) = &old {
            errors = ratchet(errors, &object, old);
        }
        let mut bounded = BoundedErrors::new(ErrorCaps::RESPONSE);
        errors.into_iter().for_each(|error| bounded.push(error));
        for (collection, count) in schema_omitted {
            bounded.omit(&collection, count);
        }
        bounded.omit(&FieldPath::default(), findings.omitted_errors);
        let mut warnings = findings.warnings;
        if findings.omitted_warnings > 0 {
            warnings.push(format!(
                "... and {} more warnings",
                findings.omitted_warnings
            ));
        }
        Admitted {
            object,
            errors: bounded.into_errors(),
            warnings,
        }
    }

    /// The schema's errors followed by the rules' own. The apiserver skips the rules when the schema check failed;
    /// kerf reports every error at once. Values of the wrong type or outside an enum cannot be parsed, so the rules
    /// run on a copy without them; their errors are mapped back to the object's list indexes, and those the
    /// removal may have caused (above a removed field or a list left empty) are dropped.
    fn rule_errors(
        &self,
        object: &Value,
        old: Option<&Value>,
        schema_errors: Vec<FieldError>,
        findings: &mut Findings,
    ) -> Vec<FieldError> {
        let mut unparsed = Unparsed::new(
            schema_errors
                .iter()
                .filter(|e| blocks_parsing(e))
                .map(|e| &e.path),
        );
        let checked = if unparsed.is_empty() {
            Cow::Borrowed(object)
        } else {
            Cow::Owned(unparsed.remove_from(object))
        };
        let parsed = (self.rules)(&checked, old, findings).is_ok();
        let rule_errors = std::mem::take(&mut findings.errors);
        // A rule error where the schema already reported one says the same thing again.
        let schema_paths: HashSet<&FieldPath> = schema_errors.iter().map(|e| &e.path).collect();
        let rule_errors: Vec<FieldError> = rule_errors
            .into_iter()
            .map(|mut error| {
                error.path = unparsed.original(&error.path);
                error
            })
            .filter(|e| !schema_paths.contains(&e.path) && !unparsed.may_have_caused(&e.path))
            .collect();
        let mut errors = schema_errors;
        errors.extend(rule_errors);
        if !parsed {
            errors.push(FieldError::invalid(
                &FieldPath::new("<nil>"),
                "null",
                "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            ));
        }
        errors
    }
}

/// Whether a schema error leaves a value that cannot be parsed into the typed object.
fn blocks_parsing(error: &FieldError) -> bool {
    matches!(
        error.kind,
        ErrorKind::NotSupported { .. } | ErrorKind::WrongType { .. }
    )
}

/// Helper for [`KindAdmission::rules`]: parses `new` and `old` as `T` and runs `check`.
pub fn typed_rules<T: serde::de::DeserializeOwned>(
    new: &Value,
    old: Option<&Value>,
    findings: &mut Findings,
    check: fn(&T, Option<&T>, &mut Findings),
) -> Result<(), serde_json::Error> {
    let new = T::deserialize(new)?;
    // An old object that no longer parses cannot drive transition rules; it is treated as absent.
    let old: Option<T> = old.and_then(|o| T::deserialize(o).ok());
    check(&new, old.as_ref(), findings);
    Ok(())
}
