//! What a scenario may ask for: the sizes `kerf simulate` refuses before building anything (docs/limits.md),
//! and resource amounts that cannot be meant.

use crate::api::validation::{FieldError, FieldPath};
use crate::catalog::parse_quantity;
use k8s_openapi::jiff::SignedDuration;
use serde_json::Value;

/// How big a scenario may be; each has a flag of `kerf simulate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScenarioLimits {
    /// Pods at any time: the scenario's Pods, its workloads' replicas, and what scale events make of them.
    pub max_pods: u64,
    /// The longest timeline (`spec.duration`).
    pub max_duration: SignedDuration,
    /// Entries of `spec.events`.
    pub max_events: usize,
}

impl Default for ScenarioLimits {
    fn default() -> Self {
        ScenarioLimits {
            max_pods: 100_000,
            // 31 days.
            max_duration: SignedDuration::from_hours(31 * 24),
            max_events: 10_000,
        }
    }
}

/// The resource amounts of `object` below zero, with the apiserver's error for each: container requests and
/// limits and pod overhead of Pods and of workload and DaemonSet templates, a Node's capacity and allocatable.
pub fn negative_quantities(kind: &str, object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let pod_spec = match kind {
        "Pod" => Some(FieldPath::new("spec")),
        "Deployment" | "ReplicaSet" | "StatefulSet" | "Job" | "DaemonSet" => {
            Some(FieldPath::new("spec").child("template.spec"))
        }
        _ => None,
    };
    if let Some(spec) = pod_spec {
        for list in ["containers", "initContainers"] {
            let containers = lookup(object, &spec.child(list));
            for (i, container) in containers
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                for amounts in ["requests", "limits"] {
                    let path = spec.child(list).index(i).child("resources").child(amounts);
                    check_list(
                        container.pointer(&format!("/resources/{amounts}")),
                        &path,
                        &mut errors,
                    );
                }
            }
        }
        let overhead = spec.child("overhead");
        check_list(lookup(object, &overhead), &overhead, &mut errors);
    }
    if kind == "Node" {
        for amounts in ["capacity", "allocatable"] {
            let path = FieldPath::new("status").child(amounts);
            check_list(lookup(object, &path), &path, &mut errors);
        }
    }
    errors
}

fn lookup<'a>(object: &'a Value, path: &FieldPath) -> Option<&'a Value> {
    object.pointer(&path.json_pointer())
}

/// A resource list (`{cpu: 100m}`): every amount that parses below zero.
fn check_list(list: Option<&Value>, path: &FieldPath, errors: &mut Vec<FieldError>) {
    for (name, amount) in list.and_then(Value::as_object).into_iter().flatten() {
        let text = match amount {
            Value::String(text) => text.clone(),
            Value::Number(number) => number.to_string(),
            _ => continue,
        };
        if parse_quantity(&text).is_ok_and(|milli| milli < 0) {
            errors.push(FieldError::invalid(
                &path.key(name),
                &text,
                "must be greater than or equal to 0",
            ));
        }
    }
}
