//! The EC2NodeClass's `kubelet` block (upstream's `KubeletConfiguration` subset) and the OpenAPI constraints of
//! its maps; the rules across its fields are in `validation/kubelet.rs`.

use crate::schema::fragments;
use crate::validation::grammar::QUANTITY_PATTERN;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A kubelet eviction threshold: a percentage with at most two decimals, the empty string, or a quantity
/// (upstream's pattern, whose `||` is what admits the empty string).
pub const EVICTION_THRESHOLD_PATTERN: &str = r"^((\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?)%||(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?)$";

/// Kubelet settings; a subset of the upstream `KubeletConfiguration`, with its names.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeletConfiguration {
    /// Cluster DNS server addresses.
    #[serde(
        rename = "clusterDNS",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_dns: Option<Vec<String>>,
    /// Overrides the maximum number of pods per node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_pods: Option<i32>,
    /// Pods per CPU core; `maxPods` still caps the total.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub pods_per_core: Option<i32>,
    /// Resources reserved for the OS (`cpu`, `memory`, `ephemeral-storage`, `pid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_strings")]
    pub system_reserved: Option<BTreeMap<String, String>>,
    /// Resources reserved for Kubernetes components (`cpu`, `memory`, `ephemeral-storage`, `pid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_strings")]
    pub kube_reserved: Option<BTreeMap<String, String>>,
    /// Hard eviction thresholds by signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "eviction_thresholds")]
    pub eviction_hard: Option<BTreeMap<String, String>>,
    /// Soft eviction thresholds by signal; each needs a grace period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "eviction_thresholds")]
    pub eviction_soft: Option<BTreeMap<String, String>>,
    /// Grace periods of the soft eviction thresholds, by signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "fragments::string_map")]
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    /// The longest grace period (seconds) given to pods evicted for a soft threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    /// Disk usage (percent) above which image garbage collection always runs.
    #[serde(
        rename = "imageGCHighThresholdPercent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0, max = 100))]
    pub image_gc_high_threshold_percent: Option<i32>,
    /// Disk usage (percent) image garbage collection frees down to.
    #[serde(
        rename = "imageGCLowThresholdPercent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0, max = 100))]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// Whether CPU CFS quotas are enforced for containers with CPU limits.
    #[serde(
        rename = "cpuCFSQuota",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_cfs_quota: Option<bool>,
}

/// Kubelet reservations: resource names to quantity strings.
fn quantity_strings(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object", "additionalProperties": {"type": "string", "pattern": QUANTITY_PATTERN}})
}

/// Kubelet eviction thresholds: signals to percentages or quantities.
fn eviction_thresholds(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {"type": "string", "pattern": EVICTION_THRESHOLD_PATTERN},
    })
}
