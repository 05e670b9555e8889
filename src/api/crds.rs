//! The CustomResourceDefinitions kerf installs (`kerf crds`), and the compiled schemas the webhooks check
//! objects against, both generated from the Rust types so they cannot drift apart.

use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::api::schema::{CompiledSchema, SchemaError};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::CustomResourceExt;
use serde_json::{json, Value};
use std::sync::OnceLock;

/// All of kerf's CRDs, in the order `kerf crds` prints them.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![
        structural(NodePool::crd()),
        structural(NodeClaim::crd()),
        structural(EC2NodeClass::crd()),
    ]
}

/// `kerf crds`: every CRD as multi-document YAML.
pub fn to_yaml() -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for crd in all() {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd)?);
    }
    Ok(out)
}

/// Brings kube-derive's schema to what Karpenter's CRDs say: no `nullable` (the apiserver prunes nulls),
/// integral bounds, and int-or-string quantities spelled the way `controller-gen` spells them.
fn structural(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
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

/// The compiled schema of one kind, built on first use.
fn compiled(
    cell: &'static Compiled,
    crd: fn() -> CustomResourceDefinition,
) -> Result<&'static CompiledSchema, &'static SchemaError> {
    cell.get_or_init(|| CompiledSchema::compile(&open_api_schema(&structural(crd()))))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_compile_and_are_structural() {
        assert!(nodepool_schema().is_ok());
        assert!(ec2nodeclass_schema().is_ok());
        let yaml = to_yaml().expect("CRDs serialize");
        assert!(!yaml.contains("nullable"));
        assert!(!yaml.contains("- {}"));
    }
}
