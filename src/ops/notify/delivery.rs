//! Delivering notifications to one HTTP endpoint: a bounded queue that drops its oldest entry when
//! full, at most one request per `min_interval`, 429 answered by waiting `Retry-After`, 5xx and
//! network errors retried with back-off, other 4xx given up at once and logged. The URL is a
//! secret: it is never logged, and errors are reported without it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Notify;
use tracing::{debug, error, warn};

use crate::base::backoff::Backoff;
use crate::ops::metrics::{Metrics, SinkLabels};

#[derive(Debug, Clone, Copy)]
pub struct DeliveryPolicy {
    /// Slack allows about one message per second per webhook.
    pub min_interval: Duration,
    pub max_attempts: u32,
    pub first_backoff: Duration,
    /// The longest `Retry-After` honoured.
    pub max_retry_after: Duration,
    pub request_timeout: Duration,
}

impl Default for DeliveryPolicy {
    fn default() -> Self {
        DeliveryPolicy {
            min_interval: Duration::from_secs(1),
            max_attempts: 5,
            first_backoff: Duration::from_secs(1),
            max_retry_after: Duration::from_secs(60),
            request_timeout: Duration::from_secs(10),
        }
    }
}

/// Pending payloads of one sink.
#[derive(Debug)]
pub struct SinkQueue {
    items: Mutex<VecDeque<Value>>,
    notify: Notify,
    /// Woken whenever the queue may have become idle (a send ended, the queue was abandoned).
    settled: Notify,
    capacity: usize,
    busy: AtomicUsize,
}

impl SinkQueue {
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(SinkQueue {
            items: Mutex::new(VecDeque::new()),
            notify: Notify::new(),
            settled: Notify::new(),
            capacity,
            busy: AtomicUsize::new(0),
        })
    }

    /// Queues a payload; returns `true` when the oldest one was dropped to make room.
    pub fn push(&self, payload: Value) -> bool {
        let mut items = self.items.lock().unwrap();
        let dropped = items.len() >= self.capacity;
        if dropped {
            items.pop_front();
        }
        items.push_back(payload);
        drop(items);
        self.notify.notify_one();
        dropped
    }

    /// Nothing queued and nothing being sent.
    pub fn is_idle(&self) -> bool {
        self.items.lock().unwrap().is_empty() && self.busy.load(Ordering::SeqCst) == 0
    }

    /// Forgets everything queued and any send in progress, once the worker is gone (aborted):
    /// the queue is idle afterwards. Returns how many payloads were forgotten.
    pub fn abandon(&self) -> usize {
        let mut items = self.items.lock().unwrap();
        let forgotten = items.len() + self.busy.swap(0, Ordering::SeqCst);
        items.clear();
        drop(items);
        self.settled.notify_waiters();
        forgotten
    }

    /// Returns once nothing is queued and nothing is being sent (at once if so already); woken by
    /// the worker, not polled.
    pub async fn idle(&self) {
        loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            // Registered before the check, so a send ending in between is not missed.
            settled.as_mut().enable();
            if self.is_idle() {
                return;
            }
            settled.await;
        }
    }

    /// A send ended (delivered or given up on).
    fn sent(&self) {
        self.busy.fetch_sub(1, Ordering::SeqCst);
        self.settled.notify_waiters();
    }

    async fn next(&self) -> Value {
        loop {
            if let Some(item) = {
                let mut items = self.items.lock().unwrap();
                let item = items.pop_front();
                if item.is_some() {
                    self.busy.fetch_add(1, Ordering::SeqCst);
                }
                item
            } {
                return item;
            }
            self.notify.notified().await;
        }
    }
}

