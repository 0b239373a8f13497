//! The notifier actor: takes every run outcome from the executor pool and queues it for each sink
//! that wants it. Queuing never waits: each sink has its own bounded queue and delivery task, so a
//! slow or dead Slack holds up nothing but its own messages.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Context, Handler, Message, ResponseFuture};
use serde_json::Value;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::config::{Config, SlackConfig, WebhookConfig};
use crate::ops::metrics::{Metrics, SinkLabels};
use crate::ops::notify::delivery::{run_worker, DeliveryPolicy, SinkQueue};
use crate::ops::notify::{payload, EventKind, RunEvent};

/// The sinks the configuration enables: the deployment-wide Slack (`slack`) and webhooks
/// (`webhook[i]`), which get every tenant's runs, then each tenant's own Slack (`<tenant>/slack`)
/// and webhooks (`<tenant>/webhook[i]`), which get only that tenant's. Each is enabled when its URL
/// variable is set; one that is unset is reported once, by name only.
pub fn sinks_from_config(config: &Config) -> Vec<SinkSpec> {
    let mut sinks = Vec::new();
    sinks.extend(slack_sink(&config.slack, None));
    for (index, webhook) in config.webhooks.iter().enumerate() {
        sinks.extend(webhook_sink(webhook, index, None));
    }
    for tenant in config.tenant_specs() {
        if let Some(slack) = &tenant.slack {
            sinks.extend(slack_sink(slack, Some(&tenant.name)));
        }
        for (index, webhook) in tenant.webhooks.iter().enumerate() {
            sinks.extend(webhook_sink(webhook, index, Some(&tenant.name)));
        }
    }
    sinks
}

/// The URL in `variable`, when it is set to something.
fn url_from_env(variable: &str) -> Option<String> {
    std::env::var(variable)
        .ok()
        .filter(|url| !url.trim().is_empty())
}

fn sink_name(tenant: Option<&str>, name: &str) -> String {
    match tenant {
        Some(tenant) => format!("{tenant}/{name}"),
        None => name.to_string(),
    }
}

fn slack_sink(slack: &SlackConfig, tenant: Option<&str>) -> Option<SinkSpec> {
    let Some(url) = url_from_env(&slack.webhook_url_env) else {
        match tenant {
            None => {
                info!(variable = %slack.webhook_url_env, "Slack notifications off: the variable is not set")
            }
            Some(tenant) => {
                info!(%tenant, variable = %slack.webhook_url_env, "tenant's Slack notifications off: the variable is not set")
            }
        }
        return None;
    };
    Some(SinkSpec {
        name: sink_name(tenant, "slack"),
        url,
        format: SinkFormat::Slack {
            channel: slack.channel.clone(),
        },
        notify_on: slack.notify_on.iter().copied().collect(),
        tenant: tenant.map(str::to_string),
    })
}

fn webhook_sink(webhook: &WebhookConfig, index: usize, tenant: Option<&str>) -> Option<SinkSpec> {
    let Some(url) = url_from_env(&webhook.url_env) else {
        match tenant {
            None => {
                warn!(variable = %webhook.url_env, "webhook notifications off: the variable is not set")
            }
            Some(tenant) => {
                warn!(%tenant, variable = %webhook.url_env, "tenant's webhook notifications off: the variable is not set")
            }
        }
        return None;
    };
    Some(SinkSpec {
        name: sink_name(tenant, &format!("webhook[{index}]")),
        url,
        format: SinkFormat::Webhook,
        notify_on: webhook.notify_on.iter().copied().collect(),
        tenant: tenant.map(str::to_string),
    })
}

/// Queued payloads per sink before the oldest are dropped.
const QUEUE_CAPACITY: usize = 1_000;

/// How long a removed sink may go on sending what it had queued before its worker is aborted.
const RETIRE_GRACE: Duration = Duration::from_secs(30);

/// How a sink renders an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkFormat {
    Slack { channel: String },
    Webhook,
}

/// A configured destination; `url` is a secret, never logged (`Debug` masks it).
#[derive(Clone, PartialEq, Eq)]
pub struct SinkSpec {
    pub name: String,
    pub url: String,
    pub format: SinkFormat,
    pub notify_on: HashSet<EventKind>,
    /// `None`: deployment-wide, gets every tenant's runs. `Some(tenant)`: only that tenant's.
    pub tenant: Option<String>,
}

