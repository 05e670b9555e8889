//! Objects for the tests of this module: the workspace's test kit with this module's names (claim `c`, pool `p`).

use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

pub fn pod(json: Value) -> Pod {
    kerf_testkit::object("Pod", json)
}

/// A NodeClaim named `c`, with `overrides` merged in.
pub fn claim(overrides: Value) -> NodeClaim {
    kerf_testkit::nodeclaim("c", overrides)
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
    kerf_testkit::nodepool("p", json!({"disruption": disruption}))
}
