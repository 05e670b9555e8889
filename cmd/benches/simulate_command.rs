//! The whole `kerf simulate` command as a user runs it: the release binary, a scenario file on disk, the JSON
//! report on stdout. Pods come in Karpenter's five-way diverse mix (generic, zonal spread, hostname spread, zonal
//! self-affinity, hostname anti-affinity; requests cycling through 100m–1.5 CPU and 100Mi–1.5Gi) as Deployments,
//! over one NodePool that admits every type of the embedded us-east-1 catalog.
//!
//! For each size it prints the median wall time of `KERF_RUNS` runs (default 3), the peak RSS of the child process
//! (`wait4`'s `ru_maxrss`) and the growth exponent against the previous size. `KERF_SIZES` (comma-separated pod
//! counts, default `5000,20000`) picks the sizes; with `KERF_SCENARIO_DIR` the scenario files are written there and
//! kept (for a profiler). docs/performance.md records the figures and the command.
//!
//! Then a timeline: `KERF_TIMELINE_HOURS` (default 24) of a cluster of `KERF_TIMELINE_NODES` nodes (comma-separated,
//! default `250,1000`): one pod per node (hostname anti-affinity), `consolidateAfter: 5m`, and the workload scaled
//! to 90 % at 6h, back at 12h and to 80 % at 18h. It prints the same figures and the cluster-hours simulated per
//! wall second. An empty list skips either part.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

const CPUS: [&str; 5] = ["100m", "250m", "500m", "1", "1500m"];
const MEMORIES: [&str; 5] = ["100Mi", "256Mi", "512Mi", "1Gi", "1536Mi"];

const HEAD: &str = "\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand, spot]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: bench}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: bench}}]
";

/// The scheduling constraint of each fifth of the mix, as the pod spec's YAML fields (indented for the template).
fn constraint(group: &str) -> String {
    let term = |kind: &str, key: &str| {
        format!(
            "      affinity:\n        {kind}:\n          requiredDuringSchedulingIgnoredDuringExecution:\n            \
             - topologyKey: {key}\n              labelSelector: {{matchLabels: {{group: {group}}}}}\n"
        )
    };
    let spread = |key: &str| {
        format!(
            "      topologySpreadConstraints:\n        - {{maxSkew: 1, topologyKey: {key}, whenUnsatisfiable: \
             DoNotSchedule, labelSelector: {{matchLabels: {{group: {group}}}}}}}\n"
        )
    };
    match group {
        "zonal-spread" => spread("topology.kubernetes.io/zone"),
        "hostname-spread" => spread("kubernetes.io/hostname"),
        "zonal-affinity" => term("podAffinity", "topology.kubernetes.io/zone"),
        "hostname-anti-affinity" => term("podAntiAffinity", "kubernetes.io/hostname"),
        _ => String::new(),
    }
}

/// A scenario of `pods` diverse pods: per fifth of the mix, one Deployment per request shape (25 shapes).
fn scenario(pods: usize) -> String {
    let groups = [
        "generic",
        "zonal-spread",
        "hostname-spread",
        "zonal-affinity",
        "hostname-anti-affinity",
    ];
    let shapes = CPUS.len() * MEMORIES.len();
    let per_group = pods / groups.len();
    let mut text = HEAD.to_owned();
    for group in groups {
        for shape in 0..shapes {
            let replicas = per_group / shapes + usize::from(shape < per_group % shapes);
            if replicas == 0 {
                continue;
            }
            let (cpu, memory) = (CPUS[shape % 5], MEMORIES[shape / 5]);
            text.push_str(&format!(
                "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {group}-{shape}, namespace: default}}\n\
                 spec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {group}-{shape}}}}}\n  template:\n    \
                 metadata: {{labels: {{app: {group}-{shape}, group: {group}}}}}\n    spec:\n{}      containers:\n        \
                 - name: c\n          image: pause\n          resources: {{requests: {{cpu: \"{cpu}\", memory: {memory}}}}}\n",
                constraint(group)
            ));
        }
    }
    text
}

/// A timeline of `hours` of a cluster of `nodes` nodes, one pod each, scaled down, up and down again.
fn timeline_scenario(nodes: usize, hours: usize) -> String {
    let events: String = [(6, nodes * 9 / 10), (12, nodes), (18, nodes * 8 / 10)]
        .iter()
        .filter(|(at, _)| *at < hours)
        .map(|(at, replicas)| {
            format!("    - {{at: {at}h, scale: {{deployment: web, replicas: {replicas}}}}}\n")
        })
        .collect();
    let events = if events.is_empty() {
        "  events: []\n".to_owned()
    } else {
        format!("  events:\n{events}")
    };
    let head = HEAD.replace(
        "        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand, spot]}\n",
        "        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n  \
         disruption: {consolidateAfter: 5m}\n",
    );
    format!(
        "apiVersion: kerf.sh/v1alpha1\nkind: Simulation\nspec:\n  duration: {hours}h\n{events}---\n{head}---\n\
         apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: default}}\nspec:\n  \
         replicas: {nodes}\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    \
         spec:\n{}      containers:\n        - name: c\n          image: pause\n          \
         resources: {{requests: {{cpu: \"1\", memory: 1Gi}}}}\n",
        constraint("hostname-anti-affinity").replace("group: hostname-anti-affinity", "app: web")
    )
}

