//! A structural-schema check: what kube-apiserver's OpenAPI validation reports for a custom resource, with the
//! same paths and messages (api-rules.md §1.2). The schema is compiled once (patterns included) from the CRD's
//! `openAPIV3Schema`, so the CRD kerf installs and the check kerf's webhooks run can never disagree.

use crate::validation::{BoundedErrors, ErrorCaps, FieldError, FieldPath, MAX_WARNINGS};
use regex::Regex;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// A schema node with its constraints parsed and its pattern compiled.
#[derive(Debug, Default)]
pub struct CompiledSchema {
    kind: TypeRule,
    enum_values: Vec<String>,
    pattern: Option<(String, Regex)>,
    date_time: bool,
    min_length: Option<usize>,
    max_length: Option<usize>,
    minimum: Option<i64>,
    maximum: Option<i64>,
    min_items: Option<usize>,
    max_items: Option<usize>,
    max_properties: Option<usize>,
    required: Vec<String>,
    properties: BTreeMap<String, CompiledSchema>,
    additional: Option<Box<CompiledSchema>>,
    items: Option<Box<CompiledSchema>>,
    preserve_unknown: bool,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum TypeRule {
    #[default]
    Any,
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
    IntOrString,
}

/// The schema step's result: errors, and the fields the apiserver would silently prune. Both are bounded (a
/// hostile object may hold a wrong value in every item of a long list); what is past a bound is counted.
#[derive(Debug, PartialEq, Eq)]
pub struct SchemaReport {
    pub errors: BoundedErrors,
    pub unknown_fields: Vec<FieldPath>,
    pub omitted_unknown_fields: usize,
}

impl Default for SchemaReport {
    fn default() -> Self {
        SchemaReport {
            errors: BoundedErrors::new(ErrorCaps::CHECKING),
            unknown_fields: Vec::new(),
            omitted_unknown_fields: 0,
        }
    }
}

impl SchemaReport {
    fn unknown_field(&mut self, path: FieldPath) {
        if self.unknown_fields.len() < MAX_WARNINGS {
            self.unknown_fields.push(path);
        } else {
            self.omitted_unknown_fields += 1;
        }
    }
}

/// A schema kerf generated itself could not be compiled: a bug, reported instead of panicking.
#[derive(Debug, thiserror::Error)]
#[error("invalid pattern {pattern:?} in schema: {source}")]
pub struct SchemaError {
    pattern: String,
    #[source]
    source: regex::Error,
}

impl CompiledSchema {
    /// Compiles an OpenAPI v3 schema as found in a CRD version's `schema.openAPIV3Schema`.
    pub fn compile(schema: &Value) -> Result<Self, SchemaError> {
        let empty = Map::new();
        let s = schema.as_object().unwrap_or(&empty);
        let int_or_string = s.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
        let kind = match s.get("type").and_then(Value::as_str) {
            _ if int_or_string => TypeRule::IntOrString,
            Some("object") => TypeRule::Object,
            Some("array") => TypeRule::Array,
            Some("string") => TypeRule::String,
            Some("integer") => TypeRule::Integer,
            Some("number") => TypeRule::Number,
            Some("boolean") => TypeRule::Boolean,
            _ => TypeRule::Any,
        };
        let pattern = match s.get("pattern").and_then(Value::as_str) {
            Some(p) => Some((
                p.to_owned(),
                Regex::new(p).map_err(|source| SchemaError {
                    pattern: p.to_owned(),
                    source,
                })?,
            )),
            None => None,
        };
        let usize_of = |key: &str| {
            s.get(key)
                .and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
        };
        let compile_child = |key: &str| -> Result<Option<Box<CompiledSchema>>, SchemaError> {
            match s.get(key) {
                Some(child) if child.is_object() => {
                    Ok(Some(Box::new(CompiledSchema::compile(child)?)))
                }
                _ => Ok(None),
            }
        };
        let mut properties = BTreeMap::new();
        if let Some(props) = s.get("properties").and_then(Value::as_object) {
            for (name, child) in props {
                properties.insert(name.clone(), CompiledSchema::compile(child)?);
            }
        }
        Ok(CompiledSchema {
            kind,
            enum_values: strings(s.get("enum")),
            pattern,
            date_time: s.get("format").and_then(Value::as_str) == Some("date-time"),
            min_length: usize_of("minLength"),
            max_length: usize_of("maxLength"),
            // k8s-openapi holds bounds as f64; every bound kerf's CRDs carry is integral.
            minimum: s.get("minimum").and_then(Value::as_f64).map(|n| n as i64),
            maximum: s.get("maximum").and_then(Value::as_f64).map(|n| n as i64),
            min_items: usize_of("minItems"),
            max_items: usize_of("maxItems"),
            max_properties: usize_of("maxProperties"),
            required: strings(s.get("required")),
            properties,
            additional: compile_child("additionalProperties")?,
            items: compile_child("items")?,
            preserve_unknown: s.get("x-kubernetes-preserve-unknown-fields")
                == Some(&Value::Bool(true)),
        })
    }

