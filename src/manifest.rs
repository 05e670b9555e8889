//! Reading Kubernetes manifests: multi-document YAML or JSON, `List` kinds expanded, empty documents skipped.

use serde_json::Value;

/// A manifest that cannot be read; the message carries the line and column for YAML syntax errors.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("document {index}: {source}")]
    Yaml {
        index: usize,
        #[source]
        source: serde_yaml::Error,
    },
    #[error("document {index}: expected an object with apiVersion and kind, found {found}")]
    NotAnObject { index: usize, found: &'static str },
}

/// Parses every document of `text` (YAML, which includes JSON) into JSON values.
pub fn parse_documents(text: &str) -> Result<Vec<Value>, ManifestError> {
    let mut objects = Vec::new();
    for (i, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let index = i + 1;
        let value: Value = serde::Deserialize::deserialize(document)
            .map_err(|source| ManifestError::Yaml { index, source })?;
        match value {
            Value::Null => {}
            Value::Object(ref fields)
                if fields.get("kind").and_then(Value::as_str) == Some("List") =>
            {
                objects.extend(
                    fields
                        .get("items")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .cloned(),
                );
            }
            Value::Object(_) => objects.push(value),
            other => {
                return Err(ManifestError::NotAnObject {
                    index,
                    found: type_name(&other),
                })
            }
        }
    }
    Ok(objects)
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The API group and kind of an object (`""` for the core group).
pub fn group_kind(object: &Value) -> (&str, &str) {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
    (
        group,
        object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_multi_document_yaml_json_and_lists() {
        let text = "---\napiVersion: v1\nkind: A\n---\n---\n{\"apiVersion\": \"x/v1\", \"kind\": \"B\"}\n---\nkind: List\nitems: [{kind: C}, {kind: D}]\n";
        let kinds: Vec<String> = parse_documents(text)
            .expect("parses")
            .iter()
            .map(|o| group_kind(o).1.to_owned())
            .collect();
        assert_eq!(kinds, ["A", "B", "C", "D"]);
    }

    #[test]
    fn syntax_errors_name_the_line_and_column() {
        let err = parse_documents("kind: A\n---\nkind: [B\nx: 1\n")
            .expect_err("bad yaml")
            .to_string();
        assert!(err.starts_with("document 2: "), "{err}");
        assert!(err.contains("line") && err.contains("column"), "{err}");
        let err = parse_documents("- a\n")
            .expect_err("not an object")
            .to_string();
        assert_eq!(
            err,
            "document 1: expected an object with apiVersion and kind, found a list"
        );
    }
}
