//! A toy `Widget` kind (group `example.com`) and AdmissionReview bodies for it.

use kerf_webhooks::{AdmissionHook, Denial, Mutated, ReviewRequest, Webhooks};
use serde_json::{json, Value};

pub const GROUP: &str = "example.com";

/// Defaults `spec.size` to `"medium"`; refuses `spec.size: "huge"`; warns about pink widgets.
pub struct Widgets;

impl AdmissionHook for Widgets {
    fn mutate(&self, request: &ReviewRequest) -> Result<Mutated, Denial> {
        let Some(object) = &request.object else {
            return Ok(Mutated::default());
        };
        let mut after = object.clone();
        if after.pointer("/spec/size").is_some() {
            return Ok(Mutated::default());
        }
        after["spec"]["size"] = json!("medium");
        Ok(Mutated {
            object: Some(after),
            warnings: vec!["spec.size defaulted to medium".to_owned()],
        })
    }

    fn validate(&self, request: &ReviewRequest) -> Result<Vec<String>, Denial> {
        let spec = request.object.as_ref().map(|o| &o["spec"]);
        if spec.is_some_and(|spec| spec["size"] == "huge") {
            return Err(Denial::invalid(
                r#"Widget.example.com "w" is invalid: spec.size: Unsupported value: "huge""#,
            )
            .with_cause(
                "FieldValueNotSupported",
                "spec.size",
                r#"Unsupported value: "huge""#,
            ));
        }
        if spec.is_some_and(|spec| spec["color"] == "pink") {
            return Ok(vec!["pink widgets are deprecated".to_owned()]);
        }
        Ok(Vec::new())
    }
}

pub fn webhooks() -> Webhooks {
    Webhooks::new().hook(GROUP, "Widget", Widgets)
}

/// An AdmissionReview v1 request for a CREATE of `object` of `kind` in `group`.
pub fn review(group: &str, kind: &str, object: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": group, "version": "v1", "resource": "widgets"},
            "name": "w",
            "operation": "CREATE",
            "userInfo": {"username": "admin"},
            "object": object,
            "oldObject": null,
            "dryRun": false
        }
    })
}

/// A Widget as the apiserver sends it on CREATE (note the null `creationTimestamp`).
pub fn widget(spec: Value) -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "creationTimestamp": null, "labels": {"app": "demo"}},
        "spec": spec
    })
}
