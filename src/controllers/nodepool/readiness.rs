//! A NodePool's readiness conditions, as Karpenter's `nodepool.readiness` and `nodepool.validation` controllers
//! keep them: `ValidationSucceeded` (the pool passes the runtime validation), `NodeClassReady` (its
//! EC2NodeClass exists, is not being deleted and is `Ready`), and `Ready`, true when both are (the condition
//! set's root: otherwise `False` with reason `UnhealthyDependents` naming them). `kubectl get nodepools` shows
//! `Ready` in its READY column.

use crate::api::condition::Condition;
use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::nodepool::validate_nodepool;
use crate::api::nodepool::NodePool;
use crate::api::validation::Findings;

pub const READY: &str = "Ready";
pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
pub const NODE_CLASS_READY: &str = "NodeClassReady";

/// One condition's verdict: true, or false with a reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub type_: &'static str,
    pub ok: bool,
    pub reason: String,
    pub message: String,
}

impl Verdict {
    fn ok(type_: &'static str) -> Self {
        Verdict {
            type_,
            ok: true,
            reason: type_.to_owned(),
            message: String::new(),
        }
    }

    fn failed(type_: &'static str, reason: &str, message: impl Into<String>) -> Self {
        Verdict {
            type_,
            ok: false,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }
}

/// `ValidationSucceeded`, `NodeClassReady` and `Ready` of `pool`, given its EC2NodeClass (`None`: not found).
pub fn verdicts(pool: &NodePool, class: Option<&EC2NodeClass>) -> [Verdict; 3] {
    let mut findings = Findings::default();
    validate_nodepool(pool, None, &mut findings);
    let validation = match findings.errors.first() {
        None => Verdict::ok(VALIDATION_SUCCEEDED),
        Some(_) => Verdict::failed(
            VALIDATION_SUCCEEDED,
            "NodePoolValidationFailed",
            findings
                .errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        ),
    };
    let node_class = match class {
        None => Verdict::failed(
            NODE_CLASS_READY,
            "NodeClassNotFound",
            "NodeClass not found on cluster",
        ),
        Some(class) if class.metadata.deletion_timestamp.is_some() => Verdict::failed(
            NODE_CLASS_READY,
            "NodeClassTerminating",
            "NodeClass is Terminating",
        ),
        Some(class) => match class_ready(class) {
            Some(c) if c.status == "True" => Verdict::ok(NODE_CLASS_READY),
            Some(c) if c.status == "False" => {
                Verdict::failed(NODE_CLASS_READY, &c.reason, c.message.clone())
            }
            _ => Verdict::failed(
                NODE_CLASS_READY,
                "NodeClassReadinessUnknown",
                "Node Class Readiness Unknown",
            ),
        },
    };
    let unhealthy: Vec<String> = [&validation, &node_class]
        .iter()
        .filter(|v| !v.ok)
        .map(|v| format!("{}=False", v.type_))
        .collect();
    let ready = if unhealthy.is_empty() {
        Verdict::ok(READY)
    } else {
        Verdict::failed(READY, "UnhealthyDependents", unhealthy.join(", "))
    };
    [validation, node_class, ready]
}

fn class_ready(class: &EC2NodeClass) -> Option<&Condition> {
    class
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == READY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(requirements: serde_json::Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general"},
            "spec": {"template": {"spec": {"requirements": requirements,
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}},
        }))
        .expect("pool")
    }

    fn class(ready: Option<(&str, &str)>, deleting: bool) -> EC2NodeClass {
        let conditions: Vec<serde_json::Value> = ready
            .map(|(status, reason)| {
                json!({"type": "Ready", "status": status, "reason": reason, "message": "no subnets",
                       "lastTransitionTime": "2026-11-26T00:00:00Z"})
            })
            .into_iter()
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default",
                         "deletionTimestamp": deleting.then_some("2026-11-26T00:00:00Z")},
            "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "R",
                     "subnetSelectorTerms": [{"tags": {"k": "v"}}],
                     "securityGroupSelectorTerms": [{"tags": {"k": "v"}}]},
            "status": {"conditions": conditions},
        }))
        .expect("class")
    }

    fn summary(verdicts: &[Verdict; 3]) -> Vec<(&str, bool, &str)> {
        verdicts
            .iter()
            .map(|v| (v.type_, v.ok, v.reason.as_str()))
            .collect()
    }

    /// Karpenter's nodepool readiness suite: "should have status condition on nodePool as not ready when
    /// nodeClass does not exist", "... when nodeClass is not ready", "... when nodeClass is terminating",
    /// "should have status condition on nodePool as ready if nodeClass is ready"; and the validation suite's
    /// verdict for a pool that fails runtime validation.
    #[test]
    fn the_pool_is_ready_when_it_validates_and_its_class_is_ready() {
        let good = pool(json!([]));
        assert_eq!(
            summary(&verdicts(
                &good,
                Some(&class(Some(("True", "Ready")), false))
            )),
            [
                (VALIDATION_SUCCEEDED, true, VALIDATION_SUCCEEDED),
                (NODE_CLASS_READY, true, NODE_CLASS_READY),
                (READY, true, READY)
            ]
        );
        let missing = verdicts(&good, None);
        assert_eq!(
            summary(&missing)[1..],
            [
                (NODE_CLASS_READY, false, "NodeClassNotFound"),
                (READY, false, "UnhealthyDependents")
            ]
        );
        assert_eq!(missing[2].message, "NodeClassReady=False");
        let not_ready = verdicts(
            &good,
            Some(&class(Some(("False", "SubnetsNotFound")), false)),
        );
        assert_eq!(
            (not_ready[1].reason.as_str(), not_ready[1].message.as_str()),
            ("SubnetsNotFound", "no subnets")
        );
        assert_eq!(
            verdicts(&good, Some(&class(None, false)))[1].reason,
            "NodeClassReadinessUnknown"
        );
        assert_eq!(
            verdicts(&good, Some(&class(Some(("True", "Ready")), true)))[1].reason,
            "NodeClassTerminating"
        );
        let invalid = pool(
            json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spots"]}]),
        );
        let verdicts = verdicts(&invalid, Some(&class(Some(("True", "Ready")), false)));
        assert_eq!(
            summary(&verdicts),
            [
                (VALIDATION_SUCCEEDED, false, "NodePoolValidationFailed"),
                (NODE_CLASS_READY, true, NODE_CLASS_READY),
                (READY, false, "UnhealthyDependents")
            ]
        );
        assert!(
            verdicts[0].message.contains("spots"),
            "{}",
            verdicts[0].message
        );
    }
}
