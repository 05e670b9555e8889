//! EC2NodeClass selector terms on EC2's terms: tag filters, and the SSM public parameters that AMI aliases
//! (`al2023@latest`, `al2@v20240807`, `bottlerocket@1.20.0`) name.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;
use kerf::cloud::CloudError;

/// The architectures kerf launches, as EC2 and SSM paths name them.
pub const ARCHITECTURES: [&str; 2] = ["x86_64", "arm64"];

/// EC2 filters for a selector term's tags: `tag:<key>` = value, or `tag-key` = key for the value `*`.
pub fn tag_filters(tags: Option<&BTreeMap<String, String>>) -> Vec<Filter> {
    tags.into_iter()
        .flatten()
        .map(|(key, value)| {
            if value == "*" {
                Filter::builder().name("tag-key").values(key).build()
            } else {
                Filter::builder()
                    .name(format!("tag:{key}"))
                    .values(value)
                    .build()
            }
        })
        .collect()
}

/// The SSM parameter holding the AMI ID of `alias` for each architecture, for Kubernetes
/// `kubernetes_version` (`1.30`).
pub fn alias_parameters(
    alias: &str,
    kubernetes_version: &str,
) -> Result<Vec<(&'static str, String)>, CloudError> {
    let invalid = |why: &str| CloudError::InvalidRequest(format!("AMI alias {alias:?}: {why}"));
    let (family, version) = alias
        .split_once('@')
        .ok_or_else(|| invalid("expected family@version"))?;
    if version.is_empty() {
        return Err(invalid("the version is empty"));
    }
    let k8s = kubernetes_version;
    let latest = version == "latest";
    ARCHITECTURES
        .iter()
        .map(|&arch| {
            let path = match family {
                "al2023" if latest => format!(
                    "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/standard/recommended/image_id"
                ),
                "al2023" => format!(
                    "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/standard/amazon-eks-node-al2023-{arch}-standard-{k8s}-{version}/image_id"
                ),
                "al2" => {
                    let flavour = if arch == "arm64" { "amazon-linux-2-arm64" } else { "amazon-linux-2" };
                    if latest {
                        format!("/aws/service/eks/optimized-ami/{k8s}/{flavour}/recommended/image_id")
                    } else {
                        format!("/aws/service/eks/optimized-ami/{k8s}/{flavour}/amazon-eks-node-{k8s}-{version}/image_id")
                    }
                }
                "bottlerocket" => {
                    let version = version.strip_prefix('v').unwrap_or(version);
                    format!("/aws/service/bottlerocket/aws-k8s-{k8s}/{arch}/{version}/image_id")
                }
                _ => return Err(invalid("the family must be al2023, al2 or bottlerocket")),
            };
            Ok((arch, path))
        })
        .collect()
}

/// Whether `value` is an EC2 image id (`ami-` and lowercase hex, as the EC2NodeClass's `id` pattern has it): what
/// an `ssmParameter` AMI term's parameter must hold.
pub fn is_image_id(value: &str) -> bool {
    value.strip_prefix("ami-").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .chars()
                .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_image_id_is_ami_and_lowercase_alphanumerics() {
        for yes in ["ami-0123456789abcdef0", "ami-1"] {
            assert!(is_image_id(yes), "{yes}");
        }
        for no in [
            "",
            "ami-",
            "AMI-123",
            "ami-ABC",
            "ami-12 34",
            "snap-0123",
            "/aws/service/x",
            "amí-1",
        ] {
            assert!(!is_image_id(no), "{no}");
        }
    }

    use super::*;

    #[test]
    fn tags_become_tag_filters_and_a_star_means_any_value() {
        let tags = BTreeMap::from([
            ("karpenter.sh/discovery".to_string(), "demo".to_string()),
            ("tier".to_string(), "*".to_string()),
        ]);
        let filters: Vec<_> = tag_filters(Some(&tags))
            .iter()
            .map(|f| (f.name().unwrap().to_owned(), f.values().to_vec()))
            .collect();
        assert_eq!(
            filters,
            [
                (
                    "tag:karpenter.sh/discovery".to_string(),
                    vec!["demo".to_string()]
                ),
                ("tag-key".to_string(), vec!["tier".to_string()]),
            ]
        );
        assert!(tag_filters(None).is_empty());
    }

    #[test]
    fn aliases_name_the_eks_and_bottlerocket_parameters() {
        assert_eq!(
            alias_parameters("al2023@latest", "1.30").unwrap(),
            [
                ("x86_64", "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard/recommended/image_id".to_string()),
                ("arm64", "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/arm64/standard/recommended/image_id".to_string()),
            ]
        );
        assert_eq!(
            alias_parameters("al2023@v20240807", "1.30").unwrap()[0].1,
            "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.30-v20240807/image_id"
        );
        assert_eq!(
            alias_parameters("al2@latest", "1.30").unwrap()[1].1,
            "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-arm64/recommended/image_id"
        );
        assert_eq!(
            alias_parameters("bottlerocket@v1.20.0", "1.30").unwrap()[0].1,
            "/aws/service/bottlerocket/aws-k8s-1.30/x86_64/1.20.0/image_id"
        );
    }

    #[test]
    fn malformed_aliases_are_refused() {
        for bad in ["al2023", "al2023@", "ubuntu@latest"] {
            assert!(
                matches!(
                    alias_parameters(bad, "1.30"),
                    Err(CloudError::InvalidRequest(_))
                ),
                "{bad}"
            );
        }
    }
}
