//! Field paths and field errors, rendered the way kube-apiserver renders them.
//!
//! Every rule in `api-rules.md` produces a [`FieldError`] at the path of the node that carries the rule. That
//! path is also what UPDATE ratcheting compares between the old and the new object (see [`super::ratchet`]).

use std::borrow::Cow;
use std::fmt;

/// The most characters of a user's value an error quotes; the rest is elided, so that a huge value cannot make a
/// huge response. A requirement key, the longest value kerf's schema allows, is 316 characters.
pub const MAX_VALUE_CHARS: usize = 320;
/// The most characters of an error's detail text. The rules quote at most a few values in it, each elided to
/// [`MAX_VALUE_CHARS`]; the longest fixed message (the list of well-known labels) is about 1,600 characters.
pub const MAX_DETAIL_CHARS: usize = 4096;

/// One step of a [`FieldPath`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Segment {
    Field(String),
    Index(usize),
    Key(String),
}

/// One step of a [`FieldPath`], as seen from outside: a name (a field or a map key, as JSON spells both) or a
/// list index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step<'a> {
    Name(&'a str),
    Index(usize),
}

/// A path into an object: `spec.template.spec.requirements[3].key`, `spec.template.metadata.labels[app]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FieldPath(Vec<Segment>);

impl FieldPath {
    /// The path of a top-level field such as `spec`.
    pub fn new(field: &str) -> Self {
        FieldPath(vec![Segment::Field(field.to_owned())])
    }

    /// The path of a (possibly nested, dot-separated) field below this one.
    pub fn child(&self, fields: &str) -> Self {
        let mut segments = self.0.clone();
        segments.extend(fields.split('.').map(|f| Segment::Field(f.to_owned())));
        FieldPath(segments)
    }

    /// The path of a list item.
    pub fn index(&self, i: usize) -> Self {
        let mut segments = self.0.clone();
        segments.push(Segment::Index(i));
        FieldPath(segments)
    }

    /// The path of a map entry.
    pub fn key(&self, key: &str) -> Self {
        let mut segments = self.0.clone();
        segments.push(Segment::Key(key.to_owned()));
        FieldPath(segments)
    }

    /// The steps of this path, from the root.
    pub fn steps(&self) -> impl Iterator<Item = Step<'_>> {
        self.0.iter().map(|segment| match segment {
            Segment::Field(name) | Segment::Key(name) => Step::Name(name),
            Segment::Index(i) => Step::Index(*i),
        })
    }

    /// This path with its list indexes replaced, in order, by `indexes` (those left over keep their value).
    pub fn reindexed(&self, indexes: impl IntoIterator<Item = usize>) -> FieldPath {
        let mut indexes = indexes.into_iter();
        let segments = self.0.iter().map(|segment| match segment {
            Segment::Index(i) => Segment::Index(indexes.next().unwrap_or(*i)),
            other => other.clone(),
        });
        FieldPath(segments.collect())
    }

    /// The outermost list or map this path goes into, if any: errors are counted against it.
    pub fn collection(&self) -> Option<FieldPath> {
        let inside = self
            .0
            .iter()
            .position(|s| matches!(s, Segment::Index(_) | Segment::Key(_)))?;
        Some(FieldPath(self.0[..inside].to_vec()))
    }

    /// The RFC 6901 JSON Pointer of this path, to look the value up in an object's JSON.
    pub fn json_pointer(&self) -> String {
        let mut pointer = String::new();
        for segment in &self.0 {
            pointer.push('/');
            match segment {
                Segment::Field(name) | Segment::Key(name) => {
                    pointer.push_str(&name.replace('~', "~0").replace('/', "~1"))
                }
                Segment::Index(i) => pointer.push_str(&i.to_string()),
            }
        }
        pointer
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Field(name) if i == 0 => f.write_str(name)?,
                Segment::Field(name) => write!(f, ".{name}")?,
                Segment::Index(index) => write!(f, "[{index}]")?,
                Segment::Key(key) => write!(f, "[{}]", elide(key, MAX_VALUE_CHARS))?,
            }
        }
        Ok(())
    }
}

