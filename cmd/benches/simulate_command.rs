//! The whole `kerf simulate` command as a user runs it: the release binary, a scenario file on disk, the JSON
//! report on stdout. Pods come in Karpenter's five-way diverse mix (generic, zonal spread, hostname spread, zonal
//! self-affinity, hostname anti-affinity; requests cycling through 100m–1.5 CPU and 100Mi–1.5Gi) as Deployments,
//! over one NodePool that admits every type of the embedded us-east-1 catalog.
//!
//! For each size it prints the median wall time of `KERF_RUNS` runs (default 3), the peak RSS of the child process
//! (`wait4`'s `ru_maxrss`) and the growth exponent against the previous size. `KERF_SIZES` (comma-separated pod
//! counts, default `5000,20000`) picks the sizes; with `KERF_SCENARIO_DIR` the scenario files are written there and
//! kept (for a profiler). docs/performance.md records the figures and the command.

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

fn main() {
    let kerf = env!("CARGO_BIN_EXE_kerf");
    let runs: usize = std::env::var("KERF_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let sizes: Vec<usize> = std::env::var("KERF_SIZES")
        .unwrap_or_else(|_| "5000,20000".to_owned())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let temporary = tempfile::tempdir().expect("a temporary directory");
    let dir = std::env::var_os("KERF_SCENARIO_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| temporary.path().to_owned());
    let mut previous: Option<(usize, f64, f64)> = None;
    println!("pods | wall (median of {runs}) | peak RSS | report | growth (time, memory)");
    for pods in sizes {
        let file = dir.join(format!("diverse-{pods}.yaml"));
        std::fs::File::create(&file)
            .and_then(|mut f| f.write_all(scenario(pods).as_bytes()))
            .expect("writing the scenario");
        let mut samples: Vec<(f64, f64, usize)> =
            (0..runs.max(1)).map(|_| run(kerf, &file)).collect();
        samples.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (seconds, _, bytes) = samples[samples.len() / 2];
        let rss = samples.iter().map(|s| s.1).fold(0.0, f64::max);
        let growth = previous
            .map(|(n, t, m)| {
                let scale = (pods as f64 / n as f64).ln();
                format!(
                    "n^{:.2}, n^{:.2}",
                    (seconds / t).ln() / scale,
                    (rss / m).ln() / scale
                )
            })
            .unwrap_or_default();
        println!(
            "{pods} | {seconds:.3} s | {rss:.1} MiB | {:.1} MB | {growth}",
            bytes as f64 / 1e6
        );
        previous = Some((pods, seconds, rss));
    }
}
