//! [`SqsQueue`]: the interruption [`MessageQueue`] on SQS. Long polls for up to ten messages at a time
//! (20 s wait, 20 s visibility, the reference's values) and deletes by receipt handle; every call is
//! bounded, the long poll by its wait plus the call timeout.

use std::future::Future;
use std::time::Duration;

use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use kerf_core::cloud::CloudError;
use kerf_core::interruption::{MessageQueue, QueueError, QueueMessage, MAX_MESSAGES};

use crate::config::AwsSettings;
use crate::errors::code_and_message;

/// How long a receive waits for a first message (SQS's maximum).
pub const WAIT_TIME: Duration = Duration::from_secs(20);
/// How long a received message stays hidden from other receivers before it is received again.
pub const VISIBILITY_TIMEOUT: Duration = Duration::from_secs(20);

/// Error codes of a missing queue: the JSON protocol's and the older query protocol's.
const NO_SUCH_QUEUE: [&str; 2] = [
    "QueueDoesNotExist",
    "AWS.SimpleQueueService.NonExistentQueue",
];

/// An SQS queue, found by name.
#[derive(Clone, Debug)]
pub struct SqsQueue {
    client: aws_sdk_sqs::Client,
    url: String,
    call_timeout: Duration,
}

impl SqsQueue {
    /// The queue `name` (GetQueueUrl) through a client built from `settings`.
    pub async fn connect(settings: &AwsSettings, name: &str) -> Result<Self, QueueError> {
        let client = Self::client(settings).await?;
        Self::open(client, name, settings.call_timeout).await
    }

    /// An SQS client configured as `settings` say, whose operation timeout leaves room for the long poll.
    pub async fn client(settings: &AwsSettings) -> Result<aws_sdk_sqs::Client, QueueError> {
        let (config, _region) =
            crate::config::load(settings)
                .await
                .map_err(|error| match error {
                    CloudError::Timeout { operation, after } => {
                        QueueError::Timeout { operation, after }
                    }
                    other => QueueError::Config(other.to_string()),
                })?;
        let config = aws_sdk_sqs::config::Builder::from(&config)
            .timeout_config(crate::config::timeouts(WAIT_TIME + settings.call_timeout))
            .build();
        Ok(aws_sdk_sqs::Client::from_conf(config))
    }

    /// The queue `name` through `client`; `call_timeout` bounds each call (plus [`WAIT_TIME`] for a
    /// receive).
    pub async fn open(
        client: aws_sdk_sqs::Client,
        name: &str,
        call_timeout: Duration,
    ) -> Result<Self, QueueError> {
        let request = client.get_queue_url().queue_name(name).send();
        let url = bounded("GetQueueUrl", call_timeout, name, request)
            .await?
            .queue_url
            .ok_or_else(|| QueueError::Api {
                operation: "GetQueueUrl",
                code: "MissingQueueUrl".into(),
                message: format!("no URL in the answer for queue {name}"),
            })?;
        Ok(SqsQueue {
            client,
            url,
            call_timeout,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }
}

impl MessageQueue for SqsQueue {
    async fn receive(&self) -> Result<Vec<QueueMessage>, QueueError> {
        let request = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(MAX_MESSAGES as i32)
            .wait_time_seconds(WAIT_TIME.as_secs() as i32)
            .visibility_timeout(VISIBILITY_TIMEOUT.as_secs() as i32)
            .send();
        let out = bounded(
            "ReceiveMessage",
            WAIT_TIME + self.call_timeout,
            &self.url,
            request,
        )
        .await?;
        Ok(out
            .messages
            .unwrap_or_default()
            .into_iter()
            .filter_map(|message| {
                let id = message.message_id.unwrap_or_default();
                let Some(receipt_handle) = message.receipt_handle else {
                    // Nothing can delete it; it will come back, hopefully whole.
                    tracing::warn!(message_id = %id, "SQS returned a message without a receipt handle");
                    return None;
                };
                Some(QueueMessage {
                    id,
                    receipt_handle,
                    // An empty body is malformed, and so deleted.
                    body: message.body.unwrap_or_default(),
                })
            })
            .collect())
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        let request = self
            .client
            .delete_message()
            .queue_url(&self.url)
            .receipt_handle(receipt_handle)
            .send();
        match bounded("DeleteMessage", self.call_timeout, &self.url, request).await {
            Err(QueueError::Api { code, .. }) if code == "ReceiptHandleIsInvalid" => {
                Err(QueueError::InvalidReceipt {
                    receipt_handle: receipt_handle.to_owned(),
                })
            }
            other => other.map(|_| ()),
        }
    }
}

/// One SQS call on `queue` (a name or URL, for the error), bounded by `after`, its error in
/// [`QueueError`] terms.
async fn bounded<T, E, R>(
    operation: &'static str,
    after: Duration,
    queue: &str,
    call: impl Future<Output = Result<T, SdkError<E, R>>>,
) -> Result<T, QueueError>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let error = match tokio::time::timeout(after, call).await {
        Ok(Ok(out)) => return Ok(out),
        Ok(Err(error)) => error,
        Err(_) => return Err(QueueError::Timeout { operation, after }),
    };
    if let SdkError::TimeoutError(_) = error {
        return Err(QueueError::Timeout { operation, after });
    }
    let (code, message) = code_and_message(&error);
    if NO_SUCH_QUEUE.contains(&code.as_str()) {
        return Err(QueueError::NoSuchQueue {
            queue: queue.to_owned(),
        });
    }
    Err(QueueError::Api {
        operation,
        code,
        message,
    })
}

#[cfg(test)]
mod tests {
    use aws_sdk_sqs::error::ErrorMetadata;
    use aws_sdk_sqs::operation::receive_message::ReceiveMessageError;

    use super::*;

    const BOUND: Duration = Duration::from_millis(50);

    /// An answer of SQS with an error `code`.
    fn service_error(code: &str) -> SdkError<ReceiveMessageError, ()> {
        let meta = ErrorMetadata::builder()
            .code(code)
            .message("the answer's message")
            .build();
        SdkError::service_error(ReceiveMessageError::generic(meta), ())
    }

    async fn answer(error: SdkError<ReceiveMessageError, ()>) -> Result<(), QueueError> {
        bounded("ReceiveMessage", BOUND, "q-url", async { Err(error) }).await
    }

    #[tokio::test]
    async fn a_missing_queue_is_no_such_queue_in_either_protocols_words() {
        for code in NO_SUCH_QUEUE {
            assert_eq!(
                answer(service_error(code)).await,
                Err(QueueError::NoSuchQueue {
                    queue: "q-url".into()
                }),
                "{code}"
            );
        }
    }

    #[tokio::test]
    async fn other_answers_keep_their_code_and_message() {
        assert_eq!(
            answer(service_error("OverLimit")).await,
            Err(QueueError::Api {
                operation: "ReceiveMessage",
                code: "OverLimit".into(),
                message: "the answer's message".into(),
            })
        );
    }

    #[tokio::test]
    async fn a_call_past_its_bound_or_timed_out_by_the_sdk_is_a_timeout() {
        let timeout = Err(QueueError::Timeout {
            operation: "ReceiveMessage",
            after: BOUND,
        });
        let never = std::future::pending::<Result<(), SdkError<ReceiveMessageError, ()>>>();
        assert_eq!(
            bounded("ReceiveMessage", BOUND, "q-url", never).await,
            timeout
        );
        assert_eq!(
            answer(SdkError::timeout_error("operation timeout")).await,
            timeout
        );
    }
}
