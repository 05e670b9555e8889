//! Bottlerocket: TOML settings. kerf's `settings.kubernetes` keys are merged into the class's own `userData`
//! TOML: the cluster keys are kerf's, labels and taints are added to the user's (kerf's win on the same key),
//! every other user setting is kept.

use super::{registered_taints, ClusterInfo, NodeSettings};
use kerf::cloud::CloudError;
use std::collections::BTreeMap;
use toml_edit::{value, Array, DocumentMut, Item, Table};

pub fn bottlerocket(cluster: &ClusterInfo, node: &NodeSettings<'_>) -> Result<String, CloudError> {
    let mut doc: DocumentMut = node.custom.unwrap_or_default().parse().map_err(|e| {
        CloudError::InvalidRequest(format!(
            "userData is not valid TOML, which Bottlerocket needs: {e}"
        ))
    })?;
    let kubernetes = table(table(doc.as_table_mut(), "settings")?, "kubernetes")?;
    kubernetes["cluster-name"] = value(&cluster.name);
    kubernetes["api-server"] = value(&cluster.endpoint);
    if let Some(ca) = &cluster.ca_bundle {
        kubernetes["cluster-certificate"] = value(ca);
    }
    let labels = table(kubernetes, "node-labels")?;
    for (k, v) in node.labels {
        labels[k.as_str()] = value(v);
    }
    let mut taints: BTreeMap<&str, Array> = BTreeMap::new();
    let registered = registered_taints(node.taints);
    for t in &registered {
        let entry = format!(
            "{}:{}",
            t.value.as_deref().unwrap_or_default(),
            t.effect.as_str()
        );
        taints.entry(t.key.as_str()).or_default().push(entry);
    }
    let taint_table = table(kubernetes, "node-taints")?;
    for (key, values) in taints {
        taint_table[key] = value(values);
    }
    if let Some(k) = node.kubelet {
        if let Some(dns) = k.cluster_dns.as_ref().and_then(|d| d.first()) {
            kubernetes["cluster-dns-ip"] = value(dns);
        }
        if let Some(max_pods) = k.max_pods {
            kubernetes["max-pods"] = value(i64::from(max_pods));
        }
        for (name, values) in [
            ("kube-reserved", &k.kube_reserved),
            ("system-reserved", &k.system_reserved),
            ("eviction-hard", &k.eviction_hard),
        ] {
            if let Some(values) = values.as_ref().filter(|m| !m.is_empty()) {
                let t = table(kubernetes, name)?;
                for (key, v) in values {
                    t[key.as_str()] = value(v);
                }
            }
        }
        for (name, percent) in [
            (
                "image-gc-high-threshold-percent",
                k.image_gc_high_threshold_percent,
            ),
            (
                "image-gc-low-threshold-percent",
                k.image_gc_low_threshold_percent,
            ),
        ] {
            if let Some(percent) = percent {
                kubernetes[name] = value(i64::from(percent));
            }
        }
        if let Some(quota) = k.cpu_cfs_quota {
            kubernetes["cpu-cfs-quota-enforced"] = value(quota);
        }
    }
    Ok(doc.to_string())
}

/// The table `key` of `parent`, created when missing; an error when the user's TOML has a non-table there.
fn table<'a>(parent: &'a mut Table, key: &str) -> Result<&'a mut Table, CloudError> {
    let item = parent.entry(key).or_insert_with(|| {
        let mut t = Table::new();
        t.set_implicit(true);
        Item::Table(t)
    });
    item.as_table_mut().ok_or_else(|| {
        CloudError::InvalidRequest(format!(
            "userData: `{key}` must be a TOML table for Bottlerocket"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf::api::ec2nodeclass::KubeletConfiguration;
    use serde_json::json;

    fn cluster() -> ClusterInfo {
        ClusterInfo {
            name: "demo".into(),
            endpoint: "https://k:443".into(),
            ca_bundle: Some("Q0E=".into()),
            cidr: None,
        }
    }

    #[test]
    fn kerf_settings_merge_into_the_users_toml() {
        let labels = BTreeMap::from([
            ("karpenter.sh/nodepool".to_owned(), "default".to_owned()),
            ("team".to_owned(), "kerf".to_owned()),
        ]);
        let kubelet: KubeletConfiguration =
            serde_json::from_value(json!({"maxPods": 110, "kubeReserved": {"cpu": "100m"}}))
                .unwrap();
        let custom = "[settings.kubernetes]\ncluster-name = 'wrong'\n\n[settings.kubernetes.node-labels]\nteam = 'user'\nowner = 'me'\n\n[settings.host-containers.admin]\nenabled = true\n";
        let out = bottlerocket(
            &cluster(),
            &NodeSettings {
                labels: &labels,
                taints: &[],
                kubelet: Some(&kubelet),
                custom: Some(custom),
            },
        )
        .unwrap();
        let doc: toml_edit::DocumentMut = out.parse().unwrap();
        let k = &doc["settings"]["kubernetes"];
        assert_eq!(k["cluster-name"].as_str(), Some("demo"));
        assert_eq!(k["api-server"].as_str(), Some("https://k:443"));
        assert_eq!(k["cluster-certificate"].as_str(), Some("Q0E="));
        assert_eq!(k["max-pods"].as_integer(), Some(110));
        assert_eq!(k["kube-reserved"]["cpu"].as_str(), Some("100m"));
        assert_eq!(k["node-labels"]["team"].as_str(), Some("kerf"));
        assert_eq!(k["node-labels"]["owner"].as_str(), Some("me"));
        let unregistered = k["node-taints"]["karpenter.sh/unregistered"]
            .as_array()
            .unwrap();
        assert_eq!(
            unregistered.get(0).and_then(|v| v.as_str()),
            Some(":NoExecute")
        );
        assert_eq!(
            doc["settings"]["host-containers"]["admin"]["enabled"].as_bool(),
            Some(true)
        );
    }

    #[test]
    fn user_data_that_is_not_toml_is_refused() {
        let labels = BTreeMap::new();
        let node = NodeSettings {
            labels: &labels,
            taints: &[],
            kubelet: None,
            custom: Some("#!/bin/bash\necho hi"),
        };
        let error = bottlerocket(&cluster(), &node).unwrap_err().to_string();
        assert!(error.contains("not valid TOML"), "{error}");
    }
}
