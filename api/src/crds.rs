//! The CustomResourceDefinitions kerf installs (`kerf crds`), and the compiled schemas the webhooks check
//! objects against, both generated from the Rust types so they cannot drift apart.

use crate::capacitybuffer::CapacityBuffer;
use crate::cel_rules;
use crate::ec2nodeclass::EC2NodeClass;
use crate::nodeclaim::NodeClaim;
use crate::nodeoverlay::NodeOverlay;
use crate::nodepool::NodePool;
use crate::schema::{CompiledSchema, SchemaError};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::CustomResourceExt;
use serde_json::{json, Value};
use std::sync::OnceLock;

/// Whether the CRDs carry Karpenter's CEL rules (`x-kubernetes-validations`).
///
/// The chart's CRDs do not: an apiserver before 1.25 does not know the field, and installing them there fails
/// (`kubectl apply` validates against the server's OpenAPI, Helm 4 and `--server-side` apply refuse "field not
/// declared in schema"), while the webhook checks every rule anyway. `kerf crds --cel-rules` prints them with the
/// rules for a cluster that evaluates CEL, as a second line of defence when the webhook is unavailable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CelRules {
    Without,
    With,
}

/// All of kerf's CRDs as the chart installs them (no CEL rules), in the order `kerf crds` prints them.
pub fn all() -> Vec<CustomResourceDefinition> {
    built(CelRules::Without)
}

/// All of kerf's CRDs with Karpenter's CEL rules (`kerf crds --cel-rules`).
pub fn with_cel_rules() -> Vec<CustomResourceDefinition> {
    built(CelRules::With)
}

fn built(cel: CelRules) -> Vec<CustomResourceDefinition> {
    vec![
        structural(NodePool::crd(), cel),
        structural(NodeClaim::crd(), cel),
        structural(EC2NodeClass::crd(), cel),
        structural(NodeOverlay::crd(), cel),
        structural(CapacityBuffer::crd(), cel),
    ]
}

/// `kerf crds`: every CRD as multi-document YAML.
pub fn to_yaml(cel: CelRules) -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for crd in built(cel) {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd)?);
    }
    Ok(out)
}

/// Brings kube-derive's schema to what Karpenter's CRDs say: no `nullable` (the apiserver prunes nulls),
/// integral bounds, int-or-string quantities spelled the way `controller-gen` spells them, and with
/// [`CelRules::With`] Karpenter's CEL rules (`cel_rules`).
fn structural(mut crd: CustomResourceDefinition, cel: CelRules) -> CustomResourceDefinition {
    let kind = crd.spec.names.kind.clone();
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        let Ok(mut value) = serde_json::to_value(&*schema) else {
            continue;
        };
        normalize(&mut value);
        // The table is constant and a unit test proves every path of it names a node, so nothing is left over.
        if cel == CelRules::With {
            let _unplaced = place_cel_rules(&kind, &mut value);
        }
        if let Ok(normalized) = serde_json::from_value::<JSONSchemaProps>(value) {
            *schema = normalized;
        }
    }
    crd
}

fn normalize(value: &mut Value) {
    match value {
        Value::Object(node) => {
            node.remove("nullable");
            if let Some(Value::Array(values)) = node.get_mut("enum") {
                values.retain(|v| !v.is_null());
            }
            for bound in ["minimum", "maximum"] {
                if let Some(n) = node
                    .get(bound)
                    .and_then(Value::as_f64)
                    .filter(|n| n.fract() == 0.0)
                {
                    node.insert(bound.to_owned(), json!(n as i64));
                }
            }
            if node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
                node.insert(
                    "anyOf".to_owned(),
                    json!([{"type": "integer"}, {"type": "string"}]),
                );
            }
            node.values_mut().for_each(normalize);
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        _ => {}
    }
}

/// Adds the CEL rules of `cel_rules::placements` for the CRD of `kind` to its schema (as JSON), after any rules the
/// nodes already carry. Returns the paths that name no node of the schema.
fn place_cel_rules(kind: &str, schema: &mut Value) -> Vec<&'static str> {
    let mut unplaced = Vec::new();
    for placement in cel_rules::placements().filter(|p| p.crd.kind() == kind) {
        match validations_at(schema, placement.path) {
            Some(list) => list.extend(
                placement
                    .rules
                    .iter()
                    .map(|r| json!({"rule": r.rule, "message": r.message})),
            ),
            None => unplaced.push(placement.path),
        }
    }
    unplaced
}