    /// Checks a whole object (root of the CRD schema) and reports every error.
    pub fn check(&self, object: &Value) -> SchemaReport {
        let mut report = SchemaReport::default();
        // The root is checked field by field: `metadata` belongs to the apiserver, not to the CRD schema.
        if let Some(fields) = object.as_object() {
            for (name, value) in in_key_order(fields) {
                match self.properties.get(name) {
                    _ if ["apiVersion", "kind", "metadata"].contains(&name.as_str()) => {}
                    Some(child) => child.check_at(value, &FieldPath::new(name), &mut report),
                    None if !self.preserve_unknown => report.unknown_field(FieldPath::new(name)),
                    None => {}
                }
            }
            for name in &self.required {
                if fields.get(name).is_none_or(Value::is_null) {
                    report
                        .errors
                        .push(FieldError::required(&FieldPath::new(name)));
                }
            }
        }
        report
    }

    fn check_at(&self, value: &Value, path: &FieldPath, report: &mut SchemaReport) {
        if let Some(expected) = self.type_mismatch(value) {
            let actual = json_type(value);
            report
                .errors
                .push(FieldError::wrong_type(path, expected, actual));
            return;
        }
        match value {
            Value::String(s) => self.check_string(s, path, report),
            Value::Number(n) => self.check_number(n.as_i64(), path, report),
            Value::Array(items) => self.check_array(items, path, report),
            Value::Object(fields) => self.check_object(fields, path, report),
            Value::Bool(_) | Value::Null => {}
        }
    }

    /// The expected type's name when `value` is of another JSON type.
    fn type_mismatch(&self, value: &Value) -> Option<&'static str> {
        let ok = match self.kind {
            TypeRule::Any => true,
            TypeRule::Object => value.is_object(),
            TypeRule::Array => value.is_array(),
            TypeRule::String => value.is_string(),
            TypeRule::Integer => value.is_i64() || value.is_u64(),
            TypeRule::Number => value.is_number(),
            TypeRule::Boolean => value.is_boolean(),
            TypeRule::IntOrString => value.is_string() || value.is_i64() || value.is_u64(),
        };
        let expected = match self.kind {
            TypeRule::IntOrString => "integer or string",
            TypeRule::Object => "object",
            TypeRule::Array => "array",
            TypeRule::String => "string",
            TypeRule::Integer => "integer",
            TypeRule::Number => "number",
            TypeRule::Boolean => "boolean",
            TypeRule::Any => "any",
        };
        (!ok).then_some(expected)
    }

    fn check_string(&self, s: &str, path: &FieldPath, report: &mut SchemaReport) {
        let errors = &mut report.errors;
        if !self.enum_values.is_empty() && !self.enum_values.iter().any(|v| v == s) {
            let supported: Vec<&str> = self.enum_values.iter().map(String::as_str).collect();
            errors.push(FieldError::not_supported(path, s, &supported));
        }
        let chars = s.chars().count();
        if let Some(max) = self.max_length.filter(|max| chars > *max) {
            errors.push(FieldError::too_long(path, max));
        }
        if let Some(min) = self.min_length.filter(|min| chars < *min) {
            errors.push(FieldError::min_length(path, s, min));
        }
        if let Some((text, regex)) = &self.pattern {
            if !regex.is_match(s) {
                errors.push(FieldError::pattern(path, s, text));
            }
        }
        if self.date_time && !is_date_time(s) {
            errors.push(FieldError::invalid(
                path,
                s,
                format!("{path} in body must be of type date-time: {s:?}"),
            ));
        }
    }

    fn check_number(&self, n: Option<i64>, path: &FieldPath, report: &mut SchemaReport) {
        let Some(n) = n else { return };
        let (min, max) = (
            self.minimum.unwrap_or(i64::MIN),
            self.maximum.unwrap_or(i64::MAX),
        );
        if let Some(error) = FieldError::range(path, n, min, max) {
            report.errors.push(error);
        }
    }

