//! `NodePool` (karpenter.sh/v1): every field of the v1 spec and status.
//!
//! Every field is optional in Rust so that validation can tell "absent" from "present but empty"
//! (api-rules.md §0, "Present"); the schema constraints the upstream CRD carries are attached with schemars
//! attributes and end up both in `kerf crds` and in the generic schema check.

use crate::operator::Operator;
use crate::schema::fragments;
use crate::validation::grammar::QUALIFIED_NAME_PATTERN;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Durations written `(<digits><s|m|h>)+` or `Never`.
pub const DURATION_OR_NEVER_PATTERN: &str = r"^(([0-9]+(s|m|h))+|Never)$";
/// Durations written `(<digits><s|m|h>)+`.
pub const DURATION_PATTERN: &str = r"^([0-9]+(s|m|h))+$";
/// A budget's `nodes`: a count or a percentage.
pub const BUDGET_NODES_PATTERN: &str = r"^((100|[0-9]{1,2})%|[0-9]+)$";
/// A budget's `duration`: minutes and/or hours.
pub const BUDGET_DURATION_PATTERN: &str = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$";
/// A budget's `schedule`, as loosely as upstream checks it (kerf parses it properly on top).
pub const BUDGET_SCHEDULE_PATTERN: &str =
    r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$";

/// NodePools launch nodes for pods that are unschedulable; one pool can describe many kinds of node.
// Every `printcolumn(type_ = …)` repeats an attribute name, which clippy mistakes for a duplicate.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    plural = "nodepools",
    category = "karpenter",
    status = "NodePoolStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.nodes"
    ),
    printcolumn(
        name = "NodeClass",
        type_ = "string",
        json_path = ".spec.template.spec.nodeClassRef.name"
    ),
    printcolumn(name = "Nodes", type_ = "string", json_path = ".status.nodes"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Weight",
        type_ = "integer",
        json_path = ".spec.weight",
        priority = 1
    ),
    printcolumn(
        name = "CPU",
        type_ = "string",
        json_path = ".status.resources.cpu",
        priority = 1
    ),
    printcolumn(
        name = "Memory",
        type_ = "string",
        json_path = ".status.resources.memory",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolSpec {
    /// The template of the NodeClaims this pool launches; they are often narrowed further by the pods.
    pub template: NodeClaimTemplate,
    /// How and when nodes of this pool may be disrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {"consolidateAfter": "0s"}))]
    pub disruption: Option<Disruption>,
    /// Bounds on the total capacity this pool may provision (cpu, memory, nodes, extended resources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "fragments::quantity_map")]
    pub limits: Option<BTreeMap<String, IntOrString>>,
    /// Priority among pools: higher weights are tried first; absent ranks as 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
    /// Static pools (alpha): keep exactly this many nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    pub spec: NodeClaimTemplateSpec,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    /// Labels copied onto every NodeClaim and Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "fragments::label_map")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations copied onto every NodeClaim and Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "fragments::string_map")]
    pub annotations: Option<BTreeMap<String, String>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    /// Constraints every node of the pool satisfies, intersected with each pod's.
    #[schemars(length(max = 100))]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// Taints applied to every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taints: Option<Vec<Taint>>,
    /// Taints present at start-up, removed by a DaemonSet once the node is ready; pods need not tolerate them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_taints: Option<Vec<Taint>>,
    /// The provider-specific node class (an EC2NodeClass).
    pub node_class_ref: NodeClassReference,
    /// How long a node lives before it is replaced, or `Never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_OR_NEVER_PATTERN), extend("default" = "720h"))]
    pub expire_after: Option<String>,
    /// How long a draining node may block on PDBs and do-not-disrupt pods before it is forcibly terminated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub termination_grace_period: Option<String>,
}

/// A node selector requirement, with the minimum number of distinct values the launch must keep open.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirementWithMinValues {
    #[schemars(length(max = 316), regex(pattern = QUALIFIED_NAME_PATTERN))]
    pub key: String,
    pub operator: Operator,
    /// Label values; upstream's CRD attaches their pattern to the list, where the apiserver never applies it,
    /// so they are checked as label values by the rules instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50))]
    pub min_values: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    #[schemars(length(min = 1), regex(pattern = QUALIFIED_NAME_PATTERN))]
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = QUALIFIED_NAME_PATTERN))]
    pub value: Option<String>,
    pub effect: TaintEffect,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "fragments::date_time")]
    pub time_added: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassReference {
    #[schemars(regex(pattern = r"^[^/]*$"))]
    pub group: String,
    pub kind: String,
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ConsolidationPolicy {
    WhenEmpty,
    WhenEmptyOrUnderutilized,
    Balanced,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// How long a node must be empty or underutilized before it is consolidated, or `Never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_OR_NEVER_PATTERN))]
    pub consolidate_after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "WhenEmptyOrUnderutilized"))]
    pub consolidation_policy: Option<ConsolidationPolicy>,
    /// The most nodes that may be disrupting at once; the most restrictive active budget wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50), extend("default" = [{"nodes": "10%"}]))]
    pub budgets: Option<Vec<Budget>>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum DisruptionReason {
    Underutilized,
    Empty,
    Drifted,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// A count (`5`) or a percentage of the pool's nodes (`10%`); `0` blocks disruption.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = BUDGET_NODES_PATTERN), extend("default" = "10%"))]
    pub nodes: Option<String>,
    /// Cron schedule (UTC) at which the budget becomes active for `duration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = BUDGET_SCHEDULE_PATTERN))]
    pub schedule: Option<String>,
    /// How long the budget stays active after each schedule hit (minutes and hours only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = BUDGET_DURATION_PATTERN))]
    pub duration: Option<String>,
    /// The disruption reasons the budget applies to; absent means all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50))]
    pub reasons: Option<Vec<DisruptionReason>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// Capacity of the pool's nodes, summed (`nodes` counts them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "fragments::quantity_map")]
    pub resources: Option<BTreeMap<String, IntOrString>>,
    /// Nodes the pool currently owns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<i64>,
    /// The generation of the pool's NodeClass this status reflects: when the class changes, the
    /// `NodeRegistrationHealthy` condition starts over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<crate::condition::Condition>>,
}
