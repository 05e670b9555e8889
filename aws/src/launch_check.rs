//! What EC2's answers to an EC2NodeClass validation mean (Karpenter's `controllers/nodeclass/validation.go`):
//! a dry run answers `DryRunOperation` when the call would have been allowed and `UnauthorizedOperation` when
//! not; creating the launch template is a real call, refused as unauthorized or for user data over the size
//! limit. Anything else (throttling, a server error, an instance profile IAM has not propagated yet) says
//! nothing about the class: the validation is asked again later.

use std::collections::BTreeMap;

use aws_sdk_ec2::operation::run_instances::builders::RunInstancesFluentBuilder;
use aws_sdk_ec2::types as ec2;
use kerf_core::cloud::{CloudError, LaunchRefusal, RefusedCall};

use crate::errors::code_of;

const DRY_RUN_OK: &str = "DryRunOperation";
const UNAUTHORIZED: &str = "UnauthorizedOperation";
const USER_DATA_MALFORMED: &str = "InvalidUserData.Malformed";
const USER_DATA_TOO_LARGE: &str = "User data is limited to";

fn api_text(error: &CloudError) -> Option<(&str, &str)> {
    match error {
        CloudError::Api { code, message, .. } => Some((code, message)),
        _ => None,
    }
}

/// Creating the launch template: its name, or the refusal.
pub fn template(
    result: Result<String, CloudError>,
) -> Result<Result<String, LaunchRefusal>, CloudError> {
    let error = match result {
        Ok(name) => return Ok(Ok(name)),
        Err(error) => error,
    };
    match api_text(&error) {
        Some((code, message)) if code == UNAUTHORIZED => Ok(Err(LaunchRefusal::new(
            RefusedCall::CreateLaunchTemplate,
            code,
            message,
        ))),
        Some((code, message))
            if code == USER_DATA_MALFORMED && message.contains(USER_DATA_TOO_LARGE) =>
        {
            Ok(Err(LaunchRefusal::new(
                RefusedCall::UserDataTooLarge,
                code,
                message,
            )))
        }
        _ => Err(error),
    }
}

/// A dry run of `call`: allowed, refused, or no answer.
pub fn dry_run<T>(
    call: RefusedCall,
    result: Result<T, CloudError>,
) -> Result<Option<LaunchRefusal>, CloudError> {
    let error = match result {
        // A dry run never launches; an emulator that ignores the flag still says "allowed".
        Ok(_) => return Ok(None),
        Err(error) => error,
    };
    if code_of(&error) == Some(DRY_RUN_OK) {
        return Ok(None);
    }
    match api_text(&error) {
        Some((code, message)) if code == UNAUTHORIZED => {
            Ok(Some(LaunchRefusal::new(call, code, message)))
        }
        _ => Err(error),
    }
}

/// A dry-run RunInstances of one `instance_type` from `template` into `subnet`, tagged as a launch would be.
pub fn run_instances(
    ec2_client: &aws_sdk_ec2::Client,
    template: &str,
    instance_type: &str,
    subnet: &str,
    tags: &BTreeMap<String, String>,
) -> RunInstancesFluentBuilder {
    let tags: Vec<ec2::Tag> = tags
        .iter()
        .map(|(k, v)| ec2::Tag::builder().key(k).value(v).build())
        .collect();
    let mut run = ec2_client
        .run_instances()
        .dry_run(true)
        .min_count(1)
        .max_count(1)
        .launch_template(
            ec2::LaunchTemplateSpecification::builder()
                .launch_template_name(template)
                .version("$Latest")
                .build(),
        )
        .instance_type(ec2::InstanceType::from(instance_type))
        .network_interfaces(
            ec2::InstanceNetworkInterfaceSpecification::builder()
                .device_index(0)
                .subnet_id(subnet)
                .build(),
        );
    for resource in [
        ec2::ResourceType::Instance,
        ec2::ResourceType::Volume,
        ec2::ResourceType::NetworkInterface,
    ] {
        run = run.tag_specifications(
            ec2::TagSpecification::builder()
                .resource_type(resource)
                .set_tags(Some(tags.clone()))
                .build(),
        );
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: &str, message: &str) -> CloudError {
        CloudError::Api {
            operation: "CreateFleet",
            code: code.into(),
            message: message.into(),
        }
    }

    /// Karpenter's validation suite: "...as NotReady when CreateFleet / RunInstances / CreateLaunchTemplate
    /// unauthorized", "should surface an oversized user data rejection as UserDataSizeLimitExceeded", "should not
    /// surface a non-size InvalidUserData.Malformed rejection as UserDataSizeLimitExceeded"; throttling is asked
    /// again.
    #[test]
    fn answers_are_allowed_refused_or_asked_again() {
        assert_eq!(dry_run(RefusedCall::CreateFleet, Ok(())), Ok(None));
        let allowed: Result<(), _> = Err(api("DryRunOperation", "Request would have succeeded"));
        assert_eq!(dry_run(RefusedCall::CreateFleet, allowed), Ok(None));
        let denied: Result<(), _> = Err(api("UnauthorizedOperation", ""));
        let refusal = dry_run(RefusedCall::RunInstances, denied)
            .expect("an answer")
            .expect("refused");
        assert_eq!(refusal.call.reason(), "RunInstancesAuthCheckFailed");
        let throttled: Result<(), _> = Err(api("RequestLimitExceeded", ""));
        assert!(dry_run(RefusedCall::CreateFleet, throttled).is_err());

        assert_eq!(template(Ok("t".into())), Ok(Ok("t".into())));
        let denied = template(Err(api("UnauthorizedOperation", ""))).expect("an answer");
        assert_eq!(
            denied.map_err(|r| r.call.reason()),
            Err("CreateLaunchTemplateAuthCheckFailed")
        );
        let too_large = template(Err(api(
            "InvalidUserData.Malformed",
            "User data is limited to 16384 bytes",
        )))
        .expect("an answer");
        assert_eq!(
            too_large.map_err(|r| r.call.reason()),
            Err("UserDataSizeLimitExceeded")
        );
        assert!(template(Err(api(
            "InvalidUserData.Malformed",
            "Invalid BASE64 encoding of user data."
        )))
        .is_err());
    }
}