/// The `x-kubernetes-validations` list (created empty when absent) of the schema node at a `cel_rules` path:
/// `.`-separated fields, `[]` after a list field for its items.
fn validations_at<'a>(schema: &'a mut Value, path: &str) -> Option<&'a mut Vec<Value>> {
    let node = path.split('.').try_fold(schema, |node, field| {
        let (name, items) = match field.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (field, false),
        };
        let child = node.get_mut("properties")?.get_mut(name)?;
        if items {
            child.get_mut("items")
        } else {
            Some(child)
        }
    })?;
    node.as_object_mut()?
        .entry("x-kubernetes-validations")
        .or_insert_with(|| json!([]))
        .as_array_mut()
}

/// The `openAPIV3Schema` of a CRD's (only) version, as JSON.
fn open_api_schema(crd: &CustomResourceDefinition) -> Value {
    crd.spec
        .versions
        .first()
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or_default()
}

type Compiled = OnceLock<Result<CompiledSchema, SchemaError>>;
static NODEPOOL: Compiled = OnceLock::new();
static EC2NODECLASS: Compiled = OnceLock::new();
static NODEOVERLAY: Compiled = OnceLock::new();
static CAPACITYBUFFER: Compiled = OnceLock::new();

/// The compiled schema of one kind, built on first use.
fn compiled(
    cell: &'static Compiled,
    crd: fn() -> CustomResourceDefinition,
) -> Result<&'static CompiledSchema, &'static SchemaError> {
    cell.get_or_init(|| {
        CompiledSchema::compile(&open_api_schema(&structural(crd(), CelRules::Without)))
    })
    .as_ref()
}

/// The NodePool schema the apiserver enforces.
pub fn nodepool_schema() -> Result<&'static CompiledSchema, &'static SchemaError> {
    compiled(&NODEPOOL, NodePool::crd)
}

/// The EC2NodeClass schema the apiserver enforces.
pub fn ec2nodeclass_schema() -> Result<&'static CompiledSchema, &'static SchemaError> {
    compiled(&EC2NODECLASS, EC2NodeClass::crd)
}

/// The NodeOverlay schema the apiserver enforces.
pub fn nodeoverlay_schema() -> Result<&'static CompiledSchema, &'static SchemaError> {
    compiled(&NODEOVERLAY, NodeOverlay::crd)
}

/// The CapacityBuffer schema the apiserver enforces.
pub fn capacitybuffer_schema() -> Result<&'static CompiledSchema, &'static SchemaError> {
    compiled(&CAPACITYBUFFER, CapacityBuffer::crd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_compile_and_are_structural() {
        assert!(nodepool_schema().is_ok());
        assert!(ec2nodeclass_schema().is_ok());
        assert!(nodeoverlay_schema().is_ok());
        assert!(capacitybuffer_schema().is_ok());
        for cel in [CelRules::Without, CelRules::With] {
            let yaml = to_yaml(cel).expect("CRDs serialize");
            assert!(!yaml.contains("nullable"));
            assert!(!yaml.contains("- {}"));
            assert_eq!(
                yaml.contains("x-kubernetes-validations"),
                cel == CelRules::With
            );
        }
    }

    #[test]
    fn every_cel_rule_lands_at_its_path() {
        for crd in [NodePool::crd(), NodeClaim::crd(), EC2NodeClass::crd()] {
            let kind = crd.spec.names.kind.clone();
            let mut schema = open_api_schema(&crd);
            assert_eq!(
                place_cel_rules(&kind, &mut schema),
                Vec::<&str>::new(),
                "{kind}"
            );
            let placed = serde_json::to_string(&open_api_schema(&structural(crd, CelRules::With)))
                .unwrap_or_default()
                .matches("\"rule\":")
                .count();
            let table: usize = cel_rules::placements()
                .filter(|p| p.crd.kind() == kind)
                .map(|p| p.rules.len())
                .sum();
            assert_eq!(placed, table, "{kind}");
        }
    }
}
