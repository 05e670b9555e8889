//! Node user data, per AMI family: what makes an instance join the cluster as the node its NodeClaim asked
//! for — the cluster endpoint and CA, the kubelet settings, the labels, and the taints it registers with
//! (always including `karpenter.sh/unregistered:NoExecute`, lifted by kerf on registration).
//! - AL2023: a nodeadm `NodeConfig` (`al2023`);
//! - AL2: `/etc/eks/bootstrap.sh` with kubelet flags (`al2`);
//! - Bottlerocket: TOML settings merged into the class's own (`bottlerocket`);
//! - Custom: the class's `userData` unchanged (the user joins the node).
//!
//! The EC2NodeClass's own `userData` is merged in the way each family expects, as Karpenter does.

mod al2;
mod al2023;
mod bottlerocket;

use kerf_core::api::ec2nodeclass::{AmiFamily, EC2NodeClassSpec, KubeletConfiguration};
use kerf_core::api::nodepool::{Taint, TaintEffect};
use kerf_core::cloud::{CloudError, UNREGISTERED_TAINT_KEY};
use std::collections::BTreeMap;

pub use al2023::{al2023, registration};

/// The MIME boundary of the multi-part families; no user-data content may contain a line `--//`.
const BOUNDARY: &str = "//";

/// The cluster a node joins.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterInfo {
    pub name: String,
    pub endpoint: String,
    /// Base64 PEM of the cluster CA.
    pub ca_bundle: Option<String>,
    /// The service CIDR (`10.100.0.0/16`).
    pub cidr: Option<String>,
    /// The cluster DNS address (the `kube-system/kube-dns` Service's ClusterIP), for nodes whose class sets no
    /// `kubelet.clusterDNS`.
    pub dns_ip: Option<String>,
}

/// The DNS address a node's kubelet is given: the class's `kubelet.clusterDNS` (its first), else the cluster's
/// kube-dns address, as Karpenter defaults it.
fn cluster_dns<'a>(cluster: &'a ClusterInfo, node: &NodeSettings<'a>) -> Option<&'a str> {
    node.kubelet
        .and_then(|k| k.cluster_dns.as_ref()?.first())
        .or(cluster.dns_ip.as_ref())
        .map(String::as_str)
}

/// What goes into one node's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSettings<'a> {
    pub labels: &'a BTreeMap<String, String>,
    pub taints: &'a [Taint],
    pub kubelet: Option<&'a KubeletConfiguration>,
    pub custom: Option<&'a str>,
    /// `instanceStorePolicy: RAID0`: the instance-store disks striped into one array for containerd, the
    /// kubelet and pod logs, by each family's own means.
    pub raid0: bool,
}

/// The user-data format of a class: its `amiFamily`, or the family of its alias term.
pub fn family(spec: &EC2NodeClassSpec) -> Option<AmiFamily> {
    if let Some(family) = spec.ami_family {
        return Some(family);
    }
    let alias = spec
        .ami_selector_terms
        .iter()
        .flatten()
        .find_map(|term| term.alias.as_deref())?;
    let name = alias.split_once('@').map_or(alias, |(family, _)| family);
    Some(match name {
        "al2023" => AmiFamily::Al2023,
        "al2" => AmiFamily::Al2,
        "bottlerocket" => AmiFamily::Bottlerocket,
        "windows2019" => AmiFamily::Windows2019,
        "windows2022" => AmiFamily::Windows2022,
        "windows2025" => AmiFamily::Windows2025,
        _ => return None,
    })
}

