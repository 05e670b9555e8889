use super::*;
use crate::api::ec2nodeclass::EC2NodeClassStatus;
use crate::catalog::{CatalogSettings, Pricing};
use crate::cloud::{ResolvedAmi, ResolvedNodeClass};
use serde_json::json;

fn class(spec: serde_json::Value) -> EC2NodeClass {
    let mut base = json!({"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "R",
                              "subnetSelectorTerms": [{"tags": {"k": "v"}}],
                              "securityGroupSelectorTerms": [{"tags": {"k": "v"}}]});
    if let (Some(base), serde_json::Value::Object(extra)) = (base.as_object_mut(), spec) {
        base.extend(extra);
    }
    serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default", "generation": 1}, "spec": base,
    }))
    .expect("an EC2NodeClass")
}

fn conditions(statuses: &[(&str, &str)]) -> Vec<Condition> {
    let mut conditions = Vec::new();
    for (type_, status) in statuses {
        condition::set_status(&mut conditions, type_, status, "r", "", "t", Some(1));
    }
    conditions
}

fn resolved_deps() -> Vec<Condition> {
    conditions(&DEPENDENCIES.map(|t| (t, TRUE)))
}

/// Karpenter's validation suite, "Preconditions": a required condition False makes the validation False,
/// one Unknown (or missing) makes it Unknown, both with `DependenciesNotReady`.
#[test]
fn validation_waits_for_the_resolution_it_needs() {
    let good = class(json!({}));
    assert_eq!(precheck(&good, &resolved_deps()), None);
    for dependency in DEPENDENCIES {
        let mut failed = resolved_deps();
        condition::set_status(&mut failed, dependency, FALSE, "r", "", "t", Some(1));
        let verdict = precheck(&good, &failed).expect("a verdict");
        assert_eq!(
            (verdict.status, verdict.reason.as_str()),
            (FALSE, "DependenciesNotReady")
        );
        assert_eq!(
            verdict.message,
            "Awaiting AMI, Instance Profile, Security Group, and Subnet resolution"
        );
        let mut unknown = resolved_deps();
        condition::set_status(&mut unknown, dependency, UNKNOWN, "r", "", "t", Some(1));
        let verdict = precheck(&good, &unknown).expect("a verdict");
        assert_eq!(
            (verdict.status, verdict.reason.as_str()),
            (UNKNOWN, "DependenciesNotReady")
        );
    }
    let missing = conditions(&[(AMIS_READY, TRUE)]);
    assert_eq!(precheck(&good, &missing).map(|v| v.status), Some(UNKNOWN));
}

/// Karpenter's validation suite, "Tag Validation": each tag kerf sets itself fails the validation with
/// `TagValidationFailed`; valid tags pass. A class that breaks another admission rule fails too (kerf).
#[test]
fn restricted_tags_and_admission_rules_fail_the_validation() {
    for key in [
        "kubernetes.io/cluster/acluster",
        "karpenter.sh/nodepool",
        "eks:eks-cluster-name",
        "karpenter.k8s.aws/ec2nodeclass",
        "karpenter.sh/nodeclaim",
    ] {
        let tagged = class(json!({"tags": {key: "v"}}));
        let verdict = precheck(&tagged, &resolved_deps()).expect(key);
        assert_eq!(
            (verdict.status, verdict.reason.as_str()),
            (FALSE, "TagValidationFailed")
        );
        assert_eq!(
            verdict.message,
            format!("tags failed validation requirements (tags=\"{key}\")")
        );
    }
    let fine = class(json!({"tags": {"team": "a", "kubernetes.io/cluster/-x": "y"}}));
    assert_eq!(restricted_tags(&fine), None);
    let invalid = class(json!({"amiSelectorTerms": [{"alias": "al2023@latest", "id": "ami-1"}]}));
    let verdict = precheck(&invalid, &resolved_deps()).expect("invalid");
    assert_eq!(
        (verdict.status, verdict.reason.as_str()),
        (FALSE, "EC2NodeClassValidationFailed")
    );
    assert!(
        verdict.message.contains("mutually exclusive"),
        "{}",
        verdict.message
    );
}

/// Karpenter's validation suite: a refusal is kept ("Even though we would succeed on the subsequent call,
/// we should fail here because we hit the cache"), until the class or its resolution changes ("should not
/// skip validation when new annotation is added") or it is deleted ("should clear the validation cache
/// when the nodeclass is deleted"), or the answer is older than the TTL.
#[test]
fn a_check_is_kept_for_what_the_class_is() {
    let checks = Checks::default();
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let plain = class(json!({}));
    let status = EC2NodeClassStatus::default();
    let key = check_key(&plain, &status);
    let refused = Verdict::failed("CreateFleetAuthCheckFailed", "m");
    checks.put("default", key, refused.clone(), t0);
    assert_eq!(
        checks.get("default", key, t0 + Duration::from_secs(60)),
        Some(refused)
    );
    assert_eq!(checks.get("default", key, t0 + CHECK_TTL), None);
    let mut annotated = plain.clone();
    annotated.metadata.annotations = Some([("a".to_owned(), "b".to_owned())].into());
    assert_ne!(check_key(&annotated, &status), key);
    let resolved = EC2NodeClassStatus {
        instance_profile: Some("p".into()),
        ..EC2NodeClassStatus::default()
    };
    assert_ne!(check_key(&plain, &resolved), key);
    checks.forget("default");
    assert_eq!(checks.get("default", key, t0), None);
}

