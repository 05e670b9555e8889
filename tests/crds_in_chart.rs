//! The chart installs exactly what `kerf crds` prints: a test fails when the two drift apart.

#[test]
fn chart_crds_match_kerf_crds() {
    let generated =
        kerf::api::crds::to_yaml(kerf::api::crds::CelRules::Without).expect("CRDs render");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/kerf/crds/crds.yaml");
    let in_chart = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        generated == in_chart,
        "charts/kerf/crds/crds.yaml is out of date; regenerate it with `cargo run -- crds > charts/kerf/crds/crds.yaml`"
    );
}

#[test]
fn crds_have_the_names_and_columns_users_expect() {
    let crds = kerf::api::crds::all();
    let names: Vec<&str> = crds
        .iter()
        .map(|c| c.metadata.name.as_deref().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        [
            "nodepools.karpenter.sh",
            "nodeclaims.karpenter.sh",
            "ec2nodeclasses.karpenter.k8s.aws",
            "nodeoverlays.karpenter.sh",
            "capacitybuffers.autoscaling.x-k8s.io"
        ]
    );
    let columns = |i: usize| -> Vec<String> {
        crds[i].spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .filter(|c| c.priority.unwrap_or(0) == 0)
            .map(|c| c.name.clone())
            .collect()
    };
    assert_eq!(columns(0), ["NodeClass", "Nodes", "Ready", "Age"]);
    // Karpenter's NodePool `Nodes` column reads the node count, `.status.nodes`.
    let nodes = crds[0].spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .find(|c| c.name == "Nodes")
        .map(|c| c.json_path.as_str());
    assert_eq!(nodes, Some(".status.nodes"));
    assert_eq!(
        columns(1),
        ["Type", "Capacity", "Zone", "Node", "Ready", "Age"]
    );
    assert_eq!(
        crds[2].spec.names.short_names.clone().unwrap_or_default(),
        ["ec2nc", "ec2ncs"]
    );
    // Karpenter's NodeOverlay CRD: v1alpha1, `overlays` for short, Ready and Age (Weight with -o wide).
    assert_eq!(crds[3].spec.versions[0].name, "v1alpha1");
    assert_eq!(
        crds[3].spec.names.short_names.clone().unwrap_or_default(),
        ["overlays"]
    );
    assert_eq!(columns(3), ["Ready", "Age"]);
    // The CapacityBuffer CRD Karpenter ships: namespaced, `cb` for short, its printer columns.
    assert_eq!(crds[4].spec.versions[0].name, "v1beta1");
    assert_eq!(crds[4].spec.scope, "Namespaced");
    assert_eq!(
        crds[4].spec.names.short_names.clone().unwrap_or_default(),
        ["cb"]
    );
    assert_eq!(
        columns(4),
        [
            "Strategy",
            "PodTemplate",
            "Replicas",
            "ConditionsType",
            "ConditionsStatus",
            "ConditionsReason",
            "Age"
        ]
    );
    for crd in &crds[..4] {
        assert_eq!(crd.spec.scope, "Cluster");
        assert!(crd.spec.versions[0]
            .subresources
            .as_ref()
            .is_some_and(|s| s.status.is_some()));
    }
    assert!(
        crds[0].spec.versions[0]
            .subresources
            .as_ref()
            .is_some_and(|s| s.scale.is_some()),
        "NodePool has a scale subresource"
    );
}
