//! EC2NodeClass selector terms on EC2's terms: tag filters, and the SSM public parameters that AMI aliases
//! (`al2023@latest`, `al2@v20240807`, `bottlerocket@1.20.0`) name.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;
use kerf_core::cloud::{AmiVariant, CloudError};

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

/// One SSM public parameter an alias reads: the architecture and variants of the image it holds, and its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AliasParameter {
    pub architecture: &'static str,
    pub variants: Vec<AmiVariant>,
    pub name: String,
}

/// The SSM parameters holding the AMI IDs of `alias` for Kubernetes `kubernetes_version` (`1.30`): one per
/// architecture and variant that Karpenter v1.14 reads (its `DescribeImageQuery` per family), so that GPU and
/// Neuron instance types boot the images with their drivers. A parameter that does not exist is skipped.
pub fn alias_parameters(
    alias: &str,
    kubernetes_version: &str,
) -> Result<Vec<AliasParameter>, CloudError> {
    use AmiVariant::{Neuron, Nvidia, Standard};
    let invalid = |why: &str| CloudError::InvalidRequest(format!("AMI alias {alias:?}: {why}"));
    let (family, version) = alias
        .split_once('@')
        .ok_or_else(|| invalid("expected family@version"))?;
    if version.is_empty() {
        return Err(invalid("the version is empty"));
    }
    let k8s = kubernetes_version;
    let latest = version == "latest";
    let parameter =
        |architecture: &'static str, variants: &[AmiVariant], name: String| AliasParameter {
            architecture,
            variants: variants.to_vec(),
            name,
        };
    Ok(match family {
        "al2023" => {
            let path = |arch: &'static str, variant: AmiVariant| {
                let v = match variant {
                    Standard => "standard",
                    Nvidia => "nvidia",
                    Neuron => "neuron",
                };
                let name = if latest {
                    "recommended".to_owned()
                } else {
                    format!("amazon-eks-node-al2023-{arch}-{v}-{k8s}-{version}")
                };
                parameter(
                    arch,
                    &[variant],
                    format!("/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/{v}/{name}/image_id"),
                )
            };
            vec![
                path("x86_64", Standard),
                path("x86_64", Nvidia),
                path("x86_64", Neuron),
                path("arm64", Standard),
                path("arm64", Nvidia),
            ]
        }
        "al2" => {
            let path = |flavour: &str, node: &str| {
                let name = if latest {
                    "recommended".to_owned()
                } else {
                    format!("amazon-eks-{node}-{k8s}-{version}")
                };
                format!("/aws/service/eks/optimized-ami/{k8s}/{flavour}/{name}/image_id")
            };
            vec![
                parameter("x86_64", &[Standard], path("amazon-linux-2", "node")),
                parameter(
                    "arm64",
                    &[Standard],
                    path("amazon-linux-2-arm64", "arm64-node"),
                ),
                parameter(
                    "x86_64",
                    &[Nvidia, Neuron],
                    path("amazon-linux-2-gpu", "gpu-node"),
                ),
            ]
        }
        "bottlerocket" => {
            let version = version.strip_prefix('v').unwrap_or(version);
            let path = |flavour: &str, arch: &str| {
                format!(
                    "/aws/service/bottlerocket/aws-k8s-{k8s}{flavour}/{arch}/{version}/image_id"
                )
            };
            vec![
                parameter("x86_64", &[Standard, Neuron], path("", "x86_64")),
                parameter("arm64", &[Standard], path("", "arm64")),
                parameter("x86_64", &[Nvidia], path("-nvidia", "x86_64")),
                parameter("arm64", &[Nvidia], path("-nvidia", "arm64")),
            ]
        }
        _ => return Err(invalid("the family must be al2023, al2 or bottlerocket")),
    })
}

