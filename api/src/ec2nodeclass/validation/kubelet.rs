//! `kubelet` (api-rules.md §3.7): the resources `kubeReserved` and `systemReserved` may name, the eviction
//! signals the eviction maps may name, soft thresholds paired with their grace periods, and the image GC
//! thresholds in order.

use super::super::kubelet::KubeletConfiguration;
use super::map_rule;
use crate::validation::{FieldError, FieldPath, Findings, SchemaType};
use std::collections::{BTreeMap, BTreeSet};

pub(super) const RESERVED_RESOURCES: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pid"];
const EVICTION_SIGNALS: [&str; 6] = [
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];

/// A list the way Karpenter's messages print it: `['a','b']`.
pub(super) fn quoted_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|item| format!("'{item}'")).collect();
    format!("[{}]", quoted.join(","))
}

pub(super) fn validate_kubelet(
    kubelet: &KubeletConfiguration,
    path: &FieldPath,
    findings: &mut Findings,
) {
    let reserved = [
        ("systemReserved", &kubelet.system_reserved),
        ("kubeReserved", &kubelet.kube_reserved),
    ];
    for (field, map) in reserved {
        let Some(map) = map else { continue };
        let map_path = path.child(field);
        let keys = format!(
            "valid keys for {field} are {}",
            quoted_list(&RESERVED_RESOURCES)
        );
        map_rule(
            map,
            &map_path,
            &keys,
            |key, _| !RESERVED_RESOURCES.contains(&key),
            findings,
        );
        let negative = format!("{field} value cannot be a negative resource quantity");
        map_rule(
            map,
            &map_path,
            &negative,
            |_, value| value.starts_with('-'),
            findings,
        );
    }
    let eviction = [
        ("evictionHard", &kubelet.eviction_hard),
        ("evictionSoft", &kubelet.eviction_soft),
        (
            "evictionSoftGracePeriod",
            &kubelet.eviction_soft_grace_period,
        ),
    ];
    for (field, map) in eviction {
        let Some(map) = map else { continue };
        let keys = format!(
            "valid keys for {field} are {}",
            quoted_list(&EVICTION_SIGNALS)
        );
        map_rule(
            map,
            &path.child(field),
            &keys,
            |key, _| !EVICTION_SIGNALS.contains(&key),
            findings,
        );
    }
    validate_soft_eviction_pairs(kubelet, path, findings);
    if let (Some(high), Some(low)) = (
        kubelet.image_gc_high_threshold_percent,
        kubelet.image_gc_low_threshold_percent,
    ) {
        if high <= low {
            let message =
                "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent";
            findings.error(FieldError::rule(path, SchemaType::Object, message));
        }
    }
}

/// Every soft threshold has a grace period and every grace period a soft threshold. 4c: when one of the two maps
/// is absent, upstream's CEL errors generically; kerf treats the absent map as empty and gives the messages.
fn validate_soft_eviction_pairs(
    kubelet: &KubeletConfiguration,
    path: &FieldPath,
    findings: &mut Findings,
) {
    let keys = |map: &Option<BTreeMap<String, String>>| -> BTreeSet<String> {
        map.iter().flat_map(BTreeMap::keys).cloned().collect()
    };
    let (soft, grace) = (
        keys(&kubelet.eviction_soft),
        keys(&kubelet.eviction_soft_grace_period),
    );
    if !soft.is_subset(&grace) {
        let message = "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod";
        findings.error(FieldError::rule(path, SchemaType::Object, message));
    }
    if !grace.is_subset(&soft) {
        let message = "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft";
        findings.error(FieldError::rule(path, SchemaType::Object, message));
    }
}
