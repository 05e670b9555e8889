//! A timeline's `duration` and `events`, read from the Simulation document and checked before anything runs,
//! so that a mistake is reported with the field it is in rather than halfway through a run.

use super::settings::SimulationSettings;
use super::sizes::ScenarioLimits;
use super::timeline_report::Entry;
use crate::admission::{self, Admitted};
use crate::api::nodepool::NodePool;
use crate::api::validation::Invalid;
use crate::disruption::parse_go_duration;
use crate::manifest::group_kind;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::Deserialize;
use serde_json::Value;

/// Where the virtual clock starts unless `start` says otherwise: a Monday at midnight UTC, so business-hours
/// cron windows (`0 9 * * mon-fri`) open on the first day.
pub const DEFAULT_START: &str = "2026-01-05T00:00:00Z";

/// The checked `duration`, `start` and `events` of a scenario.
#[derive(Clone, Debug)]
pub struct Timeline {
    pub start: Timestamp,
    pub duration: SignedDuration,
    /// In the order of `at`; events at the same instant keep the order they were written in.
    pub events: Vec<Event>,
}

#[derive(Clone, Debug)]
pub struct Event {
    /// Since the start.
    pub at: SignedDuration,
    pub action: Action,
}

#[derive(Clone, Debug)]
pub enum Action {
    /// Sets the replicas of a Deployment (or ReplicaSet, StatefulSet, Job) of the scenario.
    Scale {
        namespace: String,
        workload: String,
        replicas: u64,
    },
    /// A spot interruption of every matching node: it is drained and its pods wait for new capacity.
    Interrupt(Interruption),
    /// Every matching node's Node reports a condition from now on (node repair judges it).
    Unhealthy(NodeFault),
    /// A NodePool replacing the one of the same name (its nodes drift when the template changed).
    ApplyNodePool(Box<NodePool>),
    /// An EC2NodeClass replacing the one of the same name, defaulted (its nodes drift).
    ApplyNodeClass(Value),
    /// A NodeOverlay added or replacing the one of the same name (the `NodeOverlay` gate).
    ApplyNodeOverlay(Box<crate::api::nodeoverlay::NodeOverlay>),
    /// ARC shifts the cluster's traffic away from a zone for a while (`spec.enableZonalShift`).
    ZonalShift(ZonalShiftSpec),
}

/// A zonal shift as a timeline writes it: the zone (by name) and how long the shift lasts.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ZonalShiftSpec {
    pub zone: String,
    /// A Go duration (`45m`); the shift expires then.
    pub duration: String,
}

/// Which nodes an interruption hits.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Interruption {
    pub node_claim: Option<String>,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
}

/// A condition matching nodes report from an event on, as a node monitoring agent or a failing kubelet would.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeFault {
    pub node_claim: Option<String>,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    /// The Node condition (default `Ready`).
    #[serde(default = "ready")]
    pub condition: String,
    /// Its status (default `False`).
    #[serde(default = "not_true")]
    pub status: String,
}

fn ready() -> String {
    "Ready".to_owned()
}

fn not_true() -> String {
    "False".to_owned()
}

impl NodeFault {
    /// The nodes it hits, as an interruption names them.
    pub fn nodes(&self) -> Interruption {
        Interruption {
            node_claim: self.node_claim.clone(),
            instance_type: self.instance_type.clone(),
            zone: self.zone.clone(),
        }
    }
}

/// One entry of `events` as written.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EventSpec {
    at: String,
    scale: Option<ScaleSpec>,
    interrupt: Option<Interruption>,
    unhealthy: Option<NodeFault>,
    apply: Option<Value>,
    zonal_shift: Option<ZonalShiftSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScaleSpec {
    deployment: String,
    namespace: Option<String>,
    replicas: u64,
}

/// A mistake in `spec.duration`, `spec.start` or `spec.events`, naming the field.
#[derive(Debug, thiserror::Error)]
#[error("spec.{field}: {message}")]
pub struct TimelineError {
    pub field: String,
    pub message: String,
}