/// Sends the sink's queue, forever; run it as a task.
pub async fn run_worker(
    sink: String,
    url: String,
    queue: Arc<SinkQueue>,
    client: reqwest::Client,
    policy: DeliveryPolicy,
    metrics: Arc<Metrics>,
) {
    let mut last_send: Option<Instant> = None;
    loop {
        let payload = queue.next().await;
        if let Some(last) = last_send {
            let since = last.elapsed();
            if since < policy.min_interval {
                tokio::time::sleep(policy.min_interval - since).await;
            }
        }
        let result = deliver(&client, &url, &payload, &policy, &sink).await;
        last_send = Some(Instant::now());
        match result {
            Ok(()) => {
                metrics
                    .notifications_sent
                    .get_or_create(&SinkLabels::new(&sink))
                    .inc();
                debug!(%sink, "notification delivered");
            }
            Err(reason) => {
                metrics
                    .notification_failures
                    .get_or_create(&SinkLabels::new(&sink))
                    .inc();
                error!(%sink, %reason, "notification not delivered");
            }
        }
        queue.sent();
    }
}

/// One payload, with retries as the policy says. The error never contains the URL.
pub async fn deliver(
    client: &reqwest::Client,
    url: &str,
    payload: &Value,
    policy: &DeliveryPolicy,
    sink: &str,
) -> Result<(), String> {
    // Server errors and failed requests: 1 s, 2 s, 4 s, … (at most the longest `Retry-After`).
    let mut backoff = Backoff::doubling(policy.first_backoff, policy.max_retry_after);
    let mut last_error = String::new();
    for attempt in 1..=policy.max_attempts {
        let response = client
            .post(url)
            .json(payload)
            .timeout(policy.request_timeout)
            .send()
            .await;
        let wait = match response {
            Ok(response) if response.status().is_success() => return Ok(()),
            Ok(response) if response.status().as_u16() == 429 => {
                let retry_after = response
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|value| value.to_str().ok())
                    .and_then(|value| value.trim().parse::<u64>().ok())
                    .map(Duration::from_secs)
                    .unwrap_or(policy.first_backoff)
                    .min(policy.max_retry_after);
                last_error = "HTTP 429 rate limited".to_string();
                warn!(%sink, attempt, retry_after_secs = retry_after.as_secs(), "rate limited; waiting as told");
                retry_after
            }
            Ok(response) if response.status().is_server_error() => {
                let status = response.status().as_u16();
                let body = short_body(response).await;
                last_error = format!("HTTP {status}: {body}");
                warn!(%sink, attempt, status, %body, "server error; retrying");
                backoff.next_delay()
            }
            Ok(response) => {
                // invalid_payload, action_prohibited, channel_not_found, channel_is_archived ...
                let status = response.status().as_u16();
                let body = short_body(response).await;
                return Err(format!("HTTP {status}: {body} (not retried)"));
            }
            Err(error) => {
                last_error = error.without_url().to_string();
                warn!(%sink, attempt, error = %last_error, "request failed; retrying");
                backoff.next_delay()
            }
        };
        if attempt < policy.max_attempts {
            tokio::time::sleep(wait).await;
        }
    }
    Err(format!(
        "gave up after {} attempts: {last_error}",
        policy.max_attempts
    ))
}

