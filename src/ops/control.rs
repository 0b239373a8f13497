//! The running service's control loop: the SQS pollers of every configured queue, and live
//! reloads of the configuration (SIGHUP or `POST /v1/reload`).
//!
//! Reloads are served one at a time by a task in the actix system. The new file is loaded and
//! validated first: an invalid configuration is refused with the validation error and the running
//! one stays. A valid one is applied: tables and tenants come and go, thresholds, tenant limits,
//! Spark settings and alert channels change at once, pollers start and stop with their queues.
//! Settings that need a restart (the state directory, the HTTP listener, the Spark runner) are
//! reported, not applied.
//!
//! Every polled queue is registered with the metrics under its label ([`queue_labels`]); a queue a
//! reload removes leaves the registry, so it leaves `/metrics` and `/readyz` too.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;
use futures::future::LocalBoxFuture;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use crate::base::clock::Clock;
use crate::config::{Config, SqsConfig};
use crate::intake::poller::{PolledQueue, PollerSettings, SqsPoller};
use crate::intake::queue::{queue_labels, Queue, SqsQueue};
use crate::intake::router::IntakeRouter;
use crate::ops::metrics::{Metrics, TableSeries};
use crate::ops::notifier::{sinks_from_config, Notifier, SetSinks};
use crate::service::{MapReport, Pipeline};

/// Opens a queue from its settings; SQS in the service, in-memory queues in benchmarks.
pub type Connector = Arc<dyn Fn(&SqsConfig) -> LocalBoxFuture<'static, Arc<dyn Queue>>>;

/// SQS clients shared per (region, endpoint): a thousand tenants' queues in one region use one
/// client, its connection pool and its credentials cache.
pub fn sqs_connector() -> Connector {
    /// (region, endpoint, wait time: the client's operation timeout depends on it).
    type ClientKey = (String, String, u64);
    let clients: Arc<std::sync::Mutex<HashMap<ClientKey, aws_sdk_sqs::Client>>> = Arc::default();
    Arc::new(move |sqs: &SqsConfig| {
        let clients = clients.clone();
        let sqs = sqs.clone();
        Box::pin(async move {
            let key = (
                sqs.region.clone(),
                sqs.endpoint_url.clone(),
                sqs.wait_time_seconds.get(),
            );
            let cached = clients.lock().unwrap().get(&key).cloned();
            let client = match cached {
                Some(client) => client,
                None => {
                    let client = SqsQueue::connect(&sqs).await.client().clone();
                    clients.lock().unwrap().insert(key, client.clone());
                    client
                }
            };
            Arc::new(SqsQueue::on_client(client, &sqs.queue_url)) as Arc<dyn Queue>
        })
    })
}

/// The poller actors of one queue.
struct QueuePollers {
    sqs: SqsConfig,
    tenant: Option<String>,
    /// Cancelled to stop them (a child of the process's token: its shutdown stops them too).
    shutdown: CancellationToken,
    /// Done when every poller of the queue has stopped.
    stopped: TaskTracker,
}

/// What a reload did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReloadReport {
    #[serde(flatten)]
    pub map: MapReport,
    pub queues_started: Vec<String>,
    pub queues_stopped: Vec<String>,
    /// Changed settings that only a restart applies.
    pub restart_required: Vec<String>,
    pub took_ms: u64,
}

type ReloadReply = oneshot::Sender<Result<ReloadReport, String>>;

/// Asks the control loop for a reload; cheap to clone (the HTTP API holds one).
#[derive(Clone)]
pub struct ControlHandle {
    requests: mpsc::UnboundedSender<ReloadReply>,
}

/// Where reload requests wait until the control loop serves them.
pub struct ControlRequests(mpsc::UnboundedReceiver<ReloadReply>);

/// A handle for the HTTP API, and the requests end for [`Control::serve`]: the API can be up
/// before the pollers start.
pub fn control_channel() -> (ControlHandle, ControlRequests) {
    let (requests, incoming) = mpsc::unbounded_channel();
    (ControlHandle { requests }, ControlRequests(incoming))
}

impl ControlHandle {
    /// Reloads the configuration file; the error explains why nothing changed.
    pub async fn reload(&self) -> Result<ReloadReport, String> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(reply)
            .map_err(|_| "the service is shutting down".to_string())?;
        answer
            .await
            .unwrap_or_else(|_| Err("the service is shutting down".to_string()))
    }
}

pub struct Control {
    path: PathBuf,
    config: Arc<Config>,
    pipeline: Pipeline,
    notifier: Option<Addr<Notifier>>,
    connector: Connector,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    /// By queue URL.
    pollers: BTreeMap<String, QueuePollers>,
    /// The process's shutdown: every queue's token is a child of it.
    shutdown: CancellationToken,
}

