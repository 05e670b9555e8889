//! A launch asked for without launching (Karpenter's EC2NodeClass validation, `controllers/nodeclass/
//! validation.go`): what the cloud refused, in the reasons and words of the EC2NodeClass's
//! `ValidationSucceeded` condition. Which EC2 answers are refusals is the provider's call; the wording is here
//! so every provider reports them alike.

/// The call a validation found refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusedCall {
    /// Creating the launch template was not authorized.
    CreateLaunchTemplate,
    /// The launch template's rendered user data is over EC2's size limit.
    UserDataTooLarge,
    /// A dry-run CreateFleet was not authorized.
    CreateFleet,
    /// A dry-run RunInstances was not authorized, in every subnet.
    RunInstances,
}

impl RefusedCall {
    /// The condition reason (Karpenter's).
    pub fn reason(self) -> &'static str {
        match self {
            RefusedCall::CreateLaunchTemplate => "CreateLaunchTemplateAuthCheckFailed",
            RefusedCall::UserDataTooLarge => "UserDataSizeLimitExceeded",
            RefusedCall::CreateFleet => "CreateFleetAuthCheckFailed",
            RefusedCall::RunInstances => "RunInstancesAuthCheckFailed",
        }
    }

    fn summary(self) -> &'static str {
        match self {
            RefusedCall::CreateLaunchTemplate => {
                "Controller isn't authorized to call ec2:CreateLaunchTemplate"
            }
            RefusedCall::UserDataTooLarge => {
                "ec2:CreateLaunchTemplate rejected the rendered user data as too large"
            }
            RefusedCall::CreateFleet => "Controller isn't authorized to call ec2:CreateFleet",
            RefusedCall::RunInstances => "Controller isn't authorized to call ec2:RunInstances",
        }
    }
}

/// A refused call and what the cloud said, as a user reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchRefusal {
    pub call: RefusedCall,
    /// Karpenter's explanation of the error (`ToReasonMessage`), not the raw API text.
    pub detail: &'static str,
}

impl LaunchRefusal {
    /// The refusal of `call` with the API error `code` and `message`.
    pub fn new(call: RefusedCall, code: &str, message: &str) -> Self {
        LaunchRefusal {
            call,
            detail: explain(&format!("{code}: {message}")),
        }
    }

    /// The condition message: the call, then why.
    pub fn message(&self) -> String {
        format!("{}: {}", self.call.summary(), self.detail)
    }
}

/// Karpenter's explanation of an EC2 error (`errors.ToReasonMessage`), for the errors a validation can meet:
/// authorization denials and oversized user data.
fn explain(error: &str) -> &'static str {
    let has = |needle: &str| error.contains(needle);
    if has("AuthFailure.ServiceLinkedRoleCreationNotPermitted") {
        return "User does not have sufficient permission to create the Spot ServiceLinkedRole to launch spot instances";
    }
    if has("UnauthorizedOperation") || has("AccessDenied") || has("AuthFailure") {
        if has("with an explicit deny in a permissions boundary") {
            return "User is not authorized to perform this operation due to a permission boundary";
        }
        if has("with an explicit deny in a service control policy") {
            return "User is not authorized to perform this operation due to a service control policy";
        }
        if has("Not authorized for images") {
            return "User is not authorized for AMI used in instance launch";
        }
        return "User is not authorized to perform this operation because no identity-based policy allows it";
    }
    if has("User data is limited to") {
        return "Rendered user data exceeds the EC2 user data size limit";
    }
    "Instance launch failed"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Karpenter's validation suite, "NodeClass validation failure conditions": the reason per call, and the
    /// message with the denial's kind.
    #[test]
    fn refusals_read_as_karpenters_conditions() {
        let fleet = LaunchRefusal::new(RefusedCall::CreateFleet, "UnauthorizedOperation", "");
        assert_eq!(fleet.call.reason(), "CreateFleetAuthCheckFailed");
        assert_eq!(
            fleet.message(),
            "Controller isn't authorized to call ec2:CreateFleet: User is not authorized to perform this \
             operation because no identity-based policy allows it"
        );
        let boundary = LaunchRefusal::new(
            RefusedCall::CreateFleet,
            "UnauthorizedOperation",
            "You are not authorized to perform this operation with an explicit deny in a permissions boundary",
        );
        assert_eq!(
            boundary.message(),
            "Controller isn't authorized to call ec2:CreateFleet: User is not authorized to perform this \
             operation due to a permission boundary"
        );
        let scp = LaunchRefusal::new(
            RefusedCall::RunInstances,
            "UnauthorizedOperation",
            "You are not authorized to perform this operation with an explicit deny in a service control policy",
        );
        assert_eq!(scp.call.reason(), "RunInstancesAuthCheckFailed");
        assert_eq!(
            scp.message(),
            "Controller isn't authorized to call ec2:RunInstances: User is not authorized to perform this \
             operation due to a service control policy"
        );
        let template = LaunchRefusal::new(
            RefusedCall::CreateLaunchTemplate,
            "UnauthorizedOperation",
            "",
        );
        assert_eq!(
            template.call.reason(),
            "CreateLaunchTemplateAuthCheckFailed"
        );
        let user_data = LaunchRefusal::new(
            RefusedCall::UserDataTooLarge,
            "InvalidUserData.Malformed",
            "User data is limited to 16384 bytes",
        );
        assert_eq!(user_data.call.reason(), "UserDataSizeLimitExceeded");
        assert_eq!(
            user_data.message(),
            "ec2:CreateLaunchTemplate rejected the rendered user data as too large: Rendered user data exceeds \
             the EC2 user data size limit"
        );
    }
}