impl SinkSpec {
    /// Whether the sink wants to hear about this run: its kind, and its tenant when it has one.
    /// A sink of failures hears of a success whose step after the commit failed too.
    pub fn wants(&self, event: &RunEvent) -> bool {
        let step_failed = event.outcome.maintenance_failed().is_some()
            && self.notify_on.contains(&EventKind::Failure);
        (self.notify_on.contains(&event.kind()) || step_failed)
            && self
                .tenant
                .as_deref()
                .is_none_or(|tenant| tenant == event.tenant)
    }
}

impl std::fmt::Debug for SinkSpec {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SinkSpec")
            .field("name", &self.name)
            .field("url", &"***")
            .field("format", &self.format)
            .field("notify_on", &self.notify_on)
            .field("tenant", &self.tenant)
            .finish()
    }
}

/// A sink being served: its queue and the task sending it.
struct Sink {
    spec: SinkSpec,
    queue: Arc<SinkQueue>,
    worker: JoinHandle<()>,
}

pub struct Notifier {
    /// The sinks given to `new`, started with the actor.
    initial: Vec<SinkSpec>,
    sinks: Vec<Sink>,
    /// Queues of removed sinks still sending what they had (`Flush` waits for them too).
    retiring: Vec<Arc<SinkQueue>>,
    client: reqwest::Client,
    policy: DeliveryPolicy,
    metrics: Arc<Metrics>,
    retire_grace: Duration,
}

impl Notifier {
    pub fn new(sinks: Vec<SinkSpec>, policy: DeliveryPolicy, metrics: Arc<Metrics>) -> Self {
        let client = reqwest::Client::builder()
            .user_agent(concat!("icepack/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("an HTTP client with default settings");
        Notifier {
            initial: sinks,
            sinks: Vec::new(),
            retiring: Vec::new(),
            client,
            policy,
            metrics,
            retire_grace: RETIRE_GRACE,
        }
    }

    fn render(format: &SinkFormat, event: &RunEvent) -> Value {
        match format {
            SinkFormat::Slack { channel } => payload::slack(event, channel),
            SinkFormat::Webhook => payload::webhook(event),
        }
    }

    /// A queue for the sink and a task sending it (on the actor's arbiter).
    fn start_sink(&self, spec: SinkSpec) -> Sink {
        info!(sink = %spec.name, tenant = spec.tenant.as_deref().unwrap_or("(all)"), notify_on = ?spec.notify_on, "notifications enabled");
        let queue = SinkQueue::new(QUEUE_CAPACITY);
        let worker = actix::spawn(run_worker(
            spec.name.clone(),
            spec.url.clone(),
            queue.clone(),
            self.client.clone(),
            self.policy,
            self.metrics.clone(),
        ));
        Sink {
            spec,
            queue,
            worker,
        }
    }

    fn start_initial_sinks(&mut self) {
        let specs = std::mem::take(&mut self.initial);
        let sinks: Vec<Sink> = specs
            .into_iter()
            .map(|spec| self.start_sink(spec))
            .collect();
        self.sinks.extend(sinks);
    }

    /// Takes a sink out of service: it gets nothing more at once; its worker goes on sending what
    /// was queued until the queue is idle or the grace period is over, then is aborted.
    fn retire(&mut self, sink: Sink) {
        let Sink {
            spec,
            queue,
            worker,
        } = sink;
        self.retiring.push(queue.clone());
        let grace = self.retire_grace;
        let metrics = self.metrics.clone();
        actix::spawn(async move {
            let _ = tokio::time::timeout(grace, queue.idle()).await;
            worker.abort();
            let _ = worker.await;
            let forgotten = queue.abandon();
            if forgotten > 0 {
                metrics
                    .notifications_dropped
                    .get_or_create(&SinkLabels::new(&spec.name))
                    .inc_by(forgotten as u64);
                warn!(sink = %spec.name, forgotten, grace_secs = grace.as_secs(), "sink stopped before sending everything it had queued");
            } else {
                info!(sink = %spec.name, "sink stopped");
            }
        });
    }

    /// Serves `specs` from now on: unchanged sinks keep their queue and worker, new ones start,
    /// the others retire.
    fn replace_sinks(&mut self, specs: Vec<SinkSpec>) {
        let mut old: Vec<Option<Sink>> = std::mem::take(&mut self.sinks)
            .into_iter()
            .map(Some)
            .collect();
        let (mut kept, mut added, mut removed) = (Vec::new(), Vec::new(), Vec::new());
        let mut sinks = Vec::with_capacity(specs.len());
        for spec in specs {
            let same = old
                .iter_mut()
                .find(|sink| sink.as_ref().is_some_and(|sink| sink.spec == spec))
                .and_then(Option::take);
            match same {
                Some(sink) => {
                    kept.push(sink.spec.name.clone());
                    sinks.push(sink);
                }
                None => {
                    added.push(spec.name.clone());
                    sinks.push(self.start_sink(spec));
                }
            }
        }
        self.sinks = sinks;
        self.retiring.retain(|queue| !queue.is_idle());
        for sink in old.into_iter().flatten() {
            removed.push(sink.spec.name.clone());
            self.retire(sink);
        }
        info!(?kept, ?added, ?removed, "notification sinks replaced");
    }
}

impl Actor for Notifier {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Context<Self>) {
        self.start_initial_sinks();
    }

    /// The workers would otherwise outlive the actor: each finishes what it has, then stops.
    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        for sink in std::mem::take(&mut self.sinks) {
            self.retire(sink);
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
        for sink in &self.sinks {
            if !sink.spec.wants(&message.0) {
                continue;
            }
            if sink.queue.push(Self::render(&sink.spec.format, &message.0)) {
                self.metrics
                    .notifications_dropped
                    .get_or_create(&SinkLabels::new(&sink.spec.name))
                    .inc();
                warn!(sink = %sink.spec.name, "notification queue full: dropped the oldest message");
            }
        }
    }
}

/// Replaces the sink set while running (a configuration reload): sinks whose spec is unchanged
/// keep their queue and worker, new ones start, removed ones get nothing more and stop once they
/// have sent what they had queued (at most 30 s later).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct SetSinks(pub Vec<SinkSpec>);

impl Handler<SetSinks> for Notifier {
    type Result = ();

