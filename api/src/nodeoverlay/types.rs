//! `NodeOverlay` (karpenter.sh/v1alpha1): a price, a price adjustment or extra extended resources applied to the
//! instance types that match its requirements, in the scheduling simulation only (Karpenter's
//! `pkg/apis/v1alpha1/nodeoverlay.go` at v1.14.1; `designs/node-overlay.md`).

use crate::condition::Condition;
use crate::operator::Operator;
use crate::schema::fragments;
use crate::validation::grammar::QUALIFIED_NAME_PATTERN;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `spec.price`: an absolute price, unsigned.
pub const PRICE_PATTERN: &str = r"^\d+(\.\d+)?$";
/// `spec.priceAdjustment`: a signed amount, or a signed percentage no lower than -100%.
pub const PRICE_ADJUSTMENT_PATTERN: &str =
    r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$";
/// The most requirements one overlay may list.
pub const MAX_REQUIREMENTS: usize = 100;

/// NodeOverlays change what the scheduler believes of matching instance types: their price, or extended
/// resources they offer. Higher weights win; equal weights that overlap conflict.
// Every `printcolumn(type_ = …)` repeats an attribute name, which clippy mistakes for a duplicate.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1alpha1",
    kind = "NodeOverlay",
    plural = "nodeoverlays",
    shortname = "overlays",
    category = "karpenter",
    status = "NodeOverlayStatus",
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
    )
)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlaySpec {
    /// Which instance types (and offerings) the overlay applies to: well-known labels, `karpenter.sh/nodepool`,
    /// and the custom labels of NodePool templates.
    #[schemars(length(max = 100))]
    pub requirements: Vec<OverlayRequirement>,
    /// A change to the price: `+0.5`, `-1.2`, `+10%`, `-15%` (not below -100%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = PRICE_ADJUSTMENT_PATTERN))]
    pub price_adjustment: Option<String>,
    /// The price itself, replacing the cloud's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = PRICE_PATTERN))]
    pub price: Option<String>,
    /// Extended resources added to the instance types' capacity; never cpu, memory, ephemeral-storage or pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "fragments::quantity_map")]
    pub capacity: Option<BTreeMap<String, IntOrString>>,
    /// Precedence among overlays (1–10000; absent counts as 0): higher weights win, equal weights that set the
    /// same thing on the same instance type conflict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub weight: Option<i32>,
}

/// A requirement of an overlay: a node selector requirement without `minValues`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverlayRequirement {
    #[schemars(length(max = 316), regex(pattern = QUALIFIED_NAME_PATTERN))]
    pub key: String,
    pub operator: Operator,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
}

/// What the controller found of an overlay.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlayStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

impl NodeOverlay {
    /// The weight overlays are ordered by: absent is 0.
    pub fn weight(&self) -> i32 {
        self.spec.weight.unwrap_or(0)
    }

    /// `spec.price`, else `spec.priceAdjustment`: the one price change the overlay makes, if any.
    pub fn price_change(&self) -> Option<&str> {
        self.spec
            .price
            .as_deref()
            .or(self.spec.price_adjustment.as_deref())
    }
}
