//! kerf-aws's interruption queue against moto's SQS: the reference's example events, a malformed body and
//! an unknown event go through a real queue (long poll, visibility timeout, receipt handles), are read,
//! dispatched and deleted by kerf's interruption loop. Each test has a queue of its own.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result};
use aws_sdk_sqs::types::QueueAttributeName;
use kerf::engine::SystemClock;
use kerf::interruption::{
    process_batch, Action, BatchReport, ClaimInfo, EventReason, Handler, Kind, MessageQueue,
    QueueError,
};
use kerf_aws::SqsQueue;
use kerf_e2e::aws::{unique_cluster_name, AwsEmu};

/// The instance the reference's example events are about.
const INSTANCE: &str = "i-0123456789abcdef0";

/// A cluster where `INSTANCE` runs claim `spot-1`; deleting a claim fails the first time (the API server
/// was away), so the message must come back after its visibility timeout.
#[derive(Default)]
struct Cluster {
    applied: Mutex<Vec<(Kind, Action)>>,
    failed_once: Mutex<HashSet<Kind>>,
}

impl Handler for Cluster {
    type Error = std::io::Error;

    fn claim_of(&self, instance_id: &str) -> Option<ClaimInfo> {
        (instance_id == INSTANCE).then(|| ClaimInfo {
            name: "spot-1".into(),
            instance_type: Some("m5.large".into()),
            zone: Some("us-west-2a".into()),
        })
    }

    async fn apply(&self, kind: Kind, action: &Action) -> std::io::Result<()> {
        let deletes = matches!(action, Action::Claim { delete: true, .. });
        if deletes && kind == Kind::SpotInterrupted && self.failed_once.lock().unwrap().insert(kind)
        {
            return Err(std::io::Error::other("the API server is unavailable"));
        }
        self.applied.lock().unwrap().push((kind, action.clone()));
        Ok(())
    }
}

async fn create_queue(client: &aws_sdk_sqs::Client, name: &str) -> Result<()> {
    client
        .create_queue()
        .queue_name(name)
        // The reference's queue setup: messages older than 5 minutes are useless.
        .attributes(QueueAttributeName::MessageRetentionPeriod, "300")
        .send()
        .await
        .context("CreateQueue")?;
    Ok(())
}

/// Messages still on the queue, visible or in flight.
async fn messages_left(client: &aws_sdk_sqs::Client, url: &str) -> Result<u64> {
    let attributes = client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .context("GetQueueAttributes")?
        .attributes
        .unwrap_or_default();
    let mut left = 0;
    for name in [
        QueueAttributeName::ApproximateNumberOfMessages,
        QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
    ] {
        left += attributes
            .get(&name)
            .with_context(|| format!("no {name:?} attribute"))?
            .parse::<u64>()?;
    }
    Ok(left)
}

/// Adds `batch` to `total`.
fn add(total: &mut BatchReport, batch: BatchReport) {
    for (kind, count) in batch.received {
        *total.received.entry(kind).or_default() += count;
    }
    total.malformed += batch.malformed;
    total.deleted += batch.deleted;
    total.left_for_retry += batch.left_for_retry;
    total.delete_failures += batch.delete_failures;
    total.queue_latencies.extend(batch.queue_latencies);
}

