//! The scheduling simulation at scale, modelled on Karpenter's scheduling benchmark: 400 synthetic instance
//! types (cpu = i+1, memory = 2(i+1) GiB, pods = 10(i+1), overhead 100m / 10Mi, spot in 2 zones and on-demand
//! in 3, price 0.1·cpu + 0.1·memory-GB) and one unlimited NodePool. Pods come in Karpenter's five-way diverse
//! mix (generic, zonal spread, hostname spread, zonal self-affinity, hostname anti-affinity), and as generic
//! pods alone. Requests cycle deterministically through Karpenter's sizes, so every run solves the same input.
//!
//! `cargo bench -p kerf --bench scheduling`; results and the machine are in docs/performance.md.
//!
//! `KERF_SOLVE_ONCE=20000` instead builds that many diverse pods, solves once, prints the time and the peak
//! memory of the process, and exits: run the bench binary under `/usr/bin/time -v` or a profiler this way.
//!
//! `KERF_QUALITY=5000,20000` instead prints, per mix and size, what the plan costs against the lower bound of
//! any plan (`kerf::scheduling::bound`, the linear-programming relaxation), and how many nodes it launches.

use criterion::{criterion_group, BenchmarkId, Criterion};
use kerf::api::nodepool::NodePool;
use kerf::catalog::Catalog;
use kerf::scheduling::bound::lower_bound;
use kerf::scheduling::{PodInfo, Scheduler};
use kerf_testkit::{catalog_file, instance_type, merge, offering};
use serde_json::{json, Value};
use std::fmt::Write;
use std::hash::Hasher;
use std::time::Duration;

const INSTANCE_TYPES: usize = 400;
const CPUS: [&str; 5] = ["100m", "250m", "500m", "1", "1500m"];
const MEMORIES: [&str; 5] = ["100Mi", "250Mi", "500Mi", "1Gi", "1500Mi"];

fn catalog() -> Catalog {
    let types: Vec<Value> = (0..INSTANCE_TYPES)
        .map(|i| {
            let (cpu, memory_gb) = ((i + 1) as f64, 2.0 * (i + 1) as f64);
            let price = 0.1 * cpu + 0.1 * memory_gb;
            let offerings = [
                ("test-zone-1", "spot"),
                ("test-zone-2", "spot"),
                ("test-zone-1", "on-demand"),
                ("test-zone-2", "on-demand"),
                ("test-zone-3", "on-demand"),
            ]
            .map(|(zone, capacity_type)| offering(zone, capacity_type, price));
            let (cpus, memory) = ((i + 1).to_string(), format!("{}Gi", 2 * (i + 1)));
            let name = format!("fake-it-{i}");
            let pods = 10 * (i as u64 + 1);
            let mut it = instance_type(&name, &cpus, &memory, pods, "amd64", offerings.into());
            merge(&mut it, json!({"overhead": {"memory": "10Mi"}}));
            it
        })
        .collect();
    Catalog::from_instance_types_json(&catalog_file(types)).expect("synthetic catalog")
}

fn nodepool() -> NodePool {
    kerf_testkit::nodepool("default", json!({}))
}

/// One pod of group `group` (its labels select its siblings), with `extra` merged into the spec.
fn pod(group: &str, i: usize, extra: Value) -> PodInfo {
    let mut spec = json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": CPUS[i % 5], "memory": MEMORIES[(i / 5) % 5]}}}]});
    if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), extra) {
        spec.extend(extra);
    }
    let pod = json!({"metadata": {"name": format!("{group}-{i}"), "namespace": "default", "uid": format!("{group}-{i}"),
                                  "labels": {"group": group}}, "spec": spec});
    PodInfo::from_pod(&serde_json::from_value(pod).expect("pod")).expect("pod info")
}

fn selector(group: &str) -> Value {
    json!({"matchLabels": {"group": group}})
}

