//! Bottlerocket: TOML settings. kerf's `settings.kubernetes` keys are merged into the class's own `userData`
//! TOML: the cluster keys are kerf's, labels and taints are added to the user's (kerf's win on the same key),
//! every other user setting is kept.

use super::{registered_taints, ClusterInfo, NodeSettings};
use kerf_core::cloud::CloudError;
use std::collections::BTreeMap;
use toml_edit::{value, Array, DocumentMut, Item, Table};

pub fn bottlerocket(cluster: &ClusterInfo, node: &NodeSettings<'_>) -> Result<String, CloudError> {
    let mut doc: DocumentMut = node.custom.unwrap_or_default().parse().map_err(|e| {
        CloudError::InvalidRequest(format!(
            "userData is not valid TOML, which Bottlerocket needs: {e}"
        ))
    })?;
    let settings = table(doc.as_table_mut(), "settings")?;
    // kerf's nodes join no Auto Scaling group: waiting for one would hold the kubelet back forever.
    if let Some(autoscaling) = settings.get_mut("autoscaling").and_then(Item::as_table_mut) {
        if autoscaling.contains_key("should-wait") {
            autoscaling["should-wait"] = value(false);
        }
    }
    if node.raid0 {
        // The instance-store disks as one array, bound where containerd, the kubelet and pod logs write.
        let commands = table(
            table(settings, "bootstrap-commands")?,
            "000-mount-instance-storage",
        )?;
        let command = |words: &[&str]| Array::from_iter(words.iter().copied());
        commands["commands"] = value(Array::from_iter([
            command(&["apiclient", "ephemeral-storage", "init"]),
            command(&[
                "apiclient",
                "ephemeral-storage",
                "bind",
                "--dirs",
                "/var/lib/containerd",
                "/var/lib/kubelet",
                "/var/log/pods",
            ]),
        ]));
        commands["essential"] = value(true);
        commands["mode"] = value("always");
    }
    let kubernetes = table(settings, "kubernetes")?;
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
    if let Some(dns) = super::cluster_dns(cluster, node) {
        kubernetes["cluster-dns-ip"] = value(dns);
    }
    if let Some(k) = node.kubelet {
        if let Some(max_pods) = k.max_pods {
            kubernetes["max-pods"] = value(i64::from(max_pods));
        }
        for (name, values) in [
            ("kube-reserved", &k.kube_reserved),
            ("system-reserved", &k.system_reserved),
            ("eviction-hard", &k.eviction_hard),
            ("eviction-soft", &k.eviction_soft),
            ("eviction-soft-grace-period", &k.eviction_soft_grace_period),
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
            // Strings, as Karpenter writes them.
            if let Some(percent) = percent {
                kubernetes[name] = value(percent.to_string());
            }
        }
        if let Some(seconds) = k.eviction_max_pod_grace_period {
            kubernetes["eviction-max-pod-grace-period"] = value(i64::from(seconds));
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
    use kerf_core::api::ec2nodeclass::KubeletConfiguration;
    use serde_json::json;

    fn cluster() -> ClusterInfo {
        ClusterInfo {
            name: "demo".into(),
            endpoint: "https://k:443".into(),
            ca_bundle: Some("Q0E=".into()),
            cidr: None,
            dns_ip: None,
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
                raid0: false,
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
            raid0: false,
        };
        let error = bottlerocket(&cluster(), &node).unwrap_err().to_string();
        assert!(error.contains("not valid TOML"), "{error}");
    }

    /// Karpenter's Bottlerocket bootstrap: soft eviction thresholds and their grace periods, the pod grace period,
    /// image GC thresholds as strings, `autoscaling.should-wait` turned off, and for `instanceStorePolicy: RAID0`
    /// the essential bootstrap command that makes the instance store the ephemeral storage.
    #[test]
    fn eviction_settings_raid0_and_should_wait_are_karpenters() {
        let labels = BTreeMap::new();
        let kubelet: KubeletConfiguration = serde_json::from_value(json!({
            "evictionSoft": {"memory.available": "500Mi"},
            "evictionSoftGracePeriod": {"memory.available": "1m"},
            "evictionMaxPodGracePeriod": 60,
            "imageGCHighThresholdPercent": 85,
            "imageGCLowThresholdPercent": 80,
        }))
        .unwrap();
        let out = bottlerocket(
            &cluster(),
            &NodeSettings {
                labels: &labels,
                taints: &[],
                kubelet: Some(&kubelet),
                custom: Some("[settings.autoscaling]\nshould-wait = true\n"),
                raid0: true,
            },
        )
        .unwrap();
        let doc: toml_edit::DocumentMut = out.parse().unwrap();
        let k = &doc["settings"]["kubernetes"];
        assert_eq!(
            k["eviction-soft"]["memory.available"].as_str(),
            Some("500Mi")
        );
        assert_eq!(
            k["eviction-soft-grace-period"]["memory.available"].as_str(),
            Some("1m")
        );
        assert_eq!(k["eviction-max-pod-grace-period"].as_integer(), Some(60));
        assert_eq!(k["image-gc-high-threshold-percent"].as_str(), Some("85"));
        assert_eq!(k["image-gc-low-threshold-percent"].as_str(), Some("80"));
        assert_eq!(
            doc["settings"]["autoscaling"]["should-wait"].as_bool(),
            Some(false)
        );
        let mount = &doc["settings"]["bootstrap-commands"]["000-mount-instance-storage"];
        assert_eq!(mount["essential"].as_bool(), Some(true));
        assert_eq!(mount["mode"].as_str(), Some("always"));
        let commands: Vec<Vec<&str>> = mount["commands"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                c.as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|w| w.as_str())
                    .collect()
            })
            .collect();
        assert_eq!(commands[0], ["apiclient", "ephemeral-storage", "init"]);
        assert_eq!(
            commands[1],
            [
                "apiclient",
                "ephemeral-storage",
                "bind",
                "--dirs",
                "/var/lib/containerd",
                "/var/lib/kubelet",
                "/var/log/pods"
            ]
        );
    }
}