#[tokio::test]
async fn interruption_events_are_received_dispatched_and_deleted() -> Result<()> {
    let Some(emu) = AwsEmu::shared_or_skip("interruption_events_are_received")? else {
        return Ok(());
    };
    let settings = emu.settings(&unique_cluster_name("sqs"), Duration::from_secs(10))?;
    let name = unique_cluster_name("kerf-interruption");
    let client = SqsQueue::client(&settings).await?;
    create_queue(&client, &name).await?;
    let queue = SqsQueue::connect(&settings, &name).await?;
    assert!(
        queue.url().ends_with(&format!("/{name}")),
        "{}",
        queue.url()
    );

    let examples: Vec<&str> = include_str!("../../core/src/interruption/examples.jsonl")
        .lines()
        .collect();
    let unknown = r#"{"version":"0","source":"aws.ec2","detail-type":"EC2 AMI State Change","time":"2025-03-01T10:00:00Z","detail":{}}"#;
    for body in examples.iter().copied().chain(["{not json", unknown]) {
        client
            .send_message()
            .queue_url(queue.url())
            .message_body(body)
            .send()
            .await
            .context("SendMessage")?;
    }

    // The spot interruption fails once, so its message comes back after the 20 s visibility timeout.
    let cluster = Cluster::default();
    let mut total = BatchReport::default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while total.deleted < 7 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not every message was handled: {total:?}"
        );
        add(
            &mut total,
            process_batch(&queue, &cluster, &SystemClock).await?,
        );
    }

    assert_eq!(
        total.received,
        BTreeMap::from([
            // Received twice: once failed, once handled.
            (Kind::SpotInterrupted, 2),
            (Kind::RebalanceRecommendation, 1),
            (Kind::ScheduledChange, 1),
            (Kind::InstanceStopped, 1),
            (Kind::CapacityReservationInterrupted, 1),
            (Kind::NoOp, 1),
        ])
    );
    assert_eq!(
        (
            total.malformed,
            total.deleted,
            total.left_for_retry,
            total.delete_failures
        ),
        (1, 7, 1, 0)
    );
    // Events of 2025: their queue latency is the time since.
    assert_eq!(total.queue_latencies.len(), 7);
    assert!(total
        .queue_latencies
        .iter()
        .all(|latency| *latency > Duration::from_secs(3600)));

    let applied = cluster.applied.lock().unwrap().clone();
    let mut claims: Vec<(Kind, EventReason, bool)> = applied
        .iter()
        .filter_map(|(kind, action)| match action {
            Action::Claim {
                name,
                instance_id,
                reason,
                delete,
                forceful,
            } => {
                assert_eq!((name.as_str(), instance_id.as_str()), ("spot-1", INSTANCE));
                assert!(!forceful, "no queue message terminates forcefully");
                Some((*kind, *reason, *delete))
            }
            Action::MarkUnavailable(_) => None,
        })
        .collect();
    claims.sort_by_key(|(kind, ..)| *kind);
    assert_eq!(
        claims,
        [
            (Kind::SpotInterrupted, EventReason::SpotInterrupted, true),
            (
                Kind::RebalanceRecommendation,
                EventReason::SpotRebalanceRecommendation,
                false
            ),
            (Kind::ScheduledChange, EventReason::InstanceUnhealthy, true),
            (Kind::InstanceStopped, EventReason::InstanceStopping, true),
            (
                Kind::CapacityReservationInterrupted,
                EventReason::CapacityReservationInstanceInterrupted,
                true
            ),
        ]
    );
    // The spot offering was marked on both deliveries, the reservation's once.
    let marks: Vec<String> = applied
        .iter()
        .filter_map(|(_, action)| match action {
            Action::MarkUnavailable(key) => Some(key.to_string()),
            Action::Claim { .. } => None,
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        marks,
        ["reserved:m5.large:us-west-2a", "spot:m5.large:us-west-2a"]
    );
    assert_eq!(
        applied
            .iter()
            .filter(|(kind, action)| *kind == Kind::SpotInterrupted
                && matches!(action, Action::MarkUnavailable(_)))
            .count(),
        2
    );

    assert_eq!(messages_left(&client, queue.url()).await?, 0);
    Ok(())
}

#[tokio::test]
async fn a_missing_queue_and_a_bad_receipt_handle_are_typed_errors() -> Result<()> {
    let Some(emu) = AwsEmu::shared_or_skip("a_missing_queue_and_a_bad_receipt_handle")? else {
        return Ok(());
    };
    let settings = emu.settings(&unique_cluster_name("sqs"), Duration::from_secs(10))?;
    let missing = unique_cluster_name("no-such-queue");
    match SqsQueue::connect(&settings, &missing).await {
        Err(QueueError::NoSuchQueue { queue }) => assert_eq!(queue, missing),
        other => panic!("expected NoSuchQueue, got {other:?}"),
    }

    let name = unique_cluster_name("kerf-interruption");
    let client = SqsQueue::client(&settings).await?;
    create_queue(&client, &name).await?;
    let queue = SqsQueue::connect(&settings, &name).await?;
    assert_eq!(
        queue.delete("not-a-receipt-handle").await,
        Err(QueueError::InvalidReceipt {
            receipt_handle: "not-a-receipt-handle".into()
        })
    );

    // A long poll on an empty queue waits (moto's is real) and returns nothing.
    let started = tokio::time::Instant::now();
    assert!(queue.receive().await?.is_empty());
    assert!(
        started.elapsed() >= Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );

    client
        .delete_queue()
        .queue_url(queue.url())
        .send()
        .await
        .context("DeleteQueue")?;
    match queue.receive().await {
        Err(QueueError::NoSuchQueue { queue: url }) => assert_eq!(url, queue.url()),
        other => panic!("expected NoSuchQueue, got {other:?}"),
    }
    Ok(())
}
