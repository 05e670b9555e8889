//! The admission steps of api-rules.md §1.1, as one pure function per object: prune nulls, default, check the
//! schema, check the rules on the typed object, ratchet on UPDATE. The webhooks, `kerf validate` and the status
//! controllers all call this, so they cannot disagree.

use crate::api::schema::{prune_nulls, CompiledSchema, SchemaError};
use crate::api::validation::{ratchet, FieldError, Findings, Invalid};
use serde_json::Value;

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
            name: self.object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned(),
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
                    findings.warn(format!("unknown field \"{field}\": the apiserver will drop it"));
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
        // Like the apiserver, rules run only on an object that has the schema's shape.
        if findings.errors.is_empty() {
            if let Err(err) = (self.rules)(&object, old.as_ref(), &mut findings) {
                findings.warn(format!("rule checks skipped: the object does not match the schema: {err}"));
            }
        }
        let errors = match &old {
            Some(old) => ratchet(findings.errors, &object, old),
            None => findings.errors,
        };
        Admitted { object, errors, warnings: findings.warnings }
    }
}

/// Helper for [`KindAdmission::rules`]: parses `new` and `old` as `T` and runs `check`.
pub fn typed_rules<T: serde::de::DeserializeOwned>(
    new: &Value,
    old: Option<&Value>,
    findings: &mut Findings,
    check: fn(&T, Option<&T>, &mut Findings),
) -> Result<(), serde_json::Error> {
    let new: T = serde_json::from_value(new.clone())?;
    // An old object that no longer parses cannot drive transition rules; it is treated as absent.
    let old: Option<T> = old.and_then(|o| serde_json::from_value(o.clone()).ok());
    check(&new, old.as_ref(), findings);
    Ok(())
}