async fn short_body(response: reqwest::Response) -> String {
    let text = response.text().await.unwrap_or_default();
    let text: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
    if text.is_empty() {
        "(empty body)".to_string()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::http_receiver::{Receiver, Reply};
    use serde_json::json;

    fn fast_policy() -> DeliveryPolicy {
        DeliveryPolicy {
            min_interval: Duration::from_millis(10),
            max_attempts: 4,
            first_backoff: Duration::from_millis(20),
            max_retry_after: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn a_429_waits_retry_after_then_succeeds() {
        let receiver = Receiver::start().await;
        receiver.script([Reply {
            retry_after: Some(1),
            ..Reply::status(429, "rate_limited")
        }]);
        let client = reqwest::Client::new();
        deliver(
            &client,
            &receiver.url("/hook"),
            &json!({"text": "hi"}),
            &fast_policy(),
            "slack",
        )
        .await
        .unwrap();
        let received = receiver.received();
        assert_eq!(received.len(), 2);
        assert!(
            received[1].at - received[0].at >= Duration::from_millis(950),
            "Retry-After honoured"
        );
    }

    #[tokio::test]
    async fn server_errors_are_retried_with_backoff() {
        let receiver = Receiver::start().await;
        receiver.script([Reply::status(500, "rollup_error"), Reply::status(503, "")]);
        let client = reqwest::Client::new();
        deliver(
            &client,
            &receiver.url("/hook"),
            &json!({}),
            &fast_policy(),
            "slack",
        )
        .await
        .unwrap();
        assert_eq!(receiver.received().len(), 3);
    }

    #[tokio::test]
    async fn client_errors_are_not_retried() {
        for (status, body) in [
            (400, "invalid_payload"),
            (403, "action_prohibited"),
            (404, "channel_not_found"),
            (410, "channel_is_archived"),
        ] {
            let receiver = Receiver::start().await;
            receiver.script([Reply::status(status, body)]);
            let client = reqwest::Client::new();
            let error = deliver(
                &client,
                &receiver.url("/secret-path-T000/B000"),
                &json!({}),
                &fast_policy(),
                "slack",
            )
            .await
            .unwrap_err();
            assert!(
                error.contains(body) && error.contains("not retried"),
                "{error}"
            );
            assert!(
                !error.contains("secret-path"),
                "the URL is a secret: {error}"
            );
            assert_eq!(receiver.received().len(), 1);
        }
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_gives_up_without_naming_the_url() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = reqwest::Client::new();
        let url = format!("http://127.0.0.1:{port}/services/SECRET/TOKEN");
        let error = deliver(&client, &url, &json!({}), &fast_policy(), "slack")
            .await
            .unwrap_err();
        assert!(error.starts_with("gave up after 4 attempts"), "{error}");
        assert!(!error.contains("SECRET"), "{error}");
    }

    #[test]
    fn a_full_queue_drops_its_oldest_entry() {
        let queue = SinkQueue::new(2);
        assert!(!queue.push(json!(1)));
        assert!(!queue.push(json!(2)));
        assert!(queue.push(json!(3)));
        let items: Vec<serde_json::Value> = queue.items.lock().unwrap().iter().cloned().collect();
        assert_eq!(items, vec![json!(2), json!(3)]);
    }

    #[test]
    fn an_abandoned_queue_is_idle() {
        let queue = SinkQueue::new(4);
        queue.push(json!(1));
        queue.push(json!(2));
        queue.busy.fetch_add(1, Ordering::SeqCst);
        assert!(!queue.is_idle());
        assert_eq!(queue.abandon(), 3);
        assert!(queue.is_idle());
    }

    #[tokio::test]
    async fn idle_wakes_when_the_last_send_ends_and_not_before() {
        let queue = SinkQueue::new(4);
        queue.idle().await; // idle from the start
        queue.push(json!(1));
        let item = queue.next().await;
        assert_eq!(item, json!(1));
        let waiter = tokio::spawn({
            let queue = queue.clone();
            async move { queue.idle().await }
        });
        tokio::task::yield_now().await;
        queue.push(json!(2));
        queue.sent(); // the first send ended, one is still queued
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one payload is still queued");
        queue.next().await;
        queue.sent();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken by the last send")
            .unwrap();
    }

    #[tokio::test]
    async fn the_worker_keeps_one_message_per_interval() {
        let receiver = Receiver::start().await;
        let queue = SinkQueue::new(10);
        let metrics = Arc::new(Metrics::default());
        let policy = DeliveryPolicy {
            min_interval: Duration::from_millis(300),
            ..fast_policy()
        };
        tokio::spawn(run_worker(
            "slack".to_string(),
            receiver.url("/hook"),
            queue.clone(),
            reqwest::Client::new(),
            policy,
            metrics.clone(),
        ));
        for index in 0..3 {
            queue.push(json!({"n": index}));
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !queue.is_idle() || receiver.received().len() < 3 {
            assert!(std::time::Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let received = receiver.received();
        assert!(received[1].at - received[0].at >= Duration::from_millis(280));
        assert!(received[2].at - received[1].at >= Duration::from_millis(280));
        assert_eq!(
            crate::ops::metrics::count(&metrics.notifications_sent, &SinkLabels::new("slack")),
            3
        );
    }
}
