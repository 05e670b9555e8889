//! `kerf simulate SCENARIO`: run the admission and scheduling engine on a scenario and report.

use super::validate::CatalogArgs;
use crate::simulate::{load, Report, Simulation, TimelineRun};
use std::io::Write;
use std::path::{Path, PathBuf};
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
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// Scenarios with at least this many pending pods say on stderr when the solve starts and how long it took,
/// so a long run is visibly working (20,000 pods take about a third of a second).
const PROGRESS_PODS: usize = 1_000;

/// Runs the simulation; returns the exit code (0, 1 for an invalid scenario, 2 for unreadable input).
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
            u8::from(printed.is_err()) * 2
        }
        Err((code, message)) => {
            let _ = writeln!(stderr, "error: {message}");
            code
        }
    }
}

fn simulate(args: &SimulateArgs, stderr: &mut impl Write) -> Result<Report, (u8, String)> {
    let name = args.scenario.display();
    let text = std::fs::read_to_string(&args.scenario).map_err(|e| (2, format!("{name}: {e}")))?;
    let scenario = load(&text).map_err(|e| (1, format!("{name}: {e}")))?;
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
    let catalog = catalog_args.load().map_err(|e| (2, e))?;
    let simulation =
        Simulation::new(&scenario, &catalog).map_err(|e| (1, format!("{name}: {e}")))?;
    let pending = simulation.pending_pods();
    let progress = pending >= PROGRESS_PODS;
    if progress {
        let _ = writeln!(stderr, "simulating {pending} pending pods…");
    }
    let started = Instant::now();
    let plan = simulation.solve();
    let seconds = started.elapsed().as_secs_f64();
    if progress {
        let _ = writeln!(stderr, "solved {pending} pods in {seconds:.2} s");
    }
    let mut report = simulation.report(&plan, seconds);
    if let Some(timeline) = &scenario.timeline {
        let run = TimelineRun::new(&scenario, timeline, &catalog)
            .and_then(TimelineRun::run)
            .map_err(|e| (1, format!("{name}: {e}")))?;
        // A timeline report is reproducible byte for byte; the solve's wall-clock time would spoil that.
        report.summary.solve_seconds = None;
        report.timeline = Some(run);
    }
    Ok(report)
}
