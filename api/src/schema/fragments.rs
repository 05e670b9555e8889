//! Schema fragments that schemars cannot derive from a Rust type: maps whose values carry a pattern, and
//! int-or-string quantities. Used with `#[schemars(schema_with = "…")]`.

use crate::validation::grammar::{LABEL_VALUE_PATTERN, QUANTITY_PATTERN};
use schemars::{json_schema, Schema, SchemaGenerator};

/// A label map: at most 100 entries, values of at most 63 characters matching the label-value pattern.
pub fn label_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "maxProperties": 100,
        "additionalProperties": {"type": "string", "maxLength": 63, "pattern": LABEL_VALUE_PATTERN},
    })
}

/// A map of free-form strings (annotations).
pub fn string_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object", "additionalProperties": {"type": "string"}})
}

/// A resource list: names to quantities, each an integer or a quantity string.
pub fn quantity_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": true,
            "pattern": QUANTITY_PATTERN,
        },
    })
}

/// A date-time string (RFC 3339).
pub fn date_time(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "format": "date-time"})
}
