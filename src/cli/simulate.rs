//! `kerf simulate SCENARIO`: run the admission and scheduling engine on a scenario and report.

use super::input::InputArgs;
use super::validate::CatalogArgs;
use crate::disruption::parse_go_duration;
use crate::simulate::{
    from_documents, Report, ScenarioError, ScenarioLimits, Simulation, TimelineRun,
};
use k8s_openapi::jiff::SignedDuration;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct SimulateArgs {
    /// The scenario: multi-document YAML or JSON of NodePools, EC2NodeClasses, Pods, workloads, Nodes,
    /// NodeClaims, DaemonSets, PodDisruptionBudgets and an optional `kerf.sh/v1alpha1` Simulation document.
    pub scenario: PathBuf,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Text)]
    pub output: Format,
    #[command(flatten)]
    pub catalog: CatalogArgs,
    #[command(flatten)]
    pub input: InputArgs,
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// How big a scenario may be (docs/limits.md).
#[derive(clap::Args, Debug, Clone)]
pub struct LimitArgs {
    /// Refuse scenarios with more pods than this, counting workloads' replicas and scale events.
    #[arg(long, default_value_t = ScenarioLimits::default().max_pods)]
    pub max_pods: u64,
    /// Refuse timelines longer than this (a Go duration such as 744h).
    #[arg(long, default_value = "744h", value_parser = positive_duration)]
    pub max_duration: SignedDuration,
    /// Refuse timelines with more events than this.
    #[arg(long, default_value_t = ScenarioLimits::default().max_events)]
    pub max_events: usize,
}

fn positive_duration(text: &str) -> Result<SignedDuration, String> {
    parse_go_duration(text)
        .filter(|d| d.is_positive())
        .ok_or_else(|| format!("{text:?} is not a duration such as 744h"))
}

impl LimitArgs {
    fn limits(&self) -> ScenarioLimits {
        ScenarioLimits {
            max_pods: self.max_pods,
            max_duration: self.max_duration,
            max_events: self.max_events,
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// Scenarios with at least this many pending pods say on stderr when the solve starts and how long it took,
/// so a long run is visibly working (20,000 pods take about a third of a second).
const PROGRESS_PODS: usize = 1_000;

/// Exit codes, as `kerf validate`'s: a report, an invalid scenario (a rejected object, a limit of
/// [`LimitArgs`]), unreadable input (not YAML, a key given twice, beyond the input limits, a catalog file).
pub const REPORTED: u8 = 0;
pub const INVALID: u8 = 1;
pub const UNREADABLE: u8 = 2;

/// Runs the simulation; returns the exit code.
pub fn run(args: &SimulateArgs, stdout: &mut impl Write, stderr: &mut impl Write) -> u8 {
    match simulate(args, stderr) {
        Ok(report) => {
            let printed = match args.output {
                Format::Text => write!(stdout, "{}", report.text()),
                Format::Json => writeln!(
                    stdout,
                    "{}",
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                ),
            };
            if printed.is_ok() {
                REPORTED
            } else {
                UNREADABLE
            }
        }
        Err((code, message)) => {
            let _ = writeln!(stderr, "error: {message}");
            code
        }
    }
}

fn simulate(args: &SimulateArgs, stderr: &mut impl Write) -> Result<Report, (u8, String)> {
    let name = args.scenario.display();
    let documents = args
        .input
        .reader()
        .documents(&args.scenario)
        .map_err(|e| (UNREADABLE, format!("{name}: {e}")))?;
    let scenario = from_documents(documents, &args.limits.limits()).map_err(|e| {
        let code = match e {
            ScenarioError::Manifest(_) => UNREADABLE,
            _ => INVALID,
        };
        (code, format!("{name}: {e}"))
    })?;
    for ignored in &scenario.ignored {
        let _ = writeln!(
            stderr,
            "note: {name}: {ignored} is not simulated yet and was ignored"
        );
    }
    let base = args.scenario.parent().unwrap_or(Path::new("."));
    let settings = &scenario.settings;
    let catalog_args = CatalogArgs {
        region: settings
            .region
            .clone()
            .unwrap_or_else(|| args.catalog.region.clone()),
        pricing_file: settings
            .pricing_file
            .as_ref()
            .map(|p| base.join(p))
            .or_else(|| args.catalog.pricing_file.clone()),
        instance_types: settings
            .instance_types
            .as_ref()
            .map(|p| base.join(p))
            .or_else(|| args.catalog.instance_types.clone()),
    };
    let catalog = catalog_args.load().map_err(|e| (UNREADABLE, e))?;
    let gates = settings
        .feature_gates()
        .map_err(|e| (INVALID, format!("{name}: {e}")))?;
    let catalog = Arc::new(if gates.reserved_capacity {
        catalog
    } else {
        catalog.without_reserved_capacity()
    });
    // The one solve's simulation and decisions are dropped before a timeline runs: only its report is kept.
    let mut report = {
        let simulation = Simulation::new(&scenario, catalog.clone())
            .map_err(|e| (INVALID, format!("{name}: {e}")))?;
        let pending = simulation.pending_pods();
        let progress = pending >= PROGRESS_PODS;
        if progress {
            let _ = writeln!(stderr, "simulating {pending} pending pods…");
        }
        let started = Instant::now();
        let decisions = simulation
            .solve()
            .map_err(|e| (INVALID, format!("{name}: {e}")))?;
        let seconds = started.elapsed().as_secs_f64();
        if progress {
            let _ = writeln!(stderr, "solved {pending} pods in {seconds:.2} s");
        }
        simulation.report(&decisions, seconds)
    };
    if let Some(timeline) = &scenario.timeline {
        let run = TimelineRun::new(&scenario, timeline, &catalog)
            .and_then(TimelineRun::run)
            .map_err(|e| (INVALID, format!("{name}: {e}")))?;
        // A timeline report is reproducible byte for byte; the solve's wall-clock time would spoil that.
        report.summary.solve_seconds = None;
        report.timeline = Some(run);
    }
    Ok(report)
}
