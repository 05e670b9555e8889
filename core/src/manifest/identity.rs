//! What the apiserver refuses about an object's identity before any webhook sees it: a `metadata.name` that
//! its kind does not allow, and a second object of the same kind and name in one input ("already exists").

use super::{group_kind, Document};
use crate::api::validation::grammar::dns_subdomain_problems;
use crate::api::validation::{FieldError, FieldPath, Invalid};
use serde_json::Value;
use std::collections::BTreeMap;

/// Kinds whose names must be DNS subdomains (kerf's cluster-scoped custom resources), as `(group, kind)`.
const SUBDOMAIN_NAMED: [(&str, &str); 3] = [
    ("karpenter.sh", "NodePool"),
    ("karpenter.sh", "NodeClaim"),
    ("karpenter.k8s.aws", "EC2NodeClass"),
];

/// Why an object of an input cannot be created.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error(transparent)]
    Name(Invalid),
    #[error("{resource} {name:?} already exists (document {first} has the same kind and name)")]
    AlreadyExists {
        resource: String,
        name: String,
        first: usize,
    },
}

/// The objects of one input seen so far, by group, kind, namespace and name.
#[derive(Default)]
pub struct Identities {
    seen: BTreeMap<(String, String, String, String), usize>,
}

impl Identities {
    /// Checks `document`'s name, and that no earlier document of the input has its kind and name.
    pub fn admit(&mut self, document: &Document) -> Result<(), IdentityError> {
        let object = &document.object;
        let (group, kind) = group_kind(object);
        let text = |pointer| object.pointer(pointer).and_then(Value::as_str);
        let name = text("/metadata/name").unwrap_or_default();
        if SUBDOMAIN_NAMED.contains(&(group, kind)) {
            let problems = name_problems(name, text("/metadata/generateName"));
            if !problems.is_empty() {
                return Err(IdentityError::Name(Invalid {
                    kind: kind.to_owned(),
                    group: group.to_owned(),
                    name: name.to_owned(),
                    errors: problems,
                }));
            }
        }
        if name.is_empty() {
            // Named by the apiserver (`generateName`): never a duplicate.
            return Ok(());
        }
        let namespace = if SUBDOMAIN_NAMED.contains(&(group, kind)) {
            ""
        } else {
            text("/metadata/namespace").unwrap_or("default")
        };
        let key = (
            group.to_owned(),
            kind.to_owned(),
            namespace.to_owned(),
            name.to_owned(),
        );
        if let Some(&first) = self.seen.get(&key) {
            return Err(IdentityError::AlreadyExists {
                resource: resource(group, kind),
                name: name.to_owned(),
                first,
            });
        }
        self.seen.insert(key, document.index);
        Ok(())
    }
}

/// The apiserver's checks of a DNS-subdomain name (or, without one, of `generateName`).
fn name_problems(name: &str, generate_name: Option<&str>) -> Vec<FieldError> {
    let (field, value) = match (name, generate_name) {
        ("", None | Some("")) => {
            return vec![FieldError::required(
                &FieldPath::new("metadata").child("name"),
            )]
        }
        ("", Some(prefix)) => ("generateName", prefix),
        (name, _) => ("name", name),
    };
    // A generated name appends random letters to the prefix, so its trailing dashes are fine.
    let checked = if field == "generateName" {
        value.trim_end_matches('-')
    } else {
        value
    };
    dns_subdomain_problems(checked)
        .into_iter()
        .map(|detail| FieldError::invalid(&FieldPath::new("metadata").child(field), value, detail))
        .collect()
}

/// The resource name the apiserver prints for a kind: `nodepools.karpenter.sh`, `pods`.
fn resource(group: &str, kind: &str) -> String {
    let lower = kind.to_lowercase();
    let plural = if let Some(stem) = lower.strip_suffix('y') {
        format!("{stem}ies")
    } else if lower.ends_with('s') {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    };
    if group.is_empty() {
        plural
    } else {
        format!("{plural}.{group}")
    }
}
