//! EC2NodeClass admission rules (api-rules.md §3), table-driven: every rule has at least one case it rejects,
//! with the full rendered error, and one it accepts. Cases are small changes to a valid EC2NodeClass.
//! Constraints the CRD schema carries (enums, patterns, bounds, sizes, defaults) are checked on `crd()`.

use kerf::api::ec2nodeclass::{
    default_ec2nodeclass, default_metadata_options, validate_ec2nodeclass, EC2NodeClass,
    EVICTION_THRESHOLD_PATTERN, VOLUME_SIZE_PATTERN,
};
use kerf::api::validation::grammar::QUANTITY_PATTERN;
use kerf::api::validation::Findings;
use kube::CustomResourceExt;
use regex::Regex;
use serde_json::{json, Value};

/// A valid EC2NodeClass: an AL2023 alias, a role, and subnets and security groups by tag.
fn base() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-demo",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        },
    })
}

/// One rule case: `spec` is merged into the base spec field by field (`null` removes a field), and the object
/// must produce exactly `errors`, rendered `<path>: <reason>`, in this order.
struct Case {
    name: &'static str,
    spec: Value,
    errors: &'static [&'static str],
}

fn case(name: &'static str, spec: Value, errors: &'static [&'static str]) -> Case {
    Case { name, spec, errors }
}

fn object_with(spec_patch: &Value) -> Value {
    let mut object = base();
    if let (Some(spec), Some(patch)) = (object["spec"].as_object_mut(), spec_patch.as_object()) {
        for (field, value) in patch {
            if value.is_null() {
                spec.remove(field);
            } else {
                spec.insert(field.clone(), value.clone());
            }
        }
    }
    object
}

fn findings_for(spec_patch: &Value) -> Findings {
    let nc: EC2NodeClass =
        serde_json::from_value(object_with(spec_patch)).expect("case parses as an EC2NodeClass");
    let mut findings = Findings::default();
    validate_ec2nodeclass(&nc, &mut findings);
    findings
}

/// Runs every case and reports all mismatches at once.
fn run(cases: Vec<Case>) {
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| {
            let got: Vec<String> = findings_for(&c.spec)
                .errors
                .iter()
                .map(ToString::to_string)
                .collect();
            (got != c.errors)
                .then(|| format!("{}:\n  want {:#?}\n  got  {:#?}", c.name, c.errors, got))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn the_base_object_is_valid() {
    assert_eq!(findings_for(&json!({})), Findings::default());
}

#[test]
fn ami_selector_terms() {
    run(vec![
        case(
            "a term needs a selecting field; owner alone is not enough",
            json!({"amiFamily": "AL2023", "amiSelectorTerms": [{"owner": "self"}]}),
            &[
                r#"spec.amiSelectorTerms: Invalid value: "array": expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']"#,
            ],
        ),
        case(
            "an ssmParameter term selects",
            json!({"amiFamily": "AL2023", "amiSelectorTerms": [{"ssmParameter": "/my/ami"}]}),
            &[],
        ),
        case(
            "id with another field",
            json!({"amiFamily": "AL2023", "amiSelectorTerms": [{"id": "ami-0abc", "name": "my-ami"}]}),
            &[
                r#"spec.amiSelectorTerms: Invalid value: "array": 'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"#,
            ],
        ),
        case(
            "id beside ssmParameter",
            json!({"amiFamily": "AL2023", "amiSelectorTerms": [{"id": "ami-0abc", "ssmParameter": "/my/ami"}]}),
            &[],
        ),
        case(
            "alias with another field",
            json!({"amiSelectorTerms": [{"alias": "al2023@latest", "owner": "self"}]}),
            &[
                r#"spec.amiSelectorTerms: Invalid value: "array": 'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"#,
            ],
        ),
        case(
            "alias beside ssmParameter",
            json!({"amiSelectorTerms": [{"alias": "al2023@latest", "ssmParameter": "/p"}]}),
            &[],
        ),
        case(
            "alias with another term",
            json!({"amiSelectorTerms": [{"alias": "al2023@latest"}, {"tags": {"team": "a"}}]}),
            &[
                r#"spec.amiSelectorTerms: Invalid value: "array": 'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms"#,
            ],
        ),
        case(
            "several terms without an alias",
            json!({"amiFamily": "AL2", "amiSelectorTerms": [{"name": "a"}, {"tags": {"team": "a"}}]}),
            &[],
        ),
        case(
            "every term rule is reported",
            json!({"amiFamily": "AL2023", "amiSelectorTerms": [{"owner": "self"}, {"id": "ami-1", "alias": "al2023@latest"}]}),
            &[
                r#"spec.amiSelectorTerms: Invalid value: "array": expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']"#,
                r#"spec.amiSelectorTerms: Invalid value: "array": 'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"#,
                r#"spec.amiSelectorTerms: Invalid value: "array": 'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"#,
                r#"spec.amiSelectorTerms: Invalid value: "array": 'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms"#,
            ],
        ),
    ]);
}

#[test]
fn ami_aliases() {
    run(vec![
        case(
            "not family@version",
            json!({"amiSelectorTerms": [{"alias": "al2023-latest"}]}),
            &[
                r#"spec.amiSelectorTerms[0].alias: Invalid value: "string": 'alias' is improperly formatted, must match the format 'family@version'"#,
                r#"spec.amiSelectorTerms[0].alias: Invalid value: "string": family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'"#,
            ],
        ),
        case(
            "no version",
            json!({"amiSelectorTerms": [{"alias": "al2023@"}]}),
            &[
                r#"spec.amiSelectorTerms[0].alias: Invalid value: "string": 'alias' is improperly formatted, must match the format 'family@version'"#,
            ],
        ),
        case(
            "a pinned version",
            json!({"amiSelectorTerms": [{"alias": "bottlerocket@v1.10.0"}]}),
            &[],
        ),
        case(
            "an unknown family",
            json!({"amiSelectorTerms": [{"alias": "ubuntu@latest"}]}),
            &[
                r#"spec.amiSelectorTerms[0].alias: Invalid value: "string": family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'"#,
            ],
        ),
        case(
            "windows2025 is a family",
            json!({"amiSelectorTerms": [{"alias": "windows2025@latest"}]}),
            &[],
        ),
        case(
            "a pinned windows version",
            json!({"amiSelectorTerms": [{"alias": "windows2022@v20240625"}]}),
            &[
                r#"spec.amiSelectorTerms[0].alias: Invalid value: "string": windows families may only specify version 'latest'"#,
            ],
        ),
        case(
            "a windows family without a version (4c)",
            json!({"amiSelectorTerms": [{"alias": "windows2019"}]}),
            &[
                r#"spec.amiSelectorTerms[0].alias: Invalid value: "string": 'alias' is improperly formatted, must match the format 'family@version'"#,
                r#"spec.amiSelectorTerms[0].alias: Invalid value: "string": windows families may only specify version 'latest'"#,
            ],
        ),
        case(
            "windows with latest",
            json!({"amiSelectorTerms": [{"alias": "windows2019@latest"}]}),
            &[],
        ),
    ]);
}

#[test]
fn ami_family() {
    let mismatch = |alias: &str, family: &str| json!({"amiSelectorTerms": [{"alias": alias}], "amiFamily": family});
    run(vec![
        case(
            "no alias and no amiFamily",
            json!({"amiSelectorTerms": [{"tags": {"team": "a"}}]}),
            &[
                r#"spec: Invalid value: "object": must specify amiFamily if amiSelectorTerms does not contain an alias"#,
            ],
        ),
        case(
            "no alias, with amiFamily",
            json!({"amiSelectorTerms": [{"tags": {"team": "a"}}], "amiFamily": "Custom"}),
            &[],
        ),
        case(
            "al2 alias",
            mismatch("al2@latest", "AL2023"),
            &[
                r#"spec: Invalid value: "object": if set, amiFamily must be 'AL2' or 'Custom' when using an AL2 alias"#,
            ],
        ),
        case(
            "al2023 alias",
            mismatch("al2023@latest", "AL2"),
            &[
                r#"spec: Invalid value: "object": if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias"#,
            ],
        ),
        case(
            "bottlerocket alias",
            mismatch("bottlerocket@latest", "AL2023"),
            &[
                r#"spec: Invalid value: "object": if set, amiFamily must be 'Bottlerocket' or 'Custom' when using a Bottlerocket alias"#,
            ],
        ),
        case(
            "windows2019 alias",
            mismatch("windows2019@latest", "Windows2022"),
            &[
                r#"spec: Invalid value: "object": if set, amiFamily must be 'Windows2019' or 'Custom' when using a Windows2019 alias"#,
            ],
        ),
        case(
            "windows2022 alias",
            mismatch("windows2022@latest", "Windows2025"),
            &[
                r#"spec: Invalid value: "object": if set, amiFamily must be 'Windows2022' or 'Custom' when using a Windows2022 alias"#,
            ],
        ),
        case(
            "windows2025 alias",
            mismatch("windows2025@latest", "Windows2019"),
            &[
                r#"spec: Invalid value: "object": if set, amiFamily must be 'Windows2025' or 'Custom' when using a Windows2025 alias"#,
            ],
        ),
        case(
            "alias and its own family",
            mismatch("al2@latest", "AL2"),
            &[],
        ),
        case(
            "alias and Custom",
            mismatch("bottlerocket@latest", "Custom"),
            &[],
        ),
    ]);
}

#[test]
fn subnet_selector_terms() {
    run(vec![
        case(
            "empty",
            json!({"subnetSelectorTerms": []}),
            &[
                r#"spec.subnetSelectorTerms: Invalid value: "array": subnetSelectorTerms cannot be empty"#,
            ],
        ),
        case(
            "a term without tags or id",
            json!({"subnetSelectorTerms": [{}]}),
            &[
                r#"spec.subnetSelectorTerms: Invalid value: "array": expected at least one, got none, ['tags', 'id']"#,
            ],
        ),
        case(
            "id with tags in one term of several (kerf+ 4e)",
            json!({"subnetSelectorTerms": [{"id": "subnet-0abc", "tags": {"a": "b"}}, {"tags": {"a": "b"}}]}),
            &[
                r#"spec.subnetSelectorTerms: Invalid value: "array": 'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term"#,
            ],
        ),
        case(
            "ids and tags in separate terms",
            json!({"subnetSelectorTerms": [{"id": "subnet-0abc"}, {"tags": {"a": "*"}}]}),
            &[],
        ),
    ]);
}

#[test]
fn security_group_selector_terms() {
    run(vec![
        case(
            "empty",
            json!({"securityGroupSelectorTerms": []}),
            &[
                r#"spec.securityGroupSelectorTerms: Invalid value: "array": securityGroupSelectorTerms cannot be empty"#,
            ],
        ),
        case(
            "a term without tags, id or name",
            json!({"securityGroupSelectorTerms": [{}]}),
            &[
                r#"spec.securityGroupSelectorTerms: Invalid value: "array": expected at least one, got none, ['tags', 'id', 'name']"#,
            ],
        ),
        case(
            "id with tags",
            json!({"securityGroupSelectorTerms": [{"id": "sg-0abc", "tags": {"a": "b"}}]}),
            &[
                r#"spec.securityGroupSelectorTerms: Invalid value: "array": 'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term"#,
            ],
        ),
        case(
            "name with tags, in one term of several (kerf+ 4e)",
            json!({"securityGroupSelectorTerms": [{"name": "web", "tags": {"a": "b"}}, {"name": "db"}]}),
            &[
                r#"spec.securityGroupSelectorTerms: Invalid value: "array": 'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term"#,
            ],
        ),
        case(
            "id with name trips both rules",
            json!({"securityGroupSelectorTerms": [{"id": "sg-0abc", "name": "web"}]}),
            &[
                r#"spec.securityGroupSelectorTerms: Invalid value: "array": 'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term"#,
                r#"spec.securityGroupSelectorTerms: Invalid value: "array": 'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term"#,
            ],
        ),
        case(
            "one field per term",
            json!({"securityGroupSelectorTerms": [{"id": "sg-0abc"}, {"name": "web"}, {"tags": {"a": "b"}}]}),
            &[],
        ),
    ]);
}

#[test]
fn capacity_reservation_selector_terms() {
    run(vec![
        case(
            "empty: upstream's `!self.all(...)` rule refuses it (ec2nodeclass_validation_cel_test.go)",
            json!({"capacityReservationSelectorTerms": []}),
            &[
                r#"spec.capacityReservationSelectorTerms: Invalid value: "array": 'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term"#,
            ],
        ),
        case(
            "ownerID alone is not enough",
            json!({"capacityReservationSelectorTerms": [{"ownerID": "123456789012"}]}),
            &[
                r#"spec.capacityReservationSelectorTerms: Invalid value: "array": expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']"#,
            ],
        ),
        case(
            "id with ownerID",
            json!({"capacityReservationSelectorTerms": [{"id": "cr-0abc", "ownerID": "123456789012"}]}),
            &[
                r#"spec.capacityReservationSelectorTerms: Invalid value: "array": 'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term"#,
            ],
        ),
        case(
            "id with instanceMatchCriteria, in one term of several (kerf+ 4e)",
            json!({"capacityReservationSelectorTerms": [{"id": "cr-0abc", "instanceMatchCriteria": "open"}, {"tags": {"a": "b"}}]}),
            &[
                r#"spec.capacityReservationSelectorTerms: Invalid value: "array": 'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term"#,
            ],
        ),
        case(
            "instanceMatchCriteria with an owner, and an id alone",
            json!({"capacityReservationSelectorTerms": [{"instanceMatchCriteria": "targeted", "ownerID": "123456789012"}, {"id": "cr-0abc"}]}),
            &[],
        ),
    ]);
}

#[test]
fn selector_tags() {
    run(vec![
        case(
            "an empty key in a subnet term",
            json!({"subnetSelectorTerms": [{"tags": {"": "x"}}]}),
            &[
                r#"spec.subnetSelectorTerms[0].tags: Invalid value: "object": empty tag keys or values aren't supported"#,
            ],
        ),
        case(
            "an empty value in a security group term",
            json!({"securityGroupSelectorTerms": [{"tags": {"a": "b"}}, {"tags": {"Name": ""}}]}),
            &[
                r#"spec.securityGroupSelectorTerms[1].tags: Invalid value: "object": empty tag keys or values aren't supported"#,
            ],
        ),
        case(
            "an empty value in a capacity reservation term",
            json!({"capacityReservationSelectorTerms": [{"tags": {"Name": ""}}]}),
            &[
                r#"spec.capacityReservationSelectorTerms[0].tags: Invalid value: "object": empty tag keys or values aren't supported"#,
            ],
        ),
        case(
            "an empty value in an AMI term",
            json!({"amiFamily": "AL2023", "amiSelectorTerms": [{"tags": {"Name": ""}}]}),
            &[
                r#"spec.amiSelectorTerms[0].tags: Invalid value: "object": empty tag keys or values aren't supported"#,
            ],
        ),
        case(
            "a wildcard value",
            json!({"subnetSelectorTerms": [{"tags": {"Name": "*"}}]}),
            &[],
        ),
        case(
            "an empty map passes the rules",
            json!({"subnetSelectorTerms": [{"tags": {}}]}),
            &[],
        ),
    ]);
}

#[test]
fn empty_selector_tags_warn() {
    let findings =
        findings_for(&json!({"securityGroupSelectorTerms": [{"name": "web"}, {"tags": {}}]}));
    assert_eq!(findings.errors, vec![]);
    assert_eq!(
        findings.warnings,
        vec!["spec.securityGroupSelectorTerms[1].tags: an empty tags map selects by no tag; remove it or add the tags to match"]
    );
}

#[test]
fn role_and_instance_profile() {
    run(vec![
        case(
            "neither",
            json!({"role": null}),
            &[
                r#"spec: Invalid value: "object": must specify exactly one of ['role', 'instanceProfile']"#,
            ],
        ),
        case(
            "both",
            json!({"instanceProfile": "KarpenterNodeInstanceProfile"}),
            &[
                r#"spec: Invalid value: "object": must specify exactly one of ['role', 'instanceProfile']"#,
            ],
        ),
        case(
            "an empty role",
            json!({"role": ""}),
            &[r#"spec.role: Invalid value: "string": role cannot be empty"#],
        ),
        case(
            "an empty instanceProfile",
            json!({"role": null, "instanceProfile": ""}),
            &[r#"spec.instanceProfile: Invalid value: "string": instanceProfile cannot be empty"#],
        ),
        case(
            "an instanceProfile instead of a role",
            json!({"role": null, "instanceProfile": "KarpenterNodeInstanceProfile"}),
            &[],
        ),
    ]);
}

#[test]
fn tags() {
    let tag = |key: &str| json!({"tags": {key: "v"}});
    run(vec![
        case(
            "an empty key",
            tag(""),
            &[r#"spec.tags: Invalid value: "object": empty tag keys aren't supported"#],
        ),
        case(
            "the EKS cluster tag",
            tag("eks:eks-cluster-name"),
            &[
                r#"spec.tags: Invalid value: "object": tag contains a restricted tag matching eks:eks-cluster-name"#,
            ],
        ),
        case(
            "a cluster ownership tag",
            tag("kubernetes.io/cluster/demo"),
            &[
                r#"spec.tags: Invalid value: "object": tag contains a restricted tag matching kubernetes.io/cluster/"#,
            ],
        ),
        case(
            "the cluster prefix is a plain prefix",
            tag("kubernetes.io/clusterfoo"),
            &[
                r#"spec.tags: Invalid value: "object": tag contains a restricted tag matching kubernetes.io/cluster/"#,
            ],
        ),
        case(
            "the nodepool tag",
            tag("karpenter.sh/nodepool"),
            &[
                r#"spec.tags: Invalid value: "object": tag contains a restricted tag matching karpenter.sh/nodepool"#,
            ],
        ),
        case(
            "the nodeclaim tag",
            tag("karpenter.sh/nodeclaim"),
            &[
                r#"spec.tags: Invalid value: "object": tag contains a restricted tag matching karpenter.sh/nodeclaim"#,
            ],
        ),
        case(
            "the ec2nodeclass tag",
            tag("karpenter.k8s.aws/ec2nodeclass"),
            &[
                r#"spec.tags: Invalid value: "object": tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass"#,
            ],
        ),
        case(
            "several restricted tags",
            json!({"tags": {"": "v", "karpenter.sh/nodepool": "v"}}),
            &[
                r#"spec.tags: Invalid value: "object": empty tag keys aren't supported"#,
                r#"spec.tags: Invalid value: "object": tag contains a restricted tag matching karpenter.sh/nodepool"#,
            ],
        ),
        case(
            "custom keys in Karpenter's domains and empty values",
            json!({"tags": {"karpenter.sh/custom-key": "v", "kubernetes.io/role/key": "", "team": "a"}}),
            &[],
        ),
    ]);
}

#[test]
fn block_device_mappings() {
    let ebs =
        |ebs: Value| json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": ebs}]});
    run(vec![
        case(
            "two root volumes",
            json!({"blockDeviceMappings": [
                {"rootVolume": true, "ebs": {"volumeSize": "20Gi"}},
                {"rootVolume": true, "ebs": {"volumeSize": "100Gi"}},
            ]}),
            &[
                r#"spec.blockDeviceMappings: Invalid value: "array": must have only one blockDeviceMappings with rootVolume"#,
            ],
        ),
        case(
            "one root volume",
            json!({"blockDeviceMappings": [{"rootVolume": true, "ebs": {"volumeSize": "20Gi"}}, {"rootVolume": false, "ebs": {"snapshotID": "snap-1"}}]}),
            &[],
        ),
        case(
            "neither snapshot nor size",
            ebs(json!({"volumeType": "gp3"})),
            &[
                r#"spec.blockDeviceMappings[0].ebs: Invalid value: "object": snapshotID or volumeSize must be defined"#,
            ],
        ),
        case(
            "an initialization rate without a snapshot",
            ebs(json!({"volumeSize": "20Gi", "volumeInitializationRate": 100})),
            &[
                r#"spec.blockDeviceMappings[0].ebs: Invalid value: "object": snapshotID must be set when volumeInitializationRate is set"#,
            ],
        ),
        case(
            "an initialization rate with an empty snapshot",
            ebs(json!({"snapshotID": "", "volumeInitializationRate": 100})),
            &[
                r#"spec.blockDeviceMappings[0].ebs: Invalid value: "object": snapshotID must be set when volumeInitializationRate is set"#,
            ],
        ),
        case(
            "an initialization rate with a snapshot",
            ebs(
                json!({"snapshotID": "snap-0abc", "volumeInitializationRate": 300, "volumeType": "gp3", "iops": 3000}),
            ),
            &[],
        ),
    ]);
}

#[test]
fn kubelet() {
    let kubelet = |kubelet: Value| json!({"kubelet": kubelet});
    run(vec![
        case(
            "an unknown systemReserved resource",
            kubelet(json!({"systemReserved": {"gpu": "1"}})),
            &[
                r#"spec.kubelet.systemReserved: Invalid value: "object": valid keys for systemReserved are ['cpu','memory','ephemeral-storage','pid']"#,
            ],
        ),
        case(
            "a negative kubeReserved quantity",
            kubelet(json!({"kubeReserved": {"cpu": "-100m"}})),
            &[
                r#"spec.kubelet.kubeReserved: Invalid value: "object": kubeReserved value cannot be a negative resource quantity"#,
            ],
        ),
        case(
            "both reservation rules",
            kubelet(json!({"kubeReserved": {"nvidia.com/gpu": "-1"}})),
            &[
                r#"spec.kubelet.kubeReserved: Invalid value: "object": valid keys for kubeReserved are ['cpu','memory','ephemeral-storage','pid']"#,
                r#"spec.kubelet.kubeReserved: Invalid value: "object": kubeReserved value cannot be a negative resource quantity"#,
            ],
        ),
        case(
            "an unknown evictionHard signal",
            kubelet(json!({"evictionHard": {"memory.free": "5%"}})),
            &[
                r#"spec.kubelet.evictionHard: Invalid value: "object": valid keys for evictionHard are ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']"#,
            ],
        ),
        case(
            "unknown soft signals",
            kubelet(
                json!({"evictionSoft": {"memory.free": "5%"}, "evictionSoftGracePeriod": {"memory.free": "1m"}}),
            ),
            &[
                r#"spec.kubelet.evictionSoft: Invalid value: "object": valid keys for evictionSoft are ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']"#,
                r#"spec.kubelet.evictionSoftGracePeriod: Invalid value: "object": valid keys for evictionSoftGracePeriod are ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']"#,
            ],
        ),
        case(
            "a soft threshold without a grace period (4c: the grace map is absent)",
            kubelet(json!({"evictionSoft": {"memory.available": "5%"}})),
            &[
                r#"spec.kubelet: Invalid value: "object": evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod"#,
            ],
        ),
        case(
            "a grace period without a soft threshold",
            kubelet(
                json!({"evictionSoft": {"memory.available": "5%"}, "evictionSoftGracePeriod": {"memory.available": "1m", "nodefs.available": "1m"}}),
            ),
            &[
                r#"spec.kubelet: Invalid value: "object": evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft"#,
            ],
        ),
        case(
            "image GC thresholds that do not leave room",
            kubelet(json!({"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 50})),
            &[
                r#"spec.kubelet: Invalid value: "object": imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent"#,
            ],
        ),
        case(
            "a complete kubelet",
            kubelet(json!({
                "clusterDNS": ["10.0.0.10"],
                "maxPods": 110,
                "podsPerCore": 0,
                "systemReserved": {"cpu": "100m", "memory": "100Mi", "ephemeral-storage": "1Gi", "pid": "100"},
                "kubeReserved": {"cpu": "200m"},
                "evictionHard": {"memory.available": "5%", "nodefs.available": "10.5%", "pid.available": ""},
                "evictionSoft": {"memory.available": "500Mi"},
                "evictionSoftGracePeriod": {"memory.available": "1m"},
                "evictionMaxPodGracePeriod": 60,
                "imageGCHighThresholdPercent": 85,
                "imageGCLowThresholdPercent": 80,
                "cpuCFSQuota": true,
            })),
            &[],
        ),
        case(
            "empty soft maps on both sides",
            kubelet(json!({"evictionSoft": {}})),
            &[],
        ),
    ]);
}

#[test]
fn networking() {
    let ni = |card: i32, device: i32, kind: &str| json!({"networkCardIndex": card, "deviceIndex": device, "interfaceType": kind});
    run(vec![
        case(
            "no primary interface",
            json!({"networkInterfaces": [ni(0, 1, "interface"), ni(0, 0, "efa-only")]}),
            &[
                r#"spec.networkInterfaces: Invalid value: "array": networkInterfaces must include a primary interface with interfaceType='interface'"#,
            ],
        ),
        case(
            "a (card, device) pair twice",
            json!({"networkInterfaces": [ni(0, 0, "interface"), ni(1, 0, "interface"), ni(1, 0, "efa-only")]}),
            &[
                r#"spec.networkInterfaces: Invalid value: "array": networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card"#,
            ],
        ),
        case(
            "two EFA-only interfaces on one card",
            json!({"networkInterfaces": [ni(0, 0, "interface"), ni(1, 0, "efa-only"), ni(1, 1, "efa-only")]}),
            &[
                r#"spec.networkInterfaces: Invalid value: "array": networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card"#,
            ],
        ),
        case(
            "a primary and one EFA-only interface per card",
            json!({"networkInterfaces": [ni(0, 0, "interface"), ni(0, 1, "efa-only"), ni(1, 0, "efa-only"), ni(2, 0, "interface")]}),
            &[],
        ),
        case("no interfaces", json!({"networkInterfaces": []}), &[]),
        case(
            "connection tracking without a timeout",
            json!({"connectionTracking": {}}),
            &[
                r#"spec.connectionTracking: Invalid value: "object": at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set"#,
            ],
        ),
        case(
            "connection tracking with a timeout",
            json!({"connectionTracking": {"udpTimeout": 30}}),
            &[],
        ),
        case(
            "a placement group selector without name or id",
            json!({"placementGroupSelector": {}}),
            &[
                r#"spec.placementGroupSelector: Invalid value: "object": expected at least one, got none, ['name', 'id']"#,
            ],
        ),
        case(
            "a placement group selector with name and id",
            json!({"placementGroupSelector": {"name": "training", "id": "pg-0abc"}}),
            &[
                r#"spec.placementGroupSelector: Invalid value: "object": 'name' and 'id' are mutually exclusive"#,
            ],
        ),
        case(
            "a placement group by name",
            json!({"placementGroupSelector": {"name": "training"}}),
            &[],
        ),
        case(
            "a placement group by id",
            json!({"placementGroupSelector": {"id": "pg-0abc"}}),
            &[],
        ),
        case(
            "empty cpu options",
            json!({"cpuOptions": {}, "ipPrefixCount": 0}),
            &[],
        ),
    ]);
}

#[test]
fn all_errors_are_collected() {
    let findings = findings_for(&json!({
        "role": "",
        "subnetSelectorTerms": [],
        "tags": {"karpenter.sh/nodeclaim": "x"},
        "connectionTracking": {},
    }));
    let got: Vec<String> = findings.errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        [
            r#"spec.role: Invalid value: "string": role cannot be empty"#,
            r#"spec.subnetSelectorTerms: Invalid value: "array": subnetSelectorTerms cannot be empty"#,
            r#"spec.tags: Invalid value: "object": tag contains a restricted tag matching karpenter.sh/nodeclaim"#,
            r#"spec.connectionTracking: Invalid value: "object": at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set"#,
        ]
    );
}

// ---- the CRD schema --------------------------------------------------------------------------------------

fn crd() -> Value {
    serde_json::to_value(EC2NodeClass::crd()).expect("the CRD serializes")
}

/// The `spec` node of the CRD's schema.
fn spec_schema() -> Value {
    crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
}

/// A schema node below `spec`, by a path of property names where `[]` steps into list items.
fn node<'a>(spec: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(spec, |schema, step| match step {
        "[]" => &schema["items"],
        "{}" => &schema["additionalProperties"],
        property => &schema["properties"][property],
    })
}

/// An enum's values, without the `null` schemars adds for optional fields (the CRD generator drops it).
fn enum_values(schema: &Value) -> Vec<&str> {
    schema["enum"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

#[test]
fn the_crd_has_karpenters_names_scope_and_columns() {
    let crd = crd();
    assert_eq!(crd["metadata"]["name"], "ec2nodeclasses.karpenter.k8s.aws");
    assert_eq!(crd["spec"]["scope"], "Cluster");
    assert_eq!(
        crd["spec"]["names"],
        json!({"categories": ["karpenter"], "kind": "EC2NodeClass", "plural": "ec2nodeclasses", "shortNames": ["ec2nc", "ec2ncs"], "singular": "ec2nodeclass"})
    );
    let version = &crd["spec"]["versions"][0];
    assert_eq!(version["name"], "v1");
    assert_eq!(version["subresources"], json!({"status": {}}));
    let columns: Vec<(&str, &str, i64)> = version["additionalPrinterColumns"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or(""),
                c["jsonPath"].as_str().unwrap_or(""),
                c["priority"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        columns,
        [
            (
                "Ready",
                r#".status.conditions[?(@.type=="Ready")].status"#,
                0
            ),
            ("Age", ".metadata.creationTimestamp", 0),
            ("Role", ".spec.role", 1)
        ]
    );
}

#[test]
fn the_schema_carries_enums_in_crd_order() {
    let spec = spec_schema();
    let enums: [(&str, &[&str]); 10] = [
        (
            "amiFamily",
            &[
                "AL2",
                "AL2023",
                "Bottlerocket",
                "Custom",
                "Windows2019",
                "Windows2022",
                "Windows2025",
            ],
        ),
        ("instanceStorePolicy", &["RAID0"]),
        (
            "blockDeviceMappings.[].ebs.volumeType",
            &["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"],
        ),
        ("metadataOptions.httpEndpoint", &["enabled", "disabled"]),
        ("metadataOptions.httpProtocolIPv6", &["enabled", "disabled"]),
        ("metadataOptions.httpTokens", &["required", "optional"]),
        (
            "capacityReservationSelectorTerms.[].instanceMatchCriteria",
            &["open", "targeted"],
        ),
        (
            "networkInterfaces.[].interfaceType",
            &["interface", "efa-only"],
        ),
        ("cpuOptions.nestedVirtualization", &["enabled", "disabled"]),
        ("kubelet.cpuCFSQuota", &[]),
    ];
    for (path, values) in enums {
        assert_eq!(enum_values(node(&spec, path)), values, "{path}");
    }
}

#[test]
fn the_schema_carries_patterns() {
    let spec = spec_schema();
    let patterns = [
        ("subnetSelectorTerms.[].id", r"^subnet-[0-9a-z]+$"),
        ("securityGroupSelectorTerms.[].id", r"^sg-[0-9a-z]+$"),
        ("amiSelectorTerms.[].id", r"^ami-[0-9a-z]+$"),
        ("capacityReservationSelectorTerms.[].id", r"^cr-[0-9a-z]+$"),
        (
            "capacityReservationSelectorTerms.[].ownerID",
            r"^[0-9]{12}$",
        ),
        ("placementGroupSelector.id", r"^pg-[0-9a-z]+$"),
        ("blockDeviceMappings.[].ebs.volumeSize", VOLUME_SIZE_PATTERN),
        ("kubelet.systemReserved.{}", QUANTITY_PATTERN),
        ("kubelet.kubeReserved.{}", QUANTITY_PATTERN),
        ("kubelet.evictionHard.{}", EVICTION_THRESHOLD_PATTERN),
        ("kubelet.evictionSoft.{}", EVICTION_THRESHOLD_PATTERN),
    ];
    for (path, pattern) in patterns {
        assert_eq!(node(&spec, path)["pattern"], pattern, "{path}");
    }
    assert_eq!(
        node(&spec, "blockDeviceMappings.[].ebs.volumeSize")["type"],
        "string",
        "a number is a type error"
    );
}

#[test]
fn the_schema_carries_bounds_and_sizes() {
    let spec = spec_schema();
    let bounds: [(&str, &str, f64); 30] = [
        ("subnetSelectorTerms", "maxItems", 30.0),
        ("securityGroupSelectorTerms", "maxItems", 30.0),
        ("capacityReservationSelectorTerms", "maxItems", 30.0),
        ("amiSelectorTerms", "minItems", 1.0),
        ("amiSelectorTerms", "maxItems", 30.0),
        ("amiSelectorTerms.[].alias", "maxLength", 30.0),
        ("amiSelectorTerms.[].tags", "maxProperties", 20.0),
        ("subnetSelectorTerms.[].tags", "maxProperties", 20.0),
        ("securityGroupSelectorTerms.[].tags", "maxProperties", 20.0),
        (
            "capacityReservationSelectorTerms.[].tags",
            "maxProperties",
            20.0,
        ),
        ("blockDeviceMappings", "maxItems", 50.0),
        (
            "blockDeviceMappings.[].ebs.volumeInitializationRate",
            "minimum",
            100.0,
        ),
        (
            "blockDeviceMappings.[].ebs.volumeInitializationRate",
            "maximum",
            300.0,
        ),
        ("ipPrefixCount", "minimum", 0.0),
        ("kubelet.maxPods", "minimum", 0.0),
        ("kubelet.podsPerCore", "minimum", 0.0),
        ("kubelet.imageGCHighThresholdPercent", "maximum", 100.0),
        ("kubelet.imageGCLowThresholdPercent", "minimum", 0.0),
        ("metadataOptions.httpPutResponseHopLimit", "minimum", 1.0),
        ("metadataOptions.httpPutResponseHopLimit", "maximum", 64.0),
        ("networkInterfaces", "maxItems", 150.0),
        ("networkInterfaces.[].networkCardIndex", "minimum", 0.0),
        ("networkInterfaces.[].deviceIndex", "minimum", 0.0),
        ("connectionTracking.tcpEstablishedTimeout", "minimum", 60.0),
        (
            "connectionTracking.tcpEstablishedTimeout",
            "maximum",
            432000.0,
        ),
        ("connectionTracking.udpStreamTimeout", "minimum", 60.0),
        ("connectionTracking.udpStreamTimeout", "maximum", 180.0),
        ("connectionTracking.udpTimeout", "minimum", 30.0),
        ("connectionTracking.udpTimeout", "maximum", 60.0),
        ("placementGroupSelector.name", "minLength", 1.0),
    ];
    for (path, keyword, bound) in bounds {
        assert_eq!(
            node(&spec, path)[keyword].as_f64(),
            Some(bound),
            "{path} {keyword}"
        );
    }
    assert_eq!(
        spec["required"],
        json!([
            "amiSelectorTerms",
            "securityGroupSelectorTerms",
            "subnetSelectorTerms"
        ])
    );
    assert_eq!(
        node(&spec, "networkInterfaces.[]")["required"],
        json!(["deviceIndex", "interfaceType", "networkCardIndex"])
    );
    assert_eq!(
        spec["properties"]["tags"].get("maxProperties"),
        None,
        "spec.tags has no size limit"
    );
}

#[test]
fn the_schema_defaults_match_the_webhook_defaults() {
    let spec = spec_schema();
    let defaults = default_metadata_options();
    assert_eq!(node(&spec, "metadataOptions")["default"], defaults);
    for member in [
        "httpEndpoint",
        "httpProtocolIPv6",
        "httpPutResponseHopLimit",
        "httpTokens",
    ] {
        assert_eq!(
            node(&spec, &format!("metadataOptions.{member}"))["default"],
            defaults[member],
            "{member}"
        );
    }
    let mut object = base();
    default_ec2nodeclass(&mut object);
    assert_eq!(object["spec"]["metadataOptions"], defaults);
}

#[test]
fn volume_sizes() {
    let pattern = Regex::new(VOLUME_SIZE_PATTERN).expect("the volume size pattern compiles");
    let accepted = [
        "1Gi", "20Gi", "9999Gi", "10000Gi", "58999Gi", "59000Gi", "1G", "64000G", "1Ti", "17Ti",
        "18Ti", "29Ti", "58Ti", "64Ti", "1T", "64T",
    ];
    let rejected = [
        "0Gi", "59001Gi", "020Gi", "64001G", "0Ti", "65Ti", "Ti", "T", "100T", "Gi", "20Mi", "20",
        "1.5Ti", "20 Gi", "x20Gi",
    ];
    for size in accepted {
        assert!(pattern.is_match(size), "{size} is accepted");
    }
    for size in rejected {
        assert!(!pattern.is_match(size), "{size} is rejected");
    }
}

#[test]
fn eviction_thresholds() {
    let pattern = Regex::new(EVICTION_THRESHOLD_PATTERN).expect("the eviction pattern compiles");
    for ok in ["5%", "10.5%", "100%", "100.00%", "", "500Mi", "1Gi"] {
        assert!(pattern.is_match(ok), "{ok:?} is accepted");
    }
    for bad in ["5%3", "110%", "110GB", "5 %", "-%"] {
        assert!(!pattern.is_match(bad), "{bad:?} is rejected");
    }
}

#[test]
fn present_and_absent_fields_survive_a_round_trip() {
    let object =
        object_with(&json!({"tags": {}, "subnetSelectorTerms": [{"tags": {}}], "kubelet": {}}));
    let nc: EC2NodeClass = serde_json::from_value(object.clone()).expect("parses");
    assert_eq!(nc.spec.tags.as_ref().map(|t| t.len()), Some(0));
    assert_eq!(nc.spec.metadata_options, None);
    assert_eq!(serde_json::to_value(&nc).expect("serializes"), object);
}
