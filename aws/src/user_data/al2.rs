//! AL2: a MIME multi-part document whose shell part runs `/etc/eks/bootstrap.sh` with the cluster and the
//! kubelet's flags (labels, taints, reserved resources, eviction thresholds). The class's own `userData`
//! (a shell script) runs first, as Karpenter merges it.

use super::{mime, registered_taints, ClusterInfo, NodeSettings};
use std::collections::BTreeMap;

pub fn al2(cluster: &ClusterInfo, node: &NodeSettings<'_>) -> String {
    let mut bootstrap = format!(
        "/etc/eks/bootstrap.sh {} --apiserver-endpoint {}",
        quote(&cluster.name),
        quote(&cluster.endpoint)
    );
    if let Some(ca) = &cluster.ca_bundle {
        bootstrap.push_str(&format!(" --b64-cluster-ca {}", quote(ca)));
    }
    if let Some(cidr) = &cluster.cidr {
        bootstrap.push_str(&format!(" --service-ipv4-cidr {}", quote(cidr)));
    }
    let kubelet = node.kubelet;
    if let Some(dns) = super::cluster_dns(cluster, node) {
        bootstrap.push_str(&format!(" --dns-cluster-ip {}", quote(dns)));
    }
    if kubelet.and_then(|k| k.max_pods).is_some() {
        bootstrap.push_str(" --use-max-pods false");
    }
    if node.raid0 {
        bootstrap.push_str(" --local-disks raid0");
    }
    bootstrap.push_str(&format!(
        " --kubelet-extra-args {}",
        quote(&kubelet_flags(node).join(" "))
    ));
    let script = format!(
        "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n{bootstrap}\n"
    );
    let shell = "text/x-shellscript; charset=\"us-ascii\"";
    mime(node.custom, |_| shell, shell, &script)
}

/// The kubelet flags of `--kubelet-extra-args`.
fn kubelet_flags(node: &NodeSettings<'_>) -> Vec<String> {
    let labels: Vec<String> = node
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let taints: Vec<String> = registered_taints(node.taints)
        .iter()
        .map(|t| {
            format!(
                "{}={}:{}",
                t.key,
                t.value.as_deref().unwrap_or_default(),
                t.effect.as_str()
            )
        })
        .collect();
    let mut flags = vec![
        format!("--node-labels={}", labels.join(",")),
        format!("--register-with-taints={}", taints.join(",")),
    ];
    let Some(k) = node.kubelet else {
        return flags;
    };
    let map = |name: &str, values: &Option<BTreeMap<String, String>>, sep: &str| {
        values.as_ref().filter(|m| !m.is_empty()).map(|m| {
            let pairs: Vec<String> = m.iter().map(|(k, v)| format!("{k}{sep}{v}")).collect();
            format!("--{name}={}", pairs.join(","))
        })
    };
    let number = |name: &str, value: Option<i32>| value.map(|v| format!("--{name}={v}"));
    flags.extend(
        [
            number("max-pods", k.max_pods),
            number("pods-per-core", k.pods_per_core),
            map("kube-reserved", &k.kube_reserved, "="),
            map("system-reserved", &k.system_reserved, "="),
            map("eviction-hard", &k.eviction_hard, "<"),
            map("eviction-soft", &k.eviction_soft, "<"),
            map(
                "eviction-soft-grace-period",
                &k.eviction_soft_grace_period,
                "=",
            ),
            number(
                "eviction-max-pod-grace-period",
                k.eviction_max_pod_grace_period,
            ),
            number("image-gc-high-threshold", k.image_gc_high_threshold_percent),
            number("image-gc-low-threshold", k.image_gc_low_threshold_percent),
            k.cpu_cfs_quota.map(|q| format!("--cpu-cfs-quota={q}")),
        ]
        .into_iter()
        .flatten(),
    );
    flags
}

/// `text` in single quotes for the shell (labels, taints and quantities never hold one, but names might).
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_core::api::ec2nodeclass::KubeletConfiguration;
    use kerf_core::api::nodepool::{Taint, TaintEffect};
    use serde_json::json;

    #[test]
    fn bootstrap_gets_the_cluster_labels_taints_and_kubelet_settings() {
        let cluster = ClusterInfo {
            name: "demo".into(),
            endpoint: "https://k:443".into(),
            ca_bundle: Some("Q0E=".into()),
            cidr: Some("10.100.0.0/16".into()),
            dns_ip: None,
        };
        let labels = BTreeMap::from([("karpenter.sh/nodepool".to_owned(), "default".to_owned())]);
        let taints = [Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: TaintEffect::NoSchedule,
            time_added: None,
        }];
        let kubelet: KubeletConfiguration = serde_json::from_value(json!({
            "maxPods": 42, "clusterDNS": ["10.100.0.10"], "evictionHard": {"memory.available": "5%"},
            "kubeReserved": {"cpu": "100m", "memory": "1Gi"}
        }))
        .unwrap();
        let data = al2(
            &cluster,
            &NodeSettings {
                labels: &labels,
                taints: &taints,
                kubelet: Some(&kubelet),
                custom: Some("#!/bin/bash\necho first"),
                raid0: true,
            },
        );
        let custom_at = data.find("echo first").unwrap();
        let bootstrap_at = data.find("/etc/eks/bootstrap.sh 'demo'").unwrap();
        assert!(custom_at < bootstrap_at, "{data}");
        for expected in [
            "--apiserver-endpoint 'https://k:443' --b64-cluster-ca 'Q0E=' --service-ipv4-cidr '10.100.0.0/16'",
            "--dns-cluster-ip '10.100.0.10' --use-max-pods false --local-disks raid0",
            "--node-labels=karpenter.sh/nodepool=default",
            "--register-with-taints=dedicated=gpu:NoSchedule,karpenter.sh/unregistered=:NoExecute",
            "--max-pods=42",
            "--kube-reserved=cpu=100m,memory=1Gi",
            "--eviction-hard=memory.available<5%",
        ] {
            assert!(data.contains(expected), "missing {expected} in\n{data}");
        }
        assert!(data.ends_with("--//--\n"));
    }

    #[test]
    fn quotes_survive_the_shell() {
        assert_eq!(quote("it's"), r"'it'\''s'");
    }
}
