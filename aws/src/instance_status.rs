//! EC2's status checks on its terms (Karpenter AWS's `instancestatus` provider): the three DescribeInstanceStatus
//! listings that together find every impaired instance — instance check impaired, system check impaired, or a
//! scheduled reboot, maintenance, retirement or stop (EC2 ANDs filters of different names, so they are three
//! calls) — and each answer as kerf's [`InstanceHealth`]. Which of them make a node go is
//! `kerf_core::interruption::instance_status`'s decision.

use std::time::SystemTime;

use aws_sdk_ec2::primitives::DateTime;
use aws_sdk_ec2::types as ec2;
use kerf_core::cloud::{InstanceHealth, StatusCategory, StatusCheck};

/// The scheduled event codes that mean the host needs vacating.
pub const EVENT_CODES: [&str; 5] = [
    "instance-reboot",
    "system-reboot",
    "system-maintenance",
    "instance-retirement",
    "instance-stop",
];

/// The filters of each listing.
pub fn listings() -> Vec<ec2::Filter> {
    vec![
        ec2::Filter::builder()
            .name("instance-status.status")
            .values("impaired")
            .build(),
        ec2::Filter::builder()
            .name("system-status.status")
            .values("impaired")
            .build(),
        ec2::Filter::builder()
            .name("event.code")
            .set_values(Some(EVENT_CODES.iter().map(|c| (*c).to_owned()).collect()))
            .build(),
    ]
}

/// What one listed status says: every detail of its instance, system and EBS checks, and every scheduled event
/// (as failed). `None` without an instance ID.
pub fn health_of(status: &ec2::InstanceStatus) -> Option<InstanceHealth> {
    let mut checks = Vec::new();
    let summaries = [
        (StatusCategory::Instance, status.instance_status.as_ref()),
        (StatusCategory::System, status.system_status.as_ref()),
    ];
    for (category, summary) in summaries {
        for detail in summary.map(|s| s.details()).unwrap_or_default() {
            checks.push(check(
                category,
                detail.name().map(|n| n.as_str()),
                detail.status(),
                detail.impaired_since(),
            ));
        }
    }
    let ebs = status.attached_ebs_status.as_ref();
    for detail in ebs.map(|s| s.details()).unwrap_or_default() {
        checks.push(check(
            StatusCategory::Ebs,
            detail.name().map(|n| n.as_str()),
            detail.status(),
            detail.impaired_since(),
        ));
    }
    for event in status.events() {
        checks.push(StatusCheck {
            category: StatusCategory::Event,
            name: event
                .code()
                .map(|c| c.as_str().to_owned())
                .unwrap_or_default(),
            failed: true,
            impaired_since: None,
        });
    }
    Some(InstanceHealth {
        instance_id: status.instance_id.clone()?,
        checks,
    })
}

/// One detail of a check (EC2 describes instance, system and EBS details in different types of the same shape).
fn check(
    category: StatusCategory,
    name: Option<&str>,
    status: Option<&ec2::StatusType>,
    impaired_since: Option<&DateTime>,
) -> StatusCheck {
    StatusCheck {
        category,
        name: name.unwrap_or_default().to_owned(),
        failed: status == Some(&ec2::StatusType::Failed),
        impaired_since: impaired_since.and_then(|t| SystemTime::try_from(*t).ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_check_and_event_is_read_with_its_time() {
        let failed = ec2::InstanceStatusDetails::builder()
            .name(ec2::StatusName::Reachability)
            .status(ec2::StatusType::Failed)
            .impaired_since(DateTime::from_secs(1_800_000_000))
            .build();
        let passed = ec2::InstanceStatusDetails::builder()
            .name(ec2::StatusName::Reachability)
            .status(ec2::StatusType::Passed)
            .build();
        let status = ec2::InstanceStatus::builder()
            .instance_id("i-1")
            .instance_status(
                ec2::InstanceStatusSummary::builder()
                    .status(ec2::SummaryStatus::Impaired)
                    .details(failed)
                    .build(),
            )
            .system_status(
                ec2::InstanceStatusSummary::builder()
                    .details(passed)
                    .build(),
            )
            .events(
                ec2::InstanceStatusEvent::builder()
                    .code(ec2::EventCode::InstanceRetirement)
                    .build(),
            )
            .build();
        let health = health_of(&status).expect("an instance");
        assert_eq!(health.instance_id, "i-1");
        let seen: Vec<(StatusCategory, &str, bool, bool)> = health
            .checks
            .iter()
            .map(|c| {
                (
                    c.category,
                    c.name.as_str(),
                    c.failed,
                    c.impaired_since.is_some(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (StatusCategory::Instance, "reachability", true, true),
                (StatusCategory::System, "reachability", false, false),
                (StatusCategory::Event, "instance-retirement", true, false),
            ]
        );
        assert!(health_of(&ec2::InstanceStatus::builder().build()).is_none());
    }

    #[test]
    fn three_listings_cover_instance_system_and_scheduled_events() {
        let filters = listings();
        let names: Vec<&str> = filters.iter().filter_map(|f| f.name()).collect();
        assert_eq!(
            names,
            [
                "instance-status.status",
                "system-status.status",
                "event.code"
            ]
        );
    }
}
