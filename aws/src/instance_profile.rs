//! Instance profiles kerf manages for an EC2NodeClass's `role` (Karpenter's behaviour): one profile per class,
//! named `<cluster>_<hash of region and class>`, tagged for the cluster, holding exactly that role. A class
//! that names `instanceProfile` instead uses it as given.

use crate::errors::code_of;
use crate::stable_hash::fnv1a;
use kerf_core::cloud::{CloudError, NO_ROLE, TAG_CLUSTER_PREFIX, TAG_EC2NODECLASS};

/// IAM caps instance profile names at 128 characters.
const MAX_NAME: usize = 128;

/// The profile kerf manages for class `node_class` of `cluster` in `region`.
pub fn profile_name(cluster: &str, region: &str, node_class: &str) -> String {
    let hash = fnv1a(&format!("{region}/{node_class}"));
    let suffix = format!("_{hash:016x}");
    let cluster: String = cluster
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "+=,.@-_".contains(*c))
        .take(MAX_NAME - suffix.len())
        .collect();
    format!("{cluster}{suffix}")
}

/// The role name of a `role` field: a name, or the last path segment of a role ARN.
pub fn role_name(role: &str) -> &str {
    if role.starts_with("arn:") {
        role.rsplit('/').next().unwrap_or(role)
    } else {
        role
    }
}

/// What to do to a profile so that it holds exactly `role`.
#[derive(Debug, PartialEq, Eq)]
pub struct RoleChanges<'a> {
    pub remove: Vec<&'a str>,
    pub add: bool,
}

pub fn role_changes<'a>(current: &'a [String], role: &str) -> RoleChanges<'a> {
    RoleChanges {
        remove: current
            .iter()
            .map(String::as_str)
            .filter(|r| *r != role)
            .collect(),
        add: !current.iter().any(|r| r == role),
    }
}

/// The tags of a managed profile.
pub fn profile_tags(cluster: &str, node_class: &str) -> Vec<(String, String)> {
    vec![
        (format!("{TAG_CLUSTER_PREFIX}{cluster}"), "owned".to_owned()),
        (TAG_EC2NODECLASS.to_owned(), node_class.to_owned()),
    ]
}

/// An IAM answer that the entity is not there (already removed), read as done.
pub fn gone_is_done<T>(result: Result<T, CloudError>) -> Result<(), CloudError> {
    match result {
        Ok(_) => Ok(()),
        Err(e) if code_of(&e) == Some("NoSuchEntity") => Ok(()),
        Err(e) => Err(e),
    }
}

/// A missing role reads as the class not being ready, with the role named.
pub fn role_error(node_class: &str, role: &str, error: CloudError) -> CloudError {
    if code_of(&error) == Some("NoSuchEntity") {
        CloudError::NodeClassNotReady {
            name: node_class.to_owned(),
            reason: format!("{NO_ROLE}: {role}"),
        }
    } else {
        error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_bounded_and_iam_safe() {
        let name = profile_name("demo", "us-west-2", "default");
        assert_eq!(name, profile_name("demo", "us-west-2", "default"));
        assert_ne!(name, profile_name("demo", "us-west-2", "gpu"));
        assert!(name.starts_with("demo_") && name.len() == "demo_".len() + 16);
        let long = profile_name(&"c/".repeat(100), "us-west-2", "default");
        assert!(long.len() <= MAX_NAME && !long.contains('/'), "{long}");
    }

    #[test]
    fn role_arns_are_reduced_to_their_name() {
        assert_eq!(role_name("KarpenterNodeRole"), "KarpenterNodeRole");
        assert_eq!(
            role_name("arn:aws:iam::111122223333:role/nodes/KarpenterNodeRole"),
            "KarpenterNodeRole"
        );
    }

    #[test]
    fn a_profile_ends_up_holding_exactly_the_role() {
        let current = vec!["Old".to_owned(), "Wanted".to_owned()];
        assert_eq!(
            role_changes(&current, "Wanted"),
            RoleChanges {
                remove: vec!["Old"],
                add: false
            }
        );
        assert_eq!(
            role_changes(&[], "Wanted"),
            RoleChanges {
                remove: vec![],
                add: true
            }
        );
    }
}