/// Runs `kerf simulate -o json file`: wall seconds, peak RSS in MiB, report bytes.
fn run(kerf: &str, file: &Path) -> (f64, f64, usize) {
    let started = Instant::now();
    let mut child = Command::new(kerf)
        .args(["simulate", "-o", "json"])
        .arg(file)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kerf simulate starts");
    let mut report = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        std::io::copy(&mut out, &mut report).expect("reading the report");
    }
    let pid = libc::pid_t::try_from(child.id()).expect("a pid");
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value; wait4 reaps our own child (std's `wait` would not give its
    // rusage), and `child` is forgotten below so nothing waits for it twice.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    std::mem::forget(child);
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(waited, pid, "wait4 on kerf simulate");
    let status = std::process::ExitStatus::from_raw(status);
    assert!(status.success(), "kerf simulate failed: {status}");
    // ru_maxrss is in KiB on Linux.
    (seconds, usage.ru_maxrss as f64 / 1024.0, report.len())
}

/// The median wall time, the peak RSS and the report size of `runs` runs on `file`.
fn measure(kerf: &str, file: &Path, runs: usize) -> (f64, f64, usize) {
    let mut samples: Vec<(f64, f64, usize)> = (0..runs.max(1)).map(|_| run(kerf, file)).collect();
    samples.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (seconds, _, bytes) = samples[samples.len() / 2];
    let rss = samples.iter().map(|s| s.1).fold(0.0, f64::max);
    (seconds, rss, bytes)
}

/// The growth exponents of time and memory from `previous` (size, seconds, MiB) to this size.
fn growth(previous: Option<(usize, f64, f64)>, size: usize, seconds: f64, rss: f64) -> String {
    previous
        .map(|(n, t, m)| {
            let scale = (size as f64 / n as f64).ln();
            format!(
                "n^{:.2}, n^{:.2}",
                (seconds / t).ln() / scale,
                (rss / m).ln() / scale
            )
        })
        .unwrap_or_default()
}

fn write(file: &Path, text: &str) {
    std::fs::File::create(file)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .expect("writing the scenario");
}

/// A comma-separated list of sizes from `var`, else `default`.
fn sizes(var: &str, default: &str) -> Vec<usize> {
    std::env::var(var)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

fn main() {
    let kerf = env!("CARGO_BIN_EXE_kerf");
    let runs: usize = std::env::var("KERF_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let temporary = tempfile::tempdir().expect("a temporary directory");
    let dir = std::env::var_os("KERF_SCENARIO_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| temporary.path().to_owned());
    let mut previous: Option<(usize, f64, f64)> = None;
    println!("pods | wall (median of {runs}) | peak RSS | report | growth (time, memory)");
    for pods in sizes("KERF_SIZES", "5000,20000") {
        let file = dir.join(format!("diverse-{pods}.yaml"));
        write(&file, &scenario(pods));
        let (seconds, rss, bytes) = measure(kerf, &file, runs);
        println!(
            "{pods} | {seconds:.3} s | {rss:.1} MiB | {:.1} MB | {}",
            bytes as f64 / 1e6,
            growth(previous, pods, seconds, rss)
        );
        previous = Some((pods, seconds, rss));
    }
    let hours: usize = std::env::var("KERF_TIMELINE_HOURS")
        .ok()
        .and_then(|h| h.parse().ok())
        .unwrap_or(24);
    let mut previous: Option<(usize, f64, f64)> = None;
    println!();
    println!("timeline of {hours}h: nodes | wall (median of {runs}) | cluster-hours per second | peak RSS | growth (time, memory)");
    for nodes in sizes("KERF_TIMELINE_NODES", "250,1000") {
        let file = dir.join(format!("timeline-{nodes}-{hours}h.yaml"));
        write(&file, &timeline_scenario(nodes, hours));
        let (seconds, rss, _) = measure(kerf, &file, runs);
        println!(
            "{nodes} | {seconds:.3} s | {:.1} | {rss:.1} MiB | {}",
            hours as f64 / seconds,
            growth(previous, nodes, seconds, rss)
        );
        previous = Some((nodes, seconds, rss));
    }
}
