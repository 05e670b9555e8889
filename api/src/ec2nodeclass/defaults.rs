//! EC2NodeClass defaulting (api-rules.md §3.1), applied to the raw JSON so the webhook's JSON Patch only adds
//! what was missing and never rewrites what the user wrote.

use serde_json::{json, Value};

/// Karpenter's instance metadata defaults: IMDS on, over IPv4 only, IMDSv2 tokens required, and a hop limit of 1
/// so that pods outside the host network cannot reach the node's credentials. The CRD schema carries the same
/// values (see `types.rs`), so the apiserver and the webhook default alike.
pub fn default_metadata_options() -> Value {
    json!({
        "httpEndpoint": "enabled",
        "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "required",
    })
}

/// Fills in Karpenter v1.14's defaults: `metadataOptions` whole when absent, and each of its missing members
/// when it is present. Objects whose `spec` (or `metadataOptions`) is not an object are left to the schema check.
pub fn default_ec2nodeclass(object: &mut Value) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let options = spec.entry("metadataOptions").or_insert(Value::Null);
    if options.is_null() {
        *options = default_metadata_options();
    }
    let (Some(options), Value::Object(defaults)) =
        (options.as_object_mut(), default_metadata_options())
    else {
        return;
    };
    for (member, value) in defaults {
        let slot = options.entry(member).or_insert(Value::Null);
        if slot.is_null() {
            *slot = value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts_metadata_options_whole_when_absent() {
        let mut nc = json!({"spec": {"role": "r"}});
        default_ec2nodeclass(&mut nc);
        assert_eq!(
            nc,
            json!({"spec": {"role": "r", "metadataOptions": default_metadata_options()}})
        );
    }

    #[test]
    fn fills_missing_members_and_keeps_the_rest() {
        let mut nc = json!({"spec": {"metadataOptions": {"httpTokens": "optional", "httpPutResponseHopLimit": 2}}});
        default_ec2nodeclass(&mut nc);
        assert_eq!(
            nc["spec"]["metadataOptions"],
            json!({"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 2, "httpTokens": "optional"})
        );
    }

    #[test]
    fn treats_explicit_nulls_as_absent() {
        let mut nc = json!({"spec": {"metadataOptions": null}});
        default_ec2nodeclass(&mut nc);
        assert_eq!(nc["spec"]["metadataOptions"], default_metadata_options());
        let mut member = json!({"spec": {"metadataOptions": {"httpEndpoint": null}}});
        default_ec2nodeclass(&mut member);
        assert_eq!(
            member["spec"]["metadataOptions"],
            default_metadata_options()
        );
    }

    #[test]
    fn leaves_objects_without_an_object_spec_alone() {
        for odd in [
            json!({}),
            json!({"spec": "nonsense"}),
            json!({"spec": {"metadataOptions": "nonsense"}}),
        ] {
            let mut defaulted = odd.clone();
            default_ec2nodeclass(&mut defaulted);
            assert_eq!(defaulted, odd);
        }
    }

    #[test]
    fn is_idempotent() {
        let mut once = json!({"spec": {}});
        default_ec2nodeclass(&mut once);
        let mut twice = once.clone();
        default_ec2nodeclass(&mut twice);
        assert_eq!(once, twice);
    }
}