/// What is wrong with a field; each variant renders as the apiserver's reason text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// `Required value`
    Required,
    /// `Invalid value: "<value>": <detail>` (or the value unquoted for numbers)
    Invalid {
        value: String,
        quoted: bool,
        detail: String,
    },
    /// `Unsupported value: "<value>": supported values: "<a>", "<b>"`
    NotSupported {
        value: String,
        supported: Vec<String>,
    },
    /// `Too long: may not be longer than <max>`
    TooLong { max: usize },
    /// `Too many: <count>: must have at most <max> items`
    TooMany { count: usize, max: usize },
    /// `Duplicate value: "<value>"`
    Duplicate { value: String },
    /// A value of the wrong JSON type, rendered as `Invalid value: "<actual type>": <detail>`: nothing typed can be
    /// parsed from it, unlike from a value that breaks a pattern or a bound.
    WrongType {
        actual: &'static str,
        detail: String,
    },
    /// `... and <count> more errors`: errors left out of a response so that its size stays bounded.
    Omitted { count: usize },
}

impl ErrorKind {
    /// The `details.causes[].reason` the apiserver would report for this error.
    pub fn cause_reason(&self) -> &'static str {
        match self {
            ErrorKind::Required => "FieldValueRequired",
            ErrorKind::Invalid { .. } | ErrorKind::WrongType { .. } => "FieldValueInvalid",
            ErrorKind::NotSupported { .. } => "FieldValueNotSupported",
            ErrorKind::TooLong { .. } => "FieldValueTooLong",
            ErrorKind::TooMany { .. } => "FieldValueTooMany",
            ErrorKind::Duplicate { .. } => "FieldValueDuplicate",
            ErrorKind::Omitted { .. } => "FieldValueTooMany",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Required => f.write_str("Required value"),
            ErrorKind::Invalid {
                value,
                quoted: true,
                detail,
            } => {
                write!(f, "Invalid value: {}: {detail}", quote(value))
            }
            ErrorKind::Invalid {
                value,
                quoted: false,
                detail,
            } => {
                write!(f, "Invalid value: {value}: {detail}")
            }
            ErrorKind::NotSupported { value, supported } => {
                let supported: Vec<String> = supported.iter().map(|s| quote(s)).collect();
                write!(
                    f,
                    "Unsupported value: {}: supported values: {}",
                    quote(value),
                    supported.join(", ")
                )
            }
            ErrorKind::TooLong { max } => write!(f, "Too long: may not be longer than {max}"),
            ErrorKind::TooMany { count, max } => {
                write!(f, "Too many: {count}: must have at most {max} items")
            }
            ErrorKind::Duplicate { value } => write!(f, "Duplicate value: {}", quote(value)),
            ErrorKind::WrongType { actual, detail } => {
                write!(f, "Invalid value: {}: {detail}", quote(actual))
            }
            ErrorKind::Omitted { count } => write!(f, "... and {count} more errors"),
        }
    }
}

/// `text` cut to its first `max` characters, saying how many were left out.
pub fn elide(text: &str, max: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => Cow::Borrowed(text),
        Some((cut, _)) => {
            let (kept, rest) = text.split_at(cut);
            let more = rest.chars().count();
            Cow::Owned(format!("{kept}... ({more} more characters)"))
        }
    }
}

/// [`elide`] for a string the caller owns, which is kept when it is short enough.
pub fn elide_owned(text: String, max: usize) -> String {
    match elide(&text, max) {
        Cow::Borrowed(_) => text,
        Cow::Owned(cut) => cut,
    }
}

/// Go's `%q`: the value in double quotes with quotes and backslashes escaped.
fn quote(value: &str) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| format!("\"{value}\""))
}

/// One validation error: where, what, and whether UPDATE ratcheting may drop it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub path: FieldPath,
    pub kind: ErrorKind,
    /// Transition rules (immutability, static⇄dynamic) are never ratcheted.
    pub ratchets: bool,
}

impl FieldError {
    fn new(path: &FieldPath, kind: ErrorKind) -> Self {
        FieldError {
            path: path.clone(),
            kind,
            ratchets: true,
        }
    }

    /// `Required value`.
    pub fn required(path: &FieldPath) -> Self {
        Self::new(path, ErrorKind::Required)
    }

    /// `Invalid value: "<value>": <detail>`: the general form, used for runtime (RT) and kerf+ rules that name
    /// the offending value.
    pub fn invalid(path: &FieldPath, value: &str, detail: impl Into<String>) -> Self {
        Self::new(
            path,
            ErrorKind::Invalid {
                value: elide(value, MAX_VALUE_CHARS).into_owned(),
                quoted: true,
                detail: elide_owned(detail.into(), MAX_DETAIL_CHARS),
            },
        )
    }

    /// A schema type mismatch: `Invalid value: "<actual>": <path> in body must be of type <expected>: "<actual>"`.
    pub fn wrong_type(path: &FieldPath, expected: &str, actual: &'static str) -> Self {
        let detail = format!("{path} in body must be of type {expected}: {actual:?}");
        Self::new(
            path,
            ErrorKind::WrongType {
                actual,
                detail: elide_owned(detail, MAX_DETAIL_CHARS),
            },
        )
    }

