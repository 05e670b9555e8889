//! `kerf simulate`: a scenario of ordinary objects run through the same admission and scheduling code as the
//! controller, with a readable report. (The virtual clock and disruption timeline come with issue 6.)

mod report;
mod run;
mod scenario;

pub use report::{ClaimReport, NodeReport, Report, Summary, UnschedulableReport};
pub use run::Simulation;
pub use scenario::{load, Scenario, ScenarioError, SimulationSettings};
