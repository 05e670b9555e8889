//! Builders for kerf's tests and benchmarks, so that each test states only what it is about: the objects of the
//! API (NodePools, NodeClaims, EC2NodeClasses, Nodes) from a JSON patch over a valid minimum, and catalog
//! files (`Catalog::from_instance_types_json`) from instance types and offerings.
//!
//! Uses only `kerf-api`, so every crate's tests may use it, `kerf-core`'s included. Test code: a builder panics,
//! naming what it built, when its patch does not make a valid object.

use k8s_openapi::api::core::v1::Node;
use kerf_api::ec2nodeclass::EC2NodeClass;
use kerf_api::nodeclaim::NodeClaim;
use kerf_api::nodepool::NodePool;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

/// The EC2NodeClass the builders' pools and claims refer to unless a patch says otherwise.
pub const NODE_CLASS: &str = "default";

/// Merges `patch` into `target`: objects key by key, recursively; anything else (arrays included) replaces.
pub fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(target.entry(key).or_insert(Value::Null), value);
            }
        }
        (target, patch) => *target = patch,
    }
}

/// `value` as a `T`; `what` names it in the panic when it is not one.
pub fn object<T: DeserializeOwned>(what: &str, value: Value) -> T {
    serde_json::from_value(value).unwrap_or_else(|e| panic!("not a valid {what}: {e}"))
}

fn node_class_ref() -> Value {
    json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": NODE_CLASS})
}

/// A NodePool `name` of the [`NODE_CLASS`] with no requirements, `spec` merged into its spec.
pub fn nodepool(name: &str, spec: Value) -> NodePool {
    let mut pool = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
        "spec": {"template": {"spec": {"nodeClassRef": node_class_ref(), "requirements": []}}},
    });
    merge(&mut pool["spec"], spec);
    object("NodePool", pool)
}

/// A NodeClaim `name` of the [`NODE_CLASS`] with no requirements, `patch` merged into the whole object (its
/// `metadata`, `spec` and `status`).
pub fn nodeclaim(name: &str, patch: Value) -> NodeClaim {
    let mut claim = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": name},
        "spec": {"nodeClassRef": node_class_ref(), "requirements": []},
    });
    merge(&mut claim, patch);
    object("NodeClaim", claim)
}

/// An EC2NodeClass `name` with a role, the AL2023 alias and one subnet and security group by ID, `spec` merged
/// into its spec.
pub fn ec2nodeclass(name: &str, spec: Value) -> EC2NodeClass {
    let mut class = json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name},
        "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                 "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}]},
    });
    merge(&mut class["spec"], spec);
    object("EC2NodeClass", class)
}

/// A Node `name`, `patch` merged into the whole object.
pub fn node(name: &str, patch: Value) -> Node {
    let mut node = json!({"metadata": {"name": name}});
    merge(&mut node, patch);
    object("Node", node)
}

/// One offering of a catalog file's instance type.
pub fn offering(zone: &str, capacity_type: &str, price: f64) -> Value {
    json!({"zone": zone, "capacityType": capacity_type, "price": price, "available": true})
}

/// One instance type of a catalog file: Linux, no extra labels, 100m CPU and 100Mi memory of overhead (merge a
/// patch to change any of it).
pub fn instance_type(
    name: &str,
    cpu: &str,
    memory: &str,
    pods: u64,
    arch: &str,
    offerings: Vec<Value>,
) -> Value {
    json!({"name": name, "cpu": cpu, "memory": memory, "pods": pods, "arch": arch, "os": ["linux"], "labels": {},
           "overhead": {"cpu": "100m", "memory": "100Mi"}, "offerings": offerings})
}

/// The text of a catalog file holding `types`.
pub fn catalog_file(types: Vec<Value>) -> String {
    json!({"instanceTypes": types}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_merge_objects_and_replace_the_rest() {
        let pool = nodepool(
            "p",
            json!({"template": {"spec": {"requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]}},
                "disruption": {"consolidateAfter": "30s"}}),
        );
        let spec = &pool.spec.template.spec;
        assert_eq!(spec.node_class_ref.name, NODE_CLASS);
        assert_eq!(spec.requirements.len(), 1);
        let claim = nodeclaim("c", json!({"metadata": {"labels": {"a": "b"}}}));
        assert_eq!(claim.metadata.name.as_deref(), Some("c"));
        assert_eq!(claim.spec.node_class_ref.name, NODE_CLASS);
    }

    #[test]
    #[should_panic(expected = "not a valid NodePool")]
    fn an_invalid_patch_names_the_object() {
        nodepool("p", json!({"template": {"spec": {"requirements": "none"}}}));
    }
}