    /// `count` errors inside `path` (the whole object when it is empty) that were left out.
    pub fn omitted(path: &FieldPath, count: usize) -> Self {
        Self::new(path, ErrorKind::Omitted { count })
    }

    /// A CEL rule with its message: `Invalid value: "<schema type>": <message>`.
    pub fn rule(path: &FieldPath, schema_type: SchemaType, message: impl Into<String>) -> Self {
        Self::invalid(path, schema_type.as_str(), message)
    }

    /// A schema pattern mismatch: `Invalid value: "<v>": <path> in body should match '<pattern>'`.
    pub fn pattern(path: &FieldPath, value: &str, pattern: &str) -> Self {
        Self::invalid(
            path,
            value,
            format!("{path} in body should match '{pattern}'"),
        )
    }

    /// A schema minimum: `Invalid value: <v>: <path> in body should be greater than or equal to <min>`.
    pub fn minimum(path: &FieldPath, value: i64, min: i64) -> Self {
        let detail = format!("{path} in body should be greater than or equal to {min}");
        Self::new(
            path,
            ErrorKind::Invalid {
                value: value.to_string(),
                quoted: false,
                detail,
            },
        )
    }

    /// A schema maximum: `Invalid value: <v>: <path> in body should be less than or equal to <max>`.
    pub fn maximum(path: &FieldPath, value: i64, max: i64) -> Self {
        let detail = format!("{path} in body should be less than or equal to {max}");
        Self::new(
            path,
            ErrorKind::Invalid {
                value: value.to_string(),
                quoted: false,
                detail,
            },
        )
    }

    /// Checks `min <= value <= max` and returns the schema error, if any.
    pub fn range(path: &FieldPath, value: i64, min: i64, max: i64) -> Option<Self> {
        if value < min {
            Some(Self::minimum(path, value, min))
        } else if value > max {
            Some(Self::maximum(path, value, max))
        } else {
            None
        }
    }

    /// A schema minLength: `Invalid value: "<v>": <path> in body should be at least <n> chars long`.
    pub fn min_length(path: &FieldPath, value: &str, min: usize) -> Self {
        Self::invalid(
            path,
            value,
            format!("{path} in body should be at least {min} chars long"),
        )
    }

    /// A schema minItems: `Invalid value: <count>: <path> in body should have at least <n> items`.
    pub fn min_items(path: &FieldPath, count: usize, min: usize) -> Self {
        let detail = format!("{path} in body should have at least {min} items");
        Self::new(
            path,
            ErrorKind::Invalid {
                value: count.to_string(),
                quoted: false,
                detail,
            },
        )
    }

    /// A schema enum mismatch.
    pub fn not_supported(path: &FieldPath, value: &str, supported: &[&str]) -> Self {
        let supported = supported.iter().map(|s| (*s).to_owned()).collect();
        Self::new(
            path,
            ErrorKind::NotSupported {
                value: elide(value, MAX_VALUE_CHARS).into_owned(),
                supported,
            },
        )
    }

    /// A schema maxLength.
    pub fn too_long(path: &FieldPath, max: usize) -> Self {
        Self::new(path, ErrorKind::TooLong { max })
    }

    /// A schema maxItems / maxProperties.
    pub fn too_many(path: &FieldPath, count: usize, max: usize) -> Self {
        Self::new(path, ErrorKind::TooMany { count, max })
    }

    /// A repeated member of a set-typed list, at the repeated item's path.
    pub fn duplicate(path: &FieldPath, value: &str) -> Self {
        Self::new(
            path,
            ErrorKind::Duplicate {
                value: elide(value, MAX_VALUE_CHARS).into_owned(),
            },
        )
    }

    /// Marks a transition rule, which UPDATE ratcheting never drops.
    pub fn never_ratchets(mut self) -> Self {
        self.ratchets = false;
        self
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ErrorKind::Omitted { .. } if self.path.0.is_empty() => write!(f, "{}", self.kind),
            ErrorKind::Omitted { .. } => write!(f, "{} in {}", self.kind, self.path),
            _ => write!(f, "{}: {}", self.path, self.kind),
        }
    }
}

/// The OpenAPI type of the node carrying a CEL rule; the apiserver prints it as the "value" of rule errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaType {
    String,
    Object,
    Array,
    Integer,
}

impl SchemaType {
    pub fn as_str(self) -> &'static str {
        match self {
            SchemaType::String => "string",
            SchemaType::Object => "object",
            SchemaType::Array => "array",
            SchemaType::Integer => "integer",
        }
    }
}

