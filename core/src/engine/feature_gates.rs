//! Karpenter's feature gates (`--feature-gates` / `FEATURE_GATES`, the chart's `settings.featureGates`, a
//! Simulation's `spec.featureGates`): `Name=bool` pairs separated by commas, each gate defaulting as in
//! Karpenter v1.14. Two deliberate differences, so that no gate is silently ignored: a gate kerf does not know
//! is an error naming the known ones (Karpenter skips it), and a gate whose capability kerf does not have yet
//! cannot be switched on (docs/controller.md lists them).

use std::fmt;

/// Every gate, as Karpenter names it, with its default.
pub const GATES: [(&str, bool); 6] = [
    ("NodeRepair", false),
    ("ReservedCapacity", true),
    ("SpotToSpotConsolidation", false),
    ("NodeOverlay", false),
    ("StaticCapacity", false),
    ("CapacityBuffer", false),
];

/// The gates in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    /// Nodes whose Node reports an unhealthy condition past its toleration are replaced ([`super::repair`]).
    pub node_repair: bool,
    /// Capacity reservations as offerings: a catalog file's reserved offerings, and on AWS the reservations an
    /// EC2NodeClass's `capacityReservationSelectorTerms` select, launched into by targeting them
    /// (docs/scheduling.md, docs/cloud.md). Off: on-demand and spot only, and no reservation is looked up.
    pub reserved_capacity: bool,
    /// Consolidation may replace spot nodes with cheaper spot nodes (otherwise spot nodes are only deleted).
    pub spot_to_spot_consolidation: bool,
    /// NodeOverlays change instance types' prices and extended resources in every decision ([`super::overlay`]).
    pub node_overlay: bool,
    /// NodePools with `spec.replicas` keep that many nodes ([`super::static_capacity`]).
    pub static_capacity: bool,
    pub capacity_buffer: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        let mut gates = FeatureGates {
            node_repair: false,
            reserved_capacity: false,
            spot_to_spot_consolidation: false,
            node_overlay: false,
            static_capacity: false,
            capacity_buffer: false,
        };
        for (name, on) in GATES {
            if let Some(gate) = gates.gate_mut(name) {
                *gate = on;
            }
        }
        gates
    }
}

/// Why a feature-gate setting was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    #[error("malformed pair {0:?}: expected Name=true or Name=false")]
    Malformed(String),
    #[error("invalid value of {name}: {value:?} is not a boolean (true, false, 1, 0, t, f)")]
    NotBool { name: String, value: String },
    #[error("unknown feature gate {0:?}{hint}; the gates are {known}", hint = suggestion(.0), known = known())]
    Unknown(String),
}

fn suggestion(name: &str) -> String {
    GATES
        .iter()
        .find(|(known, _)| known.eq_ignore_ascii_case(name.trim()))
        .map_or_else(String::new, |(known, _)| {
            format!(" (did you mean {known}?)")
        })
}

fn known() -> String {
    GATES
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

impl FeatureGates {
    /// The gates `text` sets (`Name=bool,...`, whitespace around names and values allowed, empty pairs
    /// skipped), the others at their defaults. Booleans are spelled as Go's `strconv.ParseBool` accepts them.
    pub fn parse(text: &str) -> Result<Self, GateError> {
        let mut gates = FeatureGates::default();
        for pair in text.split(',') {
            if pair.trim().is_empty() {
                continue;
            }
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| GateError::Malformed(pair.to_owned()))?;
            let on = parse_bool(value.trim()).ok_or_else(|| GateError::NotBool {
                name: name.trim().to_owned(),
                value: value.trim().to_owned(),
            })?;
            gates.set(name.trim(), on)?;
        }
        Ok(gates)
    }

    /// Sets the gate `name` (Karpenter's name, or the chart's camelCase spelling of it).
    pub fn set(&mut self, name: &str, on: bool) -> Result<(), GateError> {
        let canonical = canonical(name).ok_or_else(|| GateError::Unknown(name.to_owned()))?;
        if let Some(gate) = self.gate_mut(canonical) {
            *gate = on;
        }
        Ok(())
    }

    /// The gate named `name` (Karpenter's spelling).
    pub fn get(&self, name: &str) -> Option<bool> {
        Some(match name {
            "NodeRepair" => self.node_repair,
            "ReservedCapacity" => self.reserved_capacity,
            "SpotToSpotConsolidation" => self.spot_to_spot_consolidation,
            "NodeOverlay" => self.node_overlay,
            "StaticCapacity" => self.static_capacity,
            "CapacityBuffer" => self.capacity_buffer,
            _ => return None,
        })
    }

    fn gate_mut(&mut self, name: &str) -> Option<&mut bool> {
        Some(match name {
            "NodeRepair" => &mut self.node_repair,
            "ReservedCapacity" => &mut self.reserved_capacity,
            "SpotToSpotConsolidation" => &mut self.spot_to_spot_consolidation,
            "NodeOverlay" => &mut self.node_overlay,
            "StaticCapacity" => &mut self.static_capacity,
            "CapacityBuffer" => &mut self.capacity_buffer,
            _ => return None,
        })
    }
}

