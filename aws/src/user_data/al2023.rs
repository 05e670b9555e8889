//! AL2023: a MIME multi-part document whose `application/node.eks.aws` part is a nodeadm `NodeConfig`
//! carrying the cluster, the kubelet settings, the labels (`--node-labels`) and the taints
//! (`registerWithTaints`). The EC2NodeClass's own `userData` comes first as its own part, as Karpenter merges
//! it.

use std::collections::BTreeMap;

use super::{mime, registered_taints, ClusterInfo, NodeSettings, BOUNDARY};
use kerf_core::api::nodepool::Taint;
use serde_json::{json, Map, Value};

/// The user data (plain text; EC2 wants it base64-encoded).
pub fn al2023(cluster: &ClusterInfo, node: &NodeSettings<'_>) -> String {
    let custom_type = |custom: &str| {
        if custom.contains("node.eks.aws/") {
            "application/node.eks.aws"
        } else {
            "text/x-shellscript; charset=\"us-ascii\""
        }
    };
    let config = serde_yaml::to_string(&node_config(cluster, node)).unwrap_or_default();
    mime(
        node.custom,
        custom_type,
        "application/node.eks.aws",
        &config,
    )
}

/// The nodeadm `NodeConfig`.
pub fn node_config(cluster: &ClusterInfo, node: &NodeSettings<'_>) -> Value {
    let mut config = Map::new();
    let taints: Vec<Value> = registered_taints(node.taints)
        .iter()
        .map(|t| json!({"key": t.key, "value": t.value.clone().unwrap_or_default(), "effect": t.effect.as_str()}))
        .collect();
    config.insert("registerWithTaints".into(), Value::Array(taints));
    if let Some(kubelet) = node.kubelet {
        if let Ok(Value::Object(settings)) = serde_json::to_value(kubelet) {
            config.extend(settings.into_iter().filter(|(_, v)| !v.is_null()));
        }
    }
    if !config.contains_key("clusterDNS") {
        if let Some(dns) = super::cluster_dns(cluster, node) {
            config.insert("clusterDNS".into(), json!([dns]));
        }
    }
    let labels: Vec<String> = node
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let mut cluster_spec = Map::new();
    cluster_spec.insert("name".into(), json!(cluster.name));
    cluster_spec.insert("apiServerEndpoint".into(), json!(cluster.endpoint));
    if let Some(ca) = &cluster.ca_bundle {
        cluster_spec.insert("certificateAuthority".into(), json!(ca));
    }
    if let Some(cidr) = &cluster.cidr {
        cluster_spec.insert("cidr".into(), json!(cidr));
    }
    let mut spec = json!({
        "cluster": cluster_spec,
        "kubelet": {
            "config": config,
            "flags": [format!("--node-labels={}", labels.join(","))],
        }
    });
    if node.raid0 {
        spec["instance"] = json!({"localStorage": {"strategy": "RAID0"}});
    }
    json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": spec,
    })
}

