//! The admission steps of api-rules.md §1.1, as one pure function per object: prune nulls, default, check the
//! schema, check the rules on the typed object, ratchet on UPDATE. The webhooks, `kerf validate` and the status
//! controllers all call this, so they cannot disagree.

use crate::api::schema::{prune_nulls, CompiledSchema, SchemaError};
use crate::api::validation::{ratchet, ErrorKind, FieldError, FieldPath, Findings, Invalid};
use serde_json::Value;
use std::borrow::Cow;

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
    /// Runs every step on `object` (and the stored `old` one on UPDATE).
    pub fn admit(&self, object: &Value, old: Option<&Value>) -> Admitted {
        let mut object = object.clone();
        prune_nulls(&mut object);
        (self.default)(&mut object);
        let mut findings = Findings::default();
        match (self.schema)() {
            Ok(schema) => {
                let report = schema.check(&object);
                findings.errors(report.errors);
                for field in report.unknown_fields {
                    findings.warn(format!(
                        "unknown field \"{field}\": the apiserver will drop it"
                    ));
                }
            }
            Err(err) => findings.warn(format!("schema check skipped: {err}")),
        }
        let old = old.map(|old| {
            let mut old = old.clone();
            prune_nulls(&mut old);
            (self.default)(&mut old);
            old
        });
        // The apiserver skips the rules when the schema check failed; kerf reports every error at once. Values of
        // the wrong type or outside an enum cannot be parsed, so the rules run on a copy without them, and rule
        // errors on those fields or their ancestors (which the removal may have caused) are dropped.
        let unparseable: Vec<&FieldError> = findings
            .errors
            .iter()
            .filter(|e| blocks_parsing(e))
            .collect();
        let checked = if unparseable.is_empty() {
            Cow::Borrowed(&object)
        } else {
            Cow::Owned(without(&object, &unparseable))
        };
        let mut rule_findings = Findings::default();
        if (self.rules)(&checked, old.as_ref(), &mut rule_findings).is_ok() {
            // A rule error where the schema already reported one says the same thing again.
            let schema_paths: Vec<String> = findings
                .errors
                .iter()
                .map(|e| e.path.json_pointer())
                .collect();
            let removed: Vec<String> = unparseable.iter().map(|e| e.path.json_pointer()).collect();
            rule_findings.errors.retain(|e| {
                let at = e.path.json_pointer();
                !schema_paths.contains(&at)
                    && !removed.iter().any(|r| r.starts_with(&format!("{at}/")))
            });
            findings.errors(rule_findings.errors);
            findings.warnings.extend(rule_findings.warnings);
        } else {
            findings.error(FieldError::invalid(
                &FieldPath::new("<nil>"),
                "null",
                "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            ));
        }
        let errors = match &old {
            Some(old) => ratchet(findings.errors, &object, old),
            None => findings.errors,
        };
        Admitted {
            object,
            errors,
            warnings: findings.warnings,
        }
    }
}

/// Whether a schema error leaves a value that cannot be parsed into the typed object.
fn blocks_parsing(error: &FieldError) -> bool {
    match &error.kind {
        ErrorKind::NotSupported { .. } => true,
        ErrorKind::Invalid { detail, .. } => detail.contains(" in body must be of type "),
        _ => false,
    }
}

/// `object` without the values at the paths of `errors`.
fn without(object: &Value, errors: &[&FieldError]) -> Value {
    let mut copy = object.clone();
    // Later list items first, so removing one does not shift the index of another.
    let mut pointers: Vec<String> = errors.iter().map(|e| e.path.json_pointer()).collect();
    pointers.sort_by(|a, b| b.cmp(a));
    for pointer in pointers {
        let Some((parent, last)) = pointer.rsplit_once('/') else {
            continue;
        };
        let last = last.replace("~1", "/").replace("~0", "~");
        match copy.pointer_mut(parent) {
            Some(Value::Object(fields)) => {
                fields.remove(&last);
            }
            Some(Value::Array(items)) => {
                if let Some(i) = last.parse::<usize>().ok().filter(|i| *i < items.len()) {
                    items.remove(i);
                }
            }
            _ => {}
        }
    }
    copy
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
