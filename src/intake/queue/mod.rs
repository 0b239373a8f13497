//! The message queue behind a narrow trait: SQS in the service, memory in unit tests.

mod health;
mod memory;
#[cfg(feature = "service")]
mod sqs;

pub use health::{queue_labels, LastError, QueueHealth, QueueRegistry, QueueSnapshot};
pub use memory::MemoryQueue;
#[cfg(feature = "service")]
pub use sqs::SqsQueue;

use async_trait::async_trait;

/// A received message with what is needed to acknowledge it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    pub id: String,
    pub receipt_handle: String,
    pub body: String,
    /// `ApproximateReceiveCount`: 1 on first delivery.
    pub receive_count: u32,
}

/// A message to acknowledge (delete) or extend, by id and receipt handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub id: String,
    pub receipt_handle: String,
}

impl From<&ReceivedMessage> for Receipt {
    fn from(message: &ReceivedMessage) -> Self {
        Receipt {
            id: message.id.clone(),
            receipt_handle: message.receipt_handle.clone(),
        }
    }
}

/// An entry a batch call could not process, by message id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedEntry {
    pub id: String,
    pub code: String,
    pub message: String,
}

/// A failed call. `message` is the error and its causes (what `/readyz` shows); `detail` is what
/// the SDK adds for the log (raw metadata, as ` (...)`), or empty.
#[derive(Debug, thiserror::Error)]
#[error("{operation}: {message}{detail}")]
pub struct QueueError {
    pub operation: &'static str,
    pub message: String,
    pub detail: String,
}

#[async_trait]
pub trait Queue: Send + Sync + 'static {
    /// Long-polls for up to `max_messages`, hiding them for `visibility_timeout_seconds`.
    async fn receive(
        &self,
        max_messages: i32,
        wait_time_seconds: i32,
        visibility_timeout_seconds: i32,
    ) -> Result<Vec<ReceivedMessage>, QueueError>;

    /// Deletes the messages (≤ 10); returns the entries the queue refused.
    async fn delete(&self, receipts: &[Receipt]) -> Result<Vec<FailedEntry>, QueueError>;

    /// Hides the messages (≤ 10) for another `visibility_timeout_seconds` from now.
    async fn extend_visibility(
        &self,
        receipts: &[Receipt],
        visibility_timeout_seconds: i32,
    ) -> Result<Vec<FailedEntry>, QueueError>;
}