/// Reads the labels and taints back out of user data written by [`al2023`]: what a kubelet started with it
/// registers. `None` when the document holds no NodeConfig.
pub fn registration(user_data: &str) -> Option<(BTreeMap<String, String>, Vec<Taint>)> {
    let part = user_data
        .split(&format!("--{BOUNDARY}"))
        .filter(|p| p.contains("Content-Type: application/node.eks.aws"))
        .find(|p| p.contains("kind: NodeConfig"))?;
    let yaml = part.split_once("\n\n")?.1;
    let config: Value = serde_yaml::from_str(yaml).ok()?;
    let kubelet = &config["spec"]["kubelet"];
    let mut labels = BTreeMap::new();
    for flag in kubelet["flags"].as_array().into_iter().flatten() {
        if let Some(list) = flag.as_str().and_then(|f| f.strip_prefix("--node-labels=")) {
            for pair in list.split(',').filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once('=')?;
                labels.insert(k.to_owned(), v.to_owned());
            }
        }
    }
    let taints = serde_json::from_value(kubelet["config"]["registerWithTaints"].clone()).ok()?;
    Some((labels, taints))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_core::api::ec2nodeclass::KubeletConfiguration;
    use kerf_core::api::nodepool::TaintEffect;

    fn cluster() -> ClusterInfo {
        ClusterInfo {
            name: "demo".into(),
            endpoint: "https://127.0.0.1:6443".into(),
            ca_bundle: Some("Q0E=".into()),
            cidr: Some("10.100.0.0/16".into()),
            dns_ip: None,
        }
    }

    fn taint(key: &str, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: Some("v".into()),
            effect,
            time_added: None,
        }
    }

    #[test]
    fn the_node_config_carries_cluster_labels_taints_and_kubelet_settings() {
        let labels = BTreeMap::from([
            ("karpenter.sh/nodepool".to_string(), "default".to_string()),
            ("team".to_string(), "a".to_string()),
        ]);
        let taints = [taint("dedicated", TaintEffect::NoSchedule)];
        let kubelet: KubeletConfiguration =
            serde_json::from_value(json!({"maxPods": 42, "clusterDNS": ["10.0.0.10"]})).unwrap();
        let data = al2023(
            &cluster(),
            &NodeSettings {
                labels: &labels,
                taints: &taints,
                kubelet: Some(&kubelet),
                custom: Some("#!/bin/bash\necho hi"),
                raid0: false,
            },
        );
        assert!(
            data.starts_with("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"")
        );
        assert!(data.contains("Content-Type: text/x-shellscript"));
        assert!(data.ends_with("--//--\n"));
        assert!(data.contains("maxPods: 42"));
        assert!(!data.contains("localStorage"), "no RAID0 unless asked");
        // instanceStorePolicy RAID0: nodeadm's local storage strategy (Karpenter's nodeadm bootstrap).
        let raid0 = node_config(
            &cluster(),
            &NodeSettings {
                labels: &labels,
                taints: &taints,
                kubelet: None,
                custom: None,
                raid0: true,
            },
        );
        assert_eq!(
            raid0["spec"]["instance"]["localStorage"]["strategy"],
            "RAID0"
        );
        assert!(raid0["spec"]["kubelet"]["config"]
            .get("clusterDNS")
            .is_none());
        // Without the class's clusterDNS, the cluster's kube-dns address (Karpenter's default).
        let with_dns = ClusterInfo {
            dns_ip: Some("10.100.0.10".into()),
            ..cluster()
        };
        let defaulted = node_config(
            &with_dns,
            &NodeSettings {
                labels: &labels,
                taints: &taints,
                kubelet: None,
                custom: None,
                raid0: false,
            },
        );
        assert_eq!(
            defaulted["spec"]["kubelet"]["config"]["clusterDNS"],
            json!(["10.100.0.10"])
        );
        // The class's own wins.
        let own = node_config(
            &with_dns,
            &NodeSettings {
                labels: &labels,
                taints: &taints,
                kubelet: Some(&kubelet),
                custom: None,
                raid0: false,
            },
        );
        assert_eq!(
            own["spec"]["kubelet"]["config"]["clusterDNS"],
            json!(["10.0.0.10"])
        );
        assert!(data.contains("apiServerEndpoint: https://127.0.0.1:6443"));
        let (read_labels, read_taints) = registration(&data).unwrap();
        assert_eq!(read_labels, labels);
        let keys: Vec<_> = read_taints
            .iter()
            .map(|t| (t.key.as_str(), t.effect))
            .collect();
        assert_eq!(
            keys,
            [
                ("dedicated", TaintEffect::NoSchedule),
                ("karpenter.sh/unregistered", TaintEffect::NoExecute)
            ]
        );
    }

    #[test]
    fn user_data_without_a_node_config_registers_nothing() {
        assert_eq!(registration("#!/bin/bash\necho hi"), None);
    }
}
