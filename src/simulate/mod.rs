//! `kerf simulate`: a scenario of ordinary objects run through the same admission and scheduling code as the
//! controller, with a readable report. (The virtual clock and disruption timeline come with issue 6.)

mod report;
mod scenario;

pub use report::{ClaimReport, Report, Summary, UnschedulableReport};
pub use scenario::{load, Scenario, ScenarioError, SimulationSettings};
