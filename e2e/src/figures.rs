//! What `figures_for_1000_pending_pods` (docs/performance.md, "The controller's provisioning loop") measures
//! and how it reads it: the controller's resident memory split into heap and file-backed pages, and, per pod,
//! the time from the pod becoming unschedulable to the CreateFleet call of its NodeClaim, split at the close
//! of the batch window whose solve made the claim and at the claim's creation.
//!
//! Every time here is wall-clock time on this host: the test watches the pods itself (the pod's own
//! condition times have whole-second resolution) and the controller, on the same host, logs when a batch
//! window closes, when it created a NodeClaim and when it calls CreateFleet.

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::watcher;
use kube::Api;
use serde::Deserialize;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// A process's resident memory, from `/proc/PID/smaps_rollup` and `/proc/PID/status`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Memory {
    pub rss_mib: f64,
    /// Anonymous pages: the heap, thread stacks and other private allocations.
    pub anonymous_mib: f64,
    /// Pages of mapped files: the binary's code and read-only data, shared libraries.
    pub file_mib: f64,
    /// The peak resident set size (`VmHWM`).
    pub peak_mib: f64,
    /// Threads: each has a stack, and with mimalloc a heap of its own.
    pub threads: u32,
}

impl Memory {
    pub fn of(pid: u32) -> Result<Memory> {
        let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
            .context("reading smaps_rollup")?;
        let status =
            std::fs::read_to_string(format!("/proc/{pid}/status")).context("reading status")?;
        Memory::parse(&rollup, &status)
    }

    fn parse(rollup: &str, status: &str) -> Result<Memory> {
        let rss = kib(rollup, "Rss")?;
        let anonymous = kib(rollup, "Anonymous")?;
        let shmem = kib(rollup, "Shmem").unwrap_or(0.0);
        Ok(Memory {
            rss_mib: rss / 1024.0,
            anonymous_mib: anonymous / 1024.0,
            file_mib: (rss - anonymous - shmem) / 1024.0,
            peak_mib: kib(status, "VmHWM")? / 1024.0,
            threads: field(status, "Threads")
                .and_then(|v| v.parse().ok())
                .context("no Threads line")?,
        })
    }
}

impl std::fmt::Display for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RSS {:.1} MiB (anonymous {:.1}, file-backed {:.1}), peak {:.1} MiB, {} threads",
            self.rss_mib, self.anonymous_mib, self.file_mib, self.peak_mib, self.threads
        )
    }
}

/// The kB value of the `name:` line of a `/proc` file.
fn kib(text: &str, name: &str) -> Result<f64> {
    field(text, name)
        .and_then(|v| v.trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no {name} line"))
}

/// The value of the `name:` line of a `/proc` file, trimmed.
fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// When each pod of a namespace was first seen unschedulable, by this process.
#[derive(Clone, Default)]
pub struct Unschedulable(Arc<Mutex<HashMap<String, SystemTime>>>);

impl Unschedulable {
    /// Watches the pods of `api` until the returned task is aborted.
    pub fn watch(api: Api<Pod>) -> (Unschedulable, tokio::task::JoinHandle<()>) {
        let seen = Unschedulable::default();
        let record = seen.clone();
        let task = tokio::spawn(async move {
            let events = watcher(api, watcher::Config::default());
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                let now = SystemTime::now();
                let pods = match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => vec![pod],
                    _ => continue,
                };
                let mut seen = record.0.lock().unwrap_or_else(|p| p.into_inner());
                for pod in pods.iter().filter(|p| is_unschedulable(p)) {
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    seen.entry(name).or_insert(now);
                }
            }
        });
        (seen, task)
    }

    pub fn times(&self) -> HashMap<String, SystemTime> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

fn is_unschedulable(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        })
}

/// What the controller's JSON log says about provisioning: when batch windows closed, and when each
/// NodeClaim was created and its (first) CreateFleet call made.
#[derive(Debug, Default, PartialEq)]
pub struct ControllerLog {
    pub windows_closed: Vec<SystemTime>,
    pub claims_created: BTreeMap<String, SystemTime>,
    pub fleet_calls: BTreeMap<String, SystemTime>,
    /// Claims CreateFleet was called for more than once (without faults, a double launch).
    pub repeated_fleet_calls: BTreeSet<String>,
}

