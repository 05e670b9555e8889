//! The CreateFleet (type `instant`) request for a launch plan, and what its answer means: the instance, or
//! the offerings that had no capacity, or another error (controller-behaviour.md §2.2).

use std::collections::BTreeMap;

use aws_sdk_ec2::types as ec2;
use kerf_core::catalog::CapacityType;
use kerf_core::cloud::{LaunchOverride, LaunchPlan, OfferingKey};

use crate::capacity_reservations::ReservedMarket;
use crate::errors::is_capacity_error;

/// One launch template and the pools launched from it.
pub struct TemplateOverrides<'a> {
    pub template_name: String,
    pub overrides: Vec<&'a LaunchOverride>,
}

/// The CreateFleet request of one instance: spot with price-capacity-optimized, on-demand with lowest-price (with
/// a NodeOverlay's prices, capacity-optimized-prioritized and prioritized: EC2 follows the priorities);
/// overrides per type × zone with their subnet and image, `Priority` = price (cheapest first); the tags on
/// the instance, its volumes and the fleet; the class's `context` as the request's `Context`. A reserved plan
/// (its templates target the reservations) is launched as Karpenter does for its `market`: an ODCR as on-demand
/// capacity with lowest-price, a capacity block as `capacity-block` capacity, an interruptible reservation as
/// `reserved-capacity` of that reservation type.
pub fn request(
    ec2: &aws_sdk_ec2::Client,
    plan: &LaunchPlan,
    market: Option<ReservedMarket>,
    templates: &[TemplateOverrides<'_>],
    tags: &BTreeMap<String, String>,
    context: Option<&str>,
) -> aws_sdk_ec2::operation::create_fleet::builders::CreateFleetFluentBuilder {
    let market = match plan.capacity_type {
        CapacityType::Reserved => Some(market.unwrap_or(ReservedMarket::Default)),
        _ => None,
    };
    let mut request = ec2
        .create_fleet()
        .r#type(ec2::FleetType::Instant)
        .set_context(context.map(str::to_owned))
        .target_capacity_specification(
            ec2::TargetCapacitySpecificationRequest::builder()
                .total_target_capacity(1)
                .default_target_capacity_type(match (plan.capacity_type, market) {
                    (CapacityType::Spot, _) => ec2::DefaultTargetCapacityType::Spot,
                    (_, Some(ReservedMarket::CapacityBlock)) => {
                        ec2::DefaultTargetCapacityType::CapacityBlock
                    }
                    (_, Some(ReservedMarket::Interruptible)) => {
                        ec2::DefaultTargetCapacityType::ReservedCapacity
                    }
                    _ => ec2::DefaultTargetCapacityType::OnDemand,
                })
                .build(),
        );
    request = match (plan.capacity_type, market) {
        (CapacityType::Spot, _) => request.spot_options(
            ec2::SpotOptionsRequest::builder()
                .allocation_strategy(if plan.prioritized {
                    ec2::SpotAllocationStrategy::CapacityOptimizedPrioritized
                } else {
                    ec2::SpotAllocationStrategy::PriceCapacityOptimized
                })
                .build(),
        ),
        (_, Some(ReservedMarket::CapacityBlock)) => request,
        (_, Some(ReservedMarket::Interruptible)) => request.reserved_capacity_options(
            ec2::ReservedCapacityOptionsRequest::builder()
                .reservation_types(ec2::FleetReservationType::InterruptibleCapacityReservation)
                .build(),
        ),
        _ => request.on_demand_options(
            ec2::OnDemandOptionsRequest::builder()
                .allocation_strategy(if plan.prioritized {
                    ec2::FleetOnDemandAllocationStrategy::Prioritized
                } else {
                    ec2::FleetOnDemandAllocationStrategy::LowestPrice
                })
                .build(),
        ),
    };
    for template in templates {
        let mut config = ec2::FleetLaunchTemplateConfigRequest::builder()
            .launch_template_specification(
                ec2::FleetLaunchTemplateSpecificationRequest::builder()
                    .launch_template_name(&template.template_name)
                    .version("$Latest")
                    .build(),
            );
        for o in &template.overrides {
            config = config.overrides(
                ec2::FleetLaunchTemplateOverridesRequest::builder()
                    .instance_type(ec2::InstanceType::from(o.instance_type.as_str()))
                    .subnet_id(&o.subnet_id)
                    .availability_zone(&o.zone)
                    .image_id(&o.image_id)
                    .set_priority(o.price)
                    .build(),
            );
        }
        request = request.launch_template_configs(config.build());
    }
    let tags: Vec<ec2::Tag> = tags
        .iter()
        .map(|(k, v)| ec2::Tag::builder().key(k).value(v).build())
        .collect();
    for resource in [
        ec2::ResourceType::Instance,
        ec2::ResourceType::Volume,
        ec2::ResourceType::Fleet,
    ] {
        request = request.tag_specifications(
            ec2::TagSpecification::builder()
                .resource_type(resource)
                .set_tags(Some(tags.clone()))
                .build(),
        );
    }
    request
}

/// What a CreateFleet answer means.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The instance ID and the pool it came from.
    pub launched: Option<(String, LaunchOverride)>,
    /// Offerings reported without capacity.
    pub no_capacity: Vec<OfferingKey>,
    /// The reservations among them: full until EC2 lists them again.
    pub full_reservations: Vec<String>,
    /// The first error that is not about capacity: `(code, message)`.
    pub other_error: Option<(String, String)>,
}

