//! Process metrics through `prometheus-client`: typed label sets and families for what the actors
//! count, a histogram of run durations, and at scrape time a collector of what is read rather
//! than counted (queues, engine, store, per-table gauges) plus the standard `process_*` metrics.
//! The exposition is OpenMetrics text, which Prometheus scrapes as it is.

mod process;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::queue::QueueSnapshot;
use crate::run::FailureClass;
use crate::state::Maintenance;

pub use process::ProcessSample;

/// The `Content-Type` of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The kind label of a run that rewrites data files (maintenance runs carry their task's name).
pub const REWRITE_KIND: &str = "rewrite_data_files";

/// A table's series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TableLabels {
    pub table: String,
    pub tenant: String,
}

/// A run's series: its table and what it did (`rewrite_data_files` or a maintenance task).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RunLabels {
    pub table: String,
    pub tenant: String,
    pub kind: &'static str,
}

/// A failed run's series: its table, what it did and why it failed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailedRunLabels {
    pub table: String,
    pub tenant: String,
    pub kind: &'static str,
    pub class: &'static str,
}

/// A step that failed after a run's rewrite committed: its table and why it failed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MaintenanceFailureLabels {
    pub table: String,
    pub tenant: String,
    pub class: &'static str,
}

/// A run duration's series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

/// Why records were not counted.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

/// A notification sink's series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabels {
    pub sink: String,
}