fn node_class(architectures: &[&str]) -> NodeClass {
    NodeClass {
        name: "default".into(),
        spec: class(json!({})).spec,
        resolved: ResolvedNodeClass {
            amis: architectures
                .iter()
                .map(|a| ResolvedAmi {
                    id: format!("ami-{a}"),
                    name: None,
                    architecture: (*a).to_owned(),
                    creation_date: None,
                    variants: Vec::new(),
                    deprecated: false,
                })
                .collect(),
            ..ResolvedNodeClass::default()
        },
    }
}

fn types(names: &[&str]) -> Vec<InstanceType> {
    let catalog = Catalog::embedded(
        "us-west-2",
        &CatalogSettings::default(),
        &Pricing::snapshot(),
    )
    .expect("catalog");
    catalog
        .instance_types
        .into_iter()
        .filter(|t| names.contains(&t.name.as_str()))
        .collect()
}

fn pool(requirements: serde_json::Value) -> Arc<NodePool> {
    Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
                "spec": {"template": {"spec": {"requirements": requirements,
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}},
            }))
            .expect("a NodePool"),
        )
}

fn name(it: Option<InstanceType>) -> Option<String> {
    it.map(|it| it.name)
}

/// Karpenter's validation suite, "NodeClass Filtering" and "Instance Type Prioritization Validation": a
/// type the class's NodePools launch, non-GPU first ("should prioritize non-GPU instances", "should
/// fallback to GPU instances when no non-GPU instances exist"); m5.large or m6g.large when the pools allow
/// none ("should succeed validation using fallback instance types when NodePool requirements are
/// incompatible with NodeClass AMI"); only types the class has an image for.
#[test]
fn the_check_launches_a_type_the_pools_would() {
    let offered = types(&[
        "c5.large",
        "g4dn.xlarge",
        "m5.large",
        "m6g.large",
        "m6g.xlarge",
    ]);
    let both = node_class(&["x86_64", "arm64"]);
    let gpu_or_c5 = pool(
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                      "values": ["g4dn.xlarge", "c5.large"]}]),
    );
    assert_eq!(
        name(candidate(&both, offered.clone(), &[gpu_or_c5])),
        Some("c5.large".to_owned())
    );
    let gpu_only = pool(
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                    "values": ["g4dn.xlarge"]}]),
    );
    assert_eq!(
        name(candidate(&both, offered.clone(), &[gpu_only])),
        Some("g4dn.xlarge".to_owned())
    );
    let nothing = pool(
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                   "values": ["x9.huge"]}]),
    );
    assert_eq!(
        name(candidate(
            &both,
            offered.clone(),
            std::slice::from_ref(&nothing)
        )),
        Some("m5.large".to_owned())
    );
    assert_eq!(
        name(candidate(&both, offered.clone(), &[])),
        Some("m5.large".to_owned())
    );
    // Only arm64 images: the arm64 fallback.
    let arm = node_class(&["arm64"]);
    assert_eq!(
        name(candidate(&arm, offered.clone(), &[nothing])),
        Some("m6g.large".to_owned())
    );
    // A pool of another class does not count.
    let mut other = (*pool(json!([]))).clone();
    other.spec.template.spec.node_class_ref.name = "other".into();
    assert_eq!(
        name(candidate(&arm, offered.clone(), &[Arc::new(other)])),
        Some("m6g.large".to_owned())
    );
    // Neither fallback offered: the cheapest.
    let few = types(&["c5.large", "m6g.xlarge"]);
    assert_eq!(
        name(candidate(&both, few.clone(), &[])),
        Some("c5.large".to_owned())
    );
    assert_eq!(name(candidate(&node_class(&[]), few, &[])), None);
}

#[test]
fn the_check_is_one_on_demand_launch_without_labels() {
    let offered = types(&["m5.large"]);
    let request = launch_request(node_class(&["x86_64"]), &offered[0]);
    assert_eq!(request.instance_types.len(), 1);
    assert_eq!(
        request
            .requirements
            .get(labels::CAPACITY_TYPE)
            .and_then(|r| r.any())
            .as_deref(),
        Some("on-demand")
    );
    assert!(request.labels.is_empty() && request.taints.is_empty());
    let refusal = LaunchRefusal::new(
        crate::cloud::RefusedCall::CreateFleet,
        "UnauthorizedOperation",
        "",
    );
    let verdict = Verdict::of(Some(&refusal));
    assert_eq!(
            verdict.condition(),
            (
                "ValidationSucceeded",
                FALSE,
                "CreateFleetAuthCheckFailed",
                "Controller isn't authorized to call ec2:CreateFleet: User is not authorized to perform this \
                 operation because no identity-based policy allows it"
            )
        );
    assert_eq!(Verdict::of(None), Verdict::succeeded());
    let unresolved = Verdict::unresolved("something else");
    assert_eq!(
        (
            unresolved.status,
            unresolved.reason.as_str(),
            unresolved.message.as_str()
        ),
        (
            UNKNOWN,
            "DependenciesNotReady",
            "Awaiting AMI, Instance Profile, Security Group, and Subnet resolution: something else"
        )
    );
}