/// Why `alias` cannot be used on Kubernetes `kubernetes_version`, if it cannot: AL2 images are not published for
/// EKS 1.33 and later (Karpenter refuses the alias so, with this message).
pub fn unsupported_alias(alias: &str, kubernetes_version: &str) -> Option<&'static str> {
    let family = alias.split_once('@').map_or(alias, |(family, _)| family);
    let minor = kubernetes_version
        .split('.')
        .nth(1)
        .and_then(|m| m.trim_end_matches('+').parse::<u32>().ok());
    (family == "al2" && minor.is_some_and(|m| m >= 33)).then_some(
        "AL2 aliases are no longer supported on EKS 1.33+ (see https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions-standard.html#kubernetes-1-33)",
    )
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
    fn al2_aliases_stop_at_kubernetes_1_33() {
        assert_eq!(unsupported_alias("al2@latest", "1.32"), None);
        assert_eq!(unsupported_alias("al2023@latest", "1.33"), None);
        for version in ["1.33", "1.34", "1.35+"] {
            let why = unsupported_alias("al2@v20240807", version).expect("refused");
            assert!(
                why.starts_with("AL2 aliases are no longer supported on EKS 1.33+"),
                "{why}"
            );
        }
    }

    #[test]
    fn aliases_name_the_eks_and_bottlerocket_parameters() {
        use AmiVariant::{Neuron, Nvidia, Standard};
        let named = |alias: &str| -> Vec<(&'static str, Vec<AmiVariant>, String)> {
            alias_parameters(alias, "1.30")
                .unwrap()
                .into_iter()
                .map(|p| (p.architecture, p.variants, p.name))
                .collect()
        };
        let eks = "/aws/service/eks/optimized-ami/1.30";
        // Karpenter's al2023.go: standard and NVIDIA on both architectures, Neuron on x86_64.
        assert_eq!(
            named("al2023@latest"),
            [
                (
                    "x86_64",
                    vec![Standard],
                    format!("{eks}/amazon-linux-2023/x86_64/standard/recommended/image_id")
                ),
                (
                    "x86_64",
                    vec![Nvidia],
                    format!("{eks}/amazon-linux-2023/x86_64/nvidia/recommended/image_id")
                ),
                (
                    "x86_64",
                    vec![Neuron],
                    format!("{eks}/amazon-linux-2023/x86_64/neuron/recommended/image_id")
                ),
                (
                    "arm64",
                    vec![Standard],
                    format!("{eks}/amazon-linux-2023/arm64/standard/recommended/image_id")
                ),
                (
                    "arm64",
                    vec![Nvidia],
                    format!("{eks}/amazon-linux-2023/arm64/nvidia/recommended/image_id")
                ),
            ]
        );
        assert_eq!(
            named("al2023@v20240807")[1].2,
            format!("{eks}/amazon-linux-2023/x86_64/nvidia/amazon-eks-node-al2023-x86_64-nvidia-1.30-v20240807/image_id")
        );
        // al2.go: one GPU image for NVIDIA and Neuron; the arm64 image's pinned name says arm64.
        assert_eq!(
            named("al2@v20240807"),
            [
                (
                    "x86_64",
                    vec![Standard],
                    format!("{eks}/amazon-linux-2/amazon-eks-node-1.30-v20240807/image_id")
                ),
                (
                    "arm64",
                    vec![Standard],
                    format!(
                        "{eks}/amazon-linux-2-arm64/amazon-eks-arm64-node-1.30-v20240807/image_id"
                    )
                ),
                (
                    "x86_64",
                    vec![Nvidia, Neuron],
                    format!("{eks}/amazon-linux-2-gpu/amazon-eks-gpu-node-1.30-v20240807/image_id")
                ),
            ]
        );
        assert_eq!(
            named("al2@latest")[1].2,
            format!("{eks}/amazon-linux-2-arm64/recommended/image_id")
        );
        // bottlerocket.go: the x86_64 image serves Neuron too; NVIDIA images have their own family.
        assert_eq!(
            named("bottlerocket@v1.20.0"),
            [
                (
                    "x86_64",
                    vec![Standard, Neuron],
                    "/aws/service/bottlerocket/aws-k8s-1.30/x86_64/1.20.0/image_id".to_owned()
                ),
                (
                    "arm64",
                    vec![Standard],
                    "/aws/service/bottlerocket/aws-k8s-1.30/arm64/1.20.0/image_id".to_owned()
                ),
                (
                    "x86_64",
                    vec![Nvidia],
                    "/aws/service/bottlerocket/aws-k8s-1.30-nvidia/x86_64/1.20.0/image_id"
                        .to_owned()
                ),
                (
                    "arm64",
                    vec![Nvidia],
                    "/aws/service/bottlerocket/aws-k8s-1.30-nvidia/arm64/1.20.0/image_id"
                        .to_owned()
                ),
            ]
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