impl SinkLabels {
    pub fn new(sink: &str) -> Self {
        SinkLabels {
            sink: sink.to_string(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueErrorLabels {
    operation: &'static str,
    queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EngineLabels {
    engine: String,
}

/// A family described on every scrape, with or without series: `prometheus-client` leaves an
/// empty family out, and a family that appears only after its first event makes a fresh
/// process's exposition say less than it exports (the dashboard check scrapes one).
#[derive(Debug)]
struct Described<M>(M);

impl<M: EncodeMetric> EncodeMetric for Described<M> {
    fn encode(
        &self,
        encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }
}

/// The run-duration buckets, in seconds: a warm engine's seconds up to a cold hour.
const RUN_DURATION_BUCKETS: [f64; 9] = [5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0];

fn run_duration_histogram() -> Histogram {
    Histogram::new(RUN_DURATION_BUCKETS)
}

/// Every kind label a run can carry (a removed table's series are dropped for each).
fn run_kinds() -> impl Iterator<Item = &'static str> {
    std::iter::once(REWRITE_KIND).chain(Maintenance::ALL.iter().map(|task| task.as_str()))
}

/// Every metric icepack exposes, shared by the actors that move them.
#[derive(Debug)]
pub struct Metrics {
    /// The families below, registered once; [`Metrics::render`] adds what is read at scrape time.
    registry: Registry,
    /// Every polled queue's counters and reachability, by queue ([`crate::queue::QueueRegistry`]).
    pub queues: crate::queue::QueueRegistry,
    pub records_counted: Family<TableLabels, Counter>,
    pub records_ignored: Family<ReasonLabels, Counter>,
    pub commit_failures: Counter,
    /// Synced state commits of intake groups (each may carry several batches).
    pub state_commits: Counter,
    pub runs_started: Family<RunLabels, Counter>,
    pub runs_succeeded: Family<RunLabels, Counter>,
    pub runs_failed: Family<FailedRunLabels, Counter>,
    /// Steps after a committed rewrite that failed (snapshot expiry, a read, the deadline): the
    /// run counts as succeeded.
    pub maintenance_failures: Family<MaintenanceFailureLabels, Counter>,
    pub run_duration: Family<OutcomeLabels, Histogram, fn() -> Histogram>,
    pub notifications_sent: Family<SinkLabels, Counter>,
    pub notification_failures: Family<SinkLabels, Counter>,
    pub notifications_dropped: Family<SinkLabels, Counter>,
    /// Unix millis of the last failed state commit (0: none).
    pub last_commit_failure_millis: AtomicU64,
    pub last_commit_success_millis: AtomicU64,
    /// What the engine probe found last ([`crate::engine`]).
    pub engine: Arc<crate::engine::EngineHealthCell>,
    /// Whether the state store takes writes; pollers wait on it ([`crate::store::StoreGate`]).
    pub store: crate::store::StoreGate,
    /// Times the store was made writable again after failed commits.
    pub store_recoveries: Counter,
    /// Tables whose accumulator is down (stopped, not restarted yet), with since when.
    accumulators_down: Mutex<BTreeMap<String, i64>>,
    /// Accumulators restarted by the supervisor.
    pub accumulator_restarts: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut metrics = Metrics {
            registry: Registry::default(),
            queues: crate::queue::QueueRegistry::default(),
            records_counted: Family::default(),
            records_ignored: Family::default(),
            commit_failures: Counter::default(),
            state_commits: Counter::default(),
            runs_started: Family::default(),
            runs_succeeded: Family::default(),
            runs_failed: Family::default(),
            maintenance_failures: Family::default(),
            run_duration: Family::new_with_constructor(run_duration_histogram),
            notifications_sent: Family::default(),
            notification_failures: Family::default(),
            notifications_dropped: Family::default(),
            last_commit_failure_millis: AtomicU64::new(0),
            last_commit_success_millis: AtomicU64::new(0),
            engine: Arc::default(),
            store: crate::store::StoreGate::default(),
            store_recoveries: Counter::default(),
            accumulators_down: Mutex::default(),
            accumulator_restarts: Counter::default(),
        };
        metrics.register();
        metrics
    }
}

/// Per-table values read at scrape time.
#[derive(Debug, Clone)]
pub struct TableGauges {
    pub table: String,
    pub tenant: String,
    pub pending_files: u64,
    pub pending_bytes: u64,
    pub due: bool,
    pub run_in_flight: bool,
    pub consecutive_failures: u32,
}

pub type SharedMetrics = Arc<Metrics>;

/// A counter's value for a label set (0 when the series does not exist).
pub fn count<S>(family: &Family<S, Counter>, labels: &S) -> u64
where
    S: Clone + std::hash::Hash + Eq,
{
    family.get(labels).map_or(0, |counter| counter.get())
}

impl Metrics {
    /// Registers the counted families (each registry entry shares its atomics with the field).
    fn register(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "icepack_records_counted",
            "Small files counted, by table.",
            Described(self.records_counted.clone()),
        );
        registry.register(
            "icepack_records_ignored",
            "Records not counted, by reason.",
            Described(self.records_ignored.clone()),
        );
        registry.register(
            "icepack_state_commits",
            "Synced state commits of intake (one per group of batches).",
            self.state_commits.clone(),
        );
        registry.register(
            "icepack_state_commit_failures",
            "Failed synced state commits.",
            self.commit_failures.clone(),
        );
        registry.register(
            "icepack_accumulator_restarts",
            "Table accumulators restarted from the stored state after they stopped (a bug).",
            self.accumulator_restarts.clone(),
        );
        registry.register(
            "icepack_state_recoveries",
            "Times the state store was made writable again after failed commits.",
            self.store_recoveries.clone(),
        );
        registry.register(
            "icepack_runs_started",
            "Compaction and maintenance runs started, by table and kind.",
            Described(self.runs_started.clone()),
        );
        registry.register(
            "icepack_runs_succeeded",
            "Compaction runs that succeeded, by table.",
            Described(self.runs_succeeded.clone()),
        );
        registry.register(
            "icepack_runs_failed",
            "Compaction runs that failed, by table and failure class.",
            Described(self.runs_failed.clone()),
        );
        registry.register(
            "icepack_maintenance_failures",
            "Steps after a committed rewrite that failed (snapshot expiry, a metadata read, the deadline), by table and failure class; the run itself succeeded.",
            Described(self.maintenance_failures.clone()),
        );
        registry.register_with_unit(
            "icepack_run_duration",
            "Duration of compaction runs, by outcome.",
            Unit::Seconds,
            Described(self.run_duration.clone()),
        );
        registry.register(
            "icepack_notifications_sent",
            "Notifications delivered, by sink.",
            Described(self.notifications_sent.clone()),
        );
        registry.register(
            "icepack_notification_failures",
            "Notifications given up on, by sink.",
            Described(self.notification_failures.clone()),
        );
        registry.register(
            "icepack_notifications_dropped",
            "Notifications dropped because the sink's queue was full, by sink.",
            Described(self.notifications_dropped.clone()),
        );
        registry.register_collector(Box::new(process::ProcessCollector));
    }

    /// A reload removed the table (or moved it to another tenant): its counted series go, so a
    /// dashboard shows no table that is not configured and label sets do not pile up.
    pub fn forget_table(&self, table: &str, tenant: &str) {
        let (table, tenant) = (table.to_string(), tenant.to_string());
        self.records_counted.remove(&TableLabels {
            table: table.clone(),
            tenant: tenant.clone(),
        });
        for class in FailureClass::ALL {
            self.maintenance_failures.remove(&MaintenanceFailureLabels {
                table: table.clone(),
                tenant: tenant.clone(),
                class: class.as_str(),
            });
        }
        for kind in run_kinds() {
            let run = RunLabels {
                table: table.clone(),
                tenant: tenant.clone(),
                kind,
            };
            self.runs_started.remove(&run);
            self.runs_succeeded.remove(&run);
            for class in FailureClass::ALL {
                self.runs_failed.remove(&FailedRunLabels {
                    table: table.clone(),
                    tenant: tenant.clone(),
                    kind,
                    class: class.as_str(),
                });
            }
        }
    }

    /// A table's accumulator is down; returns whether it was up until now.
    pub fn accumulator_down(&self, table: &str, now: i64) -> bool {
        let mut down = self
            .accumulators_down
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if down.contains_key(table) {
            return false;
        }
        down.insert(table.to_string(), now);
        true
    }

    pub fn accumulator_up(&self, table: &str) {
        self.accumulators_down
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(table);
    }

    /// Tables whose accumulator is down, with since when.
    pub fn accumulators_down(&self) -> Vec<(String, i64)> {
        self.accumulators_down
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(table, since)| (table.clone(), *since))
            .collect()
    }

    /// The whole exposition ([`CONTENT_TYPE`]): the counted families, then what this scrape reads
    /// (queues, engine, store, the tables' gauges given), then `# EOF`.
    pub fn render(&self, tables: &[TableGauges]) -> String {
        let engine = self.engine.get();
        let scrape = Scrape {
            queues: self.queues.snapshot(),
            engine: engine
                .answering
                .map(|answering| (engine.engine, answering, engine.probe_millis.unwrap_or(0))),
            writable: self.store.is_writable(),
            accumulators_down: self.accumulators_down().len() as u64,
            tables: tables.to_vec(),
        };
        let mut per_scrape = Registry::default();
        per_scrape.register_collector(Box::new(scrape));
        let mut out = String::new();
        // Writing into a String cannot fail; the encoders return fmt::Result for other writers.
        let _ = encode_registry(&mut out, &self.registry)
            .and_then(|()| encode_registry(&mut out, &per_scrape))
            .and_then(|()| encode_eof(&mut out));
        out
    }
}

/// What one scrape reads rather than counts, encoded after the registered families.
#[derive(Debug)]
struct Scrape {
    queues: Vec<QueueSnapshot>,
    /// The engine's description, whether it answered its last probe and how long that took.
    engine: Option<(String, bool, u64)>,
    writable: bool,
    accumulators_down: u64,
    tables: Vec<TableGauges>,
}

/// Encodes one family of series read now: a descriptor, then a value per label set.
fn family<S, M>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    series: impl IntoIterator<Item = (S, M)>,
) -> Result<(), std::fmt::Error>
where
    S: EncodeLabelSet,
    M: EncodeMetric,
{
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in series {
        value.encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A family without labels.
fn single(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: impl EncodeMetric,
) -> Result<(), std::fmt::Error> {
    value.encode(encoder.encode_descriptor(name, help, None, value.metric_type())?)
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let encoder = &mut encoder;
        single(
            encoder,
            "icepack_up",
            "1 while the process runs.",
            ConstGauge::new(1i64),
        )?;
        if let Some((engine, answering, probe_millis)) = &self.engine {
            let labels = || EngineLabels {
                engine: engine.clone(),
            };
            family(
                encoder,
                "icepack_engine_up",
                "1 when the Spark engine answered its last probe.",
                MetricType::Gauge,
                [(labels(), ConstGauge::new(i64::from(*answering)))],
            )?;
            family(
                encoder,
                "icepack_engine_probe_seconds",
                "How long the last engine probe took.",
                MetricType::Gauge,
                [(labels(), ConstGauge::new(*probe_millis as f64 / 1000.0))],
            )?;
        }
        self.encode_queues(encoder)?;
        single(
            encoder,
            "icepack_state_writable",
            "1 while the state store takes writes; 0 from a failed commit until a probe succeeds (receiving is paused).",
            ConstGauge::new(i64::from(self.writable)),
        )?;
        single(
            encoder,
            "icepack_accumulators_down",
            "Table accumulators stopped and not restarted yet.",
            ConstGauge::new(self.accumulators_down),
        )?;
        let tables = |value: fn(&TableGauges) -> u64| {
            self.tables.iter().map(move |table| {
                (
                    TableLabels {
                        table: table.table.clone(),
                        tenant: table.tenant.clone(),
                    },
                    ConstGauge::new(value(table)),
                )
            })
        };
        family(
            encoder,
            "icepack_table_pending_files",
            "Pending small files, by table.",
            MetricType::Gauge,
            tables(|t| t.pending_files),
        )?;
        family(
            encoder,
            "icepack_table_pending_bytes",
            "Bytes of pending small files, by table.",
            MetricType::Gauge,
            tables(|t| t.pending_bytes),
        )?;
        family(
            encoder,
            "icepack_table_due",
            "1 when the table is due for compaction.",
            MetricType::Gauge,
            tables(|t| u64::from(t.due)),
        )?;
        family(
            encoder,
            "icepack_table_run_in_flight",
            "1 while a compaction of the table runs.",
            MetricType::Gauge,
            tables(|t| u64::from(t.run_in_flight)),
        )?;
        family(
            encoder,
            "icepack_table_consecutive_failures",
            "Failed runs in a row, by table.",
            MetricType::Gauge,
            tables(|t| u64::from(t.consecutive_failures)),
        )?;
        single(
            encoder,
            "icepack_tables_due",
            "Tables due for compaction.",
            ConstGauge::new(self.tables.iter().filter(|t| t.due).count() as u64),
        )
    }
}

impl Scrape {
    /// The per-queue series, labelled by queue; a queue a reload removed has none.
    fn encode_queues(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counters = |value: fn(&QueueSnapshot) -> u64| {
            self.queues.iter().map(move |queue| {
                (
                    QueueLabels {
                        queue: queue.queue.clone(),
                    },
                    ConstCounter::new(value(queue)),
                )
            })
        };
        family(
            encoder,
            "icepack_sqs_messages_received",
            "SQS messages received, by queue.",
            MetricType::Counter,
            counters(|queue| queue.messages_received),
        )?;
        family(
            encoder,
            "icepack_sqs_messages_deleted",
            "SQS messages deleted after their counts were durable, by queue.",
            MetricType::Counter,
            counters(|queue| queue.messages_deleted),
        )?;
        family(
            encoder,
            "icepack_sqs_messages_invalid",
            "SQS messages left in the queue because they (or a record) could not be parsed, by queue.",
            MetricType::Counter,
            counters(|queue| queue.messages_invalid),
        )?;
        family(
            encoder,
            "icepack_sqs_delete_failures",
            "Messages the queue refused to delete, by queue.",
            MetricType::Counter,
            counters(|queue| queue.delete_failures),
        )?;
        family(
            encoder,
            "icepack_sqs_last_receive_timestamp_seconds",
            "Unix time of the queue's last successful receive (0: not reached since start-up), by queue.",
            MetricType::Gauge,
            self.queues.iter().map(|queue| {
                (
                    QueueLabels {
                        queue: queue.queue.clone(),
                    },
                    ConstGauge::new(queue.last_receive_millis.unwrap_or(0) as f64 / 1000.0),
                )
            }),
        )?;
        family(
            encoder,
            "icepack_sqs_errors",
            "SQS calls that failed, by operation and queue.",
            MetricType::Counter,
            self.queues.iter().flat_map(|queue| {
                queue.errors.iter().map(|(operation, count)| {
                    (
                        QueueErrorLabels {
                            operation,
                            queue: queue.queue.clone(),
                        },
                        ConstCounter::new(*count),
                    )
                })
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(name: &str) -> TableLabels {
        TableLabels {
            table: name.to_string(),
            tenant: "default".to_string(),
        }
    }

    #[test]
    fn exposition_has_types_labels_and_histogram_buckets() {
        let metrics = Metrics::default();
        let landing = metrics
            .queues
            .register("http://sqs/1/landing", "landing", None, 2, 0);
        landing.received(3, 1_714_564_800_250);
        landing.failed(
            &crate::queue::QueueError {
                operation: "DeleteMessageBatch",
                message: "throttled".to_string(),
                detail: String::new(),
            },
            1_714_564_801_000,
        );
        metrics
            .queues
            .register("http://sqs/1/removed", "removed", None, 2, 0);
        metrics.queues.retain(|url| !url.ends_with("removed"));
        metrics
            .records_ignored
            .get_or_create(&ReasonLabels {
                reason: "large_file",
            })
            .inc();
        metrics
            .runs_failed
            .get_or_create(&FailedRunLabels {
                table: "a.b".to_string(),
                tenant: "default".to_string(),
                kind: REWRITE_KIND,
                class: "timeout",
            })
            .inc();
        metrics
            .run_duration
            .get_or_create(&OutcomeLabels { outcome: "success" })
            .observe(12.0);
        metrics.state_commits.inc_by(2);
        let text = metrics.render(&[TableGauges {
            table: "a.\"b".to_string(),
            tenant: "default".to_string(),
            pending_files: 7,
            pending_bytes: 70,
            due: true,
            run_in_flight: false,
            consecutive_failures: 0,
        }]);
        let has = |line: &str| assert!(text.contains(line), "no `{line}` in:\n{text}");
        has("# TYPE icepack_sqs_messages_received counter\nicepack_sqs_messages_received_total{queue=\"landing\"} 3\n");
        has("icepack_sqs_messages_deleted_total{queue=\"landing\"} 0\n");
        has("icepack_sqs_errors_total{operation=\"DeleteMessageBatch\",queue=\"landing\"} 1\n");
        has("icepack_sqs_last_receive_timestamp_seconds{queue=\"landing\"} 1714564800.25\n");
        assert!(!text.contains("removed"), "a removed queue has no series");
        has("icepack_records_ignored_total{reason=\"large_file\"} 1\n");
        has("icepack_runs_failed_total{table=\"a.b\",tenant=\"default\",kind=\"rewrite_data_files\",class=\"timeout\"} 1\n");
        has("icepack_state_commits_total 2\n");
        has("# UNIT icepack_run_duration_seconds seconds\n");
        has("icepack_run_duration_seconds_bucket{le=\"5.0\",outcome=\"success\"} 0\n");
        has("icepack_run_duration_seconds_bucket{le=\"15.0\",outcome=\"success\"} 1\n");
        has("icepack_run_duration_seconds_bucket{le=\"+Inf\",outcome=\"success\"} 1\n");
        has("icepack_run_duration_seconds_count{outcome=\"success\"} 1\n");
        has("icepack_table_pending_files{table=\"a.\\\"b\",tenant=\"default\"} 7\n");
        has("icepack_tables_due 1\n");
        has("icepack_up 1\n");
        has("icepack_state_writable 1\n");
        assert!(text.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
        assert_eq!(text.matches("# EOF").count(), 1);
        if std::path::Path::new("/proc/self/stat").exists() {
            has("# TYPE process_cpu_seconds counter\n");
            has("# TYPE process_resident_memory_bytes gauge\n");
        }
        // Every family is described once.
        let mut described: Vec<&str> = text
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .map(|line| line.split(' ').next().unwrap())
            .collect();
        let families = described.len();
        described.sort_unstable();
        described.dedup();
        assert_eq!(described.len(), families, "a family described twice");
    }

    #[test]
    fn a_removed_table_loses_its_counted_series_and_others_keep_theirs() {
        let metrics = Metrics::default();
        for name in ["n.gone", "n.kept"] {
            metrics
                .records_counted
                .get_or_create(&table(name))
                .inc_by(3);
            for kind in [REWRITE_KIND, "rewrite_manifests"] {
                let run = RunLabels {
                    table: name.to_string(),
                    tenant: "default".to_string(),
                    kind,
                };
                metrics.runs_started.get_or_create(&run).inc();
                metrics.runs_succeeded.get_or_create(&run).inc();
            }
            metrics
                .runs_failed
                .get_or_create(&FailedRunLabels {
                    table: name.to_string(),
                    tenant: "default".to_string(),
                    kind: "remove_orphan_files",
                    class: "commit_conflict",
                })
                .inc();
        }
        metrics.forget_table("n.gone", "default");
        let text = metrics.render(&[]);
        assert!(!text.contains("n.gone"), "{text}");
        assert_eq!(count(&metrics.records_counted, &table("n.kept")), 3);
        assert_eq!(text.matches("table=\"n.kept\"").count(), 6, "{text}");
        // The same table under another tenant is another series: forgetting it leaves this one.
        metrics.forget_table("n.kept", "other");
        assert_eq!(count(&metrics.records_counted, &table("n.kept")), 3);
    }
}