/// How the process stops the control loop: cancel, then wait for what it tracks (the loop, which
/// ends once every poller has stopped).
pub struct Shutdown {
    token: CancellationToken,
    tracker: TaskTracker,
}

impl Control {
    /// Starts the pollers of every configured queue. Must run inside the actix system.
    pub async fn start(
        path: PathBuf,
        config: Arc<Config>,
        pipeline: Pipeline,
        notifier: Option<Addr<Notifier>>,
        connector: Connector,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> Control {
        let mut control = Control {
            path,
            config: Arc::new(config.without_tables()),
            pipeline,
            notifier,
            connector,
            metrics,
            clock,
            pollers: BTreeMap::new(),
            shutdown: CancellationToken::new(),
        };
        let queues = config.queues();
        let labels = queue_labels(queues.iter().map(|queue| queue.sqs.queue_url.as_str()));
        for queue in queues {
            let label = labels[&queue.sqs.queue_url].clone();
            control.start_queue(queue.sqs, queue.tenant, &label).await;
        }
        control
    }

    pub fn num_queues(&self) -> usize {
        self.pollers.len()
    }

    pub fn num_pollers(&self) -> usize {
        self.pollers.values().map(|queue| queue.stopped.len()).sum()
    }

    async fn start_queue(&mut self, sqs: SqsConfig, tenant: Option<String>, label: &str) {
        // Registered first: until its first receive the queue is not ready.
        let health = self.metrics.queues.register(
            &sqs.queue_url,
            label,
            tenant.clone(),
            sqs.pollers.as_u32(),
            self.clock.now_millis(),
        );
        let polled = PolledQueue {
            queue: (self.connector)(&sqs).await,
            health,
        };
        let settings = PollerSettings {
            max_messages: sqs.max_messages.as_i32(),
            wait_time_seconds: sqs.wait_time_seconds.as_i32(),
            visibility_timeout_seconds: sqs.visibility_timeout_seconds.as_i32(),
        };
        let shutdown = self.shutdown.child_token();
        let stopped = TaskTracker::new();
        for _ in 0..sqs.pollers.get() {
            actix::Actor::start(SqsPoller::new(
                polled.clone(),
                self.router(),
                settings,
                shutdown.clone(),
                stopped.token(),
                self.metrics.clone(),
                self.clock.clone(),
            ));
        }
        self.pollers.insert(
            sqs.queue_url.clone(),
            QueuePollers {
                sqs,
                tenant,
                shutdown,
                stopped,
            },
        );
    }

    fn router(&self) -> Addr<IntakeRouter> {
        self.pipeline.router.clone()
    }

    /// Stops a queue's pollers; the batch each has in flight is committed (or left in the queue).
    fn stop_queue(&mut self, url: &str) -> Option<impl std::future::Future<Output = ()>> {
        let pollers = self.pollers.remove(url)?;
        pollers.shutdown.cancel();
        pollers.stopped.close();
        Some(async move { pollers.stopped.wait().await })
    }

    /// Loads, validates and applies the configuration file.
    pub async fn reload(&mut self) -> Result<ReloadReport, String> {
        let started = Instant::now();
        // Parsing a large file takes a while (150 ms for 10,000 tables): off the actors' thread.
        let path = self.path.clone();
        let config = tokio::task::spawn_blocking(move || Config::load(&path))
            .await
            .map_err(|error| format!("the configuration loader failed: {error}"))?
            .map(Arc::new)
            .map_err(|error| format!("{}: {error}", self.path.display()))?;
        let restart_required = restart_only_changes(&self.config, &config);
        // The running tables are the table map's (the configuration kept holds no list of them).
        let series_before: BTreeSet<(String, String)> = self
            .pipeline
            .map()
            .active()
            .map(|(_, spec)| (spec.table.clone(), spec.tenant.clone()))
            .collect();
        let map = self
            .pipeline
            .apply(&config)
            .await
            .map_err(|error| format!("cannot load the state of a new table: {error}"))?;
        // A removed table (or one moved to another tenant, or no longer in `[metrics] tables`)
        // leaves /metrics with its own series; a removed tenant with its aggregates.
        let series_after: BTreeSet<(String, String)> = config
            .table_specs()
            .into_iter()
            .map(|spec| (spec.table, spec.tenant))
            .collect();
        let own_before = self.metrics.series();
        let own_after = TableSeries::from_config(&config);
        for (table, tenant) in &series_before {
            if own_before.own(table)
                && (!own_after.own(table)
                    || !series_after.contains(&(table.clone(), tenant.clone())))
            {
                self.metrics.forget_table(table, tenant);
            }
        }
        self.metrics.set_series(own_after);
        let tenants_after: BTreeSet<&String> =
            series_after.iter().map(|(_, tenant)| tenant).collect();
        let tenants_gone: BTreeSet<&String> = series_before
            .iter()
            .map(|(_, tenant)| tenant)
            .filter(|tenant| !tenants_after.contains(tenant))
            .collect();
        for tenant in tenants_gone {
            self.metrics.forget_tenant(tenant);
        }
        if let Some(notifier) = &self.notifier {
            notifier.do_send(SetSinks(sinks_from_config(&config)));
        }
        let wanted: BTreeMap<String, (SqsConfig, Option<String>)> = config
            .queues()
            .into_iter()
            .map(|queue| (queue.sqs.queue_url.clone(), (queue.sqs, queue.tenant)))
            .collect();
        let labels = queue_labels(wanted.keys().map(String::as_str));
        let mut queues_stopped = Vec::new();
        let mut queues_started = Vec::new();
        let changed: Vec<String> = self
            .pollers
            .iter()
            .filter(|(url, running)| {
                wanted.get(*url).is_none_or(|(sqs, tenant)| {
                    !same_queue(&running.sqs, sqs) || running.tenant != *tenant
                })
            })
            .map(|(url, _)| url.clone())
            .collect();
        for url in changed {
            if let Some(stopping) = self.stop_queue(&url) {
                actix::spawn(stopping);
                queues_stopped.push(url);
            }
        }
        // Removed queues leave the metrics and readiness (a restarted one keeps its counters);
        // kept ones may get longer or shorter labels as names come and go.
        self.metrics.queues.retain(|url| labels.contains_key(url));
        self.metrics.queues.relabel(&labels);
        for (url, (sqs, tenant)) in wanted {
            if !self.pollers.contains_key(&url) {
                self.start_queue(sqs, tenant, &labels[&url]).await;
                queues_started.push(url);
            }
        }
        self.config = Arc::new(config.without_tables());
        Ok(ReloadReport {
            map,
            queues_started,
            queues_stopped,
            restart_required,
            took_ms: started.elapsed().as_millis() as u64,
        })
    }

    /// Serves reload requests (and SIGHUP) until shutdown; then stops every poller and waits up to
    /// `grace` for their batches in flight.
    pub fn serve(mut self, requests: ControlRequests) -> Shutdown {
        let mut incoming = requests.0;
        let token = self.shutdown.clone();
        let tracker = TaskTracker::new();
        actix::spawn(tracker.track_future(async move {
            let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
                .expect("SIGHUP handler");
            loop {
                tokio::select! {
                    Some(reply) = incoming.recv() => {
                        let result = self.reload().await;
                        log_reload(&result, "API");
                        let _ = reply.send(result);
                    }
                    _ = hangup.recv() => {
                        let result = self.reload().await;
                        log_reload(&result, "SIGHUP");
                    }
                    _ = self.shutdown.cancelled() => {
                        // Every queue's token is cancelled with it: wait for their pollers.
                        let urls: Vec<String> = self.pollers.keys().cloned().collect();
                        let stopping: Vec<_> = urls.iter().filter_map(|url| self.stop_queue(url)).collect();
                        futures::future::join_all(stopping).await;
                        return;
                    }
                }
            }
        }));
        tracker.close();
        Shutdown { token, tracker }
    }
}

fn log_reload(result: &Result<ReloadReport, String>, source: &str) {
    match result {
        Ok(report) => {
            info!(
                source,
                added = report.map.added.len(),
                changed = report.map.changed.len(),
                removed = report.map.removed.len(),
                tables = report.map.tables,
                tenants = report.map.tenants,
                queues_started = report.queues_started.len(),
                queues_stopped = report.queues_stopped.len(),
                took_ms = report.took_ms,
                "configuration reloaded"
            );
            if !report.restart_required.is_empty() {
                warn!(settings = ?report.restart_required, "changed settings that apply only after a restart");
            }
        }
        Err(reason) => {
            error!(source, %reason, "configuration reload refused: the running configuration stays")
        }
    }
}

/// Stops the control loop and its pollers; returns once they stopped (`true`) or `grace` passed.
pub async fn stop(shutdown: Shutdown, grace: Duration) -> bool {
    shutdown.token.cancel();
    tokio::time::timeout(grace, shutdown.tracker.wait())
        .await
        .is_ok()
}

fn same_queue(a: &SqsConfig, b: &SqsConfig) -> bool {
    a.queue_url == b.queue_url
        && a.region == b.region
        && a.endpoint_url == b.endpoint_url
        && a.wait_time_seconds == b.wait_time_seconds
        && a.max_messages == b.max_messages
        && a.visibility_timeout_seconds == b.visibility_timeout_seconds
        && a.pollers == b.pollers
}

/// The settings a reload cannot apply to a running process.
pub fn restart_only_changes(old: &Config, new: &Config) -> Vec<String> {
    let mut changed = Vec::new();
    let service = (&old.service, &new.service);
    if service.0.state_dir != service.1.state_dir {
        changed.push("service.state_dir".to_string());
    }
    if service.0.http_listen != service.1.http_listen {
        changed.push("service.http_listen".to_string());
    }
    if service.0.dedup_retention_days != service.1.dedup_retention_days {
        changed.push("service.dedup_retention_days".to_string());
    }
    if service.0.worker_threads != service.1.worker_threads {
        changed.push("service.worker_threads".to_string());
    }
    let spark = (&old.spark, &new.spark);
    for (key, differs) in [
        ("spark.runner", spark.0.runner != spark.1.runner),
        ("spark.image", spark.0.image != spark.1.image),
        ("spark.spark_sql", spark.0.spark_sql != spark.1.spark_sql),
        ("spark.network", spark.0.network != spark.1.network),
        ("spark.binds", spark.0.binds != spark.1.binds),
        (
            "spark.connect_url",
            spark.0.connect_url != spark.1.connect_url,
        ),
        (
            "spark.connect_token_env",
            spark.0.connect_token_env != spark.1.connect_token_env,
        ),
        (
            "spark.connect_tls",
            spark.0.connect_tls != spark.1.connect_tls,
        ),
        (
            "spark.connect_timeout_seconds",
            spark.0.connect_timeout_seconds != spark.1.connect_timeout_seconds,
        ),
    ] {
        if differs {
            changed.push(key.to_string());
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::clock::FakeClock;
    use crate::engine::routed::engine_from_config;
    use crate::intake::queue::MemoryQueue;
    use crate::runs::settings::CompactionSettings;
    use crate::service::{start_pipeline, Compaction};
    use crate::store::MemoryStore;

    fn tables(names: &[&str]) -> String {
        let mut toml = "[sqs]\nqueue_url = \"http://localhost:1/q\"\n".to_string();
        for name in names {
            toml.push_str(&format!(
                "[[tables]]\ntable = \"n.{name}\"\nbucket = \"lake\"\nprefix = \"{name}/\"\n"
            ));
        }
        toml
    }

    #[actix::test]
    async fn a_running_service_keeps_its_tables_only_in_the_table_map() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("icepack.toml");
        std::fs::write(&path, tables(&["a", "b"])).unwrap();
        let config = Arc::new(Config::load(&path).unwrap());
        let clock: Arc<dyn Clock> = Arc::new(FakeClock::new(1_714_564_800_000));
        let metrics = Arc::new(Metrics::default());
        let compaction = Compaction {
            settings: CompactionSettings::from_config(config.clone()),
            engine: engine_from_config(&config).unwrap(),
            enabled: false,
        };
        let pipeline = start_pipeline(
            config.table_specs(),
            Arc::new(MemoryStore::new()),
            clock.clone(),
            compaction,
            metrics.clone(),
            None,
        )
        .unwrap();
        let queue: Arc<dyn Queue> = Arc::new(MemoryQueue::new());
        let connector: Connector = Arc::new(move |_: &SqsConfig| {
            let queue = queue.clone();
            Box::pin(async move { queue }) as LocalBoxFuture<'static, Arc<dyn Queue>>
        });
        let mut control = Control::start(
            path.clone(),
            config.clone(),
            pipeline.clone(),
            None,
            connector,
            metrics,
            clock,
        )
        .await;
        // Nothing started from the configuration holds on to its parse (at 100,000 tables the
        // list is about 90 MB): the pool, the engines and the control loop keep it without.
        assert_eq!(Arc::strong_count(&config), 1, "a copy of the parse is kept");
        assert!(control.config.tables.is_empty());
        assert_eq!(pipeline.map().num_active(), 2);

        // A reload keeps none either, and still knows which tables it removed.
        std::fs::write(&path, tables(&["b", "c", "d"])).unwrap();
        let report = control.reload().await.unwrap();
        assert_eq!(report.map.added, ["n.c", "n.d"]);
        assert_eq!(report.map.removed, ["n.a"]);
        assert!(control.config.tables.is_empty());
        let map = pipeline.map();
        let active: Vec<&str> = map.active().map(|(_, spec)| spec.table.as_str()).collect();
        assert_eq!(active, ["n.b", "n.c", "n.d"]);
        let urls: Vec<String> = control.pollers.keys().cloned().collect();
        let stopping: Vec<_> = urls
            .iter()
            .filter_map(|url| control.stop_queue(url))
            .collect();
        futures::future::join_all(stopping).await;
    }
}
