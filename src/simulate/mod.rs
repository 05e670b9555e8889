//! `kerf simulate`: a scenario of ordinary objects run through the same admission and scheduling code as the
//! controller, with a readable report. With a `duration`, the scenario also runs on a virtual clock
//! (`timeline`): events, provisioning and the disruption engine, minute by minute.

mod events;
mod existing;
mod report;
mod run;
mod scenario;
mod settings;
mod sizes;
mod timeline;
mod timeline_report;

pub use events::{Action, Event, Interruption, Timeline, TimelineError, DEFAULT_START};
pub use report::{ClaimReport, NodeReport, Report, Summary, UnschedulableReport};
pub use run::Simulation;
pub use scenario::{
    from_documents, load, Scenario, ScenarioError, SimulationSettings, PODS_LISTED,
};
pub use sizes::ScenarioLimits;
pub use timeline::{TimelineRun, READY_AFTER};
pub use timeline_report::{CostHour, Entry, TimelineReport, Totals};