fn error(field: impl Into<String>, message: impl Into<String>) -> TimelineError {
    TimelineError {
        field: field.into(),
        message: message.into(),
    }
}

/// A positive Go duration (`90m`, `12h`).
fn duration(field: &str, text: &str) -> Result<SignedDuration, TimelineError> {
    match parse_go_duration(text) {
        Some(d) if !d.is_negative() => Ok(d),
        _ => Err(error(
            field,
            format!("{text:?} is not a duration such as 30m or 12h"),
        )),
    }
}

impl Timeline {
    /// The timeline of `settings`; `None` when there is no `duration` (and so nothing else either).
    pub fn from_settings(
        settings: &SimulationSettings,
        limits: &ScenarioLimits,
    ) -> Result<Option<Timeline>, TimelineError> {
        let Some(length) = &settings.duration else {
            if !settings.events.is_empty() {
                return Err(error("events", "events need spec.duration"));
            }
            if settings.start.is_some() {
                return Err(error("start", "start needs spec.duration"));
            }
            return Ok(None);
        };
        let length = duration("duration", length)?;
        if length.is_zero() {
            return Err(error("duration", "must be longer than 0s"));
        }
        if length > limits.max_duration {
            return Err(error(
                "duration",
                format!(
                    "{} is longer than the limit of {} (raise it with --max-duration)",
                    settings.duration.as_deref().unwrap_or_default(),
                    Entry::offset(limits.max_duration)
                ),
            ));
        }
        if settings.events.len() > limits.max_events {
            return Err(error(
                "events",
                format!(
                    "{} events, more than the limit of {} (raise it with --max-events)",
                    settings.events.len(),
                    limits.max_events
                ),
            ));
        }
        let start = settings.start.as_deref().unwrap_or(DEFAULT_START);
        let start: Timestamp = start.parse().map_err(|e| {
            error(
                "start",
                format!("{start:?} is not an RFC 3339 time such as {DEFAULT_START}: {e}"),
            )
        })?;
        let mut events = settings
            .events
            .iter()
            .enumerate()
            .map(|(i, spec)| event(&format!("events[{i}]"), spec, length, settings))
            .collect::<Result<Vec<_>, _>>()?;
        // A stable sort: same-instant events keep their written order.
        events.sort_by_key(|e| e.at);
        Ok(Some(Timeline {
            start,
            duration: length,
            events,
        }))
    }
}

fn event(
    field: &str,
    spec: &Value,
    length: SignedDuration,
    settings: &SimulationSettings,
) -> Result<Event, TimelineError> {
    let spec = EventSpec::deserialize(spec).map_err(|e| error(field, e.to_string()))?;
    let at = duration(&format!("{field}.at"), &spec.at)?;
    if at > length {
        return Err(error(
            format!("{field}.at"),
            format!("{} is after the end of the timeline", spec.at),
        ));
    }
    if let Some(shift) = spec.zonal_shift {
        let others = [
            spec.scale.is_some(),
            spec.interrupt.is_some(),
            spec.unhealthy.is_some(),
            spec.apply.is_some(),
        ];
        if others.contains(&true) {
            return Err(error(field, ONE_ACTION));
        }
        return zonal_shift(&format!("{field}.zonalShift"), shift, settings)
            .map(|action| Event { at, action });
    }
    let action = match (spec.scale, spec.interrupt, spec.unhealthy, spec.apply) {
        (Some(scale), None, None, None) => Action::Scale {
            namespace: scale.namespace.unwrap_or_else(|| "default".to_owned()),
            workload: scale.deployment,
            replicas: scale.replicas,
        },
        (None, Some(interruption), None, None) => {
            one_selector(&format!("{field}.interrupt"), &interruption)?;
            Action::Interrupt(interruption)
        }
        (None, None, Some(fault), None) => {
            one_selector(&format!("{field}.unhealthy"), &fault.nodes())?;
            if fault.condition.trim().is_empty() {
                return Err(error(
                    format!("{field}.unhealthy.condition"),
                    "name the Node condition, e.g. Ready",
                ));
            }
            if !["True", "False", "Unknown"].contains(&fault.status.as_str()) {
                return Err(error(
                    format!("{field}.unhealthy.status"),
                    format!("{:?} is not True, False or Unknown", fault.status),
                ));
            }
            Action::Unhealthy(fault)
        }
        (None, None, None, Some(object)) => apply(&format!("{field}.apply"), &object)?,
        _ => return Err(error(field, ONE_ACTION)),
    };
    Ok(Event { at, action })
}

