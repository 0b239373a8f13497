//! The notifier actor: takes every run outcome from the executor pool and queues it for each sink
//! that wants it. Queuing never waits: each sink has its own bounded queue and delivery task, so a
//! slow or dead Slack holds up nothing but its own messages.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, Context, Handler, Message, ResponseFuture};
use serde_json::Value;
use tracing::{info, warn};

use crate::metrics::Metrics;
use crate::notify::delivery::{run_worker, DeliveryPolicy, SinkQueue};
use crate::notify::{payload, EventKind, RunEvent};

/// The sinks the configuration enables: Slack when its URL variable is set, and every webhook whose
/// URL variable is set. A named variable that is unset is reported once, by name only.
pub fn sinks_from_config(config: &crate::config::Config) -> Vec<SinkSpec> {
    let mut sinks = Vec::new();
    match std::env::var(&config.slack.webhook_url_env) {
        Ok(url) if !url.trim().is_empty() => sinks.push(SinkSpec {
            name: "slack".to_string(),
            url,
            format: SinkFormat::Slack {
                channel: config.slack.channel.clone(),
            },
            notify_on: config.slack.notify_on.iter().copied().collect(),
        }),
        _ => {
            info!(variable = %config.slack.webhook_url_env, "Slack notifications off: the variable is not set")
        }
    }
    for (index, webhook) in config.webhooks.iter().enumerate() {
        match std::env::var(&webhook.url_env) {
            Ok(url) if !url.trim().is_empty() => sinks.push(SinkSpec {
                name: format!("webhook[{index}]"),
                url,
                format: SinkFormat::Webhook,
                notify_on: webhook.notify_on.iter().copied().collect(),
            }),
            _ => {
                warn!(variable = %webhook.url_env, "webhook notifications off: the variable is not set")
            }
        }
    }
    sinks
}

/// Queued payloads per sink before the oldest are dropped.
const QUEUE_CAPACITY: usize = 1_000;

/// How a sink renders an event.
#[derive(Debug, Clone)]
pub enum SinkFormat {
    Slack { channel: String },
    Webhook,
}

/// A configured destination; `url` is a secret, never logged.
#[derive(Clone)]
pub struct SinkSpec {
    pub name: String,
    pub url: String,
    pub format: SinkFormat,
    pub notify_on: HashSet<EventKind>,
}

impl std::fmt::Debug for SinkSpec {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SinkSpec")
            .field("name", &self.name)
            .field("url", &"***")
            .field("format", &self.format)
            .field("notify_on", &self.notify_on)
            .finish()
    }
}

struct Sink {
    spec: SinkSpec,
    queue: Arc<SinkQueue>,
}

pub struct Notifier {
    sinks: Vec<Sink>,
    policy: DeliveryPolicy,
    metrics: Arc<Metrics>,
}

impl Notifier {
    pub fn new(sinks: Vec<SinkSpec>, policy: DeliveryPolicy, metrics: Arc<Metrics>) -> Self {
        Notifier {
            sinks: sinks
                .into_iter()
                .map(|spec| Sink {
                    spec,
                    queue: SinkQueue::new(QUEUE_CAPACITY),
                })
                .collect(),
            policy,
            metrics,
        }
    }

    fn render(format: &SinkFormat, event: &RunEvent) -> Value {
        match format {
            SinkFormat::Slack { channel } => payload::slack(event, channel),
            SinkFormat::Webhook => payload::webhook(event),
        }
    }
}

impl Actor for Notifier {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Context<Self>) {
        let client = reqwest::Client::builder()
            .user_agent(concat!("icepack/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("an HTTP client with default settings");
        for sink in &self.sinks {
            info!(sink = %sink.spec.name, notify_on = ?sink.spec.notify_on, "notifications enabled");
            actix::spawn(run_worker(
                sink.spec.name.clone(),
                sink.spec.url.clone(),
                sink.queue.clone(),
                client.clone(),
                self.policy,
                self.metrics.clone(),
            ));
        }
    }
}

/// A run ended: tell every sink that wants to know.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Notify(pub RunEvent);

impl Handler<Notify> for Notifier {
    type Result = ();

    fn handle(&mut self, message: Notify, _ctx: &mut Context<Self>) {
        let kind = message.0.kind();
        for sink in &self.sinks {
            if !sink.spec.notify_on.contains(&kind) {
                continue;
            }
            if sink.queue.push(Self::render(&sink.spec.format, &message.0)) {
                self.metrics
                    .notifications_dropped
                    .inc(&[("sink", &sink.spec.name)]);
                warn!(sink = %sink.spec.name, "notification queue full: dropped the oldest message");
            }
        }
    }
}

/// Waits (up to the deadline) until every queued notification was sent or given up on.
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct Flush(pub Duration);

impl Handler<Flush> for Notifier {
    type Result = ResponseFuture<bool>;

    fn handle(&mut self, message: Flush, _ctx: &mut Context<Self>) -> Self::Result {
        let queues: Vec<Arc<SinkQueue>> =
            self.sinks.iter().map(|sink| sink.queue.clone()).collect();
        let deadline = Instant::now() + message.0;
        Box::pin(async move {
            while !queues.iter().all(|queue| queue.is_idle()) {
                if Instant::now() >= deadline {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            true
        })
    }
}
