//! How the solve treats preferences and `minValues`, as the operator chose (Karpenter's `--preference-policy` /
//! `PREFERENCE_POLICY` and `--min-values-policy` / `MIN_VALUES_POLICY`), and the one way a pod to be solved for
//! is prepared for the solve ([`Policies::apply`]): the cluster's default spread, then the preference policy.

use super::default_spread::DefaultSpread;
use super::min_values::MinValuesPolicy;
use k8s_openapi::api::core::v1::Pod;
use std::borrow::Cow;
use std::str::FromStr;

/// What the solve does with a pod's preferences: preferred node affinity, preferred pod affinity and
/// anti-affinity, and `ScheduleAnyway` topology spread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PreferencePolicy {
    /// Honoured while they can be, relaxed one at a time when they cannot (the default).
    #[default]
    Respect,
    /// Left out altogether: only what a pod requires counts.
    Ignore,
}

impl PreferencePolicy {
    /// `pod` as the solve sees it: without its preferences under [`PreferencePolicy::Ignore`].
    pub fn apply<'p>(self, pod: &'p Pod) -> Cow<'p, Pod> {
        if self == PreferencePolicy::Respect || !has_preferences(pod) {
            return Cow::Borrowed(pod);
        }
        let mut pod = pod.clone();
        if let Some(spec) = pod.spec.as_mut() {
            if let Some(affinity) = spec.affinity.as_mut() {
                if let Some(a) = affinity.node_affinity.as_mut() {
                    a.preferred_during_scheduling_ignored_during_execution = None;
                }
                if let Some(a) = affinity.pod_affinity.as_mut() {
                    a.preferred_during_scheduling_ignored_during_execution = None;
                }
                if let Some(a) = affinity.pod_anti_affinity.as_mut() {
                    a.preferred_during_scheduling_ignored_during_execution = None;
                }
            }
            if let Some(spreads) = spec.topology_spread_constraints.as_mut() {
                spreads.retain(|c| c.when_unsatisfiable != "ScheduleAnyway");
            }
        }
        Cow::Owned(pod)
    }
}

fn has_preferences(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let affinity = spec.affinity.as_ref();
    let preferred_node = affinity
        .and_then(|a| a.node_affinity.as_ref())
        .is_some_and(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .is_some()
        });
    let preferred_pod = affinity
        .and_then(|a| a.pod_affinity.as_ref())
        .is_some_and(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .is_some()
        });
    let preferred_anti = affinity
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .is_some_and(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .is_some()
        });
    let soft_spread = spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .any(|c| c.when_unsatisfiable == "ScheduleAnyway");
    preferred_node || preferred_pod || preferred_anti || soft_spread
}

impl FromStr for PreferencePolicy {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, String> {
        match value {
            "Respect" => Ok(PreferencePolicy::Respect),
            "Ignore" => Ok(PreferencePolicy::Ignore),
            other => Err(format!(
                "{other:?} is not a preference policy: Respect or Ignore"
            )),
        }
    }
}

impl FromStr for MinValuesPolicy {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, String> {
        match value {
            "Strict" => Ok(MinValuesPolicy::Strict),
            "BestEffort" => Ok(MinValuesPolicy::BestEffort),
            other => Err(format!(
                "{other:?} is not a minValues policy: Strict or BestEffort"
            )),
        }
    }
}

/// Both policies, as every solve takes them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policies {
    pub preferences: PreferencePolicy,
    pub min_values: MinValuesPolicy,
}

impl Policies {
    /// `pod` as a solve sees it: given the cluster's default spread (`spread`) when it declares none, then without
    /// its preferences under [`PreferencePolicy::Ignore`] (a `ScheduleAnyway` default among them, as Karpenter
    /// injects the defaults before its scheduler drops preferences). Provisioning and the disruption simulation
    /// both prepare the pods they place through here.
    pub fn apply<'p>(self, pod: &'p Pod, spread: &DefaultSpread) -> Cow<'p, Pod> {
        match spread.apply(pod) {
            Cow::Borrowed(pod) => self.preferences.apply(pod),
            Cow::Owned(defaulted) => match self.preferences.apply(&defaulted) {
                Cow::Owned(stripped) => Cow::Owned(stripped),
                Cow::Borrowed(_) => Cow::Owned(defaulted),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ignore_drops_every_preference_and_keeps_what_is_required() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}]},
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 1, "preference": {"matchExpressions": [{"key": "b", "operator": "In", "values": ["2"]}]}}]
                    },
                    "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}
                },
                "topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"},
                    {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}
                ]
            }
        }))
        .expect("pod");
        assert!(matches!(
            PreferencePolicy::Respect.apply(&pod),
            Cow::Borrowed(_)
        ));
        let ignored = PreferencePolicy::Ignore.apply(&pod);
        let spec = ignored.spec.as_ref().expect("spec");
        let affinity = spec.affinity.as_ref().expect("affinity");
        let node = affinity.node_affinity.as_ref().expect("node affinity");
        assert!(node
            .required_during_scheduling_ignored_during_execution
            .is_some());
        assert!(node
            .preferred_during_scheduling_ignored_during_execution
            .is_none());
        assert!(affinity
            .pod_anti_affinity
            .as_ref()
            .expect("anti")
            .preferred_during_scheduling_ignored_during_execution
            .is_none());
        let spreads = spec.topology_spread_constraints.as_ref().expect("spreads");
        assert_eq!(spreads.len(), 1);
        assert_eq!(spreads[0].when_unsatisfiable, "DoNotSchedule");
        assert_eq!("BestEffort".parse(), Ok(MinValuesPolicy::BestEffort));
        assert!("best".parse::<PreferencePolicy>().is_err());
    }

    /// A `ScheduleAnyway` default is a preference like any other: `Ignore` drops it once it is given.
    #[test]
    fn the_default_spread_comes_first_then_the_preference_policy() {
        let config = super::super::SchedulerConfig::parse(
            "podTopologySpread: {defaultConstraints: [
               {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway},
               {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}]}",
        )
        .expect("config");
        let mut spread = DefaultSpread::new(&config);
        spread.add_service(
            &serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "default"},
                                           "spec": {"selector": {"app": "web"}}}))
            .expect("service"),
        );
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"containers": []}
        }))
        .expect("pod");
        let keys = |policies: Policies| -> Vec<String> {
            let applied = policies.apply(&pod, &spread);
            applied
                .spec
                .as_ref()
                .and_then(|s| s.topology_spread_constraints.as_ref())
                .into_iter()
                .flatten()
                .map(|c| c.topology_key.clone())
                .collect()
        };
        assert_eq!(
            keys(Policies::default()),
            ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
        );
        let ignore = Policies {
            preferences: PreferencePolicy::Ignore,
            ..Policies::default()
        };
        assert_eq!(keys(ignore), ["kubernetes.io/hostname"]);
        assert!(matches!(
            Policies::default().apply(&pod, DefaultSpread::none()),
            Cow::Borrowed(_)
        ));
    }
}