const ONE_ACTION: &str = "give exactly one of scale, interrupt, unhealthy, apply or zonalShift";

/// A zonal shift, which only a run with `spec.enableZonalShift` acts on (as only a controller started with
/// `--enable-zonal-shift` does): without it the event is refused rather than left without effect.
fn zonal_shift(
    field: &str,
    shift: ZonalShiftSpec,
    settings: &SimulationSettings,
) -> Result<Action, TimelineError> {
    if !settings.enable_zonal_shift {
        return Err(error(
            field,
            "needs spec.enableZonalShift: true (kerf controller --enable-zonal-shift); without it zonal shifts \
             are not followed",
        ));
    }
    if shift.zone.trim().is_empty() {
        return Err(error(
            format!("{field}.zone"),
            "name the zone, e.g. us-west-2a",
        ));
    }
    let length = duration(&format!("{field}.duration"), &shift.duration)?;
    if length.is_zero() {
        return Err(error(format!("{field}.duration"), "must be longer than 0s"));
    }
    Ok(Action::ZonalShift(shift))
}

/// Refuses a node selection that does not name exactly one of its keys.
fn one_selector(field: &str, nodes: &Interruption) -> Result<(), TimelineError> {
    let set = [&nodes.node_claim, &nodes.instance_type, &nodes.zone]
        .iter()
        .filter(|v| v.is_some())
        .count();
    if set == 1 {
        Ok(())
    } else {
        Err(error(
            field,
            "name exactly one of nodeClaim, instanceType or zone",
        ))
    }
}

/// An applied object, admitted like the scenario's own (defaults, validation).
fn apply(field: &str, object: &Value) -> Result<Action, TimelineError> {
    let (group, kind) = group_kind(object);
    let admission = match (group, kind) {
        ("karpenter.sh", "NodePool" | "NodeOverlay") | ("karpenter.k8s.aws", "EC2NodeClass") => {
            admission::for_kind(group, kind)
        }
        _ => None,
    }
    .ok_or_else(|| {
        error(
            field,
            format!("only a NodePool, an EC2NodeClass or a NodeOverlay can be applied, not {group}/{kind}"),
        )
    })?;
    let admitted = admit(admission, object).map_err(|invalid| error(field, invalid.to_string()))?;
    if kind == "NodePool" {
        let pool =
            NodePool::deserialize(&admitted.object).map_err(|e| error(field, e.to_string()))?;
        Ok(Action::ApplyNodePool(Box::new(pool)))
    } else if kind == "NodeOverlay" {
        let overlay = crate::api::nodeoverlay::NodeOverlay::deserialize(&admitted.object)
            .map_err(|e| error(field, e.to_string()))?;
        Ok(Action::ApplyNodeOverlay(Box::new(overlay)))
    } else {
        Ok(Action::ApplyNodeClass(admitted.object))
    }
}

/// `object` defaulted and validated as `kerf webhook` admits it, or why the webhook would refuse it.
pub(super) fn admit(
    admission: &admission::KindAdmission,
    object: &Value,
) -> Result<Admitted, Invalid> {
    let admitted = admission.admit(object, None);
    match admitted.rejection(admission) {
        Some(invalid) => Err(invalid),
        None => Ok(admitted),
    }
}
