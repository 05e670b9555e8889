//! What the provider's unit tests share: an [`AwsCloud`] whose EC2 client answers from `aws-smithy-mocks` rules
//! (no server, no credentials), and a launch request for one small class.

use super::*;
use aws_sdk_ec2::config::retry::RetryConfig;
use aws_smithy_mocks::{create_mock_http_client, MockResponseInterceptor, Rule, RuleMode};
use kerf_core::api::nodeclaim::NodeClaim;
use kerf_core::catalog::{Catalog, Pricing};
use std::time::Duration;

pub(super) const CLUSTER: &str = "test-cluster";
pub(super) const REGION: &str = "us-west-2";

/// On-demand and spot prices of the types the tests launch (c5.large is the cheaper).
const PRICES: &str = r#"{
  "onDemandUsdPerHour": {"us-west-2": {"m5.large": 0.096, "c5.large": 0.085}},
  "spotUsdPerHour": {"us-west-2": {"m5.large": 0.04, "c5.large": 0.035}}
}"#;

pub(super) fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// The EC2 answer of an error with `code`, as EC2's query protocol writes it.
pub(super) fn ec2_error_body(code: &str) -> String {
    format!(
        "<Response><Errors><Error><Code>{code}</Code><Message>scripted {code}</Message></Error></Errors>\
         <RequestID>r-1</RequestID></Response>"
    )
}

/// An EC2 client answering from `rules` (any rule that matches, in order), with `retry` as its retry
/// configuration and `interceptor` (kerf's per-API attempts) if given.
pub(super) fn ec2_with(
    rules: &[&Rule],
    retry: RetryConfig,
    attempts: Option<AttemptsPerApi>,
) -> aws_sdk_ec2::Client {
    let mut mocks = MockResponseInterceptor::new().rule_mode(RuleMode::MatchAny);
    for rule in rules {
        mocks = mocks.with_rule(rule);
    }
    let mut config = aws_sdk_ec2::Config::builder()
        .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
        .region(aws_sdk_ec2::config::Region::new(REGION))
        .credentials_provider(aws_sdk_ec2::config::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .http_client(create_mock_http_client())
        .retry_config(retry)
        .interceptor(mocks);
    if let Some(attempts) = attempts {
        config = config.interceptor(attempts);
    }
    aws_sdk_ec2::Client::from_conf(config.build())
}

/// An EC2 client answering from `rules`, without retries.
pub(super) fn ec2(rules: &[&Rule]) -> aws_sdk_ec2::Client {
    ec2_with(rules, RetryConfig::disabled(), None)
}

pub(super) fn cluster() -> ClusterInfo {
    ClusterInfo {
        name: CLUSTER.into(),
        endpoint: "https://127.0.0.1:6443".into(),
        ca_bundle: Some("Q0E=".into()),
        cidr: Some("10.100.0.0/16".into()),
        dns_ip: None,
    }
}

/// kerf's settings for a cluster in us-west-2 with no route to the Price List API.
pub(super) fn settings() -> AwsSettings {
    let mut settings = AwsSettings::new(cluster(), "1.32");
    settings.region = Some(REGION.into());
    settings.isolated_vpc = true;
    settings
}

/// The cloud on `ec2`, as [`AwsCloud::connect`] builds it (SSM and IAM answer nothing: no test calls them).
pub(super) fn cloud(ec2: aws_sdk_ec2::Client) -> AwsCloud {
    let settings = settings();
    let budget = Arc::new(ApiBudget::new(settings.api_rate_limits.clone()));
    let credentials = aws_sdk_ec2::config::Credentials::new("test", "test", None, None, "test");
    let ssm = aws_sdk_ssm::Client::from_conf(
        aws_sdk_ssm::Config::builder()
            .behavior_version(aws_sdk_ssm::config::BehaviorVersion::latest())
            .region(aws_sdk_ssm::config::Region::new(REGION))
            .credentials_provider(credentials.clone())
            .http_client(create_mock_http_client())
            .build(),
    );
    let iam = aws_sdk_iam::Client::from_conf(
        aws_sdk_iam::Config::builder()
            .behavior_version(aws_sdk_iam::config::BehaviorVersion::latest())
            .region(aws_sdk_iam::config::Region::new(REGION))
            .credentials_provider(credentials)
            .http_client(create_mock_http_client())
            .build(),
    );
    AwsCloud::from_clients(
        Clients {
            ec2,
            ssm,
            iam,
            pricing: None,
        },
        settings,
        REGION.into(),
        budget,
        (None, ZonalShifts::default()),
    )
}

pub(super) fn spec() -> EC2NodeClassSpec {
    serde_json::from_value(serde_json::json!({
        "role": "KarpenterNodeRole",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
        "tags": {"team": "a"},
    }))
    .expect("a class spec")
}

/// Class `default` resolved to one subnet per zone of `zones`, one security group and one x86 image.
pub(super) fn node_class(zones: &[&str]) -> NodeClass {
    let resolved = ResolvedNodeClass {
        subnets: zones
            .iter()
            .map(|zone| ResolvedSubnet {
                subnet: Subnet {
                    id: format!("subnet-{zone}"),
                    zone: (*zone).into(),
                    zone_id: None,
                },
                available_ips: 4000,
            })
            .collect(),
        security_groups: vec![SecurityGroup {
            id: "sg-1".into(),
            name: Some("nodes".into()),
        }],
        amis: vec![ResolvedAmi {
            id: "ami-x86".into(),
            name: None,
            architecture: "x86_64".into(),
            creation_date: Some("2026-01-01T00:00:00Z".into()),
            variants: Vec::new(),
            deprecated: false,
        }],
        instance_profile: Some("test-profile".into()),
        capacity_reservations: Some(Vec::new()),
        placement_group: None,
    };
    NodeClass::ready("default", &spec(), resolved).expect("a ready class")
}

/// c5.large and m5.large of the embedded us-west-2 catalog, priced from [`PRICES`].
pub(super) fn instance_types() -> Vec<InstanceType> {
    let pricing = Pricing::from_json(PRICES).expect("prices");
    let catalog =
        Catalog::embedded(REGION, &CatalogSettings::default(), &pricing).expect("catalog");
    catalog
        .instance_types
        .into_iter()
        .filter(|it| ["m5.large", "c5.large"].contains(&it.name.as_str()))
        .collect()
}

/// The launch of NodeClaim `default-abc12` (NodePool `default`) of class [`node_class`] with subnets in
/// `zones`, allowing c5.large and m5.large with `capacity_type` in those zones.
pub(super) fn request(capacity_type: &str, zones: &[&str]) -> LaunchRequest<'static> {
    let claim: NodeClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "default-abc12", "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In",
                 "values": ["m5.large", "c5.large"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity_type]},
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": zones},
            ],
        },
    }))
    .expect("a claim");
    let types = instance_types();
    LaunchRequest::from_node_claim(&claim, node_class(zones), &types)
        .expect("a request")
        .into_owned()
}
