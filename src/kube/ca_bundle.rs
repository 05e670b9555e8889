//! `caBundle` injection in the self-signed mode: every webhook of kerf's MutatingWebhookConfiguration and
//! ValidatingWebhookConfiguration gets the CA of the certificate kerf serves (what cert-manager's CA injector does
//! in the other mode).

use super::CALL_TIMEOUT;
use ::kube::api::{Api, Patch, PatchParams};
use ::kube::{Client, Resource};
use json_patch::{AddOperation, PatchOperation, TestOperation};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::fmt::Debug;

#[derive(Debug, thiserror::Error)]
pub enum CaBundleError {
    #[error("cannot {action} {kind} {name}")]
    Api {
        action: &'static str,
        kind: &'static str,
        name: String,
        #[source]
        source: ::kube::Error,
    },
    #[error("the apiserver did not answer within {CALL_TIMEOUT:?} ({action} {kind} {name})")]
    Timeout {
        action: &'static str,
        kind: &'static str,
        name: String,
    },
    #[error("{kind} {name} does not serialize")]
    Encode {
        kind: &'static str,
        name: String,
        #[source]
        source: serde_json::Error,
    },
}

/// The webhook configurations to keep in step with the served certificate.
#[derive(Clone, Debug, Default)]
pub struct WebhookConfigurations {
    pub mutating: Option<String>,
    pub validating: Option<String>,
}

/// Sets `caBundle` (`bundle`: the base64 PEM CA bundle) on every webhook of the configurations; a webhook that already has it is left
/// alone, so calling this on a timer patches only after a change (a rotation, or a `helm upgrade` that reset it).
/// Returns how many webhooks were patched.
pub async fn inject(
    client: &Client,
    configurations: &WebhookConfigurations,
    bundle: &str,
) -> Result<usize, CaBundleError> {
    let mut patched = 0;
    if let Some(name) = &configurations.mutating {
        let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        patched += inject_one(&api, name, bundle).await?;
    }
    if let Some(name) = &configurations.validating {
        let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        patched += inject_one(&api, name, bundle).await?;
    }
    Ok(patched)
}

async fn inject_one<K>(api: &Api<K>, name: &str, bundle: &str) -> Result<usize, CaBundleError>
where
    K: Resource<DynamicType = ()>
        + k8s_openapi::Resource
        + Clone
        + Debug
        + DeserializeOwned
        + Serialize,
{
    let kind = <K as k8s_openapi::Resource>::KIND;
    let error = |action, source| CaBundleError::Api {
        action,
        kind,
        name: name.to_owned(),
        source,
    };
    let timeout = |action| CaBundleError::Timeout {
        action,
        kind,
        name: name.to_owned(),
    };
    let object = tokio::time::timeout(CALL_TIMEOUT, api.get(name))
        .await
        .map_err(|_| timeout("read"))?
        .map_err(|source| error("read", source))?;
    let object = serde_json::to_value(&object).map_err(|source| CaBundleError::Encode {
        kind,
        name: name.to_owned(),
        source,
    })?;
    let operations = ca_bundle_patch(&object["webhooks"], bundle);
    if operations.is_empty() {
        return Ok(0);
    }
    let count = operations.len() / 2;
    let patch = Patch::Json::<()>(json_patch::Patch(operations));
    tokio::time::timeout(
        CALL_TIMEOUT,
        api.patch(name, &PatchParams::default(), &patch),
    )
    .await
    .map_err(|_| timeout("patch"))?
    .map_err(|source| error("patch", source))?;
    tracing::info!(kind, name, webhooks = count, "caBundle injected");
    Ok(count)
}

/// The JSON Patch that gives each webhook in `webhooks` (a configuration's `webhooks` list) the `caBundle`
/// `bundle` (base64 PEM): for each one that lacks it, a `test` of its name (so a concurrent reorder makes the patch fail rather
/// than hit the wrong webhook) and an `add` of the bundle.
pub fn ca_bundle_patch(webhooks: &Value, bundle: &str) -> Vec<PatchOperation> {
    let Some(webhooks) = webhooks.as_array() else {
        return Vec::new();
    };
    let mut operations = Vec::new();
    for (index, webhook) in webhooks.iter().enumerate() {
        if webhook["clientConfig"]["caBundle"].as_str() == Some(bundle) {
            continue;
        }
        let at = |fields: &[&str]| {
            let index = index.to_string();
            let tokens = ["webhooks", index.as_str()]
                .into_iter()
                .chain(fields.iter().copied());
            json_patch::jsonptr::PointerBuf::from_tokens(tokens)
        };
        operations.push(PatchOperation::Test(TestOperation {
            path: at(&["name"]),
            value: webhook["name"].clone(),
        }));
        operations.push(PatchOperation::Add(AddOperation {
            path: at(&["clientConfig", "caBundle"]),
            value: Value::String(bundle.to_owned()),
        }));
    }
    operations
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const BUNDLE: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==";

    #[test]
    fn patches_only_the_webhooks_without_the_bundle() {
        let mut configuration = json!({"webhooks": [
            {"name": "a.kerf.sh", "clientConfig": {"url": "https://x/mutate"}},
            {"name": "b.kerf.sh", "clientConfig": {"url": "https://x/mutate", "caBundle": BUNDLE}},
            {"name": "c.kerf.sh", "clientConfig": {"url": "https://x/mutate", "caBundle": "b2xk"}},
        ]});
        let operations = ca_bundle_patch(&configuration["webhooks"], BUNDLE);
        assert_eq!(operations.len(), 4, "{operations:?}");
        json_patch::patch(&mut configuration, &operations).expect("patch applies");
        for webhook in configuration["webhooks"].as_array().expect("webhooks") {
            assert_eq!(webhook["clientConfig"]["caBundle"], BUNDLE);
        }
        assert!(ca_bundle_patch(&configuration["webhooks"], BUNDLE).is_empty());
    }

    #[test]
    fn a_reordered_configuration_makes_the_patch_fail() {
        let configuration = json!({"webhooks": [{"name": "a", "clientConfig": {}}]});
        let operations = ca_bundle_patch(&configuration["webhooks"], BUNDLE);
        let mut reordered = json!({"webhooks": [{"name": "b", "clientConfig": {}}]});
        assert!(json_patch::patch(&mut reordered, &operations).is_err());
    }
}
