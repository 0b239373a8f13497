//! An in-memory [`Queue`] with SQS's visibility semantics reduced to what tests need.

use std::collections::VecDeque;
use std::sync::Mutex;

use async_trait::async_trait;

use super::{FailedEntry, Queue, QueueError, Receipt, ReceivedMessage};

#[derive(Debug, Default)]
struct Inner {
    visible: VecDeque<(String, String, u32)>,
    in_flight: Vec<(String, String, u32)>,
    next_id: u64,
    deleted: Vec<String>,
    fail_receives: u32,
}

/// Messages become visible again only when [`MemoryQueue::expire_in_flight`] is called.
#[derive(Debug, Default)]
pub struct MemoryQueue {
    inner: Mutex<Inner>,
}

impl MemoryQueue {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&self, body: impl Into<String>) -> String {
        let mut inner = self.inner.lock().unwrap();
        inner.next_id += 1;
        let id = format!("m{}", inner.next_id);
        inner.visible.push_back((id.clone(), body.into(), 0));
        id
    }

    /// Every received-but-not-deleted message becomes visible again (a visibility timeout).
    pub fn expire_in_flight(&self) {
        let mut inner = self.inner.lock().unwrap();
        let expired: Vec<_> = inner.in_flight.drain(..).collect();
        inner.visible.extend(expired);
    }

    /// The next `count` receives fail.
    pub fn fail_next_receives(&self, count: u32) {
        self.inner.lock().unwrap().fail_receives = count;
    }

    pub fn deleted_ids(&self) -> Vec<String> {
        self.inner.lock().unwrap().deleted.clone()
    }

    pub fn num_visible(&self) -> usize {
        self.inner.lock().unwrap().visible.len()
    }

    pub fn num_in_flight(&self) -> usize {
        self.inner.lock().unwrap().in_flight.len()
    }
}

#[async_trait]
impl Queue for MemoryQueue {
    async fn receive(
        &self,
        max_messages: i32,
        wait_time_seconds: i32,
        _visibility_timeout_seconds: i32,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        let received = {
            let mut inner = self.inner.lock().unwrap();
            if inner.fail_receives > 0 {
                inner.fail_receives -= 1;
                return Err(QueueError {
                    operation: "ReceiveMessage",
                    message: "injected failure".to_string(),
                });
            }
            let mut received = Vec::new();
            while received.len() < max_messages as usize {
                let Some((id, body, count)) = inner.visible.pop_front() else {
                    break;
                };
                inner.in_flight.push((id.clone(), body.clone(), count + 1));
                received.push(ReceivedMessage {
                    receipt_handle: format!("{id}-{}", count + 1),
                    id,
                    body,
                    receive_count: count + 1,
                });
            }
            received
        };
        if received.is_empty() && wait_time_seconds > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        Ok(received)
    }

    async fn delete(&self, receipts: &[Receipt]) -> Result<Vec<FailedEntry>, QueueError> {
        let mut inner = self.inner.lock().unwrap();
        let mut failed = Vec::new();
        for receipt in receipts {
            let position = inner.in_flight.iter().position(|(id, _, count)| {
                *id == receipt.id && receipt.receipt_handle == format!("{id}-{count}")
            });
            match position {
                Some(position) => {
                    inner.in_flight.remove(position);
                    inner.deleted.push(receipt.id.clone());
                }
                None => failed.push(FailedEntry {
                    id: receipt.id.clone(),
                    code: "ReceiptHandleIsInvalid".to_string(),
                    message: "not in flight".to_string(),
                }),
            }
        }
        Ok(failed)
    }

    async fn extend_visibility(
        &self,
        _receipts: &[Receipt],
        _visibility_timeout_seconds: i32,
    ) -> Result<Vec<FailedEntry>, QueueError> {
        Ok(Vec::new())
    }
}