    fn check_array(&self, items: &[Value], path: &FieldPath, report: &mut SchemaReport) {
        if let Some(max) = self.max_items.filter(|max| items.len() > *max) {
            report
                .errors
                .push(FieldError::too_many(path, items.len(), max));
        }
        if let Some(min) = self.min_items.filter(|min| items.len() < *min) {
            report
                .errors
                .push(FieldError::min_items(path, items.len(), min));
        }
        if let Some(item_schema) = &self.items {
            // The collection this list's item errors count against; once it is full, a wrong-typed item is only
            // counted, without building its path and message.
            let collection = path.collection().unwrap_or_else(|| path.clone());
            for (i, item) in items.iter().enumerate() {
                if item_schema.type_mismatch(item).is_some() && report.errors.is_full(&collection) {
                    report.errors.count_in(&collection);
                } else {
                    item_schema.check_at(item, &path.index(i), report);
                }
            }
        }
    }

    fn check_object(
        &self,
        fields: &Map<String, Value>,
        path: &FieldPath,
        report: &mut SchemaReport,
    ) {
        if let Some(max) = self.max_properties.filter(|max| fields.len() > *max) {
            report
                .errors
                .push(FieldError::too_many(path, fields.len(), max));
        }
        for (name, value) in in_key_order(fields) {
            if let Some(child) = self.properties.get(name) {
                child.check_at(value, &path.child(name), report);
            } else if let Some(additional) = &self.additional {
                additional.check_at(value, &path.key(name), report);
            } else if !self.preserve_unknown && self.kind == TypeRule::Object {
                report.unknown_field(path.child(name));
            }
        }
        for name in &self.required {
            if fields.get(name).is_none_or(Value::is_null) {
                report.errors.push(FieldError::required(&path.child(name)));
            }
        }
    }
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The JSON type name the apiserver prints for a value.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// RFC 3339 date-time, as OpenAPI's `date-time` format accepts it.
fn is_date_time(s: &str) -> bool {
    humantime::parse_rfc3339_weak(s.trim_end_matches(['Z', 'z'])).is_ok()
        || strip_utc_offset(s).is_some_and(|base| humantime::parse_rfc3339_weak(base).is_ok())
}

/// Strips a `+hh:mm` / `-hh:mm` offset, which humantime does not parse, from a date-time. The offset is six
/// ASCII bytes; `get` refuses a cut inside a multi-byte character (`aé12345`), so any text is safe here.
fn strip_utc_offset(s: &str) -> Option<&str> {
    let cut = s.len().checked_sub(6)?;
    let (base, offset) = (s.get(..cut)?, s.get(cut..)?);
    let shaped = match offset.as_bytes() {
        [sign, h1, h2, b':', m1, m2] => {
            matches!(sign, b'+' | b'-') && [h1, h2, m1, m2].iter().all(|d| d.is_ascii_digit())
        }
        _ => false,
    };
    shaped.then_some(base)
}

/// Removes explicit `null`s, which the apiserver treats as absent (api-rules.md §1.1 step 1).
pub fn prune_nulls(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            fields.retain(|_, v| !v.is_null());
            fields.values_mut().for_each(prune_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(prune_nulls),
        _ => {}
    }
}

/// An object's fields in key order, as the apiserver reports them, whatever order `serde_json::Map` keeps: a
/// dependency of the AWS SDK's test utilities turns on its `preserve_order` for every workspace test build.
fn in_key_order(fields: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut sorted: Vec<(&String, &Value)> = fields.iter().collect();
    sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> CompiledSchema {
        let result = CompiledSchema::compile(&json!({
            "type": "object",
            "required": ["spec"],
            "properties": {
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^[a-z]+$"},
                        "mode": {"type": "string", "enum": ["A", "B"]},
                        "weight": {"type": "integer", "minimum": 1, "maximum": 100},
                        "items": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                        "labels": {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "string", "pattern": "^x$"}},
                        "limit": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}], "pattern": "^[0-9]+$"},
                        "at": {"type": "string", "format": "date-time"}
                    }
                }
            }
        }));
        result.expect("test schema compiles")
    }

    fn messages(object: Value) -> Vec<String> {
        schema()
            .check(&object)
            .errors
            .into_errors()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn accepts_a_valid_object_and_reports_unknown_fields() {
        let report = schema().check(&json!({"metadata": {"name": "x"}, "spec": {"name": "ab", "mode": "A", "weight": 5, "items": ["a"], "labels": {"k": "x"}, "limit": 3, "at": "2024-01-02T03:04:05Z", "extra": 1}}));
        assert!(report.errors.is_empty());
        assert_eq!(
            report.unknown_fields,
            vec![FieldPath::new("spec").child("extra")]
        );
    }

    #[test]
    fn reports_each_kind_of_schema_error_like_the_apiserver() {
        assert_eq!(messages(json!({})), vec!["spec: Required value"]);
        assert_eq!(
            messages(json!({"spec": {"name": 5}})),
            vec![
                r#"spec.name: Invalid value: "integer": spec.name in body must be of type string: "integer""#
            ]
        );
        assert_eq!(
            messages(json!({"spec": {"name": "Abcdef", "mode": "C", "weight": 0, "items": ["a", "b", "c"], "labels": {"a": "y", "b": "x"}, "limit": "x", "at": "yesterday"}})),
            vec![
                "spec.at: Invalid value: \"yesterday\": spec.at in body must be of type date-time: \"yesterday\"",
                "spec.items: Too many: 3: must have at most 2 items",
                "spec.labels: Too many: 2: must have at most 1 items",
                "spec.labels[a]: Invalid value: \"y\": spec.labels[a] in body should match '^x$'",
                "spec.limit: Invalid value: \"x\": spec.limit in body should match '^[0-9]+$'",
                "spec.mode: Unsupported value: \"C\": supported values: \"A\", \"B\"",
                "spec.name: Too long: may not be longer than 5",
                "spec.name: Invalid value: \"Abcdef\": spec.name in body should match '^[a-z]+$'",
                "spec.weight: Invalid value: 0: spec.weight in body should be greater than or equal to 1",
            ]
        );
        assert_eq!(
            messages(json!({"spec": {"name": ""}}))[0],
            "spec.name: Invalid value: \"\": spec.name in body should be at least 1 chars long"
        );
        assert_eq!(
            messages(json!({"spec": {"name": "a", "limit": true}})),
            vec![
                r#"spec.limit: Invalid value: "boolean": spec.limit in body must be of type integer or string: "boolean""#
            ]
        );
    }

    #[test]
    fn date_times_accept_offsets() {
        assert!(is_date_time("2024-01-02T03:04:05Z"));
        assert!(is_date_time("2024-01-02T03:04:05.123+02:00"));
        assert!(!is_date_time("2024-01-02"));
    }

    #[test]
    fn date_times_with_multi_byte_characters_are_refused_not_a_panic() {
        for text in [
            "aé12345",
            "é",
            "2024-01-02T03:04:05é:00",
            "2024-01-02T03:04:05+0é:00",
            "+02:0é",
        ] {
            assert!(!is_date_time(text), "{text}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: fuzz_cases(), ..Default::default() })]

        /// Every parser is total: no text makes the date-time check panic.
        #[test]
        fn date_time_check_is_total(text in "\\PC{0,40}", offset in "[-+é0-9:]{0,7}") {
            let _ = is_date_time(&text);
            let _ = is_date_time(&format!("{text}{offset}"));
            let _ = is_date_time(&format!("2024-01-02T03:04:05{offset}"));
        }
    }

    /// Proptest cases per run: a few hundred by default, `KERF_FUZZ_CASES` to run longer by hand.
    fn fuzz_cases() -> u32 {
        std::env::var("KERF_FUZZ_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(256)
    }

    #[test]
    fn each_list_reports_a_bounded_number_of_errors() {
        let items: Vec<Value> = (0..5000).map(|i| json!(i)).collect();
        let report = schema().check(&json!({"spec": {"name": "ab", "items": items}}));
        let errors: Vec<String> = report
            .errors
            .into_errors()
            .iter()
            .map(ToString::to_string)
            .collect();
        let cap = ErrorCaps::CHECKING.per_collection;
        assert_eq!(errors.len(), cap + 2, "{errors:?}");
        assert_eq!(
            errors[0],
            "spec.items: Too many: 5000: must have at most 2 items"
        );
        assert_eq!(
            errors[1],
            r#"spec.items[0]: Invalid value: "integer": spec.items[0] in body must be of type string: "integer""#
        );
        assert_eq!(
            errors[cap + 1],
            format!("... and {} more errors in spec.items", 5000 - cap)
        );
    }

    #[test]
    fn nulls_are_pruned_recursively() {
        let mut v = json!({"a": null, "b": {"c": null, "d": 1}, "e": [{"f": null}]});
        prune_nulls(&mut v);
        assert_eq!(v, json!({"b": {"d": 1}, "e": [{}]}));
    }
}
