//! A queue message's body read as one of the EventBridge events kerf acts on: which [`Kind`] it is, which
//! instances it is about, and when AWS emitted it.

use std::fmt;
use std::time::SystemTime;

use serde::Deserialize;
use thiserror::Error;

/// What an interruption message says, by the reference's kind names (the `message_type` metric label and
/// the `reason` of disrupted NodeClaims).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A spot instance will be reclaimed in two minutes.
    SpotInterrupted,
    /// A spot instance is at elevated risk of being reclaimed.
    RebalanceRecommendation,
    /// AWS Health scheduled maintenance or retirement of the instance.
    ScheduledChange,
    /// The instance is stopping or stopped.
    InstanceStopped,
    /// The instance is shutting down or terminated.
    InstanceTerminated,
    /// The capacity reservation the instance runs in is reclaiming it.
    CapacityReservationInterrupted,
    /// EC2's instance status check has failed (from DescribeInstanceStatus, not the queue).
    InstanceStatus,
    /// EC2's system status check has failed (from DescribeInstanceStatus).
    SystemStatus,
    /// A scheduled event (reboot, maintenance, retirement, stop) is listed for the instance (from
    /// DescribeInstanceStatus).
    EventStatus,
    /// Anything else: nothing to do but delete the message.
    NoOp,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::SpotInterrupted => "spot_interrupted",
            Kind::RebalanceRecommendation => "rebalance_recommendation",
            Kind::ScheduledChange => "scheduled_change",
            Kind::InstanceStopped => "instance_stopped",
            Kind::InstanceTerminated => "instance_terminated",
            Kind::CapacityReservationInterrupted => "capacity_reservation_interrupted",
            Kind::InstanceStatus => "instance_status",
            Kind::SystemStatus => "system_status",
            Kind::EventStatus => "event_status",
            Kind::NoOp => "no_op",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A parsed message.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub kind: Kind,
    /// The EC2 instances it is about, without repeats (none for [`Kind::NoOp`]).
    pub instance_ids: Vec<String>,
    /// The event's `time`; `None` when absent or not RFC 3339 (it only feeds the queue-latency metric, so a
    /// bad time does not cost the interruption its action).
    pub time: Option<SystemTime>,
}

/// Why a body is not a message kerf can read. Such a message is logged and deleted.
#[derive(Debug, Error)]
pub enum ParseError {
    /// Not JSON, or JSON without the EventBridge envelope (`version`, `source`, `detail-type`).
    #[error("not an EventBridge event: {0}")]
    NotAnEvent(#[source] serde_json::Error),
    /// A known event whose `detail` lacks what its kind needs (the instance ID, the state, the entities).
    #[error("malformed {kind} event detail: {source}")]
    Detail {
        kind: Kind,
        #[source]
        source: serde_json::Error,
    },
}

/// The envelope every EventBridge event has; `detail` is read per kind.
#[derive(Deserialize)]
struct Envelope {
    version: String,
    source: String,
    #[serde(rename = "detail-type")]
    detail_type: String,
    time: Option<String>,
    #[serde(default)]
    detail: serde_json::Value,
}

#[derive(Deserialize)]
struct InstanceDetail {
    #[serde(rename = "instance-id")]
    instance_id: String,
}

#[derive(Deserialize)]
struct StateChangeDetail {
    #[serde(rename = "instance-id")]
    instance_id: String,
    state: String,
}

#[derive(Deserialize)]
struct HealthDetail {
    service: Option<String>,
    #[serde(rename = "eventTypeCategory")]
    category: Option<String>,
    #[serde(rename = "affectedEntities", default)]
    affected_entities: Vec<AffectedEntity>,
}

#[derive(Deserialize)]
struct AffectedEntity {
    #[serde(rename = "entityValue")]
    value: String,
}

/// Reads a message body. Events kerf does not act on (other sources, detail types, versions, Health
/// events of other services or categories, instance states such as `running`) are [`Kind::NoOp`].
pub fn parse(body: &str) -> Result<Message, ParseError> {
    let envelope: Envelope = serde_json::from_str(body).map_err(ParseError::NotAnEvent)?;
    let time = envelope
        .time
        .as_deref()
        .and_then(|t| humantime::parse_rfc3339(t).ok());
    let (kind, instance_ids) = classify(&envelope)?;
    let mut unique: Vec<String> = Vec::with_capacity(instance_ids.len());
    for id in instance_ids {
        if !unique.contains(&id) {
            unique.push(id);
        }
    }
    Ok(Message {
        kind,
        instance_ids: unique,
        time,
    })
}

/// The kind and instances of an event, dispatched on (`version`, `source`, `detail-type`).
fn classify(envelope: &Envelope) -> Result<(Kind, Vec<String>), ParseError> {
    if envelope.version != "0" {
        return Ok((Kind::NoOp, vec![]));
    }
    let instance =
        |kind: Kind| detail::<InstanceDetail>(envelope, kind).map(|d| (kind, vec![d.instance_id]));
    match (envelope.source.as_str(), envelope.detail_type.as_str()) {
        ("aws.ec2", "EC2 Spot Instance Interruption Warning") => instance(Kind::SpotInterrupted),
        ("aws.ec2", "EC2 Instance Rebalance Recommendation") => {
            instance(Kind::RebalanceRecommendation)
        }
        ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning") => {
            instance(Kind::CapacityReservationInterrupted)
        }
        ("aws.ec2", "EC2 Instance State-change Notification") => {
            // Read as "stopped" until the state says which; the error names the family of events.
            let d = detail::<StateChangeDetail>(envelope, Kind::InstanceStopped)?;
            let kind = match d.state.as_str() {
                "stopping" | "stopped" => Kind::InstanceStopped,
                "shutting-down" | "terminated" => Kind::InstanceTerminated,
                _ => return Ok((Kind::NoOp, vec![])),
            };
            Ok((kind, vec![d.instance_id]))
        }
        ("aws.health", "AWS Health Event") => {
            let d = detail::<HealthDetail>(envelope, Kind::ScheduledChange)?;
            let scheduled_ec2 = d.service.as_deref() == Some("EC2")
                && d.category.as_deref() == Some("scheduledChange");
            if !scheduled_ec2 {
                return Ok((Kind::NoOp, vec![]));
            }
            let ids = d.affected_entities.into_iter().map(|e| e.value).collect();
            Ok((Kind::ScheduledChange, ids))
        }
        _ => Ok((Kind::NoOp, vec![])),
    }
}