/// Karpenter's diverse mix: a fifth each of generic, zonal spread, hostname spread, zonal self-affinity and
/// hostname anti-affinity pods.
fn diverse_pods(count: usize) -> Vec<PodInfo> {
    let fifth = count / 5;
    let spread = |key: &str, group: &str| {
        json!({"topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector(group)}]})
    };
    let affinity = |key: &str, group: &str| {
        json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": key, "labelSelector": selector(group)}]}}})
    };
    let anti_affinity = |key: &str, group: &str| {
        json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": key, "labelSelector": selector(group)}]}}})
    };
    let mut pods = Vec::with_capacity(count);
    pods.extend((0..fifth).map(|i| pod("generic", i, json!({}))));
    pods.extend((0..fifth).map(|i| {
        pod(
            "zonal-spread",
            i,
            spread("topology.kubernetes.io/zone", "zonal-spread"),
        )
    }));
    pods.extend((0..fifth).map(|i| {
        pod(
            "hostname-spread",
            i,
            spread("kubernetes.io/hostname", "hostname-spread"),
        )
    }));
    pods.extend((0..fifth).map(|i| {
        pod(
            "zonal-affinity",
            i,
            affinity("topology.kubernetes.io/zone", "zonal-affinity"),
        )
    }));
    pods.extend((0..fifth).map(|i| {
        pod(
            "hostname-anti-affinity",
            i,
            anti_affinity("kubernetes.io/hostname", "hostname-anti-affinity"),
        )
    }));
    pods
}

fn generic_pods(count: usize) -> Vec<PodInfo> {
    (0..count).map(|i| pod("generic", i, json!({}))).collect()
}

fn scheduling(c: &mut Criterion) {
    let catalog = catalog();
    let pools = [nodepool()];
    let scheduler = Scheduler::new(&pools, &catalog);
    let mut group = c.benchmark_group("scheduling");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .warm_up_time(Duration::from_secs(1));
    for (mix, make) in [
        ("generic", generic_pods as fn(usize) -> Vec<PodInfo>),
        ("diverse", diverse_pods),
    ] {
        for count in [5_000, 20_000] {
            let pods = make(count);
            let plan = scheduler.solve(&pods);
            let placed: usize = plan.claims.iter().map(|c| c.pods.len()).sum();
            assert_eq!(
                placed + plan.unschedulable.len(),
                count,
                "every pod is placed or reported"
            );
            eprintln!(
                "{mix} {count}: {} claims, {} unschedulable",
                plan.claims.len(),
                plan.unschedulable.len()
            );
            group.bench_with_input(BenchmarkId::new(mix, count), &pods, |b, pods| {
                b.iter(|| scheduler.solve(pods))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, scheduling);

/// One solve of `count` diverse pods, for a profiler or a peak-memory measurement of a single solve.
fn solve_once(count: usize) {
    let catalog = catalog();
    let pools = [nodepool()];
    let scheduler = Scheduler::new(&pools, &catalog);
    let pods = diverse_pods(count);
    let started = std::time::Instant::now();
    let plan = scheduler.solve(&pods);
    let elapsed = started.elapsed();
    eprintln!(
        "diverse {count}: {:.3} s, {} claims, {} unschedulable",
        elapsed.as_secs_f64(),
        plan.claims.len(),
        plan.unschedulable.len()
    );
    print_peak_memory();
    // A fingerprint of the whole plan, so that a speed change can show it plans exactly as before. The plan's
    // text is streamed into the hash (as `str::hash` would hash it whole) so that it adds nothing to the peak.
    let mut digest = HashWriter(std::collections::hash_map::DefaultHasher::new());
    write!(digest, "{plan:?}").expect("hashing never fails");
    digest.0.write_u8(0xff);
    eprintln!("plan digest: {:016x}", digest.0.finish());
}

/// Feeds formatted text to a hasher.
struct HashWriter(std::collections::hash_map::DefaultHasher);

impl std::fmt::Write for HashWriter {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}

/// Peak resident memory of this process so far.
fn print_peak_memory() {
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        if let Some(line) = status.lines().find(|l| l.starts_with("VmHWM")) {
            eprintln!("peak memory: {}", line.trim_start_matches("VmHWM:").trim());
        }
    }
}

/// Decision quality: per mix and size, the plan's cost (each claim at its cheapest offering), the lower bound
/// on any plan's cost, their ratio, and the node count.
fn quality(counts: &[usize]) {
    let catalog = catalog();
    let pools = [nodepool()];
    let scheduler = Scheduler::new(&pools, &catalog);
    println!("mix | pods | nodes | plan $/h | lower bound $/h | plan / bound | bound's classes x node kinds | bound time");
    for (mix, make) in [
        ("generic", generic_pods as fn(usize) -> Vec<PodInfo>),
        ("diverse", diverse_pods),
    ] {
        for &count in counts {
            let pods = make(count);
            let plan = scheduler.solve(&pods);
            let cost: f64 = plan
                .claims
                .iter()
                .filter_map(|c| c.cheapest.as_ref().and_then(|o| o.price))
                .sum();
            let started = std::time::Instant::now();
            let bound = lower_bound(&scheduler, &pods).expect("every pod fits some type");
            println!(
                "{mix} | {count} | {} | {cost:.2} | {:.2} | {:.3} | {} x {} | {:.2} s",
                plan.claims.len(),
                bound.per_hour,
                cost / bound.per_hour,
                bound.classes,
                bound.node_kinds,
                started.elapsed().as_secs_f64()
            );
        }
    }
}

fn main() {
    if let Ok(counts) = std::env::var("KERF_QUALITY") {
        let counts: Vec<usize> = counts
            .split(',')
            .filter_map(|c| c.trim().parse().ok())
            .collect();
        quality(&counts);
        return;
    }
    if let Some(count) = std::env::var("KERF_SOLVE_ONCE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        solve_once(count);
        return;
    }
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
    // Peak resident memory of this process (catalog, 20,000 pods and the solves included).
    print_peak_memory();
}