/// `<Kind>.<group> "<name>" is invalid: <errors>`: the apiserver's rendering of a rejected object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    pub kind: String,
    pub group: String,
    pub name: String,
    pub errors: Vec<FieldError>,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{} {:?} is invalid: ",
            self.kind, self.group, self.name
        )?;
        match self.errors.as_slice() {
            [one] => write!(f, "{one}"),
            many => {
                let rendered: Vec<String> = many.iter().map(ToString::to_string).collect();
                write!(f, "[{}]", rendered.join(", "))
            }
        }
    }
}

impl std::error::Error for Invalid {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_elided_on_a_character_boundary() {
        assert_eq!(elide("abc", 3), "abc");
        assert_eq!(elide("ééééé", 2), "éé... (3 more characters)");
        let long = "é".repeat(MAX_VALUE_CHARS + 10);
        let err = FieldError::invalid(&FieldPath::new("spec"), &long, "bad");
        let ErrorKind::Invalid { value, .. } = &err.kind else {
            panic!("an invalid-value error: {err}");
        };
        assert!(value.ends_with("... (10 more characters)"), "{value}");
        let key = FieldPath::new("labels").key(&"k".repeat(MAX_VALUE_CHARS + 1));
        assert!(key.to_string().ends_with("... (1 more characters)]"));
        assert_eq!(
            key.json_pointer().len(),
            "/labels/".len() + MAX_VALUE_CHARS + 1
        );
    }

    #[test]
    fn reindexing_replaces_list_indexes_in_order() {
        let path = FieldPath::new("spec")
            .child("terms")
            .index(0)
            .child("values")
            .index(1);
        assert_eq!(
            path.reindexed([3, 7]).to_string(),
            "spec.terms[3].values[7]"
        );
        assert_eq!(
            path.collection().map(|c| c.to_string()),
            Some("spec.terms".to_owned())
        );
        assert_eq!(FieldPath::new("spec").collection(), None);
    }

    #[test]
    fn paths_render_like_the_apiserver() {
        let reqs = FieldPath::new("spec").child("template.spec.requirements");
        assert_eq!(
            reqs.index(4).child("key").to_string(),
            "spec.template.spec.requirements[4].key"
        );
        let labels = FieldPath::new("spec").child("template.metadata.labels");
        assert_eq!(
            labels.key("a/b~c").to_string(),
            "spec.template.metadata.labels[a/b~c]"
        );
        assert_eq!(
            labels.key("a/b~c").json_pointer(),
            "/spec/template/metadata/labels/a~1b~0c"
        );
        assert_eq!(
            reqs.index(2).json_pointer(),
            "/spec/template/spec/requirements/2"
        );
    }

    #[test]
    fn errors_render_like_the_apiserver() {
        let key = FieldPath::new("spec")
            .child("template.spec.requirements")
            .index(4)
            .child("key");
        let err = FieldError::rule(
            &key,
            SchemaType::String,
            "label domain \"karpenter.sh\" is restricted",
        );
        let one = Invalid {
            kind: "NodePool".into(),
            group: "karpenter.sh".into(),
            name: "default".into(),
            errors: vec![err.clone()],
        };
        assert_eq!(
            one.to_string(),
            r#"NodePool.karpenter.sh "default" is invalid: spec.template.spec.requirements[4].key: Invalid value: "string": label domain "karpenter.sh" is restricted"#
        );
        let weight = FieldPath::new("spec").child("weight");
        let two = Invalid {
            errors: vec![err, FieldError::minimum(&weight, 0, 1)],
            ..one
        };
        assert!(two.to_string().ends_with(
            r#"is invalid: [spec.template.spec.requirements[4].key: Invalid value: "string": label domain "karpenter.sh" is restricted, spec.weight: Invalid value: 0: spec.weight in body should be greater than or equal to 1]"#
        ));
        let policy = FieldPath::new("spec").child("disruption.consolidationPolicy");
        assert_eq!(
            FieldError::not_supported(
                &policy,
                "WhenUnderutilized",
                &["WhenEmpty", "WhenEmptyOrUnderutilized"]
            )
            .to_string(),
            r#"spec.disruption.consolidationPolicy: Unsupported value: "WhenUnderutilized": supported values: "WhenEmpty", "WhenEmptyOrUnderutilized""#
        );
        assert_eq!(
            FieldError::too_many(&weight, 101, 100).to_string(),
            "spec.weight: Too many: 101: must have at most 100 items"
        );
    }
}