fn detail<T: serde::de::DeserializeOwned>(
    envelope: &Envelope,
    kind: Kind,
) -> Result<T, ParseError> {
    T::deserialize(&envelope.detail).map_err(|source| ParseError::Detail { kind, source })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const INSTANCE: &str = "i-0123456789abcdef0";

    fn examples() -> Vec<&'static str> {
        include_str!("examples.jsonl").lines().collect()
    }

    fn event(source: &str, detail_type: &str, detail: serde_json::Value) -> String {
        serde_json::json!({
            "version": "0", "source": source, "detail-type": detail_type,
            "time": "2025-03-01T10:00:00Z", "detail": detail,
        })
        .to_string()
    }

    #[test]
    fn the_reference_examples_parse_to_their_kinds_with_instance_and_time() {
        let kinds: Vec<Kind> = examples()
            .into_iter()
            .map(|body| {
                let message = parse(body).unwrap();
                assert_eq!(message.instance_ids, [INSTANCE], "{body}");
                assert_eq!(
                    message.time,
                    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_740_823_200)),
                    "{body}"
                );
                message.kind
            })
            .collect();
        assert_eq!(
            kinds,
            [
                Kind::SpotInterrupted,
                Kind::RebalanceRecommendation,
                Kind::InstanceStopped,
                Kind::ScheduledChange,
                Kind::CapacityReservationInterrupted,
            ]
        );
    }

    #[test]
    fn kind_names_are_the_metric_labels() {
        let names: Vec<&str> = [
            Kind::SpotInterrupted,
            Kind::RebalanceRecommendation,
            Kind::ScheduledChange,
            Kind::InstanceStopped,
            Kind::InstanceTerminated,
            Kind::CapacityReservationInterrupted,
            Kind::NoOp,
        ]
        .iter()
        .map(|k| k.as_str())
        .collect();
        assert_eq!(
            names,
            [
                "spot_interrupted",
                "rebalance_recommendation",
                "scheduled_change",
                "instance_stopped",
                "instance_terminated",
                "capacity_reservation_interrupted",
                "no_op"
            ]
        );
        assert_eq!(Kind::SpotInterrupted.to_string(), "spot_interrupted");
    }

    #[test]
    fn instance_states_map_to_stopped_terminated_or_nothing() {
        for (state, kind) in [
            ("stopping", Kind::InstanceStopped),
            ("stopped", Kind::InstanceStopped),
            ("shutting-down", Kind::InstanceTerminated),
            ("terminated", Kind::InstanceTerminated),
            ("running", Kind::NoOp),
            ("pending", Kind::NoOp),
        ] {
            let body = event(
                "aws.ec2",
                "EC2 Instance State-change Notification",
                serde_json::json!({"instance-id": INSTANCE, "state": state}),
            );
            let message = parse(&body).unwrap();
            assert_eq!(message.kind, kind, "{state}");
            let expected: &[&str] = if kind == Kind::NoOp { &[] } else { &[INSTANCE] };
            assert_eq!(message.instance_ids, expected, "{state}");
        }
    }

    #[test]
    fn health_events_act_only_for_ec2_scheduled_changes_and_list_every_affected_instance() {
        let health = |service: &str, category: &str| {
            event(
                "aws.health",
                "AWS Health Event",
                serde_json::json!({
                    "service": service, "eventTypeCategory": category,
                    "affectedEntities": [{"entityValue": "i-1"}, {"entityValue": "i-2"},
                                         {"entityValue": "i-1"}],
                }),
            )
        };
        let message = parse(&health("EC2", "scheduledChange")).unwrap();
        assert_eq!(message.kind, Kind::ScheduledChange);
        assert_eq!(message.instance_ids, ["i-1", "i-2"]);
        for (service, category) in [("EC2", "issue"), ("RDS", "scheduledChange")] {
            let message = parse(&health(service, category)).unwrap();
            assert_eq!(message.kind, Kind::NoOp, "{service} {category}");
            assert!(message.instance_ids.is_empty());
        }
        let without_service = event("aws.health", "AWS Health Event", serde_json::json!({}));
        assert_eq!(parse(&without_service).unwrap().kind, Kind::NoOp);
    }

    #[test]
    fn unknown_events_are_no_ops() {
        for body in [
            event("aws.ec2", "EC2 AMI State Change", serde_json::json!({})),
            event(
                "aws.autoscaling",
                "EC2 Spot Instance Interruption Warning",
                serde_json::json!({"instance-id": INSTANCE}),
            ),
            examples()[0].replace(r#""version":"0""#, r#""version":"1""#),
        ] {
            let message = parse(&body).unwrap();
            assert_eq!(message.kind, Kind::NoOp, "{body}");
            assert!(message.instance_ids.is_empty(), "{body}");
        }
    }

    #[test]
    fn bodies_without_the_envelope_are_not_events() {
        for body in [
            "",
            "not json",
            "[]",
            "42",
            r#"{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning"}"#,
            r#"{"version":"0","detail-type":"EC2 Spot Instance Interruption Warning"}"#,
            r#"{"version":0,"source":"aws.ec2","detail-type":"x"}"#,
            "{\"version\":\"0\",\"source\":\"aws.ec2\"",
        ] {
            let error = parse(body).unwrap_err();
            assert!(
                matches!(error, ParseError::NotAnEvent(_)),
                "{body}: {error}"
            );
            assert!(error.to_string().starts_with("not an EventBridge event: "));
        }
    }

    #[test]
    fn known_events_without_their_detail_fields_are_malformed() {
        for (body, kind) in [
            (
                event(
                    "aws.ec2",
                    "EC2 Spot Instance Interruption Warning",
                    serde_json::json!({}),
                ),
                Kind::SpotInterrupted,
            ),
            (
                event(
                    "aws.ec2",
                    "EC2 Instance Rebalance Recommendation",
                    serde_json::json!({"instance-id": 7}),
                ),
                Kind::RebalanceRecommendation,
            ),
            (
                event(
                    "aws.ec2",
                    "EC2 Instance State-change Notification",
                    serde_json::json!({"instance-id": INSTANCE}),
                ),
                Kind::InstanceStopped,
            ),
            (
                event(
                    "aws.health",
                    "AWS Health Event",
                    serde_json::json!({"service": "EC2", "affectedEntities": [{"entity": "i-1"}]}),
                ),
                Kind::ScheduledChange,
            ),
            (
                r#"{"version":"0","source":"aws.ec2","detail-type":"EC2 Capacity Reservation Instance Interruption Warning"}"#.to_owned(),
                Kind::CapacityReservationInterrupted,
            ),
        ] {
            match parse(&body) {
                Err(ParseError::Detail { kind: got, .. }) => assert_eq!(got, kind, "{body}"),
                other => panic!("{body}: expected a detail error, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_missing_or_unreadable_time_costs_only_the_time() {
        let without = r#"{"version":"0","source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{"instance-id":"i-1"}}"#;
        let message = parse(without).unwrap();
        assert_eq!((message.kind, message.time), (Kind::SpotInterrupted, None));
        let unreadable = examples()[0].replace("2025-03-01T10:00:00Z", "yesterday");
        let message = parse(&unreadable).unwrap();
        assert_eq!((message.kind, message.time), (Kind::SpotInterrupted, None));
    }
}
