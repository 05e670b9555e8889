use super::super::testing::{self, t0};
use super::*;
use aws_sdk_ec2::operation::create_fleet::{CreateFleetError, CreateFleetInput, CreateFleetOutput};
use aws_sdk_ec2::operation::create_launch_template::{
    CreateLaunchTemplateError, CreateLaunchTemplateInput, CreateLaunchTemplateOutput,
};
use aws_smithy_mocks::{mock, MockResponse, Rule};

const ZONE: &str = "us-west-2a";

/// The requests EC2 saw.
#[derive(Default)]
struct Seen {
    templates: Mutex<Vec<CreateLaunchTemplateInput>>,
    fleets: Mutex<Vec<CreateFleetInput>>,
}

/// CreateLaunchTemplate that creates what it is asked, or answers `code` once when given.
fn templates_rule(seen: &Arc<Seen>, code: Option<&'static str>) -> Rule {
    let seen = seen.clone();
    mock!(aws_sdk_ec2::Client::create_launch_template).then_compute_response(move |input| {
        let mut templates = seen.templates.lock().unwrap();
        templates.push(input.clone());
        match code {
            Some(code) if templates.len() == 1 => {
                MockResponse::Error(CreateLaunchTemplateError::generic(
                    aws_sdk_ec2::error::ErrorMetadata::builder()
                        .code(code)
                        .build(),
                ))
            }
            _ => MockResponse::Output(CreateLaunchTemplateOutput::builder().build()),
        }
    })
}

/// CreateFleet answering the n-th call (from 0) with `answer(n)`.
fn fleet_rule(
    seen: &Arc<Seen>,
    answer: impl Fn(usize) -> MockResponse<CreateFleetOutput, CreateFleetError> + Send + Sync + 'static,
) -> Rule {
    let seen = seen.clone();
    mock!(aws_sdk_ec2::Client::create_fleet).then_compute_response(move |input| {
        let mut fleets = seen.fleets.lock().unwrap();
        fleets.push(input.clone());
        answer(fleets.len() - 1)
    })
}

fn overrides(instance_type: &str) -> ec2::LaunchTemplateAndOverridesResponse {
    ec2::LaunchTemplateAndOverridesResponse::builder()
        .overrides(
            ec2::FleetLaunchTemplateOverrides::builder()
                .instance_type(ec2::InstanceType::from(instance_type))
                .subnet_id(format!("subnet-{ZONE}"))
                .availability_zone(ZONE)
                .build(),
        )
        .build()
}

/// Instance `id` of `instance_type` in [`ZONE`].
fn launched(id: &str, instance_type: &str) -> ec2::CreateFleetInstance {
    ec2::CreateFleetInstance::builder()
        .instance_ids(id)
        .instance_type(ec2::InstanceType::from(instance_type))
        .launch_template_and_overrides(overrides(instance_type))
        .build()
}

/// A CreateFleet error `code` for the pool of `instance_type` in [`ZONE`].
fn refused(code: &str, instance_type: &str) -> ec2::CreateFleetError {
    ec2::CreateFleetError::builder()
        .error_code(code)
        .error_message(format!("scripted {code}"))
        .launch_template_and_overrides(overrides(instance_type))
        .build()
}

fn answer(
    instances: Vec<ec2::CreateFleetInstance>,
    errors: Vec<ec2::CreateFleetError>,
) -> MockResponse<CreateFleetOutput, CreateFleetError> {
    MockResponse::Output(
        CreateFleetOutput::builder()
            .fleet_id("fleet-1")
            .set_instances(Some(instances))
            .set_errors(Some(errors))
            .build(),
    )
}

fn key(capacity_type: CapacityType, instance_type: &str) -> OfferingKey {
    OfferingKey {
        capacity_type,
        instance_type: instance_type.into(),
        zone: ZONE.into(),
    }
}

fn tags_of(spec: &ec2::TagSpecification) -> BTreeMap<&str, &str> {
    spec.tags()
        .iter()
        .filter_map(|t| Some((t.key()?, t.value()?)))
        .collect()
}