/// Reads a CreateFleet answer against the plan it carried out.
/// What EC2 says (in an `InsufficientInstanceCapacity` error) once a spread placement group holds its seven
/// instances in a zone.
const SPREAD_LIMIT_MESSAGE: &str = "limit of instances in this spread placement group";

pub fn outcome(
    plan: &LaunchPlan,
    instances: &[ec2::CreateFleetInstance],
    errors: &[ec2::CreateFleetError],
) -> Outcome {
    let pool_of = |overrides: Option<&ec2::FleetLaunchTemplateOverrides>,
                   instance_type: Option<&str>| {
        let instance_type = instance_type.or(overrides
            .and_then(|o| o.instance_type())
            .map(|t| t.as_str()));
        let subnet = overrides.and_then(|o| o.subnet_id());
        let zone = overrides.and_then(|o| o.availability_zone());
        plan.overrides
            .iter()
            .find(|p| {
                instance_type.is_none_or(|t| t == p.instance_type)
                    && subnet.is_none_or(|s| s == p.subnet_id)
                    && zone.is_none_or(|z| z == p.zone)
            })
            .cloned()
    };
    let launched = instances.iter().find_map(|i| {
        let id = i.instance_ids().first()?.clone();
        let overrides = i
            .launch_template_and_overrides()
            .and_then(|l| l.overrides());
        Some((
            id,
            pool_of(overrides, i.instance_type().map(|t| t.as_str()))?,
        ))
    });
    let mut no_capacity = Vec::new();
    let mut full_reservations = Vec::new();
    let mut other_error = None;
    for error in errors {
        let code = error.error_code().unwrap_or("Unknown");
        if is_capacity_error(code) {
            let overrides = error
                .launch_template_and_overrides()
                .and_then(|l| l.overrides());
            if let Some(pool) = pool_of(overrides, None) {
                // A spread group takes seven instances per zone, whatever their type: every type of the zone is out
                // (Karpenter's `IsSpreadPlacementGroupLimitError`).
                if error
                    .error_message()
                    .is_some_and(|m| m.contains(SPREAD_LIMIT_MESSAGE))
                {
                    no_capacity.extend(
                        plan.overrides
                            .iter()
                            .filter(|p| {
                                p.zone == pool.zone && p.instance_type != pool.instance_type
                            })
                            .map(|p| p.key(plan.capacity_type)),
                    );
                }
                no_capacity.push(pool.key(plan.capacity_type));
                full_reservations.extend(pool.reservation_id);
            }
        } else if other_error.is_none() {
            other_error = Some((
                code.to_owned(),
                error.error_message().unwrap_or_default().to_owned(),
            ));
        }
    }
    Outcome {
        launched,
        no_capacity,
        full_reservations,
        other_error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(instance_type: &str, zone: &str) -> LaunchOverride {
        LaunchOverride {
            instance_type: instance_type.into(),
            zone: zone.into(),
            subnet_id: format!("subnet-{zone}"),
            image_id: "ami-1".into(),
            price: Some(0.1),
            reservation_id: None,
        }
    }

    fn plan() -> LaunchPlan {
        LaunchPlan {
            capacity_type: CapacityType::OnDemand,
            overrides: vec![
                pool("c5.large", "us-west-2a"),
                pool("m5.large", "us-west-2a"),
            ],
            prioritized: false,
        }
    }

    fn answered(instance_type: &str, zone: &str) -> ec2::LaunchTemplateAndOverridesResponse {
        ec2::LaunchTemplateAndOverridesResponse::builder()
            .overrides(
                ec2::FleetLaunchTemplateOverrides::builder()
                    .instance_type(ec2::InstanceType::from(instance_type))
                    .subnet_id(format!("subnet-{zone}"))
                    .build(),
            )
            .build()
    }

    fn error(code: &str, instance_type: &str) -> ec2::CreateFleetError {
        ec2::CreateFleetError::builder()
            .error_code(code)
            .error_message("no")
            .launch_template_and_overrides(answered(instance_type, "us-west-2a"))
            .build()
    }

    fn client() -> aws_sdk_ec2::Client {
        aws_sdk_ec2::Client::from_conf(
            aws_sdk_ec2::Config::builder()
                .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
                .region(aws_sdk_ec2::config::Region::new("us-west-2"))
                .build(),
        )
    }

    // Karpenter's instance provider suite: "should use prioritized allocation strategy for on-demand when node
    // overlay is applied" and its spot, no-overlay counterparts.
    #[test]
    fn a_plan_with_overlaid_prices_asks_ec2_to_follow_the_priorities() {
        for (capacity_type, prioritized) in [
            (CapacityType::OnDemand, true),
            (CapacityType::OnDemand, false),
            (CapacityType::Spot, true),
            (CapacityType::Spot, false),
        ] {
            let plan = LaunchPlan {
                capacity_type,
                prioritized,
                ..plan()
            };
            let templates = [TemplateOverrides {
                template_name: "t".into(),
                overrides: plan.overrides.iter().collect(),
            }];
            let input = request(&client(), &plan, None, &templates, &BTreeMap::new(), None)
                .as_input()
                .clone();
            let on_demand = input
                .get_on_demand_options()
                .as_ref()
                .and_then(|o| o.allocation_strategy().cloned());
            let spot = input
                .get_spot_options()
                .as_ref()
                .and_then(|o| o.allocation_strategy().cloned());
            match (capacity_type, prioritized) {
                (CapacityType::OnDemand, true) => assert_eq!(
                    on_demand,
                    Some(ec2::FleetOnDemandAllocationStrategy::Prioritized)
                ),
                (CapacityType::OnDemand, false) => assert_eq!(
                    on_demand,
                    Some(ec2::FleetOnDemandAllocationStrategy::LowestPrice)
                ),
                (_, true) => assert_eq!(
                    spot,
                    Some(ec2::SpotAllocationStrategy::CapacityOptimizedPrioritized)
                ),
                (_, false) => assert_eq!(
                    spot,
                    Some(ec2::SpotAllocationStrategy::PriceCapacityOptimized)
                ),
            }
        }
    }

    #[test]
    fn the_class_s_context_is_the_request_s_context() {
        let plan = plan();
        let templates = [TemplateOverrides {
            template_name: "karpenter.k8s.aws/0123456789abcdef".into(),
            overrides: plan.overrides.iter().collect(),
        }];
        let tags = BTreeMap::from([("team".to_owned(), "e2e".to_owned())]);
        let with = request(&client(), &plan, None, &templates, &tags, Some("ctx-0123"));
        let input = with.as_input();
        assert_eq!(input.get_context().as_deref(), Some("ctx-0123"));
        assert_eq!(input.get_type(), &Some(ec2::FleetType::Instant));
        let configs = input.get_launch_template_configs().as_deref().unwrap();
        assert_eq!(configs[0].overrides().len(), 2);

        let without = request(&client(), &plan, None, &templates, &tags, None);
        assert_eq!(without.as_input().get_context(), &None);
    }

    #[test]
    fn a_reserved_plan_launches_in_its_market() {
        let plan = LaunchPlan {
            capacity_type: CapacityType::Reserved,
            overrides: vec![LaunchOverride {
                reservation_id: Some("cr-1".into()),
                ..pool("m5.large", "us-west-2a")
            }],
            prioritized: false,
        };
        let templates = [TemplateOverrides {
            template_name: "karpenter.k8s.aws/0123456789abcdef".into(),
            overrides: plan.overrides.iter().collect(),
        }];
        let input = |market| {
            request(&client(), &plan, market, &templates, &BTreeMap::new(), None)
                .as_input()
                .clone()
        };
        let target =
            |input: &aws_sdk_ec2::operation::create_fleet::builders::CreateFleetInputBuilder| {
                input
                    .get_target_capacity_specification()
                    .as_ref()
                    .and_then(|t| t.default_target_capacity_type().cloned())
            };
        let odcr = input(Some(ReservedMarket::Default));
        assert_eq!(
            target(&odcr),
            Some(ec2::DefaultTargetCapacityType::OnDemand)
        );
        assert_eq!(
            odcr.get_on_demand_options()
                .as_ref()
                .and_then(|o| o.allocation_strategy().cloned()),
            Some(ec2::FleetOnDemandAllocationStrategy::LowestPrice)
        );
        let block = input(Some(ReservedMarket::CapacityBlock));
        assert_eq!(
            target(&block),
            Some(ec2::DefaultTargetCapacityType::CapacityBlock)
        );
        assert!(block.get_on_demand_options().is_none());
        let interruptible = input(Some(ReservedMarket::Interruptible));
        assert_eq!(
            target(&interruptible),
            Some(ec2::DefaultTargetCapacityType::ReservedCapacity)
        );
        assert_eq!(
            interruptible
                .get_reserved_capacity_options()
                .as_ref()
                .map(|o| o.reservation_types().to_vec()),
            Some(vec![
                ec2::FleetReservationType::InterruptibleCapacityReservation
            ])
        );
    }

    #[test]
    fn an_instance_after_an_ice_is_launched_and_the_ice_reported() {
        let instance = ec2::CreateFleetInstance::builder()
            .instance_ids("i-1")
            .instance_type(ec2::InstanceType::M5Large)
            .launch_template_and_overrides(answered("m5.large", "us-west-2a"))
            .build();
        let out = outcome(
            &plan(),
            &[instance],
            &[error("InsufficientInstanceCapacity", "c5.large")],
        );
        assert_eq!(
            out.launched,
            Some(("i-1".into(), pool("m5.large", "us-west-2a")))
        );
        assert_eq!(out.no_capacity.len(), 1);
        assert_eq!(
            out.no_capacity[0].to_string(),
            "on-demand:c5.large:us-west-2a"
        );
        assert_eq!(out.other_error, None);
    }

    /// Upstream instance provider suite ("should mark all instance types in the AZ as unavailable when the spread
    /// placement group limit is reached"): the limit is per zone, so every type of the zone is out, not just the
    /// one named; other zones are not.
    #[test]
    fn a_full_spread_group_puts_every_type_of_its_zone_out_of_capacity() {
        let mut plan = plan();
        plan.overrides.push(pool("m5.large", "us-west-2b"));
        let full = ec2::CreateFleetError::builder()
            .error_code("InsufficientInstanceCapacity")
            .error_message(
                "You've reached the limit of instances in this spread placement group. A spread placement group \
                 can have up to seven instances per Availability Zone.",
            )
            .launch_template_and_overrides(answered("c5.large", "us-west-2a"))
            .build();
        let outcome = outcome(&plan, &[], &[full]);
        let mut out: Vec<(String, String)> = outcome
            .no_capacity
            .iter()
            .map(|k| (k.instance_type.clone(), k.zone.clone()))
            .collect();
        out.sort();
        assert_eq!(
            out,
            [
                ("c5.large".to_owned(), "us-west-2a".to_owned()),
                ("m5.large".to_owned(), "us-west-2a".to_owned())
            ]
        );
        let plain = outcome_of_ice(&plan);
        assert_eq!(plain, 1, "an ordinary ICE marks the one type");
    }

    fn outcome_of_ice(plan: &LaunchPlan) -> usize {
        outcome(
            plan,
            &[],
            &[error("InsufficientInstanceCapacity", "c5.large")],
        )
        .no_capacity
        .len()
    }

    #[test]
    fn other_errors_are_kept_apart_from_capacity_errors() {
        let out = outcome(
            &plan(),
            &[],
            &[
                error("UnfulfillableCapacity", "c5.large"),
                error("InvalidParameterValue", "m5.large"),
            ],
        );
        assert_eq!(out.launched, None);
        assert_eq!(out.no_capacity.len(), 1);
        assert_eq!(
            out.other_error,
            Some(("InvalidParameterValue".into(), "no".into()))
        );
    }
}