    fn handle(&mut self, message: SetSinks, _ctx: &mut Context<Self>) {
        self.replace_sinks(message.0);
    }
}

/// Waits (up to the deadline) until every queued notification was sent or given up on.
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct Flush(pub Duration);

impl Handler<Flush> for Notifier {
    type Result = ResponseFuture<bool>;

    fn handle(&mut self, message: Flush, _ctx: &mut Context<Self>) -> Self::Result {
        self.retiring.retain(|queue| !queue.is_idle());
        let queues: Vec<Arc<SinkQueue>> = self
            .sinks
            .iter()
            .map(|sink| sink.queue.clone())
            .chain(self.retiring.iter().cloned())
            .collect();
        let within = message.0;
        Box::pin(async move {
            let all_idle = futures::future::join_all(queues.iter().map(|queue| queue.idle()));
            tokio::time::timeout(within, all_idle).await.is_ok()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::report::FailureClass;
    use crate::model::report::RunOutcome;
    use crate::ops::notify::payload::tests::{event, success};
    use crate::testing::http_receiver::{Receiver, Reply};
    use std::time::Instant;

    fn fast_policy() -> DeliveryPolicy {
        DeliveryPolicy {
            min_interval: Duration::from_millis(5),
            max_attempts: 3,
            first_backoff: Duration::from_millis(10),
            max_retry_after: Duration::from_secs(1),
            request_timeout: Duration::from_secs(30),
        }
    }

    fn webhook_spec(name: &str, url: String, tenant: Option<&str>) -> SinkSpec {
        SinkSpec {
            name: name.to_string(),
            url,
            format: SinkFormat::Webhook,
            notify_on: [EventKind::Success, EventKind::Failure].into(),
            tenant: tenant.map(str::to_string),
        }
    }

    fn run(tenant: &str, run_id: &str) -> RunEvent {
        let mut event = event(success());
        event.tenant = tenant.to_string();
        event.run_id = run_id.to_string();
        event
    }

    fn failed_run(tenant: &str, run_id: &str) -> RunEvent {
        RunEvent {
            ran_on: None,
            outcome: RunOutcome::Failure {
                class: FailureClass::Timeout,
                excerpt: "deadline passed".to_string(),
                duration_millis: 1_000,
                attempts: 1,
            },
            ..run(tenant, run_id)
        }
    }

    /// (tenant, run id) of every webhook document the receiver got, in order.
    fn webhook_runs(receiver: &Receiver) -> Vec<(String, String)> {
        receiver
            .received()
            .iter()
            .map(|request| {
                (
                    request.body["tenant"].as_str().unwrap().to_string(),
                    request.body["run_id"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        expected
            .iter()
            .map(|(tenant, run)| (tenant.to_string(), run.to_string()))
            .collect()
    }

    async fn wait_until(what: &str, within: Duration, condition: impl Fn() -> bool) {
        let deadline = Instant::now() + within;
        while !condition() {
            assert!(Instant::now() < deadline, "{what} within {within:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A sink of failures (a pager) hears of a successful run whose step after the commit
    /// failed: the expiry that keeps failing needs someone.
    #[test]
    fn a_failure_sink_hears_of_a_failed_step_after_a_commit() {
        let failures_only = SinkSpec {
            notify_on: [EventKind::Failure].into(),
            ..webhook_spec("pager", "http://pager".to_string(), None)
        };
        let successes_only = SinkSpec {
            notify_on: [EventKind::Success].into(),
            ..webhook_spec("chat", "http://chat".to_string(), None)
        };
        let mut noted = run("a", "a-1");
        if let RunOutcome::Success { report, .. } = &mut noted.outcome {
            report.maintenance_failed = Some(crate::model::report::MaintenanceFailure {
                step: "expire_snapshots".to_string(),
                class: FailureClass::Other,
                excerpt: "failed".to_string(),
            });
        }
        assert!(failures_only.wants(&noted));
        assert!(successes_only.wants(&noted));
        assert!(!failures_only.wants(&run("a", "a-2")));
        assert!(!successes_only.wants(&failed_run("a", "a-3")));
    }

    #[actix::test]
    async fn tenant_sinks_get_only_their_tenants_runs_and_deployment_wide_ones_all() {
        let (a, b, all, a_failures) = (
            Receiver::start().await,
            Receiver::start().await,
            Receiver::start().await,
            Receiver::start().await,
        );
        let notifier = Notifier::new(
            vec![
                webhook_spec("a/webhook[0]", a.url("/a"), Some("a")),
                SinkSpec {
                    format: SinkFormat::Slack {
                        channel: "#b".to_string(),
                    },
                    ..webhook_spec("b/slack", b.url("/b"), Some("b"))
                },
                webhook_spec("webhook[0]", all.url("/all"), None),
                SinkSpec {
                    notify_on: [EventKind::Failure].into(),
                    ..webhook_spec("a/webhook[1]", a_failures.url("/a-failures"), Some("a"))
                },
            ],
            fast_policy(),
            Arc::new(Metrics::default()),
        )
        .start();
        notifier.do_send(Notify(run("a", "a-1")));
        notifier.do_send(Notify(failed_run("b", "b-1")));
        notifier.do_send(Notify(failed_run("a", "a-2")));
        assert!(notifier.send(Flush(Duration::from_secs(10))).await.unwrap());

        assert_eq!(webhook_runs(&a), pairs(&[("a", "a-1"), ("a", "a-2")]));
        assert_eq!(
            webhook_runs(&all),
            pairs(&[("a", "a-1"), ("b", "b-1"), ("a", "a-2")])
        );
        assert_eq!(
            webhook_runs(&a_failures),
            pairs(&[("a", "a-2")]),
            "notify_on still applies"
        );
        let slack = b.received();
        assert_eq!(slack.len(), 1);
        assert_eq!(slack[0].body["channel"], "#b");
        let fields = slack[0].body["attachments"][0]["fields"].to_string();
        assert!(fields.contains("`b-1`"), "{fields}");
        let tenant = slack[0].body["attachments"][0]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|field| field["title"] == "Tenant")
            .map(|field| field["value"].clone());
        assert_eq!(tenant, Some(serde_json::json!("b")), "{fields}");
    }

    #[actix::test]
    async fn set_sinks_keeps_adds_and_removes_while_running() {
        let (kept, removed, added) = (
            Receiver::start().await,
            Receiver::start().await,
            Receiver::start().await,
        );
        let kept_spec = webhook_spec("webhook[0]", kept.url("/kept"), None);
        let notifier = Notifier::new(
            vec![
                kept_spec.clone(),
                webhook_spec("a/webhook[0]", removed.url("/removed"), Some("a")),
            ],
            fast_policy(),
            Arc::new(Metrics::default()),
        )
        .start();
        notifier.do_send(Notify(run("a", "a-1")));
        assert!(notifier.send(Flush(Duration::from_secs(10))).await.unwrap());
        assert_eq!(webhook_runs(&removed), pairs(&[("a", "a-1")]));

        notifier.do_send(SetSinks(vec![
            kept_spec,
            webhook_spec("a/webhook[1]", added.url("/added"), Some("a")),
        ]));
        notifier.do_send(Notify(run("a", "a-2")));
        notifier.do_send(Notify(run("b", "b-1")));
        assert!(notifier.send(Flush(Duration::from_secs(10))).await.unwrap());

        assert_eq!(
            webhook_runs(&kept),
            pairs(&[("a", "a-1"), ("a", "a-2"), ("b", "b-1")])
        );
        assert_eq!(
            webhook_runs(&removed),
            pairs(&[("a", "a-1")]),
            "a removed sink gets nothing more"
        );
        assert_eq!(webhook_runs(&added), pairs(&[("a", "a-2")]));
    }

    #[actix::test]
    async fn replacing_keeps_unchanged_workers_and_stops_removed_ones_when_idle_or_late() {
        let (kept, idle, slow) = (
            Receiver::start().await,
            Receiver::start().await,
            Receiver::start().await,
        );
        slow.script([Reply {
            delay: Duration::from_secs(20),
            ..Reply::status(200, "ok")
        }]);
        let metrics = Arc::new(Metrics::default());
        let kept_spec = webhook_spec("webhook[0]", kept.url("/kept"), None);
        let idle_spec = webhook_spec("a/webhook[0]", idle.url("/idle"), Some("a"));
        let mut notifier = Notifier::new(
            vec![
                kept_spec.clone(),
                idle_spec.clone(),
                webhook_spec("b/webhook[0]", slow.url("/slow"), Some("b")),
            ],
            fast_policy(),
            metrics.clone(),
        );
        notifier.retire_grace = Duration::from_millis(1_500);
        notifier.start_initial_sinks();
        let kept_queue = notifier.sinks[0].queue.clone();
        let idle_queue = notifier.sinks[1].queue.clone();
        let slow_queue = notifier.sinks[2].queue.clone();
        // The slow sink is stuck sending one payload, with another queued behind it.
        slow_queue.push(serde_json::json!({"n": 1}));
        slow_queue.push(serde_json::json!({"n": 2}));
        wait_until("the slow send starts", Duration::from_secs(5), || {
            slow.received().len() == 1
        })
        .await;

        // Same name, other notify_on: a different sink.
        let changed_spec = SinkSpec {
            notify_on: [EventKind::Failure].into(),
            ..idle_spec
        };
        let replaced_at = Instant::now();
        notifier.replace_sinks(vec![kept_spec, changed_spec.clone()]);
        assert_eq!(notifier.sinks.len(), 2);
        assert!(
            Arc::ptr_eq(&notifier.sinks[0].queue, &kept_queue),
            "unchanged: same queue"
        );
        assert!(!notifier.sinks[0].worker.is_finished());
        assert_eq!(notifier.sinks[1].spec, changed_spec);
        assert!(!Arc::ptr_eq(&notifier.sinks[1].queue, &idle_queue));

        // Ours and the notifier's `retiring` list: the worker and the retiring task are gone.
        wait_until(
            "the idle worker stops",
            Duration::from_millis(1_000),
            || Arc::strong_count(&idle_queue) == 2,
        )
        .await;
        wait_until("the slow worker is aborted", Duration::from_secs(5), || {
            Arc::strong_count(&slow_queue) == 2
        })
        .await;
        assert!(
            replaced_at.elapsed() >= Duration::from_millis(1_400),
            "the slow sink had its grace period"
        );
        assert!(slow_queue.is_idle());
        assert_eq!(
            crate::ops::metrics::count(
                &metrics.notifications_dropped,
                &SinkLabels::new("b/webhook[0]")
            ),
            2,
            "the one in flight and the one queued"
        );
        assert_eq!(slow.received().len(), 1);

        // The kept worker still sends.
        kept_queue.push(serde_json::json!({"tenant": "a", "run_id": "a-9"}));
        wait_until("the kept sink delivers", Duration::from_secs(5), || {
            kept.received().len() == 1
        })
        .await;
    }

    #[test]
    fn sinks_from_config_adds_each_tenants_own() {
        std::env::set_var("ICEPACK_TEST_NOTIFIER_SLACK", "http://127.0.0.1:1/T/SECRET");
        std::env::set_var(
            "ICEPACK_TEST_NOTIFIER_HOOK",
            "http://127.0.0.1:1/hook/SECRET",
        );
        std::env::set_var(
            "ICEPACK_TEST_NOTIFIER_ANALYTICS_SLACK",
            "http://127.0.0.1:1/analytics/SECRET",
        );
        std::env::set_var(
            "ICEPACK_TEST_NOTIFIER_ANALYTICS_PAGER",
            "http://127.0.0.1:1/pager/SECRET",
        );
        let deployment = r##"
            [slack]
            webhook_url_env = "ICEPACK_TEST_NOTIFIER_SLACK"
            [[webhooks]]
            url_env = "ICEPACK_TEST_NOTIFIER_UNSET"
            [[webhooks]]
            url_env = "ICEPACK_TEST_NOTIFIER_HOOK"
        "##;
        let untenanted = Config::from_toml_str(deployment).unwrap();
        let names: Vec<String> = sinks_from_config(&untenanted)
            .into_iter()
            .map(|sink| sink.name)
            .collect();
        assert_eq!(names, ["slack", "webhook[1]"], "as without tenants");

        let tenanted = format!(
            r##"{deployment}
            [tenants.analytics]
            slack = {{ webhook_url_env = "ICEPACK_TEST_NOTIFIER_ANALYTICS_SLACK", channel = "#analytics" }}
            [[tenants.analytics.webhooks]]
            url_env = "ICEPACK_TEST_NOTIFIER_UNSET"
            [[tenants.analytics.webhooks]]
            url_env = "ICEPACK_TEST_NOTIFIER_ANALYTICS_PAGER"
            notify_on = ["failure"]
            [tenants.billing]
            slack = {{ webhook_url_env = "ICEPACK_TEST_NOTIFIER_UNSET" }}
        "##
        );
        let sinks = sinks_from_config(&Config::from_toml_str(&tenanted).unwrap());
        let described: Vec<(&str, Option<&str>)> = sinks
            .iter()
            .map(|sink| (sink.name.as_str(), sink.tenant.as_deref()))
            .collect();
        assert_eq!(
            described,
            [
                ("slack", None),
                ("webhook[1]", None),
                ("analytics/slack", Some("analytics")),
                ("analytics/webhook[1]", Some("analytics")),
            ]
        );
        assert_eq!(
            sinks[2].format,
            SinkFormat::Slack {
                channel: "#analytics".to_string()
            }
        );
        assert_eq!(sinks[3].notify_on, [EventKind::Failure].into());
        let debug = format!("{sinks:?}");
        assert!(!debug.contains("SECRET"), "{debug}");
    }

    #[test]
    fn a_tenant_sink_wants_only_its_tenants_runs() {
        let mine = webhook_spec("a/webhook[0]", String::new(), Some("a"));
        let everyone = webhook_spec("webhook[0]", String::new(), None);
        assert!(mine.wants(&run("a", "1")));
        assert!(!mine.wants(&run("b", "1")));
        assert!(everyone.wants(&run("a", "1")) && everyone.wants(&run("b", "1")));
    }
}