#[derive(Deserialize)]
struct LogLine {
    /// RFC 3339 with microseconds (`metav1.Time` would round it to the second).
    timestamp: String,
    fields: LogFields,
}

#[derive(Deserialize)]
struct LogFields {
    message: String,
    nodeclaim: Option<String>,
}

impl ControllerLog {
    /// Reads the lines of `text` this needs; others (and lines that are not JSON) are skipped.
    pub fn parse(text: &str) -> ControllerLog {
        let mut log = ControllerLog::default();
        for line in text.lines() {
            let Ok(line) = serde_json::from_str::<LogLine>(line) else {
                continue;
            };
            let Ok(at) = line.timestamp.parse::<Timestamp>() else {
                continue;
            };
            let at = SystemTime::from(at);
            match (line.fields.message.as_str(), line.fields.nodeclaim) {
                ("batch window closed", _) => log.windows_closed.push(at),
                ("created nodeclaim", Some(claim)) => {
                    log.claims_created.entry(claim).or_insert(at);
                }
                ("calling CreateFleet", Some(claim)) => match log.fleet_calls.entry(claim) {
                    Entry::Occupied(first) => {
                        log.repeated_fleet_calls.insert(first.key().clone());
                    }
                    Entry::Vacant(first) => {
                        first.insert(at);
                    }
                },
                _ => {}
            }
        }
        log.windows_closed.sort();
        log
    }

    /// The last window close at or before `at`.
    fn window_before(&self, at: SystemTime) -> Option<SystemTime> {
        self.windows_closed
            .iter()
            .rev()
            .find(|&&w| w <= at)
            .copied()
    }
}

/// One pod's way from unschedulable to its claim's CreateFleet call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PodLaunch {
    /// Unschedulable → the CreateFleet call.
    pub total: Duration,
    /// Unschedulable → the close of the batch window whose solve made the claim.
    pub window: Duration,
    /// That close → the NodeClaim created: snapshot, catalogs, solve, the create call.
    pub solve: Duration,
    /// The NodeClaim created → its CreateFleet call: the lifecycle controller's watch, the instance and type
    /// listing, the launch template.
    pub launch: Duration,
}

impl PodLaunch {
    /// The controller's part: from the window's close to the CreateFleet call.
    pub fn after_window(&self) -> Duration {
        self.total.saturating_sub(self.window)
    }
}

/// The launches of the pods in `nominated` (pod name → NodeClaim name) that were unschedulable when the window
/// whose solve made their claim closed; pods put on a claim made before they were pending are not launches of
/// theirs and are left out.
pub fn pod_launches(
    unschedulable: &HashMap<String, SystemTime>,
    nominated: &HashMap<String, String>,
    log: &ControllerLog,
) -> Vec<PodLaunch> {
    let mut launches = Vec::new();
    for (pod, claim) in nominated {
        let (Some(&pending), Some(&created), Some(&fleet)) = (
            unschedulable.get(pod),
            log.claims_created.get(claim),
            log.fleet_calls.get(claim),
        ) else {
            continue;
        };
        let Some(closed) = log.window_before(created) else {
            continue;
        };
        let (Ok(total), Ok(window)) = (
            fleet.duration_since(pending),
            closed.duration_since(pending),
        ) else {
            continue;
        };
        launches.push(PodLaunch {
            total,
            window,
            solve: created.duration_since(closed).unwrap_or_default(),
            launch: fleet.duration_since(created).unwrap_or_default(),
        });
    }
    launches
}

