//! Objects for the tests of this module, built from JSON so that each test states only what it is about.

use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

pub fn pod(json: Value) -> Pod {
    serde_json::from_value(json).expect("pod")
}

/// A minimal NodeClaim named `c`, with `overrides`' `metadata`, `spec` and `status` fields merged in.
pub fn claim(overrides: Value) -> NodeClaim {
    let mut claim = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "c"},
        "spec": {"requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"}},
    });
    for section in ["metadata", "spec", "status"] {
        let Some(fields) = overrides.get(section).and_then(Value::as_object) else {
            continue;
        };
        let target = &mut claim[section];
        if !target.is_object() {
            *target = json!({});
        }
        for (key, value) in fields {
            target[key] = value.clone();
        }
    }
    serde_json::from_value(claim).expect("claim")
}

/// A claim created at `created`, with `expireAfter` and a status.
pub fn created_claim(created: &str, expire_after: Option<&str>, status: Value) -> NodeClaim {
    claim(json!({
        "metadata": {"creationTimestamp": created},
        "spec": {"expireAfter": expire_after},
        "status": status,
    }))
}

/// A NodePool named `p` with this `disruption`.
pub fn pool(disruption: Value) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
        "spec": {"disruption": disruption, "template": {"spec": {"requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"}}}}
    }))
    .expect("pool")
}