/// The user data (plain text; EC2 wants it base64-encoded) of a node of `spec`'s family.
pub fn render(
    spec: &EC2NodeClassSpec,
    cluster: &ClusterInfo,
    node: &NodeSettings<'_>,
) -> Result<String, CloudError> {
    match family(spec) {
        Some(AmiFamily::Al2023) => Ok(al2023(cluster, node)),
        Some(AmiFamily::Al2) => Ok(al2::al2(cluster, node)),
        Some(AmiFamily::Bottlerocket) => bottlerocket::bottlerocket(cluster, node),
        Some(AmiFamily::Custom) => Ok(node.custom.unwrap_or_default().to_owned()),
        Some(family @ (AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025)) => {
            Err(CloudError::InvalidRequest(format!(
                "amiFamily {family:?} is not supported by kerf yet; use AL2023, AL2, Bottlerocket or Custom"
            )))
        }
        None => Err(CloudError::InvalidRequest(
            "the EC2NodeClass names no amiFamily and no alias: set amiFamily (AL2023, AL2, Bottlerocket or Custom)"
                .into(),
        )),
    }
}

/// The taints a node registers with: the claim's, plus the unregistered taint when they lack it.
fn registered_taints(taints: &[Taint]) -> Vec<Taint> {
    let mut all = taints.to_vec();
    if !taints.iter().any(|t| t.key == UNREGISTERED_TAINT_KEY) {
        all.push(Taint {
            key: UNREGISTERED_TAINT_KEY.to_owned(),
            value: None,
            effect: TaintEffect::NoExecute,
            time_added: None,
        });
    }
    all
}

/// A MIME multi-part document: the class's own `custom` part first (with the content type `custom_type`
/// gives it), then kerf's `body` as `body_type`.
fn mime(
    custom: Option<&str>,
    custom_type: impl Fn(&str) -> &'static str,
    body_type: &str,
    body: &str,
) -> String {
    let mut out =
        format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\n");
    if let Some(custom) = custom.filter(|c| !c.trim().is_empty()) {
        out.push_str(&format!(
            "--{BOUNDARY}\nContent-Type: {}\n\n{}\n",
            custom_type(custom),
            custom.trim_end()
        ));
    }
    out.push_str(&format!(
        "--{BOUNDARY}\nContent-Type: {body_type}\n\n{}\n",
        body.trim_end()
    ));
    out.push_str(&format!("--{BOUNDARY}--\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: serde_json::Value) -> EC2NodeClassSpec {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_family_comes_from_ami_family_or_else_the_alias() {
        let aliased = spec(json!({"amiSelectorTerms": [{"alias": "bottlerocket@latest"}]}));
        assert_eq!(family(&aliased), Some(AmiFamily::Bottlerocket));
        let explicit = spec(json!({"amiFamily": "AL2", "amiSelectorTerms": [{"id": "ami-1"}]}));
        assert_eq!(family(&explicit), Some(AmiFamily::Al2));
        assert_eq!(
            family(&spec(json!({"amiSelectorTerms": [{"id": "ami-1"}]}))),
            None
        );
    }

    #[test]
    fn windows_and_unknown_families_are_refused_with_what_to_write_instead() {
        let cluster = ClusterInfo {
            name: "demo".into(),
            endpoint: "https://k".into(),
            ca_bundle: None,
            cidr: None,
            dns_ip: None,
        };
        let labels = BTreeMap::new();
        let node = NodeSettings {
            labels: &labels,
            taints: &[],
            kubelet: None,
            custom: None,
            raid0: false,
        };
        let windows = spec(json!({"amiSelectorTerms": [{"alias": "windows2022@latest"}]}));
        let error = render(&windows, &cluster, &node).unwrap_err().to_string();
        assert!(error.contains("not supported"), "{error}");
        let none = spec(json!({"amiSelectorTerms": [{"id": "ami-1"}]}));
        let error = render(&none, &cluster, &node).unwrap_err().to_string();
        assert!(error.contains("set amiFamily"), "{error}");
        let custom = spec(json!({"amiFamily": "Custom", "userData": "#!/bin/sh\nexit 0"}));
        let node = NodeSettings {
            custom: Some("#!/bin/sh\nexit 0"),
            raid0: false,
            ..node
        };
        assert_eq!(
            render(&custom, &cluster, &node).unwrap(),
            "#!/bin/sh\nexit 0"
        );
    }
}