/// The pools of a CreateFleet request: (type, subnet, zone, image, priority) per override, in order.
fn pools(input: &CreateFleetInput) -> Vec<(String, String, String, String, Option<f64>)> {
    input.launch_template_configs()[0]
        .overrides()
        .iter()
        .map(|o| {
            (
                o.instance_type()
                    .map(|t| t.as_str().to_owned())
                    .unwrap_or_default(),
                o.subnet_id().unwrap_or_default().to_owned(),
                o.availability_zone().unwrap_or_default().to_owned(),
                o.image_id().unwrap_or_default().to_owned(),
                o.priority(),
            )
        })
        .collect()
}

fn pool(instance_type: &str, price: f64) -> (String, String, String, String, Option<f64>) {
    (
        instance_type.into(),
        format!("subnet-{ZONE}"),
        ZONE.into(),
        "ami-x86".into(),
        Some(price),
    )
}

/// Karpenter's instance provider "should use lowest price allocation stragaty by default for on-demand
/// nodeclaims": one instant fleet of one on-demand instance, lowest-price, from the launch template kerf
/// created for the configuration (once: the second launch reuses it), its overrides the plan's pools
/// cheapest first with their subnet, image and price as priority; the instance, its volumes and the fleet
/// tagged with the class's tags and kerf's own, the claim's included. The instance is the pool EC2 used.
#[tokio::test]
async fn an_on_demand_launch_asks_one_lowest_price_fleet_from_its_template() {
    let seen = Arc::new(Seen::default());
    let ec2 = testing::ec2(&[
        &templates_rule(&seen, None),
        &fleet_rule(&seen, |n| {
            answer(vec![launched(&format!("i-{n}"), "c5.large")], vec![])
        }),
    ]);
    let cloud = testing::cloud(ec2);
    let request = testing::request("on-demand", &[ZONE]);
    let instance = cloud.create(&request, t0()).await.expect("launched");
    cloud.create(&request, t0()).await.expect("launched again");

    let templates = seen.templates.lock().unwrap().clone();
    assert_eq!(templates.len(), 1, "the template is created once");
    let template = &templates[0];
    let data = template.launch_template_data().expect("template data");
    assert_eq!(data.image_id(), Some("ami-x86"));
    // The groups go on the template's network interface.
    let groups: Vec<&str> = data
        .network_interfaces()
        .iter()
        .flat_map(|i| i.groups())
        .map(String::as_str)
        .collect();
    assert_eq!(groups, ["sg-1"]);
    assert_eq!(
        data.iam_instance_profile().and_then(|p| p.name()),
        Some("test-profile")
    );
    let template_tags = tags_of(&template.tag_specifications()[0]);
    assert_eq!(template_tags.get("karpenter.sh/nodepool"), Some(&"default"));
    assert!(
        !template_tags.contains_key(TAG_NODECLAIM),
        "claims of one configuration share a template: {template_tags:?}"
    );

    let fleets = seen.fleets.lock().unwrap().clone();
    assert_eq!(fleets.len(), 2);
    let fleet = &fleets[0];
    assert_eq!(fleet.r#type(), Some(&ec2::FleetType::Instant));
    let target = fleet.target_capacity_specification().expect("a target");
    assert_eq!(target.total_target_capacity(), Some(1));
    assert_eq!(
        target.default_target_capacity_type(),
        Some(&ec2::DefaultTargetCapacityType::OnDemand)
    );
    assert_eq!(
        fleet
            .on_demand_options()
            .and_then(|o| o.allocation_strategy()),
        Some(&ec2::FleetOnDemandAllocationStrategy::LowestPrice)
    );
    assert!(fleet.spot_options().is_none());
    let config = &fleet.launch_template_configs()[0];
    let spec = config.launch_template_specification().expect("a template");
    assert_eq!(spec.launch_template_name(), template.launch_template_name());
    assert_eq!(spec.version(), Some("$Latest"));
    assert_eq!(
        pools(fleet),
        [pool("c5.large", 0.085), pool("m5.large", 0.096)]
    );
    let resources: Vec<_> = fleet
        .tag_specifications()
        .iter()
        .filter_map(|s| s.resource_type().cloned())
        .collect();
    assert_eq!(
        resources,
        [
            ec2::ResourceType::Instance,
            ec2::ResourceType::Volume,
            ec2::ResourceType::Fleet
        ]
    );
    for spec in fleet.tag_specifications() {
        let tags = tags_of(spec);
        assert_eq!(tags.get(TAG_NODECLAIM), Some(&"default-abc12"));
        assert_eq!(tags.get("karpenter.sh/nodepool"), Some(&"default"));
        assert_eq!(tags.get("team"), Some(&"a"));
        assert_eq!(
            tags.get("kubernetes.io/cluster/test-cluster"),
            Some(&"owned")
        );
    }

    assert_eq!(instance.id, "i-0");
    assert_eq!(instance.provider_id, "aws:///us-west-2a/i-0");
    assert_eq!(instance.instance_type, "c5.large");
    assert_eq!(instance.capacity_type, CapacityType::OnDemand);
    assert_eq!(instance.image_id, "ami-x86");
    assert_eq!(instance.subnet_id.as_deref(), Some("subnet-us-west-2a"));
    assert_eq!(instance.state, InstanceState::Pending);
}

/// Karpenter's instance provider "should use price capacity optimized allocation stragaty by default for spot
/// nodeclaims": a spot fleet, price-capacity-optimized, its pools prioritised by their spot prices.
#[tokio::test]
async fn a_spot_launch_asks_for_spot_price_capacity_optimized() {
    let seen = Arc::new(Seen::default());
    let ec2 = testing::ec2(&[
        &templates_rule(&seen, None),
        &fleet_rule(&seen, |_| answer(vec![launched("i-1", "c5.large")], vec![])),
    ]);
    let cloud = testing::cloud(ec2);
    let instance = cloud
        .create(&testing::request("spot", &[ZONE]), t0())
        .await
        .expect("launched");
    assert_eq!(instance.capacity_type, CapacityType::Spot);
    let fleet = seen.fleets.lock().unwrap()[0].clone();
    assert_eq!(
        fleet
            .target_capacity_specification()
            .and_then(|t| t.default_target_capacity_type()),
        Some(&ec2::DefaultTargetCapacityType::Spot)
    );
    assert_eq!(
        fleet.spot_options().and_then(|o| o.allocation_strategy()),
        Some(&ec2::SpotAllocationStrategy::PriceCapacityOptimized)
    );
    assert!(fleet.on_demand_options().is_none());
    assert_eq!(
        pools(&fleet),
        [pool("c5.large", 0.035), pool("m5.large", 0.04)]
    );
}

/// Karpenter's instance provider "should return an ICE error when all attempted instance types return an ICE
/// error": a fleet that answers only capacity errors fails the launch with insufficient capacity naming every
/// pool; the pools are unavailable from then on, so the next launch has nothing to ask EC2 for.
#[tokio::test]
async fn only_capacity_errors_fail_with_insufficient_capacity_and_mark_the_pools() {
    let seen = Arc::new(Seen::default());
    let ec2 = testing::ec2(&[
        &templates_rule(&seen, None),
        &fleet_rule(&seen, |_| {
            answer(
                vec![],
                vec![
                    refused("InsufficientInstanceCapacity", "c5.large"),
                    refused("InsufficientInstanceCapacity", "m5.large"),
                ],
            )
        }),
    ]);
    let cloud = testing::cloud(ec2);
    let request = testing::request("on-demand", &[ZONE]);
    let error = cloud.create(&request, t0()).await.unwrap_err();
    let ice = [
        key(CapacityType::OnDemand, "c5.large"),
        key(CapacityType::OnDemand, "m5.large"),
    ];
    match error {
        CloudError::InsufficientCapacity { offerings } => assert_eq!(offerings, ice),
        other => panic!("{other}"),
    }
    for key in &ice {
        assert!(lock(&cloud.ice).is_unavailable(key, t0()), "{key:?}");
    }
    let error = cloud.create(&request, t0()).await.unwrap_err();
    assert!(
        matches!(error, CloudError::InsufficientCapacity { .. }),
        "{error}"
    );
    assert_eq!(
        seen.fleets.lock().unwrap().len(),
        1,
        "no pool was left to ask for"
    );
}

/// A fleet that launched an instance in one pool and reported no capacity in another: the instance is the
/// launch, and the pool without capacity is left out of the next launches (Karpenter's instance type
/// provider "should launch instances of different type on second reconciliation attempt with Insufficient
/// Capacity Error Cache fallback").
#[tokio::test]
async fn an_instance_next_to_capacity_errors_is_the_launch_and_the_errors_are_remembered() {
    let seen = Arc::new(Seen::default());
    let ec2 = testing::ec2(&[
        &templates_rule(&seen, None),
        &fleet_rule(&seen, |n| match n {
            0 => answer(
                vec![launched("i-1", "m5.large")],
                vec![refused("InsufficientInstanceCapacity", "c5.large")],
            ),
            _ => answer(vec![launched("i-2", "m5.large")], vec![]),
        }),
    ]);
    let cloud = testing::cloud(ec2);
    let request = testing::request("on-demand", &[ZONE]);
    let instance = cloud.create(&request, t0()).await.expect("launched");
    assert_eq!(
        (instance.id.as_str(), instance.instance_type.as_str()),
        ("i-1", "m5.large")
    );
    assert!(lock(&cloud.ice).is_unavailable(&key(CapacityType::OnDemand, "c5.large"), t0()));
    assert!(!lock(&cloud.ice).is_unavailable(&key(CapacityType::OnDemand, "m5.large"), t0()));
    cloud.create(&request, t0()).await.expect("launched again");
    let fleets = seen.fleets.lock().unwrap().clone();
    assert_eq!(pools(&fleets[1]), [pool("m5.large", 0.096)]);
}

/// Karpenter's instance provider "should not mark capacity reservations unavailable for RequestLimitExceeded
/// CreateFleet errors": a throttled fleet is an API error naming the code, and no offering is marked
/// unavailable (the next launch asks for the same pools).
#[tokio::test]
async fn a_throttled_fleet_is_an_api_error_that_marks_nothing() {
    let seen = Arc::new(Seen::default());
    let ec2 = testing::ec2(&[
        &templates_rule(&seen, None),
        &fleet_rule(&seen, |_| {
            answer(vec![], vec![refused("RequestLimitExceeded", "c5.large")])
        }),
    ]);
    let cloud = testing::cloud(ec2);
    let request = testing::request("on-demand", &[ZONE]);
    for _ in 0..2 {
        let error = cloud.create(&request, t0()).await.unwrap_err();
        match error {
            CloudError::Api {
                operation, code, ..
            } => assert_eq!(
                (operation, code.as_str()),
                ("CreateFleet", "RequestLimitExceeded")
            ),
            other => panic!("{other}"),
        }
    }
    assert!(!lock(&cloud.ice).is_unavailable(&key(CapacityType::OnDemand, "c5.large"), t0()));
    let fleets = seen.fleets.lock().unwrap().clone();
    assert_eq!(pools(&fleets[1]), pools(&fleets[0]));
    assert_eq!(pools(&fleets[1]).len(), 2);
}

/// A launch template deleted behind kerf's back (CreateFleet answers `InvalidLaunchTemplateName.
/// NotFoundException`) is created again and the launch tried once more; one made by another replica first
/// (`AlreadyExistsException`) counts as made.
#[tokio::test]
async fn a_missing_template_is_made_again_and_an_existing_one_is_used() {
    let seen = Arc::new(Seen::default());
    let missing = || {
        MockResponse::Error(CreateFleetError::generic(
            aws_sdk_ec2::error::ErrorMetadata::builder()
                .code("InvalidLaunchTemplateName.NotFoundException")
                .message("no such template")
                .build(),
        ))
    };
    let ec2 = testing::ec2(&[
        &templates_rule(
            &seen,
            Some("InvalidLaunchTemplateName.AlreadyExistsException"),
        ),
        &fleet_rule(&seen, move |n| match n {
            0 => missing(),
            _ => answer(vec![launched("i-1", "c5.large")], vec![]),
        }),
    ]);
    let cloud = testing::cloud(ec2);
    let instance = cloud
        .create(&testing::request("on-demand", &[ZONE]), t0())
        .await
        .expect("launched on the second try");
    assert_eq!(instance.id, "i-1");
    let names: Vec<_> = seen
        .templates
        .lock()
        .unwrap()
        .iter()
        .map(|t| t.launch_template_name().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(names.len(), 2, "made again after the fleet missed it");
    assert_eq!(names[0], names[1]);
    assert_eq!(seen.fleets.lock().unwrap().len(), 2);
}
