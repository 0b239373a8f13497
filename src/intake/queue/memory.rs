//! An in-memory [`Queue`] with SQS's visibility semantics reduced to what tests need.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

use super::{FailedEntry, Queue, QueueError, Receipt, ReceivedMessage};

#[derive(Debug, Default)]
struct Inner {
    visible: VecDeque<(String, String, u32)>,
    in_flight: Vec<(String, String, u32)>,
    next_id: u64,
    deleted: Vec<String>,
    fail_receives: u32,
}

/// Messages become visible again only when [`MemoryQueue::expire_in_flight`] is called. An empty
/// receive long-polls as on SQS: it waits up to `wait_time_seconds` for a message to arrive.
#[derive(Debug, Default)]
pub struct MemoryQueue {
    inner: Mutex<Inner>,
    arrived: Notify,
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
        drop(inner);
        // Stores a permit when no receive waits: a message pushed meanwhile is not missed.
        self.arrived.notify_one();
        id
    }

    /// Every received-but-not-deleted message becomes visible again (a visibility timeout).
    pub fn expire_in_flight(&self) {
        let mut inner = self.inner.lock().unwrap();
        let expired: Vec<_> = inner.in_flight.drain(..).collect();
        inner.visible.extend(expired);
        drop(inner);
        self.arrived.notify_waiters();
        self.arrived.notify_one();
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

    /// Up to `max_messages` visible messages, now in flight.
    fn take(&self, max_messages: i32) -> Result<Vec<ReceivedMessage>, QueueError> {
        let mut inner = self.inner.lock().unwrap();
        if inner.fail_receives > 0 {
            inner.fail_receives -= 1;
            return Err(QueueError {
                operation: "ReceiveMessage",
                message: "injected failure".to_string(),
                detail: String::new(),
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
        Ok(received)
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
        let deadline =
            tokio::time::Instant::now() + Duration::from_secs(wait_time_seconds.max(0) as u64);
        loop {
            let received = self.take(max_messages)?;
            if !received.is_empty() || wait_time_seconds <= 0 {
                return Ok(received);
            }
            if tokio::time::timeout_at(deadline, self.arrived.notified())
                .await
                .is_err()
            {
                return Ok(Vec::new());
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn an_empty_receive_long_polls_until_a_message_arrives_or_the_wait_ends() {
        let queue = Arc::new(MemoryQueue::new());
        let receiving = tokio::spawn({
            let queue = queue.clone();
            async move { queue.receive(10, 5, 30).await.unwrap() }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!receiving.is_finished(), "waits instead of returning empty");
        queue.push("hello");
        let received = tokio::time::timeout(Duration::from_secs(2), receiving)
            .await
            .expect("woken by the push")
            .unwrap();
        assert_eq!(received.len(), 1);

        let started = std::time::Instant::now();
        assert!(queue.receive(10, 1, 30).await.unwrap().is_empty());
        assert!(
            started.elapsed() >= Duration::from_millis(900),
            "waited the whole second"
        );
        assert!(
            queue.receive(10, 0, 30).await.unwrap().is_empty(),
            "no wait: at once"
        );
    }
}
