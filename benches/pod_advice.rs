//! What pod advice costs on the admission path, for the inflate pod with the embedded us-east-1 catalog and two
//! NodePools (the getting-started `default` pool, amd64 c/m/r generation > 4, and an unrestricted one), so every
//! instance type of the catalog is checked:
//! - `advise`: the first pod of a shape (read the pod, advise against the prepared NodePools, encode);
//! - `annotate`: a further replica of that shape, served from the advisor's memo, annotations added;
//! - `rebuild`: preparing the advisor when NodePools change (off the request path).
//!
//! `cargo bench -p kerf --bench pod_advice`; results in docs/admission.md (Pod advice).

use criterion::{criterion_group, criterion_main, Criterion};
use kerf::admission::pods::{annotate, PodAdvisor};
use kerf::api::ec2nodeclass::EC2NodeClass;
use kerf::api::nodepool::NodePool;
use kerf::catalog::{Catalog, CatalogSettings, Pricing};
use kerf::scheduling::PodInfo;
use serde_json::{json, Value};

fn nodepool(name: &str, requirements: Value) -> NodePool {
    kerf_testkit::nodepool(
        name,
        json!({"template": {"spec": {"requirements": requirements}}}),
    )
}

fn pod_advice(c: &mut Criterion) {
    let catalog: &'static Catalog = Box::leak(Box::new(
        Catalog::embedded("us-east-1", &CatalogSettings::default(), &Pricing::none())
            .expect("embedded catalog"),
    ));
    let pools = [
        nodepool(
            "default",
            json!([
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]}]),
        ),
        nodepool("anything", json!([])),
    ];
    let classes: [EC2NodeClass; 1] = [serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
        "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                 "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}]}}))
    .expect("nodeclass")];
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "inflate-", "namespace": "default", "labels": {"app": "inflate"}},
        "spec": {"containers": [{"name": "inflate", "image": "pause",
                                 "resources": {"requests": {"cpu": "1", "memory": "1.5Gi"}}}]}});
    let advisor = PodAdvisor::new(&pools, &classes, catalog);
    let annotated = annotate(&advisor, &pod, None, None).expect("advice");
    eprintln!(
        "summary: {}",
        annotated["metadata"]["annotations"]["kerf.sh/instance-summary"]
    );
    let info =
        PodInfo::from_pod(&serde_json::from_value(pod.clone()).expect("pod")).expect("pod info");
    c.bench_function("pod_advice/advise", |b| {
        b.iter(|| advisor.advise(&info).annotations())
    });
    c.bench_function("pod_advice/annotate", |b| {
        b.iter(|| annotate(&advisor, &pod, None, None))
    });
    c.bench_function("pod_advice/rebuild", |b| {
        b.iter(|| PodAdvisor::new(&pools, &classes, catalog))
    });
}

criterion_group!(benches, pod_advice);
criterion_main!(benches);
