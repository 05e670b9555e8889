//! The settings of a scenario's `kerf.sh/v1alpha1 Simulation` document, and what they read as: policies, feature
//! gates, the scheduler config and the disruption settings.

use crate::engine::FeatureGates;
use crate::scheduling::{Policies, SchedulerConfig};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// Settings from the `Simulation` document; paths are relative to the scenario file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SimulationSettings {
    pub region: Option<String>,
    /// An `--instance-types` file replacing the embedded catalog.
    pub instance_types: Option<String>,
    pub pricing_file: Option<String>,
    /// Echoed in the report. The solve is deterministic and draws no random numbers; the seed is kept for
    /// the randomised parts of later simulations, so a scenario states it once.
    pub seed: Option<u64>,
    /// How long a timeline runs on the virtual clock (a Go duration such as `12h`); without it the simulation
    /// is the single solve of today's report.
    pub duration: Option<String>,
    /// When the virtual clock starts (RFC 3339); budgets' cron schedules are read against it.
    pub start: Option<String>,
    /// What happens during the timeline; see [`events`](crate::simulate::events).
    #[serde(default)]
    pub events: Vec<Value>,
    /// `Respect` (the default) or `Ignore`: as `kerf controller --preference-policy`.
    pub preference_policy: Option<String>,
    /// `Strict` (the default) or `BestEffort`: as `kerf controller --min-values-policy`.
    pub min_values_policy: Option<String>,
    /// As `kerf controller --feature-gates`: the `Name=true,...` string, or a map of gate to boolean (the chart's
    /// `settings.featureGates`, camelCase names allowed).
    pub feature_gates: Option<GatesSpec>,
    /// As `kerf controller --scheduler-config` (the chart's `settings.schedulerConfig`), written as an object:
    /// `{podTopologySpread: {defaultConstraints: [...]}}`, the cluster's default topology spread.
    pub scheduler_config: Option<Value>,
    /// As `kerf controller --enable-zonal-shift` (the chart's `settings.enableZonalShift`): `zonalShift` events
    /// take their zone's offerings away while they last.
    #[serde(default)]
    pub enable_zonal_shift: bool,
}

/// A Simulation's `spec.featureGates`, in either of the forms users know.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum GatesSpec {
    Text(String),
    Map(BTreeMap<String, bool>),
}

impl SimulationSettings {
    /// The solve's policies these settings name; the field and the reason when one is not a policy.
    pub fn policies(&self) -> Result<Policies, String> {
        let mut policies = Policies::default();
        if let Some(value) = &self.preference_policy {
            policies.preferences = value
                .parse()
                .map_err(|e| format!("spec.preferencePolicy: {e}"))?;
        }
        if let Some(value) = &self.min_values_policy {
            policies.min_values = value
                .parse()
                .map_err(|e| format!("spec.minValuesPolicy: {e}"))?;
        }
        Ok(policies)
    }

    /// The feature gates these settings name; the field and the reason when they are refused.
    pub fn feature_gates(&self) -> Result<FeatureGates, String> {
        let gates = match &self.feature_gates {
            None => Ok(FeatureGates::default()),
            Some(GatesSpec::Text(text)) => FeatureGates::parse(text),
            Some(GatesSpec::Map(map)) => {
                let mut gates = FeatureGates::default();
                map.iter()
                    .try_for_each(|(name, on)| gates.set(name, *on))
                    .map(|()| gates)
            }
        };
        gates.map_err(|e| format!("spec.featureGates: {e}"))
    }

    /// The `--scheduler-config` these settings name (none when unset); the field and the reason when refused.
    pub fn scheduler_config(&self) -> Result<SchedulerConfig, String> {
        self.scheduler_config
            .as_ref()
            .map_or(Ok(SchedulerConfig::default()), SchedulerConfig::from_value)
            .map_err(|e| format!("spec.schedulerConfig: {e}"))
    }

    /// What the disruption engine reads of these settings.
    pub fn disruption(&self) -> Result<crate::disruption::Settings, String> {
        Ok(crate::disruption::Settings {
            policies: self.policies()?,
            spot_to_spot: self.feature_gates()?.spot_to_spot_consolidation,
            ..crate::disruption::Settings::default()
        })
    }
}
