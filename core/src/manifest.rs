//! Reading Kubernetes manifests: multi-document YAML or JSON, `List` kinds expanded, empty documents skipped,
//! within [`Limits`], with the apiserver's checks of names and duplicates ([`Identities`]).

mod identity;
mod nesting;
mod strict;

pub use identity::{Identities, IdentityError};

use serde::de::DeserializeSeed;
use serde_json::Value;
use std::io::Read;

/// How much one input may hold. Kubernetes objects are small and shallow; these keep a hostile or mistaken
/// input from costing minutes or gigabytes before it is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of text, all files together.
    pub max_bytes: usize,
    /// Collections inside one another (an object and its `metadata` are two levels).
    pub max_depth: usize,
    /// Objects, counting each item of a `List`, all files together; also the number of documents.
    pub max_objects: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: 32 * 1024 * 1024,
            max_depth: 64,
            max_objects: 10_000,
        }
    }
}

/// An object of the input and the document it came from (1-based, as in messages).
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    pub index: usize,
    pub object: Value,
}

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
    #[error("the input is larger than {limit} bytes (raise the limit with --max-input-bytes)")]
    TooLarge { limit: usize },
    #[error("document {index}: nesting deeper than {limit} levels at line {line} column {column} (raise the limit with --max-depth)")]
    TooDeep {
        index: usize,
        line: usize,
        column: usize,
        limit: usize,
    },
    #[error("document {index}: more than {limit} objects in the input (raise the limit with --max-objects)")]
    TooManyObjects { index: usize, limit: usize },
    #[error("the input is not UTF-8 text")]
    NotText,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Reads at most `max_bytes` of text from `input`; more is refused without reading it all.
pub fn read_text(input: impl Read, max_bytes: usize) -> Result<String, ManifestError> {
    let mut bytes = Vec::new();
    let cap = u64::try_from(max_bytes)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    input.take(cap).read_to_end(&mut bytes)?;
    if bytes.len() > max_bytes {
        return Err(ManifestError::TooLarge { limit: max_bytes });
    }
    String::from_utf8(bytes).map_err(|_| ManifestError::NotText)
}