/// The `p`-quantile (0..=1) of `values`, nearest rank; `None` when empty.
pub fn quantile(values: &[Duration], p: f64) -> Option<Duration> {
    let mut sorted = values.to_vec();
    sorted.sort();
    let rank = (p * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted.get(rank - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_splits_the_rollup_into_anonymous_and_file_pages() {
        let rollup = "00400000-7ffd [rollup]\nRss:              102400 kB\nPss:  90000 kB\n\
                      Shmem:  1024 kB\nAnonymous:         61440 kB\n";
        let status = "Name:\tkerf\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t7\n";
        let memory = Memory::parse(rollup, status).expect("parses");
        assert_eq!(
            memory,
            Memory {
                rss_mib: 100.0,
                anonymous_mib: 60.0,
                file_mib: 39.0,
                peak_mib: 200.0,
                threads: 7,
            }
        );
        assert!(Memory::parse("Pss: 1 kB\n", status).is_err());
    }

    fn at(ms: u64) -> SystemTime {
        // 2026-11-23T04:00:00Z
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_406_400) + Duration::from_millis(ms)
    }

    fn line(ms: u64, message: &str, claim: Option<&str>) -> String {
        // As tracing-subscriber prints it: RFC 3339, UTC, microseconds.
        let timestamp = Timestamp::try_from(at(ms))
            .expect("in range")
            .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
            .to_string();
        let mut fields = serde_json::json!({"message": message});
        if let Some(claim) = claim {
            fields["nodeclaim"] = claim.into();
        }
        serde_json::json!({"timestamp": timestamp, "level": "DEBUG", "fields": fields}).to_string()
    }

    #[test]
    fn the_log_gives_window_closes_and_each_claims_first_fleet_call() {
        let text = [
            "not json".to_owned(),
            line(1_000, "batch window closed", None),
            line(1_010, "created nodeclaim", Some("general-a")),
            line(1_020, "calling CreateFleet", Some("general-a")),
            line(1_030, "created nodeclaim", Some("general-b")),
            line(1_040, "calling CreateFleet", Some("general-b")),
            line(1_050, "scheduling simulation done", None),
            line(5_000, "calling CreateFleet", Some("general-a")),
        ]
        .join("\n");
        let log = ControllerLog::parse(&text);
        assert_eq!(log.windows_closed, vec![at(1_000)]);
        assert_eq!(
            log.claims_created,
            BTreeMap::from([
                ("general-a".to_owned(), at(1_010)),
                ("general-b".to_owned(), at(1_030)),
            ])
        );
        assert_eq!(
            log.fleet_calls,
            BTreeMap::from([
                ("general-a".to_owned(), at(1_020)),
                ("general-b".to_owned(), at(1_040)),
            ])
        );
        assert_eq!(
            log.repeated_fleet_calls,
            BTreeSet::from(["general-a".to_owned()])
        );
    }

    #[test]
    fn a_pods_launch_is_split_at_the_window_that_made_its_claim() {
        let log = ControllerLog {
            // The window at 12 s closed while `first` was still launching: not the window that made it.
            windows_closed: vec![at(2_000), at(12_000), at(13_000)],
            claims_created: BTreeMap::from([
                ("first".to_owned(), at(2_010)),
                ("second".to_owned(), at(13_020)),
            ]),
            fleet_calls: BTreeMap::from([
                ("first".to_owned(), at(12_030)),
                ("second".to_owned(), at(13_040)),
            ]),
            repeated_fleet_calls: BTreeSet::new(),
        };
        let unschedulable = HashMap::from([
            ("a".to_owned(), at(500)),
            ("b".to_owned(), at(4_000)),
            // Put on `first` though pending after the window that made it: a claim already made, not its
            // launch.
            ("c".to_owned(), at(3_000)),
        ]);
        let nominated = HashMap::from([
            ("a".to_owned(), "first".to_owned()),
            ("b".to_owned(), "second".to_owned()),
            ("c".to_owned(), "first".to_owned()),
            ("unseen".to_owned(), "first".to_owned()),
        ]);
        let mut launches = pod_launches(&unschedulable, &nominated, &log);
        launches.sort_by_key(|l| l.total);
        let ms = Duration::from_millis;
        assert_eq!(
            launches,
            vec![
                PodLaunch {
                    total: ms(9_040),
                    window: ms(9_000),
                    solve: ms(20),
                    launch: ms(20)
                },
                PodLaunch {
                    total: ms(11_530),
                    window: ms(1_500),
                    solve: ms(10),
                    launch: ms(10_020)
                },
            ]
        );
    }

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let values: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        assert_eq!(quantile(&values, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(quantile(&values, 0.99), Some(Duration::from_millis(99)));
        assert_eq!(quantile(&values, 0.0), Some(Duration::from_millis(1)));
        assert_eq!(quantile(&[], 0.5), None);
    }
}