/// Karpenter's name for `name`: itself, or the name whose first letter it lowercases (the chart's values).
fn canonical(name: &str) -> Option<&'static str> {
    GATES.iter().map(|(known, _)| *known).find(|known| {
        *known == name || {
            let mut chars = known.chars();
            chars.next().is_some_and(|first| {
                let camel: String = first.to_lowercase().chain(chars).collect();
                camel == name
            })
        }
    })
}

/// The spellings Go's `strconv.ParseBool` accepts.
fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// Karpenter's `FEATURE_GATES` syntax, every gate named.
impl fmt::Display for FeatureGates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pairs: Vec<String> = GATES
            .iter()
            .map(|(name, _)| format!("{name}={}", self.get(name).unwrap_or_default()))
            .collect();
        f.write_str(&pairs.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Karpenter's options suite, "should use the correct default values".
    #[test]
    fn defaults_are_karpenters() {
        let gates = FeatureGates::default();
        assert_eq!(
            gates.to_string(),
            "NodeRepair=false,ReservedCapacity=true,SpotToSpotConsolidation=false,NodeOverlay=false,\
             StaticCapacity=false,CapacityBuffer=false"
        );
        assert_eq!(FeatureGates::parse("").expect("empty"), gates);
        assert_eq!(
            FeatureGates::parse(&gates.to_string()).expect("own output"),
            gates
        );
    }

    /// Karpenter's options suite, "should successfully parse well formed feature gate strings" (its entry with
    /// the unknown gates `Hello` and `World` is refused here: a deliberate difference).
    #[test]
    fn well_formed_strings_set_spot_to_spot() {
        let table = [
            ("SpotToSpotConsolidation=true", true),
            ("SpotToSpotConsolidation=false", false),
            ("SpotToSpotConsolidation\t= false", false),
            (" SpotToSpotConsolidation = T ,", true),
            ("ReservedCapacity=false,SpotToSpotConsolidation=1", true),
            (",,SpotToSpotConsolidation=TRUE", true),
        ];
        for (text, want) in table {
            let gates = FeatureGates::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(gates.spot_to_spot_consolidation, want, "{text:?}");
        }
    }

    /// Karpenter's options suite, "should correctly set defaults when a subset of FeatureGates are specified":
    /// setting one gate leaves every other at its default.
    #[test]
    fn a_subset_leaves_the_rest_at_defaults() {
        for (name, default) in GATES {
            let flipped = FeatureGates::parse(&format!("{name}={}", !default)).expect(name);
            for (other, other_default) in GATES {
                let want = if other == name {
                    !default
                } else {
                    other_default
                };
                assert_eq!(flipped.get(other), Some(want), "{name} flipped, {other}");
            }
        }
    }

    #[test]
    fn bad_input_names_the_pair_or_the_gate() {
        let cases = [
            ("SpotToSpotConsolidation", "malformed pair"),
            (
                "SpotToSpotConsolidation=yes",
                "invalid value of SpotToSpotConsolidation",
            ),
            (
                "Hello=true",
                "unknown feature gate \"Hello\"; the gates are NodeRepair, ReservedCapacity",
            ),
            (
                "spottospotconsolidation=true",
                "did you mean SpotToSpotConsolidation?",
            ),
            ("=true", "unknown feature gate \"\""),
            ("é=ü", "invalid value of é"),
        ];
        for (text, want) in cases {
            let error = FeatureGates::parse(text).expect_err(text).to_string();
            assert!(error.contains(want), "{text:?}: {error}");
        }
        // Off is always fine, and so are the chart's camelCase names.
        let mut gates = FeatureGates::parse("NodeRepair=false,StaticCapacity=0").expect("off");
        gates
            .set("spotToSpotConsolidation", true)
            .expect("camelCase");
        assert!(gates.spot_to_spot_consolidation);
        assert!(
            FeatureGates::parse("NodeRepair=true")
                .expect("implemented")
                .node_repair
        );
    }
}