/// Parses every document of `text` (YAML, which includes JSON) into JSON values, within `limits`.
pub fn parse_documents(text: &str, limits: &Limits) -> Result<Vec<Document>, ManifestError> {
    if text.len() > limits.max_bytes {
        return Err(ManifestError::TooLarge {
            limit: limits.max_bytes,
        });
    }
    nesting::check_flow_depth(text, limits.max_depth).map_err(|deep| ManifestError::TooDeep {
        index: deep.document,
        line: deep.line,
        column: deep.column,
        limit: limits.max_depth,
    })?;
    // Without aliases a value takes at least one character of text.
    let mut budget = text.len().saturating_mul(2).saturating_add(64);
    let mut documents = Vec::new();
    for (i, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let index = i + 1;
        let value = strict::Strict {
            levels: limits.max_depth,
            max_depth: limits.max_depth,
            budget: &mut budget,
        }
        .deserialize(document)
        .map_err(|source| ManifestError::Yaml { index, source })?;
        let objects = match value {
            Value::Null => Vec::new(),
            Value::Object(mut fields)
                if fields.get("kind").and_then(Value::as_str) == Some("List") =>
            {
                match fields.remove("items") {
                    Some(Value::Array(items)) => items,
                    _ => Vec::new(),
                }
            }
            Value::Object(_) => vec![value],
            other => {
                return Err(ManifestError::NotAnObject {
                    index,
                    found: type_name(&other),
                })
            }
        };
        if index > limits.max_objects || documents.len() + objects.len() > limits.max_objects {
            return Err(ManifestError::TooManyObjects {
                index,
                limit: limits.max_objects,
            });
        }
        documents.extend(objects.into_iter().map(|object| Document { index, object }));
    }
    Ok(documents)
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
    use proptest::prelude::*;

    fn parse(text: &str) -> Result<Vec<Document>, ManifestError> {
        parse_documents(text, &Limits::default())
    }

    #[test]
    fn reads_multi_document_yaml_json_and_lists() {
        let text = "---\napiVersion: v1\nkind: A\n---\n---\n{\"apiVersion\": \"x/v1\", \"kind\": \"B\"}\n---\nkind: List\nitems: [{kind: C}, {kind: D}]\n";
        let read: Vec<(usize, String)> = parse(text)
            .expect("parses")
            .iter()
            .map(|d| (d.index, group_kind(&d.object).1.to_owned()))
            .collect();
        assert_eq!(
            read,
            [(1, "A"), (3, "B"), (4, "C"), (4, "D")].map(|(i, k)| (i, k.to_owned()))
        );
    }

    #[test]
    fn syntax_errors_name_the_line_and_column() {
        let err = parse("kind: A\n---\nkind: [B\nx: 1\n")
            .expect_err("bad yaml")
            .to_string();
        assert!(err.starts_with("document 2: "), "{err}");
        assert!(err.contains("line") && err.contains("column"), "{err}");
        let err = parse("- a\n").expect_err("not an object").to_string();
        assert_eq!(
            err,
            "document 1: expected an object with apiVersion and kind, found a list"
        );
    }

    #[test]
    fn duplicate_keys_are_refused_at_their_line() {
        let err = parse("kind: A\nmetadata:\n  name: a\n  labels: {}\n  name: b\n")
            .expect_err("duplicate key")
            .to_string();
        assert!(err.contains("duplicate field \"name\""), "{err}");
        assert!(err.contains("line 5 column 3"), "{err}");
        // The same key in two different mappings is fine.
        assert!(parse("a: {name: x}\nb: {name: y}\n").is_ok());
    }

    #[test]
    fn nesting_is_bounded_in_flow_and_block_style() {
        let limits = Limits {
            max_depth: 8,
            ..Limits::default()
        };
        let flow = format!("a: {}1{}\n", "[".repeat(9), "]".repeat(9));
        let err = parse_documents(&flow, &limits)
            .expect_err("too deep")
            .to_string();
        assert_eq!(
            err,
            "document 1: nesting deeper than 8 levels at line 1 column 12 (raise the limit with --max-depth)"
        );
        // The mapping around the lists is a level too.
        let flow = format!("a: {}1{}\n", "[".repeat(8), "]".repeat(8));
        let err = parse_documents(&flow, &limits)
            .expect_err("too deep")
            .to_string();
        assert!(err.contains("nesting deeper than 8 levels"), "{err}");
        assert!(err.contains("line 1 column 11"), "{err}");
        let block = format!("a:\n{}1\n", "  - ".repeat(8));
        let err = parse_documents(&block, &limits)
            .expect_err("too deep")
            .to_string();
        assert!(err.contains("nesting deeper than 8 levels"), "{err}");
        assert!(err.contains("line 2"), "{err}");
        assert!(parse_documents("a: [[[[[[[1]]]]]]]\n", &limits).is_ok());
    }

    #[test]
    fn hostile_nesting_is_refused_quickly() {
        let started = std::time::Instant::now();
        for text in [
            "{a: ".repeat(200_000),
            "[".repeat(200_000),
            "- ".repeat(200_000),
        ] {
            let err = parse(&text).expect_err("too deep").to_string();
            assert!(err.contains("nesting deeper than 64 levels"), "{err}");
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }

    #[test]
    fn sizes_objects_and_aliases_are_bounded() {
        let small = Limits {
            max_bytes: 10,
            max_objects: 2,
            ..Limits::default()
        };
        assert!(matches!(
            parse_documents("kind: A # more than ten bytes\n", &small),
            Err(ManifestError::TooLarge { limit: 10 })
        ));
        assert!(matches!(
            read_text("x".repeat(11).as_bytes(), 10),
            Err(ManifestError::TooLarge { limit: 10 })
        ));
        assert_eq!(
            read_text("kind: A".as_bytes(), 10).expect("fits"),
            "kind: A"
        );
        let few = Limits {
            max_objects: 2,
            ..Limits::default()
        };
        let err = parse_documents(
            "kind: List\nitems: [{kind: A}, {kind: B}, {kind: C}]\n",
            &few,
        )
        .expect_err("too many")
        .to_string();
        assert_eq!(
            err,
            "document 1: more than 2 objects in the input (raise the limit with --max-objects)"
        );
        assert!(parse_documents(&"---\n".repeat(3), &few).is_err());
        // Each level of aliases doubles the values; the budget follows the text instead.
        let mut laughs = String::from("a0: &a0 [x, x]\n");
        for i in 1..40 {
            laughs.push_str(&format!("a{i}: &a{i} [*a{}, *a{}]\n", i - 1, i - 1));
        }
        let err = parse(&laughs).expect_err("expansion").to_string();
        assert!(
            err.contains("aliases expand too far") || err.contains("repetition limit"),
            "{err}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: std::env::var("KERF_FUZZ_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(256),
            ..ProptestConfig::default()
        })]

        /// Any text, however broken: an answer (never a panic) in bounded time.
        #[test]
        fn the_reader_is_total(text in "([-:?,#&*!|>'\"\\\\{}\\[\\] \t\n\r]|[a-z0-9]|é|---\n|  ){0,400}") {
            let limits = Limits { max_depth: 16, ..Limits::default() };
            let started = std::time::Instant::now();
            let _ = parse_documents(&text, &limits);
            prop_assert!(started.elapsed() < std::time::Duration::from_secs(2));
        }

        /// The flow scan counts what libyaml counts: text it lets through holds no flow collection deeper
        /// than the limit. Without spaces, block nesting adds at most one level (a mapping of keys).
        #[test]
        fn the_flow_scan_never_undercounts(text in "([\\[\\]{},:'\"#a|>&*!\n]){0,200}") {
            let limits = Limits { max_depth: 100, ..Limits::default() };
            if nesting::check_flow_depth(&text, 6).is_ok() {
                if let Ok(documents) = parse_documents(&text, &limits) {
                    for document in documents {
                        prop_assert!(depth(&document.object) <= 7, "{:?}", document.object);
                    }
                }
            }
        }
    }

    fn depth(value: &Value) -> usize {
        match value {
            Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
            Value::Object(fields) => 1 + fields.values().map(depth).max().unwrap_or(0),
            _ => 0,
        }
    }
}
